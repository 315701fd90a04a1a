// The Claude Agent SDK integration (src/claude-agent.ts) against the real
// stack that typescript_test.go starts, the SDK's own CLI against a
// scripted model behind a local stand-in for the Messages API
// (agent/model-api.ts): two intended calls in a turn, a later turn, a
// pending answer, a call outside runDurably, the shared key vectors.

import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { mkdtemp, readFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { createSdkMcpServer } from "@anthropic-ai/claude-agent-sdk";
import { z } from "zod";
import { Client } from "../src/index.js";
import { callKey, idemflowTool, NoDurableIdentityError, runDurably } from "../src/claude-agent.js";
import { startModel } from "../agent/model-api.js";
import { inFreshFolder, partitionProxy, readmeSnippet, ticketsUnder } from "./helpers.js";

const url = process.env.IDEMFLOW_URL!;
const token = process.env.IDEMFLOW_TOKEN!;
const client = (base = url) => new Client({ baseURL: base, token, attemptTimeoutMs: 300, initialBackoffMs: 20, maxBackoffMs: 100 });

/** One turn of a session: the answers the model read (as JSON), the tool_use IDs it wrote. */
async function turn(c: Client, f: { who: string; sessionId: string; turnId: string; dir: string; want?: number; waitMs?: number }) {
  const model = await startModel(f.who, "Printer on fire", f.want ?? 1);
  const tool = idemflowTool(c, { name: "create_ticket", description: "Create a support ticket.", inputSchema: { customer_id: z.string(), title: z.string() }, path: "/v1/tickets", waitMs: f.waitMs });
  const options = {
    mcpServers: { idemflow: createSdkMcpServer({ name: "idemflow", tools: [tool] }) },
    allowedTools: ["mcp__idemflow__create_ticket"],
    tools: [],
    cwd: f.dir,
    maxTurns: 10,
    env: {
      PATH: process.env.PATH ?? "", CLAUDE_CONFIG_DIR: join(f.dir, "claude"), ANTHROPIC_BASE_URL: model.url, ANTHROPIC_API_KEY: "sk-ant-test",
      CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: "1", DISABLE_TELEMETRY: "1",
    },
  };
  process.env.CLAUDE_CONFIG_DIR = join(f.dir, "claude");
  const read: any[] = [];
  const texts: string[] = [];
  try {
    for await (const m of runDurably({ prompt: "Open a ticket: my printer is on fire.", options }, { sessionId: f.sessionId, turnId: f.turnId, state: join(f.dir, "turn.json") })) {
      if (m.type !== "user" || !Array.isArray(m.message.content)) continue;
      for (const part of m.message.content as any[]) {
        if (part.type !== "tool_result") continue;
        const text = Array.isArray(part.content) ? part.content.map((x: any) => x.text ?? "").join("") : String(part.content);
        texts.push(text);
        if (text.includes("http_status")) read.push(JSON.parse(text));
      }
    }
  } finally {
    await model.close();
  }
  return { read, texts, calls: model.calls };
}

test("two identical calls in one turn are two tickets, and a later turn's same call is a third", async () => {
  const dir = await mkdtemp(join(tmpdir(), "idemflow-claude-"));
  const who = "c-ts-claude-two-" + randomUUID().slice(0, 8);
  const sessionId = randomUUID();
  const first = await turn(client(), { who, sessionId, turnId: "msg-1", dir, want: 2 });
  assert.deepEqual(first.read.map((a) => a.replayed), [false, false], JSON.stringify(first.read));
  assert.notEqual(first.read[0].result.ticket_id, first.read[1].result.ticket_id);
  const later = await turn(client(), { who, sessionId, turnId: "msg-2", dir });
  assert.deepEqual(later.read.map((a) => a.replayed), [false]);
  const keys = JSON.parse(await readFile(join(dir, "turn.json"), "utf8")).calls.map((c: any) => c.key);
  assert.equal(keys.length, 1, "the state holds the later turn's call");
  const all = [...first.read, ...later.read].map((a) => a.result.ticket_id);
  assert.equal(new Set(all).size, 3);
  console.log(`Claude Agent SDK: two calls in one turn made tickets ${all.slice(0, 2).join(", ")}; the later turn's ${all[2]}`);
});

test("a pending answer is read as pending, never as a failure, and the call written again waits under the same key", async () => {
  const { state, base, close } = await partitionProxy(url);
  try {
    const dir = await mkdtemp(join(tmpdir(), "idemflow-claude-"));
    const who = "c-ts-claude-pending-" + randomUUID().slice(0, 8);
    const heal = setTimeout(() => (state.partitioned = false), 2500);
    const out = await turn(client(base), { who, sessionId: randomUUID(), turnId: "msg-1", dir, waitMs: 1000 });
    clearTimeout(heal);
    const pending = out.texts.filter((t) => t.includes("no final answer within the wait"));
    assert.ok(pending.length >= 1, `the model read a pending answer: ${out.texts}`);
    assert.ok(out.calls.length > pending.length, "the model wrote the call again after each pending answer");
    assert.equal(new Set(state.keys).size, 1, `one key for every write of the call: ${[...new Set(state.keys)]}`);
    assert.equal(out.read.length, 1);
    assert.equal(await ticketsUnder(client(), state.keys, who), 1);
    console.log(`Claude Agent SDK: ${pending.length} pending answer(s) read, the call written ${out.calls.length} times under one key, one ticket (replayed ${out.read[0].replayed})`);
  } finally {
    close();
  }
});

test("a call outside runDurably gets NoDurableIdentityError, and nothing is sent", async () => {
  const { state, base, close } = await partitionProxy(url);
  try {
    const t = idemflowTool(client(base), { name: "create_ticket", description: "d", inputSchema: { customer_id: z.string(), title: z.string() }, path: "/v1/tickets" });
    await assert.rejects(t.handler({ customer_id: "c", title: "t" }, { _meta: { "claudecode/toolUseId": "toolu_1" } }), NoDurableIdentityError);
    assert.equal(state.keys.length, 0);
  } finally {
    close();
  }
});

test("the shared claude_agent key vectors", async () => {
  const keys = JSON.parse(await readFile(new URL("../../../testdata/keys.json", import.meta.url), "utf8"));
  for (const c of keys.claude_agent) {
    // An entry of scheme cl1 names the whole arguments; cl2's the tool's intent fields.
    assert.equal(callKey(c.session_id, c.turn_id, c.tool, c.args, c.occurrence, c.intent ?? [], c.key.slice(0, 3)), c.key, c.name);
  }
});

test("docs/agents/claude-agent-sdk.md's snippet runs as written, and the turn sent again is a replay", async () => {
  // The only change: the scripted model's address in the environment the
  // SDK hands its CLI (ANTHROPIC_BASE_URL), and Claude's sessions in a
  // folder of the test's.
  const file = await readmeSnippet("# Claude Agent SDK (`clients/typescript`, `clients/python`)\n", "docs-claude-agent", []);
  const who = "c-ts-claude-docs-" + randomUUID().slice(0, 8);
  const model = await startModel(who);
  const dir = await mkdtemp(join(tmpdir(), "idemflow-claude-docs-"));
  const saved = { ...process.env };
  Object.assign(process.env, {
    ANTHROPIC_BASE_URL: model.url, ANTHROPIC_API_KEY: "sk-ant-test", CLAUDE_CONFIG_DIR: join(dir, "claude"),
    CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: "1", DISABLE_TELEMETRY: "1",
  });
  try {
    await inFreshFolder(url, async (run) => {
      const mod: any = await run(1);
      const sessionId = randomUUID();
      const message = `My printer is on fire. I am customer ${who}.`;
      assert.equal(await mod.turn(sessionId, "msg-1", message), "The ticket is open.");
      // The turn sent again, as after a crash: its session resumed, the
      // model writes the call again under a new tool_use ID.
      assert.equal(await mod.turn(sessionId, "msg-1", message), "The ticket is open.");
      const calls = JSON.parse(await readFile(`turn-${sessionId}.json`, "utf8")).calls;
      assert.equal(calls.length, 2, JSON.stringify(calls));
      assert.notEqual(calls[0].id, calls[1].id, "the model wrote the call again under a new tool_use ID");
      assert.equal(calls[1].key, calls[0].key);
      assert.equal(await ticketsUnder(client(), calls.map((c: any) => c.key), who), 1);
      console.log(`the Claude Agent SDK page's snippet: a turn and the turn sent again, ${model.calls.length} tool_use IDs, one key, one ticket`);
    }, file);
  } finally {
    for (const k of ["ANTHROPIC_BASE_URL", "ANTHROPIC_API_KEY", "CLAUDE_CONFIG_DIR", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "DISABLE_TELEMETRY"]) {
      if (saved[k] === undefined) delete process.env[k];
      else process.env[k] = saved[k];
    }
    await model.close();
  }
});
