#!/usr/bin/env node
// A scripted language-model API on loopback, for gatehouse's end-to-end client tests
// (host/cli/tests/all/clients.rs). No dependencies: node >= 20 only.
//
//   node model-server.mjs --script SCRIPT.json --record REQUESTS.jsonl
//
// Prints `listening on http://127.0.0.1:PORT` (one line, on stdout) once bound to 127.0.0.1:0,
// then serves until killed (SIGTERM/SIGINT) or until its stdin closes, so a test that dies
// does not leave it behind.
//
// It speaks the two APIs the real clients use, streamed as server-sent events (Messages also
// unstreamed, when the request says `"stream": false`):
//   - OpenAI Responses (`POST /v1/responses`), for Codex CLI through a `[model_providers.NAME]`
//     entry with `base_url = "http://127.0.0.1:PORT/v1"` and `wire_api = "responses"`;
//   - Anthropic Messages (`POST /v1/messages`), for Claude Code through
//     `ANTHROPIC_BASE_URL=http://127.0.0.1:PORT`.
//
// The script (JSON) says what the model does, one step per request, in order:
//
//   { "steps": [
//       { "api": "responses", "when": { "body_contains": "..." },
//         "reply": { "call": { "tool": "git__delete_branch", "arguments": { "branch": "main" } } } },
//       { "api": "responses", "when": { "tool_output_contains": "answered: decline" },
//         "reply": { "text": "done" } } ],
//     "any": [ { "api": "messages", "when": { "model_contains": "haiku" }, "reply": { "text": "t" } } ] }
//
// A request is matched against the next step not yet used; if it does not match, against the
// `any` rules (answered as often as they match, e.g. a client's side requests). `when` (all
// optional, all must hold): `body_contains` / `body_lacks` (substrings of the raw body),
// `model_contains`, `tools` (true: the request offers tools; false: none),
// `tool_output_contains` (the request carries a tool result, as the client sends it back, whose
// text contains this), `no_tool_output` (true: it carries none).
//
// A reply is `{ "text": "..." }` (a final answer) or `{ "call": { "tool", "arguments" } }` /
// `{ "calls": [ ... ] }` (tool calls). `tool` is the tool's name as gatehouse lists it
// (`server__tool`): the server finds the tool the client offered the model under that name
// (Codex: a function in a `namespace` tool named `mcp__SERVER`; Claude Code and others: a
// function named `mcp__SERVER__` + tool), and fails the request if none is offered. Claude Code
// defers MCP tools: it lists only their names, in the conversation's text, and offers a
// `ToolSearch` tool to load their schemas. For a tool offered only that way, the step first
// answers with a `ToolSearch` call (`select:mcp__SERVER__tool`), and goes on with its own reply
// on the request that carries that call's result, whatever its `when` says.
//
// Every request is recorded as one JSON line in REQUESTS.jsonl:
//   { "n", "method", "url", "api", "headers", "body" (parsed JSON, or the raw text), "step"
//     (the index of the step it matched, or null), "rule" (of the `any` rule), "error" }
// A request that matches neither a step nor a rule, a request to any other path, a proxy
// request for another host (the tests point HTTP(S)_PROXY here, so anything a client tries to
// send off the machine arrives here instead) and a reply that cannot be built are recorded with
// `error` set, reported as a line `model-server: ...` on stderr, and answered 500 (a CONNECT
// with 403): the test fails on any recorded error.

import http from "node:http";
import fs from "node:fs";

function usage(message) {
    process.stderr.write(`model-server: ${message}\nusage: node model-server.mjs --script SCRIPT.json --record REQUESTS.jsonl\n`);
    process.exit(2);
}

const args = process.argv.slice(2);
let scriptPath = null;
let recordPath = null;
for (let i = 0; i < args.length; i++) {
    if (args[i] === "--script") scriptPath = args[++i];
    else if (args[i] === "--record") recordPath = args[++i];
    else usage(`unknown argument ${JSON.stringify(args[i])}`);
}
if (!scriptPath || !recordPath) usage("--script and --record are required");

let script;
try {
    script = JSON.parse(fs.readFileSync(scriptPath, "utf8"));
} catch (error) {
    usage(`cannot read the script ${scriptPath}: ${error.message}`);
}
const steps = Array.isArray(script.steps) ? script.steps : [];
const anyRules = Array.isArray(script.any) ? script.any : [];
let nextStep = 0;
/** The id of the ToolSearch call the current step made to load its tools, or null. */
let loading = null;
let counter = 0;

