// The OpenAI Agents SDK for JavaScript (@openai/agents) integration, the
// same rule as Python's idemflow.openai_agents: a function tool whose key
// is derived from the SDK's own identity of the call, so that a run
// resumed from its saved RunState, which runs the call again, replays the
// first answer instead of taking effect twice.
//
// The SDK keeps a run's pending tool calls, with their IDs, only in a
// RunState, and a run has one to save only where it is interrupted: a tool
// that needs approval. So the tool needs approval by default, and
// runDurably saves the RunState there, and again with the decisions,
// before the call runs. A run that crashes mid call without one has
// nothing that kept the call: it starts again, the model writes the call
// again with new IDs, a new key and a second effect.
//
// The key names the intended call (oa2), as in Python: the conversation
// (the app's ID for it, the same on every run and resume; Python reads it
// from RunConfig.group_id, which the SDK does not hand a JavaScript tool),
// the turn (the user message the run answers: the number of user messages
// in the run's input and the last one's content, and the previous
// response's ID where the server keeps the conversation; or the app's
// turnId), the tool, the call's arguments (RFC 8785) and their occurrence
// among the run's calls of that tool with those arguments. runDurably
// reads all of it from the RunState it saved, and hands each call its
// parts: a run sent again with the history cut before the model's answer
// (a regenerate), or a turn killed before its RunState was saved and sent
// again, makes the model write the same call under new IDs, and it is the
// same key. A call that runs where runDurably planned nothing (no
// approval, or a run whose conversation the server keeps by
// conversationId, whose input holds only the new message) is keyed as
// before (oa1): the ID of the model's function-call item, the call's ID
// and the tool. A Chat Completions model gives its items no ID (the SDK's
// placeholder): the call ID alone then tells calls apart only when the
// provider never reuses one, which the tool is told with callIdsUnique.

import type { Client as MCPClient } from "@modelcontextprotocol/sdk/client/index.js";
import { AsyncLocalStorage } from "node:async_hooks";
import { RunState, tool, type Agent, type RunContext, type RunResult, type Runner, type RunToolApprovalItem } from "@openai/agents";
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
import { answerText, pendingText, refusalText, resume } from "./tooltext.js";

export { NoDurableIdentityError };

/**
 * The scheme of an OpenAI Agents SDK tool call's key, in every client: the
 * intended call by its intent fields (a ticket's customer, never its
 * wording), which runDurably plans from the saved RunState.
 */
export const keyScheme = "oa3";

/** The intended call by its whole arguments, which a model rewords: the release before oa3, for a RunState saved across the upgrade. */
export const argsKeyScheme = "oa2";

/** The scheme of a call runDurably planned nothing for (and of every call before oa2): the call's item and call IDs. */
export const callKeyScheme = "oa1";

export type KeyScheme = typeof keyScheme | typeof argsKeyScheme | typeof callKeyScheme;

/** What names an intended call beyond its conversation: its scheme, its turn, its tool, the digest of its intent or arguments, and its occurrence (from 1). */
export interface IntendedCall {
  scheme?: typeof keyScheme | typeof argsKeyScheme;
  turn: string;
  tool: string;
  args: string;
  occurrence: number;
}

/** A function call of a run, as the RunState keeps it. */
export interface RunCall {
  callId: string;
  name: string;
  arguments: string;
}

/**
 * The intended call of each function call of a run, by call ID: the turn
 * (turnId where the app gives one, else previousResponseId, the number of
 * user messages in input and the last one's content, in RFC 8785 form; a
 * string input is one user message), the tool, the call's intent and its
 * occurrence (from 1) among calls, the run's function calls in their
 * order, of that tool with that intent. Under oa3 the intent is the call's
 * intent fields (callIntent: intents[name], or idemflow's own tools' by
 * name), so a call reworded is the same call; under oa2, or for a tool
 * with none, its arguments (RFC 8785, less the model-written
 * idempotency_key of idemflow's MCP tools). Its key is
 * intendedCallKey(conversation, call).
 */
