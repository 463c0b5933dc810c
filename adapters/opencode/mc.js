// mc for OpenCode: runs mc-transform on every model call (the messages, then
// the system prompt: guidance about §N§ tags and a date that moves only when
// the cache is busted anyway), restores pins after OpenCode's own compaction,
// starts the historian when a pass says it is due, hands a provider's
// "prompt is too long" error to mc so the next pass recovers, and gives the
// agent its tools: ctx_reduce, and ctx_search, ctx_memory, ctx_note and
// ctx_expand from mc-search (described by `mc-search tools`, run through
// `mc-search call` with the calling session).
//
// mc-transform runs resident (`mc-transform serve`, one per OpenCode
// process): each call sends only the messages that changed since the
// session's last call and gets back only what changed. When it cannot take a
// call (busy with another, backing off after it died, a request above its
// cap) the call runs the one-shot command instead; a call it was answering
// when it died goes out untouched.
//
// Install: copy this file into OpenCode's plugin folder
// (~/.config/opencode/plugin/mc.js). The mc binaries are found on PATH, or
// through MC_TRANSFORM_BIN, MC_PIN_BIN, MC_HISTORIAN_BIN and MC_SEARCH_BIN; the database
// through MC_DB as usual. MC_OPENCODE_SESSIONS caps how many sessions the
// plugin remembers (default 200); MC_TRANSFORM_SERVE=0 runs every call as a
// one-shot process; MC_OPENCODE_BOUNDARY=0 writes no compaction boundary.
import { spawn } from "node:child_process"
import { createHash } from "node:crypto"
import { existsSync, readdirSync } from "node:fs"
import { homedir } from "node:os"
import { isAbsolute, join } from "node:path"
import { MessageChannel, Worker, receiveMessageOnPort } from "node:worker_threads"
import { tool } from "@opencode-ai/plugin"

const TRANSFORM_TIMEOUT_MS = 30_000
const HISTORIAN_TIMEOUT_MS = 300_000
// After a failed historian run (no model to use, provider down), wait
// this long before the next, doubling up to the cap: every pass above the
// trigger says "due", and each run fetches the whole session.
const HISTORIAN_RETRY_MS = 30_000
const HISTORIAN_RETRY_MAX_MS = 600_000
// A long-running server sees many sessions: what the plugin remembers about
// them is dropped when a session is deleted, and beyond this many sessions
// the least recently used one is forgotten (it costs a process or a server
// call to learn again, never a wrong answer).
const SESSION_CAP = positive(process.env.MC_OPENCODE_SESSIONS) ?? 200
// System renders kept per session (the agent's prompt and side calls' own).
const SYSTEM_RENDERS_CAP = 8
// Session errors that may be a provider's context overflow; mc recognises it.
const OVERFLOW_CANDIDATES = new Set(["ContextOverflowError", "APIError", "UnknownError"])

const bin = (name, env) => process.env[env] || name

// mc's compaction boundary (ARCHITECTURE "Compaction markers"). When a pass
// that busts anyway has taken the oldest messages off the wire (the head
// covers them), the plugin writes, right after the newest of them, a user
// message with a `compaction` part and a finished `summary: true` reply to
// it: OpenCode's own history filter stops there and never loads those
// messages for the hook again. Their ids are that message's id plus these
// suffixes (OpenCode orders messages by creation time, then id), which is
// how mc-transform, mc-historian and mc-pin know them for mc's own.
const BOUNDARY_USER = "mcb0"
const BOUNDARY_SUMMARY = "mcb1"
const BOUNDARY_TEXT =
  "[mc: the conversation before this point is folded into mc's history, which opens the prompt]"
// The boundary waits this long at most for OpenCode's own writes (it runs on
// OpenCode's thread); busy, it is written at the next pass that busts.
const BOUNDARY_BUSY_MS = 100

/** OpenCode's database files, in the order OpenCode would pick them. */
function opencodeDatabases() {
  const env = process.env
  const data = join(env.XDG_DATA_HOME || join(homedir(), ".local", "share"), "opencode")
  if (env.OPENCODE_DB) {
    if (env.OPENCODE_DB === ":memory:") return []
    return [isAbsolute(env.OPENCODE_DB) ? env.OPENCODE_DB : join(data, env.OPENCODE_DB)]
  }
  let channels = []
  try {
    channels = readdirSync(data)
      .filter((name) => /^opencode-.+\.db$/.test(name))
      .sort()
      .map((name) => join(data, name))
  } catch {}
  return [join(data, "opencode.db"), ...channels]
}

/**
 * Writes mc's boundary into OpenCode's database (bun:sqlite, OpenCode's own
 * runtime). Each move is one transaction that re-reads the current boundary
 * first, so two OpenCode processes on one database (or a replayed answer)
 * never move it back; nothing is remembered between moves, so a restart or a
 * failed write just leaves it for the next pass that busts.
 */
