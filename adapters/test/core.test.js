// The adapter core against a real `mc-transform serve` (no harness): each
// call's answer must be exactly what the one-shot command answers for the
// same calls on a database of its own, whatever way the call went (whole
// envelope, delta, resync, the one-shot after serve died, a late answer).
//
// MC_TRANSFORM_BIN names the mc-transform to run (CI sets it to the one it
// built); without it these tests are skipped, except in CI, where they fail.
import assert from "node:assert/strict"
import { spawnSync } from "node:child_process"
import { chmodSync, mkdtempSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { after, test } from "node:test"

import { Resident, SERVE_RETRY_MS, SERVE_SYNC_WAIT_MS, pass } from "../source/core.js"

const BIN = process.env.MC_TRANSFORM_BIN
if (!BIN && process.env.CI) {
  throw new Error("MC_TRANSFORM_BIN is not set: CI must run these tests against the mc-transform it built")
}
const skip = BIN
  ? false
  : "MC_TRANSFORM_BIN is not set: `cargo build -p mc-transform`, then run with MC_TRANSFORM_BIN=target/debug/mc-transform"
const options = { skip, timeout: 30_000 }

const root = mkdtempSync(join(tmpdir(), "mc-adapters-test-"))
after(() => rmSync(root, { recursive: true, force: true }))
let folders = 0

/** A fresh home and database for the process under test; returns a second database for the reference. */
function fresh() {
  const dir = join(root, String(++folders))
  spawnSync("mkdir", ["-p", dir])
  process.env.HOME = dir
  process.env.MC_DB = join(dir, "mc.db")
  process.env.MC_NOW_MS = "1800000000000"
  process.env.MC_TRANSFORM_BIN = BIN
  delete process.env.MC_TRANSFORM_SERVE
  delete process.env.MC_CONFIG
  return join(dir, "reference.db")
}

const head = JSON.stringify({
  harness: "pi",
  session_id: "s1",
  project_dir: "/project",
  model: { provider: "test", id: "model", context_limit: 200_000, output_limit: 8_000 },
})

/** The session's first `n` messages, each as JSON text. */
function texts(/** @type {number} */ n) {
  const out = []
  for (let i = 0; i < n; i++) {
    const message =
      i % 2 === 0
        ? { role: "user", content: `question ${i}: what does file ${i} hold?`, timestamp: 1000 + i }
        : { role: "assistant", content: [{ type: "text", text: `file ${i - 1} holds ${"data ".repeat(20)}` }], timestamp: 1000 + i }
    out.push(JSON.stringify(message))
  }
  return out
}

/** What the one-shot command answers for `n` messages on database `db`. */
function oneShot(/** @type {string} */ db, /** @type {number} */ n) {
  const input = `{${head.slice(1, -1)},"messages":[${texts(n).join(",")}]}`
  const done = spawnSync(/** @type {string} */ (BIN), [], { input, env: { ...process.env, MC_DB: db }, encoding: "utf8" })
  assert.equal(done.status, 0, `the one-shot mc-transform failed: ${done.stderr}`)
  return JSON.parse(done.stdout)
}

/** A Resident whose request lines are kept in `sent`. */
function recorded() {
  const resident = new Resident()
  /** @type {string[]} */
  const sent = []
  const request = resident.request.bind(resident)
  resident.request = (line, timeoutMs) => {
    sent.push(line)
    return request(line, timeoutMs)
  }
  return { resident, sent }
}

/** A call's pass through the core, its warnings kept in `warned`. */
function caller(/** @type {Resident} */ resident) {
  /** @type {string[]} */
  const warned = []
  /** @type {{ incremental?: import("../source/core.js").Baseline }} */
  const state = {}
  const call = (/** @type {number} */ n) => pass(resident, state, head, texts(n), (message) => warned.push(message))
  return { state, warned, call }
}

const sleep = (/** @type {number} */ ms) => new Promise((resolve) => setTimeout(resolve, ms))

/** Kill the resident process (it must be running). */
function kill(/** @type {Resident} */ resident, /** @type {NodeJS.Signals} */ signal) {
  assert.ok(resident.pid, "the resident process is running")
  process.kill(resident.pid, signal)
}

test("a session's first call goes whole, the next ones as deltas, each answered as the one-shot", options, async () => {
  const reference = fresh()
  const { resident, sent } = recorded()
  const { warned, call } = caller(resident)

  assert.deepEqual(await call(3), oneShot(reference, 3))
  assert.match(sent[0] ?? "", /^\{"kind":"pass",.*"messages":\[\{.*"incremental":\{"key":"[^"]+"\}\}$/)

  assert.deepEqual(await call(5), oneShot(reference, 5))
  // The three messages it holds go as their indexes, the new ones whole.
  assert.match(sent[1] ?? "", /"incremental":\{"key":"[^"]+","base":"[^"]+","base_len":3,"messages":\[0,1,2,\{/)
  assert.ok(!/"kind":"pass",[^[]*"messages":\[/.test((sent[1] ?? "").split('"incremental"')[0] ?? ""), "a delta carries no whole messages")

  assert.deepEqual(await call(7), oneShot(reference, 7))
  assert.match(sent[2] ?? "", /"base_len":5,"messages":\[0,1,2,3,4,\{/)
  assert.equal(sent.length, 3)
  assert.deepEqual(warned, [])
})

test("a baseline serve does not hold is answered resync, and the call is sent again whole", options, async () => {
  const reference = fresh()
  const { resident, sent } = recorded()
  const { state, warned, call } = caller(resident)

  assert.deepEqual(await call(3), oneShot(reference, 3))
  // As if serve had dropped it (beyond its --sessions): it knows no such base.
  assert.ok(state.incremental)
  state.incremental.key = "no-such-base"
  assert.deepEqual(await call(5), oneShot(reference, 5))
  assert.equal(sent.length, 3)
  assert.match(sent[1] ?? "", /"base":"no-such-base"/)
  assert.ok(!(sent[2] ?? "").includes('"base"'), "after the resync the call goes whole")
  // And the new baseline is the whole call's: the next call is a delta again.
  assert.deepEqual(await call(7), oneShot(reference, 7))
  assert.match(sent[3] ?? "", /"base_len":5,/)
  assert.deepEqual(warned, [])
})

test(
  "serve dying mid-call leaves that call untouched; the next runs the one-shot, then a restarted serve gets the call whole",
  options,
  async () => {
    const reference = fresh()
    const { resident, sent } = recorded()
    const { warned, call } = caller(resident)

    assert.deepEqual(await call(3), oneShot(reference, 3))
    // Stopped, it cannot answer; killed while the call waits for its answer.
    kill(resident, "SIGSTOP")
    const dying = call(5)
    kill(resident, "SIGKILL")
    assert.equal(await dying, null)
    assert.equal(warned.length, 1)
    assert.match(warned[0] ?? "", /^mc-transform serve ended while answering \(killed by SIGKILL\)/)

    // Backing off: this call runs the one-shot command and gets its bytes.
    assert.equal(resident.running, false)
    assert.deepEqual(await call(5), oneShot(reference, 5))
    assert.equal(sent.length, 2, "no line went to serve while it backs off")

    // After the back-off a new serve starts: the old baseline is not its own.
    await sleep(SERVE_RETRY_MS + 100)
    assert.deepEqual(await call(7), oneShot(reference, 7))
    assert.equal(sent.length, 3)
    assert.ok(!(sent[2] ?? "").includes('"base"'), "a new process gets the call whole")
    assert.equal(warned.length, 1)
  },
)

test("an answer later than the blocking wait still reaches its call", options, async () => {
  const reference = fresh()
  const { resident, sent } = recorded()
  const { warned, call } = caller(resident)

  assert.deepEqual(await call(3), oneShot(reference, 3))
  kill(resident, "SIGSTOP")
  const started = performance.now()
  const late = call(5)
  // The call blocked its whole wait and is now polling for the answer.
  assert.ok(performance.now() - started >= SERVE_SYNC_WAIT_MS - 1)
  kill(resident, "SIGCONT")
  assert.deepEqual(await late, oneShot(reference, 5))
  assert.equal(sent.length, 2)
  assert.match(sent[1] ?? "", /"base_len":3,/)
  assert.deepEqual(warned, [])
})

test("a garbage answer line leaves the call untouched and says so; the next call goes whole", options, async () => {
  const reference = fresh()
  // A serve that answers its first request with a line that is no JSON.
  const wrapper = join(/** @type {string} */ (process.env.HOME), "garbage-serve")
  writeFileSync(
    wrapper,
    `#!/bin/sh\nif [ "$1" = serve ]; then IFS= read -r line; echo 'Segmentation fault (core dumped)'; fi\nexec '${BIN}' "$@"\n`,
  )
  chmodSync(wrapper, 0o755)
  process.env.MC_TRANSFORM_BIN = wrapper
  const { resident, sent } = recorded()
  const { state, warned, call } = caller(resident)

  assert.equal(await call(3), null)
  assert.equal(warned.length, 1)
  assert.match(warned[0] ?? "", /^mc-transform serve answered no JSON: SyntaxError/)
  assert.equal(state.incremental, undefined)

  assert.deepEqual(await call(5), oneShot(reference, 5))
  assert.equal(sent.length, 2)
  assert.ok(!(sent[1] ?? "").includes('"base"'))
  assert.equal(warned.length, 1)
})
