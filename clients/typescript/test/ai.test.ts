// The Vercel AI SDK integration (src/ai.ts) against the real stack, with
// the SDK's mock model: a toolCallId reused by a later turn is a second
// call, a pending answer stops the run instead of reaching the model, and
// the shared key vectors. The kill test is typescript_test.go's.

import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { readFile } from "node:fs/promises";
import { dirname } from "node:path";
import { test } from "node:test";
import { createServer } from "node:http";
import {
  AbstractChat, type ChatState, type ChatStatus, convertToModelMessages, DefaultChatTransport, generateText as sdkGenerateText,
  lastAssistantMessageIsCompleteWithApprovalResponses, readUIMessageStream, stepCountIs, type ModelMessage, type ToolSet, type UIMessage,
} from "ai";
import { z } from "zod";
import { callIntent, Client, type IntentField } from "../src/index.js";
import { Client as MCPClient } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import {
  durableKey,
  generateText,
  idemflowMcpTools,
  idemflowTool,
  type KeyScheme,
  NoDurableIdentityError,
  PendingAnswerError,
  pendingMark,
  PendingRunError,
  streamText,
} from "../src/ai.js";
import { scriptedChat } from "../agent/scripted-chat.js";
import { inFreshFolder, mcpHttp, partitionProxy, readmeSnippet, ticketsUnder } from "./helpers.js";

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

/** useChat's state, as @ai-sdk/react keeps it, with every status it took. */
class ChatMemory implements ChatState<UIMessage> {
  messages: UIMessage[] = [];
  error: Error | undefined;
  readonly statuses: ChatStatus[] = [];
  #status: ChatStatus = "ready";
  get status(): ChatStatus {
    return this.#status;
  }
  set status(s: ChatStatus) {
    this.#status = s;
    this.statuses.push(s);
  }
  pushMessage = (m: UIMessage) => {
    this.messages = [...this.messages, m];
  };
  popMessage = () => {
    this.messages = this.messages.slice(0, -1);
  };
  replaceMessage = (i: number, m: UIMessage) => {
    this.messages = [...this.messages.slice(0, i), m, ...this.messages.slice(i + 1)];
  };
  snapshot = <T>(t: T): T => structuredClone(t);
}

/** The SDK's own chat state machine (AbstractChat, which useChat wraps), set up for approvals as useChat's docs set it up. */
class Chat extends AbstractChat<UIMessage> {
  constructor(
    readonly memory: ChatMemory,
    id: string,
    api: string,
  ) {
    super({ id, state: memory, transport: new DefaultChatTransport({ api }), sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithApprovalResponses });
  }
}

/**
 * A chat route as an app writes one (the chat's id and messages from
 * useChat, this module's streamText, the UI stream piped back), with the
 * idemflow tool made per request; the scripted model's title is what
 * title() says at the time. While crash is armed, the first request
 * whose call has reached idemflow (sent()) dies there: its connection is
 * cut, as a server's is when its process dies mid call, before anything
 * of the request was saved.
 */
