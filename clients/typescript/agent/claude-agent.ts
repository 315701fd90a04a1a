// A Claude Agent SDK agent for the kill tests (typescript_test.go): the
// SDK's query() with idemflow's create_ticket in an in-process MCP server,
// against a scripted model behind a local stand-in for the Messages API
// (agent/model-api.ts; no network). Run again with the same
// --conversation and --state, it sends the same turn again on its session,
// resumed, as an app does after a crash.
//
//   node dist/agent/claude-agent.js --conversation C --state FILE [--tools idemflow|naive] [--unsafe] [--fork rerun|new] [--reword] [--by-arguments]
//
// with IDEMFLOW_URL and IDEMFLOW_TOKEN set. --tools naive is the control:
// the key is the call's tool_use ID, which the model writes anew when it
// writes the call again. --unsafe: an app that does not keep the turn's
// ID, and gives each run a new one.

import { createHash, randomUUID } from "node:crypto";
import { dirname, join } from "node:path";
import { parseArgs } from "node:util";
import { agentFlags } from "./flags.js";
import { createSdkMcpServer, getSessionInfo, tool } from "@anthropic-ai/claude-agent-sdk";
import { z } from "zod";
import { Client } from "../src/index.js";
import { idemflowTool, runDurably, type DurableTurn } from "../src/claude-agent.js";
import { answerText } from "../src/tooltext.js";
import { startModel } from "./model-api.js";

const { values } = parseArgs({
  options: {
    ...agentFlags,
    // Run again after a crash as a fork into a new session (a chat's "retry
    // in a new branch"): rerun names the turn it re-runs, new does not (a
    // new conversation, its own state file).
    fork: { type: "string" },
    // The model words the call otherwise when the turn is sent again.
    reword: { type: "boolean" },
    // The control of a reworded call: create_ticket named by its whole
    // arguments (as cl1 named every call), not its intent fields.
    "by-arguments": { type: "boolean" },
  },
});
const conversation = values.conversation!;
const state = values.state!;
// The session's ID: a UUID the app chose once for the conversation.
const h = createHash("sha256").update(conversation).digest("hex");
const sessionId = `${h.slice(0, 8)}-${h.slice(8, 12)}-4${h.slice(13, 16)}-8${h.slice(17, 20)}-${h.slice(20, 32)}`;
// Claude's sessions live beside the state, not in the user's ~/.claude.
process.env.CLAUDE_CONFIG_DIR = join(dirname(state), "claude");

const client = new Client({ baseURL: process.env.IDEMFLOW_URL!, token: process.env.IDEMFLOW_TOKEN!, attemptTimeoutMs: 3000, initialBackoffMs: 50, maxBackoffMs: 500 });
const schema = { customer_id: z.string(), title: z.string() };
const createTicket =
  values.tools === "naive"
    ? tool("create_ticket", "Create a support ticket.", schema, async (args, extra: any) => {
        // The tool_use ID: the model writes a new one with the call.
        const r = await client.do({ key: `naive-${extra?._meta?.["claudecode/toolUseId"] ?? randomUUID()}`, method: "POST", path: "/v1/tickets", body: args });
        return { content: [{ type: "text" as const, text: answerText(r) }] };
      })
    : idemflowTool(client, { name: "create_ticket", description: "Create a support ticket.", inputSchema: schema, path: "/v1/tickets" });

const again = await getSessionInfo(sessionId, { dir: dirname(state) });
const model = await startModel(conversation, values.reword && again ? "The printer is smoking, please help" : "Printer on fire");
const options = {
  mcpServers: { idemflow: createSdkMcpServer({ name: "idemflow", tools: [createTicket] }) },
  allowedTools: ["mcp__idemflow__create_ticket"],
  tools: [],
  cwd: dirname(state),
  maxTurns: 6,
  env: {
    PATH: process.env.PATH ?? "",
    CLAUDE_CONFIG_DIR: process.env.CLAUDE_CONFIG_DIR,
    ANTHROPIC_BASE_URL: model.url,
    ANTHROPIC_API_KEY: "sk-ant-test",
    CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: "1",
    DISABLE_TELEMETRY: "1",
  },
};
const turnId = values.unsafe ? randomUUID() : "msg-1";
const known = await getSessionInfo(sessionId, { dir: dirname(state) });
const intents = values["by-arguments"] ? { create_ticket: [] } : undefined;
let turn: DurableTurn = { sessionId, turnId, state, intents };
if (known && values.fork) {
  const b = createHash("sha256").update(conversation + "-fork").digest("hex");
  const forkId = `${b.slice(0, 8)}-${b.slice(8, 12)}-4${b.slice(13, 16)}-8${b.slice(17, 20)}-${b.slice(20, 32)}`;
  turn = values.fork === "rerun" ? { sessionId: forkId, turnId, state, forkOf: sessionId, rerun: true, intents } : { sessionId: forkId, turnId, state: state + ".fork", forkOf: sessionId, intents };
  console.log(`forking ${conversation} into a new session (${values.fork})`);
} else {
  console.log(known ? `resuming ${conversation} on its session` : `starting ${conversation}`);
}
for await (const m of runDurably({ prompt: "Open a ticket: my printer is on fire.", options }, turn)) {
  if (m.type === "user" && Array.isArray(m.message.content)) {
    for (const part of m.message.content as any[]) {
      if (part.type !== "tool_result") continue;
      const text = Array.isArray(part.content) ? part.content.map((c: any) => c.text ?? "").join("") : String(part.content);
      if (text.includes("http_status")) console.log(`tool create_ticket ${text}`);
    }
  }
  if (m.type === "result") console.log(`result ${m.subtype}`);
}
await model.close();
console.log("DONE");
