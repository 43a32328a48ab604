#!/usr/bin/env python3
"""Cold start of `gatehouse serve` to its first `tools/list` answer, and its idle RSS after it.

usage: docs/bench/coldstart.py GATEHOUSE DEMO_SERVER GUARDIAN_WASM RUNS

Writes a gatehouse.toml (one stdio server, DEMO_SERVER, and the guardian) in a temporary directory, runs
`gatehouse serve` once to warm its compile cache, then RUNS times: spawn, `initialize`,
`notifications/initialized`, `tools/list`; the clock stops at the `tools/list` answer; `VmRSS` is read half a
second later. Prints one JSON line per run: {"ms": ..., "rss_kib": ..., "tools": ...}.
"""
import json
import os
import subprocess
import sys
import tempfile
import time


def run(binary, config):
    start = time.perf_counter()
    serve = subprocess.Popen([binary, "serve", "--config", config], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, bufsize=0)

    def send(message):
        serve.stdin.write((json.dumps(message) + "\n").encode())

    def answer(id_):
        while True:
            line = serve.stdout.readline()
            if not line:
                raise SystemExit("gatehouse serve closed its stdout")
            message = json.loads(line)
            if message.get("id") == id_:
                return message

    send({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {"elicitation": {}},
        "clientInfo": {"name": "coldstart", "version": "0"}}})
    answer(1)
    send({"jsonrpc": "2.0", "method": "notifications/initialized"})
    send({"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}})
    tools = answer(2)
    elapsed = time.perf_counter() - start
    time.sleep(0.5)
    rss = None
    with open(f"/proc/{serve.pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1])
    serve.stdin.close()
    serve.wait(timeout=10)
    return {"ms": round(elapsed * 1000, 1), "rss_kib": rss, "tools": len(tools["result"]["tools"])}


def main():
    binary, server, guardian, runs = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    with tempfile.TemporaryDirectory() as directory:
        config = os.path.join(directory, "gatehouse.toml")
        with open(config, "w") as file:
            file.write(f"[mcp_servers.demo]\ncommand = {json.dumps(os.path.abspath(server))}\n\n"
                       f"[[review.modules]]\npath = {json.dumps(os.path.abspath(guardian))}\n")
        run(binary, config)
        for _ in range(runs):
            print(json.dumps(run(binary, config)), flush=True)


main()
