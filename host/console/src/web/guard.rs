//! What every request to the console passes first, and what every answer
//! carries.
//!
//! - **Host**: must name the console's own address (one of
//!   [`Hosts`]): a page on another name that resolves to loopback (DNS
//!   rebinding) gets nothing.
//! - **Origin**: a request that changes anything (any method but `GET` and
//!   `HEAD`) must carry an `Origin` that is the console's own; a `GET` with
//!   a foreign `Origin` is refused too.
//! - **Headers**: a strict Content-Security-Policy (scripts, styles and
//!   connections from the console only; no inline script, no frames, no
//!   form posts elsewhere), `nosniff`, no referrer to other sites, no caching.

use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use std::sync::Arc;

use gatehouse_base::escape::Escaped;

/// The Content-Security-Policy of every answer.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
     img-src 'self'; connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'";

/// The `Host` values the console answers to, and the origins of its pages.
#[derive(Debug, Clone)]
pub struct Hosts {
    hosts: Vec<String>,
    /// The origin the console is reached at through a proxy, if any.
    public_origin: Option<String>,
}

impl Hosts {
    /// The hosts of a console bound to `bound` (an address with its real
    /// port): the address itself and, on loopback, `localhost` with the
    /// port.
    pub fn for_address(bound: std::net::SocketAddr) -> Hosts {
        let port = bound.port();
        let mut hosts = vec![bound.to_string()];
        if bound.ip().is_loopback() {
            hosts.push(format!("localhost:{port}"));
            hosts.push(format!("127.0.0.1:{port}"));
            hosts.push(format!("[::1]:{port}"));
        }
        hosts.sort();
        hosts.dedup();
        Hosts {
            hosts,
            public_origin: None,
        }
    }

    /// Also answers to `origin` (`https://console.example.com`, where a
    /// proxy in front serves the console): its host as `Host`, and exactly
    /// it as `Origin`.
    pub fn with_public_origin(mut self, origin: &url::Url) -> Hosts {
        let serialized = origin.origin().ascii_serialization();
        if let Some((_, host)) = serialized.split_once("://") {
            self.hosts.push(host.to_owned());
        }
        self.public_origin = Some(serialized);
        self
    }

    /// Whether `host` is one of them (ASCII case-insensitive).
    pub fn allows(&self, host: &str) -> bool {
        self.hosts
            .iter()
            .any(|allowed| allowed.eq_ignore_ascii_case(host))
    }

    /// Whether `origin` is the public origin, or `http://` one of the
    /// console's own addresses (not the public host over plain HTTP).
    pub fn allows_origin(&self, origin: &str) -> bool {
        if let Some(public) = &self.public_origin {
            if public.eq_ignore_ascii_case(origin) {
                return true;
            }
            if public.split_once("://").is_some_and(|(_, host)| {
                origin
                    .strip_prefix("http://")
                    .is_some_and(|o| o.eq_ignore_ascii_case(host))
            }) {
                return false;
            }
        }
        origin
            .strip_prefix("http://")
            .is_some_and(|host| self.allows(host))
    }
}

/// Checks Host and Origin, then adds the security headers to the answer.
pub async fn guard(State(hosts): State<Arc<Hosts>>, request: Request, next: Next) -> Response {
    if let Err(refusal) = check(&hosts, request.method(), request.headers()) {
        // An attack or a misconfigured proxy: either way the operator
        // should hear of it.
        let header = |name| {
            request
                .headers()
                .get(name)
                .map(|value| String::from_utf8_lossy(value.as_bytes()).into_owned())
                .unwrap_or_default()
        };
        tracing::warn!(
            method = %request.method(),
            path = %Escaped(request.uri().path()),
            host = %Escaped(&header(header::HOST)),
            origin = %Escaped(&header(header::ORIGIN)),
            "console: {}",
            refusal.1.trim_end()
        );
        return secured(refusal.into_response());
    }
    secured(next.run(request).await)
}

