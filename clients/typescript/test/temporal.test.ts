// Temporal's TypeScript SDK integration (src/temporal.ts and
// src/temporal-workflow.ts): the shared tp3 vectors (the same as Go's and
// Python's) for the key, the arguments' digest and the run's lineage, and
// activityKey's refusals outside what names a call.

import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { readFile } from "node:fs/promises";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import { Client as TemporalClient, Connection } from "@temporalio/client";
import { defaultPayloadConverter } from "@temporalio/common";
import { encode } from "@temporalio/common/lib/encoding.js";
import { NativeConnection, Worker } from "@temporalio/worker";
import { Client, deriveKey, type IntentField } from "../src/index.js";
import { activityByIntent, activityKey, argsDigest, callKey, intentCallKey, intentDigest, keyInterceptor, lineageOf } from "../src/temporal.js";
import { deriveKeyPure } from "../src/temporal-keys.js";
import type { Activities, Step } from "./temporal-workflows.js";

interface Vectors {
  derive: { scheme: string; parts: string[]; key: string }[];
  temporal: { name: string; scheme: string; workflow_id: string; lineage?: string; turn?: number; tool: string; args?: string; n?: number; scope?: string; key: string }[];
  temporal_args: { name: string; intent?: IntentField[]; payloads: { encoding: string; data?: string; data_base64?: string }[]; digest?: string; error?: string }[];
  temporal_lineage: {
    name: string;
    attempt: number;
    continued_run_id: string;
    cron_schedule: string;
    first_run_id: string;
    original_run_id: string;
    header: { lineage?: string; turn?: number; by?: string } | null;
    lineage: string;
    turn: number;
  }[];
}

const vectors = async () => JSON.parse(await readFile(new URL("../../../testdata/keys.json", import.meta.url), "utf8")) as Vectors;

test("the workflow sandbox's derivation is the client's (the derive vectors)", async () => {
  const v = await vectors();
  for (const d of v.derive) {
    assert.equal(deriveKeyPure(d.scheme, ...d.parts), d.key, JSON.stringify(d.parts));
    assert.equal(deriveKeyPure(d.scheme, ...d.parts), deriveKey(d.scheme, ...d.parts));
  }
  assert.equal(deriveKeyPure("s", "é\u{1F600}", ""), deriveKey("s", "é\u{1F600}", ""), "UTF-8 beyond ASCII");
});

test("the shared tp3 and tp4 vectors: the key, the arguments' and the intent's digest and the lineage (the same as Go's and Python's)", async () => {
  const v = await vectors();
  const tp3 = v.temporal.filter((c) => c.scheme === "tp3");
  const tp4 = v.temporal.filter((c) => c.scheme === "tp4");
  assert.ok(tp3.length > 0 && tp4.length > 0 && v.temporal_args.length > 0 && v.temporal_lineage.length > 0);
  for (const c of tp3) assert.equal(callKey(c.workflow_id, c.lineage!, c.turn!, c.tool, c.args!, c.n!, c.scope ?? ""), c.key, c.name);
  for (const c of tp4) assert.equal(intentCallKey(c.workflow_id, c.lineage!, c.turn!, c.tool, c.args!, c.n!, c.scope ?? ""), c.key, c.name);
  for (const c of v.temporal_args) {
    const payloads = c.payloads.map((p) => ({
      metadata: { encoding: encode(p.encoding) },
      data: p.data_base64 !== undefined ? new Uint8Array(Buffer.from(p.data_base64, "base64")) : encode(p.data ?? ""),
    }));
    if (!c.intent) assert.equal(argsDigest(payloads), c.digest, c.name);
    else if (c.error) assert.throws(() => intentDigest(c.intent!, payloads), (e: Error) => e.message.includes(c.error!), c.name);
    else assert.equal(intentDigest(c.intent, payloads), c.digest, c.name);
  }
  for (const c of v.temporal_lineage) {
    const got = lineageOf(
      { attempt: c.attempt, continuedRunId: c.continued_run_id, cronSchedule: c.cron_schedule, firstRunId: c.first_run_id, originalRunId: c.original_run_id },
      c.header ?? undefined,
    );
    assert.deepEqual(got, { id: c.lineage, turn: c.turn }, c.name);
  }
});

