// The OpenAI Agents SDK for JavaScript integration (src/openai-agents.ts)
// against the real stack, with a scripted model: the shared oa1 vectors
// (the same as Python's), a call ID reused by a later turn is a second
// call, and a pending answer fails the run instead of reaching the model.
// The kill test is typescript_test.go's.

import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { readFile } from "node:fs/promises";
import { dirname } from "node:path";
import { test } from "node:test";
import { Agent, Runner, tool, Usage, type Model, type ModelRequest, type ModelResponse } from "@openai/agents";
import { z } from "zod";
import { Client, DeadlineError } from "../src/index.js";
import { Client as MCPClient } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { durableKey, idemflowFunctionTool, idemflowMcpFunctionTools, intendedCallKey, intendedCalls, NoDurableIdentityError, runDurably } from "../src/openai-agents.js";
import { inFreshFolder, partitionProxy, readmeSnippet, ticketsUnder } from "./helpers.js";

const url = process.env.IDEMFLOW_URL!;
const token = process.env.IDEMFLOW_TOKEN!;
const schema = z.object({ customer_id: z.string(), title: z.string() });

/**
 * Asks for one ticket until a tool's output is in its input, then
 * answers; after a tool error, asks again (new IDs), up to twice. callId
 * fixes the call ID (a provider that numbers calls per response); the
 * item ID is always new. outputs: what the model was handed in the turn
 * (after the last user message).
 */
class ScriptedModel implements Model {
  outputs: string[] = [];
  constructor(
    readonly customer: string,
    readonly callId?: string,
    // Another call to write (its tool and arguments, written anew each time).
    readonly call?: { name: string; args: () => Record<string, unknown> },
  ) {}
  async getResponse(request: ModelRequest): Promise<ModelResponse> {
    // The turn: what follows the last user message.
    const all: any[] = Array.isArray(request.input) ? request.input : [];
    const items = all.slice(all.map((i) => i.role).lastIndexOf("user") + 1);
    const results = items.filter((i: any) => i.type === "function_call_result").map((i: any) => String(i.output?.text ?? JSON.stringify(i.output)));
    this.outputs = results;
    const last = results[results.length - 1];
    if (last !== undefined && (!last.startsWith("An error occurred") || results.length >= 2)) {
      return { usage: new Usage(), output: [{ type: "message", role: "assistant", status: "completed", content: [{ type: "output_text", text: "done" }] }] };
    }
    const args = JSON.stringify(this.call ? this.call.args() : { customer_id: this.customer, title: "Printer on fire" });
    const name = this.call?.name ?? "create_ticket";
    return { usage: new Usage(), output: [{ type: "function_call", id: `fc_${randomUUID()}`, callId: this.callId ?? `call_${randomUUID()}`, name, arguments: args, status: "completed" }] };
  }
  getStreamedResponse(): AsyncIterable<any> {
    throw new Error("not streamed");
  }
}

/** The tickets of customer, counted in idemflow's database. */
async function tickets(customer: string): Promise<number> {
  // pg ships no types, and this is its only use here.
  const pg: any = (await import("pg" as string)).default;
  const db = new pg.Client({ connectionString: process.env.DATABASE_URL });
  await db.connect();
  try {
    const r = await db.query("SELECT count(*)::int AS n FROM ticket WHERE customer_id = $1", [customer]);
    return r.rows[0].n;
  } finally {
    await db.end();
  }
}

function inMemory() {
  const saved: string[] = [];
  return { load: async () => saved[saved.length - 1], save: async (s: string) => void saved.push(s) };
}

function answers(result: any): any[] {
  return result.newItems.filter((i: any) => i.type === "tool_call_output_item").map((i: any) => JSON.parse(String(i.output)));
}

