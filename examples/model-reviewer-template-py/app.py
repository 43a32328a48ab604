"""The WIT glue: a `model-reviewer` component (wit/reviewer.wit, package
gatehouse:reviewer@0.2.0) whose rule is `model_rule.py`.

componentize-py generates the `wit_world` package while it builds
(`./build.sh`); `bindings/` holds a copy of it for editors and type checkers.
The exported interface `review` is implemented by a class named `Review`.
The imported `model.complete` returns the completion, or raises
`componentize_py_types.Err` whose `value` is the `model-error`.

Each review runs in a fresh instance, so nothing here may rely on state kept
between calls (the conformance kit checks that too).
"""

from componentize_py_types import Err
from wit_world import exports
from wit_world.imports import model
from wit_world.imports import types

import model_rule

#: What `describe` reports. Change the name when you change the rule.
NAME = "model-reviewer-template-py"
VERSION = "0.1.0"

_ROLES = {"system": model.Role.SYSTEM, "user": model.Role.USER, "assistant": model.Role.ASSISTANT}
_RISKS = {None: None, "low": types.RiskLevel.LOW, "high": types.RiskLevel.HIGH}


def _model_error(error):
    """A `model-error` as Rust's `{:?}` writes it: `ModelError::Timeout`,
    `ModelError::Transient("...")`."""
    case = type(error).__name__.replace("_", "::", 1)
    if hasattr(error, "value"):
        return f"{case}({model_rule.rust_debug_str(error.value)})"
    return case


def _ask(messages, output_schema, max_output_tokens):
    request = model.CompletionRequest(
        messages=[model.Message(role=_ROLES[role], content=content) for role, content in messages],
        output_schema=output_schema,
        max_output_tokens=max_output_tokens,
    )
    try:
        return model.complete(request).text
    except Err as error:
        raise model_rule.ModelUnavailable(_model_error(error.value)) from None


def _decision(answer):
    if answer[0] == "accept":
        return types.Decision_Accept(answer[1])
    if answer[0] == "decline":
        return types.Decision_Decline(answer[1])
    return types.Decision_Defer()


class Review(exports.Review):
    def describe(self) -> types.ModuleInfo:
        # "stateless": this module keeps nothing between reviews.
        return types.ModuleInfo(name=NAME, version=VERSION, claims=["stateless"])

    def review(self, config: str, request: types.ReviewRequest) -> types.Outcome:
        # An exception that escapes (a bug) traps: the host records a failure
        # and the chain's `on_failure` decides. Do not turn it into an answer.
        elicitation = request.elicitation
        schema = (elicitation.value.requested_schema
                  if isinstance(elicitation, types.Elicitation_Form) else None)
        answer, rationale, risk = model_rule.review(
            request.context.server_name, schema, request.meta, _ask)
        return types.Outcome(decision=_decision(answer), rationale=rationale, risk=_RISKS[risk])
