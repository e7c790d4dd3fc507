"""The first hour (issue 28): `hypermnesia up` on other ports as a user starts it, `hypermnesia
connect` in two folders, the MCP entries it wrote used by the official MCP client as Claude Code
would, the hooks it wrote run as Claude Code runs them (a shell, `env -i`-like environment, cwd =
the folder, CLAUDE_PROJECT_DIR, the hook JSON on stdin), one project identity per folder, and the
commands reaching the stack that `up` started from the same environment."""

from __future__ import annotations

import getpass
import json
import os
import re
import shlex
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import httpx2
import mcp_types
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from pydantic import FileUrl

from hypermnesia.scopes import derived_project_name, folder_project, project_scope_for_root
from tests.conftest import free_port
from tests.helpers import UpProcess, tool_json

pytestmark = pytest.mark.timeout(900)

# The console script as a user calls it (make run installs it into the venv's bin).
EXE = str(Path(sys.executable).parent / "hypermnesia")
PORT_VARIABLES = (
    "HM_EMBEDDER_PORT",
    "HM_EMBEDDER_METRICS_PORT",
    "HM_RETRIEVAL_PORT",
    "HM_RETRIEVAL_METRICS_PORT",
    "HM_CURATION_PORT",
    "HM_CURATION_METRICS_PORT",
    "HM_GATEWAY_PORT",
)
FACT_A = "The alpha shop deploys to the Frankfurt region every Tuesday at noon"
FACT_B = "The beta shop deploys to the Oslo region every Thursday at dawn"
PROMPT = "Which region does the shop deploy to, and on which day?"
MAP = """\
components:
  - slug: checkout
    responsibility: takes the customer's money
    globs: ["src/checkout/**"]
    constraints:
      - {id: idempotent, text: every payment call carries an idempotency key, severity: must}
"""


@dataclass
class Started:
    """`hypermnesia up` on non-default ports with a fresh data dir, and the user's environment."""

    up: UpProcess
    home: Path
    data_dir: Path
    ports: dict[str, str]
    user: dict[str, str]  # the user's environment without any HM_* variable
    token: str

    @property
    def env(self) -> dict[str, str]:
        """The environment `up` was started from."""
        return {**self.user, **self.ports, "HM_DATA_DIR": str(self.data_dir)}

    @property
    def gateway(self) -> str:
        return f"http://127.0.0.1:{self.ports['HM_GATEWAY_PORT']}"


@pytest.fixture(scope="module")
def started(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Started]:
    root = tmp_path_factory.mktemp("first-hour")
    home = root / "home"
    home.mkdir()
    user = {
        k: v for k, v in os.environ.items() if not k.startswith(("HM_", "CLAUDE_", "XDG_")) and k != "HOME"
    }
    user["HOME"] = str(home)
    ports = {name: str(free_port()) for name in PORT_VARIABLES}
    data_dir = root / "data"
    up = UpProcess({**user, **ports, "HM_DATA_DIR": str(data_dir)}, command=[EXE, "up"])
    try:
        up.wait_for(r"hypermnesia is up", 600)
        token = (data_dir / "local-token").read_text().strip()  # the first run made it
        yield Started(up, home, data_dir, ports, user, token)
    finally:
        assert up.stop() == 0, up.output()


