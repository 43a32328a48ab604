//! The MCP side: server configuration, connections to servers, the tool
//! catalog under qualified names, and the runtime that keeps them current.

pub mod config;
pub mod connection;
pub mod naming;
pub mod refresh;
pub mod rescue;
pub mod runtime;
pub mod source;
mod stdio;

/// The method of an elicitation request.
pub(crate) const ELICITATION_METHOD: &str = "elicitation/create";

/// The text parts of a tool result, joined by newlines (what a person reads).
///
/// ```
/// use rmcp::model::{CallToolResult, ContentBlock};
/// let result = CallToolResult::success(vec![ContentBlock::text("a"), ContentBlock::text("b")]);
/// assert_eq!(gatehouse::mcp::result_text(&result), "a\nb");
/// ```
pub fn result_text(result: &rmcp::model::CallToolResult) -> String {
    let wire = serde_json::to_value(result).unwrap_or_default();
    wire["content"]
        .as_array()
        .map(|parts| {
            parts
                .iter()
                .filter_map(|part| part["text"].as_str())
                .collect::<Vec<_>>()
                .join("\n")
        })
        .unwrap_or_default()
}