test("activityKey outside an activity is a non-retryable failure, never a key", () => {
  assert.throws(
    () => activityKey("create_ticket"),
    (e: any) => e.type === "NoDurableIdentity" && e.nonRetryable === true && /outside a Temporal activity/.test(e.message),
  );
});

// Against a real Temporal server (the stack's, TEMPORAL_ADDRESS and
// TEMPORAL_NAMESPACE) and idemflow: a worker with both sides of the
// interceptor runs test/temporal-workflows.ts's agent, whose model is an
// activity the test scripts.

const address = process.env.TEMPORAL_ADDRESS;
const namespace = process.env.TEMPORAL_NAMESPACE ?? "default";
const idemflow = () => new Client({ baseURL: process.env.IDEMFLOW_URL!, token: process.env.IDEMFLOW_TOKEN! });

/** What the scripted model answers, by customer and turn: the test changes it between runs, as a model that answers otherwise. */
let plan: (customer: string, turn: number) => Step[] = () => [];

const activities: Activities = {
  async model(customer, turn) {
    return plan(customer, turn);
  },
  async create_ticket(args) {
    const key = activityKey("create_ticket");
    const r = await idemflow().do({ key, path: "/v1/tickets", body: args, byIntent: activityByIntent() });
    const made = r.body as { ticket_id: string; title: string };
    return { ticket_id: made.ticket_id, replayed: r.replayed, key, title: made.title, differed: r.differed ?? [] };
  },
  async lookup(args) {
    return `looked up ${args.customer_id}`;
  },
};

const ticket = (customer: string, title = "Printer on fire"): Step => ({ tool: "create_ticket", args: { customer_id: customer, title } });

/**
 * Runs fn with a worker on a task queue of its own; withWorkflowSide false
 * leaves the workflow's side of the interceptor out, "intent" lists
 * test/temporal-intent.js (create_ticket's intent field declared) in
 * place of src/temporal-workflow.js.
 */
async function withWorker<T>(withWorkflowSide: boolean | "intent", fn: (client: TemporalClient, taskQueue: string) => Promise<T>): Promise<T> {
  const workflowSide = withWorkflowSide === "intent" ? "./temporal-intent.js" : "../src/temporal-workflow.js";
  assert.ok(address, "TEMPORAL_ADDRESS: run these through typescript_test.go's TestTheTemporalTypeScriptKeysAgainstTheStack");
  const taskQueue = "ts-keys-" + randomUUID();
  const worker = await Worker.create({
    connection: await NativeConnection.connect({ address }),
    namespace,
    taskQueue,
    workflowsPath: fileURLToPath(new URL("./temporal-workflows.js", import.meta.url)),
    activities,
    interceptors: {
      activity: [keyInterceptor()],
      workflowModules: withWorkflowSide ? [fileURLToPath(new URL(workflowSide, import.meta.url))] : [],
    },
  });
  const client = new TemporalClient({ connection: await Connection.connect({ address }), namespace });
  return worker.runUntil(fn(client, taskQueue));
}

/** Resets the run to its first workflow task (a reset to before the model ran) and returns the new run's ID. */
async function resetToStart(client: TemporalClient, workflowId: string, runId: string): Promise<string> {
  const history = await client.workflow.getHandle(workflowId, runId).fetchHistory();
  const first = (history.events ?? []).find((e) => Number(e.eventType) === 6); // EVENT_TYPE_WORKFLOW_TASK_COMPLETED
  assert.ok(first, "the run has a completed workflow task");
  const r = await client.workflowService.resetWorkflowExecution({
    namespace,
    workflowExecution: { workflowId, runId },
    reason: "the test resets to before the model ran",
    workflowTaskFinishEventId: first.eventId,
    requestId: randomUUID(),
  });
  return r.runId!;
}

const results = (out: string[]) =>
  out.filter((s) => s.startsWith("{")).map((s) => JSON.parse(s) as { ticket_id: string; replayed: boolean; key: string; title?: string; differed?: string[] });

