// The Vercel AI SDK integration (src/ai.ts) against the real stack, with
// the SDK's mock model: a toolCallId reused by a later turn is a second
// call, a pending answer stops the run instead of reaching the model, and
// the shared key vectors. The kill test is typescript_test.go's.

import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { readFile } from "node:fs/promises";
import { test } from "node:test";
import { convertToModelMessages, generateText as sdkGenerateText, readUIMessageStream, stepCountIs, type ModelMessage, type ToolSet, type UIMessage } from "ai";
import { z } from "zod";
import { Client } from "../src/index.js";
import { durableKey, generateText, idemflowTool, NoDurableIdentityError, pendingMark, PendingRunError, streamText } from "../src/ai.js";
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
    // The guarded generateText, or (the control) the SDK's own.
    const r = await (guard ? generateText : sdkGenerateText)({ model, tools, messages, stopWhen: stepCountIs(5) });
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
    const controlTools = {
      create_ticket: idemflowTool(c, { name: "create_ticket", description: "Create a ticket.", inputSchema: schema, path: "/v1/tickets", chatId: naive, waitMs: 1200, guarded: false }),
    };
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

/**
 * One request of a chat as useChat and a streamText route make it: the
 * route streams the response to the saved UI messages
 * (toUIMessageStream), the client reads it into the chat's last message
 * (readUIMessageStream, continuing an assistant message as useChat does)
 * and saves the chat. A request whose stream ends in an error saves what
 * it read, as useChat keeps it.
 */
async function streamed(model: ReturnType<typeof scriptedChat>["model"], tools: ToolSet, chat: UIMessage[]): Promise<UIMessage[]> {
  const result = streamText({ model, tools, messages: await convertToModelMessages(chat), stopWhen: stepCountIs(5) });
  const last = chat[chat.length - 1];
  const continued = last?.role === "assistant" ? last : undefined;
  let message: UIMessage | undefined = continued;
  for await (const m of readUIMessageStream({ message: continued, stream: result.toUIMessageStream({ originalMessages: chat }), onError: () => {} })) {
    message = m;
  }
  return continued ? [...chat.slice(0, -1), message!] : [...chat, message!];
}

/** The user approves every call the chat's last message asks approval for, as addToolApprovalResponse does. */
function approveAll(chat: UIMessage[]): UIMessage[] {
  const last = chat[chat.length - 1];
  const parts = last.parts.map((p: any) => (p.state === "approval-requested" ? { ...p, state: "approval-responded", approval: { ...p.approval, approved: true } } : p));
  return [...chat.slice(0, -1), { ...last, parts }];
}

// A streamed chat continued as useChat continues one, and a partition
// longer than the tool's wait: the stream carries no pending answer, the
// chat saves none, the model's prompts never hold one, and the chat's
// saved messages sent again run the call again under its key: one ticket.
test("a streamed chat never hands on a pending answer, and its saved messages sent again resume the call", async () => {
  const { state, base, close } = await partitionProxy(url);
  const c = new Client({ baseURL: base, token, attemptTimeoutMs: 300, initialBackoffMs: 20, maxBackoffMs: 100 });
  try {
    const who = "c-ts-ai-stream-" + randomUUID().slice(0, 8);
    const tools = { create_ticket: idemflowTool(c, { name: "create_ticket", description: "Create a ticket.", inputSchema: schema, path: "/v1/tickets", chatId: who, waitMs: 1200 }) };
    const { model, prompts } = scriptedChat(who);
    let chat: UIMessage[] = [{ id: "u1", role: "user", parts: [{ type: "text", text: "Open a ticket." }] }];
    chat = await streamed(model, tools, chat); // the call and its approval request
    chat = approveAll(chat);
    state.partitioned = true;
    chat = await streamed(model, tools, chat); // the approved call runs; its answer does not come
    const saved = JSON.stringify(chat);
    assert.ok(!saved.includes(pendingMark), `the saved chat holds a pending answer: ${saved}`);
    assert.equal(state.keys.filter((k) => k).length > 0, true, "the call was sent");
    // Sent again while the partition lasts: still nothing pending saved.
    chat = await streamed(model, tools, chat);
    assert.ok(!JSON.stringify(chat).includes(pendingMark), "the saved chat holds a pending answer after a second try");
    state.partitioned = false;
    chat = await streamed(model, tools, chat); // the same call, its key, its answer
    const keys = new Set(state.keys.filter((k) => k));
    const tickets = await ticketsUnder(new Client({ baseURL: url, token }), [...keys], who);
    const pendingPrompts = prompts.filter((p) => p.includes(pendingMark));
    const answer = chat[chat.length - 1].parts.find((p: any) => p.type === "tool-create_ticket") as any;
    console.log(`streamed chat: ${prompts.length} prompts, ${pendingPrompts.length} with a pending answer; keys sent ${[...keys]}; the call's state ${answer?.state}; ${tickets} ticket`);
    assert.equal(pendingPrompts.length, 0, `a prompt held a pending answer: ${pendingPrompts[0]}`);
    assert.equal(keys.size, 1, "every try sent the call's one key");
    assert.equal(answer?.state, "output-available", JSON.stringify(answer));
    assert.equal(tickets, 1);
  } finally {
    close();
  }
});

// The guard is on by default: under the SDK's own generateText the tool
// sends nothing.
test("an idemflow tool under the SDK's own generateText sends nothing", async () => {
  const { state, base, close } = await partitionProxy(url);
  state.partitioned = false;
  try {
    const who = "c-ts-ai-unguarded-" + randomUUID().slice(0, 8);
    const c = new Client({ baseURL: base, token });
    const create_ticket = idemflowTool(c, { name: "create_ticket", description: "Create a ticket.", inputSchema: schema, path: "/v1/tickets", chatId: who, needsApproval: false, callIdsUnique: true });
    const { model, outputs } = scriptedChat(who);
    await sdkGenerateText({ model, tools: { create_ticket }, messages: [{ role: "user", content: "Open a ticket." }], stopWhen: stepCountIs(5) });
    assert.ok(outputs.length > 0 && outputs.every((o) => o.includes("@idemflow/client/ai")), outputs.join("\n"));
    assert.deepEqual(state.keys, [], "a request was sent");
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
  const file = await readmeSnippet("# The Vercel AI SDK (`clients/typescript`, `ai` 6)\n", "readme-vercel", [['model: "openai/gpt-4.1"', "model: globalThis.IDEMFLOW_README_MODEL"]]);
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
