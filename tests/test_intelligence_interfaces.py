"""The curation intelligence's interfaces on the real stack (issue 18 item 9): REST, MCP and the
`hypermnesia consolidate | proposals | ask` CLI, all over the same running services. A week of
conversation records goes in, consolidation proposes, one proposal is approved (the derived memory
rests on its premises) and one rejected with a reason, a premise changes and the stale conclusion
is revised, and the Dialectic answers citing live ids; a second principal sees none of it."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import sys
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
from mcp_types import TextContent

from hypermnesia.scopes import project_name_for_root
from tests.conftest import Stack
from tests.helpers import mcp_session, tool_json

CLI_TIMEOUT_S = 120


def _headers(token: str, project: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}", "X-Hypermnesia-Project": project}


async def cli(
    stack: Stack, *words: str, env: dict[str, str] | None = None, cwd: Path | None = None
) -> tuple[int, str, str]:
    """`python -m hypermnesia WORDS` against the stack's curation service. Asynchronous: the stack
    serves from this test's event loop, which a blocking subprocess call would stall."""
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "hypermnesia",
        *words,
        cwd=cwd,
        env={**os.environ, "HM_CURATION_ADDRESS": stack.curation_address, **(env or {})},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        stdin=asyncio.subprocess.DEVNULL,
    )
    out, err = await asyncio.wait_for(child.communicate(), CLI_TIMEOUT_S)
    assert child.returncode is not None
    return child.returncode, out.decode(), err.decode()


async def cli_json(stack: Stack, *words: str, cwd: Path | None = None) -> Any:
    code, out, err = await cli(stack, *words, "--json", cwd=cwd)
    assert code == 0, err
    return json.loads(out)  # exactly one JSON document, nothing else on stdout


def error_text(result: Any) -> str:
    """The message of a tool call that failed."""
    assert result.is_error
    block = result.content[0]
    assert isinstance(block, TextContent)
    return block.text


def _week(scope: str) -> list[dict[str, Any]]:
    """Conversation turns from 8-12 days ago (older than consolidation's settling time): two
    subjects, each told twice."""
    start = datetime.now(UTC) - timedelta(days=12)
    turns = [
        "ArgoCD deploys the Kubernetes cluster every Tuesday morning.",
        "On Tuesday ArgoCD rolled the new release out to Kubernetes again.",
        "The Grafana alert for Postgres replica lag fired during the night.",
        "Postgres replica lag set off the Grafana alert again overnight.",
    ]
    return [
        {
            "type": "conversation",
            "scope": scope,
            "content": text,
            "source_ref": f"week-{i}",
            "thread_id": f"standup-{i // 2}",
            "created_at": (start + timedelta(days=i)).isoformat(),
        }
        for i, text in enumerate(turns)
    ]


def _by_premises(proposals: list[dict[str, Any]], premises: set[str]) -> dict[str, Any]:
    return next(p for p in proposals if set(p["evidence"]) == premises)


