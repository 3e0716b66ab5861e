// src/isolated/isolate_worker.ts: the code inside one evaluation's isolate.
//
// Receives {language, code, input, max_output_bytes}, captures console
// output (bounded), runs the snippet as the body of an async function whose
// argument is `input`, and posts back its value as JSON.  Denied network
// attempts are reported as egress denials.  Runs with no permissions but
// the hosts the request allowed.

type Msg = { language: string; code: string; input: unknown; max_output_bytes: number };

self.onmessage = async (e: MessageEvent<Msg>) => {
  const { code, input, max_output_bytes } = e.data;
  let out = "";
  let limited = false;
  const denials: { host: string; port: number; reason: string; at: string }[] = [];
  const write = (...args: unknown[]) => {
    const line = args.map((a) => (typeof a === "string" ? a : JSON.stringify(a))).join(" ") + "\n";
    if (out.length + line.length > max_output_bytes) {
      out += line.slice(0, Math.max(0, max_output_bytes - out.length));
      limited = true;
      throw new Error(`evaluation stopped: output over ${max_output_bytes} bytes`);
    }
    out += line;
  };
  for (const k of ["log", "info", "warn", "error", "debug"] as const)
    // deno-lint-ignore no-explicit-any
    (console as any)[k] = write;
  const realFetch = globalThis.fetch;
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
        denials.push({ host, port, reason: "not in the run's egress allowlist", at: new Date().toISOString() });
      }
      throw err;
    }
  };
  try {
    const fn = new Function("input", `"use strict"; return (async () => {\n${code}\n})();`);
    let value = await fn(input);
    if (value === undefined) value = null;
    let json: unknown;
    try { json = JSON.parse(JSON.stringify(value)); } catch { json = String(value); }
    self.postMessage({ value: json, stdout: out, error: null, output_limited: limited, egress_denials: denials });
  } catch (err) {
    self.postMessage({ value: null, stdout: out, error: String(err instanceof Error ? `${err.name}: ${err.message}` : err), output_limited: limited, egress_denials: denials });
  }
};