export function intendedCalls(
  input: string | unknown[],
  calls: RunCall[],
  previousResponseId?: string,
  turnId?: string,
  scheme: typeof keyScheme | typeof argsKeyScheme = keyScheme,
  intents: Readonly<Record<string, readonly IntentField[]>> = {},
): Map<string, IntendedCall> {
  let turn: string;
  if (turnId) {
    turn = deriveKey("turn", turnId);
  } else {
    const users =
      typeof input === "string"
        ? [input]
        : (input as { role?: string; type?: string; content?: unknown }[]).filter((i) => i && i.role === "user" && (i.type ?? "message") === "message").map((i) => i.content);
    turn = deriveKey("turn", previousResponseId ?? "", String(users.length), canonical(users.length ? users[users.length - 1] : null));
  }
  const named = (c: RunCall): string => {
    const fields = scheme === keyScheme ? (intents[c.name] ?? intentFieldsOf(c.name)) : [];
    if (fields.length > 0) {
      try {
        return callIntent(fields, JSON.parse(c.arguments || "{}"));
      } catch {
        // not JSON (the model's own mistake): named as written
      }
    }
    return rawCallArguments(c.arguments);
  };
  const run = calls.map((c) => ({ id: c.callId, tool: c.name, args: named(c) }));
  const out = new Map<string, IntendedCall>();
  run.forEach((c, at) => out.set(c.id, { scheme, turn, tool: c.tool, ...occurrenceAt(run, at) }));
  return out;
}

/**
 * A call's arguments in their RFC 8785 form, less a top-level
 * idempotency_key: idemflow's MCP tools take one the model writes, new each
 * time it writes the call, so it is no part of the intended call. Text that
 * is not JSON (the model's own mistake) as written.
 */
function rawCallArguments(raw: string): string {
  let v: unknown;
  try {
    v = JSON.parse(raw || "{}");
  } catch {
    return String(raw);
  }
  return callArguments(v);
}

/** The key of an intended call of conversation (oa3, or the scheme it was planned under). */
export function intendedCallKey(conversation: string, c: IntendedCall): string {
  return deriveKey(c.scheme ?? keyScheme, conversation, c.turn, c.tool, c.args, String(c.occurrence));
}

// The intended calls runDurably planned for the run it is running, by
// scheme and call ID: the tools it runs read them.
const planned = new AsyncLocalStorage<Record<string, Map<string, IntendedCall>>>();

/** The intended calls of the run a RunState holds, under each scheme, from its JSON; none where the server keeps the conversation by ID. */
function plan(state: RunState<any, any>, turnId: string | undefined, intents: Record<string, readonly IntentField[]>): Record<string, Map<string, IntendedCall>> {
  const j = state.toJSON() as any;
  if (j.conversationId && !turnId) return {};
  const calls: RunCall[] = (j.generatedItems ?? [])
    .filter((i: any) => i?.type === "tool_call_item" && i.rawItem?.type === "function_call")
    .map((i: any) => ({ callId: i.rawItem.callId, name: i.rawItem.name, arguments: i.rawItem.arguments }));
  return {
    [keyScheme]: intendedCalls(j.originalInput ?? [], calls, j.previousResponseId, turnId, keyScheme, intents),
    [argsKeyScheme]: intendedCalls(j.originalInput ?? [], calls, j.previousResponseId, turnId, argsKeyScheme),
  };
}

// The property idemflowFunctionTool sets on its tool: the operation's
// intent fields, which runDurably's plan reads from the agent's tools.
const intentOfTool = Symbol.for("idemflow.intent");

/** The intent fields of the agent's tools, by name: those its idemflowFunctionTools declare, and those the app gives. */
function intentsOf(agent: Agent<any, any>, given: Record<string, readonly IntentField[]> = {}): Record<string, readonly IntentField[]> {
  const out: Record<string, readonly IntentField[]> = {};
  for (const t of (agent as any).tools ?? []) {
    const fields = t?.[intentOfTool];
    if (Array.isArray(fields) && fields.length > 0) out[t.name] = fields;
  }
  return { ...out, ...given };
}

