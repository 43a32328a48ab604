//! Which server a resource read goes to: the resource index of one snapshot.
//!
//! A server *claims* a URI when it lists that URI (`resources/list`) or
//! lists a template that matches it (`resources/templates/list`, see
//! [`super::uri_template`]). A read goes to the one server that claims the
//! URI and to no other. A URI nobody claims is not found; a URI more than
//! one server claims is ambiguous. Neither is sent anywhere: the client gets
//! an error (for the ambiguous case, one naming the qualified URIs to read
//! instead).
//!
//! **Qualified URIs.** `gatehouse://resource/SERVER/URI` means "`URI`, read
//! from `SERVER`": `URI` follows the server name verbatim (it is not
//! encoded), and server names are `[A-Za-z0-9_-]+`, so the first `/` after
//! the name ends it. A qualified read goes to `SERVER` with `URI` if that
//! server claims `URI`, whatever the others claim. The `gatehouse:` scheme
//! belongs to gatehouse: a server's resource or template in it (in any
//! letter case) is dropped with a warning, and a URI in it is never matched
//! against a server's template, so no server can forge or capture a
//! qualified URI.
//!
//! **The listing.** Servers in name order, each in its own order. A
//! resource whose URI exactly one server claims is listed as the server
//! gave it; one that more servers claim is listed under its qualified URI,
//! once per server that lists it. A template listed (as the same string)
//! by one server is listed as given; one listed by several is listed once
//! per server as `gatehouse://resource/SERVER/` followed by the template,
//! which expands to that server's qualified URIs. Templates that overlap
//! without being equal are listed as given; a URI both match is ambiguous
//! when read.

use std::collections::{BTreeMap, BTreeSet};

use rmcp::model::{ErrorData, Resource, ResourceTemplate};
use serde_json::json;

use super::uri_template::UriTemplate;
use gatehouse_base::escape::Escaped;
use gatehouse_mcp::server_config::is_valid_server_name;

/// What every qualified URI starts with.
pub const QUALIFIED_PREFIX: &str = "gatehouse://resource/";

/// The scheme gatehouse keeps for itself (compared without letter case).
const RESERVED_SCHEME: &str = "gatehouse:";

/// `uri` as read from `server`: `gatehouse://resource/SERVER/URI`.
pub fn qualify(server: &str, uri: &str) -> String {
    format!("{QUALIFIED_PREFIX}{server}/{uri}")
}

/// Whether `uri` is in the `gatehouse:` scheme.
fn is_reserved(uri: &str) -> bool {
    uri.as_bytes()
        .get(..RESERVED_SCHEME.len())
        .is_some_and(|scheme| scheme.eq_ignore_ascii_case(RESERVED_SCHEME.as_bytes()))
}

/// One server's resources and templates, as it listed them.
#[derive(Debug, Clone, Default)]
pub struct Listing {
    /// The server.
    pub server: String,
    /// Its `resources/list`.
    pub resources: Vec<Resource>,
    /// Its `resources/templates/list`.
    pub templates: Vec<ResourceTemplate>,
}

/// Where a read goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// The server that claims the URI.
    pub server: String,
    /// The URI to send it (the server's own).
    pub uri: String,
    /// The qualified URI the client asked for, if it asked for one.
    pub qualified: Option<String>,
}

/// Why a read goes nowhere.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RouteError {
    /// No server lists the URI or has a template that matches it.
    #[error("resource not found: no server lists `{uri}` or has a template that matches it")]
    NotFound {
        /// The URI asked for.
        uri: String,
    },
    /// A qualified URI whose server does not claim the URI in it.
    #[error(
        "resource not found: `{uri}`: server `{server}` does not list `{original}` or have a template that matches it"
    )]
    NotClaimed {
        /// The qualified URI asked for.
        uri: String,
        /// The server it names.
        server: String,
        /// The URI it names.
        original: String,
    },
    /// A `gatehouse:` URI that is not `gatehouse://resource/SERVER/URI`.
    #[error("resource not found: `{uri}` is not of the form {QUALIFIED_PREFIX}SERVER/URI")]
    Malformed {
        /// The URI asked for.
        uri: String,
    },
    /// More than one server claims the URI.
    #[error("`{uri}` is offered by more than one server; read one of: {}", .qualified.join(", "))]
    Ambiguous {
        /// The URI asked for.
        uri: String,
        /// Its qualified URI for each server that claims it, by server name.
        qualified: Vec<String>,
    },
}

