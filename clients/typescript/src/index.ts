// idemflow's client for Node: it sends an intent under one key until it has
// a final answer, with the same rules as the Go client (agentclient): the
// same key on every attempt, Retry-After honoured, a 202 polled, timeouts,
// connection errors, 409 request-in-progress, 429 and 5xx retried, and no
// 4xx ever retried. It depends on nothing but Node.

import { createHash, randomUUID } from "node:crypto";
import { mkdir, readFile, rename, writeFile } from "node:fs/promises";
import { join } from "node:path";

/** An RFC 9457 problem, as idemflow answers every error. */
export interface Problem {
  type?: string;
  title?: string;
  status?: number;
  detail?: string;
  code?: string;
  current_state?: string;
  operation_id?: string;
  errors?: { field: string; reason: string }[];
}

/** A final answer that is not a success: retrying cannot change it. */
export class ProblemError extends Error {
  constructor(
    readonly status: number,
    readonly problem: Problem,
    /** The answer as it came, byte for byte. */
    readonly body: string,
  ) {
    super(problem.detail ? `${status} ${problem.type}: ${problem.detail}` : `HTTP ${status}`);
    this.name = new.target.name;
  }
}

/** The key was used before with other parameters (422): nothing was done. */
export class KeyReusedError extends ProblemError {}
/** A business rule (or an HTTP tool's downstream) said no; nothing was changed. */
export class RejectedError extends ProblemError {
  get code(): string {
    return this.problem.code ?? (this.problem.type ?? "").replace(/^\/problems\//, "");
  }
}
/** The request can never succeed as sent (400, 415): nothing was recorded. */
export class InvalidRequestError extends ProblemError {}
/** The token is missing, unknown or revoked (401). */
export class UnauthorizedError extends ProblemError {}
/** No such resource for this tenant (404). */
export class NotFoundError extends ProblemError {}
/**
 * An at_most_once HTTP tool's call got no answer that says whether it took
 * effect (502, /problems/outcome-unknown). Final: it is never sent again.
 */
export class OutcomeUnknownError extends ProblemError {}

const outcomeUnknown = "/problems/outcome-unknown";

function problemError(status: number, body: string): ProblemError {
  let p: Problem = {};
  try {
    p = JSON.parse(body) as Problem;
  } catch {
    // a downstream's answer need not be JSON
  }
  if (p.type === outcomeUnknown) return new OutcomeUnknownError(status, p, body);
  if (p.type === "/problems/idempotency-key-reused") return new KeyReusedError(status, p, body);
  // A 4xx that is no problem of idemflow's is an HTTP tool's downstream
  // rejecting the call, replayed as it came.
  if (!p.type && status >= 400 && status < 500) return new RejectedError(status, p, body);
  if (status === 400 || status === 415) return new InvalidRequestError(status, p, body);
  if (status === 401) return new UnauthorizedError(status, p, body);
  if (status === 404) return new NotFoundError(status, p, body);
  if (status === 422 || (status === 409 && p.type === "/problems/invalid-transition")) {
    return new RejectedError(status, p, body);
  }
  return new ProblemError(status, p, body);
}

/** One intent: its key, fixed once, and the request it stands for. */
export interface Intent {
  key: string;
  method?: string;
  path: string;
  body?: unknown;
}

/** A final successful answer. */
export interface Result {
  status: number;
  /** The answer's body, parsed when it is JSON. */
  body: unknown;
  /** The answer as it came. */
  raw: string;
  /** True when the answer was stored by an earlier call with the same key. */
  replayed: boolean;
}

export interface ClientOptions {
  baseURL: string;
  token: string;
  /** One attempt's bound (default 10 s). */
  attemptTimeoutMs?: number;
  /** Capped exponential backoff with full jitter (default 200 ms to 5 s). */
  initialBackoffMs?: number;
  maxBackoffMs?: number;
  /** Sent as Prefer: wait=N (default 5). */
  waitSeconds?: number;
  /** Called before every HTTP attempt. */
  onAttempt?: (n: number, intent: Intent) => void;
}

/** Thrown when an intent has no final answer before its deadline. */
export class DeadlineError extends Error {}

class Retryable extends Error {
  constructor(
    readonly cause: unknown,
    readonly waitMs = 0,
  ) {
    super(String(cause));
  }
}

export class Client {
  readonly #o: Required<Omit<ClientOptions, "onAttempt">> & Pick<ClientOptions, "onAttempt">;

