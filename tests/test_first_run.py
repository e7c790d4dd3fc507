"""A first run that connects: `hypermnesia up` on a fresh data dir with no HM_* auth settings makes a
token for the OS user, keeps it in HM_DATA_DIR/local-token (mode 0600) and prints the
`claude mcp add` line; that line's URL and token work with the MCP Inspector CLI. A second start says
where the token is kept and does not print it again."""

from __future__ import annotations

import asyncio
import json
import os
import re
import stat
from pathlib import Path

import pytest

from tests import inspector
from tests.conftest import free_port
from tests.helpers import UpProcess

pytestmark = pytest.mark.timeout(600)

CLAUDE_LINE = re.compile(
    r"claude mcp add --transport http hypermnesia (?P<url>http://\S+/mcp) "
    r'--header "Authorization: Bearer (?P<token>hm_[A-Za-z0-9_-]+)"'
)


def fresh_env(data_dir: Path) -> dict[str, str]:
    """What a newcomer has: no HM_* setting at all, except free ports and a data dir of its own."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HM_")}
    for name in (
        "EMBEDDER_PORT",
        "EMBEDDER_METRICS_PORT",
        "RETRIEVAL_PORT",
        "RETRIEVAL_METRICS_PORT",
        "CURATION_PORT",
        "CURATION_METRICS_PORT",
        "GATEWAY_PORT",
    ):
        env[f"HM_{name}"] = str(free_port())
    env["HM_DATA_DIR"] = str(data_dir)
    return env


async def test_first_up_prints_a_token_that_connects(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    env = fresh_env(data_dir)
    up = UpProcess(env)
    try:
        await asyncio.to_thread(up.wait_for, r"hypermnesia is up", 420)
        line = next((x for x in up.lines if CLAUDE_LINE.search(x)), None)
        assert line is not None, up.output()
        match = CLAUDE_LINE.search(line)
        assert match is not None
        url, token = match["url"], match["token"]
        assert url == f"http://127.0.0.1:{env['HM_GATEWAY_PORT']}/mcp"
        snippet = json.loads(next(x for x in up.lines if '"mcpServers"' in x))
        server = snippet["mcpServers"]["hypermnesia"]
        # The snippet for a project's .mcp.json (which may be committed) names the token, never holds it.
        assert server["url"] == url and server["headers"] == {"Authorization": "Bearer ${HM_TOKEN}"}
        assert token not in json.dumps(snippet)

        kept = data_dir / "local-token"
        assert kept.read_text().strip() == token
        assert stat.S_IMODE(kept.stat().st_mode) == 0o600

        headers = {"Authorization": f"Bearer {token}"}
        listed = await asyncio.to_thread(inspector.http, url, headers, "tools/list")
        names = {tool["name"] for tool in listed["tools"]}
        assert {"memory_save", "memory_search"} <= names
        saved = inspector.result_json(
            await asyncio.to_thread(
                inspector.http,
                url,
                headers,
                "tools/call",
                "memory_save",
                content="The first run's marker is the word marram, a dune grass",
                description="first-run marker",
            )
        )
        assert saved["created"] is True
        found = inspector.result_json(
            await asyncio.to_thread(
                inspector.http,
                url,
                headers,
                "tools/call",
                "memory_search",
                query="which dune grass is the marker?",
            )
        )
        assert found and found[0]["id"] == saved["memory"]["id"], found
        assert up.stop() == 0

        # A second start: where the token is, never the token itself; the token still works.
        again = UpProcess(env)
        up = again
        await asyncio.to_thread(up.wait_for, r"hypermnesia is up", 300)
        assert not any(token in x for x in up.lines), up.output()
        assert any(str(kept) in x and "token" in x for x in up.lines), up.output()
        listed = await asyncio.to_thread(inspector.http, url, headers, "tools/list")
        assert {"memory_save", "memory_search"} <= {tool["name"] for tool in listed["tools"]}
    finally:
        up.stop()