def hm(*args: str, env: dict[str, str], cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([EXE, *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=300)


_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


def expand(text: str, env: dict[str, str]) -> str:
    """`${VAR}` and `${VAR:-default}` as Claude Code expands them in .mcp.json."""

    def value(match: re.Match[str]) -> str:
        name, default = match.group(1), match.group(2)
        if name in env:
            return env[name]
        assert default is not None, f"Claude Code refuses the entry: {name} is not set"
        return default

    return _VARIABLE.sub(value, text)


@asynccontextmanager
async def mcp_from_entry(folder: Path, token: str) -> AsyncIterator[Client]:
    """The official MCP client connected through the folder's .mcp.json entry, as Claude Code would:
    its URL and headers with the variables expanded from Claude Code's environment; no roots."""
    entry = json.loads((folder / ".mcp.json").read_text())["mcpServers"]["hypermnesia"]
    assert entry["type"] == "http"
    claude_env = {"HM_TOKEN": token}
    headers = {name: expand(value, claude_env) for name, value in entry["headers"].items()}
    async with httpx2.AsyncClient(headers=headers, timeout=60) as http:
        async with Client(
            streamable_http_client(expand(entry["url"], claude_env), http_client=http)
        ) as client:
            yield client


@dataclass
class HookRun:
    code: int
    out: str
    err: str
    seconds: float
    timeout_s: float  # what connect wrote as the hook's timeout

    @property
    def context(self) -> str:
        return (
            str(json.loads(self.out)["hookSpecificOutput"]["additionalContext"]) if self.out.strip() else ""
        )


def run_installed_hook(
    started: Started,
    folder: Path,
    event: str,
    payload: dict[str, Any],
    token: str,
    *,
    exact: bool = False,
    budget_s: float | None = None,
) -> HookRun:
    """The hook command connect wrote for `event`, run as Claude Code runs it: through a shell under
    `env -i HOME=... PATH=/usr/bin:/bin HM_TOKEN=...`, in the folder, the hook JSON on stdin. Unless
    `exact`, also CLAUDE_PROJECT_DIR (Claude Code sets it) and HM_HOOK_BUDGET_S=30 (the setting for
    a gateway that answers slowly: these runs check what the hook shows, not how fast); `budget_s`
    sets HM_HOOK_BUDGET_S on an exact run."""
    settings = json.loads((folder / ".claude" / "settings.local.json").read_text())
    [hook] = [hook for group in settings["hooks"][event] for hook in group["hooks"]]
    variables = [f"HOME={started.home}", "PATH=/usr/bin:/bin", f"HM_TOKEN={token}"]
    if not exact:
        variables += [f"CLAUDE_PROJECT_DIR={folder}"]
        budget_s = budget_s or 30
    if budget_s:
        variables.append(f"HM_HOOK_BUDGET_S={budget_s:g}")
    stdin = {
        "session_id": "0f1e2d3c-first-hour",
        "transcript_path": str(started.home / ".claude" / "projects" / "x" / "0f1e2d3c.jsonl"),
        "cwd": str(folder),
        "permission_mode": "default",
        "hook_event_name": event,
        **payload,
    }
    began = time.monotonic()
    done = subprocess.run(
        ["/usr/bin/env", "-i", *variables, "/bin/sh", "-c", hook["command"]],
        cwd=folder,
        input=json.dumps(stdin),
        capture_output=True,
        text=True,
        timeout=60,
    )
    return HookRun(done.returncode, done.stdout, done.stderr, time.monotonic() - began, hook["timeout"])


# A hook whose budget ran out says the store is unreachable, once, then stays quiet until it answers
# (tooling/hooks.py), and exits 0. On a loaded machine starting the interpreter can take most of the
# 1.5 s, so the prompt is asked again while that is what happened, up to this many times.
ATTEMPTS = 5


def prompt_hook_until_answered(started: Started, folder: Path) -> HookRun:
    """The prompt hook run exactly as the issue says (`env -i HOME PATH HM_TOKEN`, cwd the folder):
    every run exits 0 within the timeout connect wrote. While its budget cut it off (a machine too
    loaded to start Python and answer in its 1.5 s), it runs again, up to ATTEMPTS times; what it
    finally shows is checked by the caller, and a hook that never answers fails the test."""
    for attempt in range(1, ATTEMPTS + 1):
        run = run_installed_hook(
            started, folder, "UserPromptSubmit", {"prompt": PROMPT}, started.token, exact=True
        )
        assert run.code == 0, run.err
        assert run.seconds < run.timeout_s, run.seconds
        print(f"the prompt hook answered in {run.seconds:.2f} s (attempt {attempt})")
        if run.context and not run.context.startswith("hypermnesia is unreachable"):
            return run
    raise AssertionError(f"the prompt hook was cut off by its budget {ATTEMPTS} times: {run.context!r}")


def folders(started: Started) -> tuple[Path, Path]:
    work = started.home / "work"
    a, b = work / "alpha shop", work / "beta shop"
    for folder in (a, b):
        folder.mkdir(parents=True, exist_ok=True)
    return a, b


async def test_two_connected_folders_keep_their_memories_and_the_hooks_see_their_own(
    started: Started,
) -> None:
    a, b = folders(started)
    with_token = {**started.env, "HM_TOKEN": started.token}
    for folder in (a, b):
        done = hm("connect", str(folder), env=with_token)
        assert done.returncode == 0, done.stderr
        assert "connected" in done.stdout and started.gateway in done.stdout, done.stdout
    # The token is referenced, never written into the folder.
    for folder in (a, b):
        for written in (folder / ".mcp.json", folder / ".claude" / "settings.local.json"):
            assert started.token not in written.read_text()
    project_a, project_b = folder_project(str(a)).name, folder_project(str(b)).name
    assert project_a != project_b

    # Each folder saves a fact through its own MCP entry.
    saved = {}
    for folder, fact in ((a, FACT_A), (b, FACT_B)):
        async with mcp_from_entry(folder, started.token) as client:
            saved[folder] = tool_json(
                await client.call_tool("memory_save", {"content": fact, "description": "where we deploy"})
            )["memory"]
    assert saved[a]["scope"] == f"project:{project_a}" and saved[b]["scope"] == f"project:{project_b}"

    # The second folder's search finds nothing of the first's.
    async with mcp_from_entry(b, started.token) as client:
        found = tool_json(await client.call_tool("memory_search", {"query": "Frankfurt Tuesday deploy"}))
    assert saved[a]["id"] not in {hit["id"] for hit in found}
    assert all("Frankfurt" not in hit["content"] for hit in found)
    assert saved[b]["id"] in {hit["id"] for hit in found}  # the search ran, on b's own memory

    # The prompt hook connect installed, run in the first folder as the issue says. It keeps to its
    # own budget (1.5 s; tests/test_hooks.py holds it to that against a store that never answers).
    run = prompt_hook_until_answered(started, a)
    assert FACT_A in run.context, (run.out, run.err)
    assert FACT_B not in run.context

    # `map load` with only the HM_*_PORT variables set lands in the started stack, as the map of
    # the folder's project: the gateway serves it, and the folder's hooks show it.
    (a / "hypermnesia-map.yaml").write_text(MAP)
    only_ports = {**started.user, **started.ports}
    done = hm("map", "load", "hypermnesia-map.yaml", env=only_ports, cwd=a)
    assert done.returncode == 0, done.stderr
    assert f"repo {project_a!r}" in done.stdout
    headers = {"Authorization": f"Bearer {started.token}"}
    served = httpx.get(f"{started.gateway}/map/{project_a}", headers=headers, timeout=30)
    assert served.status_code == 200 and [c["slug"] for c in served.json()["components"]] == ["checkout"]
    start = run_installed_hook(started, a, "SessionStart", {"source": "startup"}, started.token)
    assert start.code == 0 and f"Project map of {project_a}" in start.context, (start.out, start.err)
    edit = run_installed_hook(
        started,
        a,
        "PreToolUse",
        {"tool_name": "Edit", "tool_input": {"file_path": str(a / "src" / "checkout" / "pay.py")}},
        started.token,
    )
    assert edit.code == 0 and "every payment call carries an idempotency key" in edit.context, edit.out
    other = run_installed_hook(started, b, "SessionStart", {"source": "startup"}, started.token)
    assert other.code == 0 and "Project map of" not in other.context


async def test_an_mcp_root_of_the_folder_names_the_same_project(started: Started) -> None:
    """A client that advertises the folder as its workspace root (no header) lands in the project
    connect recorded there, which the hooks use too."""
    a, _ = folders(started)
    assert (a / ".mcp.json").exists()  # connected by the test above

    async def roots(context: Any) -> mcp_types.ListRootsResult:
        return mcp_types.ListRootsResult(roots=[mcp_types.Root(uri=FileUrl(a.as_uri()))])

    headers = {"Authorization": f"Bearer {started.token}"}
    async with httpx2.AsyncClient(headers=headers, timeout=60) as http:
        transport = streamable_http_client(f"{started.gateway}/mcp", http_client=http)
        async with Client(transport, list_roots_callback=roots) as client:
            guide = tool_json(await client.call_tool("memory_usage_guide", {"section": "session"}))
    assert guide["session"]["project_source"] == "roots"
    assert guide["session"]["project_scope"] == f"project:{folder_project(str(a)).name}"
    assert guide["session"]["project_scope"] == project_scope_for_root(a.as_uri())


async def test_stdio_mcp_uses_the_first_run_token_and_claude_project_dir(started: Started) -> None:
    a, _ = folders(started)
    assert (a / ".mcp.json").exists()
    env = {**started.env, "CLAUDE_PROJECT_DIR": str(a)}  # no HM_TOKEN
    assert "HM_TOKEN" not in env
    server = StdioServerParameters(command=EXE, args=["mcp"], env=env, cwd=str(a))
    async with Client(stdio_client(server)) as client:
        guide = tool_json(await client.call_tool("memory_usage_guide", {"section": "session"}))
        found = tool_json(await client.call_tool("memory_search", {"query": "Frankfurt deploy day"}))
    assert guide["session"]["principal"] == getpass.getuser()  # the first-run token's principal
    assert guide["session"]["project_scope"] == f"project:{folder_project(str(a)).name}"
    assert any(hit["content"] == FACT_A for hit in found)


def test_commands_fail_naming_an_address_nothing_listens_on(started: Started, tmp_path: Path) -> None:
    (tmp_path / "map.yaml").write_text(MAP)
    dead = str(free_port())
    began = time.monotonic()
    done = hm("map", "load", "map.yaml", env={**started.user, "HM_CURATION_PORT": dead}, cwd=tmp_path)
    assert done.returncode == 3, done.stderr
    assert f"cannot reach curation at 127.0.0.1:{dead}" in done.stderr
    assert "hypermnesia up" in done.stderr and "Nothing was loaded" in done.stderr
    print(f"map load against a closed port failed in {time.monotonic() - began:.1f} s")
    done = hm("proposals", "list", env={**started.user, "HM_CURATION_PORT": dead})
    assert done.returncode == 3 and f"cannot reach curation at 127.0.0.1:{dead}" in done.stderr
    # `hypermnesia mcp` checks its token through curation before serving: it says where it looked.
    stdio_env = {**started.user, **started.ports, "HM_CURATION_PORT": dead, "HM_TOKEN": started.token}
    done = subprocess.run(
        [EXE, "mcp"], env=stdio_env, input="", capture_output=True, text=True, timeout=300, cwd=tmp_path
    )
    assert done.returncode == 1, done.stderr
    assert "unreachable" in done.stderr and f"curation at 127.0.0.1:{dead}" in done.stderr, done.stderr


def test_commands_find_the_stack_that_up_recorded_in_the_data_dir(started: Started) -> None:
    """With HM_DATA_DIR alone (no port), a command reaches the `up` running on that data dir."""
    record = json.loads((started.data_dir / "stack.json").read_text())
    assert record["pid"] == started.up.proc.pid
    assert record["addresses"]["curation"] == f"127.0.0.1:{started.ports['HM_CURATION_PORT']}"
    done = hm("proposals", "list", "--json", env={**started.user, "HM_DATA_DIR": str(started.data_dir)})
    assert done.returncode == 0, done.stderr
    assert "proposals" in json.loads(done.stdout)


def test_a_second_up_on_the_data_dir_names_the_running_stack(started: Started) -> None:
    done = hm("up", env=started.env)
    assert done.returncode != 0
    assert "already running" in done.stderr and f"pid {started.up.proc.pid}" in done.stderr
    assert started.gateway in done.stderr and "taken by another program" not in done.stderr
    assert started.up.proc.poll() is None  # the running one is untouched


def test_up_says_how_to_call_hypermnesia_and_lists_its_variables(started: Started) -> None:
    assert any(line.startswith("command") and EXE in line for line in started.up.lines), started.up.output()
    done = hm("up", "--help", env=started.user)
    assert done.returncode == 0
    for variable in ("HM_DATA_DIR", "HM_GATEWAY_PORT", "HM_CURATION_PORT", "HM_DATABASE_URL", "HM_HOST"):
        assert variable in done.stdout


def test_hook_state_and_checkpoint_key_live_in_the_data_dir(started: Started, tmp_path: Path) -> None:
    a, _ = folders(started)
    state = started.data_dir / "hook-state.json"
    refused = run_installed_hook(started, a, "UserPromptSubmit", {"prompt": PROMPT}, "not-a-token")
    assert refused.code == 0 and "refused the token" in refused.context
    assert json.loads(state.read_text())["refused"]
    fine = run_installed_hook(started, a, "UserPromptSubmit", {"prompt": PROMPT}, started.token)
    assert fine.code == 0 and json.loads(state.read_text())["refused"] is None

    done = hm("checkpoint", "--out", str(tmp_path / "cp.json"), env=started.env)
    assert done.returncode == 0, done.stderr
    assert (started.data_dir / "checkpoint-key.pem").exists()
    assert str(started.data_dir / "checkpoint-key.pem") in done.stderr
    # Nothing of ours outside the data dir.
    for elsewhere in (".config/hypermnesia", ".cache/hypermnesia", ".local/share/hypermnesia"):
        assert not (started.home / elsewhere).exists(), elsewhere


# --- connect's edits: dry run, undo, other entries kept ----------------------------------------------

THEIR_MCP = {
    "mcpServers": {
        "github": {
            "type": "http",
            "url": "https://api.githubcopilot.com/mcp/",
            "headers": {"Authorization": "Bearer ${GITHUB_PAT}"},
        }
    }
}
THEIR_SETTINGS = {
    "permissions": {"allow": ["Bash(make test)"]},
    "hooks": {
        "PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": "~/bin/check-bash"}]}]
    },
}


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def users_folder(root: Path) -> Path:
    folder = root / "their project"
    (folder / ".claude").mkdir(parents=True)
    (folder / ".mcp.json").write_text(json.dumps(THEIR_MCP))
    (folder / ".claude" / "settings.local.json").write_text(json.dumps(THEIR_SETTINGS, indent=4))
    return folder