function boundaryWriter() {
  let Database // undefined: not loaded yet; null: not in Bun
  const open = new Map() // path -> Database

  function write(db, sessionID, through) {
    const row = db.query("SELECT id, time_created, data FROM message WHERE id = ? AND session_id = ?").get(through, sessionID)
    if (!row) return db.query("SELECT 1 FROM session WHERE id = ?").get(sessionID) ? "unknown message" : "no session"
    const after = (m) => m.time_created > row.time_created || (m.time_created === row.time_created && m.id >= row.id)
    const current = db
      .query("SELECT id, time_created FROM message WHERE session_id = ? AND id LIKE ?")
      .all(sessionID, `%${BOUNDARY_USER}`)
      .map((m) => ({ id: m.id.slice(0, -BOUNDARY_USER.length), time_created: m.time_created }))
    if (current.some(after)) return "kept"
    // Never the newest message: a boundary only hides what the head covers.
    const next = db
      .query("SELECT id FROM message WHERE session_id = ? AND (time_created > ? OR (time_created = ? AND id > ?)) LIMIT 1")
      .get(sessionID, row.time_created, row.time_created, `${through}${BOUNDARY_SUMMARY}`)
    if (!next) return "nothing after"
    for (const old of current) {
      for (const suffix of [BOUNDARY_USER, BOUNDARY_SUMMARY]) {
        db.query("DELETE FROM part WHERE message_id = ?").run(`${old.id}${suffix}`)
        db.query("DELETE FROM message WHERE id = ?").run(`${old.id}${suffix}`)
      }
    }
    const newest = (role) =>
      JSON.parse(
        db
          .query(
            "SELECT data FROM message WHERE session_id = ? AND json_extract(data, '$.role') = ? " +
              "ORDER BY time_created DESC, id DESC LIMIT 1",
          )
          .get(sessionID, role)?.data ?? "{}",
      )
    const user = newest("user")
    const reply = newest("assistant")
    const created = JSON.parse(row.data)?.time?.created ?? row.time_created
    const now = Date.now()
    const userID = `${through}${BOUNDARY_USER}`
    const summaryID = `${through}${BOUNDARY_SUMMARY}`
    const part = (messageID) => `prt${messageID.slice(3)}`
    const insertMessage = db.query(
      "INSERT INTO message (id, session_id, time_created, time_updated, data) VALUES (?, ?, ?, ?, ?)",
    )
    const insertPart = db.query(
      "INSERT INTO part (id, message_id, session_id, time_created, time_updated, data) VALUES (?, ?, ?, ?, ?, ?)",
    )
    const model = user.model ?? { providerID: reply.providerID, modelID: reply.modelID }
    insertMessage.run(userID, sessionID, row.time_created, now, JSON.stringify({ role: "user", time: { created }, agent: user.agent ?? "build", model }))
    insertPart.run(part(userID), userID, sessionID, row.time_created, now, JSON.stringify({ type: "compaction", auto: true }))
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
      finish: "stop",
    }
    insertMessage.run(summaryID, sessionID, row.time_created, now, JSON.stringify(summary))
    const text = { type: "text", text: BOUNDARY_TEXT, synthetic: true, time: { start: created, end: created } }
    insertPart.run(part(summaryID), summaryID, sessionID, row.time_created, now, JSON.stringify(text))
    return "moved"
  }

  /** Move the session's boundary to just after message `through`; says what it did. */
  return async function move(sessionID, through) {
    if (Database === undefined) {
      try {
        Database = (await import("bun:sqlite")).Database
      } catch {
        Database = null
      }
    }
    if (!Database) return "no bun:sqlite"
    for (const path of opencodeDatabases()) {
      if (!existsSync(path)) continue
      let db = open.get(path)
      if (!db) {
        db = new Database(path)
        db.exec(`PRAGMA busy_timeout = ${BOUNDARY_BUSY_MS}`)
        open.set(path, db)
      }
      const done = db.transaction(() => write(db, sessionID, through)).immediate()
      if (done !== "no session") return done
    }
    return "no database holds the session"
  }
}

/**
 * What a failed mc binary said, on one line: its `error:` line and the
 * `hint:` lines after it (else the last line of its stderr).
 */
function failureText(stderr) {
  const lines = stderr.trim().split("\n")
  let at = lines.length - 1
  while (at > 0 && !/^mc-[a-z]+: error: /.test(lines[at])) at--
  if (!/^mc-[a-z]+: error: /.test(lines[at])) at = lines.length - 1
  return lines.slice(at).join("; ")
}

function positive(text) {
  const n = Number.parseInt(text ?? "", 10)
  return n > 0 ? n : undefined
}

/**
 * Run a command with `input` on stdin; resolves {code, stdout, stderr}.
 * OpenCode runs plugins under Bun, whose own spawn costs a third of the
 * hook's time less than its node:child_process layer on a 0.5 MB envelope;
 * other hosts get node's. Never a synchronous spawn: mc-historian and
 * mc-pin call back into this very server.
 */
async function run(command, args, input, timeoutMs) {
  if (typeof Bun !== "undefined") return runBun(command, args, input, timeoutMs)
  return runNode(command, args, input, timeoutMs)
}

async function runBun(command, args, input, timeoutMs) {
  let child
  try {
    child = Bun.spawn([command, ...args], { stdin: Buffer.from(input), stdout: "pipe", stderr: "pipe" })
  } catch (error) {
    return { code: -1, stdout: "", stderr: String(error) }
  }
  const timer = setTimeout(() => child.kill("SIGKILL"), timeoutMs)
  const [stdout, stderr, code] = await Promise.all([
    new Response(child.stdout).text(),
    new Response(child.stderr).text(),
    child.exited,
  ])
  clearTimeout(timer)
  return { code: child.signalCode ? -1 : code, stdout, stderr: stderr + (child.signalCode ? `killed by ${child.signalCode}` : "") }
}

