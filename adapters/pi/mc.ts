// mc's adapter, built from adapters/source/pi.ts and adapters/source/core.js
// by `npm run build` in adapters/: edit those, not this file.


// source/core.js
import { spawn } from "node:child_process";
import { createHash } from "node:crypto";
import { MessageChannel, Worker, receiveMessageOnPort } from "node:worker_threads";
var TRANSFORM_TIMEOUT_MS = 3e4;
var REDUCE_TOOL = {
  name: "ctx_reduce",
  description: "Drop messages and tool outputs you no longer need, by §N§ tag. Applied at the next rebuild, never a cache miss; the newest tags are protected; ctx_expand brings them back.",
  input_schema: {
    type: "object",
    properties: { drop: { type: "string", description: "e.g. 3-5,12" } },
    required: ["drop"]
  }
};
function reduceSpec(specs) {
  const listed = Array.isArray(specs) ? specs.find((s) => s?.name === "ctx_reduce") : void 0;
  return typeof listed?.description === "string" && listed?.input_schema?.properties?.drop ? listed : REDUCE_TOOL;
}
var bin = (name, env) => process.env[env] || name;
function failureText(stderr) {
  const lines = stderr.trim().split("\n");
  let at = lines.length - 1;
  while (at > 0 && !/^mc-[a-z]+: error: /.test(lines[at] ?? "")) at--;
  if (!/^mc-[a-z]+: error: /.test(lines[at] ?? "")) at = lines.length - 1;
  return lines.slice(at).join("; ");
}
async function run(command, args, input, timeoutMs) {
  if (typeof Bun !== "undefined") return runBun(Bun, command, args, input, timeoutMs);
  return runNode(command, args, input, timeoutMs);
}
async function runBun(bun, command, args, input, timeoutMs) {
  let child;
  try {
    child = bun.spawn([command, ...args], { stdin: Buffer.from(input), stdout: "pipe", stderr: "pipe" });
  } catch (error) {
    return { code: -1, stdout: "", stderr: String(error) };
  }
  const spawned = child;
  const timer = setTimeout(() => spawned.kill("SIGKILL"), timeoutMs);
  const [stdout, stderr, code] = await Promise.all([
    new Response(spawned.stdout).text(),
    new Response(spawned.stderr).text(),
    spawned.exited
  ]);
  clearTimeout(timer);
  return {
    code: spawned.signalCode ? -1 : code,
    stdout,
    stderr: stderr + (spawned.signalCode ? `killed by ${spawned.signalCode}` : "")
  };
}
function runNode(command, args, input, timeoutMs) {
  return new Promise((resolve) => {
    let child;
    try {
      child = spawn(command, args, { stdio: ["pipe", "pipe", "pipe"] });
    } catch (error) {
      resolve({ code: -1, stdout: "", stderr: String(error) });
      return;
    }
    const spawned = child;
    const out = [];
    const err = [];
    const timer = setTimeout(() => spawned.kill("SIGKILL"), timeoutMs);
    spawned.stdout.on("data", (d) => out.push(d));
    spawned.stderr.on("data", (d) => err.push(d));
    spawned.on("error", (error) => {
      clearTimeout(timer);
      resolve({ code: -1, stdout: "", stderr: String(error) });
    });
    spawned.on("close", (code, signal) => {
      clearTimeout(timer);
      resolve({
        code: signal ? -1 : code ?? -1,
        stdout: Buffer.concat(out).toString("utf8"),
        stderr: Buffer.concat(err).toString("utf8") + (signal ? `killed by ${signal}` : "")
      });
    });
    spawned.stdin.on("error", () => {
    });
    spawned.stdin.end(input);
  });
}
var SERVE_RETRY_MS = 1e3;
var SERVE_RETRY_MAX_MS = 6e4;
var SERVE_QUEUE_WAIT_MS = 50;
var SERVE_SYNC_WAIT_MS = 250;
var SERVE_POLL_MS = 2;
var SERVE_MAX_REQUEST_BYTES = 64 * 1024 * 1024;
var RESIDENT_THREAD = `
const { workerData } = require("node:worker_threads")
const { spawn } = require("node:child_process")
const { port, signal } = workerData
let child = null
let generation = 0
let chunks = []
let stderr = ""
let request = null
function tell(message) {
  port.postMessage(message)
  Atomics.add(signal, 0, 1)
  Atomics.notify(signal, 0)
}
function gone(c, why) {
  if (c !== child) return
  child = null
  if (request) clearTimeout(request.timer)
  request = null
  tell({ type: "gone", generation, why, stderr })
}
function data(c, chunk) {
  if (c !== child) return
  let at = chunk.indexOf(10)
  while (at >= 0) {
    chunks.push(chunk.subarray(0, at))
    const answer = Buffer.concat(chunks).toString("utf8")
    chunks = []
    const answered = request
    request = null
    if (answered) {
      clearTimeout(answered.timer)
      tell({ type: "answer", generation, id: answered.id, answer })
    }
    chunk = chunk.subarray(at + 1)
    at = chunk.indexOf(10)
  }
  if (chunk.length) chunks.push(chunk)
}
port.on("message", (m) => {
  if (m.type === "start") {
    generation = m.generation
    chunks = []
    stderr = ""
    request = null
    let c
    try {
      c = spawn(m.command, ["serve"], { stdio: ["pipe", "pipe", "pipe"] })
    } catch (error) {
      tell({ type: "gone", generation, why: String(error), stderr: "" })
      return
    }
    child = c
    tell({ type: "started", generation, pid: c.pid })
    c.stdout.on("data", (chunk) => data(c, chunk))
    c.stderr.on("data", (chunk) => {
      if (c === child) stderr = (stderr + chunk).slice(-4000)
    })
    c.stdin.on("error", () => {})
    c.on("error", (error) => gone(c, String(error)))
    c.on("close", (code, sig) => gone(c, sig ? "killed by " + sig : "exit " + code))
  } else if (m.type === "request") {
    if (!child || m.generation !== generation) {
      tell({ type: "gone", generation: m.generation, why: "not running", stderr: "" })
      return
    }
    const c = child
    request = { id: m.id, timer: setTimeout(() => c.kill("SIGKILL"), m.timeoutMs) }
    c.stdin.write(m.line + "\\n")
  }
})
`;
var Resident = class {
  /** @param {{ syncWaitMs?: number }} [options] how long a call blocks for its answer (SERVE_SYNC_WAIT_MS) */
  constructor(options = {}) {
    this.syncWaitMs = options.syncWaitMs ?? SERVE_SYNC_WAIT_MS;
    this.worker = null;
    this.port = null;
    this.signal = null;
    this.running = false;
    this.generation = 0;
    this.pid = void 0;
    this.pending = null;
    this.ids = 0;
    this.queue = [];
    this.failures = 0;
    this.retryAt = 0;
    this.polling = null;
  }
  /**
   * Whether `line` may go to the resident process (on, not backing off, under the cap).
   * @param {string} line
   * @returns {boolean}
   */
  usable(line) {
    if (process.env.MC_TRANSFORM_SERVE === "0") return false;
    if (!this.running && Date.now() < this.retryAt) return false;
    return line.length * 3 <= SERVE_MAX_REQUEST_BYTES || Buffer.byteLength(line) <= SERVE_MAX_REQUEST_BYTES;
  }
  /** Start the process if it is not running and may be (its start overlaps the caller's own awaits). */
  warm() {
    if (this.running || process.env.MC_TRANSFORM_SERVE === "0" || Date.now() < this.retryAt) return;
    try {
      this.start();
    } catch {
      this.worker = null;
      this.failed();
    }
  }
  failed() {
    this.running = false;
    this.pid = void 0;
    this.failures++;
    this.retryAt = Date.now() + Math.min(SERVE_RETRY_MAX_MS, SERVE_RETRY_MS * 2 ** (this.failures - 1));
  }
  start() {
    if (!this.worker || !this.port) {
      const signal = new Int32Array(new SharedArrayBuffer(4));
      const { port1, port2 } = new MessageChannel();
      const worker = new Worker(RESIDENT_THREAD, { eval: true, workerData: { port: port2, signal }, transferList: [port2] });
      worker.unref();
      worker.on("error", (error) => {
        if (worker !== this.worker) return;
        this.worker = null;
        this.gone(`its thread failed: ${error}`, "");
      });
      this.worker = worker;
      this.port = port1;
      this.signal = signal;
    }
    this.generation++;
    this.running = true;
    this.port?.postMessage({ type: "start", command: bin("mc-transform", "MC_TRANSFORM_BIN"), generation: this.generation });
  }
  /** Take in what the thread said since (its start, answers, the process's end), in order. */
  drain() {
    if (!this.port) return;
    for (; ; ) {
      const received = receiveMessageOnPort(this.port);
      if (!received) return;
      const m = (
        /** @type {Told} */
        received.message
      );
      if (m.generation !== this.generation) continue;
      if (m.type === "started") {
        if (this.running) this.pid = m.pid;
      } else if (m.type === "answer") {
        const pending = this.pending;
        if (!pending || pending.id !== m.id) continue;
        this.pending = null;
        this.failures = 0;
        pending.resolve({ answer: m.answer });
        this.next();
      } else if (m.type === "gone" && this.running) {
        this.gone(m.why, m.stderr);
      }
    }
  }
  /**
   * @param {string} why
   * @param {string} stderr
   */
  gone(why, stderr) {
    this.failed();
    const pending = this.pending;
    this.pending = null;
    if (pending) {
      const said = failureText(stderr);
      pending.resolve({ died: `mc-transform serve ended while answering (${why})${said ? `: ${said}` : ""}` });
    }
    for (const waiting of this.queue.splice(0)) {
      clearTimeout(waiting.timer);
      waiting.resolve({ unavailable: "the resident process ended" });
    }
  }
  /** Send the next waiting request, if the process is idle. */
  next() {
    if (this.pending || !this.running) return;
    const waiting = this.queue.shift();
    if (!waiting) return;
    clearTimeout(waiting.timer);
    this.send(waiting.line, waiting.timeoutMs, waiting.resolve);
  }
  /**
   * Send `line`; block for its answer up to the sync wait, then poll for it.
   * @param {string} line
   * @param {number} timeoutMs
   * @param {(reply: Reply) => void} resolve
   */
  send(line, timeoutMs, resolve) {
    const port = this.port;
    const signal = this.signal;
    if (!port || !signal) {
      resolve({ unavailable: "mc-transform serve has no thread" });
      return;
    }
    const id = ++this.ids;
    this.pending = { id, resolve };
    port.postMessage({ type: "request", generation: this.generation, id, line, timeoutMs });
    const deadline = performance.now() + this.syncWaitMs;
    for (; ; ) {
      const seen = Atomics.load(signal, 0);
      this.drain();
      if (this.pending?.id !== id) return;
      const left = deadline - performance.now();
      if (left <= 0) break;
      Atomics.wait(signal, 0, seen, left);
    }
    this.poll();
  }
  poll() {
    if (this.polling) return;
    const tick = () => {
      this.polling = null;
      this.drain();
      if (this.pending) this.polling = setTimeout(tick, SERVE_POLL_MS);
    };
    this.polling = setTimeout(tick, SERVE_POLL_MS);
  }
  /**
   * Send one request line. Check usable() first.
   * @param {string} line
   * @param {number} timeoutMs the process is killed when its answer takes longer
   * @returns {Promise<Reply>}
   */
  request(line, timeoutMs) {
    this.drain();
    if (!this.running) {
      this.warm();
      if (!this.running) return Promise.resolve({ unavailable: "cannot start mc-transform serve" });
    }
    return new Promise((resolve) => {
      if (!this.pending) {
        this.send(line, timeoutMs, resolve);
        return;
      }
      const waiting = { line, resolve, timeoutMs, timer: void 0 };
      waiting.timer = setTimeout(() => {
        const at = this.queue.indexOf(waiting);
        if (at >= 0) this.queue.splice(at, 1);
        resolve({ unavailable: "busy" });
      }, SERVE_QUEUE_WAIT_MS);
      this.queue.push(waiting);
    });
  }
};
function asRun(answer) {
  if (answer.startsWith('{"error":')) {
    try {
      const error = JSON.parse(answer).error;
      const lines = [`mc-transform: error: ${error.message}`, ...(error.hints ?? []).map((h) => `mc-transform: hint: ${h}`)];
      return { code: error.exit ?? 1, stdout: "", stderr: lines.join("\n") };
    } catch {
    }
  }
  return { code: 0, stdout: answer, stderr: "" };
}
async function mcTransform(resident2, kind, request, args, input) {
  const line = `{"kind":${JSON.stringify(kind)},${request.slice(1)}`;
  if (resident2.usable(line)) {
    const reply = await resident2.request(line, TRANSFORM_TIMEOUT_MS);
    if (reply.died) return { code: -1, stdout: "", stderr: reply.died, died: true };
    if (reply.answer !== void 0) return asRun(reply.answer);
  }
  return run(bin("mc-transform", "MC_TRANSFORM_BIN"), args, input, TRANSFORM_TIMEOUT_MS);
}
var fingerprint = fingerprinter(typeof Bun !== "undefined" ? Bun : void 0);
function fingerprinter(bun) {
  if (bun && typeof bun.hash === "function") return (text2) => bun.hash(text2);
  return (text2) => createHash("sha1").update(text2).digest("base64");
}
var requests = 0;
async function pass(resident2, state, head, texts, warn, held) {
  const fields = head.slice(1, -1);
  const hashes = texts.map(fingerprint);
  for (let attempt = 0; attempt < 2; attempt++) {
    const kept = state.incremental;
    const base = resident2.running && kept?.generation === resident2.generation ? kept : void 0;
    const key = `${process.pid}.${++requests}`;
    let line;
    if (base) {
      const refs = texts.map((text2, i) => {
        const at = base.index.get(
          /** @type {string | number | bigint} */
          hashes[i]
        );
        return at !== void 0 && base.lengths[at] === text2.length ? at : text2;
      });
      line = `{"kind":"pass",${fields},"incremental":{"key":"${key}","base":"${base.key}","base_len":${base.lengths.length},"messages":[${refs.join(",")}]}}`;
    } else {
      line = `{"kind":"pass",${fields},"messages":[${texts.join(",")}],"incremental":{"key":"${key}"}}`;
    }
    if (!resident2.usable(line)) break;
    const reply = await resident2.request(line, TRANSFORM_TIMEOUT_MS);
    if (reply.unavailable || reply.answer === void 0) {
      if (reply.died) {
        state.incremental = void 0;
        warn(reply.died);
        return null;
      }
      break;
    }
    let answer;
    try {
      answer = JSON.parse(reply.answer);
    } catch (error) {
      state.incremental = void 0;
      warn(`mc-transform serve answered no JSON: ${error}`);
      return null;
    }
    if (answer === null || typeof answer !== "object") {
      state.incremental = void 0;
      warn(`mc-transform serve answered no JSON object: ${reply.answer.slice(0, 100)}`);
      return null;
    }
    if (answer.resync) {
      state.incremental = void 0;
      continue;
    }
    if (answer.error) {
      state.incremental = void 0;
      const failed = asRun(reply.answer);
      warn(`mc-transform failed (exit ${failed.code}): ${failureText(failed.stderr)}`);
      return null;
    }
    if (answer.pass?.decision === "wait" || !Array.isArray(answer.messages)) {
      state.incremental = void 0;
      return answer;
    }
    const previous = base?.output ?? [];
    const resolved = answer.messages.map((m) => typeof m === "number" ? previous[m] : m);
    if (resolved.some((m) => m === void 0)) {
      state.incremental = void 0;
      continue;
    }
    answer.messages = resolved;
    const index = /* @__PURE__ */ new Map();
    hashes.forEach((hash, i) => {
      if (!index.has(hash)) index.set(hash, i);
    });
    state.incremental = { generation: resident2.generation, key, index, lengths: texts.map((text2) => text2.length), output: resolved };
    held?.();
    return answer;
  }
  const result = await run(bin("mc-transform", "MC_TRANSFORM_BIN"), [], `{${fields},"messages":[${texts.join(",")}]}`, TRANSFORM_TIMEOUT_MS);
  if (result.code !== 0) {
    warn(`mc-transform failed (exit ${result.code}): ${failureText(result.stderr)}`);
    return null;
  }
  try {
    return JSON.parse(result.stdout);
  } catch (error) {
    warn(`mc-transform printed no JSON: ${error}`);
    return null;
  }
}

