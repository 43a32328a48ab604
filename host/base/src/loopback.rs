//! Whether an address names this machine only: the one rule for every
//! listener gatehouse binds (the HTTP gateway, and what comes after it) and
//! for the model endpoints it never sends through a proxy.

use std::net::{IpAddr, SocketAddr};

/// Whether a bind address (`host:port`, `[v6]:port`, or a bare host) is
/// loopback: an IP in 127.0.0.0/8, `::1` (also as an IPv4-mapped address),
/// or the name `localhost`. Any other name may resolve anywhere, so it is
/// not loopback.
pub fn is_loopback(address: &str) -> bool {
    if let Ok(socket) = address.parse::<SocketAddr>() {
        return socket.ip().to_canonical().is_loopback();
    }
    let host = match address.rsplit_once(':') {
        Some((host, port)) if !host.contains(':') || host.ends_with(']') => {
            if port.parse::<u16>().is_ok() {
                host
            } else {
                return false;
            }
        }
        _ => address,
    };
    let host = host
        .strip_prefix('[')
        .and_then(|host| host.strip_suffix(']'))
        .unwrap_or(host);
    if let Ok(ip) = host.parse::<IpAddr>() {
        return ip.to_canonical().is_loopback();
    }
    host.eq_ignore_ascii_case("localhost")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_addresses_are_classified() {
        for loopback in [
            "127.0.0.1:8080",
            "127.1.2.3:0",
            "[::1]:8080",
            "[::ffff:127.0.0.1]:80",
            "localhost:8080",
            "LOCALHOST:1",
            "localhost",
            "127.0.0.1",
            "::1",
        ] {
            assert!(is_loopback(loopback), "{loopback}");
        }
        for other in [
            "0.0.0.0:8080",
            "[::]:8080",
            "192.168.1.5:8080",
            "10.0.0.1:80",
            "example.com:80",
            "localhost.example.com:80",
            "localhost:port",
            "128.0.0.1:80",
            "",
        ] {
            assert!(!is_loopback(other), "{other}");
        }
    }
}