function runNode(command, args, input, timeoutMs) {
  return new Promise((resolve) => {
    let child
    try {
      child = spawn(command, args, { stdio: ["pipe", "pipe", "pipe"] })
    } catch (error) {
      resolve({ code: -1, stdout: "", stderr: String(error) })
      return
    }
    const out = []
    const err = []
    const timer = setTimeout(() => child.kill("SIGKILL"), timeoutMs)
    child.stdout.on("data", (d) => out.push(d))
    child.stderr.on("data", (d) => err.push(d))
    child.on("error", (error) => {
      clearTimeout(timer)
      resolve({ code: -1, stdout: "", stderr: String(error) })
    })
    child.on("close", (code, signal) => {
      clearTimeout(timer)
      resolve({
        code: signal ? -1 : code,
        stdout: Buffer.concat(out).toString("utf8"),
        stderr: Buffer.concat(err).toString("utf8") + (signal ? `killed by ${signal}` : ""),
      })
    })
    child.stdin.on("error", () => {})
    child.stdin.end(input)
  })
}

// mc-transform serve: one per OpenCode process, shared by every instance of
// this plugin it loads. Started on the first call, restarted on a later one
// after it died (waiting 1 s, doubling up to a minute, during which calls
// run the one-shot command). It answers one request at a time.
//
// The process is driven from a worker thread of its own, and a call waits for
// its answer on OpenCode's thread, blocked (Atomics.wait), for at most
// SERVE_SYNC_WAIT_MS. Waiting with `await` instead left the answer in
// OpenCode's event loop behind whatever else OpenCode had queued: measured on
// bench-opencode, serve answered in 1-2 ms and the hook saw it 8-67 ms later.
// Blocked, nothing else runs until the answer is in (the TypeScript plugin we
// learn from blocks the same way on its synchronous SQLite); past the cap the
// call waits without blocking, so a slow or stuck process never freezes
// OpenCode for long. A call that finds a request in flight waits its turn for
// at most SERVE_QUEUE_WAIT_MS (about what starting a process of its own
// costs), then runs the one-shot command. Nothing here keeps OpenCode alive
// but a call in flight.
const SERVE_RETRY_MS = 1_000
const SERVE_RETRY_MAX_MS = 60_000
const SERVE_QUEUE_WAIT_MS = 50
const SERVE_SYNC_WAIT_MS = 250
// How often a call past the blocking wait looks for its answer.
const SERVE_POLL_MS = 2
// serve's own cap on a request line: anything larger goes to the one-shot command.
const SERVE_MAX_REQUEST_BYTES = 64 * 1024 * 1024
// Sessions whose last call the plugin keeps for the incremental envelope
// (serve keeps as many by default); beyond it the least recently used
// session's next call is sent whole.
const INCREMENTAL_SESSIONS = 16

// The worker thread: starts the process when told, writes each request line,
// kills the process when a request outlives its timeout, and tells the main
// thread every answer line and the process's end (each message also bumps
// `signal[0]` and wakes a blocked waiter). Messages name the start they
// belong to (`generation`), so nothing of a dead process is taken for its
// successor's.
const RESIDENT_THREAD = `
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
`

class Resident {
  constructor() {
    // The worker thread, its port and the counter it bumps (created once).
    this.worker = null
    this.port = null
    this.signal = null
    // Whether the process is (being) started and has not ended.
    this.running = false
    // Bumped at each start: a session's baseline belongs to one process.
    this.generation = 0
    // The request in flight: {id, resolve}.
    this.pending = null
    this.ids = 0
    // Requests waiting for the one in flight: {line, resolve, timer, timeoutMs}.
    this.queue = []
    this.failures = 0
    this.retryAt = 0
    this.polling = null
  }

  /** Whether `line` may go to the resident process (on, not backing off, under the cap). */
  usable(line) {
    if (process.env.MC_TRANSFORM_SERVE === "0") return false
    if (!this.running && Date.now() < this.retryAt) return false
    return line.length * 3 <= SERVE_MAX_REQUEST_BYTES || Buffer.byteLength(line) <= SERVE_MAX_REQUEST_BYTES
  }

  /** Start the process if it is not running and may be (its start overlaps the caller's own awaits). */
  warm() {
    if (this.running || process.env.MC_TRANSFORM_SERVE === "0" || Date.now() < this.retryAt) return
    try {
      this.start()
    } catch (error) {
      this.worker = null
      this.failed()
    }
  }

  failed() {
    this.running = false
    this.failures++
    this.retryAt = Date.now() + Math.min(SERVE_RETRY_MAX_MS, SERVE_RETRY_MS * 2 ** (this.failures - 1))
  }

  start() {
    if (!this.worker) {
      const signal = new Int32Array(new SharedArrayBuffer(4))
      const { port1, port2 } = new MessageChannel()
      const worker = new Worker(RESIDENT_THREAD, { eval: true, workerData: { port: port2, signal }, transferList: [port2] })
      worker.unref()
      worker.on("error", (error) => {
        if (worker !== this.worker) return
        this.worker = null
        this.gone(`its thread failed: ${error}`, "")
      })
      this.worker = worker
      this.port = port1
      this.signal = signal
    }
    this.generation++
    this.running = true
    this.port.postMessage({ type: "start", command: bin("mc-transform", "MC_TRANSFORM_BIN"), generation: this.generation })
  }

  /** Take in what the thread said since (answers, the process's end), in order. */
  drain() {
    if (!this.port) return
    for (;;) {
      const received = receiveMessageOnPort(this.port)
      if (!received) return
      const m = received.message
      if (m.generation !== this.generation) continue
      if (m.type === "answer") {
        const pending = this.pending
        if (pending?.id !== m.id) continue
        this.pending = null
        this.failures = 0
        pending.resolve({ answer: m.answer })
        this.next()
      } else if (m.type === "gone" && this.running) {
        this.gone(m.why, m.stderr)
      }
    }
  }

