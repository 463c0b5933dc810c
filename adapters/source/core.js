// mc's adapter core, shared by the OpenCode plugin and the Pi extension (each
// built into one file with it: `npm run build`): running mc's binaries, the
// resident `mc-transform serve` client, the incremental envelope of a pass,
// the one-shot fallback and the one-line failure text.
//
// mc-transform runs resident (`mc-transform serve`, one per harness process):
// each call sends only the messages that changed since the session's last
// call and gets back only what changed. When it cannot take a call (busy with
// another, backing off after it died, a request above its cap) the call runs
// the one-shot command instead; a call it was answering when it died goes out
// untouched. Any failure of mc leaves the messages as the harness built them.
import { spawn } from "node:child_process"
import { createHash } from "node:crypto"
import { MessageChannel, Worker, receiveMessageOnPort } from "node:worker_threads"

export const TRANSFORM_TIMEOUT_MS = 30_000

/**
 * ctx_reduce as `mc-search tools` publishes it (the one definition, in
 * mc-search-core's tools.rs), for when mc-search cannot be run; a test of
 * mc-doctor-core checks the two agree.
 */
export const REDUCE_TOOL = {
  name: "ctx_reduce",
  description:
    "Drop messages and tool outputs you no longer need, by §N§ tag. Applied at the next rebuild, never a cache miss; the newest tags are protected; ctx_expand brings them back.",
  input_schema: {
    type: "object",
    properties: { drop: { type: "string", description: "e.g. 3-5,12" } },
    required: ["drop"],
  },
}

/**
 * ctx_reduce's spec among those `mc-search tools` listed, else REDUCE_TOOL.
 * @param {unknown} specs
 * @returns {{ name: string, description: string, input_schema: any }}
 */
export function reduceSpec(specs) {
  const listed = Array.isArray(specs) ? specs.find((s) => s?.name === "ctx_reduce") : undefined
  return typeof listed?.description === "string" && listed?.input_schema?.properties?.drop ? listed : REDUCE_TOOL
}

/**
 * What a process did: its exit code (-1 when it could not start or was
 * killed), what it printed, and `died` when the resident process ended while
 * answering (leave the call untouched).
 * @typedef {{ code: number, stdout: string, stderr: string, died?: boolean }} Run
 */

/**
 * A binary's path: the environment variable naming it, else its name (on PATH).
 * @param {string} name
 * @param {string} env
 * @returns {string}
 */
export const bin = (name, env) => process.env[env] || name

/**
 * What a failed mc binary said, on one line: its `error:` line and the
 * `hint:` lines after it (else the last line of its stderr).
 * @param {string} stderr
 * @returns {string}
 */
export function failureText(stderr) {
  const lines = stderr.trim().split("\n")
  let at = lines.length - 1
  while (at > 0 && !/^mc-[a-z]+: error: /.test(lines[at] ?? "")) at--
  if (!/^mc-[a-z]+: error: /.test(lines[at] ?? "")) at = lines.length - 1
  return lines.slice(at).join("; ")
}

/**
 * Run a command with `input` on stdin. Under Bun (OpenCode runs plugins
 * there) through Bun's own spawn, which costs a third of the hook's time less
 * than its node:child_process layer on a 0.5 MB envelope; elsewhere node's.
 * Never a synchronous spawn: mc-historian and mc-pin call back into the harness.
 * @param {string} command
 * @param {string[]} args
 * @param {string} input
 * @param {number} timeoutMs
 * @returns {Promise<Run>}
 */
export async function run(command, args, input, timeoutMs) {
  if (typeof Bun !== "undefined") return runBun(Bun, command, args, input, timeoutMs)
  return runNode(command, args, input, timeoutMs)
}

/**
 * @param {NonNullable<typeof Bun>} bun
 * @param {string} command
 * @param {string[]} args
 * @param {string} input
 * @param {number} timeoutMs
 * @returns {Promise<Run>}
 */
async function runBun(bun, command, args, input, timeoutMs) {
  let child
  try {
    child = bun.spawn([command, ...args], { stdin: Buffer.from(input), stdout: "pipe", stderr: "pipe" })
  } catch (error) {
    return { code: -1, stdout: "", stderr: String(error) }
  }
  const spawned = child
  const timer = setTimeout(() => spawned.kill("SIGKILL"), timeoutMs)
  const [stdout, stderr, code] = await Promise.all([
    new Response(spawned.stdout).text(),
    new Response(spawned.stderr).text(),
    spawned.exited,
  ])
  clearTimeout(timer)
  return {
    code: spawned.signalCode ? -1 : code,
    stdout,
    stderr: stderr + (spawned.signalCode ? `killed by ${spawned.signalCode}` : ""),
  }
}

