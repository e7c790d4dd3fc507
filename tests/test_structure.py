"""Tiers 0/1 over the real stack: load through curation (gRPC, REST, CLI), read through retrieval
(gRPC, REST, MCP), all against real Postgres."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

import grpc
import httpx
import pytest
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from hypermnesia.v1 import common_pb2, structure_pb2, structure_pb2_grpc
from tests.conftest import Stack, free_port
from tests.helpers import mcp_session, tool_json

ROOT = Path(__file__).resolve().parent.parent
ALICE = {"Authorization": "Bearer alice-token"}
BOB = {"Authorization": "Bearer bob-token"}

MAP = """\
components:
  - slug: app
    globs: ["src/**"]
    depends_on: [lib]
    constraints:
      - {id: app-rule, text: app rule, severity: must}
      - {id: app-note, text: app note, severity: info}
      - {id: app-old, text: app retired, severity: must, status: retired}
  - slug: api
    parent: app
    globs: ["src/api/**"]
    depends_on: [lib]
    constraints:
      - {id: api-rule, text: api rule, severity: must, kind: adr}
  - slug: static
    parent: api
    globs: ["src/api/static/*.js"]
  - slug: static-any
    globs: ["src/api/static/**"]
  - slug: lib
    globs: ["lib/**"]
    depends_on: [core]
    constraints:
      - {id: lib-must, text: lib must, severity: must}
      - {id: lib-info, text: lib info, severity: info}
      - {id: lib-proposed, text: lib proposed, severity: must, status: proposed}
  - slug: core
    globs: ["core/**"]
    constraints:
      - {id: core-must, text: core must, severity: must}
  - slug: docs-low
    globs: ["docs/*.md"]
    priority: 1
  - slug: docs-high
    globs: ["docs/*.md"]
    priority: 5
  - slug: gen-b
    globs: ["gen/*.txt"]
  - slug: gen-a
    globs: ["gen/*.txt"]
relationships:
  - {from: docs-high, to: core, kind: uses}
constraints:
  - {id: g-must, text: global must, severity: must, kind: invariant}
  - {id: g-should, text: global should}
  - {id: g-info, text: global info, severity: info}
  - {id: g-retired, text: global retired, severity: must, status: retired}