/** The item IDs the SDKs give a Chat Completions model's calls: no ID at all. */
const placeholderIds = new Set(["FAKE_ID", "__fake_id__"]);

/**
 * The oa1 key of one tool call: from the conversation, the model's
 * function-call item ID, the call's ID and the tool's name (the vectors in
 * clients/testdata/keys.json, shared with Python). It throws
 * NoDurableIdentityError when the conversation is empty, the call has no
 * ID, or its item has none and callIdsUnique was not given. A call
 * runDurably planned gets intendedCallKey instead.
 */
export function durableKey(conversation: string, toolCall: { id?: string; callId?: string } | undefined, toolName: string, callIdsUnique = false): string {
  if (!conversation) {
    throw new NoDurableIdentityError(`${toolName}: the run has no conversation ID, so no key can tell this conversation's calls from another's`);
  }
  const callId = toolCall?.callId;
  if (!callId) throw new NoDurableIdentityError(`${toolName}: the call has no ID, so no key can survive a resume`);
  let itemId = toolCall?.id ?? "";
  if (!itemId || placeholderIds.has(itemId)) {
    if (!callIdsUnique) {
      throw new NoDurableIdentityError(
        `${toolName}: the model's function-call item has no ID (a Chat Completions model), so call ${callId} alone would name this call, and a provider that numbers calls per response brings it back in a later turn; pass callIdsUnique only if the provider never reuses a call ID (OpenAI's does not)`,
      );
    }
    itemId = "";
  }
  return deriveKey(callKeyScheme, conversation, itemId, callId, toolName);
}

export interface IdemflowFunctionToolFields<I> extends OperationFields<I> {
  name: string;
  description: string;
  /** The arguments' schema (zod), as tool() takes it. */
  parameters: any;
  /** The conversation's ID: the same on every run and resume of it. */
  conversation: string;
  /**
   * Default true: the run is interrupted before every call, so that the
   * app saves the RunState, with the call's IDs, before the call can take
   * effect (runDurably). false: a run killed mid call re-asks the model,
   * and the new call it writes is a second effect.
   */
  needsApproval?: boolean;
  /** The caller's word that the provider never reuses a call ID (for a Chat Completions model). */
  callIdsUnique?: boolean;
  /** How long one call waits for its final answer (default 300 s) before the run fails with DeadlineError. */
  waitMs?: number;
  /** oa3 (default), or oa2 or oa1 for a RunState saved across an upgrade (docs/agents/openai-agents-js.md). */
  keyScheme?: KeyScheme;
  /**
   * The operation's intent fields, as its declaration publishes them;
   * idemflow's own tools' are known by name or path. runDurably keys a call
   * by them (oa3), and the request says so: a turn sent again whose model
   * rewords the title gets the first ticket, a replay naming what differed.
   */
  intent?: readonly IntentField[];
}

/**
 * idemflowFunctionTool is a function tool that runs one of idemflow's
 * operations (a ticket, an order, a declared operation, an HTTP tool)
 * exactly once per tool call. The model reads JSON: {http_status,
 * replayed, result}, or for a final refusal {http_status, replayed, error,
 * problem, body, key}. A final answer that does not come within waitMs
 * fails the run (the tool's errors are not the model's to read: an
 * answer still pending may have taken effect); resume the run from its
 * saved RunState, and the call gets its answer under the same key.
 */
