// The fold commands' arguments and summary line (what /mc-wrapup and
// /mc-recomp run and what the user or agent reads back).
import assert from "node:assert/strict"
import { test } from "node:test"

import { failureText } from "../source/core.js"
import { DEFAULT_KEEP, foldArgs, foldSummary } from "../source/fold.js"

test("a wrap-up keeps the number typed, or the default; anything else is refused", () => {
  assert.deepEqual(foldArgs("wrapup", ""), { args: ["wrapup", "--keep", String(DEFAULT_KEEP)] })
  assert.deepEqual(foldArgs("wrapup", " 8 "), { args: ["wrapup", "--keep", "8"] })
  assert.deepEqual(foldArgs("wrapup", "007"), { args: ["wrapup", "--keep", "7"] })
  for (const bad of ["-3", "ten", "8 --db /tmp/x", "1e9", "12345678"]) {
    const parsed = foldArgs("wrapup", bad)
    assert.ok("error" in parsed, bad)
    assert.match(parsed.error, /number of newest messages/)
  }
  assert.deepEqual(foldArgs("recomp", "whatever"), { args: ["recomp"] })
})

test("the summary says what was folded, what failed, or why nothing was done", () => {
  const published = {
    status: "published",
    job: "wrapup",
    keep: 8,
    compartments: [
      { sequence: 1, start: 1, end: 26 },
      { sequence: 2, start: 27, end: 52 },
    ],
  }
  assert.match(
    foldSummary({ code: 0, stdout: JSON.stringify(published), stderr: "" }, failureText),
    /^mc wrap-up: 2 compartments through message 52; the context shows them from the next call/,
  )
  const recomp = { ...published, job: "recomp", replaced: 3 }
  assert.match(
    foldSummary({ code: 0, stdout: JSON.stringify(recomp), stderr: "" }, failureText),
    /^mc recompute: 2 compartments through message 52, replacing 3;/,
  )
  const failed = { status: "failed", job: "recomp", error: "the recomputed compartments end at message 40, short of 52" }
  assert.equal(
    foldSummary({ code: 1, stdout: JSON.stringify(failed), stderr: "" }, failureText),
    "mc recompute failed: the recomputed compartments end at message 40, short of 52",
  )
  const nothing = { status: "nothing_to_do", job: "wrapup", reason: "nothing_new", compartments: [] }
  assert.equal(
    foldSummary({ code: 0, stdout: JSON.stringify(nothing), stderr: "" }, failureText),
    "mc wrap-up: nothing to do (nothing_new)",
  )
  assert.equal(
    foldSummary({ code: 2, stdout: "", stderr: "mc-historian: error: no model\nmc-historian: hint: set historian.model\n" }, failureText),
    "mc-historian failed (exit 2): mc-historian: error: no model; mc-historian: hint: set historian.model",
  )
})
