//! Resources and prompts of every server, forwarded as one catalog.
//!
//! A resource read goes to the one server that claims its URI (lists it, or
//! lists a template that matches it) and to no other; a URI nobody claims,
//! or more than one server claims, is refused without asking any server.
//! URIs are kept as the servers give them, except that a URI more than one
//! server claims is listed once per server as
//! `gatehouse://resource/SERVER/URI`, which reads `URI` from `SERVER`. The
//! rules are in `forward::index`. The index is built from every server's listings
//! once per snapshot generation, and again on every `resources/list` and
//! `resources/templates/list`.
//!
//! Prompt names are qualified like tools (`server__prompt`).

mod index;
mod uri_template;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use futures::future::join_all;
use rmcp::model::{
    ErrorCode, ErrorData, GetPromptResult, JsonObject, Prompt, ReadResourceResult, Resource,
    ResourceContents, ResourceTemplate,
};

pub use index::Target as ResourceTarget;
use index::{Listing, ResourceIndex, RouteError};

use gatehouse_base::escape::Escaped;
use gatehouse_mcp::connection::{ConnectError, Connection};
use gatehouse_mcp::naming::qualified_names;
use gatehouse_mcp::runtime::Snapshot;

/// The resource index of the latest snapshot and who owns which qualified
/// prompt name, as last listed.
#[derive(Debug, Default, Clone)]
pub struct Forwarder {
    resources: Arc<Mutex<Option<Arc<ResourceIndex>>>>,
    prompt_owners: Arc<Mutex<HashMap<String, (String, String)>>>,
}

impl Forwarder {
    /// Every server's resources, as `forward::index` lists them. A
    /// server that fails to list is left out (and logged); the others still
    /// answer.
    pub async fn list_resources(&self, snapshot: &Snapshot) -> Vec<Resource> {
        self.rebuild(snapshot).await.resources().to_vec()
    }

    /// Every server's resource templates, as `forward::index` lists
    /// them.
    pub async fn list_resource_templates(&self, snapshot: &Snapshot) -> Vec<ResourceTemplate> {
        self.rebuild(snapshot).await.resource_templates().to_vec()
    }

    /// Reads `uri` from the one server that claims it. Only that server is
    /// sent the read; an unclaimed or ambiguous URI is refused without
    /// asking any server (a `RouteError`).
    pub async fn read_resource(
        &self,
        snapshot: &Snapshot,
        uri: &str,
    ) -> Result<ReadResourceResult, ErrorData> {
        let target = self.resource_target(snapshot, uri).await?;
        self.read_target(snapshot, uri, &target).await
    }

    /// Where a read of `uri` goes (what [`Self::read_resource`] would ask),
    /// or the error it would answer with; asks no server to read anything.
    pub async fn resource_target(
        &self,
        snapshot: &Snapshot,
        uri: &str,
    ) -> Result<ResourceTarget, ErrorData> {
        let index = self.index(snapshot).await;
        Ok(index.route(uri)?)
    }

    /// Reads `uri` from `target`, as [`Self::resource_target`] chose it: the
    /// caller records the request against the very server that is asked.
    pub async fn read_target(
        &self,
        snapshot: &Snapshot,
        uri: &str,
        target: &ResourceTarget,
    ) -> Result<ReadResourceResult, ErrorData> {
        let Some(connection) = snapshot.connection(&target.server) else {
            return Err(RouteError::NotFound {
                uri: uri.to_owned(),
            }
            .into());
        };
        let mut result = connection
            .read_resource(&target.uri)
            .await
            .map_err(upstream_error)?;
        if let Some(qualified) = &target.qualified {
            requalify(&mut result, &target.uri, qualified);
        }
        Ok(result)
    }

    /// The resource index of `snapshot`: the stored one if it was built from
    /// this generation, else a new one.
    async fn index(&self, snapshot: &Snapshot) -> Arc<ResourceIndex> {
        let stored = self.resources.lock().ok().and_then(|slot| slot.clone());
        match stored {
            Some(index) if index.generation() == snapshot.generation => index,
            _ => self.rebuild(snapshot).await,
        }
    }

    /// Lists every server's resources and templates and stores the index,
    /// unless one from a newer snapshot is stored already.
    async fn rebuild(&self, snapshot: &Snapshot) -> Arc<ResourceIndex> {
        let listings = join_all(snapshot.connections().values().map(listing)).await;
        let index = Arc::new(ResourceIndex::build(snapshot.generation, listings));
        if let Ok(mut slot) = self.resources.lock()
            && slot
                .as_ref()
                .is_none_or(|stored| stored.generation() <= index.generation())
        {
            *slot = Some(index.clone());
        }
        index
    }

