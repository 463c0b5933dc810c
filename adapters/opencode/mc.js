// mc's adapter, built from adapters/source/opencode.ts and adapters/source/core.js
// by `npm run build` in adapters/: edit those, not this file.


// source/opencode.ts
import { existsSync, readdirSync } from "node:fs";
import { homedir } from "node:os";
import { isAbsolute, join } from "node:path";
import { tool } from "@opencode-ai/plugin";

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
  if (bun && typeof bun.hash === "function") return (text) => bun.hash(text);
  return (text) => createHash("sha1").update(text).digest("base64");
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
      const refs = texts.map((text, i) => {
        const at = base.index.get(
          /** @type {string | number | bigint} */
          hashes[i]
        );
        return at !== void 0 && base.lengths[at] === text.length ? at : text;
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
    state.incremental = { generation: resident2.generation, key, index, lengths: texts.map((text) => text.length), output: resolved };
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
  const text = String(argument ?? "").trim();
  if (text === "") return { args: ["wrapup", "--keep", String(DEFAULT_KEEP)] };
  if (!/^[0-9]{1,6}$/.test(text)) {
    return { error: `mc-wrapup takes the number of newest messages to keep (e.g. "mc-wrapup 10"), not ${JSON.stringify(text)}` };
  }
  return { args: ["wrapup", "--keep", String(Number(text))] };
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

// source/opencode.ts
var HISTORIAN_TIMEOUT_MS = 3e5;
var HISTORIAN_RETRY_MS = 3e4;
var HISTORIAN_RETRY_MAX_MS = 6e5;
var SESSION_CAP = positive(process.env.MC_OPENCODE_SESSIONS) ?? 200;
var SYSTEM_RENDERS_CAP = 8;
var OVERFLOW_CANDIDATES = /* @__PURE__ */ new Set(["ContextOverflowError", "APIError", "UnknownError"]);
var BOUNDARY_USER = "mcb0";
var BOUNDARY_SUMMARY = "mcb1";
var BOUNDARY_TEXT = "[mc: the conversation before this point is folded into mc's history, which opens the prompt]";
var BOUNDARY_BUSY_MS = 100;
function opencodeDatabases() {
  const env = process.env;
  const data = join(env.XDG_DATA_HOME || join(homedir(), ".local", "share"), "opencode");
  if (env.OPENCODE_DB) {
    if (env.OPENCODE_DB === ":memory:") return [];
    return [isAbsolute(env.OPENCODE_DB) ? env.OPENCODE_DB : join(data, env.OPENCODE_DB)];
  }
  let channels = [];
  try {
    channels = readdirSync(data).filter((name) => /^opencode-.+\.db$/.test(name)).sort().map((name) => join(data, name));
  } catch {
  }
  return [join(data, "opencode.db"), ...channels];
}
function boundaryWriter() {
  let Database;
  const open = /* @__PURE__ */ new Map();
  function write(db, sessionID, through) {
    const row = db.query("SELECT id, time_created, data FROM message WHERE id = ? AND session_id = ?").get(through, sessionID);
    if (!row) return db.query("SELECT 1 FROM session WHERE id = ?").get(sessionID) ? "unknown message" : "no session";
    const after = (m) => m.time_created > row.time_created || m.time_created === row.time_created && m.id >= row.id;
    const current = db.query("SELECT id, time_created FROM message WHERE session_id = ? AND id LIKE ?").all(sessionID, `%${BOUNDARY_USER}`).map((m) => ({ id: m.id.slice(0, -BOUNDARY_USER.length), time_created: m.time_created }));
    if (current.some(after)) return "kept";
    const next = db.query("SELECT id FROM message WHERE session_id = ? AND (time_created > ? OR (time_created = ? AND id > ?)) LIMIT 1").get(sessionID, row.time_created, row.time_created, `${through}${BOUNDARY_SUMMARY}`);
    if (!next) return "nothing after";
    for (const old of current) {
      for (const suffix of [BOUNDARY_USER, BOUNDARY_SUMMARY]) {
        db.query("DELETE FROM part WHERE message_id = ?").run(`${old.id}${suffix}`);
        db.query("DELETE FROM message WHERE id = ?").run(`${old.id}${suffix}`);
      }
    }
    const newest = (role) => JSON.parse(
      db.query(
        "SELECT data FROM message WHERE session_id = ? AND json_extract(data, '$.role') = ? ORDER BY time_created DESC, id DESC LIMIT 1"
      ).get(sessionID, role)?.data ?? "{}"
    );
    const user = newest("user");
    const reply = newest("assistant");
    const created = JSON.parse(row.data)?.time?.created ?? row.time_created;
    const now = Date.now();
    const userID = `${through}${BOUNDARY_USER}`;
    const summaryID = `${through}${BOUNDARY_SUMMARY}`;
    const part = (messageID) => `prt${messageID.slice(3)}`;
    const insertMessage = db.query("INSERT INTO message (id, session_id, time_created, time_updated, data) VALUES (?, ?, ?, ?, ?)");
    const insertPart = db.query("INSERT INTO part (id, message_id, session_id, time_created, time_updated, data) VALUES (?, ?, ?, ?, ?, ?)");
    const model = user.model ?? { providerID: reply.providerID, modelID: reply.modelID };
    insertMessage.run(
      userID,
      sessionID,
      row.time_created,
      now,
      JSON.stringify({ role: "user", time: { created }, agent: user.agent ?? "build", model })
    );
    insertPart.run(part(userID), userID, sessionID, row.time_created, now, JSON.stringify({ type: "compaction", auto: true }));
    const summary = {
      role: "assistant",
      time: { created, completed: created },
      parentID: userID,
      modelID: reply.modelID ?? model.modelID,
      providerID: reply.providerID ?? model.providerID,
      mode: "compaction",
      agent: "compaction",
      path: reply.path ?? { cwd: "", root: "" },
      cost: 0,
      tokens: { input: 0, output: 0, reasoning: 0, cache: { read: 0, write: 0 } },
      summary: true,
      finish: "stop"
    };
    insertMessage.run(summaryID, sessionID, row.time_created, now, JSON.stringify(summary));
    const text = { type: "text", text: BOUNDARY_TEXT, synthetic: true, time: { start: created, end: created } };
    insertPart.run(part(summaryID), summaryID, sessionID, row.time_created, now, JSON.stringify(text));
    return "moved";
  }
  return async function move(sessionID, through) {
    if (Database === void 0) {
      try {
        Database = (await import("bun:sqlite")).Database;
      } catch {
        Database = null;
      }
    }
    if (!Database) return "no bun:sqlite";
    for (const path of opencodeDatabases()) {
      if (!existsSync(path)) continue;
      let db = open.get(path);
      if (!db) {
        db = new Database(path);
        db.exec(`PRAGMA busy_timeout = ${BOUNDARY_BUSY_MS}`);
        open.set(path, db);
      }
      const done = db.transaction(() => write(db, sessionID, through)).immediate();
      if (done !== "no session") return done;
    }
    return "no database holds the session";
  };
}
function positive(text) {
  const n = Number.parseInt(text ?? "", 10);
  return n > 0 ? n : void 0;
}
var INCREMENTAL_SESSIONS = 16;
var resident = new Resident();
var mcTransform2 = (kind, request, args, input) => mcTransform(resident, kind, request, args, input);
var carriesToolMetadata = (part) => part?.type === "tool" && typeof part.id === "string" && part.state?.status === "completed" && part.state.metadata !== void 0;
function messageJson(message, stash) {
  const parts = message?.parts;
  if (!Array.isArray(parts) || !parts.some(carriesToolMetadata)) return JSON.stringify(message) ?? "null";
  const stripped = parts.map((part) => {
    if (!carriesToolMetadata(part)) return part;
    stash.set(part.id, part.state.metadata);
    const { metadata, ...state } = part.state;
    return { ...part, state };
  });
  return JSON.stringify({ ...message, parts: stripped });
}
function restoreToolMetadata(messages, stash) {
  if (stash.size === 0) return;
  for (const message of messages) {
    for (const part of message?.parts ?? []) {
      if (part?.type === "tool" && part.state && part.state.metadata === void 0 && stash.has(part.id)) {
        part.state.metadata = stash.get(part.id);
      }
    }
  }
}
function zodOf(schema, z) {
  const field = (s) => {
    let f;
    if (Array.isArray(s?.enum)) f = z.enum(s.enum);
    else if (s?.type === "integer") {
      f = z.number().int();
      if (typeof s.minimum === "number") f = f.min(s.minimum);
      if (typeof s.maximum === "number") f = f.max(s.maximum);
      f = f.meta({ minimum: s.minimum, maximum: s.maximum });
    } else if (s?.type === "number") f = z.number();
    else if (s?.type === "boolean") f = z.boolean();
    else if (s?.type === "array") f = z.array(field(s.items ?? {}));
    else if (s?.type === "string") f = z.string();
    else f = z.any();
    return s?.description ? f.describe(s.description) : f;
  };
  const required = new Set(schema?.required ?? []);
  const shape = {};
  for (const [name, s] of Object.entries(schema?.properties ?? {})) {
    shape[name] = required.has(name) ? field(s) : field(s).optional();
  }
  return shape;
}
async function searchTools(directory) {
  const listed = await run(bin("mc-search", "MC_SEARCH_BIN"), ["tools"], "", TRANSFORM_TIMEOUT_MS);
  let specs;
  try {
    specs = JSON.parse(listed.stdout).tools;
  } catch {
    console.error(`mc: mc-search tools unavailable (${failureText(listed.stderr) || "not on PATH"}); the agent gets ctx_reduce only`);
    return { tools: {}, reduce: REDUCE_TOOL };
  }
  const tools = {};
  for (const spec of specs) {
    if (spec.name === "ctx_reduce") continue;
    tools[spec.name] = tool({
      description: spec.description,
      args: zodOf(spec.input_schema, tool.schema),
      async execute(args, context) {
        const input = JSON.stringify({
          tool: spec.name,
          arguments: args,
          harness: "opencode",
          session_id: context.sessionID,
          project_dir: directory
        });
        const result = await run(bin("mc-search", "MC_SEARCH_BIN"), ["call"], input, TRANSFORM_TIMEOUT_MS);
        if (result.code !== 0) return `${spec.name} failed: ${failureText(result.stderr)}`;
        try {
          return JSON.parse(result.stdout).text;
        } catch (error) {
          return `${spec.name} failed: mc-search printed no JSON (${error})`;
        }
      }
    });
  }
  return { tools, reduce: reduceSpec(specs) };
}
var McContext = async ({ client, serverUrl, directory }) => {
  if (process.env.MC_HISTORIAN_CHILD) return {};
  const { tools: extraTools, reduce } = await searchTools(directory);
  const server = String(serverUrl ?? "").replace(/\/$/, "");
  const limits = /* @__PURE__ */ new Map();
  const historians = /* @__PURE__ */ new Map();
  const sessions = /* @__PURE__ */ new Map();
  const incremental = /* @__PURE__ */ new Map();
  let warned = false;
  const moveBoundary = process.env.MC_OPENCODE_BOUNDARY === "0" ? void 0 : boundaryWriter();
  setTimeout(providerList, 0);
  function session(sessionID) {
    let state = sessions.get(sessionID);
    if (state) sessions.delete(sessionID);
    else
      state = {
        passed: false,
        subagent: void 0,
        historianChild: false,
        model: void 0,
        systemRenders: /* @__PURE__ */ new Map(),
        historianFailure: void 0,
        incremental: void 0
      };
    sessions.set(sessionID, state);
    while (sessions.size > SESSION_CAP) sessions.delete(sessions.keys().next().value);
    return state;
  }
  const warnOnce = (message) => {
    if (warned) return;
    warned = true;
    console.error(`mc: ${message} (messages left untouched; further failures are silent)`);
  };
  let providers = null;
  function providerList() {
    if (!providers) {
      const asked = client.config.providers().then(
        (res) => res?.data?.providers ?? res?.providers ?? [],
        () => {
          providers = null;
          return void 0;
        }
      );
      providers = asked;
      return asked;
    }
    return providers;
  }
  function modelLimits(providerID, modelID) {
    const key = `${providerID}/${modelID}`;
    let known = limits.get(key);
    if (!known) {
      known = providerList().then((list) => {
        if (!list) limits.delete(key);
        const limit = list?.find((p) => p.id === providerID)?.models?.[modelID]?.limit ?? {};
        return { context: limit.context, output: limit.output };
      });
      limits.set(key, known);
    }
    return known;
  }
  function envelope(messages) {
    const users = messages.filter((m) => m.info?.role === "user");
    const lastUser = users[users.length - 1];
    const sessionID = lastUser?.info?.sessionID ?? messages.find((m) => m.info?.sessionID)?.info?.sessionID;
    const model = lastUser?.info?.model ?? {};
    const sampled = (t2) => t2 && (t2.input ?? 0) + (t2.cache?.read ?? 0) + (t2.cache?.write ?? 0) > 0;
    const assistant = [...messages].reverse().find((m) => m.info?.role === "assistant" && sampled(m.info?.tokens));
    const t = assistant?.info?.tokens;
    const usage = t ? { input: t.input ?? 0, cache_read: t.cache?.read ?? 0, cache_write: t.cache?.write ?? 0, output: t.output ?? 0 } : void 0;
    return { sessionID, model, usage };
  }
  async function isSubagent(sessionID, state) {
    if (state.subagent === void 0) {
      try {
        const res = await client.session.get({ path: { id: sessionID } });
        const info = res?.data ?? res;
        if (!info?.id) return false;
        state.subagent = Boolean(info.parentID);
        state.historianChild = Boolean(info.metadata?.mc?.historian);
        state.historianMaxTokens = positive(String(info.metadata?.mc?.max_output_tokens ?? ""));
      } catch {
        return false;
      }
    }
    return state.subagent;
  }
  async function transform(messages, found, state, waitForFold) {
    const { sessionID, model, usage } = found;
    resident.warm();
    const [limit, subagent] = await Promise.all([
      model.providerID ? modelLimits(model.providerID, model.modelID) : {},
      isSubagent(sessionID, state)
    ]);
    state.model = { provider: model.providerID, id: model.modelID, context_limit: limit.context, output_limit: limit.output };
    const metadata = /* @__PURE__ */ new Map();
    const texts = messages.map((message) => messageJson(message, metadata));
    const head = JSON.stringify({
      harness: "opencode",
      session_id: sessionID,
      project_dir: directory,
      model: state.model,
      usage,
      subagent,
      wait_for_fold: waitForFold || void 0
    });
    const output = await pass2(sessionID, state, head, texts);
    if (!output) return null;
    if (Array.isArray(output.messages)) restoreToolMetadata(output.messages, metadata);
    return { sessionID, output };
  }
  function pass2(sessionID, state, head, texts) {
    return pass(resident, state, head, texts, warnOnce, () => holdIncremental(sessionID));
  }
  function holdIncremental(sessionID) {
    incremental.delete(sessionID);
    incremental.set(sessionID, true);
    while (incremental.size > INCREMENTAL_SESSIONS) {
      const oldest = incremental.keys().next().value;
      incremental.delete(oldest);
      const state = sessions.get(oldest);
      if (state) state.incremental = void 0;
    }
  }
  function historianAvailable(sessionID, state) {
    if (!server || state.subagent) return false;
    if (historians.has(sessionID)) return true;
    const failed = state.historianFailure;
    return !(failed && Date.now() < failed.retryAt);
  }
  function historian(sessionID) {
    if (!historians.has(sessionID)) {
      const failed = sessions.get(sessionID)?.historianFailure;
      if (failed && Date.now() < failed.retryAt) return null;
      const args = ["run", "--session", sessionID, "--opencode-url", server];
      if (directory) args.push("--project-dir", directory);
      const running = run(bin("mc-historian", "MC_HISTORIAN_BIN"), args, "", HISTORIAN_TIMEOUT_MS).then((result) => {
        const state = sessions.get(sessionID);
        if (result.code === 0) {
          if (state) state.historianFailure = void 0;
        } else {
          const count = (failed?.count ?? 0) + 1;
          const wait = Math.min(HISTORIAN_RETRY_MAX_MS, HISTORIAN_RETRY_MS * 2 ** (count - 1));
          if (state) state.historianFailure = { count, retryAt: Date.now() + wait };
          const reason = failureText(result.stderr);
          console.error(`mc: mc-historian failed (exit ${result.code}): ${reason}; next try in ${wait / 1e3} s`);
        }
        return result;
      }).finally(() => historians.delete(sessionID));
      historians.set(sessionID, running);
    }
    return historians.get(sessionID);
  }
  async function overflow(properties) {
    const { sessionID, error } = properties ?? {};
    if (!sessionID || !OVERFLOW_CANDIDATES.has(error?.name)) return;
    if (sessions.get(sessionID)?.historianChild) return;
    const model = sessions.get(sessionID)?.model;
    const request = JSON.stringify({ harness: "opencode", session_id: sessionID, model, error });
    const result = await mcTransform2("overflow", request, ["overflow"], request);
    if (result.code !== 0) {
      console.error(`mc: mc-transform overflow failed (exit ${result.code}): ${failureText(result.stderr)}`);
      return;
    }
    try {
      const answer = JSON.parse(result.stdout);
      if (answer.recognised) {
        const learned = answer.limit_stored ? `; ${answer.model} holds ${answer.limit} tokens` : "";
        console.error(`mc: the provider rejected the prompt as too long${learned}; the next call drops to fit`);
      }
    } catch {
    }
  }
  const FOLD_COMMANDS = /* @__PURE__ */ new Map([
    ["mc-wrapup", { job: "wrapup", description: "mc: fold all but the newest N messages (default 20) into compartments now" }],
    ["mc-recomp", { job: "recomp", description: "mc: rebuild this session's compartments from its raw history (no new facts)" }]
  ]);
  async function foldCommand(job, argument, sessionID) {
    const parsed = foldArgs(job, argument);
    if ("error" in parsed) return parsed.error;
    if (!server) return `mc-${job}: OpenCode gave the plugin no server address to fold from`;
    await historians.get(sessionID);
    const args = [...parsed.args, "--session", sessionID, "--opencode-url", server];
    if (directory) args.push("--project-dir", directory);
    const result = await run(bin("mc-historian", "MC_HISTORIAN_BIN"), args, "", HISTORIAN_TIMEOUT_MS);
    return foldSummary(result, failureText);
  }
  return {
    // The fold commands, as OpenCode's own commands (a user's of the same name wins).
    config: async (config) => {
      if (!config || typeof config !== "object") return;
      config.command = config.command && typeof config.command === "object" ? config.command : {};
      for (const [name, { description }] of FOLD_COMMANDS) {
        config.command[name] ??= { description, template: `Running ${name} $ARGUMENTS.` };
      }
    },
    // Run the fold, then the prompt the command sends says what it did.
    "command.execute.before": async (input, output) => {
      const command = FOLD_COMMANDS.get(String(input?.command ?? ""));
      if (!command || !input?.sessionID || !Array.isArray(output?.parts)) return;
      const summary = await foldCommand(command.job, String(input.arguments ?? ""), String(input.sessionID));
      const text = `${summary}. (The user ran /${input.command}; nothing else to do: say so in one line.)`;
      const part = output.parts.find((p) => p?.type === "text");
      if (part) part.text = text;
      else output.parts.push({ type: "text", text });
    },
    "experimental.chat.messages.transform": async (_input, output) => {
      const messages = output.messages;
      const found = envelope(messages);
      if (!found.sessionID) return;
      const state = session(found.sessionID);
      if (await isSubagent(found.sessionID, state) && state.historianChild) return;
      let pass3 = await transform(messages, found, state, historianAvailable(found.sessionID, state));
      if (!pass3) return;
      if (pass3.output.pass?.decision === "wait") {
        const running = historian(found.sessionID);
        if (running) await running;
        pass3 = await transform(messages, found, state, false);
        if (!pass3) return;
      }
      const report = pass3.output.pass ?? {};
      if (report.historian_due && server) historian(found.sessionID);
      if (report.fold_boundary && moveBoundary) {
        const through = report.fold_boundary;
        setTimeout(() => {
          moveBoundary(found.sessionID, through).then((done) => process.env.MC_BOUNDARY_LOG && console.error(`mc: boundary ${through}: ${done}`)).catch((error) => warnOnce(`cannot write the compaction boundary: ${error}`));
        }, 0);
      }
      if (Array.isArray(pass3.output.messages)) {
        messages.splice(0, messages.length, ...pass3.output.messages);
      }
      state.passed = true;
      if (report.decision === "execute") state.systemRenders.clear();
    },
    // Runs after the messages hook of the same model call (and for side calls
    // such as the title, which get the same rendering: it is deterministic).
    "experimental.chat.system.transform": async (input, output) => {
      const sessionID = input?.sessionID;
      const system = output?.system;
      if (!sessionID || !sessions.get(sessionID)?.passed || !Array.isArray(system)) return;
      const state = session(sessionID);
      const key = JSON.stringify(system);
      const cached = state.systemRenders.get(key);
      if (cached) {
        system.splice(0, system.length, ...cached);
        return;
      }
      const request = JSON.stringify({ harness: "opencode", session_id: sessionID, system });
      const result = await mcTransform2("system", request, ["system"], request);
      if (result.died) return;
      if (result.code !== 0) {
        warnOnce(`mc-transform system failed (exit ${result.code}): ${failureText(result.stderr)}`);
        return;
      }
      try {
        const answer = JSON.parse(result.stdout);
        const rendered = answer.system;
        if (!Array.isArray(rendered)) return;
        system.splice(0, system.length, ...rendered);
        if (answer.known_session) {
          state.systemRenders.set(key, rendered);
          while (state.systemRenders.size > SYSTEM_RENDERS_CAP) {
            state.systemRenders.delete(state.systemRenders.keys().next().value);
          }
        }
      } catch (error) {
        warnOnce(`mc-transform system printed no JSON: ${error}`);
      }
    },
    // mc-historian's child sessions answer within historian.max_output_tokens,
    // as its other routes do (OpenCode would allow the model's whole limit).
    // A user message arrives before its model calls: start the resident
    // process and learn the model's limits now, so the first call of a
    // session waits for neither.
    "chat.message": async (input) => {
      resident.warm();
      const model = input?.model;
      if (model?.providerID && model?.modelID) modelLimits(model.providerID, model.modelID);
    },
    "chat.params": async (input, output) => {
      const cap = sessions.get(input?.sessionID)?.historianMaxTokens;
      if (cap && !(output.maxOutputTokens <= cap)) output.maxOutputTokens = cap;
    },
    event: async ({ event }) => {
      if (event?.type === "session.deleted") {
        const sessionID = event.properties?.sessionID ?? event.properties?.info?.id;
        sessions.delete(sessionID);
        incremental.delete(sessionID);
        return;
      }
      if (event?.type === "session.created" || event?.type === "session.updated") {
        const info = event.properties?.info;
        if (info?.id && (event.type === "session.created" || sessions.has(info.id))) {
          const state = session(info.id);
          state.subagent = Boolean(info.parentID);
          state.historianChild = Boolean(info.metadata?.mc?.historian);
          state.historianMaxTokens = positive(String(info.metadata?.mc?.max_output_tokens ?? ""));
        }
        return;
      }
      if (event?.type === "session.error") return overflow(event.properties);
      if (event?.type !== "session.compacted" || !server) return;
      const result = await run(
        bin("mc-pin", "MC_PIN_BIN"),
        ["restore", "--opencode-url", server],
        JSON.stringify(event),
        TRANSFORM_TIMEOUT_MS
      );
      if (result.code !== 0) console.error(`mc: mc-pin restore failed: ${result.stderr.trim()}`);
    },
    tool: {
      ...extraTools,
      ctx_reduce: tool({
        description: reduce.description,
        args: zodOf(reduce.input_schema, tool.schema),
        async execute(args, context) {
          const request = JSON.stringify({ harness: "opencode", session_id: context.sessionID, drop: String(args.drop) });
          const result = await mcTransform2(
            "reduce",
            request,
            ["reduce", "--harness", "opencode", "--session", context.sessionID, "--drop", String(args.drop)],
            ""
          );
          if (result.code !== 0) return `ctx_reduce failed: ${result.stderr.trim()}`;
          let r;
          try {
            r = JSON.parse(result.stdout);
          } catch (error) {
            return `ctx_reduce failed: mc-transform printed no JSON (${error})`;
          }
          const parts = [];
          if (r.queued?.length) parts.push(`queued ${r.queued.map((n) => `§${n}§`).join(", ")}`);
          if (r.protected?.length) parts.push(`deferred (still protected) ${r.protected.map((n) => `§${n}§`).join(", ")}`);
          if (r.already?.length) parts.push(`already handled ${r.already.map((n) => `§${n}§`).join(", ")}`);
          if (r.unknown?.length) parts.push(`unknown ${r.unknown.map((n) => `§${n}§`).join(", ")}`);
          return parts.length ? parts.join("; ") : "nothing to drop";
        }
      })
    }
  };
};
export {
  McContext
};
