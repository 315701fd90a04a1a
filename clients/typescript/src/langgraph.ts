// The LangGraph.js integration: a tool whose idempotency key names the
// intended call, so that a run resumed from its checkpoint (after a crash,
// a deploy or a human-in-the-loop pause), a fork from a checkpoint before
// the model step (what chat UIs call regenerate), or a turn sent again
// before its state was saved, which all call the tool again, replays the
// first answer instead of taking effect twice.
//
// The key (lg5) is derived from the run's thread, the node path of its
// checkpoint namespace, the turn (the ID of the human message the call
// answers), the tool, the call's intent (the tool's intent fields, a
// ticket's customer, normalised: intentCanonical; for a tool that declares
// none, its arguments in their RFC 8785 form, less the idempotency_key an
// MCP tool takes from the model) and its occurrence among the turn's calls
// of that tool with that intent: no store of its own. A fork whose model
// rewords the call's free text is the same call, a replay that says what
// differed; another customer is another call. Not from the AI message's or the tool
// call's IDs: a re-run of the model step (a fork, a resume of a step that
// was not saved) writes the same call under new ones. The human message's
// ID is in the checkpoint before the model runs, and a chat UI sends it
// again with the message. Not from the checkpoint namespace's task IDs:
// LangGraph derives a task ID from the checkpoint the step started from,
// so anything that writes a checkpoint between the crash and the resume
// (updateState in a review step) would change it, and with it the key.

import { type BaseMessage, isAIMessage, isHumanMessage } from "@langchain/core/messages";
import { tool } from "@langchain/core/tools";
import type { ToolRunnableConfig } from "@langchain/core/tools";
import { interrupt } from "@langchain/langgraph";
import {
  callArguments,
  callIntent,
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
import type { Client as MCPClient } from "@modelcontextprotocol/sdk/client/index.js";
import { callUntilAnswered, mcpIntentFields, mcpTools, resultText } from "./mcp.js";
import { answerText, pendingText, refusalText, resume } from "./tooltext.js";

export { NoDurableIdentityError };

/**
 * The scheme of a tool call's key: the intended call by its intent fields
 * (lg1 included the task IDs; lg2 lacked the AI message's ID, and a reused
 * tool-call ID was a replay; lg3 named the AI message and the tool-call
 * ID, which a fork's model step writes anew; lg4 named the call's whole
 * arguments, which a model rewords).
 */
export const keyScheme = "lg5";

/** The scheme before lg5: the call's whole arguments, for the calls in flight across the upgrade (docs/agents/langgraph-js.md). */
export const argsKeyScheme = "lg4";

/** The scheme before lg4, for the calls in flight across that upgrade. */
export const legacyKeyScheme = "lg3";

export type KeyScheme = typeof keyScheme | typeof argsKeyScheme | typeof legacyKeyScheme;

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
  const messages = stateMessages(state);
  const at = callMessage(messages, toolCallId);
  return at < 0 ? undefined : messages[at].id || undefined;
}

function stateMessages(state: unknown): BaseMessage[] {
  const messages = Array.isArray(state) ? state : (state as { messages?: unknown } | undefined)?.messages;
  return Array.isArray(messages) ? (messages as BaseMessage[]) : [];
}

/** The index of the last AI message carrying toolCallId, or -1. */
function callMessage(messages: BaseMessage[], toolCallId: string | undefined): number {
  if (!toolCallId) return -1;
  for (let i = messages.length - 1; i >= 0; i--) {
    const m = messages[i];
    if (isAIMessage(m) && m.tool_calls?.some((c) => c.id === toolCallId)) return i;
  }
  return -1;
}

/**
 * What names an intended call within its thread: the turn (the ID of the
 * human message it answers, "" before the first), the digest of its
 * arguments (RFC 8785) and its occurrence (from 1) among the turn's calls
 * of its tool with those arguments.
 */
export interface IntendedCall {
  turn: string;
  args: string;
  occurrence: number;
}