  gone(why, stderr) {
    this.failed()
    const pending = this.pending
    this.pending = null
    if (pending) {
      const said = failureText(stderr)
      pending.resolve({ died: `mc-transform serve ended while answering (${why})${said ? `: ${said}` : ""}` })
    }
    // Not sent yet: they run the one-shot command.
    for (const waiting of this.queue.splice(0)) {
      clearTimeout(waiting.timer)
      waiting.resolve({ unavailable: "the resident process ended" })
    }
  }

  /** Send the next waiting request, if the process is idle. */
  next() {
    if (this.pending || !this.running) return
    const waiting = this.queue.shift()
    if (!waiting) return
    clearTimeout(waiting.timer)
    this.send(waiting.line, waiting.timeoutMs, waiting.resolve)
  }

  /** Send `line`; block for its answer up to SERVE_SYNC_WAIT_MS, then poll for it. */
  send(line, timeoutMs, resolve) {
    const id = ++this.ids
    this.pending = { id, resolve }
    this.port.postMessage({ type: "request", generation: this.generation, id, line, timeoutMs })
    const deadline = performance.now() + SERVE_SYNC_WAIT_MS
    for (;;) {
      // Read the counter before looking, so a message that lands between
      // the look and the wait ends the wait at once.
      const seen = Atomics.load(this.signal, 0)
      this.drain()
      if (this.pending?.id !== id) return
      const left = deadline - performance.now()
      if (left <= 0) break
      Atomics.wait(this.signal, 0, seen, left)
    }
    this.poll()
  }

  poll() {
    if (this.polling) return
    const tick = () => {
      this.polling = null
      this.drain()
      if (this.pending) this.polling = setTimeout(tick, SERVE_POLL_MS)
    }
    this.polling = setTimeout(tick, SERVE_POLL_MS)
  }

  /**
   * Send one request line; resolves {answer}, {died} (it ended while
   * answering: leave the call untouched) or {unavailable} (not sent: run
   * the one-shot command). Check usable() first.
   */
  request(line, timeoutMs) {
    this.drain()
    if (!this.running) {
      this.warm()
      if (!this.running) return Promise.resolve({ unavailable: "cannot start mc-transform serve" })
    }
    return new Promise((resolve) => {
      if (!this.pending) {
        this.send(line, timeoutMs, resolve)
        return
      }
      const waiting = { line, resolve, timeoutMs, timer: undefined }
      waiting.timer = setTimeout(() => {
        const at = this.queue.indexOf(waiting)
        if (at >= 0) this.queue.splice(at, 1)
        resolve({ unavailable: "busy" })
      }, SERVE_QUEUE_WAIT_MS)
      this.queue.push(waiting)
    })
  }
}

const resident = new Resident()

/**
 * A resident answer as run() gives a process's: an error line becomes the
 * exit code the one-shot command would have had and its stderr lines.
 */
function asRun(answer) {
  if (answer.startsWith('{"error":')) {
    try {
      const error = JSON.parse(answer).error
      const lines = [`mc-transform: error: ${error.message}`, ...(error.hints ?? []).map((h) => `mc-transform: hint: ${h}`)]
      return { code: error.exit ?? 1, stdout: "", stderr: lines.join("\n") }
    } catch {}
  }
  return { code: 0, stdout: answer, stderr: "" }
}

/**
 * One mc-transform command: `request` (JSON text of the command's input)
 * through the resident process when it can take it, else the one-shot
 * command with `args` and `input`. Resolves like run(), with `died: true`
 * when the resident process died while answering: leave the call untouched.
 */
async function mcTransform(kind, request, args, input) {
  const line = `{"kind":${JSON.stringify(kind)},${request.slice(1)}`
  if (resident.usable(line)) {
    const reply = await resident.request(line, TRANSFORM_TIMEOUT_MS)
    if (reply.died) return { code: -1, stdout: "", stderr: reply.died, died: true }
    if (reply.answer !== undefined) return asRun(reply.answer)
  }
  // Not taken (off, backing off, busy past the wait, too large): a process of its own.
  return run(bin("mc-transform", "MC_TRANSFORM_BIN"), args, input, TRANSFORM_TIMEOUT_MS)
}

// A completed tool's state.metadata never reaches the provider (OpenCode
// builds the tool result from state.output), yet it is often as large as the
// output itself (the read tool keeps a preview of the file). It stays out of
// mc's envelope and is put back on the parts mc returns.
const carriesToolMetadata = (part) =>
  part?.type === "tool" && typeof part.id === "string" && part.state?.status === "completed" && part.state.metadata !== undefined

/** A message as JSON text, without completed tools' metadata (kept in `stash` by part id). */
function messageJson(message, stash) {
  const parts = message?.parts
  if (!Array.isArray(parts) || !parts.some(carriesToolMetadata)) return JSON.stringify(message) ?? "null"
  const stripped = parts.map((part) => {
    if (!carriesToolMetadata(part)) return part
    stash.set(part.id, part.state.metadata)
    const { metadata, ...state } = part.state
    return { ...part, state }
  })
  return JSON.stringify({ ...message, parts: stripped })
}

/** A message text's fingerprint: equal texts, equal fingerprints. */
const fingerprint =
  typeof Bun !== "undefined" && typeof Bun.hash === "function"
    ? (text) => Bun.hash(text)
    : (text) => createHash("sha1").update(text).digest("base64")