// A reset whose model rewrites the free text of its call: with
// create_ticket's intent field declared on the workflow's worker (tp4)
// the call made again is the first, a replay of what was made that names
// what differed; without it (tp3), a second ticket. Another customer is
// another intent, and two calls for one customer in a run are two.
for (const [name, side, second, want] of [
  ["the title reworded, the customer spaced: one ticket, a replay naming the title", "intent", (c: string) => [ticket(` ${c} `, "Printer is smoking, please help")], 1],
  ["the title reworded without the declaration (tp3): a second ticket", true, (c: string) => [ticket(c, "Printer is smoking, please help")], 2],
  ["another customer: another intent", "intent", (c: string) => [ticket(`${c}-b`)], 2],
] as const) {
  test(`a reset whose model rewords the call: ${name}`, async () => {
    await withWorker(side, async (client, taskQueue) => {
      const who = "c-ts-intent-" + randomUUID().slice(0, 8);
      plan = (c) => [ticket(c)];
      const first = await client.workflow.start("agent", { taskQueue, workflowId: who, args: [who] });
      const [a] = results(await first.result());
      plan = second;
      const again = await resetToStart(client, who, first.firstExecutionRunId);
      const [b] = results(await client.workflow.getHandle(who, again).result());
      console.log(`${name}: first ${a.key} ${a.ticket_id}; after the reset ${b.key} ${b.ticket_id} replayed ${b.replayed} differed ${JSON.stringify(b.differed)}`);
      const tickets = new Set([a.ticket_id, b.ticket_id]).size;
      assert.equal(tickets, want, `${tickets} tickets`);
      if (want === 1) {
        assert.match(a.key, /^tp4_/);
        assert.deepEqual([b.key, b.replayed, b.differed, b.title], [a.key, true, ["title"], "Printer on fire"], "a replay of what was made, naming the title");
      } else {
        assert.equal(b.replayed, false);
      }
    });
  });
}

test("a reset whose model rewords two calls for one customer keeps both (tp4)", async () => {
  await withWorker("intent", async (client, taskQueue) => {
    const who = "c-ts-intent-two-" + randomUUID().slice(0, 8);
    plan = (c) => [ticket(c), ticket(c, "Network down")];
    const first = await client.workflow.start("agent", { taskQueue, workflowId: who, args: [who] });
    const made = results(await first.result());
    plan = (c) => [ticket(c, "The printer burns"), ticket(c, "No network")];
    const again = await resetToStart(client, who, first.firstExecutionRunId);
    const remade = results(await client.workflow.getHandle(who, again).result());
    assert.equal(new Set(made.map((r) => r.ticket_id)).size, 2, "two calls, two tickets");
    assert.deepEqual(
      remade.map((r) => [r.ticket_id, r.replayed]),
      made.map((r) => [r.ticket_id, true]),
    );
  });
});

test("a reset that runs a model that now answers otherwise replays the same call, and a new call is a new ticket", async () => {
  await withWorker(true, async (client, taskQueue) => {
    const who = "c-ts-temporal-reset-" + randomUUID().slice(0, 8);
    plan = (c) => [ticket(c)];
    const first = await client.workflow.start("agent", { taskQueue, workflowId: who, args: [who] });
    const [a] = results(await first.result());
    // The model, asked again, looks something up first: the same ticket
    // comes at another place of the run, under the same key.
    plan = (c) => [{ tool: "lookup", args: { customer_id: c } }, ticket(c)];
    const again = await resetToStart(client, who, first.firstExecutionRunId);
    const [b] = results(await client.workflow.getHandle(who, again).result());
    // Asked again, the model wants another ticket: another intent.
    plan = (c) => [ticket(c, "Toner empty")];
    const third = await resetToStart(client, who, again);
    const [c] = results(await client.workflow.getHandle(who, third).result());
    console.log(`first ${a.key} replayed ${a.replayed}; after a reset ${b.key} replayed ${b.replayed}; another ticket ${c.key} replayed ${c.replayed}`);
    assert.equal(a.replayed, false);
    assert.deepEqual([b.key, b.replayed, b.ticket_id], [a.key, true, a.ticket_id], "the reset's call replays the first");
    assert.equal(c.replayed, false);
    assert.notEqual(c.ticket_id, a.ticket_id, "another ticket is another intent");
    assert.match(a.key, /^tp3_/);
  });
});