def test_connect_dry_run_shows_the_diff_and_writes_nothing(started: Started, tmp_path: Path) -> None:
    folder = users_folder(tmp_path)
    before = snapshot(folder)
    records = started.data_dir / "connections.json"
    records_before = records.read_bytes()
    done = hm("connect", str(folder), "--dry-run", env=started.env)
    assert done.returncode == 0, done.stderr
    added = [line for line in done.stdout.splitlines() if line.startswith("+") and not line.startswith("+++")]
    assert f"--- {folder / '.mcp.json'} (now)" in done.stdout
    assert f"--- {folder / '.claude' / 'settings.local.json'} (now)" in done.stdout
    assert any('"X-Hypermnesia-Project"' in line for line in added)
    assert any("hook prompt --gateway" in line for line in added)
    assert not any(line.startswith("-") and "check-bash" in line for line in done.stdout.splitlines())
    assert "nothing was written" in done.stdout
    assert snapshot(folder) == before
    assert records.read_bytes() == records_before


def test_connect_undo_removes_exactly_what_connect_added(started: Started, tmp_path: Path) -> None:
    folder = users_folder(tmp_path)
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    for target in (folder, fresh):
        done = hm("connect", str(target), env=started.env)
        assert done.returncode == 0, done.stderr
    mcp = json.loads((folder / ".mcp.json").read_text())
    assert set(mcp["mcpServers"]) == {"github", "hypermnesia"}
    assert mcp["mcpServers"]["github"] == THEIR_MCP["mcpServers"]["github"]
    settings = json.loads((folder / ".claude" / "settings.local.json").read_text())
    assert settings["permissions"] == THEIR_SETTINGS["permissions"]
    assert settings["hooks"]["PreToolUse"][0] == THEIR_SETTINGS["hooks"]["PreToolUse"][0]
    assert len(settings["hooks"]["PreToolUse"]) == 2

    again = hm("connect", str(folder), env=started.env)  # idempotent
    assert again.returncode == 0 and "nothing to change" in again.stdout

    for target in (folder, fresh):
        done = hm("connect", str(target), "--undo", env=started.env)
        assert done.returncode == 0, done.stderr
    assert json.loads((folder / ".mcp.json").read_text()) == THEIR_MCP
    assert json.loads((folder / ".claude" / "settings.local.json").read_text()) == THEIR_SETTINGS
    assert sorted(p.name for p in fresh.iterdir()) == []  # the files and the .claude folder it made
    records = json.loads((started.data_dir / "connections.json").read_text())
    assert str(folder.resolve()) not in records["folders"] and str(fresh.resolve()) not in records["folders"]
    nothing = hm("connect", str(fresh), "--undo", env=started.env)
    assert nothing.returncode == 1 and "records no connect" in nothing.stderr


