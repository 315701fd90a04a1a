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
// in a later request, from the saved messages that carry it.
//
// The key names the intended call, not its IDs (va2): the chat, the turn
// (the user message the run answers: the app's turnId, useChat's message
// ID, or else the digest of the conversation up to it), the tool, the
// call's arguments (RFC 8785) and their occurrence among the turn's calls
// of that tool with those arguments. A regenerate, the Retry button after
// an error, or a request made again without the assistant's message
// makes the model write the same call under a new toolCallId and a new
// approval: the same key, a replay. Another turn, other arguments, or
// one more identical call in the turn is another key. (va1, the chat,
// the approval's ID, the toolCallId and the tool's name, is kept for the
// calls in flight across the upgrade: keyScheme "va1".)
//
// A pending answer (the wait ended, the intent may have taken effect) must
// never reach the model, which would call again; nor the chat's saved
// messages, where it would stand as the call's result, so that sending
// them again runs nothing. The SDK hands a tool's error to both: an
// approved call runs before the first step, and streamText streams its
// error before any prepareStep. So the guard is this module's generateText
// and streamText, the SDK's own with it built in, and the tool runs only
// under them (or where the app says, with guarded: false, that it guards
// the run itself). streamText ends such a run as a finished response, not
// an error, whose call is still approved and without a result: useChat's
// own sendAutomaticallyWhen (lastAssistantMessageIsCompleteWithApprovalResponses)
// sends it again, and the call runs again under its key.

import type { Client as MCPClient } from "@modelcontextprotocol/sdk/client/index.js";
import {
  generateText as sdkGenerateText,
  jsonSchema,
  streamText as sdkStreamText,
  tool,
  type ModelMessage,
  type PrepareStepFunction,
  type StreamTextTransform,
  type Tool,
  type ToolExecutionOptions,
  type ToolSet,
} from "ai";
import {
  callArguments,
  callIntent,
  canonical,
  Client,
  DeadlineError,
  deriveKey,
  intentFieldsOf,
  type IntentField,
  NoDurableIdentityError,
  operationIntent,
  type OperationFields,
  occurrenceAt,
  ProblemError,
  type Result,
} from "./index.js";
import { callUntilAnswered, mcpIntentFields, mcpTools, resultText } from "./mcp.js";
export { mcpMetaKey } from "./mcp.js";
import { answerText, pendingText, refusalText, resume } from "./tooltext.js";

export { NoDurableIdentityError };

/** The scheme of a Vercel AI SDK tool call's key: the intended call by its intent fields (a ticket's customer, never its wording). */
export const keyScheme = "va3";

/** The intended call by its whole arguments, which a model rewords: the scheme before va3, for the calls in flight across the upgrade. */
export const argsKeyScheme = "va2";

/** The scheme of the keys before va2 (the approval and the toolCallId), for the calls in flight across the upgrade. */
export const legacyKeyScheme = "va1";

export type KeyScheme = typeof keyScheme | typeof argsKeyScheme | typeof legacyKeyScheme;

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

/** What names an intended call: its turn, the digest of its arguments, and its occurrence (from 1). */
export interface IntendedCall {
  turn: string;
  args: string;
  occurrence: number;
}

/**
 * The intended call that the call toolCallId of toolName is, from the
 * messages it runs with: its turn (turnId, or the digest of the messages
 * up to the last user message, in RFC 8785 form), the digest of its
 * arguments (RFC 8785, less the model-written idempotency_key of
 * idemflow's MCP tools: callArguments), and its occurrence among the calls of toolName
 * with those arguments in the turn's assistant messages, in their order.
 * undefined where the messages do not hold the call (it runs in the
 * response that wrote it), or hold no user message and no turnId is given.
 */