async function chatRoute(c: Client, who: string, title: () => string, keyScheme?: KeyScheme, crash?: { armed: boolean; sent: () => boolean }) {
  const { model, prompts } = scriptedChat(who, undefined, title);
  const seen = { requests: 0 };
  const server = createServer(async (req, res) => {
    seen.requests++;
    let raw = "";
    for await (const chunk of req) raw += chunk;
    const body = JSON.parse(raw) as { id: string; messages: UIMessage[] };
    const tools = {
      create_ticket: idemflowTool(c, { name: "create_ticket", description: "Create a ticket.", inputSchema: schema, path: "/v1/tickets", chatId: body.id, waitMs: 1200, keyScheme }),
    };
    const result = streamText({ model, tools, messages: await convertToModelMessages(body.messages), stopWhen: stepCountIs(5) });
    result.pipeUIMessageStreamToResponse(res, { originalMessages: body.messages });
    if (crash?.armed) {
      const watch = setInterval(() => {
        if (!crash.armed || !crash.sent()) return;
        crash.armed = false;
        res.destroy();
      }, 10);
      res.on("close", () => clearInterval(watch));
    }
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  return { api: `http://127.0.0.1:${(server.address() as { port: number }).port}/api/chat`, prompts, seen, close: () => server.close() };
}

/** Waits until ok holds, failing at once when the chat goes to status error. */
async function until(chat: Chat, what: string, ok: () => boolean, ms = 60_000): Promise<void> {
  const end = Date.now() + ms;
  while (!ok()) {
    if (chat.memory.statuses.includes("error")) throw new Error(`the chat went to status error, waiting for ${what}: ${chat.error?.message}`);
    if (Date.now() > end) throw new Error(`no ${what} within ${ms} ms: ${JSON.stringify(chat.messages)}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

const answered = (chat: Chat) => () => chat.status === "ready" && JSON.stringify(chat.lastMessage?.parts ?? []).includes("The ticket is open.");

/** Approves every call the chat's last message asks approval for, as an approval button calls addToolApprovalResponse. */
async function approveEvery(chat: Chat): Promise<void> {
  await until(chat, "an approval request", () => chat.status === "ready" && (chat.lastMessage?.parts ?? []).some((p: any) => p.state === "approval-requested"));
  for (const p of chat.lastMessage!.parts as any[]) if (p.state === "approval-requested") await chat.addToolApprovalResponse({ id: p.approval.id, approved: true });
}

/**
 * useChat with the approval flow and a partition longer than the tool's
 * wait, then the Retry button (regenerate), as the usual error UI calls
 * it. With reword, the model words the regenerated call otherwise. With
 * crash, the approved call's request dies after the call reached idemflow
 * (the user sees the error), and the Retry button comes after it.
 */
async function chatCase(keyScheme: KeyScheme | undefined, reword: boolean, crash = false) {
  const { state, base, close } = await partitionProxy(url);
  const c = new Client({ baseURL: base, token, attemptTimeoutMs: 300, initialBackoffMs: 20, maxBackoffMs: 100 });
  const who = "c-ts-ai-usechat-" + randomUUID().slice(0, 8);
  let title = "Printer on fire";
  const dies = { armed: false, sent: () => state.keys.length > 0 };
  const route = await chatRoute(c, who, () => title, keyScheme, dies);
  try {
    const chat = new Chat(new ChatMemory(), who, route.api);
    await chat.sendMessage({ text: "Open a ticket." });
    state.partitioned = true;
    dies.armed = crash;
    await approveEvery(chat);
    if (crash) {
      const end = Date.now() + 30_000;
      while (!chat.memory.statuses.includes("error") && Date.now() < end) await new Promise((r) => setTimeout(r, 20));
      assert.ok(chat.memory.statuses.includes("error"), "the request that died did not end in status error");
      chat.memory.statuses.length = 0;
      state.partitioned = false;
    } else {
      // The chat sends itself again after a pending answer: the partition
      // outlasts the approved request's wait and one more request's.
      await until(chat, "a request the chat sent by itself after a pending answer", () => route.seen.requests >= 3);
      state.partitioned = false;
      await until(chat, "the call's final answer", answered(chat));
    }
    const before = new Set(state.keys);
    if (reword) title = "Printer on fire, again";
    await chat.regenerate(); // the Retry button
    await approveEvery(chat);
    await until(chat, "the regenerated call's final answer", answered(chat));
    const keys = new Set(state.keys);
    const after = [...keys].filter((k) => !before.has(k));
    const direct = new Client({ baseURL: url, token });
    const tickets = (await ticketsUnder(direct, [...before], who)) + (await ticketsUnder(direct, after, who, title));
    const pending = route.prompts.filter((p) => p.includes(pendingMark)).length;
    return { keys, before, tickets, pending, statuses: chat.memory.statuses, requests: route.seen.requests };
  } finally {
    route.close();
    close();
  }
}

// The pending answer ends the response as finished, not as an error, so
// the chat's own sendAutomaticallyWhen sends it again until the answer
// comes, under the call's one key; the Retry button after it makes the
// model write the same call under new IDs and a new approval: the same
// key, a replay.
test("useChat's own continuation resumes a pending call, and its Retry button makes no second ticket", async () => {
  const r = await chatCase(undefined, false);
  console.log(
    `useChat: ${r.requests} requests, statuses ${[...new Set(r.statuses)]}; keys ${[...r.keys]}; ${r.pending} prompts with a pending answer; ${r.tickets} ticket(s) after the Retry button`,
  );
  assert.ok(!r.statuses.includes("error"), "the chat went to status error");
  assert.equal(r.pending, 0, "a prompt held a pending answer");
  assert.equal(r.before.size, 1, `the approved call was tried under more than one key: ${[...r.before]}`);
  assert.equal(r.keys.size, 1, `the regenerated call got another key: ${[...r.keys]}`);
  assert.equal(r.tickets, 1);
});

// A real model at its usual temperature words the regenerated call
// otherwise: the same customer, the same intent (va3 keys its intent
// fields), one key and one ticket. Under va2, which keyed the whole
// arguments, the control: a second key and a second ticket.
test("a regenerated call that the model rewords is the same key and one ticket", async () => {
  const r = await chatCase(undefined, true);
  console.log(`useChat, reworded on Retry: keys ${[...r.keys]}; ${r.tickets} ticket(s)`);
  assert.equal(r.keys.size, 1, `the reworded call got another key: ${[...r.keys]}`);
  assert.equal(r.tickets, 1);
});

test("its control: under va2 a regenerated call that the model rewords is a new key and a second ticket", async () => {
  const r = await chatCase("va2", true);
  console.log(`useChat under va2, reworded on Retry: keys ${[...r.keys]}; ${r.tickets} ticket(s)`);
  assert.equal(r.keys.size, 2);
  assert.equal(r.tickets, 2);
});

// A turn restarted before anything of it was saved: the server dies while
// the approved call runs (idemflow executed it; its answer is held), the
// chat goes to status error, and the Retry button makes the model write
// the call again under new IDs: the same key, one ticket.
test("the Retry button after a server died mid call makes no second ticket", async () => {
  const r = await chatCase(undefined, false, true);
  console.log(`useChat, the server died mid call, then Retry: keys ${[...r.keys]}; ${r.tickets} ticket(s)`);
  assert.equal(r.keys.size, 1, `the call written again got another key: ${[...r.keys]}`);
  assert.equal(r.tickets, 1);
});

test("its control: under va1 the Retry button after a server died mid call makes a second ticket", async () => {
  const r = await chatCase("va1", false, true);
  console.log(`useChat under va1, the server died mid call, then Retry: keys ${[...r.keys]}; ${r.tickets} ticket(s)`);
  assert.equal(r.tickets, 2);
});

test("the control: va1's keys (the approval and the toolCallId) make a second ticket on the Retry button", async () => {
  const r = await chatCase("va1", false);
  console.log(`useChat under va1: keys ${[...r.keys]}; ${r.tickets} ticket(s) after the Retry button`);
  assert.equal(r.tickets, 2);
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
    vercel_ai: {
      name: string;
      chat_id: string;
      messages: ModelMessage[];
      tool_call_id: string;
      tool: string;
      call_ids_unique?: boolean;
      turn_id?: string;
      key_scheme?: "va1" | "va2" | "va3";
      intent?: IntentField[];
      key?: string;
      error?: string;
    }[];
  };
  assert.ok(v.vercel_ai.length > 0);
  for (const c of v.vercel_ai) {
    // An entry without a key_scheme is va2's (the whole arguments); va3's names the tool's intent fields.
    const scheme = c.key_scheme ?? "va2";
    const intent = scheme === "va3" ? (a: Record<string, unknown>) => callIntent(c.intent ?? [], a) : undefined;
    const derive = () => durableKey(c.chat_id, c.messages, c.tool_call_id, c.tool, { callIdsUnique: c.call_ids_unique, turnId: c.turn_id, keyScheme: scheme, intent });
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

// idemflowMcpTools over streamable HTTP, with slow_refund, whose service
// takes 4 s: a call waits on its task and gets its own answer (not a
// replay); a call whose waitMs ends first is pending (PendingAnswerError,
// which the guard keeps from the model); the same call written again
// under new IDs and a new model-written idempotency_key (a regenerate)
// gets the first call's answer, a replay.
test("idemflowMcpTools waits on a call's task for its own answer, and a pending call is never an answer", async () => {
  const mcp = new MCPClient({ name: "ts-ai-mcp", version: "1" });
  await mcp.connect(new StreamableHTTPClientTransport(new URL(process.env.IDEMFLOW_MCP_URL!), { requestInit: { headers: { Authorization: `Bearer ${token}` } } }));
  try {
    const who = "c-ts-ai-mcp-" + randomUUID().slice(0, 8);
    const call = (id: string, input: Record<string, unknown>) => ({
      toolCallId: id,
      messages: [
        { role: "user", content: "Refund 1 euro." },
        { role: "assistant", content: [{ type: "tool-call", toolCallId: id, toolName: "slow_refund", input }] },
      ] as ModelMessage[],
    });
    const refund = (n: number) => ({ idempotency_key: randomUUID(), payment_id: `p-${who}-${n}`, amount_cents: 100 });
    const tools = async (chatId: string, waitMs: number) => (await idemflowMcpTools(mcp, { chatId, names: ["slow_refund"], waitMs, guarded: false })).slow_refund as any;

    const start = Date.now();
    const first = JSON.parse(await (await tools(who, 30_000)).execute(refund(1), call("call_1", refund(1))));
    const took = Date.now() - start;
    assert.equal(first.replayed, false, JSON.stringify(first));
    assert.ok(took > 3000, `answered after ${took} ms, before the service did`);

    const input = refund(2);
    const cut = Date.now();
    await assert.rejects((await tools(who + "-p", 1000)).execute(input, call("call_2", input)), (e) => e instanceof PendingAnswerError && e.message.startsWith(pendingMark));
    const bound = Date.now() - cut;
    assert.ok(bound < 3000, `a 1 s wait ended after ${bound} ms`);
    const rewritten = { ...input, idempotency_key: randomUUID() };
    const again = JSON.parse(await (await tools(who + "-p", 30_000)).execute(rewritten, call("call_9", rewritten)));
    assert.equal(again.replayed, true, JSON.stringify(again));
    console.log(`idemflowMcpTools: a 4 s call waited on its task (${took} ms, replayed false); a 1 s wait was pending after ${bound} ms; the call written again: replayed true`);
  } finally {
    await mcp.close();
  }
});

// #77: idemflow mcp --http whose gateway is partitioned, and which, with
// no grace, answers every request it cannot verify with a 503
// (--verify-ttl 1s --verify-grace 0): the call waits through the MCP
// errors under its key and is pending past its wait, never an MCP error
// handed on; on a new connection once the partition ended, the same call
// is the call's answer, one ticket.
test("idemflowMcpTools waits through an MCP server's errors while its gateway is partitioned, and is pending, never an error", async () => {
  const proxy = await partitionProxy(url);
  proxy.state.partitioned = false;
  const server = await mcpHttp(proxy.base, "--verify-ttl", "1s", "--verify-grace", "0", "--task-wait", "1s");
  const connect = async () => {
    const mcp = new MCPClient({ name: "ts-ai-mcp-partition", version: "1" });
    await mcp.connect(new StreamableHTTPClientTransport(new URL(server.url), { requestInit: { headers: { Authorization: `Bearer ${token}` } } }));
    return mcp;
  };
  try {
    const who = "c-ts-ai-mcp-partition-" + randomUUID().slice(0, 8);
    const input = { idempotency_key: randomUUID(), customer_id: who, title: "Printer on fire" };
    const call = { toolCallId: "call_1", messages: [{ role: "user", content: "Open a ticket." }, { role: "assistant", content: [{ type: "tool-call", toolCallId: "call_1", toolName: "create_ticket", input }] }] as ModelMessage[] };
    const first = await connect();
    let caught: unknown;
    try {
      const tool = (await idemflowMcpTools(first, { chatId: who, names: ["create_ticket"], waitMs: 3000, guarded: false })).create_ticket as any;
      proxy.state.partitioned = true;
      await new Promise((r) => setTimeout(r, 1500)); // past --verify-ttl
      await tool.execute(input, call).catch((e: unknown) => (caught = e));
    } finally {
      proxy.state.partitioned = false;
      await first.close().catch(() => undefined);
    }
    console.log(`a partition behind MCP over HTTP: the call ended with ${(caught as Error)?.constructor?.name}: ${(caught as Error)?.message?.slice(0, 80)}`);
    assert.ok(caught instanceof PendingAnswerError, `the call ended with ${String(caught)}, not pending`);
    const again = await connect();
    try {
      const tool = (await idemflowMcpTools(again, { chatId: who, names: ["create_ticket"], waitMs: 30_000, guarded: false })).create_ticket as any;
      const answer = JSON.parse(await tool.execute(input, call));
      assert.equal(answer.http_status, 201, JSON.stringify(answer));
    } finally {
      await again.close();
    }
    const keys = [...new Set(proxy.state.keys)];
    assert.equal(keys.length, 1, `the MCP server sent ${keys.length} keys`);
    assert.equal(await ticketsUnder(new Client({ baseURL: url, token }), keys, who), 1);
  } finally {
    server.close();
    proxy.close();
  }
});

test("docs/agents/mcp.md's Vercel AI SDK snippet runs as written, and a turn sent again is a replay", async () => {
  // The only change: the mock model in place of openai/gpt-4.1; idemflow on PATH.
  const file = await readmeSnippet("**The Vercel AI SDK** (`@idemflow/client/ai`: `idemflowMcpTools`).", "docs-vercel-mcp", [
    ['model: "openai/gpt-4.1"', "model: globalThis.IDEMFLOW_README_MODEL"],
  ]);
  process.env.PATH = `${dirname(process.env.IDEMFLOW_BIN!)}:${process.env.PATH}`;
  const who = "c-ts-docs-mcp-" + randomUUID().slice(0, 8);
  const { model } = scriptedChat(who, undefined, undefined, true);
  (globalThis as any).IDEMFLOW_README_MODEL = model;
  const mod = await import(file.href);
  try {
    // One turn, every call approved, as the page's loop does.
    const turnOver = async () => {
      let messages: ModelMessage[] = [{ role: "user", content: "My printer is on fire." }];
      for (;;) {
        const last = messages[messages.length - 1];
        const asks = last.role === "assistant" && Array.isArray(last.content) ? last.content.filter((p) => p.type === "tool-approval-request") : [];
        if (last.role === "assistant" && asks.length === 0) return answers(messages);
        if (asks.length > 0) messages = [...messages, { role: "tool", content: asks.map((a: any) => ({ type: "tool-approval-response" as const, approvalId: a.approvalId, approved: true })) }];
        messages = await mod.chatRequest(messages);
      }
    };
    const first = await turnOver();
    const again = await turnOver();
    assert.deepEqual([...first, ...again].map((a) => a.replayed), [false, true]);
    assert.equal(again[0].result.ticket_id, first[0].result.ticket_id);
  } finally {
    await mod.mcp.close();
  }
});
