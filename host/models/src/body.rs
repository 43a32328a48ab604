//! The JSON body of one `/chat/completions` request: the module's
//! [`CompletionRequest`] under the table's settings.

use gatehouse_core::model::{CompletionRequest, ModelError};
use serde_json::{Value, json};

use super::config::ModelConfig;

/// The `name` of the `json_schema` response format sent with an output
/// schema.
pub const RESPONSE_FORMAT_NAME: &str = "answer";

/// The JSON body of a request: `model`, `messages`, `max_tokens` (the lower
/// of the request's and the config's), `temperature`, and, with an output
/// schema and `json_schema = true`, a `json_schema` response format
/// (`strict: false`: the schema may leave properties optional).
pub(super) fn request_body(
    config: &ModelConfig,
    request: &CompletionRequest,
) -> Result<Value, ModelError> {
    let mut body = json!({
        "model": config.model,
        "messages": request.messages,
    });
    let max_tokens = match (request.max_output_tokens, config.max_output_tokens) {
        (Some(asked), Some(cap)) => Some(asked.min(cap)),
        (asked, cap) => asked.or(cap),
    };
    if let Some(max_tokens) = max_tokens {
        body["max_tokens"] = json!(max_tokens);
    }
    if let Some(temperature) = config.temperature {
        body["temperature"] = json!(temperature);
    }
    if config.json_schema
        && let Some(schema) = &request.output_schema
    {
        let schema: Value = serde_json::from_str(schema).map_err(|error| {
            ModelError::Rejected(format!("the output schema is not JSON: {error}"))
        })?;
        body["response_format"] = json!({
            "type": "json_schema",
            "json_schema": {
                "name": RESPONSE_FORMAT_NAME,
                "schema": schema,
                "strict": false,
            },
        });
    }
    Ok(body)
}

#[cfg(test)]
mod tests {
    use super::*;
    use gatehouse_core::model::Message;

    fn config() -> ModelConfig {
        ModelConfig::new("https://api.example.com/v1", "gpt-test")
    }

    #[test]
    fn the_body_carries_the_model_messages_and_the_lower_token_limit() {
        let mut request = CompletionRequest::new(vec![
            Message::system("policy"),
            Message::user("is `ls` safe?"),
        ]);
        let body = request_body(&config(), &request).expect("a body");
        assert_eq!(
            body,
            json!({
                "model": "gpt-test",
                "messages": [
                    {"role": "system", "content": "policy"},
                    {"role": "user", "content": "is `ls` safe?"},
                ],
            })
        );
        let mut capped = config();
        capped.max_output_tokens = Some(300);
        capped.temperature = Some(0.0);
        assert_eq!(
            request_body(&capped, &request).expect("a body")["max_tokens"],
            300
        );
        assert_eq!(
            request_body(&capped, &request).expect("a body")["temperature"],
            0.0
        );
        request.max_output_tokens = Some(100);
        assert_eq!(
            request_body(&capped, &request).expect("a body")["max_tokens"],
            100
        );
        request.max_output_tokens = Some(5000);
        assert_eq!(
            request_body(&capped, &request).expect("a body")["max_tokens"],
            300
        );
        assert_eq!(
            request_body(&config(), &request).expect("a body")["max_tokens"],
            5000
        );
    }

    #[test]
    fn an_output_schema_becomes_a_non_strict_json_schema_response_format() {
        let mut request = CompletionRequest::new(vec![Message::user("x")]);
        request.output_schema = Some(r#"{"type":"object","required":["outcome"]}"#.to_owned());
        let body = request_body(&config(), &request).expect("a body");
        assert_eq!(
            body["response_format"],
            json!({
                "type": "json_schema",
                "json_schema": {
                    "name": RESPONSE_FORMAT_NAME,
                    "schema": {"type": "object", "required": ["outcome"]},
                    "strict": false,
                },
            })
        );
        let mut plain = config();
        plain.json_schema = false;
        assert!(
            request_body(&plain, &request)
                .expect("a body")
                .get("response_format")
                .is_none()
        );
        request.output_schema = Some("{not json".to_owned());
        let error = request_body(&config(), &request).expect_err("a bad schema");
        assert!(
            matches!(&error, ModelError::Rejected(message) if message.contains("output schema")),
            "{error}"
        );
    }
}
