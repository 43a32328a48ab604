//! `gatehouse-process-hook`: the reference guardian's decision as a process
//! hook, the way reviewers are deployed without gatehouse (Claude Code hooks,
//! Docker MCP gateway interceptors): the host spawns the program once per
//! decision, writes ONE review request as JSON to its stdin, closes it, and
//! reads ONE verdict line from its stdout. It runs the same decision logic as
//! the `gatehouse_guardian.wasm` component ([`gatehouse_guardian::logic`]),
//! compiled natively, so `gatehouse bench --hook` compares the two deployments
//! and nothing else.
//!
//! # stdin: one review request
//!
//! The module config and the contract's `review-request`
//! (`wit/reviewer.wit`) as JSON, with JSON values where the contract passes
//! JSON text:
//!
//! ```json
//! {
//!   "config": {"allow": [{"server": "docs", "tool": "read_*"}]},
//!   "request": {
//!     "elicitation": {"mode": "form", "message": "Allow read_file?",
//!                     "requested_schema": {"type": "object", "properties": {}}},
//!     "meta": {"codex_request_type": "approval_request",
//!              "codex_approval_kind": "mcp_tool_call", "tool_name": "read_file"},
//!     "context": {
//!       "server_name": "docs", "request_id": 1, "protocol_version": "2025-11-25",
//!       "approval_policy": "on-request", "approvals_reviewer": "auto_review",
//!       "auto_approve_prompts": false, "session_id": null, "turn_id": null,
//!       "catalog": "unavailable"
//!     }
//!   }
//! }
//! ```
//!
//! - `config`: the module configuration (default `{}`).
//! - `request.elicitation`: `{"mode": "form", "message", "requested_schema"}` or
//!   `{"mode": "url", "message", "url", "elicitation_id"}`.
//! - `request.meta`: the elicitation's `_meta` object, or `null`.
//! - `request.context`: `server_name` and `request_id` (integer or string) are
//!   required; `approval_policy` is `"untrusted"`, `"on-request"` (default),
//!   `"never"` or `{"granular": {"mcp_elicitations": false, ...}}`;
//!   `approvals_reviewer` is `"user"` or `"auto_review"` (default); `catalog` is
//!   `"unavailable"` (default), `"not_listed"` or `{"listed": {"name", "title",
//!   "description", "annotations": {"readOnlyHint", ...}, "_meta"}}`.
//!
//! Unknown keys at the top level and in `request` are refused; fields the
//! guardian does not read (a form's `message`, `protocol_version`, ...) are
//! accepted and ignored. `gatehouse_bench::hook_input` writes exactly this
//! document for every request `gatehouse bench --hook` sends.
//!
//! # stdout: one verdict line
//!
//! gatehouse's checked outcome (`gatehouse_core::outcome::Outcome`) as JSON:
//!
//! ```json
//! {"decision": {"action": "accept", "content": {}}, "rationale": "...", "risk": "low"}
//! {"decision": {"action": "decline", "message": "This action was rejected ..."}, "rationale": "...", "risk": "high"}
//! {"decision": {"action": "defer"}, "rationale": "..."}
//! ```
//!
//! Exit status: 0 with a verdict on stdout; 2 when stdin is not a review
//! request (the reason on stderr, nothing on stdout); 1 when the verdict
//! cannot be written.

mod request;
mod verdict;

use std::io::{Read, Write};
use std::process::ExitCode;

fn main() -> ExitCode {
    let mut text = String::new();
    if let Err(error) = std::io::stdin().read_to_string(&mut text) {
        eprintln!("gatehouse-process-hook: cannot read stdin: {error}");
        return ExitCode::from(2);
    }
    let input = match request::HookInput::parse(&text) {
        Ok(input) => input,
        Err(error) => {
            eprintln!("gatehouse-process-hook: stdin is not a review request: {error}");
            return ExitCode::from(2);
        }
    };
    let verdict = input.review();
    let line = match verdict::to_line(&verdict) {
        Ok(line) => line,
        Err(error) => {
            eprintln!("gatehouse-process-hook: {error}");
            return ExitCode::from(1);
        }
    };
    let mut stdout = std::io::stdout().lock();
    match writeln!(stdout, "{line}").and_then(|()| stdout.flush()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("gatehouse-process-hook: cannot write the verdict: {error}");
            ExitCode::from(1)
        }
    }
}