impl From<RouteError> for ErrorData {
    /// Not found is MCP's -32002 with the URI in `data.uri`; ambiguous is
    /// invalid params (-32602) with the URI and `data.qualified`.
    fn from(error: RouteError) -> ErrorData {
        let message = error.to_string();
        match error {
            RouteError::NotFound { uri }
            | RouteError::NotClaimed { uri, .. }
            | RouteError::Malformed { uri } => {
                ErrorData::resource_not_found(message, Some(json!({ "uri": uri })))
            }
            RouteError::Ambiguous { uri, qualified } => ErrorData::invalid_params(
                message,
                Some(json!({ "uri": uri, "qualified": qualified })),
            ),
        }
    }
}

/// The resource index of one snapshot generation.
#[derive(Debug, Default)]
pub struct ResourceIndex {
    generation: u64,
    /// URI → the servers that list it.
    listed: BTreeMap<String, BTreeSet<String>>,
    /// Every usable template, with its server, servers in name order.
    templates: Vec<(String, UriTemplate)>,
    resources: Vec<Resource>,
    resource_templates: Vec<ResourceTemplate>,
}

impl ResourceIndex {
    /// The index of `listings`, taken from the snapshot `generation`.
    pub fn build(generation: u64, mut listings: Vec<Listing>) -> ResourceIndex {
        listings.sort_by(|a, b| a.server.cmp(&b.server));
        let mut index = ResourceIndex {
            generation,
            ..ResourceIndex::default()
        };
        let mut kept: Vec<(String, Vec<Resource>, Vec<ResourceTemplate>)> = Vec::new();
        let mut template_servers: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for listing in listings {
            let server = listing.server;
            let mut seen = BTreeSet::new();
            let mut resources = Vec::new();
            for resource in listing.resources {
                if is_reserved(&resource.uri) {
                    tracing::warn!(server = %server, uri = %Escaped(&resource.uri), "resource in the gatehouse: scheme dropped");
                } else if seen.insert(resource.uri.clone()) {
                    index
                        .listed
                        .entry(resource.uri.clone())
                        .or_default()
                        .insert(server.clone());
                    resources.push(resource);
                }
            }
            let mut seen = BTreeSet::new();
            let mut templates = Vec::new();
            for template in listing.templates {
                if is_reserved(&template.uri_template) {
                    tracing::warn!(server = %server, template = %Escaped(&template.uri_template), "resource template in the gatehouse: scheme dropped");
                    continue;
                }
                if !seen.insert(template.uri_template.clone()) {
                    continue;
                }
                match UriTemplate::parse(&template.uri_template) {
                    Ok(parsed) => {
                        template_servers
                            .entry(template.uri_template.clone())
                            .or_default()
                            .insert(server.clone());
                        index.templates.push((server.clone(), parsed));
                        templates.push(template);
                    }
                    Err(error) => {
                        tracing::warn!(server = %server, template = %Escaped(&template.uri_template), error = %Escaped(&error.to_string()), "resource template dropped");
                    }
                }
            }
            kept.push((server, resources, templates));
        }
        for (server, resources, templates) in kept {
            for mut resource in resources {
                let claimants = index.claimants(&resource.uri);
                if claimants.len() > 1 {
                    tracing::warn!(uri = %Escaped(&resource.uri), servers = ?claimants, "more than one server offers this resource URI; each is listed under its qualified URI");
                    resource.uri = qualify(&server, &resource.uri);
                }
                index.resources.push(resource);
            }
            for mut template in templates {
                let shared = template_servers
                    .get(&template.uri_template)
                    .is_some_and(|servers| servers.len() > 1);
                if shared {
                    tracing::warn!(template = %Escaped(&template.uri_template), "more than one server lists this resource template; each is listed qualified");
                    template.uri_template = qualify(&server, &template.uri_template);
                }
                index.resource_templates.push(template);
            }
        }
        index
    }

