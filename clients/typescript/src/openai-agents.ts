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
// The key is the conversation (the app's ID for it, the same on every run
// and resume; Python reads it from RunConfig.group_id, which the SDK does
// not hand a JavaScript tool), the ID of the model's function-call item,
// the call's ID and the tool's name. The item's ID is there because some
// providers number tool calls per response (call_0): a later turn brings
// the same call ID back, and is another intended call. A Chat Completions
// model gives its items no ID (the SDK's placeholder): the call ID alone
// then tells calls apart only when the provider never reuses one, which
// the tool is told with callIdsUnique.

import { RunState, tool, type Agent, type RunContext, type RunResult, type Runner, type RunToolApprovalItem } from "@openai/agents";
import { Client, DeadlineError, deriveKey, NoDurableIdentityError, ProblemError, type Result } from "./index.js";
import { answerText, pendingText, refusalText, resume } from "./tooltext.js";

export { NoDurableIdentityError };

/** The scheme of an OpenAI Agents SDK tool call's key, in every client. */
export const keyScheme = "oa1";

/** The item IDs the SDKs give a Chat Completions model's calls: no ID at all. */
const placeholderIds = new Set(["FAKE_ID", "__fake_id__"]);

/**
 * The key of one tool call: from the conversation, the model's
 * function-call item ID, the call's ID and the tool's name (the vectors in
 * clients/testdata/keys.json, shared with Python). It throws
 * NoDurableIdentityError when the conversation is empty, the call has no
 * ID, or its item has none and callIdsUnique was not given.
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
  return deriveKey(keyScheme, conversation, itemId, callId, toolName);
}

export interface IdemflowFunctionToolFields<I> {
  name: string;
  description: string;
  /** The arguments' schema (zod), as tool() takes it. */
  parameters: any;
  /** The operation's path: /v1/tickets, /v1/tools/refund_create, or one built from the arguments. */
  path: string | ((input: I) => string);
  /** The body sent (default: the arguments). */
  body?: (input: I) => unknown;
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
  return tool({
    name: f.name,
    description: f.description,
    parameters: f.parameters,
    needsApproval: f.needsApproval ?? true,
    // null: an error fails the run instead of reaching the model, whose
    // retry would be a new call, a new key and a second effect.
    errorFunction: null,
    execute: async (input: any, _context?: RunContext<unknown>, details?: { toolCall?: { id?: string; callId?: string }; signal?: AbortSignal }) => {
      const key = durableKey(f.conversation, details?.toolCall, f.name, f.callIdsUnique);
      const path = typeof f.path === "function" ? f.path(input) : f.path;
      let r: Result;
      try {
        r = await client.do({ key, method: "POST", path, body: f.body ? f.body(input) : input }, { deadlineMs: f.waitMs, signal: details?.signal });
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
}

export interface RunDurablyOptions {
  /** The saved RunState, or undefined for a run never started. */
  load: () => Promise<string | undefined>;
  /** Saves the RunState; durable before it returns. */
  save: (state: string) => Promise<void>;
  /** Decides each interruption: true approves, false rejects (default: approve every call). */
  approve?: (item: RunToolApprovalItem) => Promise<boolean>;
  context?: unknown;
}

/**
 * Runs agent on input to its end, or resumes the run load() returns,
 * saving its RunState wherever the run is interrupted, and again once
 * approve has decided, before any call runs. A process killed at any point
 * runs this again: the saved state's calls run again under the keys they
 * had, and replay.
 */
export async function runDurably(runner: Runner, agent: Agent<any, any>, input: string, o: RunDurablyOptions): Promise<RunResult<any, any>> {
  const saved = await o.load();
  let result: RunResult<any, any> = saved !== undefined ? await runner.run(agent, await RunState.fromString(agent, saved)) : await runner.run(agent, input, { context: o.context });
  while (result.interruptions.length > 0) {
    const state = result.state;
    await o.save(state.toString()); // the calls, with their IDs, before a decision
    for (const item of result.interruptions) {
      if (!o.approve || (await o.approve(item))) state.approve(item);
      else state.reject(item);
    }
    await o.save(state.toString()); // the decisions, before any call runs
    result = await runner.run(agent, state);
  }
  return result;
}