// source/fold.js
var DEFAULT_KEEP = 20;
function foldArgs(job, argument) {
  if (job === "recomp") return { args: ["recomp"] };
  const text2 = String(argument ?? "").trim();
  if (text2 === "") return { args: ["wrapup", "--keep", String(DEFAULT_KEEP)] };
  if (!/^[0-9]{1,6}$/.test(text2)) {
    return { error: `mc-wrapup takes the number of newest messages to keep (e.g. "mc-wrapup 10"), not ${JSON.stringify(text2)}` };
  }
  return { args: ["wrapup", "--keep", String(Number(text2))] };
}
function foldSummary(result, failureText2) {
  let report;
  try {
    report = JSON.parse(result.stdout);
  } catch {
    return `mc-historian failed (exit ${result.code}): ${failureText2(result.stderr) || "no answer"}`;
  }
  const job = report.job === "recomp" ? "recompute" : "wrap-up";
  if (report.status === "failed") return `mc ${job} failed: ${report.error ?? failureText2(result.stderr)}`;
  if (report.status !== "published") return `mc ${job}: nothing to do (${report.reason ?? "nothing new"})`;
  const compartments = Array.isArray(report.compartments) ? report.compartments : [];
  const last = compartments[compartments.length - 1];
  const through = last && Number.isInteger(last.end) ? ` through message ${last.end}` : "";
  const replaced = Number.isInteger(report.replaced) ? `, replacing ${report.replaced}` : "";
  return `mc ${job}: ${compartments.length} compartments${through}${replaced}; the context shows them from the next call that rebuilds the cache anyway`;
}

