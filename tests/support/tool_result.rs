//! The text of a tool result, as the end-to-end tests read it. Shared by
//! the `gatehouse-tests` library and, by `#[path]`, the `gatehouse`
//! binary's gathered tests (`host/cli/tests/all`).

/// The text parts of a tool result, joined by newlines (what a person reads).
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

#[cfg(test)]
mod tests {
    use rmcp::model::{CallToolResult, ContentBlock};

    #[test]
    fn text_parts_are_joined_by_newlines() {
        let result =
            CallToolResult::success(vec![ContentBlock::text("a"), ContentBlock::text("b")]);
        assert_eq!(super::result_text(&result), "a\nb");
    }
}