def test_connect_refuses_to_clobber_a_different_entry_and_undo_puts_it_back(
    started: Started, tmp_path: Path
) -> None:
    folder = tmp_path / "shared"
    folder.mkdir()
    theirs = {
        "mcpServers": {"hypermnesia": {"command": "hypermnesia", "args": ["mcp", "--project", "acme-shop"]}}
    }
    (folder / ".mcp.json").write_text(json.dumps(theirs))
    before = snapshot(folder)
    refused = hm("connect", str(folder), env=started.env)
    assert refused.returncode == 2 and "--force" in refused.stderr and "Nothing was changed" in refused.stderr
    assert snapshot(folder) == before
    forced = hm("connect", str(folder), "--force", env=started.env)
    assert forced.returncode == 0, forced.stderr
    entry = json.loads((folder / ".mcp.json").read_text())["mcpServers"]["hypermnesia"]
    # The project the file recorded is kept: the hooks and the team's other machines agree on it.
    assert entry["headers"]["X-Hypermnesia-Project"] == "acme-shop"
    assert folder_project(str(folder)).name == "acme-shop"
    done = hm("connect", str(folder), "--undo", env=started.env)
    assert done.returncode == 0, done.stderr
    assert json.loads((folder / ".mcp.json").read_text()) == theirs
    assert not (folder / ".claude").exists()


