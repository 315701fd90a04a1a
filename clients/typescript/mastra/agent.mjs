// A Mastra agent for the kill test (typescript_test.go): a real Agent in
// a Mastra instance with LibSQL storage, a deterministic scripted model
// and one tool that creates a ticket through idemflow, run by runDurably,
// which saves each call's runId and toolCallId before it approves it. Run
// again with the same --conversation and --state, it approves the saved
// call again.
//
//   node agent.mjs --conversation ID --state FILE [--tools idemflow|naive] [--unsafe] [--turn-id ID] [--via mcp]
//
// --via mcp reaches create_ticket through idemflow's MCP server (idemflow
// mcp over stdio, the official SDK's client; IDEMFLOW_BIN names it): the
// model writes an idempotency_key of its own, new each time it writes the
// call; --tools idemflow makes the tool idemflowMcpTools', --tools naive
// leaves the key to the model.
//
// with IDEMFLOW_URL and IDEMFLOW_TOKEN set. --tools naive is the control (a
// fresh key on every call, run without approval); --unsafe approves each
// call without saving it, so that a rerun can only send the message again;
// --turn-id gives runDurably the turn's ID (the conversation's too), so
// that the message sent again makes the same intended call.

import { randomUUID } from "node:crypto";
import { existsSync, rmSync } from "node:fs";
import { parseArgs } from "node:util";
import { Client } from "@idemflow/client";
import { idemflowMcpTools, idemflowTool, runDurably } from "@idemflow/client/mastra";
import { Agent } from "@mastra/core/agent";
import { Client as MCPClient } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { Mastra } from "@mastra/core/mastra";
import { createTool } from "@mastra/core/tools";
import { LibSQLStore } from "@mastra/libsql";
import { z } from "zod";

export const Ticket = z.object({ customer_id: z.string(), title: z.string() });

const usage = { inputTokens: 1, outputTokens: 1, totalTokens: 2 };

/**
 * A scripted model (Mastra takes an AI SDK LanguageModelV2): it asks for
 * `calls` tickets in one answer until a tool's answer is the last message,
 * then answers. Each call it writes has a new ID, as a real model's; with
 * callId set, the first call of every answer reuses it, as a provider that
 * numbers calls per answer does. identical: all the calls of an answer
 * ask for the same ticket; reword: the title is new on every answer.
 */
export function scriptedModel({ customer, calls = 1, callId, identical = false, reword = false, modelKey = false } = {}) {
  let runs = 0;
  return {
    specificationVersion: "v2",
    provider: "scripted",
    modelId: "scripted",
    supportedUrls: {},
    async doGenerate() {
      throw new Error("the scripted model only streams");
    },
    async doStream(options) {
      const last = options.prompt[options.prompt.length - 1];
      if (last.role !== "tool") runs++;
      const chunks =
        last.role === "tool"
          ? [
              { type: "text-start", id: "t" },
              { type: "text-delta", id: "t", delta: "The ticket is open." },
              { type: "text-end", id: "t" },
              { type: "finish", finishReason: "stop", usage },
            ]
          : [
              ...Array.from({ length: calls }, (_, i) => ({
                type: "tool-call",
                toolCallId: callId && i === 0 ? callId : `call_${randomUUID().slice(0, 12)}`,
                toolName: "create_ticket",
                // modelKey: an idempotency_key of the model's (an MCP tool of
                // idemflow's takes one), new each time it writes the call.
                input: JSON.stringify({
                  ...(modelKey ? { idempotency_key: randomUUID() } : {}),
                  customer_id: customer,
                  title: "Printer on fire" + (i && !identical ? ` #${i + 1}` : "") + (reword ? ` (${runs})` : ""),
                }),
              })),
              { type: "finish", finishReason: "tool-calls", usage },
            ];
      return {
        stream: new ReadableStream({
          start(c) {
            c.enqueue({ type: "stream-start", warnings: [] });
            for (const chunk of chunks) c.enqueue(chunk);
            c.close();
          },
        }),
      };
    },
  };
}

