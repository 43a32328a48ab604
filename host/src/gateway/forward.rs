//! Resources and prompts of every server, forwarded as one catalog.
//!
//! Resource URIs are kept as the servers give them (a client may show or
//! store them); a read goes to the server that listed the URI, or, for a URI
//! made from a template, to each server with resources until one has it.
//! Prompt names are qualified like tools (`server__prompt`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use futures::future::join_all;
use rmcp::model::{
    ErrorData, GetPromptResult, JsonObject, Prompt, ReadResourceResult, Resource, ResourceTemplate,
};

use crate::escape::Escaped;
use crate::mcp::connection::{ConnectError, Connection};
use crate::mcp::naming::qualified_names;
use crate::mcp::runtime::Snapshot;

/// Who owns which resource URI and qualified prompt name, as last listed.
#[derive(Debug, Default, Clone)]
pub struct Forwarder {
    resource_owners: Arc<Mutex<HashMap<String, String>>>,
    prompt_owners: Arc<Mutex<HashMap<String, (String, String)>>>,
}

impl Forwarder {
    /// Every server's resources. A server that fails to list is left out
    /// (and logged); the others still answer.
    pub async fn list_resources(&self, snapshot: &Snapshot) -> Vec<Resource> {
        let listed =
            join_all(
                snapshot
                    .connections()
                    .values()
                    .map(|connection| async move {
                        (connection.name(), connection.list_resources().await)
                    }),
            )
            .await;
        let mut owners = HashMap::new();
        let mut resources = Vec::new();
        for (server, result) in listed {
            match result {
                Ok(items) => {
                    for resource in items {
                        if let Some(first) = owners.get(&resource.uri) {
                            tracing::warn!(uri = %Escaped(&resource.uri), first = %first, second = server, "two servers list the same resource URI; reads go to the first");
                            continue;
                        }
                        owners.insert(resource.uri.clone(), server.to_owned());
                        resources.push(resource);
                    }
                }
                Err(error) => tracing::warn!("{}", Escaped(&error.to_string())),
            }
        }
        if let Ok(mut slot) = self.resource_owners.lock() {
            *slot = owners;
        }
        resources
    }

    /// Every server's resource templates.
    pub async fn list_resource_templates(&self, snapshot: &Snapshot) -> Vec<ResourceTemplate> {
        let listed = join_all(
            snapshot
                .connections()
                .values()
                .map(|connection| connection.list_resource_templates()),
        )
        .await;
        listed
            .into_iter()
            .filter_map(|result| {
                result
                    .map_err(|error| tracing::warn!("{}", Escaped(&error.to_string())))
                    .ok()
            })
            .flatten()
            .collect()
    }

    /// Reads `uri` from the server that owns it.
    pub async fn read_resource(
        &self,
        snapshot: &Snapshot,
        uri: &str,
    ) -> Result<ReadResourceResult, ErrorData> {
        let mut owner = self.resource_owner(uri);
        if owner.is_none() {
            self.list_resources(snapshot).await;
            owner = self.resource_owner(uri);
        }
        if let Some(connection) = owner.and_then(|server| snapshot.connection(&server).cloned()) {
            return connection.read_resource(uri).await.map_err(upstream_error);
        }
        // Not listed: perhaps made from a template. Ask each server that has
        // resources, in name order.
        let candidates: Vec<&Arc<Connection>> = snapshot
            .connections()
            .values()
            .filter(|connection| connection.capabilities().resources.is_some())
            .collect();
        for connection in candidates {
            if let Ok(result) = connection.read_resource(uri).await {
                return Ok(result);
            }
        }
        Err(ErrorData::resource_not_found(
            format!("no server has the resource `{uri}`"),
            None,
        ))
    }

    fn resource_owner(&self, uri: &str) -> Option<String> {
        self.resource_owners.lock().ok()?.get(uri).cloned()
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
        let mut owner = self.prompt_owner(qualified);
        if owner.is_none() {
            self.list_prompts(snapshot).await;
            owner = self.prompt_owner(qualified);
        }
        let Some((server, name)) = owner else {
            return Err(ErrorData::invalid_params(
                format!("no prompt named `{qualified}`"),
                None,
            ));
        };
        let Some(connection) = snapshot.connection(&server) else {
            return Err(ErrorData::invalid_params(
                format!("prompt `{qualified}`: server `{server}` is not connected"),
                None,
            ));
        };
        connection
            .get_prompt(&name, arguments)
            .await
            .map_err(upstream_error)
    }

    fn prompt_owner(&self, qualified: &str) -> Option<(String, String)> {
        self.prompt_owners.lock().ok()?.get(qualified).cloned()
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