export function intendedCall(
  messages: ModelMessage[],
  toolCallId: string,
  toolName: string,
  turnId?: string,
  intent?: (args: Record<string, unknown>) => string,
): IntendedCall | undefined {
  let user = -1;
  for (let i = messages.length - 1; i >= 0 && user < 0; i--) if (messages[i].role === "user") user = i;
  if (user < 0 && !turnId) return undefined;
  const calls: { id: string; tool: string; args: string }[] = [];
  for (const m of messages.slice(user + 1)) {
    if (m.role !== "assistant" || typeof m.content === "string") continue;
    for (const p of m.content) {
      if (p.type !== "tool-call" || p.toolName !== toolName) continue;
      const input = (p.input ?? {}) as Record<string, unknown>;
      calls.push({ id: p.toolCallId, tool: p.toolName, args: intent ? intent(input) : callArguments(input) });
    }
  }
  const at = calls.findIndex((c) => c.id === toolCallId);
  if (at < 0) return undefined;
  return { turn: turnId ? turnId : deriveKey("turn", canonical(messages.slice(0, user + 1))), ...occurrenceAt(calls, at) };
}

/** How durableKey derives a key beyond the chat, the messages, the call and the tool. */
export interface KeyOptions {
  /** The caller's word that the provider never reuses a toolCallId; needed for a call run without approval. */
  callIdsUnique?: boolean;
  /** The turn's ID: the ID of the user message the request answers (useChat's), kept by a regenerate and an edit. */
  turnId?: string;
  /** va3 (default), or va2 or va1 for a call sent under it before an upgrade. */
  keyScheme?: KeyScheme;
  /** Under va3, what names a call beyond its turn: callIntent of the request it makes (its intent fields); default its whole arguments. */
  intent?: (args: Record<string, unknown>) => string;
}

/**
 * The key of the call toolCallId of toolName, made in chat chatId: the
 * intended call it is (see intendedCall), under va2. A call the messages
 * do not hold (run without approval, in the response that wrote it) gets
 * a key from its toolCallId only where the caller declares callIdsUnique
 * (the provider never reuses a toolCallId): it is durable only if the app
 * saved it, and two identical calls of one response would otherwise share
 * a key. It throws NoDurableIdentityError otherwise. With keyScheme "va1",
 * the key a call had before the upgrade: the approval it runs under and
 * its toolCallId.
 */
export function durableKey(chatId: string, messages: ModelMessage[], toolCallId: string, toolName: string, o: KeyOptions = {}): string {
  const scheme = o.keyScheme ?? keyScheme;
  if (scheme !== legacyKeyScheme) {
    const c = intendedCall(messages, toolCallId, toolName, o.turnId, scheme === keyScheme ? o.intent : undefined);
    if (c) return deriveKey(scheme, chatId, c.turn, toolName, c.args, String(c.occurrence));
  }
  const approval = approvalId(messages, toolCallId) ?? "";
  if (!approval && !o.callIdsUnique) {
    throw new NoDurableIdentityError(
      `${toolName}: call ${toolCallId} runs without an approval in the saved messages, so nothing durable tells it from a later turn's that reuses its ID (keep needsApproval, or declare callIdsUnique)`,
    );
  }
  return deriveKey(legacyKeyScheme, chatId, approval, toolCallId, toolName);
}

