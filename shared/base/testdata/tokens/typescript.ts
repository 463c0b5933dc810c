import { EventEmitter } from "node:events";
import type { IncomingMessage, ServerResponse } from "node:http";

export interface Job<T = unknown> {
  id: string;
  payload: T;
  attempts: number;
  runAt: number; // epoch millis
  lastError?: string;
}

export type Handler<T> = (job: Job<T>, signal: AbortSignal) => Promise<void>;

export interface QueueOptions {
  concurrency?: number;
  maxAttempts?: number;
  backoffMs?: (attempt: number) => number;
  now?: () => number;
}

const defaultBackoff = (attempt: number): number =>
  Math.min(30_000, 250 * 2 ** attempt) + Math.floor(Math.random() * 100);

export class JobQueue<T> extends EventEmitter {
  private readonly pending: Job<T>[] = [];
  private readonly running = new Map<string, AbortController>();
  private readonly opts: Required<QueueOptions>;
  private timer: NodeJS.Timeout | null = null;

  constructor(private readonly handler: Handler<T>, options: QueueOptions = {}) {
    super();
    this.opts = {
      concurrency: options.concurrency ?? 4,
      maxAttempts: options.maxAttempts ?? 5,
      backoffMs: options.backoffMs ?? defaultBackoff,
      now: options.now ?? Date.now,
    };
  }

  enqueue(id: string, payload: T, delayMs = 0): void {
    if (this.running.has(id) || this.pending.some((j) => j.id === id)) {
      throw new Error(`duplicate job id: ${id}`);
    }
    this.pending.push({ id, payload, attempts: 0, runAt: this.opts.now() + delayMs });
    this.pending.sort((a, b) => a.runAt - b.runAt);
    this.schedule();
  }

  cancel(id: string): boolean {
    const ctl = this.running.get(id);
    if (ctl) {
      ctl.abort(new Error("cancelled"));
      return true;
    }
    const idx = this.pending.findIndex((j) => j.id === id);
    if (idx >= 0) this.pending.splice(idx, 1);
    return idx >= 0;
  }

  private schedule(): void {
    if (this.timer) clearTimeout(this.timer);
    const next = this.pending[0];
    if (!next || this.running.size >= this.opts.concurrency) return;
    const wait = Math.max(0, next.runAt - this.opts.now());
    this.timer = setTimeout(() => void this.tick(), wait);
  }

  private async tick(): Promise<void> {
    this.timer = null;
    while (this.running.size < this.opts.concurrency && this.pending.length > 0) {
      const job = this.pending[0]!;
      if (job.runAt > this.opts.now()) break;
      this.pending.shift();
      void this.run(job);
    }
    this.schedule();
  }

  private async run(job: Job<T>): Promise<void> {
    const ctl = new AbortController();
    this.running.set(job.id, ctl);
    try {
      await this.handler(job, ctl.signal);
      this.emit("done", job);
    } catch (err) {
      job.attempts += 1;
      job.lastError = err instanceof Error ? err.message : String(err);
      if (job.attempts >= this.opts.maxAttempts || ctl.signal.aborted) {
        this.emit("failed", job);
      } else {
        job.runAt = this.opts.now() + this.opts.backoffMs(job.attempts);
        this.pending.push(job);
        this.pending.sort((a, b) => a.runAt - b.runAt);
      }
    } finally {
      this.running.delete(job.id);
      this.schedule();
    }
  }
}

export function statusHandler(q: JobQueue<unknown>) {
  return (_req: IncomingMessage, res: ServerResponse): void => {
    res.writeHead(200, { "content-type": "application/json" });
    res.end(JSON.stringify({ ok: true, listeners: q.listenerCount("done") }));
  };
}
