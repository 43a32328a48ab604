//! The guardian's verdict as the stdout line: gatehouse's outcome JSON.

use gatehouse_guardian::input::{Decision, Risk, Verdict};
use serde_json::{Map, Value, json};

/// The verdict as one line of JSON (see the crate docs). Fails only if an
/// accept's content is not JSON, which the guardian never produces.
pub fn to_line(verdict: &Verdict) -> Result<String, String> {
    let decision = match &verdict.decision {
        Decision::Defer => json!({"action": "defer"}),
        Decision::Accept(content) => {
            let content: Value = serde_json::from_str(content)
                .map_err(|error| format!("the accept content is not JSON: {error}"))?;
            json!({"action": "accept", "content": content})
        }
        Decision::Decline(None) => json!({"action": "decline"}),
        Decision::Decline(Some(message)) => json!({"action": "decline", "message": message}),
        Decision::Cancel => json!({"action": "cancel"}),
    };
    let mut line = Map::new();
    line.insert("decision".to_owned(), decision);
    if let Some(rationale) = &verdict.rationale {
        line.insert("rationale".to_owned(), Value::String(rationale.clone()));
    }
    if let Some(risk) = verdict.risk {
        let risk = match risk {
            Risk::Low => "low",
            Risk::Medium => "medium",
            Risk::High => "high",
            Risk::Critical => "critical",
        };
        line.insert("risk".to_owned(), Value::String(risk.to_owned()));
    }
    Ok(Value::Object(line).to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_carry_decision_rationale_and_risk() {
        let verdict = Verdict {
            decision: Decision::Decline(Some("no".to_owned())),
            rationale: Some("why".to_owned()),
            risk: Some(Risk::High),
            request: None,
        };
        let line: Value = serde_json::from_str(&to_line(&verdict).unwrap()).unwrap();
        assert_eq!(
            line,
            json!({"decision": {"action": "decline", "message": "no"}, "rationale": "why", "risk": "high"})
        );
        let verdict = Verdict {
            decision: Decision::Accept("{}".to_owned()),
            rationale: None,
            risk: None,
            request: None,
        };
        assert_eq!(
            to_line(&verdict).unwrap(),
            r#"{"decision":{"action":"accept","content":{}}}"#
        );
    }
}