const record = fs.openSync(recordPath, "a");
function writeRecord(entry) {
    fs.writeSync(record, JSON.stringify(entry) + "\n");
}

// --- matching ----------------------------------------------------------------------------------

/** The texts of the tool results a request carries back to the model. */
function toolOutputs(api, body) {
    const texts = [];
    const text = (value) => (typeof value === "string" ? value : JSON.stringify(value));
    if (api === "responses") {
        for (const item of Array.isArray(body.input) ? body.input : []) {
            if (item && typeof item.type === "string" && item.type.endsWith("_call_output")) {
                texts.push(text(item.output));
            }
        }
    } else {
        for (const message of Array.isArray(body.messages) ? body.messages : []) {
            for (const block of Array.isArray(message.content) ? message.content : []) {
                if (block && block.type === "tool_result") texts.push(text(block.content));
            }
        }
    }
    return texts;
}

/** Whether a Messages request carries the result of the tool call `id`. */
function carriesResultOf(body, id) {
    return (Array.isArray(body.messages) ? body.messages : []).some((message) =>
        (Array.isArray(message.content) ? message.content : []).some(
            (block) => block && block.type === "tool_result" && block.tool_use_id === id,
        ),
    );
}

function matches(when, api, raw, body) {
    if (!when) return true;
    if (when.body_contains !== undefined && !raw.includes(when.body_contains)) return false;
    if (when.body_lacks !== undefined && raw.includes(when.body_lacks)) return false;
    if (when.model_contains !== undefined && !String(body.model ?? "").includes(when.model_contains)) return false;
    if (when.tools !== undefined) {
        const offers = Array.isArray(body.tools) && body.tools.length > 0;
        if (offers !== when.tools) return false;
    }
    const outputs = toolOutputs(api, body);
    if (when.tool_output_contains !== undefined && !outputs.some((text) => text.includes(when.tool_output_contains))) {
        return false;
    }
    if (when.no_tool_output === true && outputs.length > 0) return false;
    return true;
}

// --- tools -------------------------------------------------------------------------------------

/**
 * Where the client offered `tool` (gatehouse's `server__tool` name): `{ name, namespace? }`,
 * or throws, naming what was offered.
 */
function resolveTool(api, body, tool) {
    const offered = Array.isArray(body.tools) ? body.tools : [];
    const found = [];
    const names = [];
    for (const entry of offered) {
        if (!entry || typeof entry !== "object") continue;
        if (entry.type === "namespace" && Array.isArray(entry.tools)) {
            for (const inner of entry.tools) {
                names.push(`${entry.name}/${inner.name}`);
                if (inner.name === tool && String(entry.name).startsWith("mcp__")) {
                    found.push({ name: inner.name, namespace: entry.name });
                }
            }
            continue;
        }
        const name = entry.name;
        if (typeof name !== "string") continue;
        names.push(name);
        if (name.startsWith("mcp__") && name.endsWith(`__${tool}`)) found.push({ name });
    }
    if (found.length === 0 && api === "messages") {
        // Claude Code defers MCP tools by default: only their names are listed (in the text of
        // the conversation), and the model loads a schema with its ToolSearch tool
        // (`select:NAME`) before calling it.
        const deferred = deferredName(body, tool);
        if (deferred !== null && names.includes("ToolSearch")) return { load: deferred };
    }
    if (found.length !== 1) {
        throw new Error(
            `tool ${JSON.stringify(tool)} is offered ${found.length} times (want once); offered: ${names.join(", ")}`,
        );
    }
    return found[0];
}

/** The one `mcp__SERVER__tool` name the request's text lists for a deferred `tool`, or null. */
function deferredName(body, tool) {
    const text = JSON.stringify([body.system ?? null, body.messages ?? null]);
    const pattern = new RegExp(`mcp__[A-Za-z0-9_-]+?__${tool.replace(/[^A-Za-z0-9_]/g, "\\$&")}(?![A-Za-z0-9_-])`, "g");
    const names = [...new Set(text.match(pattern) ?? [])];
    return names.length === 1 ? names[0] : null;
}

// --- replies -----------------------------------------------------------------------------------

