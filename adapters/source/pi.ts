// mc for Pi (@mariozechner/pi-coding-agent): runs mc-transform on every model
// call through Pi's `context` event (tags, drops, the history head, pins kept
// out of drops), renders the system prompt once per prompt through
// `before_agent_start` (guidance about §N§ tags, and Pi's "Current date:"
// line frozen until a pass busts the cache anyway), starts the historian
// when a pass says a fold is due, puts pinned messages back after Pi
// compacts (`session_compact` → `mc-pin restore --harness pi`, sent as a
// hidden custom message), hands a provider's "prompt is too long" to
// `mc-transform overflow`, and gives the agent its tools: ctx_reduce, and
// ctx_search, ctx_memory, ctx_note and ctx_expand from mc-search; the user
// gets /mc-wrapup [N] and /mc-recomp (mc-historian wrapup and recomp).
//
// mc-transform runs resident, through the adapter core (core.js, shared with
// the OpenCode plugin and built into this one file). Any failure of mc leaves
// the messages as Pi built them.
//
// Install: copy this file into Pi's extensions folder
// (~/.pi/agent/extensions/mc.ts), or load it with `pi -e mc.ts`. The mc
// binaries are found on PATH, or through MC_TRANSFORM_BIN, MC_PIN_BIN,
// MC_HISTORIAN_BIN and MC_SEARCH_BIN; the database through MC_DB as usual.
// MC_TRANSFORM_SERVE=0 runs every call as a one-shot process. Inside mc's
// own historian run (MC_HISTORIAN_CHILD=1 in its environment) it does nothing.
import {
  Resident,
  TRANSFORM_TIMEOUT_MS,
  bin,
  failureText,
  mcTransform as transformCommand,
  pass as passThrough,
  reduceSpec,
  run,
} from "./core.js"
import type { Baseline, PassAnswer, Run } from "./core.js"
import { foldArgs, foldSummary } from "./fold.js"

const HISTORIAN_TIMEOUT_MS = 300_000
const HISTORIAN_RETRY_MS = 30_000
const HISTORIAN_RETRY_MAX_MS = 600_000

// One resident process per Pi process.
const resident = new Resident()

/** One mc-transform command through the resident process, else a process of its own. */
const mcTransform = (kind: string, request: string, args: string[], input: string): Promise<Run> =>
  transformCommand(resident, kind, request, args, input)

// The parts of Pi's extension API mc uses (@mariozechner/pi-coding-agent):
// what it hands mc is read defensively, as anything from outside is.
type Usage = { input?: number; output?: number; cacheRead?: number; cacheWrite?: number }
type PiMessage = { role?: string; usage?: Usage; stopReason?: string; errorMessage?: string; [field: string]: unknown }
type PiModel = { provider?: string; id?: string; contextWindow?: number; maxTokens?: number }
interface PiContext {
  cwd: string
  model?: PiModel
  sessionManager: { getSessionId(): string; getSessionFile?(): string | undefined }
}
type ToolResult = { content: Array<{ type: "text"; text: string }>; details: Record<string, never> }
interface PiTool {
  name: string
  label: string
  description: string
  parameters: unknown
  execute(id: string, params: Record<string, unknown> | undefined, signal: unknown, update: unknown, ctx: PiContext): Promise<ToolResult>
}
interface PiApi {
  on(event: "context", handler: (event: { messages: PiMessage[] }, ctx: PiContext) => Promise<{ messages: unknown[] } | undefined>): void
  on(
    event: "before_agent_start",
    handler: (event: { systemPrompt: string }, ctx: PiContext) => Promise<{ systemPrompt: string } | undefined>,
  ): void
  on(event: "message_end", handler: (event: { message?: PiMessage }, ctx: PiContext) => Promise<void>): void
  on(event: "session_compact", handler: (event: unknown, ctx: PiContext) => Promise<void>): void
  registerTool(tool: PiTool): void
  registerCommand(
    name: string,
    options: { description: string; handler: (args: string, ctx: PiContext & { ui?: PiUi }) => Promise<void> },
  ): void
  sendMessage(message: { customType: string; content: string; display: boolean }): Promise<void> | void
}
type PiUi = { notify?(message: string, type?: "info" | "warning" | "error"): void }
/** What mc remembers of a session. */
type SessionState = {
  incremental?: Baseline
  historian?: Promise<Run>
  historianFailure?: { count: number; retryAt: number }
}
/** mc-search's description of one of its tools. */
type ToolSpec = { name?: string; description?: string; input_schema?: unknown }

