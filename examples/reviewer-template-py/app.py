"""The WIT glue: a `reviewer` component (wit/reviewer.wit, package
gatehouse:reviewer@0.2.0) whose policy is `allowlist.py`.

componentize-py generates the `wit_world` package while it builds
(`./build.sh`); `bindings/` holds a copy of it for editors and type checkers.
The exported interface `review` is implemented by a class named `Review`.

Each review runs in a fresh instance, so nothing here may rely on state kept
between calls (the conformance kit checks that too).
"""

from wit_world import exports
from wit_world.imports import logging as wit_logging
from wit_world.imports import types

import allowlist

#: What `describe` reports. Change the name when you change the policy.
NAME = "allowlist-py"
VERSION = "0.1.0"


def _decision(answer):
    kind = answer[0]
    if kind == "defer":
        return types.Decision_Defer()
    if kind == "accept":
        return types.Decision_Accept(answer[1])
    if kind == "decline":
        return types.Decision_Decline(answer[1])
    return types.Decision_Cancel()


class Review(exports.Review):
    def describe(self) -> types.ModuleInfo:
        return types.ModuleInfo(name=NAME, version=VERSION, claims=["stateless"])

    def review(self, config: str, request: types.ReviewRequest) -> types.Outcome:
        # An exception that escapes (a bug, or MemoryError past the host's
        # memory cap) traps: the host records a failure, with the traceback
        # from stderr, and the chain's `on_failure` decides. That is what a
        # Rust guest's panic does; do not turn it into an answer here.
        try:
            parsed = allowlist.parse_config(config)
        except allowlist.ConfigError as error:
            why = f"invalid allowlist config: {error}"
            wit_logging.log(wit_logging.Level.ERROR, why, [])
            return types.Outcome(decision=types.Decision_Decline(None), rationale=why, risk=None)
        meta = allowlist.parse_meta(request.meta)
        elicitation = request.elicitation
        url = elicitation.value.url if isinstance(elicitation, types.Elicitation_Url) else None
        answer, rationale = allowlist.decide(
            parsed,
            server=request.context.server_name,
            tool=allowlist.tool_name(meta),
            url=url,
        )
        return types.Outcome(decision=_decision(answer), rationale=rationale, risk=None)
