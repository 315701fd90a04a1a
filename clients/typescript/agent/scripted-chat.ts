// The scripted chat model of the Vercel AI SDK tests, the kill test's
// agent (vercel.ts) and the client's (test/ai.test.ts): the SDK's mock
// model, reading its input as a real model would.

import { randomUUID } from "node:crypto";
import { convertArrayToReadableStream, MockLanguageModelV3 } from "ai/test";

const usage = { inputTokens: { total: 1, noCache: 1, cacheRead: 0, cacheWrite: 0 }, outputTokens: { total: 1, text: 1, reasoning: 0 } };

/**
 * Asks for one ticket for customer until a tool's answer is in its input,
 * then answers; after a tool error it asks again (a new call, as a model
 * writes one), up to twice. Each call it writes has a new ID, as a real
 * model's, unless callId gives one (a provider that numbers calls per
 * response); title, if given, words the ticket's title each time (a model
 * that rewords its call); modelKey adds an idempotency_key of the model's. outputs: every tool output it was handed, as it
 * read them; prompts: every prompt it was given, whole.
 */
export function scriptedChat(customer: string, callId?: () => string, title: () => string = () => "Printer on fire", modelKey = false) {
  const outputs: string[] = [];
  const prompts: string[] = [];
  const answer = (opts: { prompt: any[] }) => {
    prompts.push(JSON.stringify(opts.prompt));
    const last = opts.prompt[opts.prompt.length - 1];
    let answered = false;
    if (last?.role === "tool") {
      for (const p of last.content) {
        if (p.type !== "tool-result") continue;
        outputs.push(p.output.type === "error-text" ? `error: ${p.output.value}` : JSON.stringify(p.output));
        answered ||= p.output.type !== "error-text";
      }
    }
    if (answered || outputs.filter((o) => o.startsWith("error:")).length >= 2) {
      return { content: [{ type: "text", text: "The ticket is open." }], finishReason: { unified: "stop", raw: "stop" }, usage, warnings: [] };
    }
    // modelKey: the call carries an idempotency_key the model wrote (an MCP
    // tool of idemflow's takes one), new each time it writes the call.
    const input = JSON.stringify({ ...(modelKey ? { idempotency_key: randomUUID() } : {}), customer_id: customer, title: title() });
    const id = callId ? callId() : `call_${randomUUID()}`;
    return { content: [{ type: "tool-call", toolCallId: id, toolName: "create_ticket", input }], finishReason: { unified: "tool-calls", raw: "tool_calls" }, usage, warnings: [] };
  };
  const model = new MockLanguageModelV3({
    doGenerate: async (opts) => answer(opts) as any,
    // The same answers, streamed as a provider streams them (streamText).
    doStream: async (opts) => {
      const r: any = answer(opts);
      const parts: any[] = [{ type: "stream-start", warnings: [] }];
      for (const c of r.content) {
        if (c.type === "text") parts.push({ type: "text-start", id: "t" }, { type: "text-delta", id: "t", delta: c.text }, { type: "text-end", id: "t" });
        else parts.push(c);
      }
      parts.push({ type: "finish", finishReason: r.finishReason, usage: r.usage });
      return { stream: convertArrayToReadableStream(parts) };
    },
  });
  return { model, outputs, prompts };
}