/** The newest assistant message's usage, as mc's envelope names it. */
function lastUsage(messages: PiMessage[]): { input: number; cache_read: number; cache_write: number; output: number } | undefined {
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

const text = (t: string): ToolResult => ({ content: [{ type: "text", text: t }], details: {} })

export default async function mc(pi: PiApi): Promise<void> {
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
  const sessions = new Map<string, SessionState>()
  const session = (id: string): SessionState => {
    let state = sessions.get(id)
    if (!state) {
      state = { incremental: undefined, historian: undefined, historianFailure: undefined }
      sessions.set(id, state)
    }
    return state
  }
  const historianAvailable = (state: SessionState): boolean =>
    Boolean(state.historian) || !(state.historianFailure && Date.now() < state.historianFailure.retryAt)

  /** mc-historian's arguments naming the session's file; null without one. */
  function historianSource(sessionId: string, ctx: PiContext): string[] | null {
    const file = ctx.sessionManager?.getSessionFile?.()
    if (!file) return null
    const args = ["--harness", "pi", "--transcript", file, "--session", sessionId, "--project-dir", ctx.cwd]
    if (ctx.model?.contextWindow) args.push("--context-limit", String(ctx.model.contextWindow))
    return args
  }

  /** The user's fold commands: run mc-historian wrapup or recomp now, say what it did. */
  for (const [name, job, description] of [
    ["mc-wrapup", "wrapup", "mc: fold all but the newest N messages (default 20) into compartments now"],
    ["mc-recomp", "recomp", "mc: rebuild this session's compartments from its raw history (no new facts)"],
  ] as const) {
    pi.registerCommand(name, {
      description,
      async handler(argument, ctx) {
        const notify = (message: string, type: "info" | "error") => (ctx.ui?.notify ? ctx.ui.notify(message, type) : console.error(message))
        const parsed = foldArgs(job, argument)
        if ("error" in parsed) return notify(parsed.error, "error")
        const sessionId = ctx.sessionManager.getSessionId()
        const source = historianSource(sessionId, ctx)
        if (!source) return notify(`${name}: this session has no file to fold from (--no-session)`, "error")
        const state = session(sessionId)
        // One historian at a time per session: wait for a routine run first.
        await state.historian
        const result = await run(bin("mc-historian", "MC_HISTORIAN_BIN"), [...parsed.args, ...source], "", HISTORIAN_TIMEOUT_MS)
        notify(foldSummary(result, failureText), result.code === 0 ? "info" : "error")
      },
    })
  }

  /** Start the historian on the session file once; later calls share the run. */
  function historian(sessionId: string, ctx: PiContext): Promise<Run> | null {
    const state = session(sessionId)
    if (state.historian) return state.historian
    if (!historianAvailable(state)) return null
    const source = historianSource(sessionId, ctx)
    if (!source) return null // an in-memory session (--no-session): nothing to fold from
    const args = ["run", ...source]
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

  async function transform(event: { messages: PiMessage[] }, ctx: PiContext, waitForFold: boolean): Promise<PassAnswer | null> {
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
    const texts = messages.map((m) => JSON.stringify(m) ?? "null")
    return passThrough(resident, session(sessionId), head, texts, warnOnce)
  }

  pi.on("context", async (event, ctx) => {
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
  pi.on("before_agent_start", async (event, ctx) => {
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
  pi.on("message_end", async (event, ctx) => {
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
  pi.on("session_compact", async (_event, ctx) => {
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

  // mc-search's tools, described by `mc-search tools` (none without it), and
  // ctx_reduce's description, which the extension runs through mc-transform.
  const listed = await run(bin("mc-search", "MC_SEARCH_BIN"), ["tools"], "", TRANSFORM_TIMEOUT_MS)
  let specs: ToolSpec[] = []
  try {
    specs = JSON.parse(listed.stdout).tools ?? []
  } catch {
    console.error(`mc: mc-search tools unavailable (${failureText(listed.stderr) || "not on PATH"}); the agent gets ctx_reduce only`)
  }
  const reduce = reduceSpec(specs)

  pi.registerTool({
    name: "ctx_reduce",
    label: "ctx_reduce",
    description: reduce.description,
    parameters: reduce.input_schema,
    async execute(_id, params, _signal, _update, ctx) {
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

  for (const spec of specs) {
    const name = spec?.name
    if (typeof name !== "string" || name === "ctx_reduce") continue
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
