// mc for Pi (@mariozechner/pi-coding-agent): runs mc-transform on every model
// call through Pi's `context` event (tags, drops, the history head, pins kept
// out of drops), renders the system prompt once per prompt through
// `before_agent_start` (guidance about §N§ tags, and Pi's "Current date:"
// line frozen until a pass busts the cache anyway), starts the historian
// when a pass says a fold is due, puts pinned messages back after Pi
// compacts (`session_compact` → `mc-pin restore --harness pi`, sent as a
// hidden custom message), hands a provider's "prompt is too long" to
// `mc-transform overflow`, and gives the agent its tools: ctx_reduce, and
// ctx_search, ctx_memory, ctx_note and ctx_expand from mc-search.
//
// mc-transform runs resident (`mc-transform serve`, one per Pi process): each
// call sends only the messages that changed since the session's last call and
// gets back only what changed. When it cannot take a call (backing off after
// it died, a request above its cap) the call runs the one-shot command; a
// call it was answering when it died goes out untouched. Any failure of mc
// leaves the messages as Pi built them.
//
// Install: copy this file into Pi's extensions folder
// (~/.pi/agent/extensions/mc.ts), or load it with `pi -e mc.ts`. The mc
// binaries are found on PATH, or through MC_TRANSFORM_BIN, MC_PIN_BIN,
// MC_HISTORIAN_BIN and MC_SEARCH_BIN; the database through MC_DB as usual.
// MC_TRANSFORM_SERVE=0 runs every call as a one-shot process. Inside mc's
// own historian run (MC_HISTORIAN_CHILD=1 in its environment) it does nothing.
import { spawn } from "node:child_process"
import { createHash } from "node:crypto"

const TRANSFORM_TIMEOUT_MS = 30_000
const HISTORIAN_TIMEOUT_MS = 300_000
const HISTORIAN_RETRY_MS = 30_000
const HISTORIAN_RETRY_MAX_MS = 600_000
const SERVE_RETRY_MS = 1_000
const SERVE_RETRY_MAX_MS = 60_000
const SERVE_MAX_REQUEST_BYTES = 64 * 1024 * 1024

const bin = (name: string, env: string): string => process.env[env] || name

type Run = { code: number; stdout: string; stderr: string; died?: boolean }

/** A failed mc binary's `error:` line and the `hint:` lines after it, on one line. */
function failureText(stderr: string): string {
  const lines = stderr.trim().split("\n")
  let at = lines.length - 1
  while (at > 0 && !/^mc-[a-z]+: error: /.test(lines[at])) at--
  if (!/^mc-[a-z]+: error: /.test(lines[at])) at = lines.length - 1
  return lines.slice(at).join("; ")
}

/** Run a command with `input` on stdin. Never synchronous: Pi's loop goes on. */
function run(command: string, args: string[], input: string, timeoutMs: number): Promise<Run> {
  return new Promise((resolve) => {
    let child
    try {
      child = spawn(command, args, { stdio: ["pipe", "pipe", "pipe"] })
    } catch (error) {
      resolve({ code: -1, stdout: "", stderr: String(error) })
      return
    }
    const out: Buffer[] = []
    const err: Buffer[] = []
    const timer = setTimeout(() => child.kill("SIGKILL"), timeoutMs)
    child.stdout.on("data", (d: Buffer) => out.push(d))
    child.stderr.on("data", (d: Buffer) => err.push(d))
    child.on("error", (error: unknown) => {
      clearTimeout(timer)
      resolve({ code: -1, stdout: "", stderr: String(error) })
    })
    child.on("close", (code: number | null, signal: string | null) => {
      clearTimeout(timer)
      resolve({
        code: signal ? -1 : (code ?? -1),
        stdout: Buffer.concat(out).toString("utf8"),
        stderr: Buffer.concat(err).toString("utf8") + (signal ? `killed by ${signal}` : ""),
      })
    })
    child.stdin.on("error", () => {})
    child.stdin.end(input)
  })
}

/**
 * One `mc-transform serve` per Pi process, started when the extension loads
 * and again on a later call after it died (waiting 1 s, doubling up to a minute).
 * Pi calls the model one request at a time per session, so requests simply
 * queue; it never keeps Pi alive.
 */
class Resident {
  child: any = null
  generation = 0
  failures = 0
  retryAt = 0
  chunks: Buffer[] = []
  stderr = ""
  waiting: Array<{ resolve: (r: { answer?: string; died?: string }) => void; timer: any }> = []

