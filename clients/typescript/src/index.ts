// idemflow's client for Node: it sends an intent under one key until it has
// a final answer, with the same rules as the Go client (agentclient): the
// same key on every attempt, Retry-After honoured, a 202 polled, timeouts,
// connection errors, 409 request-in-progress, 429 and 5xx retried, and no
// 4xx ever retried. It depends on nothing but Node.

import { createHash, randomUUID } from "node:crypto";
import { mkdir, open as openFile, readFile, rename } from "node:fs/promises";
import canonicalize from "canonicalize";
import { dirname, join } from "node:path";

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
    /** The answer as it came, byte for byte (an HTTP tool's downstream may answer with any body). */
    readonly body: string,
    /**
     * The answer is the intent's own, stored under its key (it carried
     * Idempotent-Replayed): the operation's or its downstream's rejection,
     * not idemflow's refusal of the request. The key is spent on this
     * request: other parameters need a new key.
     */
    readonly settled = false,
  ) {
    super(problem.detail ? `${status} ${problem.type}: ${problem.detail}` : `HTTP ${status}`);
    this.name = new.target.name;
  }
}

/** The key was used before with other parameters (422): nothing was done. */
export class KeyReusedError extends ProblemError {}
/**
 * The operation said no, and its answer is stored under the key: a
 * business rule (out of stock, an invalid transition), or an HTTP tool's
 * downstream with a 4xx of its own (code downstream-rejected). Nothing was
 * changed; the same key with the same request may run again, other
 * parameters need a new key.
 */
