// mc for OpenCode: runs mc-transform on every model call (the messages, then
// the system prompt: guidance about §N§ tags and a date that moves only when
// the cache is busted anyway), restores pins after OpenCode's own compaction,
// starts the historian when a pass says it is due, hands a provider's
// "prompt is too long" error to mc so the next pass recovers, and gives the
// agent its tools: ctx_reduce, and ctx_search, ctx_memory, ctx_note and
// ctx_expand from mc-search (described by `mc-search tools`, run through
// `mc-search call` with the calling session). The user gets two commands:
// /mc-wrapup [N] and /mc-recomp (mc-historian wrapup and recomp on the
// session; the agent is told in one line what they did).
//
// mc-transform runs resident, through the adapter core (core.js, shared
// with the Pi extension and built into this one file).
//
// Install: copy this file into OpenCode's plugin folder
// (~/.config/opencode/plugin/mc.js). The mc binaries are found on PATH, or
// through MC_TRANSFORM_BIN, MC_PIN_BIN, MC_HISTORIAN_BIN and MC_SEARCH_BIN; the database
// through MC_DB as usual. MC_OPENCODE_SESSIONS caps how many sessions the
// plugin remembers (default 200); MC_TRANSFORM_SERVE=0 runs every call as a
// one-shot process; MC_OPENCODE_BOUNDARY=0 writes no compaction boundary.
import { existsSync, readdirSync } from "node:fs"
import { homedir } from "node:os"
import { isAbsolute, join } from "node:path"
import { tool } from "@opencode-ai/plugin"
import {
  REDUCE_TOOL,
  Resident,
  TRANSFORM_TIMEOUT_MS,
  bin,
  failureText,
  mcTransform as transformCommand,
  pass as passThrough,
  reduceSpec,
  run,
} from "./core.js"
import { foldArgs, foldSummary } from "./fold.js"

