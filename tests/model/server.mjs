#!/usr/bin/env node
// A minimal OpenAI-compatible chat-completions server around node-llama-cpp, for gatehouse's
// end-to-end model test. One model, one request at a time, CPU only.
//
//   node tests/model/server.mjs --model PATH.gguf --port 0 [--host 127.0.0.1] [--threads 1]
//        [--context-size 2048] [--max-tokens-cap 256] [--json-string-max-length 200]
//
// Once the model is loaded and the socket listens, it prints exactly one line on stdout:
//   listening http://HOST:PORT
// Everything else (llama.cpp logs, request log, warnings) goes to stderr.
//
//   node tests/model/server.mjs --check [--model PATH.gguf]
// loads the prebuilt llama.cpp binary (and the model, if given) and exits 0; `setup` uses it.

import http from "node:http";
import path from "node:path";
import process from "node:process";
import { randomUUID } from "node:crypto";
import { parseArgs } from "node:util";

// Keep stdout for the single "listening" line: route every console method that writes to stdout
// (node-llama-cpp and its dependencies use console.log/info) to stderr instead.
console.log = console.error;
console.info = console.error;
console.debug = console.error;

const usage = "usage: node server.mjs --model PATH.gguf [--port 0] [--host 127.0.0.1] [--threads 1] " +
    "[--context-size 2048] [--max-tokens-cap 256] [--json-string-max-length 200] [--model-name NAME]\n" +
    "       node server.mjs --check [--model PATH.gguf]";

let args;
try {
    ({ values: args } = parseArgs({
        options: {
            model: { type: "string" },
            port: { type: "string", default: "0" },
            host: { type: "string", default: "127.0.0.1" },
            threads: { type: "string", default: "1" },
            "context-size": { type: "string", default: "2048" },
            "max-tokens-cap": { type: "string", default: "256" },
            "json-string-max-length": { type: "string", default: "200" },
            "model-name": { type: "string" },
            check: { type: "boolean" },
            help: { type: "boolean", short: "h" }
        },
        strict: true
    }));
} catch (err) {
    console.error(`${err.message}\n${usage}`);
    process.exit(2);
}
if (args.help) {
    console.error(usage);
    process.exit(0);
}

function intArg(name, min, max) {
    const value = Number(args[name]);
    if (!Number.isInteger(value) || value < min || value > max) {
        console.error(`--${name} must be an integer in [${min}, ${max}], got ${JSON.stringify(args[name])}\n${usage}`);
        process.exit(2);
    }
    return value;
}

if (args.model == null && !args.check) {
    console.error(`--model is required\n${usage}`);
    process.exit(2);
}
const modelPath = args.model == null ? null : path.resolve(args.model);
const port = intArg("port", 0, 65535);
const threads = intArg("threads", 1, 64);
const contextSize = intArg("context-size", 256, 131072);
const maxTokensCap = intArg("max-tokens-cap", 1, 1 << 20);
// Under a JSON-schema grammar, cap every free-text string at this many characters (0 = no cap).
// A small model can loop inside a string ("... may contain ... may contain ...") until max_tokens
// cuts it off, leaving unparseable JSON; a bounded string always closes, and the output still
// matches the caller's schema (it only tightens maxLength).
const jsonStringMaxLength = intArg("json-string-max-length", 0, 1 << 20);
const modelName = args["model-name"] ?? path.basename(modelPath ?? "").replace(/\.gguf$/i, "");

const { getLlama, LlamaChat, LlamaLogLevel } = await import("node-llama-cpp");

const log = (...parts) => console.error("[model-server]", ...parts);

const loadStart = performance.now();
const llama = await getLlama({
    gpu: false,
    build: "never",
    maxThreads: threads,
    logLevel: LlamaLogLevel.warn,
    logger: (level, message) => process.stderr.write(`[llama.cpp ${level}] ${message.trimEnd()}\n`)
});
if (args.check && modelPath == null) {
    log(`llama.cpp binary ok (${llama.buildType}, gpu ${llama.gpu})`);
    await llama.dispose();
    process.exit(0);
}
const model = await llama.loadModel({ modelPath, gpuLayers: 0 });
const context = await model.createContext({ contextSize, threads, sequences: 1 });
log(`loaded ${modelPath} in ${Math.round(performance.now() - loadStart)} ms ` +
    `(context ${context.contextSize} tokens, ${threads} thread(s), max_tokens cap ${maxTokensCap})`);
