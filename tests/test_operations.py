"""The operation table (gateway/operations.py) is the one place an operation is declared: an operation
added to it gets its REST route (in the OpenAPI document), its MCP tool (in tools/list, through a
real MCP client) and its rate limit, with no other code; and every operation's REST body (or query
string) is its tool's input schema, less the fields the URL path carries.

The gateway here serves the table plus one fake operation on a real HTTP server; the fake operation
calls no service, so no service runs."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Any

import httpx
import pytest

from gateway import records
from gateway.auth import Authenticator, Identity, Session
from gateway.backends import Backends
from gateway.fields import Request, field
from gateway.operations import OPERATIONS, SEARCH, WRITE, Operation, Route, Tool
from gateway.rest import PATH_PARAMETER
from hypermnesia.scopes import Principal
from hypermnesia.settings import GatewaySettings
from tests.conftest import TOKENS, free_port
from tests.helpers import mcp_session, tool_json
from tooling.local_stack import serve_gateway

ALICE = {"Authorization": "Bearer alice-token"}
BURST = 2


class Echo(Request):
    text: str = field("What to say back.", max_length=100)
    loud: bool = field("Say it in capitals.", False)


async def echo(backends: Backends, session: Session, request: Echo) -> dict[str, Any]:
    """Say the text back, with who asked."""
    said = request.text.upper() if request.loud else request.text
    return {"said": said, "principal": session.principal.id}


FAKE = Operation(
    Echo,
    echo,
    rest=(Route("POST", "/echo"),),
    tool=Tool("test_echo", "Say the text back."),
    limit=WRITE,
)


@pytest.fixture(scope="module")
async def gateway() -> AsyncIterator[str]:
    """A gateway serving the table plus FAKE, with a write bucket of BURST (refilled once a minute)."""
    settings = GatewaySettings(
        auth_tokens={**TOKENS, "carol-token": {"principal": "carol", "scopes": ["project:*"]}},
        require_auth=True,
        retrieval_address=f"127.0.0.1:{free_port()}",
        curation_address=f"127.0.0.1:{free_port()}",
        rate_writes_per_min=1,
        rate_writes_burst=BURST,
    )
    async with serve_gateway(settings, operations=(*OPERATIONS, FAKE)) as url:
        yield url


async def _openapi(base_url: str) -> dict[str, Any]:
    async with httpx.AsyncClient(base_url=base_url, timeout=30) as http:
        response = await http.get("/openapi.json")
    assert response.status_code == 200
    return dict(response.json())


async def _tools(base_url: str) -> dict[str, dict[str, Any]]:
    async with mcp_session(f"{base_url}/mcp", "alice-token", "optable", tools="full") as client:
        return {t.name: t.input_schema for t in (await client.list_tools()).tools}


def _inline(schema: Any, definitions: dict[str, Any]) -> Any:
    """`schema` with every $ref replaced by what it names and without titles (the tool's argument
    model and REST's body model are named differently), so two documents compare by content."""
    if isinstance(schema, list):
        return [_inline(item, definitions) for item in schema]
    if not isinstance(schema, dict):
        return schema
    if "$ref" in schema:
        return _inline(definitions[schema["$ref"].rsplit("/", 1)[-1]], definitions)
    return {k: _inline(v, definitions) for k, v in schema.items() if k not in ("title", "$defs")}


def _without(schema: dict[str, Any], names: set[str]) -> dict[str, Any]:
    """A tool's input schema less the fields a route takes from its path or sets itself."""
    kept = dict(schema)
    kept["properties"] = {k: v for k, v in schema["properties"].items() if k not in names}
    required = [name for name in schema.get("required", []) if name not in names]
    if required:
        kept["required"] = required
    else:
        kept.pop("required", None)
    return kept


async def test_a_fake_operation_gets_its_route_its_tool_and_its_limit(gateway: str) -> None:
    openapi = await _openapi(gateway)
    route = openapi["paths"]["/echo"]["post"]
    assert route["description"] == "Say the text back, with who asked."
    body = route["requestBody"]["content"]["application/json"]["schema"]
    assert _inline(body, openapi["components"]["schemas"])["properties"]["text"]["maxLength"] == 100
    tools = await _tools(gateway)
    assert set(tools["test_echo"]["properties"]) == {"text", "loud"}

    # REST: the bucket's BURST writes, then 429 with Retry-After; the write bucket is alice's.
    async with httpx.AsyncClient(base_url=gateway, timeout=30) as http:
        for _ in range(BURST):
            answer = await http.post("/echo", json={"text": "hello", "loud": True}, headers=ALICE)
            assert answer.status_code == 200, answer.text
            assert answer.json() == {"said": "HELLO", "principal": "alice"}
        refused = await http.post("/echo", json={"text": "hello"}, headers=ALICE)
        assert refused.status_code == 429 and int(refused.headers["retry-after"]) >= 1
        assert refused.json()["error"]["message"].startswith("rate limit: 1 writes a minute for this token")
        # The bucket is the operation's kind's: memory_save's REST route is refused too.
        assert (await http.post("/memories", json={"content": "x"}, headers=ALICE)).status_code == 429
        # Without a token: no bucket, the route answers 401 naming the header.
        anonymous = await http.post("/echo", json={"text": "hello"})
        assert anonymous.status_code == 401 and "Authorization" in anonymous.json()["error"]["message"]

    # MCP, as bob (a bucket of his own): the tool answers, then is refused with a tool error.
    async with mcp_session(f"{gateway}/mcp", "bob-token", "bobs", tools="full") as client:
        for _ in range(BURST):
            assert tool_json(await client.call_tool("test_echo", {"text": "hi"})) == {
                "said": "hi",
                "principal": "bob",
            }
        result = await client.call_tool("test_echo", {"text": "hi"})
        assert result.is_error
        assert result.content[0].text.startswith("rate limit: 1 writes a minute for this token; retry in")


async def test_each_rest_body_is_its_tools_input_schema(gateway: str) -> None:
    openapi = await _openapi(gateway)
    definitions = openapi["components"]["schemas"]
    tools = await _tools(gateway)
    compared = 0
    for operation in (*OPERATIONS, FAKE):
        if operation.tool is None:
            continue
        schema = _inline(tools[operation.tool.name], {})
        for route in operation.rest:
            if route.adapter is not None:
                continue
            spec = openapi["paths"][PATH_PARAMETER.sub(r"{\1}", route.path)][route.method.lower()]
            in_path = {name for name, _ in PATH_PARAMETER.findall(route.path)}
            expected = _without(schema, in_path | set(route.fixed))
            if route.method == "GET":
                query = {p["name"]: p for p in spec.get("parameters", []) if p["in"] == "query"}
                assert set(query) == set(expected["properties"]), route
                for name, parameter in query.items():
                    assert _inline(parameter["schema"], definitions) == expected["properties"][name], (
                        route,
                        name,
                    )
                    assert parameter["required"] == (name in expected.get("required", [])), (route, name)
            elif "requestBody" in spec:
                body = spec["requestBody"]["content"]["application/json"]["schema"]
                if route.optional_body:
                    body = next(s for s in body["anyOf"] if "$ref" in s)
                assert _inline(body, definitions) == expected, route
            else:
                assert not expected["properties"], route
            compared += 1
    assert compared == sum(len(op.rest) for op in (*OPERATIONS, FAKE) if op.tool is not None)


async def test_the_caller_is_resolved_once_per_request(gateway: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The limiter, the roots resolver and the session all read the caller from the request's scope:
    one rate-limited call (REST or MCP) resolves its token once."""
    resolved: list[str] = []
    identity = Authenticator.identity

    async def counted(self: Authenticator, headers: Mapping[str, str]) -> Identity:
        resolved.append(headers.get("authorization", ""))
        return await identity(self, headers)

    monkeypatch.setattr(Authenticator, "identity", counted)
    carol = {"Authorization": "Bearer carol-token"}
    async with httpx.AsyncClient(base_url=gateway, timeout=30) as http:
        answer = await http.post("/echo", json={"text": "once"}, headers=carol)
    assert answer.status_code == 200 and answer.json()["principal"] == "carol"
    assert resolved == ["Bearer carol-token"]
    async with mcp_session(f"{gateway}/mcp", "carol-token", "carols", tools="full") as client:
        resolved.clear()
        assert tool_json(await client.call_tool("test_echo", {"text": "once"}))["principal"] == "carol"
    assert resolved == ["Bearer carol-token"]


def test_every_limited_operation_is_a_write_or_a_search_and_named_once() -> None:
    assert {op.limit for op in OPERATIONS} == {WRITE, SEARCH, None}
    tools = [op.tool.name for op in OPERATIONS if op.tool is not None]
    routes = [(route.method, route.path) for op in OPERATIONS for route in op.rest]
    assert len(tools) == len(set(tools)) and len(routes) == len(set(routes))
    by_tool = {op.tool.name: op for op in OPERATIONS if op.tool is not None}
    assert by_tool["memory_save"].limit == WRITE and by_tool["memory_search"].limit == SEARCH
    assert by_tool["memory_get"].limit is None


async def test_an_operations_deadline_is_the_tables() -> None:
    """A deadline in the table lengthens the operation's service calls (never shortens them);
    one given as a function is the request's (an import's grows with its records)."""
    seen: list[float] = []

    async def deadline(backends: Backends, session: Session, request: Echo) -> dict[str, Any]:
        seen.append(backends.timeout_s)
        return {}

    settings = GatewaySettings()
    backends = Backends(f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}", 5.0)
    session = Session(Principal("alice", ("*",)), "project:x", "header")
    try:
        for timeout_s in (60.0, 1.0, None, lambda request: 10.0 * len(request.text)):
            operation = Operation(Echo, deadline, timeout_s=timeout_s)
            await operation.bind(settings, [])(backends, session, Echo(text="abc"))
        assert seen == [60.0, 5.0, 5.0, 30.0]
        assert backends.timeout_s == 5.0
        imports = next(op for op in OPERATIONS if op.function is records.import_records)
        many = records.ImportRecords(records=[records.AppendRecord(content=f"r{i}") for i in range(100)])
        assert callable(imports.timeout_s) and imports.timeout_s(many) == 130.0
    finally:
        await backends.close()
