// Mastra (npm @mastra/core 1.x): a tool definition whose idempotency key
// is derived from Mastra's own durable identity of the call, and the run
// that keeps that identity across a crash.
//
// What Mastra keeps, read in @mastra/core 1.71: an agent's run has a
// runId, and each call the model writes has a toolCallId. A tool that
// needs approval (requireApproval) suspends the run before it executes:
// Mastra writes a snapshot of the run to its storage, and the app resumes
// it with agent.approveToolCall({ runId, toolCallId }). The snapshot stays
// at the approval until the resumed run finishes: a process killed while
// the approved call runs is approved again with the same runId and
// toolCallId, and the call runs again with both, which its tool reads
// from its context (context.runId, context.agent.toolCallId). A call run
// without approval, in the stream that wrote it, is durable nowhere: a
// process killed mid call loses it, and the model, asked again, writes a
// new call with a new ID under a new runId.
//
// So the tool needs approval. runDurably is the app side: it saves the
// run's runId and the call's toolCallId to a file before it approves, and
// on the next start approves that call again.
//
// The key names the intended call (ms2) where the app names the turn:
// runDurably's conversation and turnId (the ID of the user message the run
// answers, which a chat keeps: the same when the turn is sent again), the
// tool, the call's arguments (RFC 8785) and their occurrence among the
// run's calls of that tool with those arguments, which runDurably reads
// from the stream's tool-call chunks and saves with the call. A turn sent
// again (after a crash before anything was saved, or a regenerate) is a
// new run whose model writes the same call under a new toolCallId: the
// same key. Mastra hands a tool no durable name for the turn itself (its
// messages carry a new createdAt on every send), so without a turnId the
// key is the runId, the toolCallId and the tool's id (ms1): a later turn
// is another run, even when its model reuses a toolCallId (call_0), and a
// turn sent again is another run too.
//
// This module does not import Mastra: idemflowTool returns the fields for
// Mastra's createTool, and runDurably takes the agent as it is.

import { AsyncLocalStorage } from "node:async_hooks";
import { readFile, rm } from "node:fs/promises";
import type { Client as MCPClient } from "@modelcontextprotocol/sdk/client/index.js";
import {
  callArguments,
  callIntent,
  Client,
  deriveKey,
  intentFieldsOf,
  type IntentField,
  NoDurableIdentityError,
  operationIntent,
  type OperationFields,
  occurrenceAt,
  ProblemError,
  writeDurably,
  type Result,
} from "./index.js";
import { callUntilAnswered, mcpIntentFields, mcpTools, resultText } from "./mcp.js";
import { answerText, refusalText } from "./tooltext.js";

export { NoDurableIdentityError };

/** The scheme of a Mastra tool call's key where runDurably has the turn: the intended call, named by its intent fields (a ticket's customer, never its wording). */
export const keyScheme = "ms3";

/** The intended call named by its whole arguments, which a model rewords: the scheme before ms3, for a run saved across the upgrade. */
export const argsKeyScheme = "ms2";

/** The scheme of a call without a turn (and of every call before ms2): the run and the call's IDs. */
export const runKeyScheme = "ms1";

/** The ms1 key of the call toolCallId of tool toolId in the agent run runId. */
export function mastraKey(runId: string, toolCallId: string, toolId: string): string {
  return deriveKey(runKeyScheme, runId, toolCallId, toolId);
}

/** A tool call of a run, as its stream's tool-call chunk gives it. */
export interface RunCall {
  toolCallId: string;
  toolName: string;
  args: unknown;
}

/**
 * The ms3 key of each call of a run of turn turnId in conversation, by
 * toolCallId: the conversation, derive("turn", turnId), the tool, the
 * digest of the call's intent (its tool's intent fields: intents[tool], or
 * idemflow's own tool's; under ms2, or for a tool without them, its
 * arguments in RFC 8785 form, less the model-written idempotency_key of
 * idemflow's MCP tools) and its occurrence (from 1) among calls, the run's
 * tool calls in their order, of that tool with that intent.
 */
export function intendedCallKeys(
  conversation: string,
  turnId: string,
  calls: RunCall[],
  scheme: typeof keyScheme | typeof argsKeyScheme = keyScheme,
  intents: Readonly<Record<string, readonly IntentField[]>> = {},
): Map<string, string> {
  const turn = deriveKey("turn", turnId);
  const named = (c: RunCall) => (scheme === keyScheme ? callIntent(intents[c.toolName] ?? intentFieldsOf(c.toolName), c.args ?? {}) : callArguments(c.args ?? {}));
  const run = calls.map((c) => ({ tool: c.toolName, args: named(c) }));
  const keys = new Map<string, string>();
  calls.forEach((c, at) => {
    const { args, occurrence } = occurrenceAt(run, at);
    keys.set(c.toolCallId, deriveKey(scheme, conversation, turn, c.toolName, args, String(occurrence)));
  });
  return keys;
}

