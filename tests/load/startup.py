#!/usr/bin/env python3
"""How fast `gatehouse serve` answers its client, and how fast it is gone.

Starts `gatehouse serve --config CONFIG` on pipes RUNS times, as an MCP client
would: times the answer to `initialize` from the moment of the spawn, then
sends SIGTERM and times the exit. Prints the median, minimum and maximum of
each (milliseconds). The first run warms the module cache and is not counted.

    .ci/build-guests && cargo build --release -p gatehouse -p gatehouse-example-servers
    python3 tests/load/startup.py target/release/gatehouse examples/demo.toml --runs 25

The config's servers come up in the background: `initialize` never waits for
them (issue 27), so a config with slow servers measures the same.
"""

import argparse
import json
import os
import signal
import statistics
import subprocess
import time


def one_run(gatehouse: str, config: str) -> tuple[float, float]:
    started = time.perf_counter()
    child = subprocess.Popen(
        [gatehouse, "serve", "--config", config],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    initialize = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {"elicitation": {}},
            "clientInfo": {"name": "startup-probe", "version": "0"},
        },
    }
    child.stdin.write((json.dumps(initialize) + "\n").encode())
    child.stdin.flush()
    while True:
        line = child.stdout.readline()
        if not line:
            raise RuntimeError("gatehouse closed stdout before answering initialize")
        if json.loads(line).get("id") == 1:
            break
    answered = time.perf_counter() - started
    child.stdin.write(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n')
    child.stdin.flush()
    time.sleep(0.2)
    signalled = time.perf_counter()
    child.send_signal(signal.SIGTERM)
    child.wait(timeout=30)
    gone = time.perf_counter() - signalled
    return answered * 1000, gone * 1000


def summary(name: str, values: list[float]) -> str:
    return (
        f"{name}: median {statistics.median(values):.1f} ms, "
        f"min {min(values):.1f}, max {max(values):.1f} ({len(values)} runs)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("gatehouse")
    parser.add_argument("config")
    parser.add_argument("--runs", type=int, default=25)
    args = parser.parse_args()
    config = os.path.abspath(args.config)
    one_run(args.gatehouse, config)
    answers, exits = [], []
    for _ in range(args.runs):
        answered, gone = one_run(args.gatehouse, config)
        answers.append(answered)
        exits.append(gone)
    print(summary("initialize answered after spawn", answers))
    print(summary("exit after SIGTERM", exits))


if __name__ == "__main__":
    main()