export class RejectedError extends ProblemError {
  get code(): string {
    const p = this.problem;
    if (!this.settled) return p.code ?? (p.type ?? "").replace(/^\/problems\//, "");
    return p.code && p.type === `/problems/${p.code}` ? p.code : downstreamRejected;
  }
}
/** idemflow refused the request as sent (400, 413, 415): nothing was recorded, so the same key may carry a corrected body. */
export class InvalidRequestError extends ProblemError {}
/** The token is missing, unknown or revoked (401). */
export class UnauthorizedError extends ProblemError {}
/** No such resource for this tenant (404). */
export class NotFoundError extends ProblemError {}
/**
 * An at_most_once HTTP tool's call got no answer that says whether it took
 * effect (502, /problems/outcome-unknown). Final when it is the intent's
 * own answer (settled: it is never sent again); one not marked so is
 * retried, and typed this way too.
 */
export class OutcomeUnknownError extends ProblemError {}

/** The body was over the server's limit (413): nothing was recorded. */
export class TooLargeError extends InvalidRequestError {}

const outcomeUnknown = "/problems/outcome-unknown";
/** RejectedError.code of an HTTP tool's call that its downstream rejected. */
export const downstreamRejected = "downstream-rejected";
/**
 * On every answer that is the intent's own, stored one (whatever its
 * status), and on no answer of idemflow's about the request.
 */
export const headerReplayed = "Idempotent-Replayed";

function parseProblem(body: string): Problem {
  try {
    const p = JSON.parse(body) as unknown;
    return p && typeof p === "object" ? (p as Problem) : {};
  } catch {
    return {}; // a downstream's answer need not be JSON
  }
}

/** Types an error answer; settled says it is the intent's own (judge). */
function problemError(status: number, body: string, settled: boolean): ProblemError {
  const p = parseProblem(body);
  if (settled) {
    if (p.type === outcomeUnknown) return new OutcomeUnknownError(status, p, body, true);
    if (status >= 400 && status < 500) return new RejectedError(status, p, body, true);
    return new ProblemError(status, p, body, true);
  }
  if (p.type === "/problems/idempotency-key-reused") return new KeyReusedError(status, p, body);
  // Not the intent's own answer (a retry follows), typed as Go's is.
  if (p.type === outcomeUnknown) return new OutcomeUnknownError(status, p, body);
  if (status === 413) return new TooLargeError(status, p, body);
  if (status === 400 || status === 415) return new InvalidRequestError(status, p, body);
  if (status === 401) return new UnauthorizedError(status, p, body);
  if (status === 404) return new NotFoundError(status, p, body);
  if (status === 422 || (status === 409 && p.type === "/problems/invalid-transition")) {
    return new RejectedError(status, p, body);
  }
  return new ProblemError(status, p, body);
}

/** What an answer asks of the client (see judge). */
export type Judgement =
  | { action: "success"; result: Result }
  | { action: "poll" }
  | { action: "retry"; error: ProblemError; waitMs: number }
  | { action: "fail"; error: ProblemError };

/**
 * judge reads one answer to an intent, by the table every client shares
 * (clients/testdata/answers.json). An answer with Idempotent-Replayed is
 * the intent's own, whatever its status: any 2xx is its success (a
 * downstream's 202 too), a 4xx the operation's rejection (a downstream's
 * too, never idemflow's refusal of the request), a 5xx one that ended
 * without an answer, sent again (but outcome-unknown, which is final).
 * Without it, the answer is idemflow's about the request: 202 still
 * running, 409 in progress, 429 and 5xx retried, a 4xx a refusal.
 */
export function judge(status: number, headers: { get(name: string): string | null }, raw: string): Judgement {
  const replayedHeader = headers.get(headerReplayed);
  const settled = replayedHeader !== null && replayedHeader !== "";
  if (status === 202 && !settled) return { action: "poll" };
  if (status < 300) {
    const r = result(status, raw, replayedHeader === "true");
    const differed = (headers.get("Idempotency-Differed") ?? "").split(",").map((d) => d.trim()).filter((d) => d !== "");
    return { action: "success", result: differed.length ? { ...r, differed } : r };
  }
  const type = problemType(raw);
  if (settled && type === outcomeUnknown) return { action: "fail", error: problemError(status, raw, true) };
  if ((!settled && status === 409 && type === "/problems/request-in-progress") || status === 429 || status >= 500) {
    return { action: "retry", error: problemError(status, raw, settled), waitMs: parseRetryAfter(headers.get("Retry-After")) };
  }
  return { action: "fail", error: problemError(status, raw, settled) };
}

/** The part of GET /v1/operations/{id} a poll reads. */
interface OperationView {
  status: string;
  result_status?: number;
  result_content_type?: string;
  result?: unknown;
  result_base64?: string;
}

/**
 * rawMember is the text of the top-level member name of the JSON object
 * text, as the server wrote it: the replay's bytes. JSON.stringify of the
 * parsed value would change escapes (\\u0026), spacing, and integers
 * beyond 2^53. text must be valid JSON (it was parsed before).
 */
export function rawMember(text: string, name: string): string | undefined {
  let i = text.indexOf("{") + 1;
  const skip = (chars: string) => {
    while (i < text.length && chars.includes(text[i])) i++;
  };
  // The end of the value (or string) that starts at i.
  const valueEnd = (): number => {
    let depth = 0;
    let j = i;
    for (; j < text.length; j++) {
      const c = text[j];
      if (c === '"') {
        for (j++; text[j] !== '"'; j++) if (text[j] === "\\") j++;
        if (depth === 0) return j + 1;
      } else if (c === "{" || c === "[") depth++;
      else if (c === "}" || c === "]") {
        if (depth === 0) return j; // the end of a scalar at the object's end
        if (--depth === 0) return j + 1;
      } else if (depth === 0 && (c === "," || " \t\n\r".includes(c))) return j;
    }
    return j;
  };
  for (;;) {
    skip(" \t\n\r,");
    if (i >= text.length || text[i] === "}") return undefined;
    const keyEnd = valueEnd();
    const key = JSON.parse(text.slice(i, keyEnd)) as string;
    i = keyEnd;
    skip(" \t\n\r:");
    const end = valueEnd();
    if (key === name) return text.slice(i, end);
    i = end;
  }
}

/**
 * judgeOperation reads a polled operation: still running (poll), or its
 * stored answer, judged as a replay of it would be, with the replay's
 * bytes (result_base64 when the view has it, else result).
 */
export function judgeOperation(text: string): Judgement {
  const op = JSON.parse(text) as OperationView;
  if (op.status === "processing") return { action: "poll" };
  const raw = op.result_base64 !== undefined ? Buffer.from(op.result_base64, "base64").toString("utf8") : (rawMember(text, "result") ?? "{}");
  return judge(op.result_status ?? 500, new Headers({ [headerReplayed]: "true" }), raw);
}

/** One intent: its key, fixed once, and the request it stands for. */
export interface Intent {
  key: string;
  method?: string;
  path: string;
  body?: unknown;
  /**
   * The key was derived from the operation's intent fields (a framework's
   * call, intentCanonical): the gateway compares the request on them alone
   * (Idempotency-Fingerprint: intent), so a re-run whose model reworded
   * free text gets the first answer, with Result.differed.
   */
  byIntent?: boolean;
}

/** Where a framework's tool sends each call: one of idemflow's operations, and the body it takes. */
export interface OperationFields<I = any> {
  /** The operation's path: /v1/tickets, /v1/tools/refund_create, or one built from the arguments. */
  path: string | ((input: I) => string);
  /** The body sent (default: the arguments). */
  body?: (input: I) => unknown;
}

/** The intent of one tool call under key: a POST to f's operation, of its body for input. */
export function operationIntent<I>(key: string, f: OperationFields<I>, input: I): Intent {
  return { key, method: "POST", path: typeof f.path === "function" ? f.path(input) : f.path, body: f.body ? f.body(input) : input };
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
  /** On a replay of an intent keyed by its intent fields: what this request sent that differs from the first answer (Idempotency-Differed), which holds what was made. */
  differed?: string[];
}

/** Returns the bearer token for the next attempt: an OAuth access token, renewed as it expires (cache it while it is good). */
export type TokenProvider = () => string | Promise<string>;

export interface ClientOptions {
  baseURL: string;
  /** idemflow's API token, an OAuth access token, or a provider asked before every attempt. Never logged. */
  token: string | TokenProvider;
  /** One attempt's bound (default 10 s). A call's deadline bounds every attempt, pause and wait: none outlasts what is left of it. */
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

/** The call has no durable identity to derive a key from: an integration refuses to make one up. */
export class NoDurableIdentityError extends Error {}

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
    // A deadline given with the intent would be ignored, and the call
    // retried for the default 300 s: refused where it is written.
    for (const misplaced of ["deadlineMs", "signal"] as const) {
      if (misplaced in (intent as object)) {
        throw new TypeError(`idemflow: ${misplaced} is an option of do, not a field of the intent: client.do(intent, { ${misplaced} })`);
      }
    }
    const end = Date.now() + (opts.deadlineMs ?? 300_000);
    // This call's name on each of its attempts (Idempotency-Origin): the
    // call that ran the intent is told so, replayed false, on whichever
    // attempt's answer reaches it.
    const origin = globalThis.crypto.randomUUID();
    for (let n = 1; ; n++) {
      opts.signal?.throwIfAborted();
      this.#o.onAttempt?.(n, intent);
      let wait = 0;
      try {
        return await this.#attempt(intent, end, opts.signal, origin);
      } catch (e) {
        if (!(e instanceof Retryable)) throw e;
        wait = e.waitMs;
      }
      const pause = this.#pause(wait, n, end);
      if (pause === undefined) throw pastDeadline(intent);
      await sleep(pause, opts.signal);
    }
  }

