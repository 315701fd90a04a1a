// A LangGraph.js agent for the kill tests (typescript_test.go): a graph
// with a scripted chat model (@langchain/core's fake) that calls a tool to
// create a ticket, then one to create an order, over a PostgreSQL
// checkpointer. Run again with the same --thread, it resumes from its
// checkpoint. --tools naive makes the control: plain HTTP tools that make
// a fresh key on every call.
//
//   node dist/agent/agent.js --thread T [--tools idemflow|naive] [--review]
//     [--durability sync|exit] [--message-id ID] [--key-scheme lg4|lg3] [--via mcp]
// --review: a resumed run first passes a human review step, LangGraph's
// usual one: updateState writes the pending model message back, unchanged,
// which writes a new checkpoint (and gives the tool's task a new ID).
// --durability exit: LangGraph saves the run's checkpoints only when it
// ends, so a kill mid call leaves nothing saved, and the app sends the
// turn's message again, with its ID (--message-id), as a chat UI does.
// --via mcp reaches create_ticket through idemflow's MCP server (idemflow
// mcp over stdio, the official SDK's client; IDEMFLOW_BIN names it): the
// model writes an idempotency_key of its own, new each time it writes the
// call; --tools idemflow makes the tool idemflowMcpTools', --tools naive
// leaves the key to the model, as @langchain/mcp-adapters' tools do.
// with IDEMFLOW_URL, IDEMFLOW_TOKEN and DATABASE_URL set.

import { randomUUID } from "node:crypto";
import { parseArgs } from "node:util";
import { AIMessage, AIMessageChunk, HumanMessage, ToolMessage } from "@langchain/core/messages";
import { type StructuredToolInterface, tool } from "@langchain/core/tools";
import { FakeStreamingChatModel } from "@langchain/core/utils/testing";
import { MessagesAnnotation, StateGraph, START, END } from "@langchain/langgraph";
import { ToolNode, toolsCondition } from "@langchain/langgraph/prebuilt";
import { PostgresSaver } from "@langchain/langgraph-checkpoint-postgres";
import { Client as MCPClient } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { z } from "zod";
import { Client } from "../src/index.js";
import { idemflowMcpTools, idemflowTool } from "../src/langgraph.js";
import { resultText } from "../src/mcp.js";

const { values } = parseArgs({
  options: {
    thread: { type: "string" },
    tools: { type: "string", default: "idemflow" },
    review: { type: "boolean", default: false },
    durability: { type: "string", default: "sync" },
    "message-id": { type: "string" },
    "key-scheme": { type: "string", default: "lg4" },
    via: { type: "string", default: "http" },
  },
});
const keyScheme = values["key-scheme"] as "lg4" | "lg3";
const thread = values.thread!;
const url = process.env.IDEMFLOW_URL!;
const token = process.env.IDEMFLOW_TOKEN!;

const ticketSchema = z.object({ customer_id: z.string(), title: z.string() });
const orderSchema = z.object({ customer_id: z.string(), items: z.array(z.object({ sku: z.string(), quantity: z.number() })) });

// The client's attempts time out fast, so that a dropped answer is
// retried at once (the kill comes first).
const client = new Client({ baseURL: url, token, attemptTimeoutMs: 3000, initialBackoffMs: 50, maxBackoffMs: 500 });

function naiveTool(name: string, path: string, schema: z.ZodTypeAny) {
  return tool(async (args) => {
    // The bug of the incident: a key made at call time, new on every call.
    const resp = await fetch(url + path, {
      method: "POST",
      headers: { Authorization: `Bearer ${token}`, "Idempotency-Key": randomUUID(), "Content-Type": "application/json", Prefer: "wait=5" },
      body: JSON.stringify(args),
    });
    return JSON.stringify({ http_status: resp.status, replayed: resp.headers.get("Idempotent-Replayed") === "true", result: await resp.json() });
  }, { name, description: name, schema });
}