if (args.check) {
    await context.dispose();
    await model.dispose();
    await llama.dispose();
    process.exit(0);
}

const created = Math.floor(Date.now() / 1000);

// ---------------------------------------------------------------------------------------------
// Errors in OpenAI's shape

class HttpError extends Error {
    constructor(status, message, { type = "invalid_request_error", code = null, param = null } = {}) {
        super(message);
        this.status = status;
        this.type = type;
        this.code = code;
        this.param = param;
    }
}

function sendJson(res, status, body) {
    const text = JSON.stringify(body);
    res.writeHead(status, {
        "content-type": "application/json",
        "content-length": Buffer.byteLength(text)
    });
    res.end(text);
}

function sendError(res, err) {
    const status = err instanceof HttpError ? err.status : 500;
    sendJson(res, status, {
        error: {
            message: err.message ?? String(err),
            type: err instanceof HttpError ? err.type : "server_error",
            param: err.param ?? null,
            code: err.code ?? null
        }
    });
}

// ---------------------------------------------------------------------------------------------
// Request parsing

const maxBodyBytes = 4 * 1024 * 1024;

function readBody(req) {
    return new Promise((resolve, reject) => {
        const chunks = [];
        let size = 0;
        req.on("data", (chunk) => {
            size += chunk.length;
            if (size > maxBodyBytes) {
                reject(new HttpError(413, `request body exceeds ${maxBodyBytes} bytes`));
                req.destroy();
                return;
            }
            chunks.push(chunk);
        });
        req.on("end", () => resolve(Buffer.concat(chunks).toString("utf8")));
        req.on("error", reject);
    });
}

function contentText(content, index) {
    if (typeof content === "string")
        return content;
    if (content == null)
        return "";
    if (Array.isArray(content)) {
        return content.map((part) => {
            if (typeof part === "string")
                return part;
            if (part != null && (part.type === "text" || part.type === "input_text") && typeof part.text === "string")
                return part.text;
            throw new HttpError(400, `messages[${index}].content: only text parts are supported`, { param: "messages" });
        }).join("");
    }
    throw new HttpError(400, `messages[${index}].content must be a string or an array of text parts`, { param: "messages" });
}

// OpenAI messages -> node-llama-cpp chat history, ending with an empty model turn to complete.
function toChatHistory(messages) {
    if (!Array.isArray(messages) || messages.length === 0)
        throw new HttpError(400, "'messages' must be a non-empty array", { param: "messages" });
    const history = [];
    messages.forEach((message, index) => {
        if (message == null || typeof message !== "object")
            throw new HttpError(400, `messages[${index}] must be an object`, { param: "messages" });
        const text = contentText(message.content, index);
        switch (message.role) {
            case "system":
            case "developer":
                history.push({ type: "system", text });
                break;
            case "user":
                history.push({ type: "user", text });
                break;
            case "assistant":
                history.push({ type: "model", response: [text] });
                break;
            case "tool":
                history.push({ type: "user", text: `Tool result${message.tool_call_id ? ` (${message.tool_call_id})` : ""}:\n${text}` });
                break;
            default:
                throw new HttpError(400, `messages[${index}].role ${JSON.stringify(message.role)} is not supported`, { param: "messages" });
        }
    });
    history.push({ type: "model", response: [] });
    return history;
}

function numberParam(body, name, { min, max, integer = false }) {
    const value = body[name];
    if (value == null)
        return undefined;
    if (typeof value !== "number" || !Number.isFinite(value) || (integer && !Number.isInteger(value)) || value < min || value > max)
        throw new HttpError(400, `'${name}' must be ${integer ? "an integer" : "a number"} in [${min}, ${max}]`, { param: name });
    return value;
}

// ---------------------------------------------------------------------------------------------
// JSON schema -> the subset node-llama-cpp's grammar generator understands.
//
// node-llama-cpp (3.21) supports: type (incl. arrays of types), const, enum, oneOf, properties,
// additionalProperties, min/maxProperties, items, prefixItems, min/maxItems, min/maxLength,
// format (date-time|time|date only), $defs and $ref "#/$defs/NAME", description.
// It generates EVERY listed property, in order, whether or not it is in `required`, and a schema
// without any of the keywords above becomes `null`; so map anyOf to oneOf, definitions to $defs,
// and turn "anything" schemas into an explicit any-JSON alternative. Free-text strings get
// maxLength <= --json-string-max-length (see above).

