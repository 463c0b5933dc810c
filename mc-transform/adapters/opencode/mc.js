// mc for OpenCode: runs mc-transform on every model call (the messages, then
// the system prompt: guidance about §N§ tags and a date that moves only when
// the cache is busted anyway), restores pins after OpenCode's own compaction,
// starts the historian when a pass says it is due, and gives the agent the
// ctx_reduce tool.
//
// Install: copy this file into OpenCode's plugin folder
// (~/.config/opencode/plugin/mc.js). The mc binaries are found on PATH, or
// through MC_TRANSFORM_BIN, MC_PIN_BIN and MC_HISTORIAN_BIN; the database
// through MC_DB as usual.
import { spawn } from "node:child_process"
import { tool } from "@opencode-ai/plugin"

const TRANSFORM_TIMEOUT_MS = 30_000
const HISTORIAN_TIMEOUT_MS = 300_000
// After a failed historian run (no model configured, provider down), wait
// this long before the next, doubling up to the cap: every pass above the
// trigger says "due", and each run fetches the whole session.
const HISTORIAN_RETRY_MS = 30_000
const HISTORIAN_RETRY_MAX_MS = 600_000

const bin = (name, env) => process.env[env] || name

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

// A completed tool's state.metadata never reaches the provider (OpenCode
// builds the tool result from state.output), yet it is often as large as the
// output itself (the read tool keeps a preview of the file). It stays out of
// mc's envelope and is put back on the parts mc returns.
function withoutToolMetadata(stash) {
  return function (key, value) {
    if (
      key === "state" &&
      value?.status === "completed" &&
      value.metadata !== undefined &&
      this?.type === "tool" &&
      typeof this.id === "string"
    ) {
      stash.set(this.id, value.metadata)
      const { metadata, ...rest } = value
      return rest
    }
    return value
  }
}

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

