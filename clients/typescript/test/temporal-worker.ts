// A TypeScript Temporal worker for the kill test (typescript_test.go): the
// agent workflows of test/temporal-workflows.ts with both sides of
// idemflow's KeyInterceptor, and a model that asks for one ticket. It runs
// until the workflow --until ends, printing each ticket call's answer.
//
//   node dist/test/temporal-worker.js --task-queue Q --until WORKFLOW_ID [--tools idemflow|naive]
//
// with IDEMFLOW_URL, IDEMFLOW_TOKEN, TEMPORAL_ADDRESS and TEMPORAL_NAMESPACE
// set. --tools naive is the control: a fresh key on every attempt.

import { randomUUID } from "node:crypto";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { Client as TemporalClient, Connection } from "@temporalio/client";
import { NativeConnection, Worker } from "@temporalio/worker";
import { Client } from "../src/index.js";
import { activityKey, keyInterceptor } from "../src/temporal.js";
import type { Activities } from "./temporal-workflows.js";

const { values } = parseArgs({ options: { "task-queue": { type: "string" }, until: { type: "string" }, tools: { type: "string", default: "idemflow" } } });
const address = process.env.TEMPORAL_ADDRESS!;
const namespace = process.env.TEMPORAL_NAMESPACE ?? "default";
// Attempts time out fast, so that a dropped answer is retried at once (the kill comes first).
const idemflow = new Client({ baseURL: process.env.IDEMFLOW_URL!, token: process.env.IDEMFLOW_TOKEN!, attemptTimeoutMs: 1000, initialBackoffMs: 50, maxBackoffMs: 300 });

const activities: Activities = {
  async model(customer) {
    return [{ tool: "create_ticket", args: { customer_id: customer, title: "Printer on fire" } }];
  },
  async create_ticket(args) {
    // The control's bug: a key made at call time, new on every attempt.
    const key = values.tools === "naive" ? randomUUID() : activityKey("create_ticket");
    const r = await idemflow.do({ key, path: "/v1/tickets", body: args });
    const answer = { ticket_id: (r.body as { ticket_id: string }).ticket_id, replayed: r.replayed, key };
    console.log(`tool create_ticket ${JSON.stringify(answer)}`);
    return answer;
  },
  async lookup(args) {
    return `looked up ${args.customer_id}`;
  },
};

const worker = await Worker.create({
  connection: await NativeConnection.connect({ address }),
  namespace,
  taskQueue: values["task-queue"]!,
  workflowsPath: fileURLToPath(new URL("./temporal-workflows.js", import.meta.url)),
  activities,
  interceptors: { activity: [keyInterceptor()], workflowModules: [fileURLToPath(new URL("../src/temporal-workflow.js", import.meta.url))] },
});
const client = new TemporalClient({ connection: await Connection.connect({ address }), namespace });
console.log("READY");
const out = await worker.runUntil(client.workflow.getHandle(values.until!).result());
console.log(`result ${JSON.stringify(out)}`);
console.log("DONE");
process.exit(0);