    /// Every server's prompts, named `server__prompt`.
    pub async fn list_prompts(&self, snapshot: &Snapshot) -> Vec<Prompt> {
        let listed =
            join_all(
                snapshot
                    .connections()
                    .values()
                    .map(|connection| async move {
                        (connection.name(), connection.list_prompts().await)
                    }),
            )
            .await;
        let mut prompts: Vec<(String, Prompt)> = Vec::new();
        for (server, result) in listed {
            match result {
                Ok(items) => {
                    prompts.extend(items.into_iter().map(|prompt| (server.to_owned(), prompt)))
                }
                Err(error) => tracing::warn!("{}", Escaped(&error.to_string())),
            }
        }
        let identities: Vec<(&str, &str)> = prompts
            .iter()
            .map(|(server, prompt)| (server.as_str(), prompt.name.as_str()))
            .collect();
        let names = qualified_names(&identities);
        let mut owners = HashMap::new();
        let mut qualified = Vec::with_capacity(prompts.len());
        for ((server, mut prompt), name) in prompts.into_iter().zip(names) {
            owners.insert(name.clone(), (server, prompt.name.clone()));
            prompt.name = name;
            qualified.push(prompt);
        }
        if let Ok(mut slot) = self.prompt_owners.lock() {
            *slot = owners;
        }
        qualified
    }

    /// Gets the prompt listed as `qualified`.
    pub async fn get_prompt(
        &self,
        snapshot: &Snapshot,
        qualified: &str,
        arguments: Option<JsonObject>,
    ) -> Result<GetPromptResult, ErrorData> {
        let (server, name) = self.prompt_server(snapshot, qualified).await?;
        self.get_prompt_from(snapshot, qualified, &server, &name, arguments)
            .await
    }

    /// Gets prompt `name` from `server`, as [`Self::prompt_server`] resolved
    /// `qualified`: the caller records the request against the very server
    /// that is asked.
    pub async fn get_prompt_from(
        &self,
        snapshot: &Snapshot,
        qualified: &str,
        server: &str,
        name: &str,
        arguments: Option<JsonObject>,
    ) -> Result<GetPromptResult, ErrorData> {
        let Some(connection) = snapshot.connection(server) else {
            return Err(ErrorData::invalid_params(
                format!("prompt `{qualified}`: server `{server}` is not connected"),
                None,
            ));
        };
        connection
            .get_prompt(name, arguments)
            .await
            .map_err(upstream_error)
    }

    /// The server and its own name of the prompt listed as `qualified`
    /// (what [`Self::get_prompt`] would ask), or the error it would answer
    /// with; lists the prompts again if the name is not known yet.
    pub async fn prompt_server(
        &self,
        snapshot: &Snapshot,
        qualified: &str,
    ) -> Result<(String, String), ErrorData> {
        let mut owner = self.prompt_owner(qualified);
        if owner.is_none() {
            self.list_prompts(snapshot).await;
            owner = self.prompt_owner(qualified);
        }
        owner.ok_or_else(|| {
            ErrorData::invalid_params(format!("no prompt named `{qualified}`"), None)
        })
    }

    fn prompt_owner(&self, qualified: &str) -> Option<(String, String)> {
        self.prompt_owners.lock().ok()?.get(qualified).cloned()
    }
}

/// One server's resources and templates; what it fails to list is logged
/// and left out.
async fn listing(connection: &Arc<Connection>) -> Listing {
    let (resources, templates) = futures::join!(
        connection.list_resources(),
        connection.list_resource_templates()
    );
    let resources = resources.unwrap_or_else(|error| {
        tracing::warn!("{}", Escaped(&error.to_string()));
        Vec::new()
    });
    let templates = templates.unwrap_or_else(|error| {
        // Many servers with resources have no templates and say so.
        if matches!(&error, ConnectError::Refused { error, .. } if error.code == ErrorCode::METHOD_NOT_FOUND)
        {
            tracing::debug!("{}", Escaped(&error.to_string()));
        } else {
            tracing::warn!("{}", Escaped(&error.to_string()));
        }
        Vec::new()
    });
    Listing {
        server: connection.name().to_owned(),
        resources,
        templates,
    }
}

/// After a read of the qualified URI `qualified`, contents the server gave
/// under its own URI `original` carry `qualified` instead, so the client
/// finds what it asked for.
fn requalify(result: &mut ReadResourceResult, original: &str, qualified: &str) {
    for contents in &mut result.contents {
        match contents {
            ResourceContents::TextResourceContents { uri, .. }
            | ResourceContents::BlobResourceContents { uri, .. }
                if uri == original =>
            {
                qualified.clone_into(uri);
            }
            _ => {}
        }
    }
}

/// A server's own refusal goes upstream as it was sent; anything else is an
/// internal error naming the server.
fn upstream_error(error: ConnectError) -> ErrorData {
    match error {
        ConnectError::Refused { error, .. } => error,
        other => ErrorData::internal_error(other.to_string(), None),
    }
}
