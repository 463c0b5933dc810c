// The user's fold commands, shared by the OpenCode plugin and the Pi
// extension: `mc-wrapup [N]` (mc-historian wrapup --keep N: fold all but
// the newest N raw messages now) and `mc-recomp` (mc-historian recomp:
// rebuild the compartments from the raw history). Each adapter adds its
// harness's session source to the arguments and shows the summary line.

/** What `--keep` is when the command names no number (mc-historian's default). */
export const DEFAULT_KEEP = 20

/**
 * The mc-historian arguments of a fold command, before the session source,
 * or why not when the argument is not a count.
 * @param {"wrapup" | "recomp"} job
 * @param {string} argument what the user typed after the command
 * @returns {{ args: string[] } | { error: string }}
 */
export function foldArgs(job, argument) {
  if (job === "recomp") return { args: ["recomp"] }
  const text = String(argument ?? "").trim()
  if (text === "") return { args: ["wrapup", "--keep", String(DEFAULT_KEEP)] }
  if (!/^[0-9]{1,6}$/.test(text)) {
    return { error: `mc-wrapup takes the number of newest messages to keep (e.g. "mc-wrapup 10"), not ${JSON.stringify(text)}` }
  }
  return { args: ["wrapup", "--keep", String(Number(text))] }
}

/**
 * One line saying what a fold command did, from mc-historian's exit code,
 * JSON answer and stderr.
 * @param {{ code: number, stdout: string, stderr: string }} result
 * @param {(stderr: string) => string} failureText
 * @returns {string}
 */
export function foldSummary(result, failureText) {
  let report
  try {
    report = JSON.parse(result.stdout)
  } catch {
    return `mc-historian failed (exit ${result.code}): ${failureText(result.stderr) || "no answer"}`
  }
  const job = report.job === "recomp" ? "recompute" : "wrap-up"
  if (report.status === "failed") return `mc ${job} failed: ${report.error ?? failureText(result.stderr)}`
  if (report.status !== "published") return `mc ${job}: nothing to do (${report.reason ?? "nothing new"})`
  const compartments = Array.isArray(report.compartments) ? report.compartments : []
  const last = compartments[compartments.length - 1]
  const through = last && Number.isInteger(last.end) ? ` through message ${last.end}` : ""
  const replaced = Number.isInteger(report.replaced) ? `, replacing ${report.replaced}` : ""
  return (
    `mc ${job}: ${compartments.length} compartments${through}${replaced}; ` +
    "the context shows them from the next call that rebuilds the cache anyway"
  )
}