  /**
   * Runs the intent a store keeps under id: made (with its key) and stored
   * before the first attempt, sent until it has a final answer, which is
   * stored too. After a restart the same id resumes it, with the same key.
   * Another request under a used id throws IntentMismatchError, except
   * after idemflow refused the last one as sent (400, 413, 415: nothing
   * recorded), when the same key carries the corrected one.
   */
  async run(store: FileStore, id: string, method: string, path: string, body: unknown, opts: { deadlineMs?: number; signal?: AbortSignal } = {}): Promise<Result> {
    const intent = await store.open(id, method, path, body);
    if (intent.result) return result(intent.result.status, intent.result.raw, true);
    let r: Result;
    try {
      r = await this.do(intent, opts);
    } catch (e) {
      // Refused as sent (400, 413, 415), nothing recorded: the same ID,
      // and key, may carry a corrected body.
      if (e instanceof InvalidRequestError && !e.settled) await store.refused(intent);
      throw e;
    }
    await store.done(intent, r);
    return r;
  }

  /**
   * The pause before attempt n+1: the server's Retry-After, else the
   * backoff; undefined when it would end past the deadline, which a
   * caller's deadline is a bound on.
   */
  #pause(waitMs: number, n: number, end: number): number | undefined {
    const pause = waitMs || Math.random() * backoffCeiling(this.#o.initialBackoffMs, this.#o.maxBackoffMs, n);
    return Date.now() + pause < end ? pause : undefined;
  }