function restoreToolMetadata(messages, stash) {
  if (stash.size === 0) return
  for (const message of messages) {
    for (const part of message?.parts ?? []) {
      if (part?.type === "tool" && part.state && part.state.metadata === undefined && stash.has(part.id)) {
        part.state.metadata = stash.get(part.id)
      }
    }
  }
}

/**
 * A zod schema for one of mc-search's JSON Schemas (objects of strings,
 * integers, booleans, enums and arrays of those: what its tools use).
 */
function zodOf(schema, z) {
  const field = (s) => {
    let f
    if (Array.isArray(s?.enum)) f = z.enum(s.enum)
    else if (s?.type === "integer") f = z.number().int()
    else if (s?.type === "number") f = z.number()
    else if (s?.type === "boolean") f = z.boolean()
    else if (s?.type === "array") f = z.array(field(s.items ?? {}))
    else if (s?.type === "string") f = z.string()
    else f = z.any()
    return s?.description ? f.describe(s.description) : f
  }
  const required = new Set(schema?.required ?? [])
  const shape = {}
  for (const [name, s] of Object.entries(schema?.properties ?? {})) {
    shape[name] = required.has(name) ? field(s) : field(s).optional()
  }
  return shape
}

/**
 * mc-search's tools as OpenCode tools: each call runs `mc-search call` with
 * the calling session and this instance's folder; the model reads the text
 * mc-search answers (an error it can correct comes back as text too). No
 * mc-search on PATH: no such tools, said once.
 */
async function searchTools(directory) {
  const listed = await run(bin("mc-search", "MC_SEARCH_BIN"), ["tools"], "", TRANSFORM_TIMEOUT_MS)
  let specs
  try {
    specs = JSON.parse(listed.stdout).tools
  } catch {
    console.error(`mc: mc-search tools unavailable (${failureText(listed.stderr) || "not on PATH"}); the agent gets ctx_reduce only`)
    return {}
  }
  const tools = {}
  for (const spec of specs) {
    // ctx_reduce stays the plugin's own (through mc-transform).
    if (spec.name === "ctx_reduce") continue
    tools[spec.name] = tool({
      description: spec.description,
      args: zodOf(spec.input_schema, tool.schema),
      async execute(args, context) {
        const input = JSON.stringify({
          tool: spec.name,
          arguments: args,
          harness: "opencode",
          session_id: context.sessionID,
          project_dir: directory,
        })
        const result = await run(bin("mc-search", "MC_SEARCH_BIN"), ["call"], input, TRANSFORM_TIMEOUT_MS)
        if (result.code !== 0) return `${spec.name} failed: ${failureText(result.stderr)}`
        try {
          return JSON.parse(result.stdout).text
        } catch (error) {
          return `${spec.name} failed: mc-search printed no JSON (${error})`
        }
      },
    })
  }
  return tools
}

