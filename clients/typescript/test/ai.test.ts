// The Vercel AI SDK integration (src/ai.ts) against the real stack, with
// the SDK's mock model: a toolCallId reused by a later turn is a second
// call, a pending answer stops the run instead of reaching the model, and
// the shared key vectors. The kill test is typescript_test.go's.

import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { readFile } from "node:fs/promises";
import { test } from "node:test";
import { generateText, stepCountIs, type ModelMessage, type ToolSet } from "ai";
import { z } from "zod";
import { Client } from "../src/index.js";
import { durableKey, idemflowTool, NoDurableIdentityError, PendingRunError, stopOnPending } from "../src/ai.js";
import { scriptedChat } from "../agent/scripted-chat.js";
import { inFreshFolder, partitionProxy, readmeSnippet, ticketsUnder } from "./helpers.js";

const url = process.env.IDEMFLOW_URL!;
const token = process.env.IDEMFLOW_TOKEN!;
const schema = z.object({ customer_id: z.string(), title: z.string() });
/**
 * One turn of a chat as a route runs it: requests over the saved messages
 * until no approval is left undecided, every call approved. saved holds
 * what the app saved; a failed request saves nothing.
 */
async function turn(model: ReturnType<typeof scriptedChat>["model"], tools: ToolSet, saved: ModelMessage[][], guard = true): Promise<ModelMessage[]> {
  let messages = saved[saved.length - 1];
  for (;;) {
    const last = messages[messages.length - 1];
    const undecided = last?.role === "assistant" && typeof last.content !== "string" ? last.content.filter((p) => p.type === "tool-approval-request") : [];
    if (undecided.length > 0) {
      messages = [...messages, { role: "tool", content: undecided.map((p) => ({ type: "tool-approval-response" as const, approvalId: p.approvalId, approved: true })) }];
      saved.push(messages);
    } else if (last?.role === "assistant") {
      return messages;
    }
    const r = await generateText({ model, tools, messages, stopWhen: stepCountIs(5), ...(guard ? { prepareStep: stopOnPending() } : {}) });
    messages = [...messages, ...r.response.messages];
    saved.push(messages);
  }
}

function answers(messages: ModelMessage[]): any[] {
  return messages.flatMap((m) => (m.role === "tool" ? m.content.flatMap((p) => (p.type === "tool-result" && p.output.type === "text" ? [JSON.parse(p.output.value)] : [])) : []));
}

test("a toolCallId reused in a later turn is a second call, not the first one's replay", async () => {
  // A provider that numbers calls per response brings call_0 back in the
  // next turn of the chat: each call has its own approval, its own key.
  const who = "c-ts-ai-reused-" + randomUUID().slice(0, 8);
  const c = new Client({ baseURL: url, token });
  const create_ticket = idemflowTool(c, { name: "create_ticket", description: "Create a ticket.", inputSchema: schema, path: "/v1/tickets", chatId: who });
  const saved: ModelMessage[][] = [[]];
  let messages: ModelMessage[] = [];
  for (const t of ["first", "second"]) {
    saved.push([...messages, { role: "user", content: `${t} turn: open a ticket` }]);
    messages = await turn(scriptedChat(who, () => "call_0").model, { create_ticket }, saved);
  }
  const got = answers(messages);
  console.log(`two turns under call_0: replayed ${got.map((a) => a.replayed)}, tickets ${got.map((a) => a.result.ticket_id)}`);
  assert.deepEqual(got.map((a) => a.replayed), [false, false]);
  assert.notEqual(got[0].result.ticket_id, got[1].result.ticket_id, "two tickets");
});