def test_connect_user_writes_the_users_config_for_that_folder_only(started: Started, tmp_path: Path) -> None:
    folder = tmp_path / "private"
    folder.mkdir()
    home = tmp_path / "home"
    home.mkdir()
    claude_json = home / ".claude.json"
    existing = {"numStartups": 3, "projects": {"/elsewhere": {"mcpServers": {}, "history": ["x"]}}}
    claude_json.write_text(json.dumps(existing))
    env = {**started.env, "HOME": str(home)}
    done = hm("connect", str(folder), "--user", env=env)
    assert done.returncode == 0, done.stderr
    config = json.loads(claude_json.read_text())
    entry = config["projects"][str(folder.resolve())]["mcpServers"]["hypermnesia"]
    assert entry["headers"]["X-Hypermnesia-Project"] == derived_project_name(str(folder.resolve()))
    assert config["projects"]["/elsewhere"] == existing["projects"]["/elsewhere"]
    hooks = json.loads((home / ".claude" / "settings.json").read_text())["hooks"]
    [prompt] = [h["command"] for g in hooks["UserPromptSubmit"] for h in g["hooks"]]
    assert shlex.split(prompt)[:3] == [EXE, "hook", "prompt"]
    assert sorted(p.name for p in folder.iterdir()) == []  # nothing in the folder
    refused = hm("connect", str(folder), "--user", "--project", "x", env=env)
    assert refused.returncode == 2 and "--project" in refused.stderr

    # The user's hooks serve every folder connected with --user: undoing one keeps them for the other.
    second = tmp_path / "second"
    second.mkdir()
    done = hm("connect", str(second), "--user", env=env)
    assert done.returncode == 0, done.stderr
    done = hm("connect", str(folder), "--user", "--undo", env=env)
    assert done.returncode == 0, done.stderr
    assert "stay" in done.stdout and str(second.resolve()) in done.stdout, done.stdout
    assert str(folder.resolve()) not in json.loads(claude_json.read_text())["projects"]
    hooks = json.loads((home / ".claude" / "settings.json").read_text())["hooks"]
    assert [h["command"] for g in hooks["UserPromptSubmit"] for h in g["hooks"]] == [prompt]
    done = hm("connect", str(second), "--user", "--undo", env=env)
    assert done.returncode == 0, done.stderr
    assert json.loads(claude_json.read_text()) == existing
    assert not (home / ".claude").exists()