async def test_a_week_in_proposals_out_decided_revised_and_asked(stack: Stack) -> None:
    project = f"ii-{uuid.uuid4().hex[:10]}"
    scope = f"project:{project}"
    alice, bob = _headers("alice-token", project), _headers("bob-token", "bobs")
    async with (
        httpx.AsyncClient(base_url=stack.base_url, headers=alice, timeout=120) as http,
        httpx.AsyncClient(base_url=stack.base_url, headers=bob, timeout=120) as other,
    ):
        imported = await http.post("/records/import", json={"records": _week(scope)})
        assert imported.status_code == 200, imported.text
        argo_a, argo_b, lag_a, lag_b = imported.json()["ids"]

        # Consolidation through the CLI: one JSON document reporting what the run did.
        weekly = await cli_json(stack, "consolidate", "--job", "weekly", "--scope", scope)
        (report,) = weekly["reports"]
        assert (report["job"], report["scope"], report["skipped"]) == ("weekly", scope, False)
        assert report["mode"] == "extractive" and report["made_by_kind"] == {"fact": 2}
        assert report["proposals_made"] == 2 and report["pending"] == 2
        again = await cli_json(stack, "consolidate", "--job", "weekly", "--scope", scope)
        assert again["reports"][0]["proposals_made"] == 0  # idempotent

        # The same proposals through REST, MCP and the CLI; the session's project is the default scope.
        listed = await http.get("/proposals")
        assert listed.status_code == 200, listed.text
        rest = listed.json()["proposals"]
        argo = _by_premises(rest, {argo_a, argo_b})
        lag = _by_premises(rest, {lag_a, lag_b})
        assert set(argo) == {
            "id", "scope", "kind", "status", "content", "description", "rationale", "evidence", "mode",
            "created_at",
        }  # fmt: skip
        assert (argo["kind"], argo["status"], argo["mode"], argo["scope"]) == (
            "fact",
            "pending",
            "extractive",
            scope,
        )
        assert argo["rationale"] and argo["created_at"].endswith("Z")
        async with mcp_session(stack.mcp_url, "alice-token", project, tools="full") as client:
            tools = tool_json(await client.call_tool("proposals_list", {"scope": scope}))
        assert tools == rest
        assert (await cli_json(stack, "proposals", "list", "--scope", scope))["proposals"] == rest

        # Bob reads none of it, and cannot decide it.
        assert not {p["id"] for p in (await other.get("/proposals")).json()["proposals"]} & {
            argo["id"],
            lag["id"],
        }
        denied = await other.get("/proposals", params={"scope": scope})
        assert denied.status_code == 403, denied.text
        stolen = await other.post(f"/proposals/{argo['id']}/approve")
        assert stolen.status_code == 404 and "in your scopes" in stolen.json()["error"]["message"]

        # Approve one (REST): the derived memory exists and rests on the premises.
        approved = await http.post(f"/proposals/{argo['id']}/approve")
        assert approved.status_code == 200, approved.text
        derived = approved.json()["memory_id"]
        decided = approved.json()["proposal"]
        assert decided["status"] == "approved" and decided["decided_by"] == "alice"
        assert decided["result_id"] == derived and decided["decided_at"].endswith("Z")
        memory = (await http.get(f"/memories/{derived}")).json()
        assert memory["content"] == argo["content"] and memory["scope"] == scope
        graph = await http.get(f"/memories/{derived}/evidence")
        assert graph.status_code == 200, graph.text
        assert graph.json()["memory"]["id"] == derived and graph.json()["memory"]["stale"] is False
        assert {p["id"] for p in graph.json()["premises"]} == {argo_a, argo_b}
        assert all(p["hops"] == 1 for p in graph.json()["premises"])
        upward = (await http.get(f"/memories/{argo_a}/evidence")).json()
        assert [d["id"] for d in upward["derived"]] == [derived]
        async with mcp_session(stack.mcp_url, "alice-token", project, tools="full") as client:
            assert (
                tool_json(await client.call_tool("memory_evidence", {"memory_id": derived})) == graph.json()
            )
        async with mcp_session(stack.mcp_url, "bob-token", "bobs", tools="full") as client:
            assert tool_json(await client.call_tool("memory_evidence", {"memory_id": derived})) is None
            hidden = await client.call_tool("memory_ask", {"question": "ArgoCD", "scope": scope})
            assert "not granted" in error_text(hidden)
        assert (await other.get(f"/memories/{derived}/evidence")).status_code == 404

        # Reject the other: a reason is required (REST says so), then given (MCP).
        unexplained = await http.post(f"/proposals/{lag['id']}/reject")
        assert (
            unexplained.status_code == 400 and "reason is required" in unexplained.json()["error"]["message"]
        )
        async with mcp_session(stack.mcp_url, "alice-token", project, tools="full") as client:
            rejected = tool_json(
                await client.call_tool(
                    "proposal_decide",
                    {"proposal_id": lag["id"], "decision": "reject", "reason": "an alert, not a fact"},
                )
            )
        assert rejected["memory_id"] is None and rejected["proposal"]["status"] == "rejected"
        assert rejected["proposal"]["decision_reason"] == "an alert, not a fact"
        code, _out, err = await cli(stack, "proposals", "approve", lag["id"])
        assert code == 1 and "a decision is final" in err
        settled = (await cli_json(stack, "proposals", "list", "--scope", scope, "--status", "all"))[
            "proposals"
        ]
        assert {p["id"]: p["status"] for p in settled} == {argo["id"]: "approved", lag["id"]: "rejected"}
        code, out, _err = await cli(stack, "proposals", "list", "--scope", scope, "--status", "all")
        assert code == 0 and f"{lag['id']}  fact" in out
        assert "rejected by alice at " in out and ": an alert, not a fact" in out

        # A premise changes: the conclusion reads stale, naming it; the next daily run proposes
        # its revision, approved through the CLI.
        patched = await http.patch(
            f"/memories/{argo_a}",
            json={"content": "ArgoCD now deploys the Kubernetes cluster every Thursday."},
        )
        assert patched.status_code == 200, patched.text
        stale = (await http.get(f"/memories/{derived}/evidence")).json()["memory"]
        assert stale["stale"] is True and stale["stale_because"] == f"premise {argo_a} was updated"
        daily = await cli_json(stack, "consolidate", "--job", "daily", "--scope", scope)
        assert daily["reports"][0]["made_by_kind"].get("revision") == 1
        pending = (await cli_json(stack, "proposals", "list", "--scope", scope))["proposals"]
        (revision,) = [p for p in pending if p["kind"] == "revision"]
        assert revision["supersedes"] == derived and "Thursday" in revision["content"]
        revised = await cli_json(stack, "proposals", "approve", revision["id"])
        assert revised["proposal"]["status"] == "approved" and revised["memory_id"]
        fresh = (await http.get(f"/memories/{revised['memory_id']}/evidence")).json()
        assert fresh["memory"]["stale"] is False
        assert {p["id"] for p in fresh["premises"]} == {argo_a, argo_b}

        # The Dialectic answers citing live ids only, through REST, MCP and the CLI alike.
        question = "Which day does ArgoCD deploy the Kubernetes cluster?"
        asked = await http.post("/dialectic/ask", json={"question": question})
        assert asked.status_code == 200, asked.text
        answer = asked.json()
        assert set(answer) == {
            "mode", "claims", "abstained", "dropped", "depth", "depth_reason", "notes", "evidence"
        }  # fmt: skip
        assert answer["mode"] == "extractive" and answer["claims"] and answer["depth_reason"]
        assert answer["abstained"] is None
        cited = {c for claim in answer["claims"] for c in claim["citations"]}
        assert derived not in cited  # stale and superseded: never served as if nothing happened
        for memory_id in cited:
            live = (await http.get(f"/memories/{memory_id}")).json()
            assert live["scope"] == scope and live["archived_at"] is None and "superseded_by" not in live
        assert any("Thursday" in claim["text"] for claim in answer["claims"])
        async with mcp_session(stack.mcp_url, "alice-token", project, tools="full") as client:
            tool = tool_json(await client.call_tool("memory_ask", {"question": question, "depth": "derived"}))
        assert tool["depth"] == "derived" and tool["depth_reason"] == "depth derived was asked for"
        assert {c for claim in tool["claims"] for c in claim["citations"]} <= cited | {revised["memory_id"]}
        by_cli = await cli_json(stack, "ask", question, "--scope", scope)
        assert by_cli["claims"] == answer["claims"]
        code, out, _err = await cli(stack, "ask", question, "--scope", scope)
        assert code == 0 and "[1] " in out and "cites " in out and "depth " in out
        theirs = (await other.post("/dialectic/ask", json={"question": question})).json()
        assert not {c for claim in theirs["claims"] for c in claim["citations"]} & (cited | {derived})


