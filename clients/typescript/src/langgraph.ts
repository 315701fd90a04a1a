// The LangGraph.js integration: a tool whose idempotency key is derived
// from the framework's own durable identity of the call, so that a run
// resumed from its checkpoint (after a crash, a deploy or a human-in-the-
// loop pause), which calls the tool again, replays the first answer
// instead of taking effect twice.
//
// LangGraph checkpoints the model's message, with its own ID and its
// tool_calls[].id, before the tool node runs (durability "sync"); a
// resumed run runs the tool node again with the same thread, node path and
// message. The key is derived from those, the tool-call ID and the tool's
// name: no store of its own. The message's ID is there because some models
// and servers number tool calls per message (call_0, call_1): a later turn
// brings the same tool-call ID back, and is another intended call. Not
// from the checkpoint namespace's task IDs: LangGraph derives a task ID
// from the checkpoint the step started from, so anything that writes a
// checkpoint between the crash and the resume (updateState in a review
// step) would change it, and with it the key.

import { type BaseMessage, isAIMessage } from "@langchain/core/messages";
import { tool } from "@langchain/core/tools";
import type { ToolRunnableConfig } from "@langchain/core/tools";
import { interrupt } from "@langchain/langgraph";
import { Client, DeadlineError, deriveKey, NoDurableIdentityError, ProblemError, type Result } from "./index.js";
import { answerText, pendingText, refusalText, resume } from "./tooltext.js";

export { NoDurableIdentityError };

/**
 * The scheme of a tool call's key (lg1 included the task IDs; lg2 lacked
 * the AI message's ID, and a reused tool-call ID was a replay).
 */
export const keyScheme = "lg3";

/**
 * The checkpoint namespace without its task IDs: "inner:<id>|tools:<id>"
 * is "inner|tools". LangGraph refuses ":" and "|" in node names, so the
 * path is what the graph's structure names, the same on every resume.
 */
export function nodePath(checkpointNs: string): string {
  if (!checkpointNs) return "";
  return checkpointNs.split("|").map((part) => part.split(":", 1)[0]).join("|");
}

/**
 * The ID of the AI message that asked for the tool call: the last one in
 * the state's messages carrying toolCallId (the one ToolNode runs), or
 * undefined when the state holds none with an ID. state is what ToolNode
 * hands its tools (runtime.state): the graph's state, or its messages.
 */
export function callMessageId(state: unknown, toolCallId: string | undefined): string | undefined {
  const messages = (Array.isArray(state) ? state : (state as { messages?: unknown } | undefined)?.messages) as BaseMessage[] | undefined;
  if (!Array.isArray(messages) || !toolCallId) return undefined;
  for (let i = messages.length - 1; i >= 0; i--) {
    const m = messages[i];
    if (isAIMessage(m) && m.tool_calls?.some((c) => c.id === toolCallId)) return m.id || undefined;
  }
  return undefined;
}

/**
 * The key of one tool call: from the run's thread_id, the node path of its
 * checkpoint_ns, the ID of the AI message that asked for the call (from
 * the state ToolNode hands the tool), the call's ID and the tool's name
 * (the vectors in clients/testdata/keys.json). It throws
 * NoDurableIdentityError when the run has no thread (no checkpointer, or
 * invoked without configurable.thread_id), the call no ID, or the call's
 * message is unknown: a random key would protect nothing across a resume,
 * and a key without the message would answer a later turn that reuses the
 * tool-call ID with this one's replay; neither is made in silence.
 */
export function durableKey(config: (ToolRunnableConfig & { state?: unknown }) | undefined, toolName: string): string {
  const threadId = config?.configurable?.thread_id;
  const callId = config?.toolCall?.id;
  if ((typeof threadId !== "string" && typeof threadId !== "number") || threadId === "") {
    throw new NoDurableIdentityError(`${toolName}: the run has no thread_id (compile the graph with a checkpointer and invoke it with configurable.thread_id), so no key can survive a resume`);
  }
  if (!callId) {
    throw new NoDurableIdentityError(`${toolName}: the call has no tool-call ID (call the tool through a ToolNode, or with a ToolCall), so no key can survive a resume`);
  }
  const messageId = callMessageId(config?.state, callId);
  if (!messageId) {
    throw new NoDurableIdentityError(`${toolName}: the AI message that asked for call ${callId} is not in the graph's state with an ID (call the tool through a ToolNode of a graph whose state keeps the messages), so no key can tell this call from a later turn's that reuses its ID`);
  }
  return deriveKey(keyScheme, String(threadId), nodePath(String(config?.configurable?.checkpoint_ns ?? "")), messageId, callId, toolName);
}

export interface IdemflowToolFields<S> {
  name: string;
  description: string;
  /** The arguments' schema (zod or JSON Schema), as tool() takes it. */
  schema: S;
  /** The operation's path: /v1/tickets, /v1/tools/refund_create, or one built from the arguments. */
  path: string | ((args: any) => string);
  /** The body sent (default: the arguments). */
  body?: (args: any) => unknown;
  /**
   * How long one call waits for its final answer (default 300 s) before it
   * pauses the run (see PendingAnswer). An answer still pending is not a
   * failure: the intent may have taken effect, and only its answer is late.
   */
  waitMs?: number;
}

/**
 * What the run is paused with (LangGraph's interrupt) when a call's final
 * answer did not come within waitMs: never a tool error, which ToolNode
 * (handleToolErrors, its default) would hand to the model, whose retry
 * would be a new tool call, a new key and a second effect. Resume the run
 * (new Command({ resume: true }) on the same thread): the tool node runs
 * the call again under the same key, and gets its answer.
 */
export interface PendingAnswer {
  idemflow: "pending";
  tool: string;
  key: string;
  message: string;
}

export type { ToolAnswer } from "./tooltext.js";

/**
 * idemflowTool is a LangGraph.js tool that runs one of idemflow's
 * operations (a ticket, an order, a declared operation, an HTTP tool)
 * exactly once per tool call, however often a resumed run calls it.
 */
export function idemflowTool<S>(client: Client, f: IdemflowToolFields<S>) {
  return tool(
    async (args: any, config: ToolRunnableConfig) => {
      const key = durableKey(config, f.name);
      const path = typeof f.path === "function" ? f.path(args) : f.path;
      let r: Result;
      for (;;) {
        try {
          r = await client.do({ key, method: "POST", path, body: f.body ? f.body(args) : args }, { deadlineMs: f.waitMs, signal: config?.signal });
          break;
        } catch (e) {
          if (e instanceof ProblemError) {
            // A final refusal is the model's to read, not a crash of the
            // run. error names it: a rejection stored under the key (the
            // operation's or its downstream's, whose body is as it came),
            // or idemflow's refusal of the arguments, which nothing
            // recorded.
            return refusalText(e, key);
          }
          if (!(e instanceof DeadlineError)) throw e;
          // Pauses the run (ToolNode re-throws an interrupt whatever its
          // handleToolErrors); a resume returns here and waits again.
          interrupt<PendingAnswer>({
            idemflow: "pending",
            tool: f.name,
            key,
            message: pendingText(f.name, key, resume.langgraph),
          });
        }
      }
      return answerText(r);
    },
    { name: f.name, description: f.description, schema: f.schema as any },
  );
}