  usable(line: string): boolean {
    if (process.env.MC_TRANSFORM_SERVE === "0") return false
    if (!this.child && Date.now() < this.retryAt) return false
    return Buffer.byteLength(line) <= SERVE_MAX_REQUEST_BYTES
  }

  warm(): void {
    if (this.child || process.env.MC_TRANSFORM_SERVE === "0" || Date.now() < this.retryAt) return
    try {
      const child = spawn(bin("mc-transform", "MC_TRANSFORM_BIN"), ["serve"], { stdio: ["pipe", "pipe", "pipe"] })
      this.child = child
      this.generation++
      this.chunks = []
      this.stderr = ""
      child.stdout.on("data", (chunk: Buffer) => this.data(child, chunk))
      child.stderr.on("data", (chunk: Buffer) => {
        if (child === this.child) this.stderr = (this.stderr + chunk).slice(-4000)
      })
      child.stdin.on("error", () => {})
      child.on("error", (error: unknown) => this.gone(child, String(error)))
      child.on("close", (code: number | null, signal: string | null) => this.gone(child, signal ? `killed by ${signal}` : `exit ${code}`))
      child.unref()
      for (const stream of [child.stdin, child.stdout, child.stderr]) (stream as any)?.unref?.()
    } catch {
      this.failed()
    }
  }

  failed(): void {
    this.child = null
    this.failures++
    this.retryAt = Date.now() + Math.min(SERVE_RETRY_MAX_MS, SERVE_RETRY_MS * 2 ** (this.failures - 1))
  }

  data(child: any, chunk: Buffer): void {
    if (child !== this.child) return
    let at = chunk.indexOf(10)
    while (at >= 0) {
      this.chunks.push(chunk.subarray(0, at))
      const line = Buffer.concat(this.chunks).toString("utf8")
      this.chunks = []
      const pending = this.waiting.shift()
      if (pending) {
        clearTimeout(pending.timer)
        this.failures = 0
        pending.resolve({ answer: line })
      }
      chunk = chunk.subarray(at + 1)
      at = chunk.indexOf(10)
    }
    if (chunk.length) this.chunks.push(chunk)
  }

  gone(child: any, why: string): void {
    if (child !== this.child) return
    this.failed()
    const said = failureText(this.stderr)
    for (const pending of this.waiting.splice(0)) {
      clearTimeout(pending.timer)
      pending.resolve({ died: `mc-transform serve ended while answering (${why})${said ? `: ${said}` : ""}` })
    }
  }

  /** One request line; {answer}, or {died} (leave the call untouched). */
  request(line: string): Promise<{ answer?: string; died?: string; unavailable?: boolean }> {
    this.warm()
    const child = this.child
    if (!child) return Promise.resolve({ unavailable: true })
    return new Promise((resolve) => {
      const timer = setTimeout(() => child.kill("SIGKILL"), TRANSFORM_TIMEOUT_MS)
      this.waiting.push({ resolve, timer })
      child.stdin.write(`${line}\n`)
    })
  }
}

const resident = new Resident()

/** A resident answer as a process's: an error line becomes its exit code and stderr. */
function asRun(answer: string): Run {
  if (answer.startsWith('{"error":')) {
    try {
      const error = JSON.parse(answer).error
      const lines = [`mc-transform: error: ${error.message}`, ...(error.hints ?? []).map((h: string) => `mc-transform: hint: ${h}`)]
      return { code: error.exit ?? 1, stdout: "", stderr: lines.join("\n") }
    } catch {}
  }
  return { code: 0, stdout: answer, stderr: "" }
}

/** One mc-transform command through the resident process, else a process of its own. */
async function mcTransform(kind: string, request: string, args: string[], input: string): Promise<Run> {
  const line = `{"kind":${JSON.stringify(kind)},${request.slice(1)}`
  if (resident.usable(line)) {
    const reply = await resident.request(line)
    if (reply.died) return { code: -1, stdout: "", stderr: reply.died, died: true }
    if (reply.answer !== undefined) return asRun(reply.answer)
  }
  return run(bin("mc-transform", "MC_TRANSFORM_BIN"), args, input, TRANSFORM_TIMEOUT_MS)
}

const fingerprint = (text: string): string => createHash("sha1").update(text).digest("base64")