  constructor(o: ClientOptions) {
    this.#o = { attemptTimeoutMs: 10_000, initialBackoffMs: 200, maxBackoffMs: 5_000, waitSeconds: 5, ...o };
    this.#o.baseURL = o.baseURL.replace(/\/+$/, "");
  }

  /**
   * Sends the intent until it has a final answer. Every attempt carries the
   * intent's key, so however often it is sent, it takes effect once.
   */
  async do(intent: Intent, opts: { deadlineMs?: number; signal?: AbortSignal } = {}): Promise<Result> {
    if (!intent.key) throw new Error("idemflow: an intent needs its key");
    const end = Date.now() + (opts.deadlineMs ?? 300_000);
    for (let n = 1; ; n++) {
      opts.signal?.throwIfAborted();
      this.#o.onAttempt?.(n, intent);
      let wait = 0;
      try {
        return await this.#attempt(intent, end, opts.signal);
      } catch (e) {
        if (!(e instanceof Retryable)) throw e;
        wait = e.waitMs;
      }
      if (Date.now() > end) throw new DeadlineError(`intent ${intent.key}: no final answer before the deadline`);
      await sleep(wait || this.#backoff(n), opts.signal);
    }
  }

  /**
   * Runs the intent a store keeps under id: made (with its key) and stored
   * before the first attempt, sent until it has a final answer, which is
   * stored too. After a restart the same id resumes it, with the same key.
   */
  async run(store: FileStore, id: string, method: string, path: string, body: unknown, opts: { deadlineMs?: number; signal?: AbortSignal } = {}): Promise<Result> {
    const intent = await store.open(id, method, path, body);
    if (intent.result) return result(intent.result.status, intent.result.raw, true);
    const r = await this.do(intent, opts);
    await store.done(intent, r);
    return r;
  }

  #backoff(n: number): number {
    const ceil = Math.min(this.#o.maxBackoffMs, this.#o.initialBackoffMs * 2 ** Math.min(n - 1, 20));
    return Math.random() * ceil;
  }

  async #send(method: string, path: string, key: string | undefined, body: unknown, signal?: AbortSignal) {
    const headers: Record<string, string> = { Authorization: `Bearer ${this.#o.token}`, Prefer: `wait=${this.#o.waitSeconds}` };
    if (key !== undefined) headers["Idempotency-Key"] = key;
    let payload: string | undefined;
    if (body !== undefined) {
      headers["Content-Type"] = "application/json";
      payload = JSON.stringify(body);
    }
    const timeout = AbortSignal.timeout(this.#o.attemptTimeoutMs);
    const resp = await fetch(this.#o.baseURL + path, {
      method,
      headers,
      body: payload,
      signal: signal ? AbortSignal.any([signal, timeout]) : timeout,
    });
    return { resp, text: await resp.text() };
  }

  async #attempt(intent: Intent, end: number, signal?: AbortSignal): Promise<Result> {
    let got;
    try {
      got = await this.#send(intent.method ?? "POST", intent.path, intent.key, intent.body, signal);
    } catch (e) {
      if (signal?.aborted) throw e;
      // A timeout is not a failure: the first call may have succeeded.
      throw new Retryable(e);
    }
    const { resp, text } = got;
    const retryAfter = parseRetryAfter(resp.headers.get("Retry-After"));
    if (resp.status === 202) return this.#poll(resp.headers.get("Location") ?? "", end, signal);
    if (resp.status < 300) return result(resp.status, text, resp.headers.get("Idempotent-Replayed") === "true");
    const type = problemType(text);
    if (type === outcomeUnknown) throw problemError(resp.status, text);
    if ((resp.status === 409 && type === "/problems/request-in-progress") || resp.status === 429 || resp.status >= 500) {
      throw new Retryable(problemError(resp.status, text), retryAfter);
    }
    throw problemError(resp.status, text);
  }

