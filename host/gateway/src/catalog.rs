//! What a reviewer knows of a server's tools: the runtime's tool listing
//! ([`Snapshot`]) as the core's identity-binding [`ToolCatalog`], the one
//! place a listed `Tool` of rmcp becomes a reviewer's `CatalogTool`.

use gatehouse_core::context::{CatalogTool, ToolAnnotations, ToolCatalog};
use gatehouse_mcp::runtime::Snapshot;
use rmcp::model::Tool;

/// `server`'s tools in `snapshot` as the reviewer's catalog, or `None` if
/// the server is not connected. The router asks it for every review
/// (`Router::set_catalog_source`).
pub fn tool_catalog(snapshot: &Snapshot, server: &str) -> Option<ToolCatalog> {
    snapshot.connection(server)?;
    let mut catalog = ToolCatalog::default();
    for entry in snapshot
        .tools()
        .iter()
        .filter(|entry| entry.server == server)
    {
        catalog.insert(catalog_tool(&entry.tool));
    }
    Some(catalog)
}

fn catalog_tool(tool: &Tool) -> CatalogTool {
    let annotations = tool.annotations.as_ref();
    CatalogTool {
        name: tool.name.to_string(),
        title: tool.title.clone(),
        description: tool.description.as_ref().map(ToString::to_string),
        annotations: ToolAnnotations {
            read_only_hint: annotations.and_then(|a| a.read_only_hint),
            destructive_hint: annotations.and_then(|a| a.destructive_hint),
            idempotent_hint: annotations.and_then(|a| a.idempotent_hint),
            open_world_hint: annotations.and_then(|a| a.open_world_hint),
        },
        meta: tool
            .meta
            .as_ref()
            .and_then(|meta| serde_json::to_value(meta).ok())
            .and_then(|value| value.as_object().cloned()),
    }
}
