// An OpenAI Agents SDK (JavaScript) agent for the kill tests
// (typescript_test.go): a real Agent and Runner, a scripted model, and one
// tool that creates a ticket through idemflow. Run again with the same
// --conversation, it resumes from the RunState it saved.
//
//   node dist/agent/openai-agent.js --conversation C --state FILE [--tools idemflow|naive] [--unsafe] [--lost] [--key-scheme oa2|oa1] [--via mcp]
//
// --via mcp reaches create_ticket through idemflow's MCP server (idemflow
// mcp over stdio, the official SDK's client; IDEMFLOW_BIN names it): the
// model writes an idempotency_key of its own, new each time it writes the
// call; --tools idemflow makes the tool idemflowMcpFunctionTools', keyed as
// idemflowFunctionTool's, --tools naive leaves the key to the model.
//
// with IDEMFLOW_URL and IDEMFLOW_TOKEN set. The durable way (default) is
// runDurably: the tool needs approval, and the RunState is saved, with the
// call's IDs, before the call runs. --unsafe is the setting the README
// warns about: no approval, nothing saved, so a run killed mid call starts
// again and the model writes the call again. --lost: the saved RunState
// is gone when the run starts (a store lost), so the app sends the turn
// again, and the model writes the call under new IDs (the same intended
// call under oa2, a new key under --key-scheme oa1). --tools naive makes
// the control: a fresh key on every call.

import { randomUUID } from "node:crypto";
import { closeSync, existsSync, fsyncSync, openSync, readFileSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { parseArgs } from "node:util";
import { agentFlags } from "./flags.js";
import { Client as MCPClient } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { Agent, Runner, tool, Usage, type Model, type ModelRequest, type ModelResponse } from "@openai/agents";
import { z } from "zod";
import { Client } from "../src/index.js";
import { idemflowFunctionTool, idemflowMcpFunctionTools, runDurably } from "../src/openai-agents.js";

const { values } = parseArgs({
  options: {
    ...agentFlags,
    lost: { type: "boolean", default: false },
    "key-scheme": { type: "string", default: "oa2" },
    via: { type: "string", default: "function" },
  },
});
const viaMcp = values.via === "mcp";
const conversation = values.conversation!;
const state = values.state!;
const ticketSchema = z.object({ customer_id: z.string(), title: z.string() });

// The client's attempts time out fast, so that a dropped answer is
// retried at once (the kill comes first).
const client = new Client({ baseURL: process.env.IDEMFLOW_URL!, token: process.env.IDEMFLOW_TOKEN!, attemptTimeoutMs: 3000, initialBackoffMs: 50, maxBackoffMs: 500 });

/**
 * Asks for one ticket until a tool's output is in its input, then
 * answers. Each call it writes has new IDs (an item ID and a call ID), as
 * a real model's: only a saved RunState keeps them.
 */
class ScriptedModel implements Model {
  async getResponse(request: ModelRequest): Promise<ModelResponse> {
    const items = Array.isArray(request.input) ? request.input : [];
    if (items.some((i: any) => i.type === "function_call_result")) {
      return { usage: new Usage(), output: [{ type: "message", role: "assistant", status: "completed", content: [{ type: "output_text", text: "The ticket is open." }] }] };
    }
    // Through MCP, the call carries an idempotency_key the model wrote.
    const args = JSON.stringify({ ...(viaMcp ? { idempotency_key: randomUUID() } : {}), customer_id: conversation, title: "Printer on fire" });
    return { usage: new Usage(), output: [{ type: "function_call", id: `fc_${randomUUID()}`, callId: `call_${randomUUID()}`, name: "create_ticket", arguments: args, status: "completed" }] };
  }
  getStreamedResponse(): AsyncIterable<any> {
    throw new Error("not streamed");
  }
}

function naiveTool(needsApproval: boolean) {
  return tool({
    name: "create_ticket",
    description: "Create a support ticket.",
    parameters: ticketSchema,
    needsApproval,
    execute: async (input) => {
      // The bug of the incident: a key made at call time, new on every call.
      const r = await client.do({ key: randomUUID(), method: "POST", path: "/v1/tickets", body: input });
      return JSON.stringify({ http_status: r.status, replayed: r.replayed, result: r.body });
    },
  });
}

/** create_ticket through idemflow's MCP server, its key the model's. */
function naiveMcpTool(mcp: MCPClient) {
  return tool({
    name: "create_ticket",
    description: "Create a support ticket.",
    parameters: { type: "object", properties: {}, required: [], additionalProperties: true } as any,
    strict: false,
    needsApproval: true,
    execute: async (input: any) => {
      const r: any = await mcp.callTool({ name: "create_ticket", arguments: typeof input === "string" ? JSON.parse(input) : input });
      return r.content.map((c: any) => c.text).join("");
    },
  } as any);
}

let mcp: MCPClient | undefined;
let createTicket: any;
if (viaMcp) {
  mcp = new MCPClient({ name: "oa-js-agent", version: "1" });
  await mcp.connect(new StdioClientTransport({ command: process.env.IDEMFLOW_BIN!, args: ["mcp"], env: { IDEMFLOW_URL: process.env.IDEMFLOW_URL!, IDEMFLOW_TOKEN: process.env.IDEMFLOW_TOKEN!, PATH: process.env.PATH ?? "" } }));
  createTicket = values.tools === "naive" ? naiveMcpTool(mcp) : (await idemflowMcpFunctionTools(mcp, { conversation, names: ["create_ticket"] }))[0];
} else {
  createTicket =
    values.tools === "naive"
      ? naiveTool(!values.unsafe)
      : idemflowFunctionTool(client, { name: "create_ticket", description: "Create a support ticket.", parameters: ticketSchema, path: "/v1/tickets", conversation, needsApproval: !values.unsafe, keyScheme: values["key-scheme"] as "oa2" | "oa1" });
}
const agent = new Agent({ name: "support", instructions: "Open a ticket for the customer.", tools: [createTicket], model: new ScriptedModel() });
const runner = new Runner({ tracingDisabled: true, groupId: conversation });

if (values.lost) rmSync(state, { force: true });
let result;
if (values.unsafe) {
  console.log(`starting ${conversation} (nothing saved)`);
  result = await runner.run(agent, "My printer is on fire.");
} else {
  result = await runDurably(runner, agent, "My printer is on fire.", {
    load: async () => {
      if (!existsSync(state)) {
        console.log(`starting ${conversation}`);
        return undefined;
      }
      console.log(`resuming ${conversation} from its saved RunState`);
      return readFileSync(state, "utf8");
    },
    save: async (s) => {
      writeFileSync(state + ".tmp", s);
      const fd = openSync(state + ".tmp", "r");
      fsyncSync(fd);
      closeSync(fd);
      renameSync(state + ".tmp", state);
      console.log("saved");
    },
  });
}
for (const item of result.newItems) {
  if (item.type === "tool_call_output_item") console.log(`tool create_ticket ${(item as any).output}`);
}
await mcp?.close();
console.log(`DONE ${result.finalOutput}`);
