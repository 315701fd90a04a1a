// A Temporal worker for the tests of Temporal's AI SDK integration
// (typescript_test.go): workflows.mjs under AiSdkPlugin, whose model
// activities reach a scripted model behind a local stand-in for the
// Messages API (../agent/model-api.ts, through @ai-sdk/anthropic; no
// network), with both sides of idemflow's KeyInterceptor. It runs until
// the workflow --until ends (the customer the model names), printing
// each ticket call's answer.
//
//   node worker.mjs --task-queue Q --until WORKFLOW_ID [--tools idemflow|naive] [--calls N] [--reset]
//
// with IDEMFLOW_URL, IDEMFLOW_TOKEN, TEMPORAL_ADDRESS and TEMPORAL_NAMESPACE
// set. --tools naive is the control: a fresh key on every attempt. --calls:
// how many tickets the model asks for, one after the other. --reset: once
// the workflow ended, reset it to its first workflow task (before the
// model ran) and run the new run to its end too, as an operator's reset
// does.

import { randomUUID } from "node:crypto";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { createAnthropic } from "@ai-sdk/anthropic";
import { Client } from "@idemflow/client";
import { activityKey, keyInterceptor } from "@idemflow/client/temporal";
import { AiSdkPlugin } from "@temporalio/ai-sdk";
import { Client as TemporalClient, Connection } from "@temporalio/client";
import { NativeConnection, Worker } from "@temporalio/worker";
import { startModel } from "../dist/agent/model-api.js";

const { values } = parseArgs({
  options: { "task-queue": { type: "string" }, until: { type: "string" }, tools: { type: "string", default: "idemflow" }, calls: { type: "string", default: "1" }, reset: { type: "boolean", default: false } },
});
const address = process.env.TEMPORAL_ADDRESS;
const namespace = process.env.TEMPORAL_NAMESPACE ?? "default";
// Attempts time out fast, so that a dropped answer is retried at once (the kill comes first).
const idemflow = new Client({ baseURL: process.env.IDEMFLOW_URL, token: process.env.IDEMFLOW_TOKEN, attemptTimeoutMs: 1000, initialBackoffMs: 50, maxBackoffMs: 300 });
const model = await startModel(values.until, "Printer on fire", Number(values.calls));

const activities = {
  async create_ticket(args) {
    // The control's bug: a key made at call time, new on every attempt.
    const key = values.tools === "naive" ? randomUUID() : activityKey("create_ticket");
    const r = await idemflow.do({ key, path: "/v1/tickets", body: args });
    const answer = { http_status: r.status, replayed: r.replayed, result: r.body };
    console.log(`tool create_ticket ${JSON.stringify(answer)}`);
    return answer;
  },
};

const worker = await Worker.create({
  connection: await NativeConnection.connect({ address }),
  namespace,
  taskQueue: values["task-queue"],
  workflowsPath: fileURLToPath(new URL("./workflows.mjs", import.meta.url)),
  activities,
  plugins: [new AiSdkPlugin({ modelProvider: createAnthropic({ baseURL: `${model.url}/v1`, apiKey: "sk-ant-test" }) })],
  interceptors: { activity: [keyInterceptor()], workflowModules: [fileURLToPath(import.meta.resolve("@idemflow/client/temporal-workflow"))] },
});
const client = new TemporalClient({ connection: await Connection.connect({ address }), namespace });
console.log("READY");
const out = await worker.runUntil(async () => {
  const handle = client.workflow.getHandle(values.until);
  const first = await handle.result();
  if (!values.reset) return first;
  const { runId } = await handle.describe();
  const history = await handle.fetchHistory();
  const task = history.events.find((e) => Number(e.eventType) === 6); // EVENT_TYPE_WORKFLOW_TASK_COMPLETED
  const r = await client.workflowService.resetWorkflowExecution({
    namespace,
    workflowExecution: { workflowId: values.until, runId },
    reason: "the test resets to before the model ran",
    workflowTaskFinishEventId: task.eventId,
    requestId: randomUUID(),
  });
  return client.workflow.getHandle(values.until, r.runId).result();
});
console.log(`result ${JSON.stringify(out)}`);
await model.close();
console.log("DONE");
process.exit(0);
