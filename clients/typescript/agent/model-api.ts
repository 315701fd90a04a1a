// A local stand-in for Anthropic's Messages API, for the Claude Agent SDK's
// CLI (ANTHROPIC_BASE_URL): a scripted model, streamed as the API streams.
// It asks for create_ticket (a new tool_use ID each time it writes the
// call) until it has read `calls` answers (tool_results with http_status)
// since the turn's prompt, one call at a time, then says it is done. After
// a crash or a pending answer, what it reads is no answer (the call was
// interrupted, or is pending), and it writes the call again, as models do.
// A request that does not ask for a stream gets the whole message as JSON.

import { randomUUID } from "node:crypto";
import { createServer, type Server } from "node:http";

export interface ScriptedModel {
  url: string;
  /** The tool_use IDs the model wrote, in order. */
  calls: string[];
  close(): Promise<void>;
}

export function startModel(customer: string, title = "Printer on fire", want = 1): Promise<ScriptedModel> {
  const calls: string[] = [];
  const newCall = () => {
    const id = "toolu_" + randomUUID().replaceAll("-", "").slice(0, 24);
    calls.push(id);
    return id;
  };
  const server: Server = createServer((req, res) => {
    let body = "";
    req.on("data", (c) => (body += c));
    req.on("end", () => {
      if (req.method !== "POST" || !req.url?.startsWith("/v1/messages") || req.url.includes("count_tokens")) {
        res.writeHead(200, { "content-type": "application/json" });
        res.end(req.url?.includes("count_tokens") ? '{"input_tokens":10}' : "{}");
        return;
      }
      const r = JSON.parse(body || "{}");
      const tool = (r.tools ?? []).map((t: { name: string }) => t.name).find((n: string) => n.endsWith("create_ticket"));
      const answered = answersSincePrompt(r.messages ?? []) >= want;
      if (r.stream !== true) {
        // Not streamed (a provider's generate call): the whole message as JSON.
        const content = tool && !answered ? [{ type: "tool_use", id: newCall(), name: tool, input: { customer_id: customer, title } }] : [{ type: "text", text: "The ticket is open." }];
        res.writeHead(200, { "content-type": "application/json" });
        res.end(JSON.stringify({ id: "msg_" + randomUUID().replaceAll("-", ""), type: "message", role: "assistant", model: r.model, content, stop_reason: content[0].type === "tool_use" ? "tool_use" : "end_turn", stop_sequence: null, usage: { input_tokens: 10, output_tokens: 20 } }));
        return;
      }
      const ev = (type: string, data: object) => res.write(`event: ${type}\ndata: ${JSON.stringify({ type, ...data })}\n\n`);
      res.writeHead(200, { "content-type": "text/event-stream" });
      ev("message_start", { message: { id: "msg_" + randomUUID().replaceAll("-", ""), type: "message", role: "assistant", model: r.model, content: [], stop_reason: null, stop_sequence: null, usage: { input_tokens: 10, output_tokens: 1 } } });
      if (tool && !answered) {
        const id = newCall();
        ev("content_block_start", { index: 0, content_block: { type: "tool_use", id, name: tool, input: {} } });
        ev("content_block_delta", { index: 0, delta: { type: "input_json_delta", partial_json: JSON.stringify({ customer_id: customer, title }) } });
        ev("content_block_stop", { index: 0 });
        ev("message_delta", { delta: { stop_reason: "tool_use", stop_sequence: null }, usage: { output_tokens: 20 } });
      } else {
        ev("content_block_start", { index: 0, content_block: { type: "text", text: "" } });
        ev("content_block_delta", { index: 0, delta: { type: "text_delta", text: "The ticket is open." } });
        ev("content_block_stop", { index: 0 });
        ev("message_delta", { delta: { stop_reason: "end_turn", stop_sequence: null }, usage: { output_tokens: 5 } });
      }
      ev("message_stop", {});
      res.end();
    });
  });
  return new Promise((resolve) =>
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address() as { port: number };
      resolve({ url: `http://127.0.0.1:${port}`, calls, close: () => new Promise((done) => server.close(() => done())) });
    }),
  );
}

/** The answers (tool_results with http_status) the model read since the turn's last prompt. */
function answersSincePrompt(messages: { role: string; content: unknown }[]): number {
  const parts = (m: { content: unknown }) => (Array.isArray(m.content) ? m.content : [{ type: "text", text: m.content }]);
  let n = 0;
  for (let i = messages.length - 1; i >= 0; i--) {
    if (messages[i].role !== "user") continue;
    for (const p of parts(messages[i])) if (p.type === "tool_result" && JSON.stringify(p.content).includes("http_status")) n++;
    if (parts(messages[i]).some((p: any) => p.type === "text")) return n;
  }
  return n;
}