# --- the rule, on folders ------------------------------------------------------------------------


def test_a_folder_project_is_recorded_in_the_nearest_mcp_json_up_to_the_git_root(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    deep = repo / "src" / "pkg"
    deep.mkdir(parents=True)
    # Nothing recorded: the name derived from the folder's own path (what earlier stores used).
    assert folder_project(str(deep)).name == derived_project_name(str(deep))
    assert folder_project(str(deep)).recorded_in is None
    recorded = {
        "mcpServers": {
            "hypermnesia": {"type": "http", "url": "u", "headers": {"x-hypermnesia-project": "Acme Shop"}}
        }
    }
    (repo / ".mcp.json").write_text(json.dumps(recorded))
    # Outside a git work tree a parent's .mcp.json claims nothing; inside one, up to its root.
    assert folder_project(str(deep)).name == derived_project_name(str(deep))
    assert folder_project(str(repo)).name == "acme-shop"
    (repo / ".git").mkdir()
    found = folder_project(str(deep))
    assert (found.name, found.root, found.recorded_in) == ("acme-shop", str(repo), str(repo / ".mcp.json"))
    assert project_scope_for_root(deep.as_uri()) == "project:acme-shop"
    # A stdio entry records it with --project; a value that needs the environment records nothing.
    (repo / ".mcp.json").write_text(
        json.dumps({"mcpServers": {"m": {"command": "hm", "args": ["mcp", "--project", "p1"]}}})
    )
    assert folder_project(str(deep)).name == "p1"
    (repo / ".mcp.json").write_text(
        json.dumps(
            {"mcpServers": {"m": {"type": "http", "url": "u", "headers": {"X-Hypermnesia-Project": "${P}"}}}}
        )
    )
    assert folder_project(str(deep)).name == derived_project_name(str(deep))
    (repo / ".mcp.json").write_text("{ not json")
    assert folder_project(str(repo)).name == derived_project_name(str(repo))
