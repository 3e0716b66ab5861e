// src/isolated/isolated.ts: mesh-isolated, the resident isolate host.
//
// Keeps one Deno runtime warm on loopback and runs each evaluation in a
// fresh V8 isolate (a Worker with permissions "none": no filesystem, no
// subprocess, no environment, no FFI; network only to the hosts the request
// allows, enforced by Deno's permission list).  The isolate is terminated
// when it ends, when its wall time is up, or when it writes more output
// than allowed; another evaluation never shares its isolate.
//
// Protocol (JSON over HTTP, errors as {"error":{"code","message"}}):
//   GET  /v1/health   -> {"ok":true,"languages":["javascript"],"running":N}
//   POST /v1/eval     {"language","code","input","timeout_ms","max_output_bytes","allow_hosts":[..]}
//                     -> {"value","stdout","error","duration_ms","timed_out","output_limited",
//                         "egress_denials":[{"host","reason"}]}
//   429 too_many_isolates when mesh.isolate_max_concurrent evaluations already run.

const port = Number(Deno.args[0] ?? "5690");
const maxConcurrent = Number(Deno.args[1] ?? "8");
const workerUrl = new URL("./isolate_worker.ts", import.meta.url).href;
let running = 0;

type EvalRequest = {
  language?: string;
  code?: string;
  input?: unknown;
  timeout_ms?: number;
  max_output_bytes?: number;
  allow_hosts?: string[];
};

// An error answer with a stable code, as the other daemons give them.
function fail(status: number, code: string, message: string): Response {
  return Response.json({ error: { code, message } }, { status });
}

// A new isolate with no permissions but network to HOSTS (none when empty).
function newIsolate(hosts: string[]): Worker {
  return new Worker(workerUrl, {
    type: "module",
    // deno-lint-ignore no-explicit-any
    deno: { permissions: hosts.length ? { net: hosts, read: false, write: false, run: false, env: false, ffi: false, sys: false, import: false } : "none" } as any,
  });
}

// Isolates started ahead, with no permissions, each used for one evaluation
// and then terminated: warm starts without ever sharing an isolate.
const spares: Worker[] = [];
const spareCount = Number(Deno.args[2] ?? "2");
function refill() {
  while (spares.length < spareCount) spares.push(newIsolate([]));
}
refill();

// One evaluation in its own isolate; resolves with the row mesh_eval returns.
function evaluate(req: EvalRequest): Promise<Record<string, unknown>> {
  const started = performance.now();
  const hosts = (req.allow_hosts ?? []).filter((h) => typeof h === "string" && h.length > 0);
  const worker = hosts.length || spares.length === 0 ? newIsolate(hosts) : spares.shift()!;
  setTimeout(refill, 0);
  const timeout = Math.max(1, req.timeout_ms ?? 5000);
  const maxOut = Math.max(0, req.max_output_bytes ?? 65536);
  return new Promise((resolve) => {
    let done = false;
    const finish = (row: Record<string, unknown>) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      worker.terminate();
      row.duration_ms = performance.now() - started;
      resolve(row);
    };
    const timer = setTimeout(() => finish({ value: null, stdout: "", error: `evaluation stopped: wall time over ${timeout} ms`, timed_out: true, output_limited: false, egress_denials: [] }), timeout);
    worker.onmessage = (e: MessageEvent) => finish({ ...e.data, timed_out: false });
    worker.onerror = (e: ErrorEvent) => {
      e.preventDefault();
      finish({ value: null, stdout: "", error: String(e.message ?? e), timed_out: false, output_limited: false, egress_denials: [] });
    };
    worker.postMessage({ language: req.language, code: req.code, input: req.input ?? null, max_output_bytes: maxOut });
  });
}

Deno.serve({ hostname: "127.0.0.1", port, onListen: () => console.error(`mesh-isolated: listening on 127.0.0.1:${port}`) }, async (request) => {
  const url = new URL(request.url);
  if (url.pathname === "/v1/health" && request.method === "GET")
    return Response.json({ ok: true, languages: ["javascript"], running });
  if (url.pathname !== "/v1/eval" || request.method !== "POST")
    return fail(404, "not_found", "no such endpoint");
  let body: EvalRequest;
  try {
    body = await request.json();
  } catch {
    return fail(400, "bad_request", "body must be a JSON object");
  }
  if (typeof body.code !== "string")
    return fail(400, "bad_request", "code must be a string");
  if (body.language !== "javascript")
    return fail(400, "language_unsupported", `language "${body.language}" is not offered (javascript only)`);
  if (running >= maxConcurrent)
    return fail(429, "too_many_isolates", `${maxConcurrent} evaluations already run on this host`);
  running++;
  try {
    return Response.json(await evaluate(body));
  } finally {
    running--;
  }
});
