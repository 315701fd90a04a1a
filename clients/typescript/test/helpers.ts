// What the client's test files share: the README's snippets run as
// written, and a partition between a client and the gateway.

import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdtemp, readdir, readFile, writeFile } from "node:fs/promises";
import { createServer, request as httpRequest, type Server } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { type Client, KeyReusedError } from "../src/index.js";

/**
 * The project's documentation, README.md, docs/*.md and the pages under
 * docs/agents/ (in the order docs/agents.md links them), one after another,
 * as internal/tooling/docs reads it.
 */
export async function docsText(): Promise<string> {
  const root = new URL("../../../../", import.meta.url);
  const topics = (await readdir(new URL("docs/", root))).filter((f) => f.endsWith(".md")).sort();
  const pages = (await readdir(new URL("docs/agents/", root))).filter((f) => f.endsWith(".md")).sort();
  const index = await readFile(new URL("docs/agents.md", root), "utf8");
  const linked = [...new Set([...index.matchAll(/\]\(agents\/([a-z0-9-]+\.md)\)/g)].map((m) => m[1]))].filter((p) => pages.includes(p));
  const ordered = [...linked, ...pages.filter((p) => !linked.includes(p))];
  const files = ["README.md", ...topics.map((f) => `docs/${f}`), ...ordered.map((f) => `docs/agents/${f}`)];
  const texts = await Promise.all(files.map((f) => readFile(new URL(f, root), "utf8")));
  return texts.join("\n\n");
}

/**
 * The documentation's first ```js block after heading, with each [from, to] of
 * replace applied (each from must be there: the snippet is the README's,
 * changed only where the test says). It is written into the package, so
 * that @idemflow/client resolves to it, as name.mjs.
 */
export async function readmeSnippet(heading: string, name: string, replace: [string, string][]): Promise<URL> {
  const section = (await docsText()).split(heading)[1];
  assert.ok(section, `the README has no ${heading}`);
  let code = section.split("```js\n")[1].split("```")[0];
  for (const [from, to] of replace) {
    assert.ok(code.includes(from), `the snippet under ${heading} has no ${from}`);
    code = code.replace(from, to);
  }
  const file = new URL(`./${name}.mjs`, import.meta.url);
  await writeFile(file, code);
  return file;
}

/**
 * Runs the snippet file once per call of run (its run-th import), from a
 * fresh folder, where the snippet keeps its files, with IDEMFLOW_URL set.
 */
export async function inFreshFolder(url: string, body: (run: (n: number) => Promise<unknown>) => Promise<void>, file: URL): Promise<void> {
  const dir = await mkdtemp(join(tmpdir(), "idemflow-readme-"));
  const cwd = process.cwd();
  process.chdir(dir);
  process.env.IDEMFLOW_URL = url;
  try {
    await body((n) => import(`${file.href}?run=${n}`));
  } finally {
    process.chdir(cwd);
  }
}

/**
 * A proxy to url that, while partitioned, forwards each request (it takes
 * effect) and drops its answer: a partition longer than a caller's wait.
 * keys holds every POST's Idempotency-Key, prefers every request's Prefer.
 */
export async function partitionProxy(url: string) {
  const state = { partitioned: true, keys: [] as string[], prefers: [] as string[] };
  const proxy: Server = createServer((req, res) => {
    if (req.method === "POST") state.keys.push(String(req.headers["idempotency-key"]));
    state.prefers.push(String(req.headers["prefer"]));
    const up = httpRequest(url + req.url, { method: req.method, headers: req.headers }, (ur) => {
      if (state.partitioned) {
        ur.resume(); // the request took effect; its answer never comes back
        return;
      }
      res.writeHead(ur.statusCode!, ur.headers);
      ur.pipe(res);
    });
    req.pipe(up);
  });
  await new Promise<void>((r) => proxy.listen(0, "127.0.0.1", r));
  return {
    state,
    base: `http://127.0.0.1:${(proxy.address() as { port: number }).port}`,
    close: () => {
      proxy.closeAllConnections();
      proxy.close();
    },
  };
}

/**
 * How many of keys made a ticket: each is sent again with the ticket
 * body the scripted models write for customer (with title), and a replay
 * means the first call under it took effect.
 */
export async function ticketsUnder(client: Client, keys: string[], customer: string, title = "Printer on fire"): Promise<number> {
  let n = 0;
  for (const key of new Set(keys)) {
    // A key made by its intent fields is compared on them; another on the whole body.
    const r = await client
      .do({ key, path: "/v1/tickets", body: { customer_id: customer, title } })
      .catch((e) => (e instanceof KeyReusedError ? client.do({ key, path: "/v1/tickets", body: { customer_id: customer, title }, byIntent: true }) : Promise.reject(e)));
    if (r.replayed) n++;
  }
  return n;
}

/**
 * idemflow mcp --http (IDEMFLOW_BIN) on a free port, pointed at gateway,
 * with flags; its URL once it answers its health path.
 */
export async function mcpHttp(gateway: string, ...flags: string[]) {
  const free = createServer();
  await new Promise<void>((r) => free.listen(0, "127.0.0.1", r));
  const port = (free.address() as { port: number }).port;
  await new Promise<void>((r) => free.close(() => r()));
  const proc = spawn(process.env.IDEMFLOW_BIN!, ["mcp", "--http", `127.0.0.1:${port}`, "--url", gateway, ...flags], { stdio: "ignore" });
  const url = `http://127.0.0.1:${port}/`;
  for (let i = 0; ; i++) {
    try {
      if ((await fetch(url + "healthz")).ok) break;
    } catch {
      // not listening yet
    }
    assert.ok(i < 300, "idemflow mcp --http did not come up");
    await new Promise((r) => setTimeout(r, 50));
  }
  return { url, close: () => proc.kill() };
}
