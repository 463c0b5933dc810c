// Builds each adapter into the one file its harness loads, with the core
// inlined: OpenCode loads every .js/.ts file directly in its plugin folder
// and Pi every one in its extensions folder, so a core installed beside
// them would be loaded as a plugin itself. `--check` fails when a committed
// file is not what the sources build (CI runs it).
import { build } from "esbuild"
import { readFileSync, writeFileSync } from "node:fs"
import { dirname } from "node:path"
import { fileURLToPath } from "node:url"

const here = dirname(fileURLToPath(import.meta.url))
process.chdir(here)

const check = process.argv.includes("--check")
const targets = [
  { entry: "source/opencode.ts", out: "opencode/mc.js", external: ["@opencode-ai/plugin", "bun:sqlite"] },
  { entry: "source/pi.ts", out: "pi/mc.ts", external: [] },
]
/** @param {string} entry */
const banner = (entry) =>
  `// mc's adapter, built from adapters/${entry} and adapters/source/core.js\n` +
  "// by `npm run build` in adapters/: edit those, not this file.\n"

/** @type {string[]} */
const stale = []
for (const { entry, out, external } of targets) {
  const result = await build({
    entryPoints: [entry],
    absWorkingDir: here,
    bundle: true,
    write: false,
    format: "esm",
    platform: "node",
    target: "es2022",
    external,
    banner: { js: banner(entry) },
    legalComments: "none",
    charset: "utf8",
    logLevel: "warning",
  })
  const text = result.outputFiles[0]?.text ?? ""
  let current = ""
  try {
    current = readFileSync(out, "utf8")
  } catch {}
  if (current === text) continue
  if (check) stale.push(out)
  else writeFileSync(out, text)
}
if (stale.length) {
  console.error(`adapters: ${stale.join(", ")} not built from the sources: run \`npm run build\` in adapters/ and commit the result`)
  process.exit(1)
}
