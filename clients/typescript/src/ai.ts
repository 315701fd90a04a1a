// The Vercel AI SDK (npm ai) integration: a tool whose idempotency key is
// derived from the SDK's own durable identity of the call, so that a
// request the app makes again with the chat's saved messages (after a
// crash, a deploy, a client's retry) replays the first answer instead of
// taking effect twice.
//
// The SDK hands execute the call's toolCallId and the messages, and keeps
// nothing itself: the app saves the chat's messages, usually once a
// response is done. A call made in the same response that wrote it is
// durable nowhere: a server killed mid execute loses it, and the model,
// asked again, writes a new call with a new ID. So the tool needs approval
// by default (the SDK's needsApproval): the response ends with the call
// and its approval request, the app saves the messages, and the call runs
// in a later request, from the saved messages that carry it. That request
// names the call by its approval's ID, which the SDK made at random for
// this call and which a later turn that reuses the toolCallId (call_0)
// does not share; the key is the chat, the approval's ID, the toolCallId
// and the tool's name.
//
// A pending answer (the wait ended, the intent may have taken effect) must
// never reach the model, which would call again under a new ID, a new
// approval and a new key; nor the chat's saved messages, where it would
// stand as the call's result, so that sending them again runs nothing. The
// SDK hands a tool's error to both: an approved call runs before the
// first step, and streamText streams its error before any prepareStep. So
// the guard is this module's generateText and streamText, the SDK's own
// with it built in, and the tool runs only under them (or where the app
// says, with guarded: false, that it guards the run itself).

import {
  generateText as sdkGenerateText,
  streamText as sdkStreamText,
  tool,
  type ModelMessage,
  type PrepareStepFunction,
  type StreamTextTransform,
  type Tool,
  type ToolExecutionOptions,
  type ToolSet,
} from "ai";
import { Client, DeadlineError, deriveKey, NoDurableIdentityError, ProblemError, type Result } from "./index.js";
import { answerText, pendingText, refusalText, resume } from "./tooltext.js";

export { NoDurableIdentityError };

/** The scheme of a Vercel AI SDK tool call's key. */
export const keyScheme = "va1";

/** What starts the text of the error a pending call throws: stopOnPending looks for it. */
export const pendingMark = "idemflow: pending:";

/**
 * The ID of the approval under which the call toolCallId runs: the
 * approval response in the last message (the tool message the app sends
 * with a decision) whose request names the call, as the SDK itself picks
 * the calls it runs. undefined where the call runs without one.
 */
export function approvalId(messages: ModelMessage[], toolCallId: string): string | undefined {
  const last = messages[messages.length - 1];
  if (!last || last.role !== "tool") return undefined;
  const requests = new Map<string, string>();
  for (const m of messages) {
    if (m.role !== "assistant" || typeof m.content === "string") continue;
    for (const p of m.content) if (p.type === "tool-approval-request") requests.set(p.approvalId, p.toolCallId);
  }
  for (const p of last.content) {
    if (p.type === "tool-approval-response" && requests.get(p.approvalId) === toolCallId) return p.approvalId;
  }
  return undefined;
}

/**
 * The key of the call toolCallId of toolName, made in chat chatId: from
 * the approval it runs under (see approvalId). Without one, only where the
 * caller declares callIdsUnique (the provider never reuses a toolCallId):
 * the toolCallId then names the call, though it is durable only if the
 * app saved it. It throws NoDurableIdentityError otherwise: a key from
 * the toolCallId alone would answer a later turn that reuses call_0 with
 * this call's replay.
 */
export function durableKey(chatId: string, messages: ModelMessage[], toolCallId: string, toolName: string, callIdsUnique = false): string {
  const approval = approvalId(messages, toolCallId) ?? "";
  if (!approval && !callIdsUnique) {
    throw new NoDurableIdentityError(
      `${toolName}: call ${toolCallId} runs without an approval in the saved messages, so nothing durable tells it from a later turn's that reuses its ID (keep needsApproval, or declare callIdsUnique)`,
    );
  }
  return deriveKey(keyScheme, chatId, approval, toolCallId, toolName);
}

export interface IdemflowToolFields<I> {
  name: string;
  description: string;
  /** The arguments' schema (zod or the SDK's jsonSchema()), as tool() takes it. */
  inputSchema: any;
  /** The operation's path: /v1/tickets, /v1/tools/refund_create, or one built from the arguments. */
  path: string | ((input: I) => string);
  /** The body sent (default: the arguments). */
  body?: (input: I) => unknown;
  /** The chat's ID (useChat's id): the same on every request of the chat. */
  chatId: string;
  /**
   * Default true: the call runs only in a later request, from saved
   * messages that carry it (see above). false runs it in the response that
   * wrote it: a server killed mid call then loses it, the model writes it
   * again under a new ID, and the effect happens twice.
   */
  needsApproval?: boolean;
  /** The caller's word that the provider never reuses a toolCallId; needed with needsApproval false. */
  callIdsUnique?: boolean;
  /** How long one call waits for its final answer (default 300 s) before it throws PendingAnswerError. */
  waitMs?: number;
  /**
   * Default true: the tool runs only under this module's generateText or
   * streamText, which keep a pending answer from the model and from the
   * saved messages; under the SDK's own it refuses before anything is
   * sent. false: the app guards the run itself (stopOnPending as
   * prepareStep, hidePending as a streamText transform).
   */
  guarded?: boolean;
}

export type { ToolAnswer } from "./tooltext.js";

