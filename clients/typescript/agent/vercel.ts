// A Vercel AI SDK chat for the kill tests (typescript_test.go): what a chat
// route does per request (generateText over the chat's saved messages, with
// a tool that creates a ticket through idemflow, then save the messages),
// with the SDK's mock model scripted, and the user's approval given at
// once. Run again with the same --chat, it sends the saved messages again.
//
//   node dist/agent/vercel.js --chat C --state FILE [--tools idemflow|naive] [--unsafe] [--call-id ID] [--via mcp] [--lost]
//
// with IDEMFLOW_URL and IDEMFLOW_TOKEN set (and IDEMFLOW_BIN for --via mcp).
// --via mcp reaches create_ticket through idemflow's MCP server (idemflow
// mcp over stdio, the official SDK's client): the model writes an
// idempotency_key of its own, new each time it writes the call; with
// --tools idemflow the tool is idemflowMcpTools', keyed as idemflowTool's,
// and with --tools naive the model's key decides (as @ai-sdk/mcp's tools,
// which send no _meta). --lost: the saved messages are gone, and the
// turn is sent again from the user's message. The durable way (default): the
// tool needs approval, so the response that writes the call ends with its
// approval request, the messages are saved, and the call runs in the next
// request, from the saved messages. --unsafe is the setting the README
// warns about: no approval, the messages saved once the response is done
// (as a route's onFinish does), so a server killed mid call loses it.
// --tools naive makes the control: a fresh key on every call.

import { randomUUID } from "node:crypto";
import { existsSync, readFileSync, writeFileSync, renameSync, openSync, fsyncSync, closeSync, rmSync } from "node:fs";
import { parseArgs } from "node:util";
import { Client as MCPClient } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { jsonSchema, stepCountIs, tool, type ModelMessage, type ToolApprovalResponse } from "ai";
import { z } from "zod";
import { Client } from "../src/index.js";
import { generateText, idemflowMcpTools, idemflowTool } from "../src/ai.js";
import { scriptedChat } from "./scripted-chat.js";

const { values } = parseArgs({
  options: {
    chat: { type: "string" },
    state: { type: "string" },
    tools: { type: "string", default: "idemflow" },
    unsafe: { type: "boolean", default: false },
    "call-id": { type: "string" },
    via: { type: "string", default: "function" },
    lost: { type: "boolean", default: false },
  },
});
const chat = values.chat!;
const state = values.state!;
const url = process.env.IDEMFLOW_URL!;
const token = process.env.IDEMFLOW_TOKEN!;
const ticketSchema = z.object({ customer_id: z.string(), title: z.string() });

// The client's attempts time out fast, so that a dropped answer is
// retried at once (the kill comes first).
const client = new Client({ baseURL: url, token, attemptTimeoutMs: 3000, initialBackoffMs: 50, maxBackoffMs: 500 });

function naiveTool(needsApproval: boolean) {
  return tool({
    description: "Create a support ticket.",
    inputSchema: ticketSchema,
    needsApproval,
    execute: async (input) => {
      // The bug of the incident: a key made at call time, new on every call.
      const r = await client.do({ key: randomUUID(), method: "POST", path: "/v1/tickets", body: input });
      return JSON.stringify({ http_status: r.status, replayed: r.replayed, result: r.body });
    },
  });
}

/** Saves the chat's messages durably (write, fsync, rename) before it returns. */
function save(path: string, messages: ModelMessage[]): void {
  const tmp = path + ".tmp";
  writeFileSync(tmp, JSON.stringify(messages));
  const fd = openSync(tmp, "r");
  fsyncSync(fd);
  closeSync(fd);
  renameSync(tmp, path);
}

/** The approval requests the last message leaves undecided. */
function undecided(messages: ModelMessage[]): string[] {
  const last = messages[messages.length - 1];
  if (last?.role !== "assistant" || typeof last.content === "string") return [];
  return last.content.flatMap((p) => (p.type === "tool-approval-request" ? [p.approvalId] : []));
}

/** create_ticket through idemflow's MCP server, as a framework's MCP adapter that sends no _meta makes it: the model's key decides. */
function naiveMcpTool(mcp: MCPClient) {
  return tool({
    description: "Create a support ticket.",
    inputSchema: jsonSchema<Record<string, unknown>>({ type: "object" }),
    needsApproval: true,
    execute: async (input) => {
      const r: any = await mcp.callTool({ name: "create_ticket", arguments: input });
      return r.content.map((c: any) => c.text).join("");
    },
  });
}

if (values.lost) rmSync(state, { force: true });
let mcp: MCPClient | undefined;
let create_ticket: any;
if (values.via === "mcp") {
  mcp = new MCPClient({ name: "vercel-agent", version: "1" });
  await mcp.connect(new StdioClientTransport({ command: process.env.IDEMFLOW_BIN!, args: ["mcp"], env: { IDEMFLOW_URL: url, IDEMFLOW_TOKEN: token, PATH: process.env.PATH ?? "" } }));
  create_ticket = values.tools === "naive" ? naiveMcpTool(mcp) : (await idemflowMcpTools(mcp, { chatId: chat, names: ["create_ticket"] })).create_ticket;
} else {
  create_ticket =
    values.tools === "naive"
      ? naiveTool(!values.unsafe)
      : idemflowTool(client, { name: "create_ticket", description: "Create a support ticket.", inputSchema: ticketSchema, path: "/v1/tickets", chatId: chat, needsApproval: !values.unsafe, callIdsUnique: values.unsafe });
}
const callId = values["call-id"];
const { model } = scriptedChat(chat, callId ? () => callId : undefined, undefined, values.via === "mcp");
const saved = existsSync(state);
let messages: ModelMessage[] = saved && !values.unsafe ? JSON.parse(readFileSync(state, "utf8")) : [{ role: "user", content: "My printer is on fire." }];
console.log(saved && !values.unsafe ? `resuming ${chat} from its saved messages` : `starting ${chat}`);
let text = "";
for (;;) {
  // The user's decision: approve every call, saved before the call runs.
  const pending = undecided(messages);
  if (pending.length > 0) {
    messages.push({ role: "tool", content: pending.map((approvalId): ToolApprovalResponse => ({ type: "tool-approval-response", approvalId, approved: true })) });
    save(state, messages);
    console.log("approved");
  }
  // One request of the chat.
  const r = await generateText({ model, tools: { create_ticket }, messages, stopWhen: stepCountIs(5) });
  messages = [...messages, ...r.response.messages];
  save(state, messages);
  console.log("saved");
  text = r.text;
  if (undecided(messages).length === 0) break;
}
for (const m of messages) {
  if (m.role !== "tool") continue;
  for (const p of m.content) if (p.type === "tool-result") console.log(`tool ${p.toolName} ${p.output.type === "text" ? p.output.value : JSON.stringify(p.output)}`);
}
await mcp?.close();
console.log(`DONE ${text}`);