export const McContext = async ({ client, serverUrl, directory }) => {
  const server = String(serverUrl ?? "").replace(/\/$/, "")
  const limits = new Map() // "provider/model" -> {context, output}
  const historians = new Map() // sessionID -> Promise of a running historian
  const historianFailures = new Map() // sessionID -> {count, retryAt} after failed runs
  const passed = new Set() // sessions a messages pass has seen: their system prompt is ours to render
  const subagents = new Map() // sessionID -> whether it has a parent session
  // sessionID -> Map(input -> output): system renders. A render depends on its
  // input and on the frozen date, which only an execute pass moves, so the same
  // input after defer passes gets the same bytes without a process. (Side
  // calls such as the title have inputs of their own.)
  const systemRenders = new Map()
  let warned = false

  const warnOnce = (message) => {
    if (warned) return
    warned = true
    console.error(`mc: ${message} (messages left untouched; further failures are silent)`)
  }

  async function modelLimits(providerID, modelID) {
    const key = `${providerID}/${modelID}`
    if (!limits.has(key)) {
      let limit = {}
      try {
        const res = await client.config.providers()
        const providers = res.data?.providers ?? res.providers ?? []
        const model = providers.find((p) => p.id === providerID)?.models?.[modelID]
        limit = model?.limit ?? {}
      } catch {}
      limits.set(key, { context: limit.context, output: limit.output })
    }
    return limits.get(key)
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
  async function isSubagent(sessionID) {
    if (!subagents.has(sessionID)) {
      try {
        const res = await client.session.get({ path: { id: sessionID } })
        const session = res?.data ?? res
        if (!session?.id) return false // unknown for now: ask again next call
        subagents.set(sessionID, Boolean(session.parentID))
      } catch {
        return false
      }
    }
    return subagents.get(sessionID)
  }

  async function transform(messages) {
    const { sessionID, model, usage } = envelope(messages)
    if (!sessionID) return null
    const limit = model.providerID ? await modelLimits(model.providerID, model.modelID) : {}
    const subagent = await isSubagent(sessionID)
    const metadata = new Map()
    const input = JSON.stringify({
      harness: "opencode",
      session_id: sessionID,
      project_dir: directory,
      model: { provider: model.providerID, id: model.modelID, context_limit: limit.context, output_limit: limit.output },
      usage,
      subagent,
      messages,
    }, withoutToolMetadata(metadata))
    const result = await run(bin("mc-transform", "MC_TRANSFORM_BIN"), [], input, TRANSFORM_TIMEOUT_MS)
    if (result.code !== 0) {
      warnOnce(`mc-transform failed (exit ${result.code}): ${result.stderr.trim().split("\n").pop()}`)
      return null
    }
    try {
      const output = JSON.parse(result.stdout)
      if (Array.isArray(output.messages)) restoreToolMetadata(output.messages, metadata)
      return { sessionID, output }
    } catch (error) {
      warnOnce(`mc-transform printed no JSON: ${error}`)
      return null
    }
  }

  /**
   * Start the historian for a session once; later calls share the running
   * one. Null while a failed run's back-off lasts.
   */
  function historian(sessionID) {
    if (!historians.has(sessionID)) {
      const failed = historianFailures.get(sessionID)
      if (failed && Date.now() < failed.retryAt) return null
      const args = ["run", "--session", sessionID, "--opencode-url", server]
      const running = run(bin("mc-historian", "MC_HISTORIAN_BIN"), args, "", HISTORIAN_TIMEOUT_MS)
        .then((result) => {
          if (result.code === 0) {
            historianFailures.delete(sessionID)
          } else {
            const count = (failed?.count ?? 0) + 1
            const wait = Math.min(HISTORIAN_RETRY_MAX_MS, HISTORIAN_RETRY_MS * 2 ** (count - 1))
            historianFailures.set(sessionID, { count, retryAt: Date.now() + wait })
            const reason = result.stderr.trim().split("\n").pop()
            console.error(`mc: mc-historian failed (exit ${result.code}): ${reason}; next try in ${wait / 1000} s`)
          }
          return result
        })
        .finally(() => historians.delete(sessionID))
      historians.set(sessionID, running)
    }
    return historians.get(sessionID)
  }

  return {
    "experimental.chat.messages.transform": async (_input, output) => {
      // OpenCode keeps using this very array: splice in place, never reassign.
      const messages = output.messages
      let pass = await transform(messages)
      if (!pass) return
      const report = pass.output.pass ?? {}
      if (report.historian_due && server) {
        const running = historian(pass.sessionID)
        if (report.blocking && running) {
          // Near the limit: wait for the fold, then transform again so this
          // very request carries the compartments.
          await running
          pass = (await transform(messages)) ?? pass
        }
      }
      if (Array.isArray(pass.output.messages)) {
        messages.splice(0, messages.length, ...pass.output.messages)
      }
      passed.add(pass.sessionID)
      if (pass.output.pass?.decision === "execute") systemRenders.delete(pass.sessionID)
    },

    // Runs after the messages hook of the same model call (and for side calls
    // such as the title, which get the same rendering: it is deterministic).
    "experimental.chat.system.transform": async (input, output) => {
      const sessionID = input?.sessionID
      const system = output?.system
      if (!sessionID || !passed.has(sessionID) || !Array.isArray(system)) return
      const key = JSON.stringify(system)
      const cached = systemRenders.get(sessionID)?.get(key)
      if (cached) {
        system.splice(0, system.length, ...cached)
        return
      }
      const result = await run(
        bin("mc-transform", "MC_TRANSFORM_BIN"),
        ["system"],
        JSON.stringify({ harness: "opencode", session_id: sessionID, system }),
        TRANSFORM_TIMEOUT_MS,
      )
      if (result.code !== 0) {
        warnOnce(`mc-transform system failed (exit ${result.code}): ${result.stderr.trim().split("\n").pop()}`)
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
          if (!systemRenders.has(sessionID)) systemRenders.set(sessionID, new Map())
          systemRenders.get(sessionID).set(key, rendered)
        }
      } catch (error) {
        warnOnce(`mc-transform system printed no JSON: ${error}`)
      }
    },

    event: async ({ event }) => {
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
      ctx_reduce: tool({
        description:
          "Drop messages and tool outputs you no longer need from your context, by their §N§ tags " +
          '(e.g. "3-5,12"). Drops are queued and applied on a later turn; the newest tags are protected.',
        args: { drop: tool.schema.string().describe("Tags or ranges to drop, e.g. 3-5,12") },
        async execute(args, context) {
          const result = await run(
            bin("mc-transform", "MC_TRANSFORM_BIN"),
            ["reduce", "--harness", "opencode", "--session", context.sessionID, "--drop", String(args.drop)],
            "",
            TRANSFORM_TIMEOUT_MS,
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
