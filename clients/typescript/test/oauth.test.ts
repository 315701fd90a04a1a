// OAuth 2.1 against a real authorization server (Ory Hydra), which
// oauth_test.go starts with a login and consent app of its own:
//   IDEMFLOW_OAUTH_MCP_URL    idemflow's MCP server, an OAuth resource server
//   IDEMFLOW_OAUTH_DRIVER     POST an authorization URL here: it is followed
//                             as a browser would, through login and consent,
//                             and the redirect it ends at is the answer
//   IDEMFLOW_OAUTH_TTL_MS     how long Hydra's access tokens live
//   IDEMFLOW_OAUTH_SCOPES     the scopes the host asks for
//   IDEMFLOW_OAUTH_ISSUER, IDEMFLOW_OAUTH_CLIENT_ID, IDEMFLOW_OAUTH_CLIENT_SECRET,
//   IDEMFLOW_OAUTH_AUDIENCE   a service agent's client credentials, for the
//                             gateway at IDEMFLOW_URL

import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { test } from "node:test";
import { Client as MCPClient } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { UnauthorizedError, type OAuthClientProvider } from "@modelcontextprotocol/sdk/client/auth.js";
import type { OAuthClientInformationMixed, OAuthClientMetadata, OAuthTokens } from "@modelcontextprotocol/sdk/shared/auth.js";
import { Client } from "../src/index.js";

const env = (name: string) => {
  const v = process.env[name];
  assert.ok(v, `${name} is not set: oauth_test.go runs this file`);
  return v;
};
const callback = env("IDEMFLOW_OAUTH_CALLBACK"); // never fetched: the driver stops at it

// A host's provider, headless: what a hosted host keeps (its registration,
// its tokens, the PKCE verifier), and a browser that is the driver.
class HeadlessHost implements OAuthClientProvider {
  info?: OAuthClientInformationMixed;
  saved: OAuthTokens[] = [];
  verifier = "";
  code = "";
  authorizations: URL[] = [];
  last = "";
  constructor(private readonly scope: string) {}
  get redirectUrl() {
    return callback;
  }
  get clientMetadata(): OAuthClientMetadata {
    return {
      client_name: "idemflow's OAuth test host",
      redirect_uris: [callback],
      grant_types: ["authorization_code", "refresh_token"],
      response_types: ["code"],
      token_endpoint_auth_method: "none",
      scope: this.scope,
      // Hydra v2.3.0 answers a registration without these with
      // "contacts": null and "client_uri": "", which the SDK's schema
      // refuses (ory/hydra#4116); a host that names them, as hosted
      // hosts do, is answered with its own values.
      client_uri: "https://host.idemflow.test/",
      contacts: ["ops@host.idemflow.test"],
    };
  }
  // Hydra requires a state of 8 characters or more; the SDK sends one
  // when its provider makes it.
  state() {
    return randomUUID();
  }
  clientInformation() {
    return this.info;
  }
  saveClientInformation(info: OAuthClientInformationMixed) {
    this.info = info;
  }
  tokens() {
    return this.saved.at(-1);
  }
  saveTokens(tokens: OAuthTokens) {
    this.saved.push(tokens);
  }
  async redirectToAuthorization(url: URL) {
    this.authorizations.push(url);
    const r = await fetch(env("IDEMFLOW_OAUTH_DRIVER"), { method: "POST", body: url.href });
    const answer = await r.text();
    assert.equal(r.status, 200, `the login and consent: ${answer}`);
    this.last = answer;
    this.code = new URL(answer).searchParams.get("code") ?? "";
  }
  saveCodeVerifier(v: string) {
    this.verifier = v;
  }
  codeVerifier() {
    return this.verifier;
  }
}

const structured = (r: Awaited<ReturnType<MCPClient["callTool"]>>) => r.structuredContent as { replayed: boolean; result: Record<string, unknown> };