const tools: StructuredToolInterface[] =
  values.tools === "naive"
    ? [naiveTool("create_ticket", "/v1/tickets", ticketSchema), naiveTool("create_order", "/v1/orders", orderSchema)]
    : [
        idemflowTool(client, { name: "create_ticket", description: "Create a support ticket.", schema: ticketSchema, path: "/v1/tickets", keyScheme }),
        idemflowTool(client, { name: "create_order", description: "Create a purchase order.", schema: orderSchema, path: "/v1/orders", keyScheme }),
      ];

const viaMcp = values.via === "mcp";
let mcp: MCPClient | undefined;
if (viaMcp) {
  mcp = new MCPClient({ name: "langgraph-js-agent", version: "1" });
  await mcp.connect(new StdioClientTransport({ command: process.env.IDEMFLOW_BIN!, args: ["mcp"], env: { IDEMFLOW_URL: url, IDEMFLOW_TOKEN: token, PATH: process.env.PATH ?? "" } }));
  tools[0] = values.tools === "naive" ? naiveMcpTool(mcp) : (await idemflowMcpTools(mcp, { names: ["create_ticket"] }))[0];
}

/** create_ticket through idemflow's MCP server, as @langchain/mcp-adapters' tools call it: no _meta, the model's key decides. */
function naiveMcpTool(mcp: MCPClient) {
  return tool(async (args) => resultText(await mcp.callTool({ name: "create_ticket", arguments: args })), {
    name: "create_ticket",
    description: "Create a support ticket.",
    schema: ticketSchema.extend({ idempotency_key: z.string() }),
  });
}

// The script: the model's next message follows from the tool results it
// has seen, so a resumed run asks for the next step, never the last again.
// Each tool call's ID is new when the model writes it: only the
// checkpoint keeps it.
async function callModel(state: typeof MessagesAnnotation.State) {
  const done = state.messages.filter((m) => m instanceof ToolMessage || m.getType() === "tool").length;
  const step = [
    // Through MCP the model writes a key of its own, new each time.
    { name: "create_ticket", args: { ...(viaMcp ? { idempotency_key: randomUUID() } : {}), customer_id: thread, title: "Printer on fire" } },
    { name: "create_order", args: { customer_id: thread, items: [{ sku: "SKU-MOUSE", quantity: 1 }] } },
  ][done];
  const model = step
    ? new FakeStreamingChatModel({ chunks: [new AIMessageChunk({ content: "", tool_calls: [{ ...step, id: "call_" + randomUUID(), type: "tool_call" }] })] })
    : new FakeStreamingChatModel({ responses: [new AIMessage("Both are done.")] });
  return { messages: [await model.invoke(state.messages)] };
}

const checkpointer = PostgresSaver.fromConnString(process.env.DATABASE_URL!);
await checkpointer.setup();
const graph = new StateGraph(MessagesAnnotation)
  .addNode("agent", callModel)
  .addNode("tools", new ToolNode(tools))
  .addEdge(START, "agent")
  .addConditionalEdges("agent", toolsCondition, ["tools", END])
  .addEdge("tools", "agent")
  .compile({ checkpointer });

const config = { configurable: { thread_id: thread } };
const state = await graph.getState(config);
const resuming = state.next.length > 0;
console.log(resuming ? `resuming ${thread} at ${state.next.join(",")}` : `starting ${thread}`);
if (resuming && values.review) {
  const pending = state.values.messages[state.values.messages.length - 1];
  await graph.updateState(config, { messages: [pending] });
  const after = await graph.getState(config);
  console.log(`reviewed ${thread}: checkpoint ${state.config.configurable?.checkpoint_id} -> ${after.config.configurable?.checkpoint_id}, next ${after.next.join(",")}`);
}
// durability "sync": the model's message, with its tool call's ID, is
// checkpointed before the tool runs. With LangGraph's default ("async") a
// crash can lose that step, and the model, asked again, writes a new ID:
// a new key.
const ask = new HumanMessage({ content: "Open a ticket, then order a mouse.", id: values["message-id"] });
const out = await graph.invoke(resuming ? null : { messages: [ask] }, { ...config, durability: values.durability as "sync" | "exit" });
for (const m of out.messages) {
  if (m.getType() === "tool") console.log(`tool ${(m as ToolMessage).name} ${m.content}`);
}
console.log("DONE");
await checkpointer.end();
await mcp?.close();