test("the shared key vectors (openai_agents, the same as Python's)", async () => {
  const v = JSON.parse(await readFile(new URL("../../../testdata/keys.json", import.meta.url), "utf8")) as {
    openai_agents: { name: string; group_id: string | null; item_id: string; call_id: string; tool: string; call_ids_unique?: boolean; key?: string; error?: string }[];
  };
  assert.ok(v.openai_agents.length > 0);
  for (const c of v.openai_agents) {
    const derive = () => durableKey(c.group_id ?? "", { id: c.item_id, callId: c.call_id }, c.tool, c.call_ids_unique ?? false);
    if (c.error) {
      assert.throws(derive, (e: Error) => e instanceof NoDurableIdentityError && e.message.includes(c.error!), c.name);
    } else {
      assert.equal(derive(), c.key, c.name);
    }
  }
});

test("the shared intended-call vectors (openai_agents_calls, the same as Python's)", async () => {
  const v = JSON.parse(await readFile(new URL("../../../testdata/keys.json", import.meta.url), "utf8")) as {
    openai_agents_calls: {
      name: string;
      group_id: string;
      input: string | unknown[];
      previous_response_id: string | null;
      turn_id: string | null;
      calls: { call_id: string; name: string; arguments: string }[];
      call_id: string;
      key: string;
      scheme?: "oa3" | "oa2";
    }[];
  };
  assert.ok(v.openai_agents_calls.length > 0);
  for (const c of v.openai_agents_calls) {
    // An entry without a scheme is oa2's (the whole arguments).
    const calls = intendedCalls(
      c.input,
      c.calls.map((x) => ({ callId: x.call_id, name: x.name, arguments: x.arguments })),
      c.previous_response_id ?? undefined,
      c.turn_id ?? undefined,
      c.scheme ?? "oa2",
    );
    assert.equal(intendedCallKey(c.group_id, calls.get(c.call_id)!), c.key, c.name);
  }
});

// A regenerate, or a turn whose saved RunState is gone: the app sends the
// conversation again, cut before the model's answer. The model writes the
// same call under new IDs, and at a real model's temperature in other
// words: the same intended call (the ticket's customer), one ticket, a
// replay that names what differed. Two identical calls stay two; another
// customer (calls 3) is another intent; the controls key the whole
// arguments (oa2) and the call's IDs (oa1). calls -1: reworded.
for (const [name, calls, scheme, turnId, want, replayed] of [
  ["the same call under new IDs", 1, undefined, undefined, 1, [true]],
  ["two identical calls, both written again", 2, undefined, undefined, 2, [true, true]],
  ["a model that rewords the call: the same intent, a replay", -1, undefined, undefined, 1, [true]],
  ["another customer in the call is another intent", 3, undefined, undefined, 2, [false]],
  ["the app's turnId", 1, undefined, "msg-1", 1, [true]],
  ["control: oa2 keys the whole arguments", -1, "oa2", undefined, 2, [false]],
  ["control: oa1 keys the call's IDs", 1, "oa1", undefined, 2, [false]],
] as const) {
  test(`a turn sent again makes the same call once: ${name}`, async () => {
    const who = "c-ts-oa-resend-" + randomUUID().slice(0, 8);
    const c = new Client({ baseURL: url, token });
    const createTicket = idemflowFunctionTool(c, { name: "create_ticket", description: "Create a ticket.", parameters: schema, path: "/v1/tickets", conversation: who, keyScheme: scheme });
    let runs = 0;
    const model: Model = {
      async getResponse(request: ModelRequest): Promise<ModelResponse> {
        const items = Array.isArray(request.input) ? request.input : [];
        if (items.some((i: any) => i.type === "function_call_result")) {
          return { usage: new Usage(), output: [{ type: "message", role: "assistant", status: "completed", content: [{ type: "output_text", text: "done" }] }] };
        }
        runs++;
        const title = calls < 0 ? `Printer on fire (${runs})` : "Printer on fire";
        const args = JSON.stringify({ customer_id: calls === 3 ? `${who}-${runs}` : who, title });
        const call = () => ({ type: "function_call" as const, id: `fc_${randomUUID()}`, callId: `call_${randomUUID()}`, name: "create_ticket", arguments: args, status: "completed" as const });
        return { usage: new Usage(), output: Array.from({ length: calls === 3 ? 1 : Math.abs(calls) }, call) };
      },
      getStreamedResponse(): AsyncIterable<any> {
        throw new Error("not streamed");
      },
    };
    const agent = new Agent({ name: "support", tools: [createTicket], model });
    const ask = [
      { role: "user" as const, content: "Hello." },
      { role: "assistant" as const, status: "completed" as const, content: [{ type: "output_text" as const, text: "Hello! How can I help?" }] },
      { role: "user" as const, content: "Open a ticket." },
    ];
    const runsOf: any[][] = [];
    const ids: string[] = [];
    for (let i = 0; i < 2; i++) {
      const result = await runDurably(new Runner({ tracingDisabled: true }), agent, ask, { ...inMemory(), turnId });
      runsOf.push(answers(result));
      ids.push(...result.newItems.filter((x: any) => x.type === "tool_call_item").map((x: any) => x.rawItem.callId));
    }
    const n = calls === 3 ? (await tickets(who)) + (await tickets(`${who}-1`)) + (await tickets(`${who}-2`)) : await tickets(who);
    console.log(`${name}: ${n} tickets; the turn sent again: replayed ${runsOf[1].map((a) => a.replayed)}, differed ${JSON.stringify(runsOf[1].map((a) => a.differed))}; call IDs ${ids}`);
    assert.equal(new Set(ids).size, ids.length, "the model wrote every call under new IDs");
    assert.deepEqual(runsOf[1].map((a) => a.replayed), replayed);
    assert.equal(n, want);
    if (calls < 0 && replayed.every((r) => r)) {
      // Told truthfully: a replay of what was made, naming what differed.
      assert.ok(runsOf[1].every((a) => a.differed?.join() === "title" && a.note?.includes("already done")), JSON.stringify(runsOf[1]));
    }
  });
}