  async #poll(location: string, end: number, signal?: AbortSignal): Promise<Result> {
    for (let n = 1; Date.now() < end; n++) {
      let wait = 0;
      try {
        const { resp, text } = await this.#send("GET", location, undefined, undefined, signal);
        wait = parseRetryAfter(resp.headers.get("Retry-After"));
        if (resp.status === 200) {
          const op = JSON.parse(text) as { status: string; result_status?: number; result?: unknown };
          if (op.status !== "processing") {
            const status = op.result_status ?? 500;
            const raw = JSON.stringify(op.result ?? {});
            if ((status >= 500 || status === 429) && problemType(raw) !== outcomeUnknown) {
              // Ended without an answer: send the intent again, with its key.
              throw new Retryable(problemError(status, raw));
            }
            if (status >= 400) throw problemError(status, raw);
            return result(status, raw, true);
          }
        } else if (resp.status < 500 && resp.status !== 429) {
          throw problemError(resp.status, text);
        }
      } catch (e) {
        if (e instanceof ProblemError || e instanceof Retryable || signal?.aborted) throw e;
      }
      await sleep(wait || this.#backoff(n), signal);
    }
    throw new Retryable(new DeadlineError("polling ended at the deadline"));
  }
}

function result(status: number, raw: string, replayed: boolean): Result {
  let body: unknown = raw;
  try {
    body = JSON.parse(raw);
  } catch {
    // kept as text: an HTTP tool's downstream may answer with any body
  }
  return { status, body, raw, replayed };
}

function problemType(body: string): string | undefined {
  try {
    return (JSON.parse(body) as Problem).type;
  } catch {
    return undefined;
  }
}

function parseRetryAfter(v: string | null): number {
  const s = Number(v);
  return v && Number.isFinite(s) && s >= 0 ? s * 1000 : 0;
}

function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    const t = setTimeout(resolve, ms);
    signal?.addEventListener("abort", () => {
      clearTimeout(t);
      reject(signal.reason);
    }, { once: true });
  });
}

/**
 * deriveKey is the one derivation of a key from a durable identity: the
 * parts (a framework's thread, namespace and call IDs, and the tool's
 * name) hashed, so that the same parts give the same key in any process,
 * and any other parts another key. 47 characters, within idemflow's rules.
 */
export function deriveKey(scheme: string, ...parts: string[]): string {
  const h = createHash("sha256");
  for (const p of [scheme, ...parts]) h.update(p).update("\0");
  return `${scheme}_${h.digest("base64url").slice(0, 42)}`;
}

/** An intent kept by a store: its key and request, and its final answer once it has one. */
export interface StoredIntent extends Intent {
  id: string;
  method: string;
  result?: { status: number; raw: string };
}

/** The stored intent under an ID was made for another request. */
export class IntentMismatchError extends Error {}

/**
 * FileStore keeps intents for callers with no framework: an intent's key is
 * made once, written to disk before the first attempt, and found again by
 * the intent's own ID after a restart. One JSON file per intent.
 */
export class FileStore {
  constructor(readonly dir: string) {}

  #file(id: string): string {
    return join(this.dir, createHash("sha256").update(id).digest("hex") + ".json");
  }

  /** The intent named id: the stored one, or a new one with a new key, stored before this returns. */
  async open(id: string, method: string, path: string, body: unknown): Promise<StoredIntent> {
    try {
      const stored = JSON.parse(await readFile(this.#file(id), "utf8")) as StoredIntent;
      if (stored.method !== method || stored.path !== path || JSON.stringify(stored.body) !== JSON.stringify(body)) {
        throw new IntentMismatchError(`intent ${id} was stored as ${stored.method} ${stored.path} with another body`);
      }
      return stored;
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== "ENOENT") throw e;
    }
    const intent: StoredIntent = { id, key: randomUUID(), method, path, body };
    await this.#save(intent);
    return intent;
  }

  /** Records an intent's final answer. */
  async done(intent: StoredIntent, r: Result): Promise<void> {
    await this.#save({ ...intent, result: { status: r.status, raw: r.raw } });
  }

  async #save(intent: StoredIntent): Promise<void> {
    await mkdir(this.dir, { recursive: true });
    const tmp = this.#file(intent.id) + "." + process.pid + ".tmp";
    await writeFile(tmp, JSON.stringify(intent));
    await rename(tmp, this.#file(intent.id));
  }
}