export const McContext = async ({ client, serverUrl, directory }) => {
  // An `opencode run` the historian started as its model (MC_HISTORIAN_CHILD):
  // its call is the historian's own, left as OpenCode sends it.
  if (process.env.MC_HISTORIAN_CHILD) return {}
  const extraTools = await searchTools(directory)
  const server = String(serverUrl ?? "").replace(/\/$/, "")
  const limits = new Map() // "provider/model" -> Promise of {context, output}
  const historians = new Map() // sessionID -> Promise of a running historian (removed when it ends)
  // sessionID -> what the plugin knows of the session, least recently used first:
  //   passed          a messages pass has seen it: its system prompt is ours to render
  //   subagent        whether it has a parent session (undefined: not asked yet)
  //   historianChild  mc-historian's own hidden child session (its prompt goes out untouched)
  //   historianMaxTokens  the answer's cap mc-historian set on that child
  //   model           the model its last pass named (for an overflow error)
  //   systemRenders   Map(input -> output). A render depends on its input and on
  //                   the frozen date, which only an execute pass moves, so the
  //                   same input after defer passes gets the same bytes without
  //                   a process. (Side calls such as the title have inputs of their own.)
  //   historianFailure {count, retryAt} after failed historian runs
  //   incremental      the last call's key, input fingerprints and output
  //                    messages, for the incremental envelope
  const sessions = new Map()
  // sessionID -> true for the sessions holding an incremental baseline, least recently used first
  const incremental = new Map()
  let requests = 0
  let warned = false
  const moveBoundary = process.env.MC_OPENCODE_BOUNDARY === "0" ? undefined : boundaryWriter()
  // Once loading is done: the first model call would otherwise wait for the list.
  setTimeout(providerList, 0)

  /** The session's state, created if new, marked most recently used. */
  function session(sessionID) {
    let state = sessions.get(sessionID)
    if (state) sessions.delete(sessionID)
    else state = { passed: false, subagent: undefined, historianChild: false, model: undefined, systemRenders: new Map(), historianFailure: undefined, incremental: undefined }
    sessions.set(sessionID, state)
    while (sessions.size > SESSION_CAP) sessions.delete(sessions.keys().next().value)
    return state
  }

  const warnOnce = (message) => {
    if (warned) return
    warned = true
    console.error(`mc: ${message} (messages left untouched; further failures are silent)`)
  }

  // OpenCode's provider list (the models' limits), asked once and shared by
  // every lookup: OpenCode takes ~0.2 s to build it the first time, so it is
  // asked for when the plugin loads, before the first model call needs it.
  let providers = null
  function providerList() {
    if (!providers) {
      providers = client.config.providers().then(
        (res) => res?.data?.providers ?? res?.providers ?? [],
        () => {
          providers = null // ask again next time
          return undefined
        },
      )
    }
    return providers
  }

  /** A model's {context, output} limits (undefined fields when OpenCode does not say). */
  function modelLimits(providerID, modelID) {
    const key = `${providerID}/${modelID}`
    let known = limits.get(key)
    if (!known) {
      known = providerList().then((list) => {
        if (!list) limits.delete(key) // the server did not answer: ask again next call
        const limit = list?.find((p) => p.id === providerID)?.models?.[modelID]?.limit ?? {}
        return { context: limit.context, output: limit.output }
      })
      limits.set(key, known)
    }
    return known
  }

  function envelope(messages) {
    const users = messages.filter((m) => m.info?.role === "user")
    const lastUser = users[users.length - 1]
    const sessionID = lastUser?.info?.sessionID ?? messages.find((m) => m.info?.sessionID)?.info?.sessionID
    const model = lastUser?.info?.model ?? {}
    // The newest real sample: a step that failed keeps all-zero tokens.
    const sampled = (t) => t && (t.input ?? 0) + (t.cache?.read ?? 0) + (t.cache?.write ?? 0) > 0
    const assistant = [...messages].reverse().find((m) => m.info?.role === "assistant" && sampled(m.info?.tokens))
    const t = assistant?.info?.tokens
    const usage = t
      ? { input: t.input ?? 0, cache_read: t.cache?.read ?? 0, cache_write: t.cache?.write ?? 0, output: t.output ?? 0 }
      : undefined
    return { sessionID, model, usage }
  }

  /** A session with a parent is a subagent's (the task tool): no head, no historian. */
  async function isSubagent(sessionID, state) {
    if (state.subagent === undefined) {
      try {
        const res = await client.session.get({ path: { id: sessionID } })
        const info = res?.data ?? res
        if (!info?.id) return false // unknown for now: ask again next call
        state.subagent = Boolean(info.parentID)
        state.historianChild = Boolean(info.metadata?.mc?.historian)
        state.historianMaxTokens = positive(String(info.metadata?.mc?.max_output_tokens ?? ""))
      } catch {
        return false
      }
    }
    return state.subagent
  }

  /**
   * One mc-transform pass. With `waitForFold` the pass may answer
   * `decision: "wait"` (a blocking fold is due; nothing was written).
   */
  async function transform(messages, found, state, waitForFold) {
    const { sessionID, model, usage } = found
    // The resident process starts while the server answers these.
    resident.warm()
    const [limit, subagent] = await Promise.all([
      model.providerID ? modelLimits(model.providerID, model.modelID) : {},
      isSubagent(sessionID, state),
    ])
    state.model = { provider: model.providerID, id: model.modelID, context_limit: limit.context, output_limit: limit.output }
    const metadata = new Map()
    const texts = messages.map((message) => messageJson(message, metadata))
    const head = JSON.stringify({
      harness: "opencode",
      session_id: sessionID,
      project_dir: directory,
      model: state.model,
      usage,
      subagent,
      wait_for_fold: waitForFold || undefined,
    })
    const output = await pass(sessionID, state, head, texts)
    if (!output) return null
    if (Array.isArray(output.messages)) restoreToolMetadata(output.messages, metadata)
    return { sessionID, output }
  }

  /**
   * The pass's answer, with whole messages: through the resident process,
   * as a delta against the session's last call when both ends still hold
   * it (any doubt: the whole envelope), else the one-shot command. Null
   * when the messages must go out untouched.
   */
  async function pass(sessionID, state, head, texts) {
    const fields = head.slice(1, -1)
    const whole = () => `{${fields},"messages":[${texts.join(",")}]}`
    const hashes = texts.map(fingerprint)
    for (let attempt = 0; attempt < 2; attempt++) {
      // A baseline belongs to the process that made it, while it runs.
      const held = state.incremental
      const base = resident.running && held?.generation === resident.generation ? held : undefined
      const key = `${process.pid}.${++requests}`
      let line
      if (base) {
        const refs = texts.map((text, i) => {
          const at = base.index.get(hashes[i])
          return at !== undefined && base.lengths[at] === text.length ? at : text
        })
        line = `{"kind":"pass",${fields},"incremental":{"key":"${key}","base":"${base.key}","base_len":${base.lengths.length},"messages":[${refs.join(",")}]}}`
      } else {
        line = `{"kind":"pass",${fields},"messages":[${texts.join(",")}],"incremental":{"key":"${key}"}}`
      }
      if (!resident.usable(line)) break
      const reply = await resident.request(line, TRANSFORM_TIMEOUT_MS)
      if (reply.unavailable) break
      if (reply.died) {
        state.incremental = undefined
        warnOnce(reply.died)
        return null
      }
      let answer
      try {
        answer = JSON.parse(reply.answer)
      } catch (error) {
        state.incremental = undefined
        warnOnce(`mc-transform serve answered no JSON: ${error}`)
        return null
      }
      if (answer.resync) {
        state.incremental = undefined
        continue
      }
      if (answer.error) {
        state.incremental = undefined
        const failed = asRun(reply.answer)
        warnOnce(`mc-transform failed (exit ${failed.code}): ${failureText(failed.stderr)}`)
        return null
      }
      if (answer.pass?.decision === "wait") {
        state.incremental = undefined
        return answer
      }
      if (!Array.isArray(answer.messages)) {
        state.incremental = undefined
        return answer
      }
      const previous = base?.output ?? []
      const resolved = answer.messages.map((m) => (typeof m === "number" ? previous[m] : m))
      if (resolved.some((m) => m === undefined)) {
        // Not the output this end holds: start over whole.
        state.incremental = undefined
        continue
      }
      answer.messages = resolved
      const index = new Map()
      hashes.forEach((hash, i) => {
        if (!index.has(hash)) index.set(hash, i)
      })
      state.incremental = {
        generation: resident.generation,
        key,
        index,
        lengths: texts.map((text) => text.length),
        output: resolved,
      }
      holdIncremental(sessionID)
      return answer
    }
    // The one-shot command (the resident process cannot take the call). The
    // session's baseline stays valid: this call did not touch it.
    const result = await run(bin("mc-transform", "MC_TRANSFORM_BIN"), [], whole(), TRANSFORM_TIMEOUT_MS)
    if (result.code !== 0) {
      warnOnce(`mc-transform failed (exit ${result.code}): ${failureText(result.stderr)}`)
      return null
    }
    try {
      return JSON.parse(result.stdout)
    } catch (error) {
      warnOnce(`mc-transform printed no JSON: ${error}`)
      return null
    }
  }

  /** Keep the last call of at most INCREMENTAL_SESSIONS sessions. */
  function holdIncremental(sessionID) {
    incremental.delete(sessionID)
    incremental.set(sessionID, true)
    while (incremental.size > INCREMENTAL_SESSIONS) {
      const oldest = incremental.keys().next().value
      incremental.delete(oldest)
      const state = sessions.get(oldest)
      if (state) state.incremental = undefined
    }
  }

  /** Whether a historian could run for the session now (not backing off). */
  function historianAvailable(sessionID, state) {
    if (!server || state.subagent) return false
    if (historians.has(sessionID)) return true
    const failed = state.historianFailure
    return !(failed && Date.now() < failed.retryAt)
  }

  /**
   * Start the historian for a session once; later calls share the running
   * one. Null while a failed run's back-off lasts.
   */
  function historian(sessionID) {
    if (!historians.has(sessionID)) {
      const failed = sessions.get(sessionID)?.historianFailure
      if (failed && Date.now() < failed.retryAt) return null
      // With no historian model in mc's config, mc-historian folds through
      // this very server, on the session's model and the user's login here.
      const args = ["run", "--session", sessionID, "--opencode-url", server]
      if (directory) args.push("--project-dir", directory)
      const running = run(bin("mc-historian", "MC_HISTORIAN_BIN"), args, "", HISTORIAN_TIMEOUT_MS)
        .then((result) => {
          // A session deleted or forgotten meanwhile stays forgotten.
          const state = sessions.get(sessionID)
          if (result.code === 0) {
            if (state) state.historianFailure = undefined
          } else {
            const count = (failed?.count ?? 0) + 1
            const wait = Math.min(HISTORIAN_RETRY_MAX_MS, HISTORIAN_RETRY_MS * 2 ** (count - 1))
            if (state) state.historianFailure = { count, retryAt: Date.now() + wait }
            const reason = failureText(result.stderr)
            console.error(`mc: mc-historian failed (exit ${result.code}): ${reason}; next try in ${wait / 1000} s`)
          }
          return result
        })
        .finally(() => historians.delete(sessionID))
      historians.set(sessionID, running)
    }
    return historians.get(sessionID)
  }

  /**
   * A session error event: a provider's context overflow goes to
   * `mc-transform overflow`, which learns the model's limit and makes the
   * session's next pass an emergency (anything else it answers as unrecognised).
   */
  async function overflow(properties) {
    const { sessionID, error } = properties ?? {}
    if (!sessionID || !OVERFLOW_CANDIDATES.has(error?.name)) return
    if (sessions.get(sessionID)?.historianChild) return // mc-historian reports its own failures
    const model = sessions.get(sessionID)?.model
    const request = JSON.stringify({ harness: "opencode", session_id: sessionID, model, error })
    const result = await mcTransform("overflow", request, ["overflow"], request)
    if (result.code !== 0) {
      console.error(`mc: mc-transform overflow failed (exit ${result.code}): ${failureText(result.stderr)}`)
      return
    }
    try {
      const answer = JSON.parse(result.stdout)
      if (answer.recognised) {
        const learned = answer.limit_stored ? `; ${answer.model} holds ${answer.limit} tokens` : ""
        console.error(`mc: the provider rejected the prompt as too long${learned}; the next call drops to fit`)
      }
    } catch {}
  }

  return {
    "experimental.chat.messages.transform": async (_input, output) => {
      // OpenCode keeps using this very array: splice in place, never reassign.
      const messages = output.messages
      const found = envelope(messages)
      if (!found.sessionID) return
      const state = session(found.sessionID)
      if ((await isSubagent(found.sessionID, state)) && state.historianChild) return
      let pass = await transform(messages, found, state, historianAvailable(found.sessionID, state))
      if (!pass) return
      if (pass.output.pass?.decision === "wait") {
        // Near the limit with a fold due: the pass wrote nothing and said so
        // at once. Wait for the historian, then run the one pass that goes
        // out, so this very request carries the compartments.
        const running = historian(found.sessionID)
        if (running) await running
        pass = await transform(messages, found, state, false)
        if (!pass) return
      }
      const report = pass.output.pass ?? {}
      if (report.historian_due && server) historian(found.sessionID)
      if (report.fold_boundary && moveBoundary) {
        // After the call has its messages: the next call loads fewer.
        const through = report.fold_boundary
        setTimeout(() => {
          moveBoundary(found.sessionID, through)
            .then((done) => process.env.MC_BOUNDARY_LOG && console.error(`mc: boundary ${through}: ${done}`))
            .catch((error) => warnOnce(`cannot write the compaction boundary: ${error}`))
        }, 0)
      }
      if (Array.isArray(pass.output.messages)) {
        messages.splice(0, messages.length, ...pass.output.messages)
      }
      state.passed = true
      if (report.decision === "execute") state.systemRenders.clear()
    },

    // Runs after the messages hook of the same model call (and for side calls
    // such as the title, which get the same rendering: it is deterministic).
    "experimental.chat.system.transform": async (input, output) => {
      const sessionID = input?.sessionID
      const system = output?.system
      if (!sessionID || !sessions.get(sessionID)?.passed || !Array.isArray(system)) return
      const state = session(sessionID)
      const key = JSON.stringify(system)
      const cached = state.systemRenders.get(key)
      if (cached) {
        system.splice(0, system.length, ...cached)
        return
      }
      const request = JSON.stringify({ harness: "opencode", session_id: sessionID, system })
      const result = await mcTransform("system", request, ["system"], request)
      if (result.died) return
      if (result.code !== 0) {
        warnOnce(`mc-transform system failed (exit ${result.code}): ${failureText(result.stderr)}`)
        return
      }
      try {
        const answer = JSON.parse(result.stdout)
        const rendered = answer.system
        if (!Array.isArray(rendered)) return
        // OpenCode keeps using this very array too.
        system.splice(0, system.length, ...rendered)
        // An unknown session (or a database error) is not worth remembering.
        if (answer.known_session) {
          state.systemRenders.set(key, rendered)
          while (state.systemRenders.size > SYSTEM_RENDERS_CAP) {
            state.systemRenders.delete(state.systemRenders.keys().next().value)
          }
        }
      } catch (error) {
        warnOnce(`mc-transform system printed no JSON: ${error}`)
      }
    },

    // mc-historian's child sessions answer within historian.max_output_tokens,
    // as its other routes do (OpenCode would allow the model's whole limit).
    // A user message arrives before its model calls: start the resident
    // process and learn the model's limits now, so the first call of a
    // session waits for neither.
    "chat.message": async (input) => {
      resident.warm()
      const model = input?.model
      if (model?.providerID && model?.modelID) modelLimits(model.providerID, model.modelID)
    },

    "chat.params": async (input, output) => {
      const cap = sessions.get(input?.sessionID)?.historianMaxTokens
      if (cap && !(output.maxOutputTokens <= cap)) output.maxOutputTokens = cap
    },

    event: async ({ event }) => {
      if (event?.type === "session.deleted") {
        const sessionID = event.properties?.sessionID ?? event.properties?.info?.id
        sessions.delete(sessionID)
        incremental.delete(sessionID)
        return
      }
      if (event?.type === "session.created" || event?.type === "session.updated") {
        // Whether it has a parent, learned now rather than asked on its first call.
        const info = event.properties?.info
        if (info?.id && (event.type === "session.created" || sessions.has(info.id))) {
          const state = session(info.id)
          state.subagent = Boolean(info.parentID)
          state.historianChild = Boolean(info.metadata?.mc?.historian)
          state.historianMaxTokens = positive(String(info.metadata?.mc?.max_output_tokens ?? ""))
        }
        return
      }
      if (event?.type === "session.error") return overflow(event.properties)
      if (event?.type !== "session.compacted" || !server) return
      const result = await run(
        bin("mc-pin", "MC_PIN_BIN"),
        ["restore", "--opencode-url", server],
        JSON.stringify(event),
        TRANSFORM_TIMEOUT_MS,
      )
      if (result.code !== 0) console.error(`mc: mc-pin restore failed: ${result.stderr.trim()}`)
    },

    tool: {
      ...extraTools,
      ctx_reduce: tool({
        description:
          "Drop messages and tool outputs you no longer need from your context, by their §N§ tags " +
          '(e.g. "3-5,12"). Drops are queued and applied on a later turn; the newest tags are protected.',
        args: { drop: tool.schema.string().describe("Tags or ranges to drop, e.g. 3-5,12") },
        async execute(args, context) {
          const request = JSON.stringify({ harness: "opencode", session_id: context.sessionID, drop: String(args.drop) })
          const result = await mcTransform(
            "reduce",
            request,
            ["reduce", "--harness", "opencode", "--session", context.sessionID, "--drop", String(args.drop)],
            "",
          )
          if (result.code !== 0) return `ctx_reduce failed: ${result.stderr.trim()}`
          let r
          try {
            r = JSON.parse(result.stdout)
          } catch (error) {
            return `ctx_reduce failed: mc-transform printed no JSON (${error})`
          }
          const parts = []
          if (r.queued?.length) parts.push(`queued ${r.queued.map((n) => `§${n}§`).join(", ")}`)
          if (r.protected?.length) parts.push(`deferred (still protected) ${r.protected.map((n) => `§${n}§`).join(", ")}`)
          if (r.already?.length) parts.push(`already handled ${r.already.map((n) => `§${n}§`).join(", ")}`)
          if (r.unknown?.length) parts.push(`unknown ${r.unknown.map((n) => `§${n}§`).join(", ")}`)
          return parts.length ? parts.join("; ") : "nothing to drop"
        },
      }),
    },
  }
}
