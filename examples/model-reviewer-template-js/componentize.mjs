// Turns dist/reviewer.js (compiled from src/ by tsc) into reviewer.wasm, a
// component of the `model-reviewer` world of ./wit (gatehouse:reviewer@0.2.0).
//
// componentize-js is called as a library: the `jco componentize` command of
// jco 1.35.0 cannot read a WIT path (its WASI shim fails with os error 44).

import { componentize } from "@bytecodealliance/componentize-js";
import { writeFile } from "node:fs/promises";
import { fileURLToPath } from "node:url";

const here = (path) => fileURLToPath(new URL(path, import.meta.url));

const { component, imports } = await componentize({
  sourcePath: here("./dist/reviewer.js"),
  witPath: here("./wit"),
  worldName: "model-reviewer",
  // No WASI: without these the engine imports stdio, clocks, random and HTTP,
  // which a reviewer must not use (and gatehouse's WASI denies anyway). The
  // price: an uncaught exception traps instead of printing to stderr.
  disableFeatures: ["stdio", "random", "clocks", "http", "fetch-event"],
});

await writeFile(here("./reviewer.wasm"), component);
console.log(
  `reviewer.wasm: ${component.length} bytes; imports ${imports.map(([iface, name]) => `${iface}#${name}`).join(", ")}`,
);
