// What the adapters use of the hosts they run in, beyond node's own API.

// Bun (OpenCode runs plugins in it): its spawn and hash, used when present.
declare var Bun:
  | {
      spawn(
        command: string[],
        options: { stdin: Uint8Array; stdout: "pipe"; stderr: "pipe" },
      ): {
        stdout: ReadableStream<Uint8Array>
        stderr: ReadableStream<Uint8Array>
        exited: Promise<number>
        signalCode: string | null
        kill(signal: string): void
      }
      hash(text: string): number | bigint
    }
  | undefined

// OpenCode's plugin helper (`@opencode-ai/plugin`, resolved by OpenCode when it loads the plugin).
declare module "@opencode-ai/plugin" {
  export const tool: any
}

// Bun's SQLite (OpenCode's runtime), loaded only there.
declare module "bun:sqlite" {
  export const Database: any
}
