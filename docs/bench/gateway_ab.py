#!/usr/bin/env python3
"""What `gatehouse serve` adds over calling the server directly, for several
gatehouse builds side by side in one run.

    docs/bench/gateway_ab.py DEMO_SERVER GUARDIAN.wasm GATEHOUSE [GATEHOUSE ...]
        [--rounds 20] [--calls 50] [--warmup 200]

Over stdio, like an MCP client: one demo-server spoken to directly, and one
`gatehouse serve` per binary given, each in a directory of its own with one
demo-server (`git`), the guardian allowing `read_*`, `verify_contract =
false`, and the audit log beside its config at the default `audit_sync`
(as host/cli/benches/gateway.rs sets it up). Two kinds of call:

- `tools/call` of `echo`;
- an elicitation end to end: `elicit_raw` makes the server send an
  `elicitation/create`; directly, this client answers it at once; through
  gatehouse, the guardian reviews it, the answer is audited, then sent.

Each round runs `--calls` calls of each kind against every target, the order
of the targets rotating from round to round, so that a change in the
machine's load falls on all of them alike. Prints the p50 and p90 of each
target and kind in microseconds, and what each gatehouse adds at p50 over
direct. The client's own time (this Python) is in every row alike; only the
differences mean anything.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

APPROVAL = {
    "params": {
        "message": "Allow read_file?",
        "requestedSchema": {"type": "object", "properties": {}},
        "_meta": {
            "codex_request_type": "approval_request",
            "codex_approval_kind": "mcp_tool_call",
            "tool_name": "read_file",
            "tool_params": {"path": "README.md"},
        },
    }
}


class Client:
    """A minimal MCP client over a child's stdio: answers any elicitation
    with accept `{}` at once."""

    def __init__(self, argv, cwd=None):
        self.process = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            cwd=cwd,
            env={**os.environ, "RUST_LOG": "error"},
        )
        self.next_id = 0
        self.request(
            "initialize",
            {
                "protocolVersion": "2025-06-18",
                "capabilities": {"elicitation": {"form": {}}},
                "clientInfo": {"name": "gateway_ab", "version": "0"},
            },
        )
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def send(self, message):
        self.process.stdin.write(json.dumps(message).encode() + b"\n")
        self.process.stdin.flush()

    def request(self, method, params):
        self.next_id += 1
        mine = self.next_id
        self.send({"jsonrpc": "2.0", "id": mine, "method": method, "params": params})
        while True:
            line = self.process.stdout.readline()
            if not line:
                raise RuntimeError(f"{method}: the peer closed its stdout")
            message = json.loads(line)
            if "method" in message:
                if "id" in message:
                    # A request of the server's: an elicitation (or a ping).
                    result = (
                        {"action": "accept", "content": {}}
                        if message["method"] == "elicitation/create"
                        else {}
                    )
                    self.send({"jsonrpc": "2.0", "id": message["id"], "result": result})
                continue
            if message.get("id") == mine:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message["result"]

    def call(self, tool, arguments):
        return self.request("tools/call", {"name": tool, "arguments": arguments})

    def close(self):
        self.process.stdin.close()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()


def gateway_config(directory, demo_server, guardian):
    path = os.path.join(directory, "gatehouse.toml")
    with open(path, "w") as config:
        config.write(
            f"[mcp_servers.git]\ncommand = {json.dumps(demo_server)}\nargs = [\"--name\", \"git\"]\n\n"
            "[review]\nverify_contract = false\n\n"
            f"[[review.modules]]\nname = \"guardian\"\npath = {json.dumps(guardian)}\n"
            "config = { allow = [{ server = \"git\", tool = \"read_*\" }] }\n\n"
            "[elicitations]\naudit_log = \"audit.jsonl\"\n"
        )
    return path


def percentile(values, fraction):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("demo_server")
    parser.add_argument("guardian")
    parser.add_argument("gatehouse", nargs="+")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--calls", type=int, default=50)
    parser.add_argument("--warmup", type=int, default=200)
    args = parser.parse_args()

    demo_server = os.path.abspath(args.demo_server)
    guardian = os.path.abspath(args.guardian)
    directories = []
    targets = [("direct", Client([demo_server, "--name", "git"]), "")]
    for index, binary in enumerate(args.gatehouse):
        directory = tempfile.TemporaryDirectory(prefix=f"gateway_ab{index}-")
        directories.append(directory)
        config = gateway_config(directory.name, demo_server, guardian)
        client = Client([os.path.abspath(binary), "serve", "--config", config], cwd=directory.name)
        targets.append((f"{index}: {binary}", client, "git__"))

    kinds = [("tools/call", "echo", {"text": "hi"}), ("elicitation", "elicit_raw", APPROVAL)]
    for _, client, prefix in targets:
        for _, tool, arguments in kinds:
            for _ in range(args.warmup):
                client.call(prefix + tool, arguments)

    samples = {(name, kind): [] for name, _, _ in targets for kind, _, _ in kinds}
    for round_index in range(args.rounds):
        shift = round_index % len(targets)
        for name, client, prefix in targets[shift:] + targets[:shift]:
            for kind, tool, arguments in kinds:
                for _ in range(args.calls):
                    started = time.perf_counter_ns()
                    client.call(prefix + tool, arguments)
                    samples[(name, kind)].append((time.perf_counter_ns() - started) / 1000)

    for _, client, _ in targets:
        client.close()
    print(f"{args.rounds} rounds x {args.calls} calls per target and kind; microseconds")
    for kind, _, _ in kinds:
        direct = statistics.median(samples[("direct", kind)])
        for name, _, _ in targets:
            values = samples[(name, kind)]
            p50 = statistics.median(values)
            added = "" if name == "direct" else f"  adds {p50 - direct:+.1f}"
            print(f"{kind:12} {name:50} p50 {p50:8.1f}  p90 {percentile(values, 0.9):8.1f}{added}")


if __name__ == "__main__":
    sys.exit(main())