async def test_consolidate_says_one_proposal(stack: Stack) -> None:
    """The text summary counts in the right number: "1 proposal made", never "1 proposals"."""
    project = f"ii-one-{uuid.uuid4().hex[:10]}"
    scope = f"project:{project}"
    async with httpx.AsyncClient(
        base_url=stack.base_url, headers=_headers("alice-token", project), timeout=120
    ) as http:
        imported = await http.post("/records/import", json={"records": _week(scope)[:2]})  # one subject
        assert imported.status_code == 200, imported.text
    code, out, err = await cli(stack, "consolidate", "--job", "weekly", "--scope", scope)
    assert code == 0, err
    assert "; 1 proposal made (fact 1), 1 pending;" in out and "1 proposals" not in out, out


async def test_an_unrelated_question_is_abstained_on_everywhere(stack: Stack, tmp_path: Path) -> None:
    """A web shop's project holds a Friday pizza lunch: asked the capital of France, REST, MCP and
    the CLI (run in the project's folder, naming no scope) answer with no claim and say why; a
    question the lunch answers still gets its cited claim."""
    folder = tmp_path / "web shop"
    folder.mkdir()
    project = project_name_for_root(str(folder.resolve()))
    pizza_text = "Friday's lunch: the team orders pizza from the Italian place near the station."
    async with httpx.AsyncClient(
        base_url=stack.base_url, headers=_headers("alice-token", project), timeout=120
    ) as http:
        saved = []
        for content in (pizza_text, "The web shop's checkout takes card payments through Stripe."):
            response = await http.post("/memories", json={"content": content})
            assert response.status_code == 200, response.text
            saved.append(response.json()["memory"]["id"])
        pizza = saved[0]
        france = "What is the capital of France?"
        rest = (await http.post("/dialectic/ask", json={"question": france})).json()
        lunch = (await http.post("/dialectic/ask", json={"question": "What is Friday's lunch?"})).json()
    floor = ", below the relevance floor 0.30"
    assert rest["claims"] == [] and rest["evidence"] == []
    assert rest["abstained"].startswith(f"no memory is close enough to the question: the closest ({pizza})")
    assert rest["abstained"].endswith(floor)
    assert lunch["abstained"] is None and lunch["claims"][0] == {"text": pizza_text, "citations": [pizza]}
    async with mcp_session(stack.mcp_url, "alice-token", project) as client:
        tool = tool_json(await client.call_tool("memory_ask", {"question": france}))
    assert tool["claims"] == [] and tool["abstained"] == rest["abstained"]
    # The CLI's default scope is the folder's project, as the hooks and an MCP root name it.
    by_cli = await cli_json(stack, "ask", france, cwd=folder)
    assert by_cli["claims"] == [] and by_cli["abstained"] == rest["abstained"]
    code, out, err = await cli(stack, "ask", france, cwd=folder)
    assert code == 0, err
    assert out.startswith(f"no claim (searched project:{project}): no memory is close enough")
    answered = await cli_json(stack, "ask", "What is Friday's lunch?", cwd=folder)
    assert answered["abstained"] is None and answered["claims"][0]["citations"] == [pizza]