export function idemflowFunctionTool<I = any>(client: Client, f: IdemflowFunctionToolFields<I>) {
  const fields = f.intent ?? intentFieldsOf(f.name, typeof f.path === "string" ? f.path : undefined);
  const made = tool({
    name: f.name,
    description: f.description,
    parameters: f.parameters,
    needsApproval: f.needsApproval ?? true,
    // null: an error fails the run instead of reaching the model, whose
    // retry would be a new call, a new key and a second effect.
    errorFunction: null,
    execute: async (input: any, _context?: RunContext<unknown>, details?: { toolCall?: { id?: string; callId?: string }; signal?: AbortSignal }) => {
      const key = callKey(f.conversation, details?.toolCall, f.name, f.callIdsUnique, f.keyScheme);
      const byIntent = fields.length > 0 && key.startsWith(keyScheme + "_");
      let r: Result;
      try {
        r = await client.do({ ...operationIntent(key, f, input), byIntent }, { deadlineMs: f.waitMs, signal: details?.signal });
      } catch (e) {
        // A final refusal is the model's to read, not a crash of the run.
        if (e instanceof ProblemError) return refusalText(e, key);
        if (e instanceof DeadlineError) {
          throw new DeadlineError(pendingText(f.name, key, resume.openaiAgents));
        }
        throw e;
      }
      return answerText(r);
    },
  } as any);
  (made as any)[intentOfTool] = fields;
  return made;
}

export interface IdemflowMcpFunctionToolsFields {
  /** The conversation's ID: the same on every run and resume of it. */
  conversation: string;
  /** The tools to take (default: every tool the server lists). */
  names?: string[];
  /** Default true, as idemflowFunctionTool's: runDurably saves the call's IDs before it runs. */
  needsApproval?: boolean;
  /** As idemflowFunctionTool's. */
  callIdsUnique?: boolean;
  /** How long one call waits on its task (default 300 s) before the run fails with DeadlineError. */
  waitMs?: number;
  /** As idemflowFunctionTool's. */
  keyScheme?: KeyScheme;
}

/**
 * The tools of idemflow's MCP server (idemflow mcp, through the official
 * SDK's Client, connected by the app) as function tools keyed as
 * idemflowFunctionTool keys its calls: each call sends, in _meta, the key
 * of the intended call runDurably planned for it (oa2), or else its IDs'
 * (oa1), so the idempotency_key the model writes decides nothing. Each
 * call asks for a task and waits on it up to waitMs; past it the run fails
 * with DeadlineError, never an error the model reads: resume it from its
 * saved RunState.
 *
 * This stands in for the SDK's MCPServerStdio and MCPServerStreamableHttp,
 * whose toolMetaResolver is handed the run's context and the arguments
 * but not the call (its ID), so it cannot tell two calls apart.
 */
export async function idemflowMcpFunctionTools(mcp: MCPClient, f: IdemflowMcpFunctionToolsFields) {
  return (await mcpTools(mcp, f.names)).map((t) =>
    tool({
      name: t.name,
      description: t.description ?? "",
      parameters: { ...t.inputSchema, type: "object", properties: (t.inputSchema.properties as any) ?? {}, required: (t.inputSchema.required as any) ?? [], additionalProperties: true } as any,
      strict: false,
      needsApproval: f.needsApproval ?? true,
      // null: an error fails the run instead of reaching the model.
      errorFunction: null,
      execute: async (input: any, _context?: RunContext<unknown>, details?: { toolCall?: { id?: string; callId?: string }; signal?: AbortSignal }) => {
        const key = callKey(f.conversation, details?.toolCall, t.name, f.callIdsUnique, f.keyScheme);
        const byIntent = mcpIntentFields(t).length > 0 && key.startsWith(keyScheme + "_");
        const result = await callUntilAnswered(mcp, t.name, typeof input === "string" ? JSON.parse(input || "{}") : input, key, f.waitMs, details?.signal, byIntent);
        if (result === undefined) throw new DeadlineError(pendingText(t.name, key, resume.openaiAgents));
        return resultText(result);
      },
    } as any),
  );
}

/** The key of one call: the intended call runDurably planned for it (oa3, or oa2 where asked), or else its IDs' (oa1). */
function callKey(conversation: string, toolCall: { id?: string; callId?: string } | undefined, name: string, callIdsUnique?: boolean, scheme: KeyScheme = keyScheme): string {
  const callId = toolCall?.callId;
  const intended = scheme === callKeyScheme || !callId ? undefined : planned.getStore()?.[scheme]?.get(callId);
  return intended && conversation ? intendedCallKey(conversation, intended) : durableKey(conversation, toolCall, name, callIdsUnique);
}

