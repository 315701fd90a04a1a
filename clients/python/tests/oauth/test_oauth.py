"""OAuth 2.1 against a real authorization server (Ory Hydra, with the tests'
login and consent app), which python_test.go's TestOAuthWithThePythonSDKAndClient
starts (oauthtest.New names the variables): the official MCP Python
SDK's OAuth client signs a host in and calls idemflow's MCP server; idemflow's
clients take a token provider for a service agent's client credentials."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import httpx
import httpx2
import psycopg
from mcp import ClientSession
from mcp.client.auth import OAuthClientProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import AuthorizationCodeResult, OAuthClientInformationFull, OAuthClientMetadata, OAuthToken

import idemflow

from ..conftest import need


class Storage:
    """What a host keeps: its registration and its tokens."""

    def __init__(self) -> None:
        self.tokens: list[OAuthToken] = []
        self.client: OAuthClientInformationFull | None = None

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens[-1] if self.tokens else None

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens.append(tokens)

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client = client_info


def tickets(customer: str) -> int:
    with psycopg.connect(need("DATABASE_URL")) as db:
        row = db.execute("SELECT count(*) FROM ticket WHERE customer_id = %s", (customer,)).fetchone()
        assert row is not None
        return int(row[0])


def test_the_mcp_python_sdks_oauth_client_signs_in_and_its_refreshed_token_keeps_working() -> None:
    storage = Storage()
    logins: list[str] = []
    redirects: list[str] = []

    async def redirect_handler(url: str) -> None:
        # The browser: the tests' driver follows the URL through login
        # and consent to the callback.
        logins.append(url)
        async with httpx2.AsyncClient(timeout=30) as http:
            r = await http.post(need("IDEMFLOW_OAUTH_DRIVER"), content=url)
        assert r.status_code == 200, r.text
        redirects.append(r.text)

    async def callback_handler() -> AuthorizationCodeResult:
        params = httpx.URL(redirects[-1]).params
        assert params.get("code"), redirects[-1]
        return AuthorizationCodeResult(code=params["code"], state=params.get("state"), iss=params.get("iss"))

    callback = need("IDEMFLOW_OAUTH_CALLBACK")
    provider = OAuthClientProvider(
        server_url=need("IDEMFLOW_OAUTH_MCP_URL"),
        client_metadata=OAuthClientMetadata(
            client_name="idemflow's OAuth test host (Python)",
            redirect_uris=[callback],  # type: ignore[list-item]
            grant_types=["authorization_code", "refresh_token"],
            response_types=["code"],
            token_endpoint_auth_method="none",
            scope=need("IDEMFLOW_OAUTH_SCOPES"),
            # Hydra v2.3.0 answers a registration without these with ""
            # (ory/hydra#4116), which the SDK's model refuses as a URL.
            client_uri="https://host.idemflow.test/",  # type: ignore[arg-type]
            logo_uri="https://host.idemflow.test/logo.png",  # type: ignore[arg-type]
            tos_uri="https://host.idemflow.test/tos",  # type: ignore[arg-type]
            policy_uri="https://host.idemflow.test/policy",  # type: ignore[arg-type]
            contacts=["ops@host.idemflow.test"],
        ),
        storage=storage,
        redirect_handler=redirect_handler,
        callback_handler=callback_handler,
    )
    args: dict[str, Any] = {"idempotency_key": f"oauth-py-{uuid.uuid4()}", "customer_id": "c-oauth-py", "title": "Printer on fire", "priority": "high"}

    async def main() -> tuple[Any, Any]:
        async with (
            httpx2.AsyncClient(auth=provider, timeout=30) as http,
            streamable_http_client(need("IDEMFLOW_OAUTH_MCP_URL"), http_client=http) as streams,
            ClientSession(streams[0], streams[1]) as session,
        ):
            await session.initialize()
            made = await session.call_tool("create_ticket", args)
            # The access token expires: the SDK refreshes it, and the
            # call sent again is its replay.
            await asyncio.sleep(int(need("IDEMFLOW_OAUTH_TTL_MS")) / 1000 + 1.5)
            again = await session.call_tool("create_ticket", args)
            return made, again

    made, again = asyncio.run(main())
    assert not made.is_error, made
    assert not again.is_error, again
    assert made.structured_content["replayed"] is False
    assert again.structured_content["replayed"] is True
    assert again.structured_content["result"] == made.structured_content["result"]
    assert storage.client is not None and storage.client.client_id, "the host registered (Dynamic Client Registration)"
    asked = httpx.URL(logins[0]).params
    assert asked.get("code_challenge_method") == "S256" and asked.get("code_challenge")
    assert asked.get("resource") == need("IDEMFLOW_OAUTH_MCP_URL"), "the resource indicator names the MCP server (RFC 8707)"
    assert len(logins) == 1, "the refresh asked for no second login"
    assert len(storage.tokens) >= 2 and storage.tokens[-1].access_token != storage.tokens[0].access_token, "the token was refreshed"
    assert tickets("c-oauth-py") == 1
    print(f"OAUTH-PY-MCP made, then replayed after a refresh; tokens saved {len(storage.tokens)}, logins {len(logins)}, tickets 1")


class ClientCredentials:
    """The token provider a service agent writes: client credentials,
    cached while they are good."""

    def __init__(self) -> None:
        self.fetched = 0
        self.token = ""
        self.until = 0.0

    def form(self) -> dict[str, str]:
        return {
            "grant_type": "client_credentials",
            "client_id": need("IDEMFLOW_OAUTH_CLIENT_ID"),
            "client_secret": need("IDEMFLOW_OAUTH_CLIENT_SECRET"),
            "audience": need("IDEMFLOW_OAUTH_AUDIENCE"),
            "scope": "idemflow:call idemflow:read",
        }

    def keep(self, r: httpx.Response) -> str:
        r.raise_for_status()
        body = r.json()
        self.fetched += 1
        self.token, self.until = body["access_token"], time.monotonic() + body["expires_in"] - 1
        return self.token

    def __call__(self) -> str:
        if self.token and time.monotonic() < self.until:
            return self.token
        return self.keep(httpx.post(need("IDEMFLOW_OAUTH_ISSUER") + "oauth2/token", data=self.form()))

    async def fetch(self) -> str:
        if self.token and time.monotonic() < self.until:
            return self.token
        async with httpx.AsyncClient() as http:
            return self.keep(await http.post(need("IDEMFLOW_OAUTH_ISSUER") + "oauth2/token", data=self.form()))


def test_a_service_agents_clients_take_a_token_provider() -> None:
    ttl = int(need("IDEMFLOW_OAUTH_TTL_MS")) / 1000
    body = {"customer_id": "c-oauth-py-svc", "title": "Printer on fire", "priority": "high"}
    sync = ClientCredentials()
    with idemflow.Client(need("IDEMFLOW_URL"), sync) as client:
        intent = idemflow.Intent(f"svc-py-{uuid.uuid4()}", "/v1/tickets", body)
        assert client.do(intent).replayed is False
        time.sleep(ttl + 1.5)
        assert client.do(intent).replayed is True
    assert sync.fetched == 2, "the provider renewed the expired token"

    asynchronous = ClientCredentials()

    async def main() -> bool:
        async with idemflow.AsyncClient(need("IDEMFLOW_URL"), asynchronous.fetch) as client:
            intent = idemflow.Intent(f"svc-py-async-{uuid.uuid4()}", "/v1/tickets", {**body, "customer_id": "c-oauth-py-svc-async"})
            first = await client.do(intent)
            return first.replayed

    assert asyncio.run(main()) is False
    assert asynchronous.fetched == 1
    assert tickets("c-oauth-py-svc") == 1 and tickets("c-oauth-py-svc-async") == 1
    print(f"OAUTH-PY-SVC sync provider fetched {sync.fetched} tokens for 2 calls across an expiry; async provider 1; 1 ticket each")