// The docs' program keeps one RunState file per conversation and never
// clears it. A later turn run on that file is a run of its own: its model
// is asked, its call made, a second ticket, never turn 1's resumed state
// answering for it. The same turn sent again on the file is a replay.
for (const [name, how, want, replayed] of [
  ["a later turn: the history and the same words", "history", 2, [[false], [false]]],
  ["a later turn: its message alone, a new turnId", "turnId", 2, [[false], [false]]],
  ["the same turn sent again (a regenerate)", "again", 1, [[false], [true]]],
  ["the same turnId sent again", "turnId again", 1, [[false], [true]]],
] as const) {
  test(`every turn on one saved state is its own run: ${name}`, async () => {
    const who = "c-ts-oa-store-" + randomUUID().slice(0, 8);
    const c = new Client({ baseURL: url, token });
    const createTicket = idemflowFunctionTool(c, { name: "create_ticket", description: "Create a ticket.", parameters: schema, path: "/v1/tickets", conversation: who });
    const agent = new Agent({ name: "support", tools: [createTicket], model: new ScriptedModel(who) });
    const store = inMemory(); // one store for the conversation, as the docs' file
    const first = { role: "user" as const, content: "My printer is on fire." };
    const got: boolean[][] = [];
    let result = await runDurably(new Runner({ tracingDisabled: true }), agent, [first], { ...store, turnId: how.startsWith("turnId") ? "msg-1" : undefined });
    got.push(answers(result).map((a) => a.replayed));
    const [ask, turnId] = how === "history" ? [[...result.history, first], undefined] : how === "turnId" ? [[first], "msg-2"] : how === "turnId again" ? [[first], "msg-1"] : [[first], undefined];
    result = await runDurably(new Runner({ tracingDisabled: true }), agent, ask, { ...store, turnId });
    got.push(answers(result).map((a) => a.replayed));
    const n = await tickets(who);
    console.log(`${name}: ${n} tickets; each turn's answers replayed ${JSON.stringify(got)}`);
    assert.deepEqual([n, got], [want, replayed]);
  });
}