test("a hosted MCP host goes from a 401 through discovery, registration, PKCE, login and consent to one ticket, and its refreshed token keeps working", { timeout: 60_000 }, async (t) => {
  const mcpURL = new URL(env("IDEMFLOW_OAUTH_MCP_URL"));
  const host = new HeadlessHost(env("IDEMFLOW_OAUTH_SCOPES"));
  const first = new StreamableHTTPClientTransport(mcpURL, { authProvider: host });
  // No token: the server's 401 names its metadata; the SDK discovers the
  // authorization server, registers, and sends the user to authorize.
  await assert.rejects(new MCPClient({ name: "oauth-test", version: "1" }).connect(first), UnauthorizedError);
  t.after(() => first.close());
  assert.ok(host.info?.client_id, "the host registered (Dynamic Client Registration)");
  assert.equal(host.authorizations.length, 1);
  const asked = host.authorizations[0].searchParams;
  assert.equal(asked.get("code_challenge_method"), "S256");
  assert.ok(asked.get("code_challenge"));
  assert.equal(asked.get("resource"), mcpURL.href, "the resource indicator names the MCP server (RFC 8707)");
  assert.ok(host.code, `the login and consent ended at the callback with a code: ${host.last}`);
  await first.finishAuth(host.code);
  assert.equal(host.saved.length, 1);

  const mcp = new MCPClient({ name: "oauth-test", version: "1" });
  t.after(() => mcp.close());
  await mcp.connect(new StreamableHTTPClientTransport(mcpURL, { authProvider: host }));
  const args = { idempotency_key: `oauth-${randomUUID()}`, customer_id: "c-oauth-ts", title: "Printer on fire", priority: "high" };
  const made = await mcp.callTool({ name: "create_ticket", arguments: args });
  assert.ok(!made.isError, JSON.stringify(made));
  assert.equal(structured(made).replayed, false);

  // The access token expires; the SDK's next request is refused, it
  // refreshes (no second login), and the retry of the same intent is its
  // replay.
  await new Promise((r) => setTimeout(r, Number(env("IDEMFLOW_OAUTH_TTL_MS")) + 1500));
  const again = await mcp.callTool({ name: "create_ticket", arguments: args });
  assert.ok(!again.isError, JSON.stringify(again));
  assert.equal(structured(again).replayed, true);
  assert.deepEqual(structured(again).result, structured(made).result);
  assert.equal(host.authorizations.length, 1, "the refresh asked for no second login");
  assert.ok(host.saved.length >= 2, "the token was refreshed");
  assert.notEqual(host.saved.at(-1)!.access_token, host.saved[0].access_token);
  console.log(`OAUTH-MCP ticket ${JSON.stringify(structured(made).result)}: made, then replayed after a refresh; tokens saved ${host.saved.length}, logins ${host.authorizations.length}`);
});

test("a service agent's client takes a token provider: client credentials, renewed, one ticket per key", { timeout: 60_000 }, async () => {
  let fetched = 0;
  let cached: { token: string; until: number } | undefined;
  // The provider a service agent writes: client credentials, cached
  // while they are good.
  const provider = async () => {
    if (cached && Date.now() < cached.until) return cached.token;
    const form = new URLSearchParams({
      grant_type: "client_credentials",
      client_id: env("IDEMFLOW_OAUTH_CLIENT_ID"),
      client_secret: env("IDEMFLOW_OAUTH_CLIENT_SECRET"),
      audience: env("IDEMFLOW_OAUTH_AUDIENCE"),
      scope: "idemflow:call idemflow:read",
    });
    const r = await fetch(new URL("oauth2/token", env("IDEMFLOW_OAUTH_ISSUER")), { method: "POST", body: form });
    const body = (await r.json()) as { access_token: string; expires_in: number };
    assert.equal(r.status, 200, JSON.stringify(body));
    fetched++;
    cached = { token: body.access_token, until: Date.now() + (body.expires_in - 1) * 1000 };
    return cached.token;
  };
  const client = new Client({ baseURL: env("IDEMFLOW_URL"), token: provider, attemptTimeoutMs: 5000 });
  const intent = { key: `svc-${randomUUID()}`, path: "/v1/tickets", body: { customer_id: "c-oauth-svc", title: "Printer on fire", priority: "high" } };
  const made = await client.do(intent);
  assert.equal(made.replayed, false);
  await new Promise((r) => setTimeout(r, Number(env("IDEMFLOW_OAUTH_TTL_MS")) + 1500));
  const again = await client.do(intent);
  assert.equal(again.replayed, true);
  assert.equal(fetched, 2, "the provider renewed the expired token");
  console.log(`OAUTH-SVC the same key twice with a renewed token: replayed ${again.replayed}, tokens fetched ${fetched}`);
});