/**
 * The call's final answer did not come within waitMs: the intent may have
 * taken effect. The SDK hands a tool's error to the model, whose retry
 * would be a new call, a new key and a second effect; stopOnPending stops
 * the run instead. Send the same saved messages again later: the call
 * runs again under its key and gets its answer.
 */
export class PendingAnswerError extends Error {
  constructor(
    readonly tool: string,
    readonly key: string,
  ) {
    super(`${pendingMark} ${pendingText(tool, key, resume.ai)}`);
  }
}

/** Thrown by stopOnPending: the run stopped where a call's answer is pending; nothing reached the model. */
export class PendingRunError extends Error {}

function isPending(e: unknown): boolean {
  return e instanceof PendingAnswerError || (e instanceof Error && e.message.startsWith(pendingMark)) || (typeof e === "string" && e.startsWith(pendingMark));
}

/**
 * A streamText transform that keeps a pending answer out of the stream:
 * the call's error part is dropped, so neither the UI stream nor the
 * messages the app saves from it carry a result for the call, and sending
 * them again runs it again under its key. It does not end the stream
 * (the SDK adds the next step's stream to it, and fails on a closed one):
 * stopOnPending ends the run before the model is asked again. streamText
 * below installs both; hidePending is exported for an app that builds its
 * own guard (guarded: false).
 */
export function hidePending<T extends ToolSet>(): StreamTextTransform<T> {
  return () =>
    new TransformStream({
      transform(part, controller) {
        if (part.type === "tool-error" && isPending(part.error)) return;
        controller.enqueue(part);
      },
    });
}

/** Where idemflowTool keeps the execute it runs under the guard. */
const guardedExecute = Symbol("idemflow.guardedExecute");

/** tools with every idemflow tool's execute armed: only the guarded generateText and streamText call this. */
function arm<T extends ToolSet | undefined>(tools: T): T {
  if (!tools) return tools;
  return Object.fromEntries(Object.entries(tools).map(([name, t]) => [name, (t as any)[guardedExecute] ? { ...t, execute: (t as any)[guardedExecute] } : t])) as T;
}

function guard(options: any): any {
  return { ...options, tools: arm(options.tools), prepareStep: stopOnPending(options.prepareStep) };
}

/**
 * The SDK's generateText with the pending guard built in (stopOnPending,
 * and the idemflow tools armed): a run whose call's answer is pending
 * throws PendingRunError before the model is asked again, so the app saves
 * nothing of the request and sends the same messages again later.
 */
export const generateText: typeof sdkGenerateText = ((options: any) => sdkGenerateText(guard(options))) as typeof sdkGenerateText;

/**
 * The SDK's streamText with the pending guard built in: a pending answer
 * never reaches the model (stopOnPending) nor the stream (hidePending), so
 * a chat continued as useChat does keeps the call without a result, and
 * runs it again, under its key, when its saved messages are sent again.
 */
export const streamText: typeof sdkStreamText = ((options: any) => {
  const own = options.experimental_transform;
  const transforms = [hidePending(), ...(own === undefined ? [] : Array.isArray(own) ? own : [own])];
  return sdkStreamText({ ...guard(options), experimental_transform: transforms });
}) as typeof sdkStreamText;

/**
 * A prepareStep for generateText or streamText that stops the run, before
 * the model is asked again, when a tool's answer is pending: it throws
 * PendingRunError, so that the pending call never reaches the model as an
 * error, and the app saves nothing of this request. next, if given, is
 * the app's own prepareStep, run after the check.
 */
export function stopOnPending<T extends ToolSet>(next?: PrepareStepFunction<T>): PrepareStepFunction<T> {
  return (options) => {
    const last = options.messages[options.messages.length - 1];
    if (last?.role === "tool") {
      for (const p of last.content) {
        if (p.type === "tool-result" && p.output.type === "error-text" && p.output.value.startsWith(pendingMark)) {
          throw new PendingRunError(p.output.value);
        }
      }
    }
    return next ? next(options) : undefined;
  };
}

/**
 * idemflowTool is a Vercel AI SDK tool that runs one of idemflow's
 * operations (a ticket, an order, a declared operation, an HTTP tool)
 * exactly once per tool call. The model reads JSON: {http_status,
 * replayed, result}, or for a final refusal {http_status, replayed,
 * error, problem, body, key}. Run it with this module's generateText or
 * streamText (see guarded).
 */
export function idemflowTool<I = any>(client: Client, f: IdemflowToolFields<I>): Tool<I, string> {
  const execute = async (input: I, options: ToolExecutionOptions): Promise<string> => {
    const key = durableKey(f.chatId, options.messages, options.toolCallId, f.name, f.callIdsUnique);
    const path = typeof f.path === "function" ? f.path(input) : f.path;
    let r: Result;
    try {
      r = await client.do({ key, method: "POST", path, body: f.body ? f.body(input) : input }, { deadlineMs: f.waitMs, signal: options.abortSignal });
    } catch (e) {
      if (e instanceof ProblemError) return refusalText(e, key);
      if (e instanceof DeadlineError) throw new PendingAnswerError(f.name, key);
      throw e;
    }
    return answerText(r);
  };
  const fields = { description: f.description, inputSchema: f.inputSchema, needsApproval: f.needsApproval ?? true };
  if (f.guarded === false) return tool<I, string>({ ...fields, execute } as any);
  const t = tool<I, string>({
    ...fields,
    // Nothing is sent under the SDK's own generateText or streamText,
    // which would hand a pending answer to the model.
    execute: async () => {
      throw new Error(`${f.name}: run idemflow tools with generateText or streamText from @idemflow/client/ai, which keep a pending answer from the model; nothing was sent`);
    },
  } as any);
  (t as any)[guardedExecute] = execute;
  return t;
}