async def test_schemas_and_bad_requests_say_what_to_do(stack: Stack) -> None:
    alice = _headers("alice-token", "ii-bad")
    async with mcp_session(stack.mcp_url, "alice-token", "ii-bad", tools="full") as client:
        tools = {t.name: t.input_schema for t in (await client.list_tools()).tools}
        bad_depth = await client.call_tool("memory_ask", {"question": "anything", "depth": "everything"})
        assert "explicit, derived, premises, ancestry, auto" in error_text(bad_depth)
        missing = await client.call_tool("memory_evidence", {"memory_id": str(uuid.uuid4())})
        assert tool_json(missing) is None
    assert tools["memory_ask"]["required"] == ["question"]
    assert tools["memory_ask"]["properties"]["k"]["maximum"] == 50
    assert tools["proposal_decide"]["properties"]["reason"]["maxLength"] == 2000
    assert tools["proposals_list"]["properties"]["limit"]["maximum"] == 1000
    assert set(tools["memory_evidence"]["properties"]) == {"memory_id", "depth"}
    async with httpx.AsyncClient(base_url=stack.base_url, headers=alice, timeout=60) as http:
        openapi = (await http.get("/openapi.json")).json()
        body = openapi["components"]["schemas"]["AskQuestion"]["properties"]
        ask = tools["memory_ask"]["properties"]
        assert set(body) == set(ask) and all(body[n]["description"] == ask[n]["description"] for n in body)
        paths = openapi["paths"]
        assert {"/proposals", "/proposals/{proposal_id}/approve", "/proposals/{proposal_id}/reject"} <= set(
            paths
        )
        assert {"/dialectic/ask", "/memories/{memory_id}/evidence"} <= set(paths)
        wrong = await http.get(f"/memories/{uuid.uuid4()}/evidence", params={"depth": "derived"})
        assert (
            wrong.status_code == 400
            and "use premises (direct) or ancestry" in wrong.json()["error"]["message"]
        )
        status = await http.get("/proposals", params={"status": "maybe"})
        assert (
            status.status_code == 400
            and "pending, approved, rejected or all" in status.json()["error"]["message"]
        )
        decision = await http.post("/proposals/not-an-id/approve")
        assert decision.status_code == 400, decision.text
        empty = await http.post("/dialectic/ask", json={"question": "anything", "k": 0})
        assert empty.status_code == 400 and "k" in empty.json()["error"]["message"]

    # The CLI: a stopped service is named with what to do; a missing reason never reaches it.
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        nobody = f"127.0.0.1:{sock.getsockname()[1]}"
    code, out, err = await cli(stack, "proposals", "list", "--json", env={"HM_CURATION_ADDRESS": nobody})
    assert code == 3 and out == "" and f"cannot reach curation at {nobody}" in err
    assert "hypermnesia up" in err
    code, _out, err = await cli(stack, "proposals", "reject", str(uuid.uuid4()))
    assert code == 2 and "--reason" in err
    code, _out, err = await cli(stack, "proposals", "reject", str(uuid.uuid4()), "--reason", "nope")
    assert code == 1 and "in your scopes" in err
    code, out, _err = await cli(
        stack, "consolidate", "--job", "monthly", "--scope", "project:ii-empty", "--json"
    )
    assert code == 0 and json.loads(out)["reports"][0]["proposals_made"] == 0