// What OpenCode hands the plugin (its messages and parts, events, hook
// arguments, its client's answers, bun:sqlite rows): outside data, read
// field by field with optional chaining and checked before use.
type Oc = any

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
const BOUNDARY_TEXT = "[mc: the conversation before this point is folded into mc's history, which opens the prompt]"
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
  let channels: string[] = []
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
  let Database: Oc // undefined: not loaded yet; null: not in Bun
  const open = new Map() // path -> Database

  function write(db: Oc, sessionID: string, through: string) {
    const row = db.query("SELECT id, time_created, data FROM message WHERE id = ? AND session_id = ?").get(through, sessionID)
    if (!row) return db.query("SELECT 1 FROM session WHERE id = ?").get(sessionID) ? "unknown message" : "no session"
    const after = (m: Oc) => m.time_created > row.time_created || (m.time_created === row.time_created && m.id >= row.id)
    const current = db
      .query("SELECT id, time_created FROM message WHERE session_id = ? AND id LIKE ?")
      .all(sessionID, `%${BOUNDARY_USER}`)
      .map((m: Oc) => ({ id: m.id.slice(0, -BOUNDARY_USER.length), time_created: m.time_created }))
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
    const newest = (role: string) =>
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
    const part = (messageID: string) => `prt${messageID.slice(3)}`
    const insertMessage = db.query("INSERT INTO message (id, session_id, time_created, time_updated, data) VALUES (?, ?, ?, ?, ?)")
    const insertPart = db.query("INSERT INTO part (id, message_id, session_id, time_created, time_updated, data) VALUES (?, ?, ?, ?, ?, ?)")
    const model = user.model ?? { providerID: reply.providerID, modelID: reply.modelID }
    insertMessage.run(
      userID,
      sessionID,
      row.time_created,
      now,
      JSON.stringify({ role: "user", time: { created }, agent: user.agent ?? "build", model }),
    )
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
  return async function move(sessionID: string, through: string) {
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

function positive(text: string | undefined): number | undefined {
  const n = Number.parseInt(text ?? "", 10)
  return n > 0 ? n : undefined
}

// Sessions whose last call the plugin keeps for the incremental envelope
// (serve keeps as many by default); beyond it the least recently used
// session's next call is sent whole.
const INCREMENTAL_SESSIONS = 16

// One resident process per OpenCode process, shared by every instance of this plugin.
const resident = new Resident()

/**
 * One mc-transform command through the resident process, else a process of its own.
 * @param {string} kind
 * @param {string} request
 * @param {string[]} args
 * @param {string} input
 */
const mcTransform = (kind: string, request: string, args: string[], input: string) => transformCommand(resident, kind, request, args, input)

// A completed tool's state.metadata never reaches the provider (OpenCode
// builds the tool result from state.output), yet it is often as large as the
// output itself (the read tool keeps a preview of the file). It stays out of
// mc's envelope and is put back on the parts mc returns.
const carriesToolMetadata = (part: Oc) =>
  part?.type === "tool" && typeof part.id === "string" && part.state?.status === "completed" && part.state.metadata !== undefined

/** A message as JSON text, without completed tools' metadata (kept in `stash` by part id). */
function messageJson(message: Oc, stash: Map<string, unknown>) {
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

function restoreToolMetadata(messages: Oc, stash: Map<string, unknown>) {
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
function zodOf(schema: Oc, z: Oc) {
  const field = (s: Oc): Oc => {
    let f
    if (Array.isArray(s?.enum)) f = z.enum(s.enum)
    else if (s?.type === "integer") {
      f = z.number().int()
      if (typeof s.minimum === "number") f = f.min(s.minimum)
      if (typeof s.maximum === "number") f = f.max(s.maximum)
      // zod publishes a safe-integer range where none is set: publish mc's
      // (an undefined bound leaves the request).
      f = f.meta({ minimum: s.minimum, maximum: s.maximum })
    } else if (s?.type === "number") f = z.number()
    else if (s?.type === "boolean") f = z.boolean()
    else if (s?.type === "array") f = z.array(field(s.items ?? {}))
    else if (s?.type === "string") f = z.string()
    else f = z.any()
    return s?.description ? f.describe(s.description) : f
  }
  const required = new Set(schema?.required ?? [])
  const shape: Record<string, Oc> = {}
  for (const [name, s] of Object.entries(schema?.properties ?? {})) {
    shape[name] = required.has(name) ? field(s) : field(s).optional()
  }
  return shape
}

/**
 * mc-search's tools as OpenCode tools: each call runs `mc-search call` with
 * the calling session and this instance's folder; the model reads the text
 * mc-search answers (an error it can correct comes back as text too). No
 * mc-search on PATH: no such tools, said once. Also ctx_reduce's spec, which
 * the plugin runs through mc-transform.
 */
async function searchTools(directory: string) {
  const listed = await run(bin("mc-search", "MC_SEARCH_BIN"), ["tools"], "", TRANSFORM_TIMEOUT_MS)
  let specs
  try {
    specs = JSON.parse(listed.stdout).tools
  } catch {
    console.error(`mc: mc-search tools unavailable (${failureText(listed.stderr) || "not on PATH"}); the agent gets ctx_reduce only`)
    return { tools: {}, reduce: REDUCE_TOOL }
  }
  const tools: Record<string, Oc> = {}
  for (const spec of specs) {
    // ctx_reduce stays the plugin's own (through mc-transform).
    if (spec.name === "ctx_reduce") continue
    tools[spec.name] = tool({
      description: spec.description,
      args: zodOf(spec.input_schema, tool.schema),
      async execute(args: Oc, context: Oc) {
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
  return { tools, reduce: reduceSpec(specs) }
}

export const McContext = async ({ client, serverUrl, directory }: { client: Oc; serverUrl?: unknown; directory: string }) => {
  // An `opencode run` the historian started as its model (MC_HISTORIAN_CHILD):
  // its call is the historian's own, left as OpenCode sends it.
  if (process.env.MC_HISTORIAN_CHILD) return {}
  const { tools: extraTools, reduce } = await searchTools(directory)
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
  let warned = false
  const moveBoundary = process.env.MC_OPENCODE_BOUNDARY === "0" ? undefined : boundaryWriter()
  // Once loading is done: the first model call would otherwise wait for the list.
  setTimeout(providerList, 0)

  /** The session's state, created if new, marked most recently used. */
  function session(sessionID: string) {
    let state = sessions.get(sessionID)
    if (state) sessions.delete(sessionID)
    else
      state = {
        passed: false,
        subagent: undefined,
        historianChild: false,
        model: undefined,
        systemRenders: new Map(),
        historianFailure: undefined,
        incremental: undefined,
      }
    sessions.set(sessionID, state)
    while (sessions.size > SESSION_CAP) sessions.delete(sessions.keys().next().value)
    return state
  }

  const warnOnce = (message: Oc) => {
    if (warned) return
    warned = true
    console.error(`mc: ${message} (messages left untouched; further failures are silent)`)
  }

  // OpenCode's provider list (the models' limits), asked once and shared by
  // every lookup: OpenCode takes ~0.2 s to build it the first time, so it is
  // asked for when the plugin loads, before the first model call needs it.
  let providers: Promise<Oc> | null = null
  function providerList(): Promise<Oc> {
    if (!providers) {
      const asked: Promise<Oc> = client.config.providers().then(
        (res: Oc) => res?.data?.providers ?? res?.providers ?? [],
        () => {
          providers = null // ask again next time
          return undefined
        },
      )
      providers = asked
      return asked
    }
    return providers
  }

  /** A model's {context, output} limits (undefined fields when OpenCode does not say). */
  function modelLimits(providerID: string, modelID: string) {
    const key = `${providerID}/${modelID}`
    let known = limits.get(key)
    if (!known) {
      known = providerList().then((list: Oc) => {
        if (!list) limits.delete(key) // the server did not answer: ask again next call
        const limit = list?.find((p: Oc) => p.id === providerID)?.models?.[modelID]?.limit ?? {}
        return { context: limit.context, output: limit.output }
      })
      limits.set(key, known)
    }
    return known
  }

  function envelope(messages: Oc) {
    const users = messages.filter((m: Oc) => m.info?.role === "user")
    const lastUser = users[users.length - 1]
    const sessionID = lastUser?.info?.sessionID ?? messages.find((m: Oc) => m.info?.sessionID)?.info?.sessionID
    const model = lastUser?.info?.model ?? {}
    // The newest real sample: a step that failed keeps all-zero tokens.
    const sampled = (t: Oc) => t && (t.input ?? 0) + (t.cache?.read ?? 0) + (t.cache?.write ?? 0) > 0
    const assistant = [...messages].reverse().find((m) => m.info?.role === "assistant" && sampled(m.info?.tokens))
    const t = assistant?.info?.tokens
    const usage = t
      ? { input: t.input ?? 0, cache_read: t.cache?.read ?? 0, cache_write: t.cache?.write ?? 0, output: t.output ?? 0 }
      : undefined
    return { sessionID, model, usage }
  }

  /** A session with a parent is a subagent's (the task tool): no head, no historian. */
  async function isSubagent(sessionID: string, state: Oc) {
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
  async function transform(messages: Oc, found: Oc, state: Oc, waitForFold: boolean) {
    const { sessionID, model, usage } = found
    // The resident process starts while the server answers these.
    resident.warm()
    const [limit, subagent] = await Promise.all([
      model.providerID ? modelLimits(model.providerID, model.modelID) : {},
      isSubagent(sessionID, state),
    ])
    state.model = { provider: model.providerID, id: model.modelID, context_limit: limit.context, output_limit: limit.output }
    const metadata = new Map()
    const texts = messages.map((message: Oc) => messageJson(message, metadata))
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
   * The pass's answer, with whole messages (the core's incremental envelope,
   * else the one-shot command); null when the messages must go out untouched.
   */
  function pass(sessionID: string, state: Oc, head: string, texts: string[]) {
    return passThrough(resident, state, head, texts, warnOnce, () => holdIncremental(sessionID))
  }

  /** Keep the last call of at most INCREMENTAL_SESSIONS sessions. */
  function holdIncremental(sessionID: string) {
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
  function historianAvailable(sessionID: string, state: Oc) {
    if (!server || state.subagent) return false
    if (historians.has(sessionID)) return true
    const failed = state.historianFailure
    return !(failed && Date.now() < failed.retryAt)
  }

  /**
   * Start the historian for a session once; later calls share the running
   * one. Null while a failed run's back-off lasts.
   */
  function historian(sessionID: string) {
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
  async function overflow(properties: Oc) {
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

  /** The fold commands: the command name OpenCode shows, the job, its description. */
  const FOLD_COMMANDS = new Map([
    ["mc-wrapup", { job: "wrapup" as const, description: "mc: fold all but the newest N messages (default 20) into compartments now" }],
    ["mc-recomp", { job: "recomp" as const, description: "mc: rebuild this session's compartments from its raw history (no new facts)" }],
  ])

  /** Run a fold command on the session (after a routine run); its summary line. */
  async function foldCommand(job: "wrapup" | "recomp", argument: string, sessionID: string): Promise<string> {
    const parsed = foldArgs(job, argument)
    if ("error" in parsed) return parsed.error
    if (!server) return `mc-${job}: OpenCode gave the plugin no server address to fold from`
    await historians.get(sessionID)
    const args = [...parsed.args, "--session", sessionID, "--opencode-url", server]
    if (directory) args.push("--project-dir", directory)
    const result = await run(bin("mc-historian", "MC_HISTORIAN_BIN"), args, "", HISTORIAN_TIMEOUT_MS)
    return foldSummary(result, failureText)
  }

  return {
    // The fold commands, as OpenCode's own commands (a user's of the same name wins).
    config: async (config: Oc) => {
      if (!config || typeof config !== "object") return
      config.command = config.command && typeof config.command === "object" ? config.command : {}
      for (const [name, { description }] of FOLD_COMMANDS) {
        config.command[name] ??= { description, template: `Running ${name} $ARGUMENTS.` }
      }
    },

    // Run the fold, then the prompt the command sends says what it did.
    "command.execute.before": async (input: Oc, output: Oc) => {
      const command = FOLD_COMMANDS.get(String(input?.command ?? ""))
      if (!command || !input?.sessionID || !Array.isArray(output?.parts)) return
      const summary = await foldCommand(command.job, String(input.arguments ?? ""), String(input.sessionID))
      const text = `${summary}. (The user ran /${input.command}; nothing else to do: say so in one line.)`
      const part = output.parts.find((p: Oc) => p?.type === "text")
      if (part) part.text = text
      else output.parts.push({ type: "text", text })
    },

    "experimental.chat.messages.transform": async (_input: Oc, output: Oc) => {
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
    "experimental.chat.system.transform": async (input: Oc, output: Oc) => {
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
    "chat.message": async (input: Oc) => {
      resident.warm()
      const model = input?.model
      if (model?.providerID && model?.modelID) modelLimits(model.providerID, model.modelID)
    },

    "chat.params": async (input: Oc, output: Oc) => {
      const cap = sessions.get(input?.sessionID)?.historianMaxTokens
      if (cap && !(output.maxOutputTokens <= cap)) output.maxOutputTokens = cap
    },

    event: async ({ event }: { event: Oc }) => {
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
        description: reduce.description,
        args: zodOf(reduce.input_schema, tool.schema),
        async execute(args: Oc, context: Oc) {
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
          if (r.queued?.length) parts.push(`queued ${r.queued.map((n: number) => `§${n}§`).join(", ")}`)
          if (r.protected?.length) parts.push(`deferred (still protected) ${r.protected.map((n: number) => `§${n}§`).join(", ")}`)
          if (r.already?.length) parts.push(`already handled ${r.already.map((n: number) => `§${n}§`).join(", ")}`)
          if (r.unknown?.length) parts.push(`unknown ${r.unknown.map((n: number) => `§${n}§`).join(", ")}`)
          return parts.length ? parts.join("; ") : "nothing to drop"
        },
      }),
    },
  }
}