test("a call ID reused in a later turn of the conversation is a second call", async () => {
  const who = "c-ts-oa-reused-" + randomUUID().slice(0, 8);
  const c = new Client({ baseURL: url, token });
  const createTicket = idemflowFunctionTool(c, { name: "create_ticket", description: "Create a ticket.", parameters: schema, path: "/v1/tickets", conversation: who });
  const agent = new Agent({ name: "support", tools: [createTicket], model: new ScriptedModel(who, "call_0") });
  const got: any[] = [];
  // The second turn's input is the conversation so far and the new
  // message, as the SDK's multi-turn examples send it, in the same words.
  let history: any[] = [];
  for (let i = 0; i < 2; i++) {
    const result = await runDurably(new Runner({ tracingDisabled: true }), agent, [...history, { role: "user", content: "Open a ticket." }], inMemory());
    got.push(...answers(result));
    history = result.history;
  }
  console.log(`two turns under call_0: replayed ${got.map((a) => a.replayed)}, tickets ${got.map((a) => a.result.ticket_id)}`);
  assert.deepEqual(got.map((a) => a.replayed), [false, false]);
  assert.notEqual(got[0].result.ticket_id, got[1].result.ticket_id, "two tickets");
});

// A partition longer than the tool's wait: the tool fails the run
// (DeadlineError), the model is handed nothing, and the run resumed from
// its saved RunState gets the first call's answer: one effect. The
// control, the SDK's tool() with its default error handling under the
// same key rule, hands the model the error; the model calls again under
// new IDs, a new key: two effects.
test("a pending answer fails the run, and never reaches the model", async () => {
  const { state, base, close } = await partitionProxy(url);
  const keys = state.keys;
  const c = new Client({ baseURL: base, token, attemptTimeoutMs: 300, initialBackoffMs: 20, maxBackoffMs: 100 });
  const effects = (customer: string) => ticketsUnder(new Client({ baseURL: url, token }), keys, customer);
  try {
    const who = "c-ts-oa-pending-" + randomUUID().slice(0, 8);
    const model = new ScriptedModel(who);
    const createTicket = idemflowFunctionTool(c, { name: "create_ticket", description: "Create a ticket.", parameters: schema, path: "/v1/tickets", conversation: who, waitMs: 1200 });
    const agent = new Agent({ name: "support", tools: [createTicket], model });
    const store = inMemory();
    await assert.rejects(runDurably(new Runner({ tracingDisabled: true }), agent, "Open a ticket.", store), (e: any) => e instanceof DeadlineError || e?.cause instanceof DeadlineError || /pending under key/.test(String(e?.message)));
    assert.deepEqual(model.outputs, [], "the model was handed nothing");
    state.partitioned = false;
    const resumed = await runDurably(new Runner({ tracingDisabled: true }), agent, "Open a ticket.", store);
    assert.deepEqual(answers(resumed).map((a) => a.replayed), [true], "the resumed call got the first call's answer");
    assert.equal(await effects(who), 1);

    keys.length = 0;
    state.partitioned = true;
    const naive = "c-ts-oa-pending-control-" + randomUUID().slice(0, 8);
    const control = tool({
      name: "create_ticket",
      description: "Create a ticket.",
      parameters: schema,
      execute: async (input, _ctx, details) => JSON.stringify((await c.do({ key: durableKey(naive, details?.toolCall, "create_ticket"), path: "/v1/tickets", body: input }, { deadlineMs: 1200 })).body),
    });
    const controlModel = new ScriptedModel(naive);
    await new Runner({ tracingDisabled: true }).run(new Agent({ name: "support", tools: [control], model: controlModel }), "Open a ticket.");
    console.log(`pending answer: one ticket after the resume; the control: ${controlModel.outputs.length} errors to the model`);
    assert.equal(controlModel.outputs.length, 2, `the control hands the model the wait's end as an error, twice: ${controlModel.outputs}`);
    state.partitioned = false;
    assert.equal(await effects(naive), 2, "the control's retry under a new key made a second ticket");
  } finally {
    close();
  }
});