// A partition longer than the tool's wait: with stopOnPending the request
// fails (PendingRunError), the model is handed nothing, and the request
// made again with the saved messages gets the first call's answer: one
// effect. The control, the same tool without stopOnPending, hands the model
// the error; the model calls again under a new toolCallId and a new
// approval, a new key: two effects.
test("a pending answer stops the run, and never reaches the model as an error", async () => {
  const { state, base, close } = await partitionProxy(url);
  const keys = state.keys;
  const c = new Client({ baseURL: base, token, attemptTimeoutMs: 300, initialBackoffMs: 20, maxBackoffMs: 100 });
  const effects = (customer: string) => ticketsUnder(new Client({ baseURL: url, token }), keys, customer);
  try {
    const who = "c-ts-ai-pending-" + randomUUID().slice(0, 8);
    const tools = { create_ticket: idemflowTool(c, { name: "create_ticket", description: "Create a ticket.", inputSchema: schema, path: "/v1/tickets", chatId: who, waitMs: 1200 }) };
    const { model, outputs } = scriptedChat(who);
    const saved: ModelMessage[][] = [[{ role: "user", content: "Open a ticket." }]];
    await assert.rejects(turn(model, tools, saved), PendingRunError);
    assert.deepEqual(outputs, [], "the model was handed nothing");
    state.partitioned = false;
    const done = await turn(model, tools, saved);
    assert.deepEqual(answers(done).map((a) => a.replayed), [true], "the call made again got the first call's answer");
    assert.equal(await effects(who), 1);

    keys.length = 0;
    state.partitioned = true;
    const naive = "c-ts-ai-pending-control-" + randomUUID().slice(0, 8);
    const ctl = scriptedChat(naive);
    const controlTools = { create_ticket: idemflowTool(c, { name: "create_ticket", description: "Create a ticket.", inputSchema: schema, path: "/v1/tickets", chatId: naive, waitMs: 1200 }) };
    await turn(ctl.model, controlTools, [[{ role: "user", content: "Open a ticket." }]], false);
    console.log(`pending answer: one ticket after the resume; the control: ${ctl.outputs.length} errors to the model`);
    assert.equal(ctl.outputs.length, 2, `the control hands the model the wait's end as an error, twice: ${ctl.outputs}`);
    assert.ok(ctl.outputs.every((o) => o.startsWith("error:")));
    state.partitioned = false;
    assert.equal(await effects(naive), 2, "the control's retry under a new key made a second ticket");
  } finally {
    close();
  }
});

test("the shared key vectors (vercel_ai)", async () => {
  const v = JSON.parse(await readFile(new URL("../../../testdata/keys.json", import.meta.url), "utf8")) as {
    vercel_ai: { name: string; chat_id: string; messages: ModelMessage[]; tool_call_id: string; tool: string; call_ids_unique?: boolean; key?: string; error?: string }[];
  };
  assert.ok(v.vercel_ai.length > 0);
  for (const c of v.vercel_ai) {
    const derive = () => durableKey(c.chat_id, c.messages, c.tool_call_id, c.tool, c.call_ids_unique ?? false);
    if (c.error) {
      assert.throws(derive, (e: Error) => e instanceof NoDurableIdentityError && e.message.includes(c.error!), c.name);
    } else {
      assert.equal(derive(), c.key, c.name);
    }
  }
});

test("the README's snippet runs as written, and run again makes no second ticket", async () => {
  // The only change: the mock model in place of openai/gpt-4.1.
  const file = await readmeSnippet("### The Vercel AI SDK (`clients/typescript`, `ai` 6)", "readme-vercel", [['model: "openai/gpt-4.1"', "model: globalThis.IDEMFLOW_README_MODEL"]]);
  const { model, outputs } = scriptedChat("c-1");
  (globalThis as any).IDEMFLOW_README_MODEL = model;
  await inFreshFolder(url, async (run) => {
    await run(1);
    const first = outputs.map((o) => JSON.parse(JSON.parse(o).value));
    assert.equal(first.length, 1, `one ticket call: ${outputs}`);
    assert.equal(first[0].http_status, 201);
    await run(2);
    assert.equal(outputs.length, 1, "run again from its saved messages, the snippet called the tool again");
    assert.equal(model.doGenerateCalls.length, 2, "run again from its saved messages, the snippet asked the model again");
  }, file);
});