/** The newest assistant message's usage, as mc's envelope names it. */
function lastUsage(messages: any[]): any {
  for (let i = messages.length - 1; i >= 0; i--) {
    const m = messages[i]
    if (m?.role !== "assistant") continue
    const u = m.usage
    if (!u || m.stopReason === "error" || m.stopReason === "aborted") continue
    if ((u.input ?? 0) + (u.cacheRead ?? 0) + (u.cacheWrite ?? 0) <= 0) continue
    return { input: u.input ?? 0, cache_read: u.cacheRead ?? 0, cache_write: u.cacheWrite ?? 0, output: u.output ?? 0 }
  }
  return undefined
}

const text = (t: string) => ({ content: [{ type: "text", text: t }], details: {} })

export default async function mc(pi: any) {
  if (process.env.MC_HISTORIAN_CHILD === "1") return
  // Start the resident process while Pi starts: the first prompt's system
  // render would otherwise wait for it to start and open the database.
  resident.warm()
  let warned = false
  const warnOnce = (message: string) => {
    if (warned) return
    warned = true
    console.error(`mc: ${message} (messages left untouched; further failures are silent)`)
  }
  // sessionId -> {incremental, historian, historianFailure}
  const sessions = new Map<string, any>()
  const session = (id: string) => {
    let state = sessions.get(id)
    if (!state) {
      state = { incremental: undefined, historian: undefined, historianFailure: undefined }
      sessions.set(id, state)
    }
    return state
  }
  let requests = 0

  /** The pass's answer with whole messages, or null: the messages go out untouched. */
  async function pass(state: any, head: string, texts: string[]): Promise<any> {
    const fields = head.slice(1, -1)
    const hashes = texts.map(fingerprint)
    for (let attempt = 0; attempt < 2; attempt++) {
      const held = state.incremental
      const base = resident.child && held?.generation === resident.generation ? held : undefined
      const key = `${process.pid}.${++requests}`
      let line
      if (base) {
        const refs = texts.map((t, i) => {
          const at = base.index.get(hashes[i])
          return at !== undefined && base.lengths[at] === t.length ? at : t
        })
        line = `{"kind":"pass",${fields},"incremental":{"key":"${key}","base":"${base.key}","base_len":${base.lengths.length},"messages":[${refs.join(",")}]}}`
      } else {
        line = `{"kind":"pass",${fields},"messages":[${texts.join(",")}],"incremental":{"key":"${key}"}}`
      }
      if (!resident.usable(line)) break
      const reply = await resident.request(line)
      if (reply.unavailable) break
      if (reply.died) {
        state.incremental = undefined
        warnOnce(reply.died)
        return null
      }
      let answer
      try {
        answer = JSON.parse(reply.answer as string)
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
        const failed = asRun(reply.answer as string)
        warnOnce(`mc-transform failed (exit ${failed.code}): ${failureText(failed.stderr)}`)
        return null
      }
      if (answer.pass?.decision === "wait" || !Array.isArray(answer.messages)) {
        state.incremental = undefined
        return answer
      }
      const previous = base?.output ?? []
      const resolved = answer.messages.map((m: any) => (typeof m === "number" ? previous[m] : m))
      if (resolved.some((m: any) => m === undefined)) {
        state.incremental = undefined
        continue
      }
      answer.messages = resolved
      const index = new Map<string, number>()
      hashes.forEach((hash, i) => {
        if (!index.has(hash)) index.set(hash, i)
      })
      state.incremental = { generation: resident.generation, key, index, lengths: texts.map((t) => t.length), output: resolved }
      return answer
    }
    const whole = `{${fields},"messages":[${texts.join(",")}]}`
    const result = await run(bin("mc-transform", "MC_TRANSFORM_BIN"), [], whole, TRANSFORM_TIMEOUT_MS)
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

  const historianAvailable = (state: any) =>
    Boolean(state.historian) || !(state.historianFailure && Date.now() < state.historianFailure.retryAt)

  /** Start the historian on the session file once; later calls share the run. */
  function historian(sessionId: string, ctx: any): Promise<Run> | null {
    const state = session(sessionId)
    if (state.historian) return state.historian
    if (!historianAvailable(state)) return null
    const file = ctx.sessionManager?.getSessionFile?.()
    if (!file) return null // an in-memory session (--no-session): nothing to fold from
    const args = ["run", "--harness", "pi", "--transcript", file, "--session", sessionId, "--project-dir", ctx.cwd]
    if (ctx.model?.contextWindow) args.push("--context-limit", String(ctx.model.contextWindow))
    const running = run(bin("mc-historian", "MC_HISTORIAN_BIN"), args, "", HISTORIAN_TIMEOUT_MS)
      .then((result) => {
        if (result.code === 0) {
          state.historianFailure = undefined
        } else {
          const count = (state.historianFailure?.count ?? 0) + 1
          const wait = Math.min(HISTORIAN_RETRY_MAX_MS, HISTORIAN_RETRY_MS * 2 ** (count - 1))
          state.historianFailure = { count, retryAt: Date.now() + wait }
          console.error(`mc: mc-historian failed (exit ${result.code}): ${failureText(result.stderr)}; next try in ${wait / 1000} s`)
        }
        return result
      })
      .finally(() => {
        state.historian = undefined
      })
    state.historian = running
    return running
  }

  async function transform(event: any, ctx: any, waitForFold: boolean): Promise<any> {
    resident.warm()
    const sessionId = ctx.sessionManager.getSessionId()
    const messages = event.messages
    const model = ctx.model
      ? { provider: ctx.model.provider, id: ctx.model.id, context_limit: ctx.model.contextWindow, output_limit: ctx.model.maxTokens }
      : undefined
    const head = JSON.stringify({
      harness: "pi",
      session_id: sessionId,
      project_dir: ctx.cwd,
      model,
      usage: lastUsage(messages),
      wait_for_fold: waitForFold || undefined,
    })
    const texts = messages.map((m: any) => JSON.stringify(m) ?? "null")
    return pass(session(sessionId), head, texts)
  }

  pi.on("context", async (event: any, ctx: any) => {
    try {
      const sessionId = ctx.sessionManager.getSessionId()
      const state = session(sessionId)
      let answer = await transform(event, ctx, historianAvailable(state) && Boolean(ctx.sessionManager.getSessionFile?.()))
      if (!answer) return undefined
      if (answer.pass?.decision === "wait") {
        // A blocking fold is due and nothing was written: fold first, then
        // the one pass that goes out carries the compartments.
        const running = historian(sessionId, ctx)
        if (running) await running
        answer = await transform(event, ctx, false)
        if (!answer) return undefined
      }
      if (answer.pass?.historian_due) historian(sessionId, ctx)
      if (!Array.isArray(answer.messages)) return undefined
      return { messages: answer.messages }
    } catch (error) {
      warnOnce(`mc failed: ${error}`)
      return undefined
    }
  })

  // Once per prompt, before the agent loop: the system prompt for its calls.
  pi.on("before_agent_start", async (event: any, ctx: any) => {
    try {
      const request = JSON.stringify({
        harness: "pi",
        session_id: ctx.sessionManager.getSessionId(),
        system: [event.systemPrompt],
        render_unknown: true,
      })
      const result = await mcTransform("system", request, ["system"], request)
      if (result.code !== 0) {
        if (!result.died) warnOnce(`mc-transform system failed (exit ${result.code}): ${failureText(result.stderr)}`)
        return undefined
      }
      const rendered = JSON.parse(result.stdout).system
      if (!Array.isArray(rendered) || typeof rendered[0] !== "string") return undefined
      return { systemPrompt: rendered[0] }
    } catch (error) {
      warnOnce(`mc-transform system failed: ${error}`)
      return undefined
    }
  })

  // A reply that failed: a provider's "prompt is too long" goes to
  // `mc-transform overflow`, which learns the model's limit and makes the
  // session's next pass an emergency (anything else it answers as unrecognised).
  pi.on("message_end", async (event: any, ctx: any) => {
    const m = event?.message
    if (m?.role !== "assistant" || m.stopReason !== "error" || !m.errorMessage) return
    const model = ctx.model
      ? { provider: ctx.model.provider, id: ctx.model.id, context_limit: ctx.model.contextWindow, output_limit: ctx.model.maxTokens }
      : undefined
    const request = JSON.stringify({ harness: "pi", session_id: ctx.sessionManager.getSessionId(), model, error: m.errorMessage })
    const result = await mcTransform("overflow", request, ["overflow"], request)
    if (result.code !== 0) return
    try {
      const answer = JSON.parse(result.stdout)
      if (answer.recognised) console.error("mc: the provider rejected the prompt as too long; the next call drops to fit")
    } catch {}
  })

  // After Pi compacts (by hand or on its own): the pinned messages the
  // compaction summarised away come back once, hidden, before the next call.
  pi.on("session_compact", async (_event: any, ctx: any) => {
    const file = ctx.sessionManager?.getSessionFile?.()
    if (!file) return // an in-memory session: mc-pin has nothing to read the pins from
    // Asked as a SessionStart(compact) hook: mc-pin names the compaction by
    // its entry in the session file, claims it (one restore per compaction)
    // and prints the pins the compaction summarised away. mc's record is
    // left out: every pass renders it into the call anyway.
    const input = JSON.stringify({
      hook_event_name: "SessionStart",
      source: "compact",
      session_id: ctx.sessionManager.getSessionId(),
      transcript_path: file,
      cwd: ctx.cwd,
    })
    const result = await run(bin("mc-pin", "MC_PIN_BIN"), ["restore", "--harness", "pi", "--pins-only"], input, TRANSFORM_TIMEOUT_MS)
    if (result.code !== 0) {
      console.error(`mc: mc-pin restore failed: ${failureText(result.stderr)}`)
      return
    }
    if (!result.stdout.trim()) return
    try {
      const restored = JSON.parse(result.stdout)?.hookSpecificOutput?.additionalContext
      if (typeof restored === "string" && restored) {
        // Stored in the session as a hidden custom message: it enters the
        // context of the next model call, once.
        await pi.sendMessage({ customType: "mc-pin", content: restored, display: false })
      }
    } catch (error) {
      console.error(`mc: mc-pin restore printed no JSON: ${error}`)
    }
  })

  pi.registerTool({
    name: "ctx_reduce",
    label: "ctx_reduce",
    description:
      "Drop messages and tool outputs you no longer need from your context, by their §N§ tags " +
      '(e.g. "3-5,12"). Drops are queued and applied on a later turn; the newest tags are protected.',
    parameters: {
      type: "object",
      properties: { drop: { type: "string", description: "Tags or ranges to drop, e.g. 3-5,12" } },
      required: ["drop"],
    },
    async execute(_id: string, params: any, _signal: unknown, _update: unknown, ctx: any) {
      const sessionId = ctx.sessionManager.getSessionId()
      const drop = String(params?.drop ?? "")
      const request = JSON.stringify({ harness: "pi", session_id: sessionId, drop })
      const result = await mcTransform("reduce", request, ["reduce", "--harness", "pi", "--session", sessionId, "--drop", drop], "")
      if (result.code !== 0) return text(`ctx_reduce failed: ${failureText(result.stderr)}`)
      let r
      try {
        r = JSON.parse(result.stdout)
      } catch (error) {
        return text(`ctx_reduce failed: mc-transform printed no JSON (${error})`)
      }
      const tags = (ns: number[]) => ns.map((n) => `§${n}§`).join(", ")
      const said = []
      if (r.queued?.length) said.push(`queued ${tags(r.queued)}`)
      if (r.protected?.length) said.push(`deferred (still protected) ${tags(r.protected)}`)
      if (r.already?.length) said.push(`already handled ${tags(r.already)}`)
      if (r.unknown?.length) said.push(`unknown ${tags(r.unknown)}`)
      return text(said.length ? said.join("; ") : "nothing to drop")
    },
  })

  // mc-search's tools, described by `mc-search tools` (none without it).
  const listed = await run(bin("mc-search", "MC_SEARCH_BIN"), ["tools"], "", TRANSFORM_TIMEOUT_MS)
  let specs: any[] = []
  try {
    specs = JSON.parse(listed.stdout).tools ?? []
  } catch {
    console.error(`mc: mc-search tools unavailable (${failureText(listed.stderr) || "not on PATH"}); the agent gets ctx_reduce only`)
  }
  for (const spec of specs) {
    if (spec?.name === "ctx_reduce") continue
    pi.registerTool({
      name: spec.name,
      label: spec.name,
      description: spec.description,
      parameters: spec.input_schema ?? { type: "object", properties: {} },
      async execute(_id: string, params: any, _signal: unknown, _update: unknown, ctx: any) {
        const input = JSON.stringify({
          tool: spec.name,
          arguments: params ?? {},
          harness: "pi",
          session_id: ctx.sessionManager.getSessionId(),
          project_dir: ctx.cwd,
        })
        const result = await run(bin("mc-search", "MC_SEARCH_BIN"), ["call"], input, TRANSFORM_TIMEOUT_MS)
        if (result.code !== 0) return text(`${spec.name} failed: ${failureText(result.stderr)}`)
        try {
          return text(JSON.parse(result.stdout).text)
        } catch (error) {
          return text(`${spec.name} failed: mc-search printed no JSON (${error})`)
        }
      },
    })
  }
}