test("the README's snippet runs as written, and run again makes no second ticket", async () => {
  // The only change: a scripted model in place of gpt-4.1.
  const who = "c-ts-oa-readme-" + randomUUID().slice(0, 8);
  const file = await readmeSnippet("# The OpenAI Agents SDK on its own (TypeScript)\n", "readme-openai-agents", [
    ['model: "gpt-4.1"', "model: globalThis.IDEMFLOW_README_MODEL"],
    ['"ticket-42"', JSON.stringify(who)],
  ]);
  process.env.OPENAI_AGENTS_DISABLE_TRACING = "1";
  const counts: number[] = [];
  await inFreshFolder(url, async (run) => {
    for (const n of [1, 2]) {
      (globalThis as any).IDEMFLOW_README_MODEL = new ScriptedModel(who);
      await run(n);
      counts.push(await tickets(who));
    }
  }, file);
  console.log(`the README's snippet, run twice: ${counts} tickets`);
  assert.deepEqual(counts, [1, 1], "run again from its saved RunState, the snippet made a second ticket");
});

// idemflowMcpFunctionTools over streamable HTTP, with slow_refund, whose
// service takes 4 s, the model writing an idempotency_key of its own each
// time: a call whose waitMs ends first fails the run with DeadlineError,
// nothing handed to the model; the run resumed from its saved RunState,
// with a longer wait, waits on the call's task and gets its answer; one
// refund under one key.
test("a call through idemflow's MCP server waits on its task, and a pending one fails the run, never reaching the model", async () => {
  const mcp = new MCPClient({ name: "ts-oa-mcp", version: "1" });
  await mcp.connect(new StreamableHTTPClientTransport(new URL(process.env.IDEMFLOW_MCP_URL!), { requestInit: { headers: { Authorization: `Bearer ${token}` } } }));
  try {
    const who = "c-ts-oa-mcp-" + randomUUID().slice(0, 8);
    const model = new ScriptedModel(who, undefined, { name: "slow_refund", args: () => ({ idempotency_key: randomUUID(), payment_id: `p-${who}`, amount_cents: 100 }) });
    const agent = async (waitMs: number) => new Agent({ name: "support", tools: await idemflowMcpFunctionTools(mcp, { conversation: who, names: ["slow_refund"], waitMs }), model });
    const store = inMemory();
    const start = Date.now();
    await assert.rejects(runDurably(new Runner({ tracingDisabled: true }), await agent(1000), "Refund it.", store), (e: any) => e instanceof DeadlineError || e?.cause instanceof DeadlineError || /pending under key/.test(String(e?.message)));
    const bound = Date.now() - start;
    assert.deepEqual(model.outputs, [], "the model was handed nothing");
    const resumed = await runDurably(new Runner({ tracingDisabled: true }), await agent(30_000), "Refund it.", store);
    const got = answers(resumed);
    assert.deepEqual(got.map((a) => [a.http_status, a.replayed]), [[201, true]], JSON.stringify(got));
    console.log(`MCP, OpenAI Agents JS: the run failed after ${bound} ms with nothing to the model; resumed, the call's task gave ${JSON.stringify(got[0].result)}`);
  } finally {
    await mcp.close();
  }
});

test("docs/agents/mcp.md's OpenAI Agents SDK snippet runs as written, and a turn sent again is a replay", async () => {
  // The only change: the scripted model in place of gpt-4.1; idemflow on PATH.
  const file = await readmeSnippet("**The OpenAI Agents SDK, TypeScript** (`@idemflow/client/openai-agents`:", "docs-oa-mcp", [['model: "gpt-4.1"', "model: globalThis.IDEMFLOW_README_MODEL"]]);
  process.env.PATH = `${dirname(process.env.IDEMFLOW_BIN!)}:${process.env.PATH}`;
  const who = "c-ts-oa-docs-mcp-" + randomUUID().slice(0, 8);
  (globalThis as any).IDEMFLOW_README_MODEL = new ScriptedModel(who, undefined, {
    name: "create_ticket",
    args: () => ({ idempotency_key: randomUUID(), customer_id: who, title: "Printer on fire" }),
  });
  const mod = await import(file.href);
  try {
    const first = answers(await mod.turn("My printer is on fire.", ...Object.values(inMemory())));
    const again = answers(await mod.turn("My printer is on fire.", ...Object.values(inMemory())));
    assert.deepEqual([...first, ...again].map((a) => a.replayed), [false, true]);
    assert.equal(await tickets(who), 1);
  } finally {
    await mod.mcp.close();
  }
});