// The keys runDurably planned for the calls of the run it drives: its
// tools read them.
const planned = new AsyncLocalStorage<Map<string, string>>();

/** What a Mastra tool's execute is handed beside its input: the parts this module reads. */
export interface ToolExecutionContext {
  runId?: string;
  agent?: { toolCallId?: string };
  abortSignal?: AbortSignal;
}

export type { ToolAnswer } from "./tooltext.js";

export interface IdemflowToolFields<I> extends OperationFields<I> {
  /** The tool's id, which the model calls it by; part of the key. */
  id: string;
  description: string;
  /** The input's schema (a zod schema, as Mastra takes it). */
  inputSchema: unknown;
}

/**
 * idemflowTool gives the fields of a Mastra tool that runs one of
 * idemflow's operations (a ticket, an order, a declared operation, an
 * HTTP tool) once per intended call: pass them to Mastra's createTool.
 * The model reads JSON: {http_status, replayed, result}, or for a final
 * refusal {http_status, replayed, error, problem, body, key}.
 *
 * The tool needs approval (requireApproval), so that the call runs from a
 * suspended run Mastra has stored; run the agent with runDurably. Then it
 * waits for its final answer however long it takes, retrying under its
 * key: Mastra hands the model whatever a tool returns or throws, and a
 * model told that a call is pending writes it again, under a new ID.
 */
export function idemflowTool<I = any>(client: Client, f: IdemflowToolFields<I>) {
  const fields = intentFieldsOf(f.id, typeof f.path === "string" ? f.path : undefined);
  return {
    id: f.id,
    description: f.description,
    inputSchema: f.inputSchema as any,
    requireApproval: true,
    execute: async (input: I, context?: ToolExecutionContext): Promise<string> => {
      const key = callKey(f.id, context);
      // A key named by the tool's intent fields (ms3): idemflow compares on them.
      const byIntent = fields.length > 0 && key.startsWith(keyScheme + "_");
      let r: Result;
      try {
        r = await client.do({ ...operationIntent(key, f, input), byIntent }, { deadlineMs: Infinity, signal: context?.abortSignal });
      } catch (e) {
        // With no deadline, only an abort ends the wait otherwise: the run
        // is ending, and the call is approved again under the same key.
        if (e instanceof ProblemError) return refusalText(e, key);
        throw e;
      }
      return answerText(r);
    },
  };
}

export interface IdemflowMcpToolsFields {
  /** The tools to take (default: every tool the server lists). */
  names?: string[];
  /**
   * The input schema Mastra is given, from the tool's JSON Schema (Mastra
   * takes a zod schema: zod 4's z.fromJSONSchema makes one).
   */
  inputSchema: (jsonSchema: Record<string, unknown>) => unknown;
}

/**
 * The tools of idemflow's MCP server (idemflow mcp, through the official
 * SDK's Client, connected by the app), as fields for Mastra's createTool,
 * keyed as idemflowTool keys its calls: each needs approval, and each call
 * sends, in _meta, the key of the intended call runDurably planned for it
 * (ms3), or else its runId's and toolCallId's (ms1), so the
 * idempotency_key the model writes decides nothing. Each call asks for a
 * task and waits on it however long it takes, as idemflowTool waits.
 *
 * This stands in for Mastra's MCPClient (@mastra/mcp), whose tools' calls
 * the app cannot add a _meta to.
 */
export async function idemflowMcpTools(mcp: MCPClient, f: IdemflowMcpToolsFields) {
  return (await mcpTools(mcp, f.names)).map((t) => ({
    id: t.name,
    description: t.description ?? "",
    inputSchema: f.inputSchema(t.inputSchema) as any,
    requireApproval: true,
    execute: async (input: Record<string, unknown>, context?: ToolExecutionContext): Promise<string> => {
      const key = callKey(t.name, context);
      // No deadline: Mastra hands the model whatever a tool returns or
      // throws; only an abort ends the wait, and the call is approved
      // again under the same key.
      const byIntent = (intentFieldsOf(t.name).length > 0 || mcpIntentFields(t).length > 0) && key.startsWith(keyScheme + "_");
      const result = await callUntilAnswered(mcp, t.name, input, key, Infinity, context?.abortSignal, byIntent);
      if (result === undefined) throw new Error(`${t.name}: the run was aborted while the call under key ${key} was pending`);
      return resultText(result);
    },
  }));
}

