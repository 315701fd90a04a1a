// The Temporal key rules every idemflow client shares (tp3, the
// temporal, temporal_args and temporal_lineage vectors of
// clients/testdata/keys.json; Go's agentclient and Python's
// idemflow.temporal derive the same), written so that they run inside
// Temporal's workflow sandbox too: no Node built-in, so the hash is
// @noble/hashes' and the text codec Temporal's own.

import { sha256 } from "@noble/hashes/sha2.js";
import { decode, encode } from "@temporalio/common/lib/encoding.js";
import canonicalize from "canonicalize";
import { intentCanonical, type IntentField } from "./intent.js";

/** The scheme of a Temporal activity's key: the intended call. */
export const keyScheme = "tp3";

/** tp3 with the call's intent in place of its arguments, for an activity whose intent fields the workflow's worker declares: a scheme of its own, so no tp3 key in flight is read as an intent's. */
export const intentKeyScheme = "tp4";

/** The header that names a call, as JSON {lineage, turn, args, n}. */
export const callHeader = "idemflow-call";

/** The header that hands a continued run its lineage, as JSON {lineage, turn, by}. */
export const lineageHeader = "idemflow-lineage";

/** A payload as Temporal carries it: metadata and data, as bytes. */
export interface RawPayload {
  metadata?: Record<string, Uint8Array> | null;
  data?: Uint8Array | null;
}

const b64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/** Standard base64 with padding, as Python's b64encode and Go's StdEncoding. */
function base64(bytes: Uint8Array): string {
  let out = "";
  for (let i = 0; i < bytes.length; i += 3) {
    const n = (bytes[i] << 16) | ((bytes[i + 1] ?? 0) << 8) | (bytes[i + 2] ?? 0);
    out += b64[(n >> 18) & 63] + b64[(n >> 12) & 63] + (i + 1 < bytes.length ? b64[(n >> 6) & 63] : "=") + (i + 2 < bytes.length ? b64[n & 63] : "=");
  }
  return out;
}

/** deriveKey, as index.ts's, without node:crypto: for the workflow sandbox. */
export function deriveKeyPure(scheme: string, ...parts: string[]): string {
  const chunks = [scheme, ...parts].flatMap((p) => [encode(p), new Uint8Array([0])]);
  const all = new Uint8Array(chunks.reduce((n, c) => n + c.length, 0));
  let at = 0;
  for (const c of chunks) {
    all.set(c, at);
    at += c.length;
  }
  const url = base64(sha256(all)).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
  return `${scheme}_${url.slice(0, 42)}`;
}

/**
 * A call's arguments: each payload's encoding and data, JSON in its RFC
 * 8785 form (a model that writes the same arguments in another order asks
 * for the same call), anything else as base64.
 */
export function argsDigest(payloads: RawPayload[]): string {
  const parts: string[] = [];
  for (const p of payloads) {
    const enc = p.metadata?.encoding ? decode(p.metadata.encoding) : "";
    const bytes = p.data ?? new Uint8Array();
    let data = base64(bytes);
    if (enc === "json/plain") {
      try {
        data = canonicalize(JSON.parse(decode(bytes))) ?? data;
      } catch {
        // not JSON after all: its bytes, as written
      }
    }
    parts.push(enc, data);
  }
  return deriveKeyPure("args", ...parts);
}

/**
 * A call's intent: the declared fields of its one argument, a JSON object,
 * normalised. Any other arguments have no intent fields to read, which is
 * the workflow's mistake, not the model's: it throws.
 */
export function intentDigest(fields: readonly IntentField[], payloads: RawPayload[]): string {
  const enc = payloads[0]?.metadata?.encoding ? decode(payloads[0].metadata.encoding) : "";
  if (payloads.length !== 1 || enc !== "json/plain") {
    throw new TypeError(`intent fields name members of an activity's one argument, a JSON object; this call has ${payloads.length} arguments`);
  }
  const args: unknown = JSON.parse(decode(payloads[0].data ?? new Uint8Array()));
  if (args === null || typeof args !== "object" || Array.isArray(args)) {
    throw new TypeError("intent fields name members of a JSON object; this call's argument is no JSON object");
  }
  return deriveKeyPure("intent", intentCanonical(fields, args as Record<string, unknown>));
}

/** The key of a call keyed by its intent (tp4): the derivation the shared vectors check. */
export function intentCallKey(workflowId: string, lineage: string, turn: number, tool: string, intent: string, n: number, scope = ""): string {
  return callKey(workflowId, lineage, turn, tool, intent, n, scope, intentKeyScheme);
}

/** The key of a call (tp3): the derivation the shared vectors check. */
export function callKey(workflowId: string, lineage: string, turn: number, tool: string, args: string, n: number, scope = "", scheme = keyScheme): string {
  return deriveKeyPure(scheme, workflowId, lineage, String(turn), tool, args, String(n), ...(scope ? [scope] : []));
}

/** What lineageOf reads of a run: its start's facts. */
export interface RunStart {
  attempt: number;
  continuedRunId: string;
  cronSchedule: string;
  firstRunId: string;
  originalRunId: string;
}

/** The lineage header's content. */
export interface CarriedLineage {
  lineage?: string;
  turn?: number;
  by?: string;
}

/** A run's lineage and its turn of continue-as-new. */
export interface Lineage {
  id: string;
  turn: number;
}

/**
 * The lineage of a run, read only from its start (so every replay, reset
 * and worker computes the same): continued as new by its predecessor, or a
 * retry of such a run, the header's; the chain's first run or its retry,
 * the first run ID; a cron firing, or a run continued by a worker without
 * the interceptor, its own original run ID.
 */
export function lineageOf(run: RunStart, carried: CarriedLineage | undefined): Lineage {
  const has = Boolean(carried?.lineage);
  if (has && run.attempt === 1 && (carried?.by ?? "") === run.continuedRunId) {
    return { id: String(carried!.lineage), turn: Number(carried!.turn ?? 0) };
  }
  if (has && run.attempt > 1 && !run.cronSchedule) return { id: String(carried!.lineage), turn: Number(carried!.turn ?? 0) };
  if (!run.cronSchedule && (!run.continuedRunId || run.attempt > 1)) return { id: run.firstRunId, turn: 0 };
  return { id: run.originalRunId, turn: 0 };
}