/**
 * @param {string} command
 * @param {string[]} args
 * @param {string} input
 * @param {number} timeoutMs
 * @returns {Promise<Run>}
 */
function runNode(command, args, input, timeoutMs) {
  return new Promise((resolve) => {
    let child
    try {
      child = spawn(command, args, { stdio: ["pipe", "pipe", "pipe"] })
    } catch (error) {
      resolve({ code: -1, stdout: "", stderr: String(error) })
      return
    }
    const spawned = child
    /** @type {Buffer[]} */
    const out = []
    /** @type {Buffer[]} */
    const err = []
    const timer = setTimeout(() => spawned.kill("SIGKILL"), timeoutMs)
    spawned.stdout.on("data", (/** @type {Buffer} */ d) => out.push(d))
    spawned.stderr.on("data", (/** @type {Buffer} */ d) => err.push(d))
    spawned.on("error", (error) => {
      clearTimeout(timer)
      resolve({ code: -1, stdout: "", stderr: String(error) })
    })
    spawned.on("close", (code, signal) => {
      clearTimeout(timer)
      resolve({
        code: signal ? -1 : (code ?? -1),
        stdout: Buffer.concat(out).toString("utf8"),
        stderr: Buffer.concat(err).toString("utf8") + (signal ? `killed by ${signal}` : ""),
      })
    })
    spawned.stdin.on("error", () => {})
    spawned.stdin.end(input)
  })
}

// mc-transform serve: one per harness process, shared by every instance of an
// adapter it loads. Started on the first call (or when the adapter warms it),
// restarted on a later one after it died (waiting 1 s, doubling up to a
// minute, during which calls run the one-shot command). It answers one
// request at a time.
//
// The process is driven from a worker thread of its own, and a call waits for
// its answer on the harness's thread, blocked (Atomics.wait), for at most
// SERVE_SYNC_WAIT_MS. Waiting with `await` instead left the answer in the
// harness's event loop behind whatever else it had queued: measured on
// bench-opencode, serve answered in 1-2 ms and the hook saw it 8-67 ms later.
// Blocked, nothing else runs until the answer is in; past the cap the call
// waits without blocking, so a slow or stuck process never freezes the
// harness for long. A call that finds a request in flight waits its turn for
// at most SERVE_QUEUE_WAIT_MS (about what starting a process of its own
// costs), then runs the one-shot command. Nothing here keeps the harness
// alive but a call in flight.
export const SERVE_RETRY_MS = 1_000
export const SERVE_RETRY_MAX_MS = 60_000
export const SERVE_QUEUE_WAIT_MS = 50
export const SERVE_SYNC_WAIT_MS = 250
// How often a call past the blocking wait looks for its answer.
const SERVE_POLL_MS = 2
// serve's own cap on a request line: anything larger goes to the one-shot command.
export const SERVE_MAX_REQUEST_BYTES = 64 * 1024 * 1024

