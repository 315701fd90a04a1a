// A call to one of idemflow's MCP tools from a framework's tool, made
// durable: the key the framework's native integration derives for the
// call goes in the call's _meta, so the idempotency_key the model wrote
// decides nothing, and the call asks for a task (MCP 2025-11-25 tasks, the
// official SDK's client.experimental.tasks) and waits on it, so that a
// slow call is a handle any idemflow mcp process answers, never NO ANSWER
// YET handed to a model. Each framework's wrapper (ai's idemflowMcpTools,
// openai-agents' idemflowMcpFunctionTools) derives the key and calls
// callUntilAnswered; this module knows no framework.

import type { Client as MCPClient } from "@modelcontextprotocol/sdk/client/index.js";
import type { IntentField } from "./index.js";

/** The _meta member in which a call to idemflow's MCP server carries its durable key. */
export const mcpMetaKey = "io.idemflow/idempotency-key";

/** The call's _meta member that says its key was derived from the tool's intent fields: idemflow compares the call on them alone. */
export const mcpMetaFingerprint = "io.idemflow/fingerprint";

/** The tool's _meta member in which idemflow's MCP server publishes its intent fields. */
export const mcpMetaIntent = "io.idemflow/intent";

/** An MCP tool of the server's list, as a wrapper makes a framework's tool of it. */
export interface McpTool {
  name: string;
  description?: string;
  inputSchema: Record<string, unknown>;
  _meta?: Record<string, unknown>;
}

/** The intent fields a tool of idemflow's MCP server publishes in its _meta; none for a tool that publishes none. */
export function mcpIntentFields(t: McpTool): IntentField[] {
  const fields = t._meta?.[mcpMetaIntent];
  if (!Array.isArray(fields)) return [];
  return fields.filter((f) => f && typeof f.name === "string" && typeof f.norm === "string").map((f) => ({ name: f.name, norm: f.norm }));
}

/** The tools the server lists, those in names only where given. */
export async function mcpTools(mcp: MCPClient, names?: string[]): Promise<McpTool[]> {
  const { tools } = await mcp.listTools();
  return tools.filter((t) => !names || names.includes(t.name)) as McpTool[];
}

/**
 * The final result of one call of tool under key: the call asks for a task
 * and waits on it up to waitMs (or until signal aborts). undefined when the
 * wait ended first: the call is pending, and the framework's wrapper stops
 * its run (the same call later, under the same key, gets its answer).
 */
export async function callUntilAnswered(
  mcp: MCPClient,
  tool: string,
  input: Record<string, unknown>,
  key: string,
  waitMs = 300_000,
  signal?: AbortSignal,
  byIntent = false,
): Promise<any | undefined> {
  // waitMs Infinity: no bound but signal's (a framework whose model reads
  // whatever a tool returns waits for the answer).
  const wait = Number.isFinite(waitMs) ? AbortSignal.timeout(waitMs) : new AbortController().signal;
  const bound = signal ? AbortSignal.any([signal, wait]) : wait;
  const meta = byIntent ? { [mcpMetaKey]: key, [mcpMetaFingerprint]: "intent" } : { [mcpMetaKey]: key };
  for (let pause = 200; ; pause = Math.min(pause * 2, 5000)) {
    let result: any;
    try {
      for await (const m of mcp.experimental.tasks.callToolStream({ name: tool, arguments: input, _meta: meta }, undefined, { signal: bound })) {
        if (m.type === "result") result = m.result;
        if (m.type === "error") throw m.error;
      }
      return wait.aborted ? undefined : result;
    } catch (e) {
      if (wait.aborted) return undefined;
      // The call may have run: the same call again, under its key, until
      // the wait ends; only a request refused as sent is an error.
      if (signal?.aborted || !unknownOutcome(e)) throw e;
    }
    await new Promise<void>((r) => {
      const t = setTimeout(r, pause);
      bound.addEventListener("abort", () => (clearTimeout(t), r()), { once: true });
    });
    if (wait.aborted) return undefined;
    if (signal?.aborted) throw signal.reason;
  }
}

/** JSON-RPC codes of a request the server refused as sent (2026-07-28 adds a header mismatch and a missing capability): nothing ran. */
const refused = new Set([-32700, -32600, -32601, -32602, -32020, -32021]);

/**
 * Whether e, thrown by an MCP request, leaves its outcome unknown: a
 * transport failure (fetch's), a closed connection, the server's error
 * response (an HTTP 5xx, an internal error). A keyed call may then have
 * run, so it is waited on under its key, never handed to a model as an
 * error it could retry under a new key. A request the server refused as
 * sent (a malformed one, an unknown method or tool) is not, nor is any
 * other error (a bug's).
 */
export function unknownOutcome(e: unknown): boolean {
  for (let x: any = e, depth = 0; x && depth < 8; x = x.cause, depth++) {
    if (typeof x.code === "number") return !refused.has(x.code) && !(x.code >= 400 && x.code < 500);
    if (x instanceof TypeError && /fetch failed|terminated|network/i.test(x.message)) return true;
    if (typeof x.code === "string" && /^(ECONNREFUSED|ECONNRESET|EPIPE|ETIMEDOUT|UND_ERR_\w+)$/.test(x.code)) return true;
  }
  return false;
}

/** The text a model reads of a tool's result: {http_status, replayed, result}, or the words of a refusal. */
export function resultText(result: any): string {
  return (result?.content ?? []).map((c: any) => (c.type === "text" ? c.text : "")).join("");
}