"""

GLOBALS = [("g-must", "global invariant"), ("g-should", "global invariant")]


def caller(*grants: str) -> common_pb2.Caller:
    return common_pb2.Caller(principal="test", grants=list(grants))


async def load(stack: Stack, repo: str, source: str, name: str = "map.yaml") -> structure_pb2.LoadMapResponse:
    async with grpc.aio.insecure_channel(stack.curation_address) as channel:
        stub = structure_pb2_grpc.StructureAdminStub(channel)
        request = structure_pb2.LoadMapRequest(
            caller=caller(f"project:{repo}"), repo=repo, source=source, source_name=name
        )
        return await stub.LoadMap(request, timeout=10)


async def resolve(stack: Stack, repo: str, path: str) -> structure_pb2.ResolvePathResponse:
    async with grpc.aio.insecure_channel(stack.retrieval_address) as channel:
        stub = structure_pb2_grpc.StructureStub(channel)
        return await stub.ResolvePath(
            structure_pb2.ResolvePathRequest(caller=caller(), repo=repo, path=path), timeout=10
        )


async def project_map(stack: Stack, repo: str) -> structure_pb2.ProjectMapResponse:
    async with grpc.aio.insecure_channel(stack.retrieval_address) as channel:
        stub = structure_pb2_grpc.StructureStub(channel)
        return await stub.ProjectMap(structure_pb2.ProjectMapRequest(caller=caller(), repo=repo), timeout=10)


def rules(response: structure_pb2.ResolvePathResponse) -> list[tuple[str, str]]:
    return [(c.id, c.reason) for c in response.constraints]


@pytest.fixture(scope="module")
async def mapped(stack: Stack) -> Stack:
    reply = await load(stack, "tiers", MAP)
    assert (reply.components, reply.constraints, reply.relationships, reply.replaced) == (10, 12, 4, False)
    return stack


async def test_project_map_is_the_tree_and_the_global_invariants(mapped: Stack) -> None:
    reply = await project_map(mapped, "tiers")
    tree = {c.slug: (c.parent, list(c.depends_on)) for c in reply.components}
    assert tree["api"] == ("app", ["lib"]) and tree["static"] == ("api", []) and tree["app"] == ("", ["lib"])
    assert [c.slug for c in reply.components][:3] == ["app", "api", "static"]  # file order
    # Only active must/should constraints without a component.
    assert [c.id for c in reply.invariants] == ["g-must", "g-should"]
    assert reply.source_name == "map.yaml" and len(reply.source_sha256) == 64 and reply.loaded_by == "test"


async def test_most_specific_glob_wins_and_dependencies_go_one_hop(mapped: Stack) -> None:
    reply = await resolve(mapped, "tiers", "src/api/handlers/users.py")
    assert reply.matched and reply.component.slug == "api" and reply.matched_glob == "src/api/**"
    assert "most specific of 2 matching components" in reply.reason
    # Own rules, then api -> lib (one hop; lib -> core is a second hop and stays out), then globals.
    assert rules(reply) == [
        ("api-rule", "matched glob 'src/api/**' of component 'api'"),
        ("lib-must", "via dependency api -> lib"),
        *GLOBALS,
    ]


async def test_own_rules_include_info_but_not_retired(mapped: Stack) -> None:
    reply = await resolve(mapped, "tiers", "src/main.py")
    assert reply.component.slug == "app"
    own = "matched glob 'src/**' of component 'app'"
    assert rules(reply) == [
        ("app-rule", own),
        ("app-note", own),
        ("lib-must", "via dependency app -> lib"),
        *GLOBALS,
    ]


async def test_more_literal_characters_win_within_one_folder(mapped: Stack) -> None:
    assert (await resolve(mapped, "tiers", "src/api/static/app.js")).component.slug == "static"
    assert (await resolve(mapped, "tiers", "src/api/static/app.css")).component.slug == "static-any"


async def test_priority_breaks_ties_and_a_slug_tie_is_announced(mapped: Stack) -> None:
    reply = await resolve(mapped, "tiers", "docs/guide.md")
    assert reply.component.slug == "docs-high"
    assert "priority 5 beats 1" in reply.reason and reply.note == ""
    assert ("core-must", "via dependency docs-high -> core (uses)") in rules(reply)
    reply = await resolve(mapped, "tiers", "gen/out.txt")
    assert reply.component.slug == "gen-a"
    assert "chosen by slug order" in reply.note and "higher priority" in reply.note


async def test_a_path_matching_nothing_gets_the_global_invariants(mapped: Stack) -> None:
    reply = await resolve(mapped, "tiers", "./elsewhere//x.py")
    assert not reply.matched and not reply.HasField("component") and reply.path == "elsewhere/x.py"
    assert rules(reply) == GLOBALS
    assert "no component's globs match 'elsewhere/x.py'" in reply.note


@pytest.mark.parametrize(
    ("path", "fragment"),
    [("/home/me/src/a.py", "is absolute"), ("../a.py", "contains '..'"), ("", "path is empty")],
)
async def test_bad_paths_are_refused(mapped: Stack, path: str, fragment: str) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await resolve(mapped, "tiers", path)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and fragment in (err.value.details() or "")


async def test_unknown_repo_is_not_found_everywhere(mapped: Stack) -> None:
    for call in (resolve(mapped, "nowhere", "a.py"), project_map(mapped, "nowhere")):
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await call
        assert err.value.code() == grpc.StatusCode.NOT_FOUND
        assert "no structure map is loaded for repo 'nowhere'" in (err.value.details() or "")
        assert "hypermnesia map load FILE --repo nowhere" in (err.value.details() or "")
    async with httpx.AsyncClient(base_url=mapped.base_url, headers=ALICE) as http:
        response = await http.get("/map/nowhere/resolve", params={"path": "a.py"})
        assert response.status_code == 404 and "no structure map" in response.json()["error"]["message"]
    async with mcp_session(mapped.mcp_url, "alice-token", "nowhere", tools="full") as client:
        result = await client.call_tool("project_map", {})
        assert result.is_error and "no structure map is loaded for repo 'nowhere'" in result.content[0].text


async def test_a_bad_map_leaves_the_old_one_and_a_good_one_replaces_it(stack: Stack) -> None:
    await load(stack, "swap", "components:\n  - slug: old\n    globs: ['old/**']\n")
    before = await project_map(stack, "swap")
    bad = "components:\n  - slug: new\n    globs:\n      - 'new/**'\n      - 'new/[oops'\n"
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await load(stack, "swap", bad, name="next-map.yaml")
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "next-map.yaml:5: component 'new': glob 'new/[oops' has an unbalanced '['" in (
        err.value.details() or ""
    )
    after = await project_map(stack, "swap")
    assert after == before
    reply = await load(stack, "swap", "components:\n  - slug: new\n    globs: ['new/**']\n", name="v2.yaml")
    assert reply.replaced
    assert [c.slug for c in (await project_map(stack, "swap")).components] == ["new"]
    assert not (await resolve(stack, "swap", "old/a.py")).matched
    count = await stack.pool.fetchval("SELECT count(*) FROM components WHERE repo = 'swap'")
    assert count == 1


async def test_repos_are_isolated(stack: Stack) -> None:
    one = "components:\n  - slug: app\n    globs: ['app/**']\n    constraints: [{id: r, text: rule of one}]\n"
    two = "components:\n  - slug: app\n    globs: ['app/**']\n    constraints: [{id: r, text: rule of two}]\n"
    await load(stack, "iso-one", one)
    await load(stack, "iso-two", two)
    await load(stack, "iso-two", two.replace("rule of two", "rule of two again"))
    assert (await resolve(stack, "iso-one", "app/x")).constraints[0].text == "rule of one"
    assert (await resolve(stack, "iso-two", "app/x")).constraints[0].text == "rule of two again"


async def test_loading_needs_the_project_grant(stack: Stack) -> None:
    async with grpc.aio.insecure_channel(stack.curation_address) as channel:
        stub = structure_pb2_grpc.StructureAdminStub(channel)
        request = structure_pb2.LoadMapRequest(caller=caller("project:other"), repo="guarded", source=MAP)
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await stub.LoadMap(request, timeout=10)
    assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert await stack.pool.fetchval("SELECT count(*) FROM structure_maps WHERE repo = 'guarded'") == 0


async def test_rest_load_read_and_auth(stack: Stack) -> None:
    as_json = json.dumps(
        {
            "components": [
                {
                    "slug": "web",
                    "globs": ["web/**"],
                    "constraints": [{"text": "escape output", "severity": "must"}],
                }
            ]
        },
        indent="\t",
    )
    async with httpx.AsyncClient(base_url=stack.base_url) as http:
        response = await http.post(
            "/map/bobs", headers={**BOB, "content-type": "application/json"}, content=as_json
        )
        assert response.status_code == 200, response.text
        assert response.json()["components"] == 1 and response.json()["replaced"] is False
        yaml_body = "components:\n  - slug: web\n    globs: ['web/**', 'site/**']\n"
        response = await http.post(
            "/map/bobs",
            headers={**BOB, "content-type": "application/yaml"},
            content=yaml_body,
            params={"name": "bobs-map.yaml"},
        )
        assert response.status_code == 200 and response.json()["replaced"] is True
        # Bob holds project:bobs only: he may read any map but load only his own.
        denied = await http.post("/map/alices", headers=BOB, content=yaml_body)
        assert denied.status_code == 403 and "not granted" in denied.json()["error"]["message"]
        assert await stack.pool.fetchval("SELECT count(*) FROM structure_maps WHERE repo = 'alices'") == 0
        response = await http.get("/map/bobs", headers=ALICE)
        assert response.status_code == 200 and response.json()["source"]["name"] == "bobs-map.yaml"
        assert response.json()["components"][0]["globs"] == ["web/**", "site/**"]
        response = await http.get("/map/bobs/resolve", headers=ALICE, params={"path": "site/index.html"})
        body = response.json()
        assert body["component"]["slug"] == "web" and body["matched_glob"] == "site/**"
        assert (await http.get("/map/bobs")).status_code == 401
        bad = await http.post(
            "/map/bobs",
            headers=BOB,
            content="components:\n  - slug: web\n    severity: x\n",
            params={"name": "m.yaml"},
        )
        assert (
            bad.status_code == 400
            and "m.yaml:3: a component: unknown key 'severity'" in bad.json()["error"]["message"]
        )
        bad = await http.post(
            "/map/bobs", headers={**BOB, "content-type": "application/json"}, content='{"a": '
        )
        assert bad.status_code == 400 and "not valid JSON (line 1" in bad.json()["error"]["message"]
        bad = await http.get("/map/a b/resolve", headers=ALICE, params={"path": "x"})
        assert bad.status_code == 400 and "not a valid name" in bad.json()["error"]["message"]
        missing = await http.get("/map/bobs/resolve", headers=ALICE)
        assert missing.status_code == 400 and "path" in missing.json()["error"]["message"]
    assert [c.slug for c in (await project_map(stack, "bobs")).components] == ["web"]


async def test_mcp_tools_default_to_the_session_project(mapped: Stack) -> None:
    async with mcp_session(mapped.mcp_url, "bob-token", "tiers", tools="full") as client:
        tools = {t.name for t in (await client.list_tools()).tools}
        assert {"project_map", "rules_for_path"} <= tools
        overview = tool_json(await client.call_tool("project_map", {}))
        assert overview["repo"] == "tiers" and [i["id"] for i in overview["invariants"]] == [
            "g-must",
            "g-should",
        ]
        assert {"from": "docs-high", "to": "core", "kind": "uses"} in overview["relationships"]
        found = tool_json(await client.call_tool("rules_for_path", {"path": "lib/x.c"}))
        assert found["component"]["slug"] == "lib"
        assert [(c["id"], c["applies_because"]) for c in found["constraints"]] == [
            ("lib-must", "matched glob 'lib/**' of component 'lib'"),
            ("lib-info", "matched glob 'lib/**' of component 'lib'"),
            ("core-must", "via dependency lib -> core"),
            *GLOBALS,
        ]
        other = tool_json(await client.call_tool("rules_for_path", {"path": "x.py", "repo": "tiers"}))
        assert other["matched"] is False and other["component"] is None and other["note"]
        bad = await client.call_tool("rules_for_path", {"path": "/abs.py"})
        assert bad.is_error and "relative to the repository root" in bad.content[0].text


async def test_structure_services_are_reflected(stack: Stack) -> None:
    for address, service in (
        (stack.retrieval_address, "hypermnesia.v1.Structure"),
        (stack.curation_address, "hypermnesia.v1.StructureAdmin"),
    ):
        async with grpc.aio.insecure_channel(address) as channel:
            call = reflection_pb2_grpc.ServerReflectionStub(channel).ServerReflectionInfo()
            await call.write(reflection_pb2.ServerReflectionRequest(list_services=""))
            reply = await call.read()
            await call.done_writing()
        assert service in {s.name for s in reply.list_services_response.service}


CLI = [sys.executable, "-m", "hypermnesia"]


async def run_cli(*args: str, curation_address: str) -> tuple[int, str, str]:
    env = {**os.environ, "HM_CURATION_ADDRESS": curation_address, "HM_RPC_TIMEOUT_S": "20"}
    process = await asyncio.create_subprocess_exec(
        *CLI, *args, cwd=ROOT, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


async def test_cli_map_load(stack: Stack, tmp_path: Path) -> None:
    example = ROOT / "deploy/examples/hypermnesia-map.yaml"
    code, out, err = await run_cli(
        "map", "load", str(example), "--repo", "hypermnesia", curation_address=stack.curation_address
    )
    assert code == 0, err
    assert "repo 'hypermnesia'" in out and "11 components" in out and "first map of this repo" in out
    reply = await resolve(stack, "hypermnesia", "hypermnesia/v1/common_pb2.py")
    assert reply.component.slug == "grpc-generated"
    assert (
        "generated-not-edited",
        "matched glob 'hypermnesia/v1/*_pb2.py' of component 'grpc-generated'",
    ) in rules(reply)
    assert ("proto-field-numbers", "via dependency grpc-generated -> protos") in rules(reply)
    reply = await resolve(stack, "hypermnesia", "hypermnesia/migrations/0001_core.sql")
    assert reply.component.slug == "migrations"

    broken = tmp_path / "broken-map.yaml"
    broken.write_text("components:\n  - slug: a\n    globs: ['a/[']\n")
    code, out, err = await run_cli(
        "map", "load", str(broken), "--repo", "hypermnesia", curation_address=stack.curation_address
    )
    assert code == 1 and f"{broken}:3: component 'a': glob 'a/[' has an unbalanced '['" in err
    assert len((await project_map(stack, "hypermnesia")).components) == 11

    code, out, err = await run_cli(
        "map", "load", str(example), "--repo", "hypermnesia", curation_address=f"127.0.0.1:{free_port()}"
    )
    assert code == 3 and "cannot reach curation at 127.0.0.1:" in err and "HM_CURATION_ADDRESS" in err

    code, out, err = await run_cli(
        "map", "load", str(tmp_path / "absent.yaml"), "--repo", "x", curation_address=stack.curation_address
    )
    assert code == 1 and "is not a file" in err


async def test_map_tables_carry_the_repo(stack: Stack) -> None:
    for table in ("components", "constraints", "component_relationships"):
        assert (
            await stack.pool.fetchval(
                "SELECT count(*) FROM information_schema.columns"
                " WHERE table_name = $1 AND column_name = 'repo'",
                table,
            )
            == 1
        )