test("each turn of continue-as-new is another intent, and a reset of the chain's second turn replays it", async () => {
  await withWorker(true, async (client, taskQueue) => {
    const who = "c-ts-temporal-can-" + randomUUID().slice(0, 8);
    plan = (c) => [ticket(c)];
    const handle = await client.workflow.start("agent", { taskQueue, workflowId: who, args: [who, 2] });
    const last = await client.workflow.getHandle(who).result();
    const [second] = results(last);
    const desc = await client.workflow.getHandle(who).describe();
    const again = await resetToStart(client, who, desc.runId);
    const [reset] = results(await client.workflow.getHandle(who, again).result());
    console.log(`turn 2 ${second.key} replayed ${second.replayed}; its reset ${reset.key} replayed ${reset.replayed}; chain ${handle.firstExecutionRunId}`);
    assert.equal(second.replayed, false, "the second turn's identical call is another intent");
    assert.deepEqual([reset.key, reset.replayed], [second.key, true], "the reset of the second turn replays its call");
  });
});

test("a worker without the workflow's side of the interceptor fails the run at once, and sends nothing", async () => {
  await withWorker(false, async (client, taskQueue) => {
    const who = "c-ts-temporal-bare-" + randomUUID().slice(0, 8);
    plan = (c) => [ticket(c)];
    const handle = await client.workflow.start("agent", { taskQueue, workflowId: who, args: [who] });
    await assert.rejects(handle.result(), (e: any) => {
      const cause = e?.cause?.cause ?? e?.cause;
      console.log(`the run failed: ${e?.message}: ${cause?.message}`);
      return cause?.type === "NoDurableIdentity" && /workflow interceptor/.test(cause?.message ?? "");
    });
  });
});

test("a TypeScript workflow's call to a Go activity gets the key both languages derive, and a reset replays it", async () => {
  const goQueue = process.env.GO_TOOLS_QUEUE;
  assert.ok(goQueue, "GO_TOOLS_QUEUE: the Go worker typescript_test.go starts");
  await withWorker(true, async (client, taskQueue) => {
    const who = "c-ts-temporal-go-" + randomUUID().slice(0, 8);
    plan = (c) => [ticket(c)];
    const first = await client.workflow.start("agentOnGo", { taskQueue, workflowId: who, args: [who, goQueue] });
    const [a] = results(await first.result());
    const args = ticket(who).args;
    const want = callKey(who, first.firstExecutionRunId, 0, "create_ticket", argsDigest([defaultPayloadConverter.toPayload(args)]), 1);
    plan = (c) => [{ tool: "lookup", args: { customer_id: c } }, ticket(c)];
    const again = await resetToStart(client, who, first.firstExecutionRunId);
    const [b] = results(await client.workflow.getHandle(who, again).result());
    console.log(`the Go activity's key ${a.key}, TypeScript's ${want}; after a reset ${b.key} replayed ${b.replayed}`);
    assert.equal(a.key, want, "Go's ActivityKey and TypeScript's callKey agree");
    assert.deepEqual([b.key, b.replayed, b.ticket_id], [a.key, true, a.ticket_id]);
  });
});

test("a workflow retry runs the model again, and its call replays the first attempt's", async () => {
  await withWorker(true, async (client, taskQueue) => {
    const who = "c-ts-temporal-retry-" + randomUUID().slice(0, 8);
    const seen: Step[][] = [];
    plan = (c) => {
      // The model, asked again on the retry, looks something up first.
      const steps = seen.length === 0 ? [ticket(c)] : [{ tool: "lookup" as const, args: { customer_id: c } }, ticket(c)];
      seen.push(steps);
      return steps;
    };
    const handle = await client.workflow.start("agentFailsOnce", { taskQueue, workflowId: who, args: [who], retry: { maximumAttempts: 2, initialInterval: "100 milliseconds" } });
    const [b] = results(await handle.result());
    console.log(`the model ran ${seen.length} times; the retry's call ${b.key} replayed ${b.replayed}`);
    assert.equal(seen.length, 2, "the retry ran the model again");
    assert.equal(b.replayed, true, "the retry's call replays the first attempt's");
  });
});