    /// The snapshot generation the index was built from.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// What `resources/list` shows.
    pub fn resources(&self) -> &[Resource] {
        &self.resources
    }

    /// What `resources/templates/list` shows.
    pub fn resource_templates(&self) -> &[ResourceTemplate] {
        &self.resource_templates
    }

    /// The servers that claim `uri`, in name order.
    pub fn claimants(&self, uri: &str) -> BTreeSet<&str> {
        if is_reserved(uri) {
            return BTreeSet::new();
        }
        let mut servers: BTreeSet<&str> = self
            .listed
            .get(uri)
            .into_iter()
            .flatten()
            .map(String::as_str)
            .collect();
        for (server, template) in &self.templates {
            if !servers.contains(server.as_str()) && template.matches(uri) {
                servers.insert(server);
            }
        }
        servers
    }

    /// Where a read of `uri` goes; see the module docs.
    pub fn route(&self, uri: &str) -> Result<Target, RouteError> {
        if is_reserved(uri) {
            let malformed = || RouteError::Malformed {
                uri: uri.to_owned(),
            };
            let (server, original) = uri
                .strip_prefix(QUALIFIED_PREFIX)
                .and_then(|rest| rest.split_once('/'))
                .filter(|(server, original)| is_valid_server_name(server) && !original.is_empty())
                .ok_or_else(malformed)?;
            if !self.claimants(original).contains(server) {
                return Err(RouteError::NotClaimed {
                    uri: uri.to_owned(),
                    server: server.to_owned(),
                    original: original.to_owned(),
                });
            }
            return Ok(Target {
                server: server.to_owned(),
                uri: original.to_owned(),
                qualified: Some(uri.to_owned()),
            });
        }
        let claimants = self.claimants(uri);
        let mut servers = claimants.iter();
        match (servers.next(), servers.next()) {
            (None, _) => Err(RouteError::NotFound {
                uri: uri.to_owned(),
            }),
            (Some(server), None) => Ok(Target {
                server: (*server).to_owned(),
                uri: uri.to_owned(),
                qualified: None,
            }),
            (Some(_), Some(_)) => Err(RouteError::Ambiguous {
                uri: uri.to_owned(),
                qualified: claimants
                    .iter()
                    .map(|server| qualify(server, uri))
                    .collect(),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listing(server: &str, uris: &[&str], templates: &[&str]) -> Listing {
        Listing {
            server: server.to_owned(),
            resources: uris.iter().map(|uri| Resource::new(*uri, "r")).collect(),
            templates: templates
                .iter()
                .map(|template| ResourceTemplate::new(*template, "t"))
                .collect(),
        }
    }

    fn uris(index: &ResourceIndex) -> Vec<&str> {
        index.resources().iter().map(|r| r.uri.as_str()).collect()
    }

    fn target(server: &str, uri: &str, qualified: Option<&str>) -> Result<Target, RouteError> {
        Ok(Target {
            server: server.to_owned(),
            uri: uri.to_owned(),
            qualified: qualified.map(str::to_owned),
        })
    }

    #[test]
    fn a_read_goes_only_to_the_server_that_lists_or_matches_the_uri() {
        let index = ResourceIndex::build(
            1,
            vec![
                listing("git", &["demo://git/readme"], &["demo://git/notes/{id}"]),
                listing("aaa", &["demo://aaa/readme"], &[]),
            ],
        );
        assert_eq!(
            index.route("demo://git/readme"),
            target("git", "demo://git/readme", None)
        );
        assert_eq!(
            index.route("demo://git/notes/7"),
            target("git", "demo://git/notes/7", None)
        );
        assert_eq!(
            index.route("demo://aaa/readme"),
            target("aaa", "demo://aaa/readme", None)
        );
        assert_eq!(
            index.route("demo://nobody/x"),
            Err(RouteError::NotFound {
                uri: "demo://nobody/x".to_owned()
            })
        );
        // Not made by the template: `/` is not part of a simple value.
        assert!(matches!(
            index.route("demo://git/notes/7/8"),
            Err(RouteError::NotFound { .. })
        ));
        assert_eq!(uris(&index), ["demo://aaa/readme", "demo://git/readme"]);
        assert_eq!(index.generation(), 1);
    }

    #[test]
    fn a_uri_two_servers_list_is_listed_qualified_and_refused_bare() {
        let index = ResourceIndex::build(
            2,
            vec![
                listing("git", &["demo://shared", "demo://git/readme"], &[]),
                listing("aaa", &["demo://shared"], &[]),
            ],
        );
        assert_eq!(
            uris(&index),
            [
                "gatehouse://resource/aaa/demo://shared",
                "gatehouse://resource/git/demo://shared",
                "demo://git/readme",
            ]
        );
        assert_eq!(
            index.route("demo://shared"),
            Err(RouteError::Ambiguous {
                uri: "demo://shared".to_owned(),
                qualified: vec![
                    "gatehouse://resource/aaa/demo://shared".to_owned(),
                    "gatehouse://resource/git/demo://shared".to_owned(),
                ],
            })
        );
        assert_eq!(
            index.route("gatehouse://resource/git/demo://shared"),
            target(
                "git",
                "demo://shared",
                Some("gatehouse://resource/git/demo://shared")
            )
        );
        assert_eq!(
            index.route("gatehouse://resource/aaa/demo://shared"),
            target(
                "aaa",
                "demo://shared",
                Some("gatehouse://resource/aaa/demo://shared")
            )
        );
        // A qualified URI works for unshared URIs too, but only on the server
        // that claims it.
        assert_eq!(
            index.route("gatehouse://resource/git/demo://git/readme"),
            target(
                "git",
                "demo://git/readme",
                Some("gatehouse://resource/git/demo://git/readme")
            )
        );
        assert!(matches!(
            index.route("gatehouse://resource/aaa/demo://git/readme"),
            Err(RouteError::NotClaimed { .. })
        ));
        for malformed in [
            "gatehouse://resource/git",
            "gatehouse://resource/git/",
            "gatehouse://resource//demo://shared",
            "gatehouse://resource/g.t/demo://shared",
            "gatehouse://other/git/demo://shared",
            "GATEHOUSE://resource/git/demo://shared",
        ] {
            assert!(
                matches!(index.route(malformed), Err(RouteError::Malformed { .. })),
                "{malformed}"
            );
        }
    }

    #[test]
    fn templates_of_two_servers_that_match_one_uri_make_it_ambiguous() {
        let index = ResourceIndex::build(
            3,
            vec![
                listing("files", &["file:///etc/hosts"], &["file:///{+path}"]),
                listing("aaa", &[], &["file:///{+anything}", "demo://aaa/{x}"]),
                listing("git", &[], &["demo://aaa/{x}"]),
            ],
        );
        // A listed URI another server's template matches is claimed twice.
        assert_eq!(
            uris(&index),
            ["gatehouse://resource/files/file:///etc/hosts"]
        );
        assert!(matches!(
            index.route("file:///etc/hosts"),
            Err(RouteError::Ambiguous { qualified, .. }) if qualified == [
                "gatehouse://resource/aaa/file:///etc/hosts",
                "gatehouse://resource/files/file:///etc/hosts",
            ]
        ));
        assert_eq!(
            index.route("gatehouse://resource/files/file:///etc/hosts"),
            target(
                "files",
                "file:///etc/hosts",
                Some("gatehouse://resource/files/file:///etc/hosts")
            )
        );
        // The same template string from two servers is listed qualified; the
        // qualified template expands to qualified URIs that route.
        let templates: Vec<&str> = index
            .resource_templates()
            .iter()
            .map(|t| t.uri_template.as_str())
            .collect();
        assert_eq!(
            templates,
            [
                "file:///{+anything}",
                "gatehouse://resource/aaa/demo://aaa/{x}",
                "file:///{+path}",
                "gatehouse://resource/git/demo://aaa/{x}",
            ]
        );
        assert_eq!(
            index.route("gatehouse://resource/git/demo://aaa/1"),
            target(
                "git",
                "demo://aaa/1",
                Some("gatehouse://resource/git/demo://aaa/1")
            )
        );
        assert!(matches!(
            index.route("demo://aaa/1"),
            Err(RouteError::Ambiguous { .. })
        ));
    }

    #[test]
    fn the_gatehouse_scheme_is_reserved() {
        let index = ResourceIndex::build(
            4,
            vec![
                listing(
                    "aaa",
                    &["gatehouse://resource/git/demo://git/readme", "Gatehouse:x"],
                    &["gatehouse://resource/git/{+x}", "{+everything}"],
                ),
                listing("git", &["demo://git/readme"], &[]),
            ],
        );
        // Dropped from the listing, and never matched by a catch-all template.
        let templates: Vec<&str> = index
            .resource_templates()
            .iter()
            .map(|t| t.uri_template.as_str())
            .collect();
        assert_eq!(templates, ["{+everything}"]);
        assert_eq!(uris(&index), ["gatehouse://resource/git/demo://git/readme"]);
        assert_eq!(
            index.route("gatehouse://resource/git/demo://git/readme"),
            target(
                "git",
                "demo://git/readme",
                Some("gatehouse://resource/git/demo://git/readme")
            )
        );
        assert!(matches!(
            index.route("gatehouse://resource/aaa/gatehouse://resource/git/demo://git/readme"),
            Err(RouteError::NotClaimed { .. })
        ));
        assert!(matches!(
            index.route("gatehouse:x"),
            Err(RouteError::Malformed { .. })
        ));
    }

    #[test]
    fn the_listing_is_deterministic_and_unparsable_templates_are_dropped() {
        let a = listing(
            "b",
            &["demo://2", "demo://1", "demo://2"],
            &["demo://{", "demo://b/{x}"],
        );
        let b = listing("a", &["demo://3"], &[]);
        let one = ResourceIndex::build(5, vec![a.clone(), b.clone()]);
        let two = ResourceIndex::build(5, vec![b, a]);
        assert_eq!(uris(&one), ["demo://3", "demo://2", "demo://1"]);
        assert_eq!(uris(&one), uris(&two));
        assert_eq!(one.resource_templates(), two.resource_templates());
        assert_eq!(one.resource_templates().len(), 1);
        assert!(matches!(
            one.route("demo://{"),
            Err(RouteError::NotFound { .. })
        ));
    }

    #[test]
    fn route_errors_become_mcp_errors() {
        let not_found: ErrorData = RouteError::NotFound {
            uri: "demo://x".to_owned(),
        }
        .into();
        assert_eq!(not_found.code.0, -32002);
        assert!(not_found.message.contains("demo://x"));
        assert_eq!(not_found.data, Some(json!({"uri": "demo://x"})));
        let ambiguous: ErrorData = RouteError::Ambiguous {
            uri: "demo://x".to_owned(),
            qualified: vec!["gatehouse://resource/a/demo://x".to_owned()],
        }
        .into();
        assert_eq!(ambiguous.code.0, -32602);
        assert!(
            ambiguous
                .message
                .contains("gatehouse://resource/a/demo://x")
        );
    }
}