fn check(
    hosts: &Hosts,
    method: &Method,
    headers: &HeaderMap,
) -> Result<(), (StatusCode, &'static str)> {
    let host = headers
        .get(header::HOST)
        .and_then(|value| value.to_str().ok())
        .unwrap_or_default();
    if !hosts.allows(host) {
        return Err((
            StatusCode::MISDIRECTED_REQUEST,
            "refused: the Host header does not name this console\n",
        ));
    }
    let origin = headers
        .get(header::ORIGIN)
        .map(|value| value.to_str().unwrap_or("?"));
    let changes = !matches!(*method, Method::GET | Method::HEAD);
    match origin {
        Some(origin) if !hosts.allows_origin(origin) => Err((
            StatusCode::FORBIDDEN,
            "refused: requests from another Origin are not allowed\n",
        )),
        None if changes => Err((
            StatusCode::FORBIDDEN,
            "refused: a request that changes anything must carry this console's Origin\n",
        )),
        _ => Ok(()),
    }
}

fn secured(mut response: Response) -> Response {
    let headers = response.headers_mut();
    let set = |headers: &mut HeaderMap, name, value: &'static str| {
        headers.insert(name, HeaderValue::from_static(value));
    };
    set(
        headers,
        header::CONTENT_SECURITY_POLICY,
        CONTENT_SECURITY_POLICY,
    );
    set(headers, header::X_CONTENT_TYPE_OPTIONS, "nosniff");
    // `same-origin`, not `no-referrer`: under `no-referrer` a browser sends
    // `Origin: null` with a form post, and the Origin check needs the real one.
    set(headers, header::REFERRER_POLICY, "same-origin");
    set(headers, header::X_FRAME_OPTIONS, "DENY");
    set(headers, header::CACHE_CONTROL, "no-store");
    headers.insert(
        "cross-origin-opener-policy",
        HeaderValue::from_static("same-origin"),
    );
    headers.insert(
        "cross-origin-resource-policy",
        HeaderValue::from_static("same-origin"),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(*name, HeaderValue::from_static(value));
        }
        map
    }

    #[test]
    fn host_and_origin_must_be_the_consoles() {
        let hosts = Hosts::for_address("127.0.0.1:8790".parse().unwrap());
        let own = [
            ("host", "127.0.0.1:8790"),
            ("origin", "http://127.0.0.1:8790"),
        ];
        assert!(check(&hosts, &Method::POST, &headers(&own)).is_ok());
        assert!(
            check(
                &hosts,
                &Method::POST,
                &headers(&[
                    ("host", "localhost:8790"),
                    ("origin", "http://localhost:8790")
                ])
            )
            .is_ok()
        );
        // DNS rebinding: a name of the attacker's that resolves to loopback.
        assert!(
            check(
                &hosts,
                &Method::GET,
                &headers(&[("host", "evil.test:8790")])
            )
            .is_err()
        );
        assert!(check(&hosts, &Method::GET, &headers(&[])).is_err());
        // A foreign page posting, or posting with no Origin at all.
        assert!(
            check(
                &hosts,
                &Method::POST,
                &headers(&[("host", "127.0.0.1:8790"), ("origin", "http://evil.test")])
            )
            .is_err()
        );
        assert!(
            check(
                &hosts,
                &Method::POST,
                &headers(&[("host", "127.0.0.1:8790")])
            )
            .is_err()
        );
        assert!(
            check(
                &hosts,
                &Method::POST,
                &headers(&[("host", "127.0.0.1:8790"), ("origin", "null")])
            )
            .is_err()
        );
        // Another port is another origin.
        assert!(
            check(
                &hosts,
                &Method::POST,
                &headers(&[
                    ("host", "127.0.0.1:8790"),
                    ("origin", "http://127.0.0.1:9999")
                ])
            )
            .is_err()
        );
        assert!(
            check(
                &hosts,
                &Method::GET,
                &headers(&[("host", "127.0.0.1:8790")])
            )
            .is_ok()
        );
    }

    #[test]
    fn a_public_origin_is_the_one_a_proxy_serves() {
        let public = url::Url::parse("https://console.example.com").unwrap();
        let hosts =
            Hosts::for_address("127.0.0.1:8790".parse().unwrap()).with_public_origin(&public);
        let proxied = [
            ("host", "console.example.com"),
            ("origin", "https://console.example.com"),
        ];
        assert!(check(&hosts, &Method::POST, &headers(&proxied)).is_ok());
        // Plain HTTP on the public name is another origin.
        let downgraded = [
            ("host", "console.example.com"),
            ("origin", "http://console.example.com"),
        ];
        assert!(check(&hosts, &Method::POST, &headers(&downgraded)).is_err());
        let local = [
            ("host", "127.0.0.1:8790"),
            ("origin", "http://127.0.0.1:8790"),
        ];
        assert!(check(&hosts, &Method::POST, &headers(&local)).is_ok());
    }
}
