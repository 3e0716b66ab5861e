// src/isolated/isolate_child.ts: one evaluation, in a process of its own.
//
// mesh-isolated (src/isolated/isolated.ts) starts this file with no
// permissions (no filesystem, no subprocess, no environment, no FFI; network
// only to the hosts the request allows) under a memory bound, keeps it
// waiting as a warm spare, and hands it one request on stdin.  It captures
// console output (bounded), runs the snippet as the body of an async
// function whose argument is `input`, writes its answer as the last line of
// stdout after the nonce the host sent, and exits.  The host kills it when
// its wall time is up: a process, unlike a Worker, stops for certain.
//
// The nonce lives in this module's scope, which the snippet (compiled with
// new Function, global scope only) cannot see: bytes the snippet writes to
// stdout itself cannot pass for the answer.

type Request = { code: string; input: unknown; max_output_bytes: number; nonce: string };

const encoder = new TextEncoder();
const writeStdout = Deno.stdout.writeSync.bind(Deno.stdout);
const exit = Deno.exit;
const realFetch = globalThis.fetch;
const stringify = JSON.stringify;

const request: Request = JSON.parse(await new Response(Deno.stdin.readable).text());
const { code, input, max_output_bytes, nonce } = request;
let out = "";
let limited = false;
const denials: { host: string; port: number; reason: string; at: string }[] = [];

// console.* collected up to the bound; past it the evaluation is stopped.
function write(...args: unknown[]) {
  const line = args.map((a) => (typeof a === "string" ? a : JSON.stringify(a))).join(" ") + "\n";
  if (out.length + line.length > max_output_bytes) {
    out += line.slice(0, Math.max(0, max_output_bytes - out.length));
    limited = true;
    throw new Error(`evaluation stopped: output over ${max_output_bytes} bytes`);
  }
  out += line;
}
for (const k of ["log", "info", "warn", "error", "debug"] as const)
  // deno-lint-ignore no-explicit-any
  (console as any)[k] = write;

// A fetch the permissions refuse is reported with its host and port (an egress denial).
globalThis.fetch = async (...args: Parameters<typeof fetch>) => {
  try {
    return await realFetch(...args);
  } catch (err) {
    if (err instanceof Deno.errors.NotCapable || err instanceof Deno.errors.PermissionDenied) {
      let host = "", port = 0;
      try {
        const u = new URL(String(args[0] instanceof Request ? args[0].url : args[0]));
        host = u.hostname;
        port = Number(u.port || (u.protocol === "https:" ? 443 : 80));
      } catch { /* not a URL: fetch failed on it before any connection */ }
      denials[denials.length] = { host, port, reason: "not in the run's egress allowlist", at: new Date().toISOString() };
    }
    throw err;
  }
};

function answer(row: Record<string, unknown>): never {
  writeStdout(encoder.encode("\n" + nonce + stringify({ ...row, stdout: out, output_limited: limited, egress_denials: denials }) + "\n"));
  exit(0);
}

try {
  const fn = new Function("input", `"use strict"; return (async () => {\n${code}\n})();`);
  let value = await fn(input);
  if (value === undefined) value = null;
  let json: unknown;
  try { json = JSON.parse(JSON.stringify(value)); } catch { json = String(value); }
  answer({ value: json, error: null });
} catch (err) {
  answer({ value: null, error: String(err instanceof Error ? `${err.name}: ${err.message}` : err) });
}