function sse(res, event, data) {
    res.write(`event: ${event}\ndata: ${JSON.stringify({ type: event, ...data })}\n\n`);
}

function replyCalls(reply) {
    if (Array.isArray(reply.calls)) return reply.calls;
    if (reply.call) return [reply.call];
    return [];
}

/** The Responses API's output items for `reply`. */
function responsesOutput(n, reply, body) {
    const calls = replyCalls(reply);
    if (calls.length === 0) {
        if (typeof reply.text !== "string") throw new Error("a reply needs `text` or `call`/`calls`");
        return [{
            type: "message",
            id: `msg_${n}`,
            role: "assistant",
            status: "completed",
            content: [{ type: "output_text", text: reply.text, annotations: [] }],
        }];
    }
    return calls.map((call, index) => {
        const where = resolveTool("responses", body, call.tool);
        const item = {
            type: "function_call",
            id: `fc_${n}_${index}`,
            call_id: `call_${n}_${index}`,
            name: where.name,
            arguments: JSON.stringify(call.arguments ?? {}),
            status: "completed",
        };
        if (where.namespace) item.namespace = where.namespace;
        return item;
    });
}

function answerResponses(res, n, reply, body) {
    const output = responsesOutput(n, reply, body);
    const id = `resp_${n}`;
    const usage = {
        input_tokens: 10,
        input_tokens_details: { cached_tokens: 0 },
        output_tokens: 5,
        output_tokens_details: { reasoning_tokens: 0 },
        total_tokens: 15,
    };
    res.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache" });
    sse(res, "response.created", { response: { id, object: "response", status: "in_progress", output: [] } });
    output.forEach((item, index) => {
        sse(res, "response.output_item.added", { output_index: index, item: { ...item, status: "in_progress" } });
        if (item.type === "message") {
            sse(res, "response.output_text.delta", {
                item_id: item.id,
                output_index: index,
                content_index: 0,
                delta: item.content[0].text,
            });
        }
        sse(res, "response.output_item.done", { output_index: index, item });
    });
    sse(res, "response.completed", { response: { id, object: "response", status: "completed", output, usage } });
    res.end();
}

/**
 * The Messages API's content blocks for `reply`: its text and tool calls, or, while a tool it
 * calls is deferred, one ToolSearch call loading them all (then `loading` is that call's id).
 */
function messagesContent(n, reply, body) {
    const calls = replyCalls(reply);
    const resolved = calls.map((call) => resolveTool("messages", body, call.tool));
    const load = resolved.filter((where) => where.load).map((where) => where.load);
    if (load.length > 0) {
        const id = `toolu_${n}_load`;
        const input = { query: `select:${load.join(",")}`, max_results: load.length };
        return { content: [{ type: "tool_use", id, name: "ToolSearch", input }], loading: id };
    }
    const content = [];
    if (typeof reply.text === "string") content.push({ type: "text", text: reply.text });
    calls.forEach((call, index) => {
        content.push({ type: "tool_use", id: `toolu_${n}_${index}`, name: resolved[index].name, input: call.arguments ?? {} });
    });
    if (content.length === 0) throw new Error("a reply needs `text` or `call`/`calls`");
    return { content, loading: null };
}

/** Answers `reply` on the Messages API; returns the id of a ToolSearch call it made, or null. */
function answerMessages(res, n, reply, body) {
    const { content, loading } = messagesContent(n, reply, body);
    const stopReason = content.some((block) => block.type === "tool_use") ? "tool_use" : "end_turn";
    const usage = { input_tokens: 10, output_tokens: 5, cache_creation_input_tokens: 0, cache_read_input_tokens: 0 };
    const message = {
        id: `msg_${n}`,
        type: "message",
        role: "assistant",
        model: String(body.model ?? "scripted"),
        stop_sequence: null,
        usage,
    };
    if (body.stream !== true) {
        res.writeHead(200, { "content-type": "application/json" });
        res.end(JSON.stringify({ ...message, content, stop_reason: stopReason }));
        return loading;
    }
    res.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache" });
    sse(res, "message_start", { message: { ...message, content: [], stop_reason: null } });
    content.forEach((block, index) => {
        if (block.type === "text") {
            sse(res, "content_block_start", { index, content_block: { type: "text", text: "" } });
            sse(res, "content_block_delta", { index, delta: { type: "text_delta", text: block.text } });
        } else {
            sse(res, "content_block_start", {
                index,
                content_block: { type: "tool_use", id: block.id, name: block.name, input: {} },
            });
            sse(res, "content_block_delta", {
                index,
                delta: { type: "input_json_delta", partial_json: JSON.stringify(block.input) },
            });
        }
        sse(res, "content_block_stop", { index });
    });
    sse(res, "message_delta", { delta: { stop_reason: stopReason, stop_sequence: null }, usage: { output_tokens: 5 } });
    sse(res, "message_stop", {});
    res.end();
    return loading;
}

