// The client's tests, against the real stack that typescript_test.go
// starts (IDEMFLOW_URL, IDEMFLOW_TOKEN, IDEMFLOW_TOKEN_B, IDEMFLOW_MCP_URL).

import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { getEventListeners } from "node:events";
import { createServer, request as httpRequest, type Server } from "node:http";
import { mkdtemp, readFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { test } from "node:test";
import { Client as MCPClient } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { Client as MCPClient2, StreamableHTTPClientTransport as StreamableHTTPClientTransport2 } from "@modelcontextprotocol/client";
import { StdioClientTransport as StdioClientTransport2 } from "@modelcontextprotocol/client/stdio";
import { createTaskSessionFromClient, resultFromTaskOutcome } from "@modelcontextprotocol/ext-tasks/client";
import {
  backoffCeiling, Client, DeadlineError, deriveKey, FileStore, IntentMismatchError, InvalidRequestError, judge, judgeOperation, type Judgement, KeyReusedError, preferWait,
  NotFoundError, OutcomeUnknownError, ProblemError, RejectedError, TooLargeError, UnauthorizedError,
  callIntent,
  type IntentField,
} from "../src/index.js";
import { pendingText, refusalText, resume } from "../src/tooltext.js";
import { invitation, rule } from "./modeltext.js";
import { durableKey, idemflowMcpTools, idemflowTool, NoDurableIdentityError } from "../src/langgraph.js";
import { AIMessage, HumanMessage, ToolMessage } from "@langchain/core/messages";
import { tool } from "@langchain/core/tools";
import { Command, END, MemorySaver, MessagesAnnotation, Send, START, StateGraph } from "@langchain/langgraph";
import { ToolNode, toolsCondition } from "@langchain/langgraph/prebuilt";
import { z } from "zod";
import { docsText, partitionProxy, readmeSnippet, ticketsUnder } from "./helpers.js";

const url = process.env.IDEMFLOW_URL!;
const token = process.env.IDEMFLOW_TOKEN!;
const client = (base = url, t = token) => new Client({ baseURL: base, token: t, attemptTimeoutMs: 2000, initialBackoffMs: 20, maxBackoffMs: 200 });
const ticket = (title: string) => ({ customer_id: "c-ts", title, priority: "high" });

test("the README names every entry point and the framework versions the tests ran", async () => {
  const readme = await readFile(new URL("../../README.md", import.meta.url), "utf8");
  const pkg = JSON.parse(await readFile(new URL("../../package.json", import.meta.url), "utf8"));
  for (const entry of Object.keys(pkg.exports)) {
    const name = entry === "." ? "@idemflow/client" : `@idemflow/client/${entry.slice(2)}`;
    assert.ok(readme.includes("`" + name + "`"), `the README does not name ${name}`);
  }
  for (const peer of Object.keys(pkg.peerDependencies)) {
    assert.ok(readme.includes("`" + peer + "` " + pkg.devDependencies[peer]), `the README does not give ${peer} ${pkg.devDependencies[peer]}, the version the tests ran`);
  }
  assert.ok(readme.includes("`zod` " + pkg.devDependencies.zod));
});

test("no text after a refusal or a pending answer invites a new call", () => {
  for (const s of rule.examples.invite) assert.notEqual(invitation(s), "", `the check lets through ${JSON.stringify(s)}`);
  for (const s of rule.examples.allow) assert.equal(invitation(s), "", `the check refuses ${JSON.stringify(s)}`);
  for (const [name, how] of Object.entries(resume)) {
    const text = pendingText("create_ticket", "va1_k", how);
    assert.equal(invitation(text), "", `${name}: ${text}`);
  }
});

// How late a DeadlineError may come after its deadline: the time an
// aborted request takes to close, on a loaded machine (the TypeScript
// client's README states it).
const deadlineSlackMs = 500;

for (const deadlineMs of [1000, 3000]) {
  test(`a deadline of ${deadlineMs} ms is a bound through a partition`, async () => {
    // The client's defaults (an attempt of 10 s, Prefer: wait=5) are each
    // longer than the deadline, and every answer is held: the deadline
    // alone ends the call.
    const p = await partitionProxy(url);
    try {
      const c = new Client({ baseURL: p.base, token });
      const start = Date.now();
      await assert.rejects(c.do({ key: randomUUID(), path: "/v1/tickets", body: ticket(`bound ${deadlineMs}`) }, { deadlineMs }), DeadlineError);
      const took = Date.now() - start;
      assert.ok(took <= deadlineMs + deadlineSlackMs, `a deadline of ${deadlineMs} ms ended the call after ${took} ms`);
      const waits = p.state.prefers.map((v) => Number(v.replace("wait=", "")));
      assert.ok(waits.length > 0 && Math.max(...waits) <= deadlineMs / 1000 - 1, `Prefer asked for ${p.state.prefers} with ${deadlineMs} ms left`);
    } finally {
      p.close();
    }
  });
}

// The README's deadlineMs written as a field of the intent was ignored:
// the call retried for the default 300 s. It is refused where it is
// written, naming where it goes, and nothing is sent.
test("a deadline written as a field of the intent is refused, naming do's option, and nothing is sent", async () => {
  let attempts = 0;
  const c = new Client({ baseURL: url, token, onAttempt: () => void attempts++ });
  const intent: any = { key: randomUUID(), path: "/v1/tickets", body: ticket("misplaced deadline"), deadlineMs: 1000 };
  await assert.rejects(c.do(intent), (e: Error) => e instanceof TypeError && e.message.includes("client.do(intent, { deadlineMs })"));
  assert.equal(attempts, 0);
});

test("a replay returns the first answer, marked replayed", async () => {
  const key = randomUUID();
  const first = await client().do({ key, path: "/v1/tickets", body: ticket("once") });
  const again = await client().do({ key, path: "/v1/tickets", body: ticket("once") });
  assert.equal(first.status, 201);
  assert.equal(first.replayed, false);
  assert.equal(again.replayed, true);
  assert.equal(again.raw, first.raw);
});

test("an answer lost on the wire is retried under the same key, and is the call's own", async () => {
  // A proxy that forwards the first request, then drops its answer.
  let dropped = 0;
  const keys: string[] = [];
  const proxy: Server = createServer((req, res) => {
    keys.push(String(req.headers["idempotency-key"]));
    const up = httpRequest(url + req.url, { method: req.method, headers: req.headers }, (ur) => {
      if (dropped++ === 0) {
        ur.resume();
        ur.on("end", () => req.socket.destroy());
        return;
      }
      res.writeHead(ur.statusCode!, ur.headers);
      ur.pipe(res);
    });
    req.pipe(up);
  });
  await new Promise<void>((r) => proxy.listen(0, "127.0.0.1", r));
  try {
    const addr = proxy.address() as { port: number };
    const intent = { key: randomUUID(), path: "/v1/tickets", body: ticket("lost answer") };
    const c = client(`http://127.0.0.1:${addr.port}`);
    const r = await c.do(intent);
    assert.equal(r.status, 201);
    assert.equal(r.replayed, false, "the call that ran the intent got its own answer, on a later attempt");
    assert.ok(keys.length >= 2 && keys.every((k) => k === keys[0]), `every attempt carries one key: ${keys}`);
    const again = await c.do(intent); // another call of the intent
    assert.equal(again.replayed, true);
    assert.equal(again.raw, r.raw);
  } finally {
    proxy.close();
  }
});

test("final answers are typed errors, never retried", async () => {
  const key = randomUUID();
  await client().do({ key, path: "/v1/tickets", body: ticket("first") });
  const reused = await client().do({ key, path: "/v1/tickets", body: ticket("changed") }).catch((e) => e);
  assert.ok(reused instanceof KeyReusedError, String(reused));
  // What an integration hands the model of it invites no new call.
  assert.equal(invitation(refusalText(reused, key)), "", refusalText(reused, key));
  await assert.rejects(client().do({ key: randomUUID(), path: "/v1/tickets", body: { title: "" } }), InvalidRequestError);
  await assert.rejects(client(url, "not-a-token").do({ key: randomUUID(), path: "/v1/tickets", body: ticket("x") }), UnauthorizedError);
  await assert.rejects(client().do({ key: randomUUID(), path: "/v1/orders/ORD-NOPE/pay", body: { payment_ref: "p" } }), NotFoundError);
  const order = await client().do({ key: randomUUID(), path: "/v1/orders", body: { customer_id: "c-ts", items: [{ sku: "SKU-MOUSE", quantity: 1 }] } });
  const orderNo = (order.body as { order_no: string }).order_no;
  await client().do({ key: randomUUID(), path: `/v1/orders/${orderNo}/cancel`, body: {} });
  const err = await client().do({ key: randomUUID(), path: `/v1/orders/${orderNo}/pay`, body: { payment_ref: "p" } }).catch((e) => e);
  assert.ok(err instanceof RejectedError, String(err));
  assert.equal(err.code, "invalid-transition");
});

test("the file store keeps an intent's key across restarts, and refuses another request under its ID", async () => {
  const dir = await mkdtemp(join(tmpdir(), "idemflow-ts-"));
  const a = await new FileStore(dir).open("step-1", "POST", "/v1/tickets", ticket("stored"));
  const b = await new FileStore(dir).open("step-1", "POST", "/v1/tickets", ticket("stored"));
  assert.equal(a.key, b.key);
  await assert.rejects(new FileStore(dir).open("step-1", "POST", "/v1/tickets", ticket("other")), IntentMismatchError);
  const first = await client().run(new FileStore(dir), "step-1", "POST", "/v1/tickets", ticket("stored"));
  const resumed = await client().run(new FileStore(dir), "step-1", "POST", "/v1/tickets", ticket("stored"));
  assert.equal(resumed.raw, first.raw);
});

test("a request idemflow refused as sent is corrected under the same ID and key; a recorded one is not", async () => {
  const dir = await mkdtemp(join(tmpdir(), "idemflow-ts-"));
  const bad = { customer_id: "c-ts", title: "corrected", colour: "red" }; // a member the schema does not have
  await assert.rejects(client().run(new FileStore(dir), "step-fix", "POST", "/v1/tickets", bad), (e: unknown) => e instanceof InvalidRequestError && !e.settled);
  const refused = await new FileStore(dir).open("step-fix", "POST", "/v1/tickets", bad);
  assert.equal(refused.refused, true, "the store records the refusal");
  const fixed = await client().run(new FileStore(dir), "step-fix", "POST", "/v1/tickets", ticket("corrected"));
  assert.equal(fixed.status, 201);
  assert.equal(JSON.parse(fixed.raw).idempotency_key, refused.key, "the corrected body went under the same key");
  await assert.rejects(new FileStore(dir).open("step-fix", "POST", "/v1/tickets", ticket("another")), IntentMismatchError);
});

test("a durable key needs a durable identity, and is never made at random", () => {
  const call = { id: "call_1", name: "create_ticket", args: {} };
  const state = { messages: [new AIMessage({ id: "msg-1", content: "", tool_calls: [call] })] };
  const config = { configurable: { thread_id: "t-1", checkpoint_ns: "tools:abc" }, toolCall: call, state };
  assert.equal(durableKey(config, "create_ticket"), durableKey({ ...config, state: [...state.messages] }, "create_ticket"));
  // The same call in another AI message is the same intended call; after another human message, another.
  assert.equal(durableKey(config, "create_ticket"), durableKey({ ...config, state: { messages: [new AIMessage({ id: "msg-2", content: "", tool_calls: [call] })] } }, "create_ticket"));
  const later = { messages: [new HumanMessage({ id: "h-2", content: "again" }), new AIMessage({ id: "msg-3", content: "", tool_calls: [call] })] };
  assert.notEqual(durableKey(config, "create_ticket"), durableKey({ ...config, state: later }, "create_ticket"));
  assert.notEqual(durableKey(config, "create_ticket"), durableKey({ ...config, configurable: { thread_id: "t-2" } }, "create_ticket"));
  assert.throws(() => durableKey({ ...config, state: undefined }, "create_ticket"), NoDurableIdentityError);
  assert.notEqual(durableKey(config, "create_ticket"), durableKey(config, "create_order"));
  assert.match(durableKey(config, "create_ticket"), /^lg5_[A-Za-z0-9_-]{42}$/);
  assert.throws(() => durableKey({ toolCall: config.toolCall }, "create_ticket"), NoDurableIdentityError);
  assert.throws(() => durableKey({ configurable: { thread_id: "t-1" } }, "create_ticket"), NoDurableIdentityError);
});

test("over MCP, a key the client derives from its call ID in _meta replaces the model-written one", async () => {
  const mcp = new MCPClient({ name: "ts-test", version: "1" });
  await mcp.connect(new StreamableHTTPClientTransport(new URL(process.env.IDEMFLOW_MCP_URL!), {
    requestInit: { headers: { Authorization: `Bearer ${token}` } },
  }));
  try {
    const key = deriveKey("mcp1", "session-1", "call-7", "create_ticket");
    const call = (modelKey: string) =>
      mcp.callTool({ name: "create_ticket", arguments: { idempotency_key: modelKey, ...ticket("via MCP") }, _meta: { "io.idemflow/idempotency-key": key } });
    // The model, asked again after a crash, writes another key: the
    // client's, from the same call, still names the same intent.
    type Answer = { structuredContent: { replayed: boolean; result: { ticket_id: string; idempotency_key: string } } };
    const first = (await call("model-key-1")) as unknown as Answer;
    const again = (await call("model-key-2")) as unknown as Answer;
    assert.equal(first.structuredContent.replayed, false);
    assert.equal(again.structuredContent.replayed, true);
    assert.equal(again.structuredContent.result.ticket_id, first.structuredContent.result.ticket_id);
    assert.equal(first.structuredContent.result.idempotency_key, key);
  } finally {
    await mcp.close();
  }
});

test("docs/agents.md's MCP call with a key in _meta runs as written in a session", async () => {
  const block = (await docsText()).split("With the TypeScript SDK:")[1].split("```ts\n")[1].split("```")[0];
  // The names it uses are the function's parameters: the snippet as
  // written, in the context of an open session.
  const AsyncFunction = Object.getPrototypeOf(async () => {}).constructor;
  const snippet = new AsyncFunction("mcp", "deriveKey", "threadId", "callId", block);
  const mcp = new MCPClient({ name: "ts-docs", version: "1" });
  await mcp.connect(new StreamableHTTPClientTransport(new URL(process.env.IDEMFLOW_MCP_URL!), {
    requestInit: { headers: { Authorization: `Bearer ${token}` } },
  }));
  try {
    const threadId = `docs-${randomUUID()}`;
    await snippet(mcp, deriveKey, threadId, "call-1");
    await snippet(mcp, deriveKey, threadId, "call-1");
    const key = deriveKey("mcp1", threadId, "call-1", "create_ticket");
    const again = (await mcp.callTool({ name: "create_ticket", arguments: { idempotency_key: "another", customer_id: "c-1", title: "Printer on fire" },
      _meta: { "io.idemflow/idempotency-key": key } })) as unknown as { structuredContent: { replayed: boolean; result: { idempotency_key: string } } };
    assert.equal(again.structuredContent.replayed, true);
    assert.equal(again.structuredContent.result.idempotency_key, key);
  } finally {
    await mcp.close();
  }
});

test("the official SDK's task client (2025-11-25 tasks) gets a task, polls it and reads the call's result", async () => {
  const mcp = new MCPClient({ name: "ts-tasks", version: "1" });
  await mcp.connect(new StreamableHTTPClientTransport(new URL(process.env.IDEMFLOW_MCP_URL!), {
    requestInit: { headers: { Authorization: `Bearer ${token}` } },
  }));
  try {
    // listTools tells the SDK which tools take tasks (taskSupport).
    const tools = await mcp.listTools();
    assert.equal(tools.tools.find((t) => t.name === "create_ticket")?.execution?.taskSupport, "optional");
    assert.equal(tools.tools.find((t) => t.name === "get_operation")?.execution?.taskSupport, undefined);
    const key = `task-${randomUUID()}`;
    const run = async () => {
      const seen: string[] = [];
      let taskId = "";
      let result: any;
      for await (const m of mcp.experimental.tasks.callToolStream({ name: "create_ticket", arguments: { idempotency_key: key, ...ticket("as a task") } })) {
        seen.push(m.type);
        if (m.type === "taskCreated") taskId = m.task.taskId;
        if (m.type === "result") result = m.result;
        if (m.type === "error") throw m.error;
      }
      return { seen, taskId, result };
    };
    const first = await run();
    assert.deepEqual([first.seen[0], first.seen.at(-1)], ["taskCreated", "result"], first.seen.join(","));
    assert.equal(first.result.structuredContent.replayed, false);
    assert.equal(first.result._meta["io.modelcontextprotocol/related-task"].taskId, first.taskId);
    // The same call again is a replay, under its own task handle.
    const again = await run();
    assert.equal(again.result.structuredContent.replayed, true);
    assert.equal(again.result.structuredContent.result.ticket_id, first.result.structuredContent.result.ticket_id);
    assert.notEqual(again.taskId, first.taskId);
    // tasks/get answers the handle later, from a new session.
    const later = new MCPClient({ name: "ts-tasks-later", version: "1" });
    await later.connect(new StreamableHTTPClientTransport(new URL(process.env.IDEMFLOW_MCP_URL!), {
      requestInit: { headers: { Authorization: `Bearer ${token}` } },
    }));
    try {
      assert.equal((await later.experimental.tasks.getTask(first.taskId)).status, "completed");
    } finally {
      await later.close();
    }
  } finally {
    await mcp.close();
  }
});

// The Tasks extension (MCP 2026-07-28), driven by the official SDK's
// second generation: @modelcontextprotocol/client pinned to 2026-07-28,
// over stdio and over streamable HTTP, and @modelcontextprotocol/ext-tasks,
// whose V2 requester the SDK's own codecs cannot carry yet, so the package
// asks the host for a raw request path (rawDispatch) and the framing of
// each request (v2RequestFraming): its README's setup.
for (const over of ["stdio", "streamable HTTP"] as const) {
  test(`the official SDK 2's Tasks extension client (ext-tasks, 2026-07-28) over ${over} gets a task and settles it with the call's own result`, async () => {
    const clientInfo = { name: "ts-ext-tasks", version: "1" };
    const client = new MCPClient2(clientInfo, { versionNegotiation: { mode: { pin: "2026-07-28" } } });
    let rawDispatch: (request: any) => Promise<any>;
    if (over === "stdio") {
      const transport = new StdioClientTransport2({
        command: process.env.IDEMFLOW_BIN!,
        args: ["mcp"],
        env: { IDEMFLOW_URL: url, IDEMFLOW_TOKEN: token, IDEMFLOW_TOOLS: process.env.IDEMFLOW_TOOLS!, PATH: process.env.PATH ?? "" },
      });
      await client.connect(transport);
      // The host's raw request path: the responses to its own IDs are its.
      const waiting = new Map<string, (r: any) => void>();
      let next = 0;
      const sdk = transport.onmessage;
      transport.onmessage = (msg: any) => {
        const done = typeof msg?.id === "string" ? waiting.get(msg.id) : undefined;
        if (!done) return sdk?.(msg);
        waiting.delete(msg.id);
        done(msg.error ? { kind: "error", error: msg.error } : { kind: "result", result: msg.result });
      };
      rawDispatch = (request: any) =>
        new Promise<any>((resolve, reject) => {
          const id = `raw-${++next}`;
          waiting.set(id, resolve);
          transport.send({ jsonrpc: "2.0", id, ...request }).catch(reject);
        });
    } else {
      const endpoint = new URL(process.env.IDEMFLOW_MCP_URL!);
      await client.connect(new StreamableHTTPClientTransport2(endpoint, { requestInit: { headers: { Authorization: `Bearer ${token}` } } }));
      // The host's raw request path: one POST a request, as 2026-07-28
      // frames it over HTTP; the answer as JSON or as an event stream.
      let next = 0;
      rawDispatch = async (request: any) => {
        const resp = await fetch(endpoint, {
          method: "POST",
          headers: {
            Authorization: `Bearer ${token}`, "Content-Type": "application/json", Accept: "application/json, text/event-stream",
            "Mcp-Protocol-Version": "2026-07-28", "Mcp-Method": request.method,
            ...(request.method === "tools/call" ? { "Mcp-Name": request.params.name } : {}),
          },
          body: JSON.stringify({ jsonrpc: "2.0", id: `raw-${++next}`, ...request }),
        });
        const text = await resp.text();
        const msg = JSON.parse(resp.headers.get("content-type")?.startsWith("text/event-stream")
          ? text.split("\n").filter((l) => l.startsWith("data:")).map((l) => l.slice(5)).find((d) => d.includes('"id"'))!
          : text);
        return msg.error ? { kind: "error", error: msg.error } : { kind: "result", result: msg.result };
      };
    }
    assert.equal(client.getProtocolEra(), "modern");
    const session = createTaskSessionFromClient(client, {
      endpointId: `idemflow-test-${over}`,
      rawDispatch,
      v2RequestFraming: { protocolVersion: "2026-07-28", clientInfo, clientCapabilities: {} },
    });
    try {
      const args = { idempotency_key: `ext-${randomUUID()}`, payment_id: `p-ext-${randomUUID().slice(0, 8)}`, amount_cents: 100 };
      const start = Date.now();
      const execution = await session.callTool("slow_refund", args);
      assert.equal(execution.kind, "task", "a 4 s call past the task wait is a task");
      const { outcome } = await execution.settle();
      const took = Date.now() - start;
      assert.equal(outcome.status, "completed", `${(outcome as any).error?.message}: ${JSON.stringify(outcome)}`);
      const result: any = resultFromTaskOutcome(outcome);
      assert.equal(result.structuredContent.replayed, false, JSON.stringify(result));
      assert.ok(took > 3000, `settled after ${took} ms, before the service answered`);
      // The same call again: its answer at once, a replay, no task.
      const again = await session.callTool("slow_refund", args);
      assert.equal(again.kind, "immediate");
      const replay: any = resultFromTaskOutcome((await again.settle()).outcome);
      assert.equal(replay.structuredContent.replayed, true);
      assert.deepEqual(replay.structuredContent.result, result.structuredContent.result);
      console.log(`ext-tasks on @modelcontextprotocol/client 2.4.0 over ${over}, era ${client.getProtocolEra()}: a 4 s call was a task, settled after ${took} ms (replayed false); the same call again: immediate, replayed true`);
    } finally {
      await session.close();
      await client.close();
    }
  });
}

const refund = (cents: number) => ({ payment_id: "pay-ts", amount_cents: cents });

test("a 202's polled answer is the request's own, not a replay", async () => {
  // The 202 says this request started the run it then polls: the answer
  // the operation holds is its first, as Go's Do reads it.
  const view = '{"operation_id":"o","status":"succeeded","result_status":201,"result_content_type":"application/json","result":{"ticket_id":"t-9"}}';
  const seen: string[] = [];
  const scripted: Server = createServer((req, res) => {
    seen.push(`${req.method} ${req.url}`);
    req.resume();
    if (req.method === "POST") {
      res.writeHead(202, { "Content-Type": "application/json", Location: "/v1/operations/o", "Retry-After": "0" });
      res.end('{"operation_id":"o","status":"processing"}');
      return;
    }
    res.writeHead(200, { "Content-Type": "application/json" });
    res.end(view);
  });
  await new Promise<void>((r) => scripted.listen(0, "127.0.0.1", r));
  try {
    const addr = scripted.address() as { port: number };
    const r = await client(`http://127.0.0.1:${addr.port}`).do({ key: randomUUID(), path: "/v1/tickets", body: ticket("polled") });
    assert.deepEqual([r.status, r.body, r.replayed], [201, { ticket_id: "t-9" }, false]);
    assert.deepEqual(seen, ["POST /v1/tickets", "GET /v1/operations/o"]);
  } finally {
    scripted.close();
  }
});

test("a downstream's 202 is the call's answer, not idemflow's still running", async () => {
  const key = randomUUID();
  const first = await client().do({ key, path: "/v1/tools/refund_queued", body: refund(100) });
  const again = await client().do({ key, path: "/v1/tools/refund_queued", body: refund(100) });
  assert.equal(first.status, 202);
  assert.equal(first.replayed, false);
  assert.equal((first.body as { status: string }).status, "queued");
  assert.equal(again.replayed, true);
  assert.equal(again.raw, first.raw);
});

test("a downstream's 4xx is a rejection stored under the key, not idemflow's refusal", async () => {
  const key = randomUUID();
  await assert.rejects(client().do({ key, path: "/v1/tools/refund_queued", body: refund(2_000_000) }), (e: unknown) => {
    assert.ok(e instanceof RejectedError && !(e instanceof InvalidRequestError), String(e));
    assert.equal(e.code, "downstream-rejected");
    assert.equal(e.settled, true);
    assert.match(e.body, /amount_exceeds_capture/);
    return true;
  });
  // As it says: other parameters under that key are a conflict.
  await assert.rejects(client().do({ key, path: "/v1/tools/refund_queued", body: refund(5) }), KeyReusedError);
});

test("a polled answer is the replay's bytes, a downstream's text too", async () => {
  const key = randomUUID();
  const polling = new Client({ baseURL: url, token, attemptTimeoutMs: 2000, initialBackoffMs: 20, maxBackoffMs: 200, waitSeconds: 0 });
  const polled = await polling.do({ key, path: "/v1/tools/refund_text", body: refund(100) });
  const replay = await client().do({ key, path: "/v1/tools/refund_text", body: refund(100) });
  assert.equal(polled.status, 201);
  assert.match(polled.raw, /^refund re_\d+ of 100 cents/);
  assert.equal(polled.raw, replay.raw);
  assert.equal(polled.replayed, false, "the polled answer is the request's own");
  assert.equal(replay.replayed, true);
});

// The table every client reads answers by (clients/testdata/answers.json),
// shared with the Go and Python clients' tests.
test("the shared answer vectors", async () => {
  const v = JSON.parse(await readFile(new URL("../../../testdata/answers.json", import.meta.url), "utf8")) as {
    answers: { name: string; status: number; headers: Record<string, string>; body: string; expect: Expectation }[];
    operations: { name: string; view: unknown; expect: Expectation & { content_type?: string } }[];
    backoff: { initial_ms: number; max_ms: number; attempt: number; ceiling_ms: number }[];
    prefer_wait: { configured_s: number; left_ms: number; wait_s: number }[];
  };
  assert.ok(v.answers.length > 0 && v.operations.length > 0 && v.backoff.length > 0 && v.prefer_wait.length > 0);
  for (const w of v.prefer_wait) assert.equal(preferWait(w.configured_s, w.left_ms / 1000), w.wait_s, `preferWait ${JSON.stringify(w)}`);
  for (const a of v.answers) check(a.name, judge(a.status, new Headers(a.headers), a.body), a.expect);
  for (const o of v.operations) check(`operation ${o.name}`, judgeOperation(typeof o.view === "string" ? o.view : JSON.stringify(o.view)), o.expect);
  for (const b of v.backoff) {
    assert.equal(backoffCeiling(b.initial_ms, b.max_ms, b.attempt), b.ceiling_ms, `backoff ${JSON.stringify(b)}`);
  }
});

test("the shared key vectors", async () => {
  const v = JSON.parse(await readFile(new URL("../../../testdata/keys.json", import.meta.url), "utf8")) as {
    derive: { scheme: string; parts: string[]; key: string }[];
    langgraph: LangGraphVector[];
  };
  assert.ok(v.derive.length > 0 && v.langgraph.length > 0);
  for (const d of v.derive) assert.equal(deriveKey(d.scheme, ...d.parts), d.key, `deriveKey ${JSON.stringify(d.parts)}`);
  for (const c of v.langgraph) {
    const config = {
      configurable: { ...(c.thread_id === null ? {} : { thread_id: c.thread_id }), checkpoint_ns: c.checkpoint_ns },
      ...(c.tool_call_id === null ? {} : { toolCall: { id: c.tool_call_id, name: c.tool, args: {} } }),
      state: { messages: c.messages.map(langGraphMessage) },
    };
    // An entry without a scheme is lg4's; lg5's names the tool's intent fields.
    const scheme = (c.scheme ?? "lg4") as "lg5" | "lg4" | "lg3";
    const intent = scheme === "lg5" ? (a: Record<string, unknown>) => callIntent(c.intent ?? [], a) : undefined;
    if (c.error) {
      assert.throws(() => durableKey(config, c.tool, scheme, intent), (e: Error) => e instanceof NoDurableIdentityError && e.message.includes(c.error!), c.name);
    } else {
      assert.equal(durableKey(config, c.tool, scheme, intent), c.key, c.name);
    }
  }
});

interface LangGraphVector {
  name: string;
  scheme?: string;
  intent?: IntentField[];
  thread_id: string | null;
  checkpoint_ns: string;
  messages: { type: string; id?: string; content?: string; tool_call_id?: string; tool_calls?: { id: string; name: string; args: Record<string, unknown> }[] }[];
  tool_call_id: string | null;
  tool: string;
  key?: string;
  error?: string;
}

function langGraphMessage(m: LangGraphVector["messages"][number]) {
  if (m.type === "human") return new HumanMessage({ content: m.content ?? "", id: m.id });
  if (m.type === "tool") return new ToolMessage({ content: m.content ?? "", id: m.id, tool_call_id: m.tool_call_id! });
  return new AIMessage({ content: m.content ?? "", id: m.id, tool_calls: (m.tool_calls ?? []).map((c) => ({ ...c, type: "tool_call" as const })) });
}

interface Expectation {
  action: string;
  replayed?: boolean;
  error?: string;
  code?: string;
  revisable?: boolean;
  fields?: string[];
  wait_ms?: number;
  status?: number;
  body?: string;
}

const errorClasses: Record<string, Function> = {
  "invalid-request": InvalidRequestError, unauthorized: UnauthorizedError, "not-found": NotFoundError, "too-large": TooLargeError,
  "key-reused": KeyReusedError, rejected: RejectedError, "outcome-unknown": OutcomeUnknownError,
};

function check(name: string, j: Judgement, e: Expectation) {
  assert.equal(j.action, e.action, `${name}: ${JSON.stringify(j)}`);
  if (j.action === "success") {
    if (e.replayed !== undefined) assert.equal(j.result.replayed, e.replayed, `${name}: replayed`);
    if (e.status !== undefined) assert.deepEqual([j.result.status, j.result.raw], [e.status, e.body], `${name}: answer`);
  }
  if (j.action === "fail" || j.action === "retry") {
    if (e.error) assert.ok(j.error instanceof errorClasses[e.error], `${name}: ${j.error.name}, want ${e.error}`);
    if (e.code) assert.equal((j.error as RejectedError).code, e.code, `${name}: code`);
    if (e.revisable !== undefined) {
      assert.equal(j.error instanceof InvalidRequestError && !j.error.settled, e.revisable, `${name}: revisable`);
    }
    if (e.fields !== undefined) {
      assert.deepEqual((j.error as ProblemError).problem.errors?.map((f) => f.field), e.fields, `${name}: the refusal's fields`);
    }
  }
  if (j.action === "retry" && e.wait_ms !== undefined) assert.equal(j.waitMs, e.wait_ms, `${name}: wait`);
}

// A partition longer than the tool's wait, with ToolNode's defaults
// (handleToolErrors true): the idemflow tool pauses the run (an interrupt),
// and the resumed run gets the first call's answer under its key: one
// effect. The control, a tool that lets the wait's end be an error, hands
// the model "Please fix your mistakes"; the model calls again, under a new
// tool-call ID and so a new key: two effects.
/** The usual agent loop on an in-memory checkpointer: the model, then the tool node while the model asks for calls (route: toolsCondition, or one that sends each call). */
function agentGraph(model: (state: typeof MessagesAnnotation.State) => { messages: AIMessage[] }, ticketTool: any,
  route: (state: typeof MessagesAnnotation.State) => any = toolsCondition) {
  return new StateGraph(MessagesAnnotation)
    .addNode("agent", model)
    .addNode("tools", new ToolNode([ticketTool]))
    .addEdge(START, "agent")
    .addConditionalEdges("agent", route, ["tools", END])
    .addEdge("tools", "agent")
    .compile({ checkpointer: new MemorySaver() });
}

test("a pending answer pauses the LangGraph.js run, and never reaches the model as an error", async () => {
  const { state, base, close } = await partitionProxy(url);
  const keys = state.keys;
  const c = new Client({ baseURL: base, token, attemptTimeoutMs: 300, initialBackoffMs: 20, maxBackoffMs: 100 });
  const schema = z.object({ customer_id: z.string(), title: z.string() });
  const fixed = idemflowTool(c, { name: "create_ticket", description: "Create a ticket.", schema, path: "/v1/tickets", waitMs: 1200 });
  const control = tool(
    async (args, config) => JSON.stringify((await c.do({ key: durableKey(config, "create_ticket"), path: "/v1/tickets", body: args }, { deadlineMs: 1200 })).body),
    { name: "create_ticket", description: "Create a ticket.", schema },
  );
  const run = async (ticketTool: typeof fixed | typeof control, customer: string) => {
    // The model: asks for the ticket; after a tool error, asks again (a
    // new tool-call ID, as a model writes one); after an answer, is done.
    const model = (state: typeof MessagesAnnotation.State) => {
      const tools = state.messages.filter((m) => m.getType() === "tool") as ToolMessage[];
      const last = tools[tools.length - 1];
      if (last && (last.status !== "error" || tools.length >= 2)) return { messages: [new AIMessage(`done: ${last.content}`)] };
      const call = { name: "create_ticket", args: { customer_id: customer, title: "Printer on fire" }, id: "call_" + randomUUID(), type: "tool_call" as const };
      return { messages: [new AIMessage({ content: "", tool_calls: [call] })] };
    };
    const graph = agentGraph(model, ticketTool);
    const config = { configurable: { thread_id: customer } };
    const out = await graph.invoke({ messages: [new HumanMessage("Open a ticket.")] }, config);
    return { graph, config, out };
  };
  const effects = (seen: string[], customer: string) => ticketsUnder(client(), seen, customer);
  try {
    const who = "c-ts-pending-" + randomUUID().slice(0, 8);
    const { graph, config, out } = await run(fixed, who);
    const paused = (out as any).__interrupt__;
    assert.ok(paused?.length === 1 && paused[0].value.idemflow === "pending", `the run paused: ${JSON.stringify(out)}`);
    assert.ok(!out.messages.some((m) => m.getType() === "tool"), "no tool message reached the model");
    state.partitioned = false;
    const resumed = await graph.invoke(new Command({ resume: true }), config);
    const answers = resumed.messages.filter((m) => m.getType() === "tool") as ToolMessage[];
    assert.equal(answers.length, 1);
    assert.equal(answers[0].status, "success");
    assert.equal(JSON.parse(String(answers[0].content)).replayed, true, "the resumed call got the first call's answer");
    assert.equal(await effects(keys, who), 1);

    keys.length = 0;
    state.partitioned = true;
    const naive = "c-ts-pending-control-" + randomUUID().slice(0, 8);
    const ctl = await run(control, naive);
    const errors = ctl.out.messages.filter((m) => m.getType() === "tool" && (m as ToolMessage).status === "error");
    assert.equal(errors.length, 2, "the control hands the model the wait's end as an error, twice");
    state.partitioned = false;
    assert.equal(await effects(keys, naive), 2, "the control's retry under a new key made a second ticket");
  } finally {
    close();
  }
});

// idemflowMcpTools, LangGraph.js's tools over idemflow's MCP server: a call
// slower than its wait pauses the run (an interrupt), no tool message, and
// each resume waits on the same task until it answers; a call within its
// wait gets its own answer.
test("idemflowMcpTools (LangGraph.js) waits on a call's task, and a pending call pauses the run, never reaching the model", async () => {
  const mcp = new MCPClient({ name: "ts-langgraph-mcp", version: "1" });
  await mcp.connect(new StreamableHTTPClientTransport(new URL(process.env.IDEMFLOW_MCP_URL!), { requestInit: { headers: { Authorization: `Bearer ${token}` } } }));
  try {
    const who = "c-ts-lg-mcp-" + randomUUID().slice(0, 8);
    const run = async (thread: string, waitMs: number) => {
      const [refund] = await idemflowMcpTools(mcp, { names: ["slow_refund"], waitMs });
      // The model asks for the refund, a key of its own each time it writes
      // the call, until it reads an answer.
      const model = (state: typeof MessagesAnnotation.State) => {
        const tools = state.messages.filter((m) => m.getType() === "tool") as ToolMessage[];
        if (tools.length > 0) return { messages: [new AIMessage(`done: ${tools[tools.length - 1].content}`)] };
        const args = { idempotency_key: randomUUID(), payment_id: `p-${thread}`, amount_cents: 100 };
        return { messages: [new AIMessage({ content: "", tool_calls: [{ name: "slow_refund", args, id: "call_" + randomUUID(), type: "tool_call" as const }] })] };
      };
      const graph = agentGraph(model, refund);
      const config = { configurable: { thread_id: thread } };
      return { graph, config, out: await graph.invoke({ messages: [new HumanMessage({ content: "Refund 1 euro.", id: "msg-" + thread })] }, config) };
    };
    const answer = (out: any) => JSON.parse(String((out.messages.filter((m: any) => m.getType() === "tool") as ToolMessage[])[0].content));

    const start = Date.now();
    const first = await run(who, 30_000);
    const took = Date.now() - start;
    assert.equal(answer(first.out).replayed, false, JSON.stringify(first.out.messages));
    assert.ok(took > 3000, `answered after ${took} ms, before the service did`);

    const cut = Date.now();
    const { graph, config, out } = await run(who + "-p", 1000);
    const bound = Date.now() - cut;
    const paused = (out as any).__interrupt__;
    assert.ok(paused?.length === 1 && paused[0].value.idemflow === "pending", `the run paused: ${JSON.stringify(out)}`);
    assert.ok(!out.messages.some((m) => m.getType() === "tool"), "no tool message reached the model");
    assert.ok(bound < 3000, `a 1 s wait paused after ${bound} ms`);
    let resumed: any = await graph.invoke(new Command({ resume: true }), config);
    let resumes = 1;
    for (; resumed.__interrupt__ && resumes < 10; resumes++) resumed = await graph.invoke(new Command({ resume: true }), config);
    assert.equal(resumed.messages.filter((m: any) => m.getType() === "tool").length, 1, "one answer, after the resumes");
    assert.equal(answer(resumed).replayed, true, "the resumed call got the first call's answer under its key");
    console.log(`LangGraph.js idemflowMcpTools: a 4 s call waited on its task (${took} ms, replayed false); a 1 s wait paused the run after ${bound} ms; ${resumes} resumes later, replayed true`);
  } finally {
    await mcp.close();
  }
});

// A long retry loop under the caller's signal leaves no listener on it:
// each pause's abort listener goes when the pause ends (Node warned
// MaxListenersExceededWarning after eleven).
test("a retry loop leaves no listener on the caller's signal", async () => {
  const busy: Server = createServer((_req, res) => {
    res.writeHead(503, { "Content-Type": "application/problem+json" });
    res.end(JSON.stringify({ type: "/problems/unavailable", title: "Service Unavailable", status: 503 }));
  });
  await new Promise<void>((r) => busy.listen(0, "127.0.0.1", r));
  try {
    const base = `http://127.0.0.1:${(busy.address() as { port: number }).port}`;
    const c = new Client({ baseURL: base, token, attemptTimeoutMs: 500, initialBackoffMs: 1, maxBackoffMs: 5 });
    const signal = new AbortController().signal;
    const attempts = { n: 0 };
    busy.on("request", () => attempts.n++);
    await assert.rejects(c.do({ key: randomUUID(), path: "/v1/tickets", body: ticket("busy") }, { deadlineMs: 600, signal }));
    assert.ok(attempts.n > 20, `a long loop: ${attempts.n} attempts`);
    assert.equal(getEventListeners(signal, "abort").length, 0, "listeners left on the caller's signal");
  } finally {
    busy.close();
  }
});

test("a tool-call ID reused in a later turn is a second call, not the first one's replay", async () => {
  // Some models and servers number tool calls per message (call_0,
  // call_1), so a later turn of the thread brings the same ID back. The
  // tool node gets each call by Send, as LangChain's createAgent sends it.
  const schema = z.object({ customer_id: z.string(), title: z.string() });
  const ticketTool = idemflowTool(client(), { name: "create_ticket", description: "Create a ticket.", schema, path: "/v1/tickets" });
  const who = "c-ts-reused-call-id-" + randomUUID().slice(0, 8);
  const model = (state: typeof MessagesAnnotation.State) => {
    if (state.messages[state.messages.length - 1].getType() === "tool") return { messages: [new AIMessage("done")] };
    const call = { name: "create_ticket", args: { customer_id: who, title: "Printer on fire" }, id: "call_0", type: "tool_call" as const };
    return { messages: [new AIMessage({ content: "", tool_calls: [call] })] };
  };
  const route = (state: typeof MessagesAnnotation.State) => {
    const last = state.messages[state.messages.length - 1] as AIMessage;
    return last.tool_calls?.length ? last.tool_calls.map((call) => new Send("tools", { ...state, lg_tool_call: call })) : END;
  };
  const graph = agentGraph(model, ticketTool, route);
  const config = { configurable: { thread_id: who } };
  const answers = [];
  for (const turn of ["first", "second"]) {
    const out = await graph.invoke({ messages: [new HumanMessage(`${turn} turn: open a ticket`)] }, config);
    const tools = out.messages.filter((m) => m.getType() === "tool");
    answers.push(JSON.parse(String(tools[tools.length - 1].content)));
  }
  console.log(`two turns under call_0: replayed ${answers.map((a) => a.replayed)}, tickets ${answers.map((a) => a.result.ticket_id)}`);
  assert.deepEqual(answers.map((a) => a.replayed), [false, false]);
  assert.notEqual(answers[0].result.ticket_id, answers[1].result.ticket_id, "two tickets");
});

// A chat UI's regenerate: a fork from the checkpoint before the model
// step, whose model writes the same call under new tool-call and message
// IDs, and at a real model's temperature in other words. The same intended
// call (the ticket's customer, its intent field): one ticket, the fork's
// answer a replay that names what differed. Two calls for one customer in
// one turn stay two; another customer is another intent; lg4, a control,
// keyed the whole arguments, and lg3 the call's IDs.
const reworded = (n: number) => [{ title: n === 1 ? "Printer on fire" : "The printer is smoking, please help" }];
for (const [name, calls, scheme, tickets, replayed] of [
  ["the same call under new IDs", (_n: number) => [{ title: "Printer on fire" }], undefined, 1, [true]],
  ["two identical calls, both written again", (_n: number) => [{ title: "Printer on fire" }, { title: "Printer on fire" }], undefined, 2, [true, true]],
  ["a model that rewords the call: the same intent, a replay", reworded, undefined, 1, [true]],
  ["two intents in one turn, both reworded", (n: number) => [{ title: `Printer (${n})` }, { title: `Network (${n})` }], undefined, 2, [true, true]],
  ["another customer in the call is another intent", (n: number) => [{ title: "Printer on fire", customer_id: n === 1 ? "a" : "b" }], undefined, 2, [false]],
  ["control: lg4 keys the whole arguments", reworded, "lg4", 2, [false]],
  ["control: lg3 keys the call's IDs", (_n: number) => [{ title: "Printer on fire" }], "lg3", 2, [false]],
] as const) {
  test(`a fork before the model step makes the same call once: ${name}`, async () => {
    const who = "c-ts-lg-fork-" + randomUUID().slice(0, 8);
    const ticketTool = idemflowTool(client(), {
      name: "create_ticket",
      description: "Create a ticket.",
      schema: z.object({ title: z.string(), customer_id: z.string().optional() }),
      path: "/v1/tickets",
      // The model's arguments are the title (and a customer's suffix); the body makes the test's customer of them.
      body: (a: { title: string; customer_id?: string }) => ({ ...a, customer_id: a.customer_id ? `${who}-${a.customer_id}` : who }),
      keyScheme: scheme,
    });
    let runs = 0;
    const model = (state: typeof MessagesAnnotation.State) => {
      if (state.messages[state.messages.length - 1].getType() === "tool") return { messages: [new AIMessage({ content: "done", id: "ai-" + randomUUID() })] };
      runs++;
      const toolCalls = calls(runs).map((args) => ({ name: "create_ticket", args, id: "call_" + randomUUID(), type: "tool_call" as const }));
      return { messages: [new AIMessage({ content: "", tool_calls: toolCalls, id: "ai-" + randomUUID() })] };
    };
    const graph = agentGraph(model, ticketTool);
    const config = { configurable: { thread_id: who } };
    const first = await graph.invoke({ messages: [new HumanMessage("Open a ticket: the printer is on fire.")] }, config);
    const answersOf = (out: typeof first) => out.messages.filter((m) => m.getType() === "tool").map((m) => JSON.parse(String(m.content)));
    let before: any;
    for await (const snap of graph.getStateHistory(config)) {
      const msgs = (snap.values as typeof MessagesAnnotation.State).messages ?? [];
      if (snap.next.length === 1 && snap.next[0] === "agent" && msgs.length > 0 && msgs[msgs.length - 1].getType() === "human") {
        before = snap.config;
        break;
      }
    }
    assert.ok(before, "a checkpoint before the model step");
    const fork = await graph.invoke(null, before);
    const callIds = (out: typeof first) => out.messages.flatMap((m) => (m.getType() === "ai" ? ((m as AIMessage).tool_calls ?? []).map((c) => c.id) : []));
    assert.notDeepEqual(callIds(fork), callIds(first), "the fork's model wrote its calls under new IDs");
    const answers = answersOf(fork);
    console.log(
      `${name}: the fork's answers replayed ${answers.map((a) => a.replayed)}, differed ${JSON.stringify(answers.map((a) => a.differed))}, tickets ${answers.map((a) => a.result?.ticket_id)}`,
    );
    assert.deepEqual(answers.map((a) => a.replayed), replayed);
    const ids = new Set([...answersOf(first), ...answers].map((a) => a.result?.ticket_id));
    assert.equal(ids.size, tickets, `tickets across the first run and the fork: ${[...ids]}`);
    if (JSON.stringify(calls(1)) !== JSON.stringify(calls(2)) && replayed.every((r) => r)) {
      // Told truthfully: a replay of what was made, naming what differed.
      for (const a of answers) assert.ok(a.differed?.join() === "title" && a.note?.includes("already done"), JSON.stringify(a));
      assert.deepEqual(answers.map((a) => a.result.title), calls(1).map((c) => c.title));
    }
  });
}

test("the file store compares bodies as every client does (the shared body vectors)", async () => {
  const v = JSON.parse(await readFile(new URL("../../../testdata/bodies.json", import.meta.url), "utf8")) as {
    same: { name: string; stored: string; asked: string }[];
    different: { name: string; stored: string; asked: string }[];
  };
  assert.ok(v.same.length > 0 && v.different.length > 0);
  const store = new FileStore(await mkdtemp(join(tmpdir(), "idemflow-ts-bodies-")));
  for (const [cases, same] of [[v.same, true], [v.different, false]] as const) {
    for (const c of cases) {
      const first = await store.open(c.name, "POST", "/v1/tickets", JSON.parse(c.stored));
      if (same) {
        assert.equal((await store.open(c.name, "POST", "/v1/tickets", JSON.parse(c.asked))).key, first.key, `same: ${c.name}`);
      } else {
        await assert.rejects(store.open(c.name, "POST", "/v1/tickets", JSON.parse(c.asked)), IntentMismatchError, `different: ${c.name}`);
      }
    }
  }
});

test("the file store's key is on disk before open returns: the file and its folder are synced", async () => {
  const dir = await mkdtemp(join(tmpdir(), "idemflow-ts-sync-"));
  const synced: string[] = [];
  const intent = await new FileStore(dir, (what) => synced.push(what)).open("step-sync", "POST", "/v1/tickets", ticket("synced"));
  assert.deepEqual(synced, ["file", "dir"]);
  assert.equal((await new FileStore(dir).open("step-sync", "POST", "/v1/tickets", ticket("synced"))).key, intent.key);
});

test("the README's LangGraph.js snippet runs as written", async () => {
  // The only change: a scripted model in place of ChatOpenAI (its import
  // dropped), on the test's PostgreSQL.
  const thread = "ts-lg-readme-" + randomUUID().slice(0, 8);
  const file = await readmeSnippet("# LangGraph.js (`clients/typescript`)\n", "readme-langgraph", [
    ['import { ChatOpenAI } from "@langchain/openai";\n', ""],
    ['new ChatOpenAI({ model: "gpt-4.1" })', "globalThis.IDEMFLOW_README_MODEL"],
    ['"ticket-42"', JSON.stringify(thread)],
  ]);
  const seen: string[] = [];
  (globalThis as any).IDEMFLOW_README_MODEL = {
    bindTools: () => ({
      invoke: async (messages: any[]) => {
        const answers = messages.filter((m) => m.getType?.() === "tool");
        seen.push(...answers.map((m) => String(m.content)));
        if (answers.length > 0) return new AIMessage("The ticket is open.");
        const call = { name: "create_ticket", args: { customer_id: thread, title: "Printer on fire" }, id: "call_" + randomUUID(), type: "tool_call" as const };
        return new AIMessage({ content: "", tool_calls: [call] });
      },
    }),
  };
  await import(file.href);
  assert.equal(seen.length, 1, `one ticket call: ${seen}`);
  const answer = JSON.parse(seen[0]);
  assert.equal(answer.http_status, 201);
  assert.equal(answer.result.customer_id, thread);
});

test("docs/agents/mcp.md's LangGraph.js snippet runs as written, and the same turn through the native tool is a replay", async () => {
  // The only change: a scripted model in place of ChatOpenAI (its import
  // dropped); idemflow on PATH, the test's PostgreSQL.
  const file = await readmeSnippet("**LangGraph.js** (`@idemflow/client/langgraph`: `idemflowMcpTools`).", "docs-langgraph-mcp", [
    ['import { ChatOpenAI } from "@langchain/openai";\n', ""],
    ['new ChatOpenAI({ model: "gpt-4.1" })', "globalThis.IDEMFLOW_README_MODEL"],
  ]);
  process.env.PATH = `${dirname(process.env.IDEMFLOW_BIN!)}:${process.env.PATH}`;
  const thread = "ts-lg-docs-mcp-" + randomUUID().slice(0, 8);
  // The model asks for the ticket until it reads an answer; through MCP it
  // writes an idempotency_key of its own.
  const scripted = (modelKey: boolean) => (messages: any[]) => {
    const answers = messages.filter((m) => m.getType?.() === "tool");
    if (answers.length > 0) return new AIMessage("The ticket is open.");
    const args = { ...(modelKey ? { idempotency_key: randomUUID() } : {}), customer_id: thread, title: "Printer on fire" };
    return new AIMessage({ content: "", tool_calls: [{ name: "create_ticket", args, id: "call_" + randomUUID(), type: "tool_call" as const }] });
  };
  (globalThis as any).IDEMFLOW_README_MODEL = { bindTools: () => ({ invoke: async (messages: any[]) => scripted(true)(messages) }) };
  const mod = await import(file.href);
  const ask = { role: "user", content: "My printer is on fire. I am customer " + thread + ".", id: "msg-1" };
  const answerOf = (out: any) => JSON.parse(String(out.messages.find((m: any) => m.getType() === "tool").content));
  try {
    const first = answerOf(await mod.turn(thread, ask));
    assert.equal(first.http_status, 201, JSON.stringify(first));
    assert.equal(first.replayed, false);
    // The same turn, its model step run again, through the native tool on
    // another checkpointer: the same intended call, the same key.
    const native = idemflowTool(client(), { name: "create_ticket", description: "Create a ticket.", schema: z.object({ customer_id: z.string(), title: z.string() }), path: "/v1/tickets" });
    const graph = agentGraph((state) => ({ messages: [scripted(false)(state.messages)] }), native);
    const again = answerOf(await graph.invoke({ messages: [new HumanMessage(ask)] }, { configurable: { thread_id: thread } }));
    assert.equal(again.replayed, true, JSON.stringify(again));
    assert.equal(again.result.ticket_id, first.result.ticket_id);
    console.log(`LangGraph.js over MCP: ticket ${first.result.ticket_id} (replayed false); the same turn through idemflowTool: replayed true`);
  } finally {
    await mod.mcp.close();
    await mod.checkpointer.end();
  }
});

test("intent fields are normalised as every client does (the shared vectors)", async () => {
  const { intentCanonical } = await import("../src/index.js");
  const v = JSON.parse(await readFile(new URL("../../../testdata/keys.json", import.meta.url), "utf8")) as {
    intent: { name: string; fields: { name: string; norm: "id" | "text" | "number" | "set" | "exact" }[]; args: Record<string, unknown>; canonical: string; key: string }[];
  };
  assert.ok(v.intent.length >= 15);
  for (const c of v.intent) {
    const got = intentCanonical(c.fields, c.args);
    assert.equal(got, c.canonical, c.name);
    assert.equal(deriveKey("intent", got), c.key, c.name);
  }
});