  async #send(intent: Intent, method: string, path: string, key: string | undefined, body: unknown, end: number, signal?: AbortSignal, origin?: string) {
    const left = end - Date.now();
    if (left <= 0) throw pastDeadline(intent);
    const bearer = typeof this.#o.token === "function" ? await this.#o.token() : this.#o.token;
    const headers: Record<string, string> = { Authorization: `Bearer ${bearer}`, Prefer: `wait=${preferWait(this.#o.waitSeconds, left / 1000)}` };
    if (key !== undefined) headers["Idempotency-Key"] = key;
    if (key !== undefined && intent.byIntent) headers["Idempotency-Fingerprint"] = "intent";
    if (origin !== undefined) headers["Idempotency-Origin"] = origin;
    let payload: string | undefined;
    if (body !== undefined) {
      headers["Content-Type"] = "application/json";
      payload = JSON.stringify(body);
    }
    const timeout = AbortSignal.timeout(Math.min(this.#o.attemptTimeoutMs, left));
    const resp = await fetch(this.#o.baseURL + path, {
      method,
      headers,
      body: payload,
      signal: signal ? AbortSignal.any([signal, timeout]) : timeout,
    });
    return { resp, text: await resp.text() };
  }

  async #attempt(intent: Intent, end: number, signal?: AbortSignal, origin?: string): Promise<Result> {
    let got;
    try {
      got = await this.#send(intent, intent.method ?? "POST", intent.path, intent.key, intent.body, end, signal, origin);
    } catch (e) {
      if (signal?.aborted || e instanceof DeadlineError) throw e;
      // A timeout is not a failure: the first call may have succeeded.
      throw new Retryable(e);
    }
    const { resp, text } = got;
    const j = judge(resp.status, resp.headers, text);
    switch (j.action) {
      case "poll":
        return this.#poll(intent, resp.headers.get("Location") ?? "", end, signal);
      case "success":
        return j.result;
      case "retry":
        throw new Retryable(j.error, j.waitMs);
      case "fail":
        throw j.error;
    }
  }

  async #poll(intent: Intent, location: string, end: number, signal?: AbortSignal): Promise<Result> {
    for (let n = 1; Date.now() < end; n++) {
      let wait = 0;
      try {
        const { resp, text } = await this.#send(intent, "GET", location, undefined, undefined, end, signal);
        wait = parseRetryAfter(resp.headers.get("Retry-After"));
        if (resp.status === 200) {
          // Done: its answer, as a replay would give it, but not marked
          // replayed: the 202 said this request started the run. One that
          // ended without an answer is retried: the intent is sent again
          // with its key.
          const j = judgeOperation(text);
          if (j.action === "success") return { ...j.result, replayed: false };
          if (j.action === "retry") throw new Retryable(j.error);
          if (j.action === "fail") throw j.error;
        } else if (resp.status < 500 && resp.status !== 429) {
          throw problemError(resp.status, text, false);
        }
      } catch (e) {
        if (e instanceof ProblemError || e instanceof Retryable || e instanceof DeadlineError || signal?.aborted) throw e;
      }
      const pause = this.#pause(wait, n, end);
      if (pause === undefined) break;
      await sleep(pause, signal);
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

function pastDeadline(intent: Intent): DeadlineError {
  return new DeadlineError(`intent ${intent.key}: no final answer before the deadline`);
}

/**
 * What Prefer: wait=N asks for with leftSeconds before the deadline: the
 * configured wait, but never more than leaves a second after it to read
 * the server's 202 and poll, so that the server's answer comes inside the
 * deadline (the same rule in every client).
 */
export function preferWait(configured: number, leftSeconds: number): number {
  if (leftSeconds >= configured + 1) return configured; // an infinite deadline too
  return Math.max(0, Math.floor(leftSeconds) - 1);
}

/**
 * The longest pause before attempt n+1: capped exponential, from which
 * full jitter draws (as in every client).
 */
export function backoffCeiling(initialMs: number, maxMs: number, n: number): number {
  return Math.min(maxMs, initialMs * 2 ** Math.min(n - 1, 20));
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
    // The listener goes when the pause ends: a caller's signal outlives
    // many pauses of a long retry loop, and must not collect one each.
    const abort = () => {
      clearTimeout(t);
      reject(signal!.reason);
    };
    const t = setTimeout(() => {
      signal?.removeEventListener("abort", abort);
      resolve();
    }, ms);
    signal?.addEventListener("abort", abort, { once: true });
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

/** value in its RFC 8785 form: the same JSON text in every client, whatever the order of its keys. */
export function canonical(value: unknown): string {
  return canonicalize(value) ?? "";
}

/**
 * What names the call at index at of a turn's calls beyond its turn and
 * tool: the digest of its arguments (deriveKey("args", ...)) and their
 * occurrence (from 1) among the calls of its tool with those arguments, up
 * to it. calls are in their order, each with its tool and its arguments
 * in RFC 8785 form.
 */
/**
 * A tool call's arguments in their RFC 8785 form, less a top-level
 * idempotency_key: idemflow's MCP tools take one the model writes, new each
 * time it writes the call, so it is no part of the intended call (the same
 * call through the native tool and through MCP has one key).
 */
export function callArguments(input: unknown): string {
  if (input && typeof input === "object" && !Array.isArray(input)) {
    const { idempotency_key: _modelWritten, ...rest } = input as Record<string, unknown>;
    return canonical(rest);
  }
  return canonical(input);
}

export function occurrenceAt(calls: readonly { tool: string; args: string }[], at: number): { args: string; occurrence: number } {
  const { tool, args } = calls[at];
  return { args: callDigest(args), occurrence: calls.slice(0, at + 1).filter((c) => c.tool === tool && c.args === args).length };
}

/** A field of a request that makes its intent, and its rule (idemflow's intent package). */
export { builtinIntent, intentCanonical, intentFieldsOf, intentNorms, normalizeIntent, type IntentField } from "./intent.js";
import { intentCanonical, type IntentField } from "./intent.js";

/**
 * What names a call beyond its turn and tool, as occurrenceAt compares it:
 * "intent:" and its intent where the tool declares intent fields, so a
 * reworded call is the same call; else its whole arguments (callArguments).
 */
export function callIntent(fields: readonly IntentField[], args: unknown): string {
  if (fields.length > 0 && args !== null && typeof args === "object" && !Array.isArray(args)) {
    return "intent:" + intentCanonical(fields, args as Record<string, unknown>);
  }
  return callArguments(args);
}

/** The digest a key takes of callIntent's text: deriveKey("intent", its intent) or deriveKey("args", its arguments). */
export function callDigest(call: string): string {
  return call.startsWith("intent:") ? deriveKey("intent", call.slice("intent:".length)) : deriveKey("args", call);
}

/** An intent kept by a store: its key and request, and its final answer once it has one. */
export interface StoredIntent extends Intent {
  id: string;
  method: string;
  result?: { status: number; raw: string };
  /** idemflow refused the request as sent (nothing recorded): the next open may carry a corrected one. */
  refused?: boolean;
}

/** The stored intent under an ID was made for another request. */
export class IntentMismatchError extends Error {}

/**
 * Whether two bodies are one request: equal RFC 8785 (JCS) forms, as every
 * idemflow client compares them (clients/testdata/bodies.json). Members in
 * another order are the same body; so are 2 and 2.0.
 */
export function sameBody(a: unknown, b: unknown): boolean {
  return canonicalize(a) === canonicalize(b);
}

/** What FileStore tells an observer: each fsync, in order (for tests). */
export type SyncObserver = (what: "file" | "dir", path: string) => void;

/**
 * FileStore keeps intents for callers with no framework: an intent's key is
 * made once, written to disk before the first attempt, and found again by
 * the intent's own ID after a restart. One JSON file per intent, written
 * to a temporary file, synced, renamed into place, and its folder synced:
 * a key is on disk before open returns, and a crash leaves the old file or
 * the new one, never half of one.
 */
export class FileStore {
  constructor(
    readonly dir: string,
    readonly onSync?: SyncObserver,
  ) {}

  #file(id: string): string {
    return join(this.dir, createHash("sha256").update(id).digest("hex") + ".json");
  }

  /** The intent named id: the stored one, or a new one with a new key, stored before this returns. */
  async open(id: string, method: string, path: string, body: unknown): Promise<StoredIntent> {
    try {
      const stored = JSON.parse(await readFile(this.#file(id), "utf8")) as StoredIntent;
      if (stored.method === method && stored.path === path && sameBody(stored.body, body)) return stored;
      if (!stored.refused || stored.result) {
        throw new IntentMismatchError(
          `intent ${id} was stored as ${stored.method} ${stored.path} with another body; its key may already be recorded with the stored request, so use a new ID for a new intent`,
        );
      }
      // idemflow refused the stored request before recording anything: the
      // same key carries the corrected one.
      const revised: StoredIntent = { id, key: stored.key, method, path, body };
      await this.#save(revised);
      return revised;
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

  /** Records that idemflow refused the intent's request as sent (nothing was recorded there), so the next open may carry a corrected one. */
  async refused(intent: StoredIntent): Promise<void> {
    await this.#save({ ...intent, refused: true });
  }

  async #save(intent: StoredIntent): Promise<void> {
    await mkdir(this.dir, { recursive: true });
    await writeDurably(this.#file(intent.id), JSON.stringify(intent), this.onSync);
  }
}

/**
 * writeDurably replaces file with text so that a crash, of the process or
 * the machine, leaves the old file or the new one, never half of one, and
 * the new one is on disk when it resolves: written to a temporary file,
 * synced, renamed into place, and its folder synced.
 */
export async function writeDurably(file: string, text: string, onSync?: SyncObserver): Promise<void> {
  const tmp = file + "." + process.pid + ".tmp";
  const fh = await openFile(tmp, "w");
  try {
    await fh.writeFile(text);
    await fh.sync();
    onSync?.("file", tmp);
  } finally {
    await fh.close();
  }
  await rename(tmp, file);
  // The rename is durable once the folder's entry is.
  const folder = dirname(file);
  const dir = await openFile(folder, "r");
  try {
    await dir.sync();
    onSync?.("dir", folder);
  } finally {
    await dir.close();
  }
}