/**
 * The intended call that the tool call toolCallId of toolName is, from the
 * state's messages: the last AI message carrying it, the last human
 * message before that (the turn), and the calls of toolName in the turn's
 * AI messages, in their order. undefined when the messages do not hold
 * the call. It throws NoDurableIdentityError when the turn's human message
 * has no ID: nothing else in the state tells a turn sent again from the
 * next one that says the same.
 */
export function intendedCall(state: unknown, toolCallId: string | undefined, toolName: string, intent?: (args: Record<string, unknown>) => string): IntendedCall | undefined {
  const messages = stateMessages(state);
  const at = callMessage(messages, toolCallId);
  if (at < 0) return undefined;
  let start = -1;
  for (let i = at - 1; i >= 0 && start < 0; i--) if (isHumanMessage(messages[i])) start = i;
  let turn = "";
  if (start >= 0) {
    turn = messages[start].id ?? "";
    if (!turn) {
      throw new NoDurableIdentityError(
        `${toolName}: the human message that call ${toolCallId} answers has no ID (keep the graph's messages with MessagesAnnotation, which gives each one, or send each message with its own), so no key can tell a turn sent again from the next one`,
      );
    }
  }
  // The tool is the name the model wrote (the tool's, when ToolNode runs it).
  const calls: { id: string; tool: string; args: string }[] = [];
  for (const m of messages.slice(start + 1, at + 1)) {
    if (!isAIMessage(m)) continue;
    for (const c of m.tool_calls ?? []) {
      // intent names this tool's calls (callIntent of the request each makes); others by their arguments.
      const args = intent && c.name === toolName ? intent(c.args ?? {}) : callArguments(c.args ?? {});
      calls.push({ id: c.id ?? "", tool: c.name, args });
    }
  }
  let mine = -1;
  calls.forEach((c, i) => {
    if (c.id === toolCallId) mine = i;
  });
  return { turn, ...occurrenceAt(calls, mine) };
}

/**
 * The key of one tool call, from the run's thread_id, the node path of its
 * checkpoint_ns and the messages of the state ToolNode hands the tool:
 * under lg5, the intended call (intendedCall) by intent(args) (callIntent
 * of the request the call makes: its intent fields where the tool
 * declares them) and the tool's name; under lg4, the same by the call's
 * whole arguments; under lg3, the ID of the AI message that asked for the
 * call, the call's ID and the tool's name (the vectors in
 * clients/testdata/keys.json). It throws NoDurableIdentityError when the
 * run has no thread (no checkpointer, or invoked without
 * configurable.thread_id), the call no ID, or the state does not hold the
 * call: a random key would protect nothing across a resume, and a key
 * without the turn would answer a later turn's call with this one's
 * replay; neither is made in silence.
 */
export function durableKey(
  config: (ToolRunnableConfig & { state?: unknown }) | undefined,
  toolName: string,
  scheme: KeyScheme = keyScheme,
  intent?: (args: Record<string, unknown>) => string,
): string {
  const threadId = config?.configurable?.thread_id;
  const callId = config?.toolCall?.id;
  if ((typeof threadId !== "string" && typeof threadId !== "number") || threadId === "") {
    throw new NoDurableIdentityError(`${toolName}: the run has no thread_id (compile the graph with a checkpointer and invoke it with configurable.thread_id), so no key can survive a resume`);
  }
  if (!callId) {
    throw new NoDurableIdentityError(`${toolName}: the call has no tool-call ID (call the tool through a ToolNode, or with a ToolCall), so no key can survive a resume`);
  }
  const missing = () =>
    new NoDurableIdentityError(`${toolName}: the AI message that asked for call ${callId} is not in the graph's state with an ID (call the tool through a ToolNode of a graph whose state keeps the messages), so no key can tell this call from a later turn's`);
  const path = nodePath(String(config?.configurable?.checkpoint_ns ?? ""));
  if (scheme === legacyKeyScheme) {
    const messageId = callMessageId(config?.state, callId);
    if (!messageId) throw missing();
    return deriveKey(legacyKeyScheme, String(threadId), path, messageId, callId, toolName);
  }
  const c = intendedCall(config?.state, callId, toolName, scheme === keyScheme ? intent : undefined);
  if (!c) throw missing();
  return deriveKey(scheme, String(threadId), path, c.turn, toolName, c.args, String(c.occurrence));
}