const supportedFormats = new Set(["date-time", "time", "date"]);
const anyJson = () => ({
    oneOf: [
        { type: ["string", "number", "boolean", "null"] },
        { type: "object", additionalProperties: true },
        { type: "array" }
    ]
});

function sanitizeSchema(schema) {
    if (schema === true || schema == null)
        return anyJson();
    if (typeof schema !== "object" || Array.isArray(schema))
        throw new Error("schema must be an object");

    if (Array.isArray(schema.allOf) && schema.allOf.length === 1) {
        const { allOf, ...rest } = schema;
        return sanitizeSchema({ ...rest, ...allOf[0] });
    }

    const out = {};
    if (typeof schema.description === "string")
        out.description = schema.description;

    const defs = schema.$defs ?? schema.definitions;
    if (defs != null && typeof defs === "object")
        out.$defs = Object.fromEntries(Object.entries(defs).map(([name, def]) => [name, sanitizeSchema(def)]));

    if (typeof schema.$ref === "string") {
        out.$ref = schema.$ref.replace(/^#\/definitions\//, "#/$defs/");
        return out;
    }
    if ("const" in schema) {
        out.const = schema.const;
        return out;
    }
    if (Array.isArray(schema.enum)) {
        out.enum = schema.enum.filter((v) => v === null || ["string", "number", "boolean"].includes(typeof v));
        return out;
    }
    const alternatives = schema.oneOf ?? schema.anyOf;
    if (Array.isArray(alternatives) && alternatives.length > 0) {
        out.oneOf = alternatives.map(sanitizeSchema);
        return out;
    }

    const types = Array.isArray(schema.type) ? schema.type : schema.type == null ? [] : [schema.type];
    const known = ["string", "number", "integer", "boolean", "null", "object", "array"];
    if (types.some((t) => !known.includes(t)))
        throw new Error(`unsupported type ${JSON.stringify(schema.type)}`);

    const objectSchema = () => {
        const obj = { type: "object" };
        if (out.description) obj.description = out.description;
        const props = schema.properties ?? {};
        if (Object.keys(props).length > 0)
            obj.properties = Object.fromEntries(Object.entries(props).map(([k, v]) => [k, sanitizeSchema(v)]));
        if (schema.additionalProperties === true ||
            (schema.additionalProperties == null && obj.properties == null))
            obj.additionalProperties = true;
        else if (schema.additionalProperties != null && typeof schema.additionalProperties === "object")
            obj.additionalProperties = sanitizeSchema(schema.additionalProperties);
        if (Array.isArray(schema.required))
            obj.required = schema.required.filter((k) => obj.properties != null && k in obj.properties);
        for (const key of ["minProperties", "maxProperties"])
            if (typeof schema[key] === "number") obj[key] = schema[key];
        return obj;
    };
    const arraySchema = () => {
        const arr = { type: "array" };
        if (out.description) arr.description = out.description;
        if (schema.items != null && typeof schema.items === "object" && !Array.isArray(schema.items))
            arr.items = sanitizeSchema(schema.items);
        const prefix = schema.prefixItems ?? (Array.isArray(schema.items) ? schema.items : undefined);
        if (Array.isArray(prefix))
            arr.prefixItems = prefix.map(sanitizeSchema);
        for (const key of ["minItems", "maxItems"])
            if (typeof schema[key] === "number") arr[key] = schema[key];
        return arr;
    };
    const stringSchema = () => {
        const str = { type: "string" };
        if (out.description) str.description = out.description;
        if (typeof schema.format === "string" && supportedFormats.has(schema.format)) {
            str.format = schema.format;
            return str;
        }
        const minLength = typeof schema.minLength === "number" ? schema.minLength : 0;
        let maxLength = typeof schema.maxLength === "number" ? schema.maxLength : undefined;
        if (jsonStringMaxLength > 0)
            maxLength = Math.max(minLength, Math.min(maxLength ?? Infinity, jsonStringMaxLength));
        if (minLength > 0) str.minLength = minLength;
        if (maxLength != null) str.maxLength = maxLength;
        return str;
    };

    if (types.length === 0) {
        if (schema.properties != null)
            return { ...out, ...objectSchema() };
        if (schema.items != null || schema.prefixItems != null)
            return { ...out, ...arraySchema() };
        return { ...out, ...anyJson() };
    }
    if (types.length === 1) {
        if (types[0] === "object") return { ...out, ...objectSchema() };
        if (types[0] === "array") return { ...out, ...arraySchema() };
        if (types[0] === "string") return { ...out, ...stringSchema() };
        out.type = types[0];
        return out;
    }
    // A union of types: keep structured members as their own alternatives.
    const simple = types.filter((t) => !["object", "array", "string"].includes(t));
    const alternativesOut = [];
    if (types.includes("string")) alternativesOut.push(stringSchema());
    if (simple.length > 0) alternativesOut.push({ type: simple });
    if (types.includes("object")) alternativesOut.push(objectSchema());
    if (types.includes("array")) alternativesOut.push(arraySchema());
    out.oneOf = alternativesOut;
    return out;
}

// Grammar creation compiles GBNF; cache by schema text since a test sends the same schema repeatedly.
const grammarCache = new Map();

async function grammarFor(responseFormat) {
    if (responseFormat == null)
        return null;
    const type = responseFormat.type;
    if (type == null || type === "text")
        return null;
    if (type === "json_object") {
        if (!grammarCache.has("json"))
            grammarCache.set("json", await llama.getGrammarFor("json"));
        return grammarCache.get("json");
    }
    if (type !== "json_schema")
        throw new HttpError(400, `response_format.type ${JSON.stringify(type)} is not supported`, { param: "response_format" });

    const schema = responseFormat.json_schema?.schema ?? responseFormat.schema;
    if (schema == null || typeof schema !== "object")
        throw new HttpError(400, "response_format.json_schema.schema must be an object", { param: "response_format" });
    const key = JSON.stringify(schema);
    if (grammarCache.has(key))
        return grammarCache.get(key);
    let grammar;
    try {
        grammar = await llama.createGrammarForJsonSchema(sanitizeSchema(schema));
    } catch (err) {
        log(`grammar creation failed, generating unconstrained: ${err?.message ?? err}`);
        grammar = null;
    }
    grammarCache.set(key, grammar);
    return grammar;
}

// ---------------------------------------------------------------------------------------------
// Generation, one request at a time

let queue = Promise.resolve();
function serialized(task) {
    const run = queue.then(task, task);
    queue = run.catch(() => {});
    return run;
}

async function chatCompletion(body, signal) {
    if (body == null || typeof body !== "object" || Array.isArray(body))
        throw new HttpError(400, "request body must be a JSON object");
    if (body.stream === true)
        throw new HttpError(400, "streaming is not supported by this test server", { param: "stream" });
    if (body.n != null && body.n !== 1)
        throw new HttpError(400, "only n=1 is supported", { param: "n" });

    const history = toChatHistory(body.messages);
    const requestedMaxTokens = numberParam(body, "max_completion_tokens", { min: 1, max: 1 << 30, integer: true }) ??
        numberParam(body, "max_tokens", { min: 1, max: 1 << 30, integer: true });
    const maxTokens = Math.min(requestedMaxTokens ?? maxTokensCap, maxTokensCap);
    // OpenAI defaults to 1; this server defaults to greedy decoding so tests are repeatable.
    const temperature = numberParam(body, "temperature", { min: 0, max: 2 }) ?? 0;
    const topP = numberParam(body, "top_p", { min: 0, max: 1 });
    const seed = numberParam(body, "seed", { min: 0, max: 2 ** 32 - 1, integer: true });
    const responseFormat = body.response_format;
    if (responseFormat != null && (typeof responseFormat !== "object" || Array.isArray(responseFormat)))
        throw new HttpError(400, "'response_format' must be an object", { param: "response_format" });

    return serialized(async () => {
        if (signal.aborted)
            throw new HttpError(499, "client closed the request");
        const started = performance.now();
        const grammar = await grammarFor(responseFormat);
        const sequence = context.getSequence();
        const chat = new LlamaChat({ contextSequence: sequence, autoDisposeSequence: true });
        try {
            const promptTokens = chat.chatWrapper
                .generateContextState({ chatHistory: history })
                .contextText.tokenize(model.tokenizer).length;
            if (promptTokens + 1 >= context.contextSize)
                throw new HttpError(400, `the prompt is ${promptTokens} tokens; this server's context is ` +
                    `${context.contextSize} tokens (--context-size)`, { code: "context_length_exceeded", param: "messages" });
            const outputBefore = sequence.tokenMeter.usedOutputTokens;
            const result = await chat.generateResponse(history, {
                // Never let generation run past the end of the context (that would trigger a context shift).
                maxTokens: Math.min(maxTokens, context.contextSize - promptTokens - 1),
                temperature,
                topP,
                seed,
                grammar: grammar ?? undefined,
                signal,
                stopOnAbortSignal: true,
                // A context shift would silently drop the start of the prompt; refuse instead.
                contextShift: { strategy: () => { throw new HttpError(400, "prompt and output exceed the context", { code: "context_length_exceeded" }); } }
            });
            const completionTokens = sequence.tokenMeter.usedOutputTokens - outputBefore;
            const stopReason = result.metadata.stopReason;
            log(`${promptTokens} prompt + ${completionTokens} completion tokens in ` +
                `${Math.round(performance.now() - started)} ms (${stopReason}${grammar ? ", grammar" : ""})`);
            return {
                id: `chatcmpl-${randomUUID()}`,
                object: "chat.completion",
                created: Math.floor(Date.now() / 1000),
                model: typeof body.model === "string" && body.model !== "" ? body.model : modelName,
                choices: [{
                    index: 0,
                    message: { role: "assistant", content: result.response },
                    logprobs: null,
                    finish_reason: stopReason === "maxTokens" ? "length" : "stop"
                }],
                usage: {
                    prompt_tokens: promptTokens,
                    completion_tokens: completionTokens,
                    total_tokens: promptTokens + completionTokens
                }
            };
        } finally {
            chat.dispose({ disposeSequence: true });
        }
    });
}

// ---------------------------------------------------------------------------------------------
// HTTP

const server = http.createServer(async (req, res) => {
    const url = new URL(req.url ?? "/", "http://localhost");
    const route = url.pathname.replace(/\/+$/, "");
    const abort = new AbortController();
    res.on("close", () => {
        if (!res.writableFinished)
            abort.abort();
    });
    try {
        if (route === "/v1/chat/completions" || route === "/chat/completions") {
            if (req.method !== "POST")
                throw new HttpError(405, `${req.method} is not allowed on ${url.pathname}; use POST`);
            const text = await readBody(req);
            let body;
            try {
                body = JSON.parse(text);
            } catch (err) {
                throw new HttpError(400, `could not parse the request body as JSON: ${err.message}`);
            }
            sendJson(res, 200, await chatCompletion(body, abort.signal));
        } else if (route === "/v1/models" || route === "/models") {
            if (req.method !== "GET")
                throw new HttpError(405, `${req.method} is not allowed on ${url.pathname}; use GET`);
            sendJson(res, 200, {
                object: "list",
                data: [{ id: modelName, object: "model", created, owned_by: "gatehouse-test" }]
            });
        } else if (route === "/health" || route === "/v1/health") {
            sendJson(res, 200, { status: "ok", model: modelName });
        } else {
            throw new HttpError(404, `no route for ${req.method} ${url.pathname}`, { code: "not_found" });
        }
    } catch (err) {
        if (!(err instanceof HttpError))
            log(`request failed: ${err?.stack ?? err}`);
        if (!res.headersSent && !res.destroyed)
            sendError(res, err);
    }
});
server.keepAliveTimeout = 5000;

let shuttingDown = false;
async function shutdown(signalName) {
    if (shuttingDown)
        return;
    shuttingDown = true;
    log(`${signalName}: shutting down`);
    server.close();
    server.closeAllConnections?.();
    const force = setTimeout(() => process.exit(0), 5000);
    force.unref();
    try {
        await queue;
        await context.dispose();
        await model.dispose();
        await llama.dispose();
    } catch (err) {
        log(`dispose failed: ${err?.message ?? err}`);
    }
    process.exit(0);
}
process.on("SIGTERM", () => void shutdown("SIGTERM"));
process.on("SIGINT", () => void shutdown("SIGINT"));

server.on("error", (err) => {
    log(`server error: ${err.message}`);
    process.exit(1);
});
server.listen(port, args.host, () => {
    const address = server.address();
    const host = address.family === "IPv6" ? `[${address.address}]` : address.address;
    process.stdout.write(`listening http://${host}:${address.port}\n`);
});