export interface RunDurablyOptions {
  /** The saved RunState, or undefined for a run never started. */
  load: () => Promise<string | undefined>;
  /** Saves the RunState; durable before it returns. */
  save: (state: string) => Promise<void>;
  /** Decides each interruption: true approves, false rejects (default: approve every call). */
  approve?: (item: RunToolApprovalItem) => Promise<boolean>;
  context?: unknown;
  /**
   * The app's ID of the user message the run answers, where it has one (a
   * chat UI's message ID): the same on every run of that turn, which the
   * key then names instead of the input's user messages. An app that sends
   * each turn alone (no history, session or previous response) needs it,
   * or two turns in the same words are one intent.
   */
  turnId?: string;
  /** The intent fields of the app's other tools, by tool name (a team's operation over MCP); idemflowFunctionTool's and idemflow's own are known. */
  intents?: Record<string, readonly IntentField[]>;
}

// The member runDurably adds to the RunState JSON it saves: the turn whose
// run saved it. The SDK's schema keeps its own members and drops the rest.
const runMember = "idemflow";

/**
 * What names the turn a runDurably call runs: the app's turnId, or else the
 * whole input it was sent (RFC 8785). Stricter than the key's turn on
 * purpose: a state is resumed only by the very turn that saved it, and a
 * turn taken for a new one is still keyed as the same intended call.
 */
function runTurn(input: string | unknown[], turnId?: string): string {
  return turnId ? deriveKey("run", turnId) : deriveKey("run", "", canonical(input));
}

function dump(state: RunState<any, any>, turn: string): string {
  return JSON.stringify({ ...(state.toJSON() as object), [runMember]: { turn } });
}

/** Whether the state saved is the run of this turn. A state saved before runDurably marked its turn is compared by the input it holds. */
function answers(saved: string, turn: string): boolean {
  let j: any;
  try {
    j = JSON.parse(saved);
  } catch {
    return true; // not ours to judge: the SDK says what is wrong with it
  }
  const mark = j?.[runMember];
  if (mark && typeof mark === "object") return mark.turn === turn;
  return j?.originalInput !== undefined && runTurn(j.originalInput) === turn;
}

/**
 * Runs agent on input to its end, or resumes the run load() returns,
 * saving its RunState wherever the run is interrupted, and again once
 * approve has decided, before any call runs. A process killed at any point
 * runs this again: the saved state's calls run again under the keys they
 * had, and replay: each under the key of the intended call it is
 * (intendedCalls), planned from the saved state.
 *
 * A saved state is resumed only by the turn that saved it: the same input
 * (or the same turnId). Any other turn (one more user message, even in the
 * same words, or another turnId) is a new run from input, whatever load()
 * returns, so one store per conversation serves every turn of it.
 */
export async function runDurably(runner: Runner, agent: Agent<any, any>, input: string | any[], o: RunDurablyOptions): Promise<RunResult<any, any>> {
  const turn = runTurn(input, o.turnId);
  const saved = await o.load();
  let result: RunResult<any, any>;
  if (saved !== undefined && answers(saved, turn)) {
    const state = await RunState.fromString(agent, saved);
    result = await planned.run(plan(state, o.turnId, intentsOf(agent, o.intents)), () => runner.run(agent, state));
  } else {
    // Nothing saved, or a state saved by another turn's run: this turn is a
    // run of its own. Resumed instead, the old run would answer it, and its
    // calls would never be made.
    result = await runner.run(agent, input, { context: o.context });
  }
  while (result.interruptions.length > 0) {
    const state = result.state;
    await o.save(dump(state, turn)); // the calls, with their IDs, before a decision
    for (const item of result.interruptions) {
      if (!o.approve || (await o.approve(item))) state.approve(item);
      else state.reject(item);
    }
    await o.save(dump(state, turn)); // the decisions, before any call runs
    result = await planned.run(plan(state, o.turnId, intentsOf(agent, o.intents)), () => runner.run(agent, state));
  }
  return result;
}