// The worker thread: starts the process when told, writes each request line,
// kills the process when a request outlives its timeout, and tells the main
// thread the process's start, every answer line and the process's end (each
// message also bumps `signal[0]` and wakes a blocked waiter). Messages name
// the start they belong to (`generation`), so nothing of a dead process is
// taken for its successor's.
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
`

/**
 * What a request to the resident process came to: its answer line, `died`
 * (it ended while answering: leave the call untouched) or `unavailable` (not
 * sent: run the one-shot command).
 * @typedef {{ answer?: string, died?: string, unavailable?: string }} Reply
 */

/**
 * What the worker thread tells.
 * @typedef {{ type: "started", generation: number, pid: number }
 *   | { type: "answer", generation: number, id: number, answer: string }
 *   | { type: "gone", generation: number, why: string, stderr: string }} Told
 */

/** @typedef {{ line: string, resolve: (reply: Reply) => void, timeoutMs: number, timer: ReturnType<typeof setTimeout> | undefined }} Waiting */

export class Resident {
  /** @param {{ syncWaitMs?: number }} [options] how long a call blocks for its answer (SERVE_SYNC_WAIT_MS) */
  constructor(options = {}) {
    this.syncWaitMs = options.syncWaitMs ?? SERVE_SYNC_WAIT_MS
    // The worker thread, its port and the counter it bumps (created once).
    /** @type {Worker | null} */
    this.worker = null
    /** @type {import("node:worker_threads").MessagePort | null} */
    this.port = null
    /** @type {Int32Array | null} */
    this.signal = null
    // Whether the process is (being) started and has not ended.
    this.running = false
    // Bumped at each start: a session's baseline belongs to one process.
    this.generation = 0
    // The running process's id, once its thread said so.
    /** @type {number | undefined} */
    this.pid = undefined
    // The request in flight.
    /** @type {{ id: number, resolve: (reply: Reply) => void } | null} */
    this.pending = null
    this.ids = 0
    // Requests waiting for the one in flight.
    /** @type {Waiting[]} */
    this.queue = []
    this.failures = 0
    this.retryAt = 0
    /** @type {ReturnType<typeof setTimeout> | null} */
    this.polling = null
  }

  /**
   * Whether `line` may go to the resident process (on, not backing off, under the cap).
   * @param {string} line
   * @returns {boolean}
   */
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
    } catch {
      this.worker = null
      this.failed()
    }
  }

  failed() {
    this.running = false
    this.pid = undefined
    this.failures++
    this.retryAt = Date.now() + Math.min(SERVE_RETRY_MAX_MS, SERVE_RETRY_MS * 2 ** (this.failures - 1))
  }

  start() {
    if (!this.worker || !this.port) {
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
    this.port?.postMessage({ type: "start", command: bin("mc-transform", "MC_TRANSFORM_BIN"), generation: this.generation })
  }

  /** Take in what the thread said since (its start, answers, the process's end), in order. */
  drain() {
    if (!this.port) return
    for (;;) {
      const received = receiveMessageOnPort(this.port)
      if (!received) return
      const m = /** @type {Told} */ (received.message)
      if (m.generation !== this.generation) continue
      if (m.type === "started") {
        if (this.running) this.pid = m.pid
      } else if (m.type === "answer") {
        const pending = this.pending
        if (!pending || pending.id !== m.id) continue
        this.pending = null
        this.failures = 0
        pending.resolve({ answer: m.answer })
        this.next()
      } else if (m.type === "gone" && this.running) {
        this.gone(m.why, m.stderr)
      }
    }
  }

  /**
   * @param {string} why
   * @param {string} stderr
   */
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

  /**
   * Send `line`; block for its answer up to the sync wait, then poll for it.
   * @param {string} line
   * @param {number} timeoutMs
   * @param {(reply: Reply) => void} resolve
   */
  send(line, timeoutMs, resolve) {
    const port = this.port
    const signal = this.signal
    if (!port || !signal) {
      resolve({ unavailable: "mc-transform serve has no thread" })
      return
    }
    const id = ++this.ids
    this.pending = { id, resolve }
    port.postMessage({ type: "request", generation: this.generation, id, line, timeoutMs })
    const deadline = performance.now() + this.syncWaitMs
    for (;;) {
      // Read the counter before looking, so a message that lands between
      // the look and the wait ends the wait at once.
      const seen = Atomics.load(signal, 0)
      this.drain()
      if (this.pending?.id !== id) return
      const left = deadline - performance.now()
      if (left <= 0) break
      Atomics.wait(signal, 0, seen, left)
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
   * Send one request line. Check usable() first.
   * @param {string} line
   * @param {number} timeoutMs the process is killed when its answer takes longer
   * @returns {Promise<Reply>}
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
      /** @type {Waiting} */
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

/**
 * A resident answer as run() gives a process's: an error line becomes the
 * exit code the one-shot command would have had and its stderr lines.
 * @param {string} answer
 * @returns {Run}
 */
export function asRun(answer) {
  if (answer.startsWith('{"error":')) {
    try {
      /** @type {{ message?: string, exit?: number, hints?: string[] }} */
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
 * @param {Resident} resident
 * @param {string} kind
 * @param {string} request
 * @param {string[]} args
 * @param {string} input
 * @returns {Promise<Run>}
 */
export async function mcTransform(resident, kind, request, args, input) {
  const line = `{"kind":${JSON.stringify(kind)},${request.slice(1)}`
  if (resident.usable(line)) {
    const reply = await resident.request(line, TRANSFORM_TIMEOUT_MS)
    if (reply.died) return { code: -1, stdout: "", stderr: reply.died, died: true }
    if (reply.answer !== undefined) return asRun(reply.answer)
  }
  // Not taken (off, backing off, busy past the wait, too large): a process of its own.
  return run(bin("mc-transform", "MC_TRANSFORM_BIN"), args, input, TRANSFORM_TIMEOUT_MS)
}

/**
 * A message text's fingerprint: equal texts, equal fingerprints.
 * @type {(text: string) => string | number | bigint}
 */
export const fingerprint = fingerprinter(typeof Bun !== "undefined" ? Bun : undefined)

/**
 * Bun's own hash under Bun, else SHA-1.
 * @param {typeof Bun} bun
 * @returns {(text: string) => string | number | bigint}
 */
function fingerprinter(bun) {
  if (bun && typeof bun.hash === "function") return (text) => bun.hash(text)
  return (text) => createHash("sha1").update(text).digest("base64")
}

/**
 * A session's last call, for the incremental envelope: the process that
 * answered it, its key, where each input message's fingerprint first
 * appears, each input message's length, and the output messages.
 * @typedef {{ generation: number, key: string, index: Map<string | number | bigint, number>, lengths: number[], output: unknown[] }} Baseline
 */

/**
 * A pass's answer, as mc-transform prints it (the fields the adapters read).
 * @typedef {{
 *   messages?: unknown[],
 *   system?: unknown,
 *   pass?: { decision?: string, historian_due?: boolean, fold_boundary?: string, [field: string]: unknown },
 *   resync?: unknown,
 *   error?: unknown,
 * }} PassAnswer
 */

// Request keys: unique within the process (every instance of an adapter shares them).
let requests = 0

/**
 * The pass's answer, with whole messages: through the resident process, as a
 * delta against the session's last call when both ends still hold it (any
 * doubt: the whole envelope), else the one-shot command. Null when the
 * messages must go out untouched (`warn` says why).
 * @param {Resident} resident
 * @param {{ incremental?: Baseline }} state the session's: its baseline is kept there
 * @param {string} head the envelope's fields but `messages`, as a JSON object's text
 * @param {string[]} texts each message as JSON text
 * @param {(message: string) => void} warn
 * @param {() => void} [held] called when the session holds a new baseline
 * @returns {Promise<PassAnswer | null>}
 */
export async function pass(resident, state, head, texts, warn, held) {
  const fields = head.slice(1, -1)
  const hashes = texts.map(fingerprint)
  for (let attempt = 0; attempt < 2; attempt++) {
    // A baseline belongs to the process that made it, while it runs.
    const kept = state.incremental
    const base = resident.running && kept?.generation === resident.generation ? kept : undefined
    const key = `${process.pid}.${++requests}`
    let line
    if (base) {
      const refs = texts.map((text, i) => {
        const at = base.index.get(/** @type {string | number | bigint} */ (hashes[i]))
        return at !== undefined && base.lengths[at] === text.length ? at : text
      })
      line = `{"kind":"pass",${fields},"incremental":{"key":"${key}","base":"${base.key}","base_len":${base.lengths.length},"messages":[${refs.join(",")}]}}`
    } else {
      line = `{"kind":"pass",${fields},"messages":[${texts.join(",")}],"incremental":{"key":"${key}"}}`
    }
    if (!resident.usable(line)) break
    const reply = await resident.request(line, TRANSFORM_TIMEOUT_MS)
    if (reply.unavailable || reply.answer === undefined) {
      if (reply.died) {
        state.incremental = undefined
        warn(reply.died)
        return null
      }
      break
    }
    /** @type {PassAnswer} */
    let answer
    try {
      answer = JSON.parse(reply.answer)
    } catch (error) {
      state.incremental = undefined
      warn(`mc-transform serve answered no JSON: ${error}`)
      return null
    }
    if (answer === null || typeof answer !== "object") {
      state.incremental = undefined
      warn(`mc-transform serve answered no JSON object: ${reply.answer.slice(0, 100)}`)
      return null
    }
    if (answer.resync) {
      state.incremental = undefined
      continue
    }
    if (answer.error) {
      state.incremental = undefined
      const failed = asRun(reply.answer)
      warn(`mc-transform failed (exit ${failed.code}): ${failureText(failed.stderr)}`)
      return null
    }
    if (answer.pass?.decision === "wait" || !Array.isArray(answer.messages)) {
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
    /** @type {Map<string | number | bigint, number>} */
    const index = new Map()
    hashes.forEach((hash, i) => {
      if (!index.has(hash)) index.set(hash, i)
    })
    state.incremental = { generation: resident.generation, key, index, lengths: texts.map((text) => text.length), output: resolved }
    held?.()
    return answer
  }
  // The one-shot command (the resident process cannot take the call). The
  // session's baseline stays valid: this call did not touch it.
  const result = await run(bin("mc-transform", "MC_TRANSFORM_BIN"), [], `{${fields},"messages":[${texts.join(",")}]}`, TRANSFORM_TIMEOUT_MS)
  if (result.code !== 0) {
    warn(`mc-transform failed (exit ${result.code}): ${failureText(result.stderr)}`)
    return null
  }
  try {
    return JSON.parse(result.stdout)
  } catch (error) {
    warn(`mc-transform printed no JSON: ${error}`)
    return null
  }
}