// source/pi.ts
var HISTORIAN_TIMEOUT_MS = 3e5;
var HISTORIAN_RETRY_MS = 3e4;
var HISTORIAN_RETRY_MAX_MS = 6e5;
var resident = new Resident();
var mcTransform2 = (kind, request, args, input) => mcTransform(resident, kind, request, args, input);
function lastUsage(messages) {
  for (let i = messages.length - 1; i >= 0; i--) {
    const m = messages[i];
    if (m?.role !== "assistant") continue;
    const u = m.usage;
    if (!u || m.stopReason === "error" || m.stopReason === "aborted") continue;
    if ((u.input ?? 0) + (u.cacheRead ?? 0) + (u.cacheWrite ?? 0) <= 0) continue;
    return { input: u.input ?? 0, cache_read: u.cacheRead ?? 0, cache_write: u.cacheWrite ?? 0, output: u.output ?? 0 };
  }
  return void 0;
}
var text = (t) => ({ content: [{ type: "text", text: t }], details: {} });
async function mc(pi) {
  if (process.env.MC_HISTORIAN_CHILD === "1") return;
  resident.warm();
  let warned = false;
  const warnOnce = (message) => {
    if (warned) return;
    warned = true;
    console.error(`mc: ${message} (messages left untouched; further failures are silent)`);
  };
  const sessions = /* @__PURE__ */ new Map();
  const session = (id) => {
    let state = sessions.get(id);
    if (!state) {
      state = { incremental: void 0, historian: void 0, historianFailure: void 0 };
      sessions.set(id, state);
    }
    return state;
  };
  const historianAvailable = (state) => Boolean(state.historian) || !(state.historianFailure && Date.now() < state.historianFailure.retryAt);
  function historianSource(sessionId, ctx) {
    const file = ctx.sessionManager?.getSessionFile?.();
    if (!file) return null;
    const args = ["--harness", "pi", "--transcript", file, "--session", sessionId, "--project-dir", ctx.cwd];
    if (ctx.model?.contextWindow) args.push("--context-limit", String(ctx.model.contextWindow));
    return args;
  }
  for (const [name, job, description] of [
    ["mc-wrapup", "wrapup", "mc: fold all but the newest N messages (default 20) into compartments now"],
    ["mc-recomp", "recomp", "mc: rebuild this session's compartments from its raw history (no new facts)"]
  ]) {
    pi.registerCommand(name, {
      description,
      async handler(argument, ctx) {
        const notify = (message, type) => ctx.ui?.notify ? ctx.ui.notify(message, type) : console.error(message);
        const parsed = foldArgs(job, argument);
        if ("error" in parsed) return notify(parsed.error, "error");
        const sessionId = ctx.sessionManager.getSessionId();
        const source = historianSource(sessionId, ctx);
        if (!source) return notify(`${name}: this session has no file to fold from (--no-session)`, "error");
        const state = session(sessionId);
        await state.historian;
        const result = await run(bin("mc-historian", "MC_HISTORIAN_BIN"), [...parsed.args, ...source], "", HISTORIAN_TIMEOUT_MS);
        notify(foldSummary(result, failureText), result.code === 0 ? "info" : "error");
      }
    });
  }
  function historian(sessionId, ctx) {
    const state = session(sessionId);
    if (state.historian) return state.historian;
    if (!historianAvailable(state)) return null;
    const source = historianSource(sessionId, ctx);
    if (!source) return null;
    const args = ["run", ...source];
    const running = run(bin("mc-historian", "MC_HISTORIAN_BIN"), args, "", HISTORIAN_TIMEOUT_MS).then((result) => {
      if (result.code === 0) {
        state.historianFailure = void 0;
      } else {
        const count = (state.historianFailure?.count ?? 0) + 1;
        const wait = Math.min(HISTORIAN_RETRY_MAX_MS, HISTORIAN_RETRY_MS * 2 ** (count - 1));
        state.historianFailure = { count, retryAt: Date.now() + wait };
        console.error(`mc: mc-historian failed (exit ${result.code}): ${failureText(result.stderr)}; next try in ${wait / 1e3} s`);
      }
      return result;
    }).finally(() => {
      state.historian = void 0;
    });
    state.historian = running;
    return running;
  }
  async function transform(event, ctx, waitForFold) {
    resident.warm();
    const sessionId = ctx.sessionManager.getSessionId();
    const messages = event.messages;
    const model = ctx.model ? { provider: ctx.model.provider, id: ctx.model.id, context_limit: ctx.model.contextWindow, output_limit: ctx.model.maxTokens } : void 0;
    const head = JSON.stringify({
      harness: "pi",
      session_id: sessionId,
      project_dir: ctx.cwd,
      model,
      usage: lastUsage(messages),
      wait_for_fold: waitForFold || void 0
    });
    const texts = messages.map((m) => JSON.stringify(m) ?? "null");
    return pass(resident, session(sessionId), head, texts, warnOnce);
  }
  pi.on("context", async (event, ctx) => {
    try {
      const sessionId = ctx.sessionManager.getSessionId();
      const state = session(sessionId);
      let answer = await transform(event, ctx, historianAvailable(state) && Boolean(ctx.sessionManager.getSessionFile?.()));
      if (!answer) return void 0;
      if (answer.pass?.decision === "wait") {
        const running = historian(sessionId, ctx);
        if (running) await running;
        answer = await transform(event, ctx, false);
        if (!answer) return void 0;
      }
      if (answer.pass?.historian_due) historian(sessionId, ctx);
      if (!Array.isArray(answer.messages)) return void 0;
      return { messages: answer.messages };
    } catch (error) {
      warnOnce(`mc failed: ${error}`);
      return void 0;
    }
  });
  pi.on("before_agent_start", async (event, ctx) => {
    try {
      const request = JSON.stringify({
        harness: "pi",
        session_id: ctx.sessionManager.getSessionId(),
        system: [event.systemPrompt],
        render_unknown: true
      });
      const result = await mcTransform2("system", request, ["system"], request);
      if (result.code !== 0) {
        if (!result.died) warnOnce(`mc-transform system failed (exit ${result.code}): ${failureText(result.stderr)}`);
        return void 0;
      }
      const rendered = JSON.parse(result.stdout).system;
      if (!Array.isArray(rendered) || typeof rendered[0] !== "string") return void 0;
      return { systemPrompt: rendered[0] };
    } catch (error) {
      warnOnce(`mc-transform system failed: ${error}`);
      return void 0;
    }
  });
  pi.on("message_end", async (event, ctx) => {
    const m = event?.message;
    if (m?.role !== "assistant" || m.stopReason !== "error" || !m.errorMessage) return;
    const model = ctx.model ? { provider: ctx.model.provider, id: ctx.model.id, context_limit: ctx.model.contextWindow, output_limit: ctx.model.maxTokens } : void 0;
    const request = JSON.stringify({ harness: "pi", session_id: ctx.sessionManager.getSessionId(), model, error: m.errorMessage });
    const result = await mcTransform2("overflow", request, ["overflow"], request);
    if (result.code !== 0) return;
    try {
      const answer = JSON.parse(result.stdout);
      if (answer.recognised) console.error("mc: the provider rejected the prompt as too long; the next call drops to fit");
    } catch {
    }
  });
  pi.on("session_compact", async (_event, ctx) => {
    const file = ctx.sessionManager?.getSessionFile?.();
    if (!file) return;
    const input = JSON.stringify({
      hook_event_name: "SessionStart",
      source: "compact",
      session_id: ctx.sessionManager.getSessionId(),
      transcript_path: file,
      cwd: ctx.cwd
    });
    const result = await run(bin("mc-pin", "MC_PIN_BIN"), ["restore", "--harness", "pi", "--pins-only"], input, TRANSFORM_TIMEOUT_MS);
    if (result.code !== 0) {
      console.error(`mc: mc-pin restore failed: ${failureText(result.stderr)}`);
      return;
    }
    if (!result.stdout.trim()) return;
    try {
      const restored = JSON.parse(result.stdout)?.hookSpecificOutput?.additionalContext;
      if (typeof restored === "string" && restored) {
        await pi.sendMessage({ customType: "mc-pin", content: restored, display: false });
      }
    } catch (error) {
      console.error(`mc: mc-pin restore printed no JSON: ${error}`);
    }
  });
  const listed = await run(bin("mc-search", "MC_SEARCH_BIN"), ["tools"], "", TRANSFORM_TIMEOUT_MS);
  let specs = [];
  try {
    specs = JSON.parse(listed.stdout).tools ?? [];
  } catch {
    console.error(`mc: mc-search tools unavailable (${failureText(listed.stderr) || "not on PATH"}); the agent gets ctx_reduce only`);
  }
  const reduce = reduceSpec(specs);
  pi.registerTool({
    name: "ctx_reduce",
    label: "ctx_reduce",
    description: reduce.description,
    parameters: reduce.input_schema,
    async execute(_id, params, _signal, _update, ctx) {
      const sessionId = ctx.sessionManager.getSessionId();
      const drop = String(params?.drop ?? "");
      const request = JSON.stringify({ harness: "pi", session_id: sessionId, drop });
      const result = await mcTransform2("reduce", request, ["reduce", "--harness", "pi", "--session", sessionId, "--drop", drop], "");
      if (result.code !== 0) return text(`ctx_reduce failed: ${failureText(result.stderr)}`);
      let r;
      try {
        r = JSON.parse(result.stdout);
      } catch (error) {
        return text(`ctx_reduce failed: mc-transform printed no JSON (${error})`);
      }
      const tags = (ns) => ns.map((n) => `§${n}§`).join(", ");
      const said = [];
      if (r.queued?.length) said.push(`queued ${tags(r.queued)}`);
      if (r.protected?.length) said.push(`deferred (still protected) ${tags(r.protected)}`);
      if (r.already?.length) said.push(`already handled ${tags(r.already)}`);
      if (r.unknown?.length) said.push(`unknown ${tags(r.unknown)}`);
      return text(said.length ? said.join("; ") : "nothing to drop");
    }
  });
  for (const spec of specs) {
    const name = spec?.name;
    if (typeof name !== "string" || name === "ctx_reduce") continue;
    pi.registerTool({
      name,
      label: name,
      description: spec.description ?? "",
      parameters: spec.input_schema ?? { type: "object", properties: {} },
      async execute(_id, params, _signal, _update, ctx) {
        const input = JSON.stringify({
          tool: spec.name,
          arguments: params ?? {},
          harness: "pi",
          session_id: ctx.sessionManager.getSessionId(),
          project_dir: ctx.cwd
        });
        const result = await run(bin("mc-search", "MC_SEARCH_BIN"), ["call"], input, TRANSFORM_TIMEOUT_MS);
        if (result.code !== 0) return text(`${spec.name} failed: ${failureText(result.stderr)}`);
        try {
          return text(JSON.parse(result.stdout).text);
        } catch (error) {
          return text(`${spec.name} failed: mc-search printed no JSON (${error})`);
        }
      }
    });
  }
}
export {
  mc as default
};