/** The bug of the incident: a key made at call time, new on every call. */
function naiveTool(client) {
  return createTool({
    id: "create_ticket",
    description: "Create a support ticket.",
    inputSchema: Ticket,
    execute: async (input) => {
      const r = await client.do({ key: randomUUID(), method: "POST", path: "/v1/tickets", body: input });
      return JSON.stringify({ http_status: r.status, replayed: r.replayed, result: r.body });
    },
  });
}

/** create_ticket through idemflow's MCP server, its key the model's (needing approval, as the wrapped tool). */
function naiveMcpTool(mcp) {
  return createTool({
    id: "create_ticket",
    description: "Create a support ticket.",
    inputSchema: z.object({}).passthrough(),
    requireApproval: true,
    execute: async (input) => (await mcp.callTool({ name: "create_ticket", arguments: input })).content.map((c) => c.text).join(""),
  });
}

/** A Mastra instance with the support agent, its storage in file db. */
export function support(client, { customer, db, naive = false, calls, callId, identical, reword, tool }) {
  // tool, where given, is create_ticket through MCP, whose model writes a key of its own.
  const modelKey = tool !== undefined;
  tool ??= naive
    ? naiveTool(client)
    : createTool(idemflowTool(client, { id: "create_ticket", description: "Create a support ticket.", inputSchema: Ticket, path: "/v1/tickets" }));
  const agent = new Agent({
    id: "support",
    name: "support",
    instructions: "Open a ticket for the customer.",
    model: scriptedModel({ customer, calls, callId, identical, reword, modelKey }),
    tools: { create_ticket: tool },
  });
  const mastra = new Mastra({ agents: { support: agent }, storage: new LibSQLStore({ id: "support-storage", url: `file:${db}` }), logger: false });
  return mastra.getAgent("support");
}

async function main() {
  const { values: a } = parseArgs({
    options: {
      conversation: { type: "string" },
      state: { type: "string" },
      tools: { type: "string", default: "idemflow" },
      unsafe: { type: "boolean", default: false },
      "turn-id": { type: "string" },
      via: { type: "string", default: "function" },
    },
  });
  // The client's attempts time out fast, so that a dropped answer is
  // retried at once (the kill comes first).
  const client = new Client({ baseURL: process.env.IDEMFLOW_URL, token: process.env.IDEMFLOW_TOKEN, attemptTimeoutMs: 3000, initialBackoffMs: 50, maxBackoffMs: 500 });
  let mcp;
  let tool;
  if (a.via === "mcp") {
    mcp = new MCPClient({ name: "mastra-agent", version: "1" });
    const env = { IDEMFLOW_URL: process.env.IDEMFLOW_URL, IDEMFLOW_TOKEN: process.env.IDEMFLOW_TOKEN, PATH: process.env.PATH ?? "" };
    await mcp.connect(new StdioClientTransport({ command: process.env.IDEMFLOW_BIN, args: ["mcp"], env }));
    tool = a.tools === "naive" ? naiveMcpTool(mcp) : createTool((await idemflowMcpTools(mcp, { names: ["create_ticket"], inputSchema: (s) => z.fromJSONSchema(s) }))[0]);
  }
  const agent = support(client, { customer: a.conversation, db: `${a.state}.db`, naive: a.tools === "naive", tool });
  // Unsafe: nothing of the call is kept where a rerun looks.
  const state = a.unsafe ? `${a.state}.${randomUUID()}` : a.state;
  console.log(`${existsSync(state) ? "resuming" : "starting"} ${a.conversation}${existsSync(state) ? " from its approval" : ""}`);
  const onChunk = (chunk) => {
    if (chunk.type === "tool-result") console.log(`tool ${chunk.payload.toolName} ${chunk.payload.result}`);
  };
  const turn = a["turn-id"] ? { conversation: a.conversation, turnId: a["turn-id"] } : {};
  const text = await runDurably(agent, "My printer is on fire.", state, { onChunk, ...turn });
  if (a.unsafe) rmSync(state, { force: true });
  await mcp?.close();
  console.log(`DONE ${text}`);
}

if (import.meta.url === `file://${process.argv[1]}`) await main();