export interface IdemflowToolFields<I> extends OperationFields<I> {
  name: string;
  description: string;
  /** The arguments' schema (zod or the SDK's jsonSchema()), as tool() takes it. */
  inputSchema: any;
  /** The chat's ID (useChat's id): the same on every request of the chat. */
  chatId: string;
  /**
   * The turn's ID: the ID of the user message this request answers
   * (useChat's last user message's id), which a regenerate and an edited
   * message keep. Default: the digest of the conversation up to that
   * message, which a regenerate keeps and an edit does not, nor pruning
   * the history the app sends, nor an SDK upgrade that changes the
   * messages' form: give turnId where the app has it.
   */
  turnId?: string;
  /** "va2" or "va1" for a chat with a call sent before the upgrade to va3 (or va2) and still without its answer (docs/agents/vercel-ai.md). */
  keyScheme?: KeyScheme;
  /**
   * The operation's intent fields, as its declaration publishes them;
   * idemflow's own tools' are known by name or path. The key names the
   * request's intent fields, not its free text, and the request says so: a
   * regenerate whose model rewords the title gets the first ticket, a
   * replay naming what differed.
   */
  intent?: readonly IntentField[];
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
 * endOnPending ends the run before the model is asked again. streamText
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

function guard(options: any, onPending: (next?: PrepareStepFunction<any>) => PrepareStepFunction<any>): any {
  return { ...options, tools: arm(options.tools), prepareStep: onPending(options.prepareStep) };
}

/**
 * The SDK's generateText with the pending guard built in (stopOnPending,
 * and the idemflow tools armed): a run whose call's answer is pending
 * throws PendingRunError before the model is asked again, so the app saves
 * nothing of the request and sends the same messages again later.
 */
export const generateText: typeof sdkGenerateText = ((options: any) => sdkGenerateText(guard(options, stopOnPending))) as typeof sdkGenerateText;

/**
 * The SDK's streamText with the pending guard built in: a pending answer
 * never reaches the model (endOnPending) nor the stream (hidePending). The
 * response ends as a finished one, not an error, with the call approved
 * and without a result: useChat's sendAutomaticallyWhen
 * (lastAssistantMessageIsCompleteWithApprovalResponses) sends the chat
 * again, and so does an app that sends its saved messages again; the call
 * runs again under its key.
 */
export const streamText: typeof sdkStreamText = ((options: any) => {
  const own = options.experimental_transform;
  const transforms = [hidePending(), ...(own === undefined ? [] : Array.isArray(own) ? own : [own])];
  const pending = new AbortController();
  const abortSignal = options.abortSignal ? AbortSignal.any([options.abortSignal, pending.signal]) : pending.signal;
  return sdkStreamText({ ...guard(options, (next) => endOnPending(pending, next)), abortSignal, experimental_transform: transforms });
}) as typeof sdkStreamText;

/** The step's last message holds a pending answer. */
function pendingIn(messages: ModelMessage[]): string | undefined {
  const last = messages[messages.length - 1];
  if (last?.role !== "tool") return undefined;
  for (const p of last.content) {
    if (p.type === "tool-result" && p.output.type === "error-text" && p.output.value.startsWith(pendingMark)) return p.output.value;
  }
  return undefined;
}

const idleUsage = { inputTokens: { total: 0, noCache: 0, cacheRead: 0, cacheWrite: 0 }, outputTokens: { total: 0, text: 0, reasoning: 0 } };

/**
 * The model of the step after a pending answer: asked nothing, it ends the
 * run at once with no content, so that no model reads the pending answer.
 */
const idleModel = {
  specificationVersion: "v3" as const,
  provider: "idemflow",
  modelId: "pending",
  supportedUrls: {},
  doGenerate: async () => ({ content: [], finishReason: { unified: "stop" as const, raw: undefined }, usage: idleUsage, warnings: [] }),
  doStream: async () => ({
    stream: new ReadableStream({
      start(c) {
        c.enqueue({ type: "stream-start", warnings: [] });
        c.enqueue({ type: "finish", finishReason: { unified: "stop", raw: undefined }, usage: idleUsage });
        c.close();
      },
    }),
  }),
};

/**
 * A prepareStep for streamText that ends the run, before the model is
 * asked again, when a tool's answer is pending: it aborts run (the
 * controller whose signal is streamText's abortSignal), so the stream
 * ends with an abort part before the step starts, which useChat reads as
 * no error and no new step: the chat's last step is still the one whose
 * call is approved and without a result (hidePending keeps its error out),
 * and its sendAutomaticallyWhen sends the chat again. The step itself runs
 * a model that answers nothing, so nothing pending reaches a model. next,
 * if given, is the app's own prepareStep, run otherwise.
 */
export function endOnPending<T extends ToolSet>(run: AbortController, next?: PrepareStepFunction<T>): PrepareStepFunction<T> {
  return (options) => {
    const pending = pendingIn(options.messages);
    if (pending) {
      run.abort(new PendingRunError(pending));
      return { model: idleModel as any, activeTools: [] };
    }
    return next ? next(options) : undefined;
  };
}

/**
 * A prepareStep for generateText or streamText that stops the run, before
 * the model is asked again, when a tool's answer is pending: it throws
 * PendingRunError, so that the pending call never reaches the model as an
 * error, and the app saves nothing of this request. next, if given, is
 * the app's own prepareStep, run after the check.
 */
export function stopOnPending<T extends ToolSet>(next?: PrepareStepFunction<T>): PrepareStepFunction<T> {
  return (options) => {
    const pending = pendingIn(options.messages);
    if (pending) throw new PendingRunError(pending);
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
  const fields = f.intent ?? intentFieldsOf(f.name, typeof f.path === "string" ? f.path : undefined);
  // The request a call makes, as its arguments make it.
  const intent = (args: Record<string, unknown>) => callIntent(fields, f.body ? f.body(args as I) : args);
  const execute = async (input: I, options: ToolExecutionOptions): Promise<string> => {
    const key = durableKey(f.chatId, options.messages, options.toolCallId, f.name, { callIdsUnique: f.callIdsUnique, turnId: f.turnId, keyScheme: f.keyScheme, intent });
    const byIntent = fields.length > 0 && key.startsWith(keyScheme + "_");
    let r: Result;
    try {
      r = await client.do({ ...operationIntent(key, f, input), byIntent }, { deadlineMs: f.waitMs, signal: options.abortSignal });
    } catch (e) {
      if (e instanceof ProblemError) return refusalText(e, key);
      if (e instanceof DeadlineError) throw new PendingAnswerError(f.name, key);
      throw e;
    }
    return answerText(r);
  };
  return guardedTool(f.name, { description: f.description, inputSchema: f.inputSchema, needsApproval: f.needsApproval ?? true }, execute, f.guarded);
}

/**
 * A tool whose execute runs only under this module's generateText or
 * streamText (unless guarded is false, the app guarding the run itself):
 * nothing is sent under the SDK's own, which would hand a pending answer
 * to the model.
 */
function guardedTool<I>(name: string, fields: { description?: string; inputSchema: any; needsApproval: boolean }, execute: (input: I, options: ToolExecutionOptions) => Promise<string>, guarded?: boolean): Tool<I, string> {
  if (guarded === false) return tool<I, string>({ ...fields, execute } as any);
  const t = tool<I, string>({
    ...fields,
    execute: async () => {
      throw new Error(`${name}: run idemflow tools with generateText or streamText from @idemflow/client/ai, which keep a pending answer from the model; nothing was sent`);
    },
  } as any);
  (t as any)[guardedExecute] = execute;
  return t;
}

export interface IdemflowMcpToolsFields {
  /** The chat's ID (useChat's id): the same on every request of the chat. */
  chatId: string;
  /** The turn's ID, as idemflowTool takes it. */
  turnId?: string;
  /** The tools to take (default: every tool the server lists). */
  names?: string[];
  /** Default true, as idemflowTool's: the call runs in a later request, from saved messages that carry it. */
  needsApproval?: boolean;
  /** How long one call waits on its task (default 300 s) before it throws PendingAnswerError. */
  waitMs?: number;
  /** As idemflowTool's. */
  guarded?: boolean;
}

/**
 * The tools of idemflow's MCP server (idemflow mcp, through the official
 * SDK's Client, connected by the app), as Vercel AI SDK tools keyed as
 * idemflowTool keys its calls: each call sends, in _meta, the key
 * durableKey derives for it (va2), so the idempotency_key the model
 * writes decides nothing, and a regenerate or a request made again with
 * the saved messages is a replay. Each call asks for a task (MCP
 * 2025-11-25 tasks: client.experimental.tasks) and waits on it up to
 * waitMs; past it, PendingAnswerError, which the guard keeps from the
 * model. The model reads the tool's text: {http_status, replayed,
 * result}, or its words for a refusal.
 *
 * This stands in for @ai-sdk/mcp's createMCPClient().tools(), whose calls
 * send no _meta (its callTool sends the name and the arguments only).
 */
export async function idemflowMcpTools(mcp: MCPClient, f: IdemflowMcpToolsFields): Promise<ToolSet> {
  const out: ToolSet = {};
  for (const t of await mcpTools(mcp, f.names)) {
    const execute = async (input: Record<string, unknown>, options: ToolExecutionOptions): Promise<string> => {
      const fields = mcpIntentFields(t);
      const key = durableKey(f.chatId, options.messages, options.toolCallId, t.name, { turnId: f.turnId, intent: (a) => callIntent(fields, a) });
      const result = await callUntilAnswered(mcp, t.name, input, key, f.waitMs, options.abortSignal, fields.length > 0 && key.startsWith(keyScheme + "_"));
      if (result === undefined) throw new PendingAnswerError(t.name, key);
      return resultText(result);
    };
    out[t.name] = guardedTool(t.name, { description: t.description, inputSchema: jsonSchema(t.inputSchema as any), needsApproval: f.needsApproval ?? true }, execute, f.guarded);
  }
  return out;
}