export interface IdemflowToolFields<S> extends OperationFields {
  name: string;
  description: string;
  /** The arguments' schema (zod or JSON Schema), as tool() takes it. */
  schema: S;
  /**
   * How long one call waits for its final answer (default 300 s) before it
   * pauses the run (see PendingAnswer). An answer still pending is not a
   * failure: the intent may have taken effect, and only its answer is late.
   */
  waitMs?: number;
  /** lg5 (default), or lg4 or lg3 for a run paused across an upgrade (docs/agents/langgraph-js.md). */
  keyScheme?: KeyScheme;
  /**
   * The operation's intent fields, as its declaration publishes them
   * (OpenAPI's x-idemflow-intent); idemflow's own tools' are known by name
   * or path (builtinIntent). The key names the request's intent fields,
   * not its free text, and the request says so: a fork whose model
   * rewords the title gets the first ticket, a replay naming what
   * differed. A tool with none is keyed by its whole arguments.
   */
  intent?: readonly IntentField[];
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
  const fields = f.intent ?? intentFieldsOf(f.name, typeof f.path === "string" ? f.path : undefined);
  const scheme = f.keyScheme ?? keyScheme;
  const byIntent = fields.length > 0 && scheme === keyScheme;
  // The request a call makes, as its arguments make it.
  const intentOf = (args: Record<string, unknown>) => callIntent(fields, f.body ? f.body(args) : args);
  return tool(
    async (args: any, config: ToolRunnableConfig) => {
      const key = durableKey(config, f.name, scheme, intentOf);
      let r: Result;
      for (;;) {
        try {
          r = await client.do({ ...operationIntent(key, f, args), byIntent }, { deadlineMs: f.waitMs, signal: config?.signal });
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

export interface IdemflowMcpToolsFields {
  /** The tools to take (default: every tool the server lists). */
  names?: string[];
  /** How long one call waits on its task (default 300 s) before it pauses the run, as idemflowTool's waitMs. */
  waitMs?: number;
}

/**
 * The tools of idemflow's MCP server (idemflow mcp, through the official
 * SDK's Client, connected by the app), as LangGraph.js tools keyed as
 * idemflowTool keys its calls: each call sends, in _meta, the key of its
 * intended call (lg5, by the intent fields the tool publishes in its
 * _meta, or its arguments less the idempotency_key the model writes), so a
 * resume, a fork, a reworded call or a turn sent again is a replay, and
 * waits on the call's task (MCP tasks); a call still pending after waitMs
 * pauses the run with a PendingAnswer (LangGraph's interrupt), never an
 * error handed to the model. The model reads the tool's text:
 * {http_status, replayed, result}, or its words for a refusal.
 *
 * This stands in for @langchain/mcp-adapters' tools, whose beforeToolCall
 * hook can change a call's arguments and headers but not its _meta, and
 * whose call turns a hook's interrupt into a ToolException the model reads.
 */
export async function idemflowMcpTools(mcp: MCPClient, f: IdemflowMcpToolsFields = {}) {
  return (await mcpTools(mcp, f.names)).map((t) =>
    tool(
      async (args: Record<string, unknown>, config: ToolRunnableConfig) => {
        const fields = mcpIntentFields(t);
        const key = durableKey(config, t.name, keyScheme, (a) => callIntent(fields, a));
        for (;;) {
          const result = await callUntilAnswered(mcp, t.name, args, key, f.waitMs, config?.signal, fields.length > 0);
          if (result !== undefined) return resultText(result);
          // Pauses the run; a resume returns here and waits on the task again.
          interrupt<PendingAnswer>({ idemflow: "pending", tool: t.name, key, message: pendingText(t.name, key, resume.langgraph) });
        }
      },
      { name: t.name, description: t.description ?? t.name, schema: t.inputSchema as any },
    ),
  );
}