// --- the server --------------------------------------------------------------------------------

function apiOf(method, url) {
    const path = url.split("?")[0];
    if (method === "POST" && path === "/v1/responses") return "responses";
    if (method === "POST" && path === "/v1/messages") return "messages";
    return null;
}

function fail(res, entry, status, message) {
    entry.error = message;
    writeRecord(entry);
    process.stderr.write(`model-server: ${message}\n`);
    res.writeHead(status, { "content-type": "application/json" });
    res.end(JSON.stringify({ error: { type: "scripted_model_server", message } }));
}

const server = http.createServer((req, res) => {
    const chunks = [];
    req.on("data", (chunk) => chunks.push(chunk));
    req.on("end", () => {
        const n = ++counter;
        const raw = Buffer.concat(chunks).toString("utf8");
        let body;
        try {
            body = raw ? JSON.parse(raw) : {};
        } catch {
            body = raw;
        }
        const api = apiOf(req.method, req.url);
        const entry = { n, method: req.method, url: req.url, api, headers: req.headers, body, step: null, rule: null };
        if (!req.url.startsWith("/")) {
            return fail(res, entry, 500, `unexpected proxy request ${req.method} ${req.url}: something tried to leave the machine`);
        }
        if (api === null || typeof body !== "object" || body === null) {
            return fail(res, entry, 500, `unexpected request ${req.method} ${req.url}`);
        }
        let reply = null;
        let step = null;
        if (loading !== null) {
            // The step whose tools a ToolSearch call loads goes on with the request that
            // carries that call's result.
            if (api === "messages" && carriesResultOf(body, loading)) step = nextStep;
        } else if (nextStep < steps.length && (steps[nextStep].api ?? api) === api && matches(steps[nextStep].when, api, raw, body)) {
            step = nextStep;
        }
        if (step !== null) {
            entry.step = step;
            reply = steps[step].reply;
        } else {
            const rule = anyRules.findIndex((rule) => (rule.api ?? api) === api && matches(rule.when, api, raw, body));
            if (rule >= 0) {
                entry.rule = rule;
                reply = anyRules[rule].reply;
            }
        }
        if (reply === null) {
            const expected = nextStep < steps.length ? `step ${nextStep} (${JSON.stringify(steps[nextStep].when ?? {})})` : "no more requests";
            return fail(res, entry, 500, `unexpected ${api} request ${n}: expected ${expected}`);
        }
        try {
            if (api === "responses") {
                answerResponses(res, n, reply, body);
            } else {
                const load = answerMessages(res, n, reply, body);
                if (step !== null) loading = load;
                if (load !== null) entry.loading = load;
            }
        } catch (error) {
            return fail(res, entry, 500, `request ${n}: ${error.message}`);
        }
        if (step !== null && loading === null) nextStep += 1;
        writeRecord(entry);
    });
});

// Proxy tunnels (HTTPS through HTTPS_PROXY): nothing is allowed off the machine.
server.on("connect", (req, socket) => {
    const entry = { n: ++counter, method: "CONNECT", url: req.url, api: null, headers: req.headers, body: null, step: null, rule: null };
    entry.error = `unexpected proxy tunnel CONNECT ${req.url}: something tried to leave the machine`;
    writeRecord(entry);
    process.stderr.write(`model-server: ${entry.error}\n`);
    socket.end("HTTP/1.1 403 Forbidden\r\ncontent-length: 0\r\n\r\n");
});

server.listen(0, "127.0.0.1", () => {
    process.stdout.write(`listening on http://127.0.0.1:${server.address().port}\n`);
});

const stop = () => {
    server.close();
    server.closeAllConnections();
    process.exit(0);
};
process.on("SIGTERM", stop);
process.on("SIGINT", stop);
process.stdin.on("end", stop);
process.stdin.on("error", stop);
process.stdin.resume();
