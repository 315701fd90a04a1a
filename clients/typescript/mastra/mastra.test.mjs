// idemflow's Mastra integration (@idemflow/client/mastra) under a real
// Mastra agent, against the stack (IDEMFLOW_URL, IDEMFLOW_TOKEN): a call
// ID reused by a later turn is a second call, a call waits through a
// partition with nothing pending handed to the model, a call outside an
// agent's run gets no key, and the shared key vectors. The kill test is
// typescript_test.go's TestAMastraAgentKilledMidCallResumesFromItsApproval.

import assert from "node:assert/strict";
import { mkdtemp, readFile, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { test } from "node:test";
import { Client, NoDurableIdentityError } from "@idemflow/client";
import { idemflowTool, intendedCallKeys, mastraKey, runDurably } from "@idemflow/client/mastra";
import { partitionProxy } from "../dist/test/helpers.js";
import { support, Ticket } from "./agent.mjs";

const client = () => new Client({ baseURL: process.env.IDEMFLOW_URL, token: process.env.IDEMFLOW_TOKEN });

/** One run of agent to its end: the tool answers it produced. */
async function turn(agent, state, options = {}) {
  const answers = [];
  await runDurably(agent, "My printer is on fire.", state, {
    ...options,
    onChunk: (c) => c.type === "tool-result" && answers.push(JSON.parse(c.payload.result)),
  });
  return answers;
}

// A turn sent again: a regenerate, or a turn killed before anything was
// saved. A new run, whose model writes the same call under a new
// toolCallId: with the turn's ID, the same intended call, a replay, also
// where the model words it otherwise (ms3 names its intent fields). Two
// identical calls stay two; another turn in the same words is another;
// the controls: under ms2, which named the whole arguments, a reworded
// call is a second; without a turnId (ms1) the run's IDs name the call.
for (const [name, model, first, again, tickets, replayed, keyScheme] of [
  ["the same call under a new toolCallId", {}, "msg-1", "msg-1", 1, [true]],
  ["two identical calls, both written again", { calls: 2, identical: true }, "msg-1", "msg-1", 2, [true, true]],
  ["a model that rewords the call: the same intent, a replay", { reword: true }, "msg-1", "msg-1", 1, [true]],
  ["control: ms2 keys the whole arguments", { reword: true }, "msg-1", "msg-1", 2, [false], "ms2"],
  ["another turn in the same words", {}, "msg-1", "msg-2", 2, [false]],
  ["control: no turnId, ms1 keys the run's IDs", {}, undefined, undefined, 2, [false]],
]) {
  test(`a turn sent again makes the same call once: ${name}`, async () => {
    const dir = await mkdtemp(join(tmpdir(), "idemflow-mastra-"));
    const who = `mastra-resend-${Date.now()}`;
    const agent = support(client(), { customer: who, db: join(dir, "mastra.db"), ...model });
    const opts = (turnId) => (turnId ? { conversation: who, turnId, keyScheme } : {});
    const a = await turn(agent, join(dir, "run-1.json"), opts(first));
    const b = await turn(agent, join(dir, "run-2.json"), opts(again));
    const ids = new Set([...a, ...b].map((x) => x.result.ticket_id));
    console.log(`${name}: ${ids.size} tickets; the turn sent again: replayed ${b.map((x) => x.replayed)}; keys ${[...a, ...b].map((x) => x.result.idempotency_key)}`);
    assert.deepEqual(
      b.map((x) => x.replayed),
      replayed,
    );
    assert.equal(ids.size, tickets);
  });
}

test("a toolCallId reused in a later turn is a second call, not the first one's replay", async () => {
  const dir = await mkdtemp(join(tmpdir(), "idemflow-mastra-"));
  const who = `mastra-reused-${Date.now()}`;
  const agent = support(client(), { customer: who, db: join(dir, "mastra.db"), callId: "call_0" });
  const answers = [...(await turn(agent, join(dir, "run.json"))), ...(await turn(agent, join(dir, "run.json")))];
  console.log(`two turns under call_0: ${JSON.stringify(answers.map((a) => [a.http_status, a.replayed, a.result.ticket_id]))}`);
  assert.deepEqual(
    answers.map((a) => [a.http_status, a.replayed]),
    [
      [201, false],
      [201, false],
    ],
  );
  assert.notEqual(answers[0].result.ticket_id, answers[1].result.ticket_id, "the second turn's call replayed the first");
});

test("two calls in one answer are two tickets", async () => {
  const dir = await mkdtemp(join(tmpdir(), "idemflow-mastra-"));
  const who = `mastra-two-${Date.now()}`;
  const answers = await turn(support(client(), { customer: who, db: join(dir, "mastra.db"), calls: 2 }), join(dir, "run.json"));
  console.log(`two calls in one answer: ${JSON.stringify(answers.map((a) => [a.http_status, a.replayed, a.result.title]))}`);
  assert.deepEqual(answers.map((a) => [a.http_status, a.replayed]).sort(), [
    [201, false],
    [201, false],
  ]);
  assert.notEqual(answers[0].result.ticket_id, answers[1].result.ticket_id);
});

test("a call waits through a partition, and no pending answer reaches the model", async () => {
  // Every answer is dropped for 2.5 s: the call retries under its key
  // until one comes, and the model reads that one, a final answer.
  const { state, base, close } = await partitionProxy(process.env.IDEMFLOW_URL);
  const heal = setTimeout(() => (state.partitioned = false), 2500);
  try {
    const dir = await mkdtemp(join(tmpdir(), "idemflow-mastra-"));
    const who = `mastra-partition-${Date.now()}`;
    const c = new Client({ baseURL: base, token: process.env.IDEMFLOW_TOKEN, attemptTimeoutMs: 300, initialBackoffMs: 20, maxBackoffMs: 100 });
    const answers = await turn(support(c, { customer: who, db: join(dir, "mastra.db") }), join(dir, "run.json"));
    console.log(`a partition of 2.5 s: ${state.keys.length} attempts under ${new Set(state.keys).size} key; the model read ${JSON.stringify(answers.map((a) => [a.http_status, a.replayed]))}`);
    assert.ok(state.keys.length > 1, "the partition dropped no answer: the test proved nothing");
    assert.equal(new Set(state.keys).size, 1, "the call was sent under more than one key");
    assert.equal(answers.length, 1);
    assert.equal(answers[0].http_status, 201, "the model read something other than the final answer");
  } finally {
    clearTimeout(heal);
    close();
  }
});

test("a call outside an agent's run gets no key, and nothing is sent", async () => {
  const tool = idemflowTool(client(), { id: "create_ticket", description: "d", inputSchema: Ticket, path: "/v1/tickets" });
  await assert.rejects(tool.execute({ customer_id: "c", title: "t" }, {}), NoDurableIdentityError);
  await assert.rejects(tool.execute({ customer_id: "c", title: "t" }, { runId: "r-1" }), NoDurableIdentityError);
  assert.equal(tool.requireApproval, true);
});

test("the shared key vectors", async () => {
  const v = JSON.parse(await readFile(new URL("../../testdata/keys.json", import.meta.url), "utf8"));
  assert.ok(v.mastra.length > 0);
  for (const c of v.mastra) assert.equal(mastraKey(c.run_id, c.tool_call_id, c.tool), c.key, c.name);
  assert.ok(v.mastra_calls.length > 0);
  // An entry of scheme ms2 names the whole arguments; ms3's the tool's intent fields.
  for (const c of v.mastra_calls) assert.equal(intendedCallKeys(c.conversation, c.turn_id, c.calls, c.key.slice(0, 3), Object.fromEntries(c.calls.map((x) => [x.toolName, c.intent ?? []]))).get(c.tool_call_id), c.key, c.name);
});

test("docs/agents/mcp.md's Mastra snippet runs as written, and a turn sent again is a replay", async () => {
  // As written, with idemflow on PATH; its tools in the support agent.
  const docs = await readFile(new URL("../../../docs/agents/mcp.md", import.meta.url), "utf8");
  const code = docs.split("**Mastra** (`@idemflow/client/mastra`: `idemflowMcpTools`).")[1].split("```js\n")[1].split("```")[0];
  const file = new URL("./docs-mcp-snippet.mjs", import.meta.url);
  await writeFile(file, code);
  process.env.PATH = `${dirname(process.env.IDEMFLOW_BIN)}:${process.env.PATH}`;
  const { mcp, tools } = await import(file.href);
  try {
    const dir = await mkdtemp(join(tmpdir(), "idemflow-mastra-mcp-"));
    const who = `mastra-docs-mcp-${Date.now()}`;
    const agent = support(client(), { customer: who, db: join(dir, "mastra.db"), tool: tools.create_ticket });
    const opts = { conversation: who, turnId: "msg-1" };
    const first = await turn(agent, join(dir, "run-1.json"), opts);
    const again = await turn(agent, join(dir, "run-2.json"), opts);
    assert.deepEqual([...first, ...again].map((a) => a.replayed), [false, true]);
    assert.equal(again[0].result.ticket_id, first[0].result.ticket_id);
  } finally {
    await mcp.close();
  }
});
