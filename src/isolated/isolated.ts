// src/isolated/isolated.ts: mesh-isolated, the resident isolate host.
//
// Keeps one Deno runtime on loopback and runs each evaluation in a process
// of its own (src/isolated/isolate_child.ts): a fresh V8 isolate with no
// permissions (no filesystem, no subprocess, no environment, no FFI; network
// only to the hosts the request allows, enforced by Deno's permission list)
// under a memory bound (RLIMIT_DATA through prlimit, and V8's heap limit)
// and a CPU-time bound (RLIMIT_CPU: SIGXCPU at CPU_SECONDS, SIGKILL a second later).
// The process is killed when its wall time is up or its output runs over:
// a Worker's terminate() does not stop a busy isolate (measured: a
// `while (true) {}` kept its thread at 100% CPU after terminate), a killed
// process always stops, and an isolate that exhausts its memory takes only
// its own process down.  Spare processes are started ahead so an evaluation
// does not wait for a runtime to boot; each is used once.
//
// Usage: deno run ... isolated.ts PORT [MAX_CONCURRENT] [SPARES] [MEMORY_MB] [CPU_SECONDS]
//
// Protocol (JSON over HTTP, errors as {"error":{"code","message"}}):
//   GET  /v1/health   -> {"ok":true,"languages":["javascript"],"running":N}
//   POST /v1/eval     {"language","code","input","timeout_ms","max_output_bytes","allow_hosts":[..]}
//                     -> {"value","stdout","error","duration_ms","timed_out","output_limited",
//                         "egress_denials":[{"host","port","reason","at"}]}
//   429 too_many_isolates when MAX_CONCURRENT evaluations already run.

const port = Number(Deno.args[0] ?? "5690");
const maxConcurrent = Number(Deno.args[1] ?? "8");
const spareCount = Number(Deno.args[2] ?? "2");
// Each evaluation's memory: 1 GiB of data mappings at least (the V8 runtime
// reserves several hundred MB of them to start), half of it V8's heap.
const memoryMb = Math.max(1024, Number(Deno.args[3] ?? "1024"));
// Each evaluation's CPU time (its process's, the runtime's start included).
const cpuSeconds = Math.max(1, Number(Deno.args[4] ?? "10"));
const childPath = new URL("./isolate_child.ts", import.meta.url).pathname;
const denoPath = Deno.execPath();
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

// A process for one evaluation, waiting for its request on stdin: no
// permissions but network to HOSTS (none when empty), its memory bounded.
function newChild(hosts: string[]): Deno.ChildProcess {
  const args = [`--data=${memoryMb * 1048576}`, `--cpu=${cpuSeconds}:${cpuSeconds + 1}`, "--", denoPath, "run", "--quiet", "--no-prompt",
                `--v8-flags=--max-old-space-size=${Math.floor(memoryMb / 2)}`];
  if (hosts.length) args.push(`--allow-net=${hosts.join(",")}`);
  args.push(childPath);
  const env: Record<string, string> = { NO_COLOR: "1" };
  const cache = Deno.env.get("DENO_DIR");
  if (cache) env.DENO_DIR = cache;
  return new Deno.Command("prlimit", { args, stdin: "piped", stdout: "piped", stderr: "null", clearEnv: true, env }).spawn();
}

// Warm spares: each waits for one request; one that dies unasked is dropped.
const spares: Deno.ChildProcess[] = [];
function refill() {
  while (spares.length < spareCount) {
    const child = newChild([]);
    child.status.then(() => {
      const i = spares.indexOf(child);
      if (i >= 0) spares.splice(i, 1);
    });
    spares.push(child);
  }
}
refill();

function kill(child: Deno.ChildProcess) {
  try { child.kill("SIGKILL"); } catch { /* already gone */ }
}

// The row of an evaluation that gave no answer of its own.
const stopped = (error: string, extra: Record<string, unknown> = {}) =>
  ({ value: null, stdout: "", error, timed_out: false, output_limited: false, egress_denials: [], ...extra });

// The child's stdout as text, until its answer line (NONCE, JSON, newline) is
// complete or the stream ends; null past LIMIT bytes.  The answer is taken as
// soon as it is whole: a process's exit (V8's teardown) takes several ms more.
async function readAnswer(child: Deno.ChildProcess, nonce: string, limit: number): Promise<string | null> {
  const decoder = new TextDecoder();
  let text = "";
  let total = 0;
  for await (const chunk of child.stdout) {
    total += chunk.length;
    if (total > limit) return null;
    const from = Math.max(0, text.length - nonce.length);
    text += decoder.decode(chunk, { stream: true });
    const at = text.indexOf(nonce, from);
    if (at >= 0 && text.indexOf("\n", at) >= 0) break;
  }
  return text;
}

// One evaluation in its own process; resolves with the row mesh_eval returns.
async function evaluate(req: EvalRequest): Promise<Record<string, unknown>> {
  const started = performance.now();
  const hosts = (req.allow_hosts ?? []).filter((h) => typeof h === "string" && h.length > 0);
  const child = hosts.length || spares.length === 0 ? newChild(hosts) : spares.shift()!;
  const timeout = Math.max(1, req.timeout_ms ?? 5000);
  const maxOut = Math.max(0, req.max_output_bytes ?? 65536);
  const nonce = crypto.randomUUID();
  let timedOut = false;
  const timer = setTimeout(() => { timedOut = true; kill(child); }, timeout);
  let row: Record<string, unknown>;
  try {
    const writer = child.stdin.getWriter();
    await writer.write(new TextEncoder().encode(JSON.stringify({ code: req.code, input: req.input ?? null, max_output_bytes: maxOut, nonce })));
    await writer.close();
    // console output is bounded in the child; what it writes to stdout itself, here
    const answer = await readAnswer(child, nonce, 2 * maxOut + 1048576);
    if (answer === null) kill(child);
    const text = answer ?? "";
    const at = text.lastIndexOf(nonce);
    // with an answer, the process's exit is not waited for (it is killed below)
    const status = at >= 0 && !timedOut ? null : await child.status;
    if (timedOut)
      row = stopped(`evaluation stopped: wall time over ${timeout} ms`, { timed_out: true });
    else if (answer === null)
      row = stopped(`evaluation stopped: output over ${maxOut} bytes`, { output_limited: true });
    else if (at >= 0)
      row = { ...JSON.parse(text.slice(at + nonce.length, text.indexOf("\n", at))), timed_out: false };
    else if (status?.signal === "SIGXCPU")
      row = stopped(`evaluation stopped: CPU time over ${cpuSeconds} s`);
    else if (status?.signal === "SIGTRAP" || status?.signal === "SIGABRT" || status?.signal === "SIGSEGV")
      row = stopped(`evaluation stopped: memory over ${memoryMb} MB`);
    else
      row = stopped(`evaluation ended without an answer (exit ${status?.code}${status?.signal ? ", " + status.signal : ""})`);
  } catch (err) {
    row = timedOut
      ? stopped(`evaluation stopped: wall time over ${timeout} ms`, { timed_out: true })
      : stopped(`evaluation failed in the host: ${err instanceof Error ? err.message : err}`);
  } finally {
    clearTimeout(timer);
    kill(child);
    // the replacement spare starts once the answer is in: a runtime's start takes a core for
    // tens of ms, which on a small host would slow the evaluation it replaces
    setTimeout(refill, 0);
  }
  row.duration_ms = performance.now() - started;
  return row;
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