/** The key of the call context runs: runDurably's plan (ms3), or its IDs (ms1). */
function callKey(tool: string, context?: ToolExecutionContext): string {
  const runId = context?.runId;
  const toolCallId = context?.agent?.toolCallId;
  if (!runId || !toolCallId) {
    throw new NoDurableIdentityError(`${tool}: called outside an agent's run (no runId or toolCallId): no key could outlive a crash; nothing was sent`);
  }
  return planned.getStore()?.get(toolCallId) ?? mastraKey(runId, toolCallId, tool);
}

/** The parts of a Mastra agent runDurably uses. */
export interface DurableAgent {
  stream(message: any, options?: any): Promise<AgentStream>;
  approveToolCall(options: { runId: string; toolCallId: string }): Promise<AgentStream>;
}

/** The parts of a Mastra agent's stream runDurably reads. */
export interface AgentStream {
  runId: string;
  fullStream: AsyncIterable<{ type: string; payload?: any }>;
  text: PromiseLike<string>;
}

/** A call waiting at its approval: what runDurably saves before it approves, with the run's calls so far where it has a turn. */
export interface Stopped {
  runId: string;
  toolCallId: string;
  calls?: RunCall[];
}

/** runDurably's options. */
export interface RunOptions {
  /** Passed to agent.stream. */
  streamOptions?: unknown;
  /** Called with every chunk of every stream of the run, as it comes. */
  onChunk?: (chunk: { type: string; payload?: any }) => void;
  /** The conversation's ID (a memory thread's): with turnId, the calls are keyed as intended calls (ms3). */
  conversation?: string;
  /** ms3 (default), or ms2 (the whole arguments) for a run saved across the upgrade. */
  keyScheme?: typeof keyScheme | typeof argsKeyScheme;
  /** The intent fields of the app's tools, by tool id (a team's operation); idemflow's own are known. */
  intents?: Record<string, readonly IntentField[]>;
  /**
   * The ID of the user message the run answers, which the app keeps and
   * sends again with the turn (a chat UI's message ID): with conversation,
   * a turn sent again makes the same calls under the same keys. Never a
   * fresh ID per send, which would make every send another turn.
   */
  turnId?: string;
}

/**
 * runDurably runs agent on message to its end, approving each call that
 * asks for approval (idemflow's tools do) after saving its runId and
 * toolCallId to the file state (as JSON, with writeDurably). If state
 * holds a call (the process was killed after saving it), that call is
 * approved again instead, and message is not sent: the call gets its key
 * back. It resolves to the run's last text, and removes state.
 *
 * With options.conversation and options.turnId, each call runs under the
 * key of the intended call it is (intendedCallKeys), from the run's
 * tool-call chunks, which it saves with the call.
 *
 * The approval is a durability point, not a person's review: every call
 * that asks for one is approved. A tool a person must approve belongs in
 * an agent run the app drives itself.
 */
export async function runDurably(agent: DurableAgent, message: unknown, state: string, options: RunOptions = {}): Promise<string> {
  let saved: Stopped | undefined;
  try {
    saved = JSON.parse(await readFile(state, "utf8")) as Stopped;
  } catch (e: any) {
    if (e?.code !== "ENOENT") throw e;
  }
  const turn = options.conversation && options.turnId ? { conversation: options.conversation, turnId: options.turnId } : undefined;
  // The run's calls in their order (a resumed run's from its save), and
  // the keys the tools read.
  const calls: RunCall[] = [...(saved?.calls ?? [])];
  const keys = new Map<string, string>();
  const plan = () => {
    if (!turn) return;
    for (const [id, key] of intendedCallKeys(turn.conversation, turn.turnId, calls, options.keyScheme, options.intents)) keys.set(id, key);
  };
  plan();
  return planned.run(keys, async () => {
    let stream = saved ? await agent.approveToolCall({ runId: saved.runId, toolCallId: saved.toolCallId }) : await agent.stream(message, options.streamOptions);
    for (;;) {
      let stopped: Stopped | undefined;
      for await (const chunk of stream.fullStream) {
        options.onChunk?.(chunk);
        if ((chunk.type === "tool-call" || chunk.type === "tool-call-approval") && !calls.some((c) => c.toolCallId === chunk.payload.toolCallId)) {
          calls.push({ toolCallId: chunk.payload.toolCallId, toolName: chunk.payload.toolName, args: chunk.payload.args });
        }
        if (chunk.type === "tool-call-approval" && !stopped) stopped = { runId: stream.runId, toolCallId: chunk.payload.toolCallId };
      }
      if (!stopped) break;
      plan();
      await writeDurably(state, JSON.stringify(turn ? { ...stopped, calls } : stopped));
      stream = await agent.approveToolCall(stopped);
    }
    const text = await stream.text;
    await rm(state, { force: true });
    return text;
  });
}
