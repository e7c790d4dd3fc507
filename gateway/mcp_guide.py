"""`memory_usage_guide`: CLAUDE.md guidance generated from this server's live settings
and registered tools, so it never drifts from how the server actually behaves."""

from __future__ import annotations

import json
from typing import Any

from gateway.auth import Session
from gateway.backends import Backends
from gateway.fields import Request, field
from gateway.tool_profiles import DEFAULT_TOOLS, FULL, FULL_ONLY_PARAMETERS
from hypermnesia.addresses import gateway_url
from hypermnesia.errors import InvalidArgument
from hypermnesia.scopes import CONNECT_SERVER, PROJECT_HEADER, PROJECT_PREFIX
from hypermnesia.settings import GatewaySettings

__all__ = ["SECTIONS", "Guide", "GuideRequest"]

SECTIONS = ("claude_md", "setup", "session")


def _claude_md(tools: list[str], live: dict[str, str]) -> str:
    """The guidance, quoting the services' own settings (asked of them, not read from this process)."""

    def setting(name: str) -> str:
        return live.get(name, f"(unknown: the service did not report {name})")

    return "\n".join(
        [
            "## Memory (hypermnesia)",
            "",
            "You have a long-term memory over MCP. Use it; do not keep durable facts only in this conversation.",
            "",
            "- At the start of a task call `memory_context` (pass `path` before editing a file: it returns the rules "
            "that apply to that file).",
            "- Before answering about the user, the project or past decisions, call `memory_search(query)`. Results "
            f"below cosine {setting('HM_SEARCH_MIN_SIMILARITY')}, or more than {setting('HM_SEARCH_RELATIVE_CUTOFF')} "
            "below the best hit, are dropped unless they contain every query word.",
            "- When you learn a durable fact, preference or decision, call `memory_save(content, description)`: "
            "`description` is a one-line summary. A restatement of a near-duplicate (combined similarity >= "
            f"{setting('HM_DEDUPE_THRESHOLD')} and content agreement >= {setting('HM_DEDUPE_CONTENT_THRESHOLD')}) updates "
            "the existing memory instead (`created: false`); a near-duplicate that differs in a number, date, "
            "identifier, name or negation is kept and listed under `similar` with what differs: supersede it when "
            "your new fact replaces it.",
            "- When a fact changes, supersede it rather than saving a contradiction; the old version stays in its lineage.",
            f"- `memory_forget` archives memories not recalled for {setting('HM_FORGET_AFTER_DAYS')} days with "
            f"importance <= {setting('HM_FORGET_IMPORTANCE_FLOOR')}; it is a dry run unless `apply: true`; `memory_restore` undoes it.",
            "- `memory_list` is a cheap index (descriptions, no bodies); `memory_get` fetches one memory.",
            "",
            _profiles(tools),
        ]
    )


def _profiles(tools: list[str]) -> str:
    """Which tools each profile lists (gateway.tool_profiles) and how a session gets the full one."""
    default = sorted(t for t in tools if t in DEFAULT_TOOLS)
    more = sorted(t for t in tools if t not in DEFAULT_TOOLS)
    names = ", ".join(f"`{t}`" for t in default)
    text = f"Tools on this server, default profile: {names}."
    if not more:
        return text
    advanced = ", ".join(
        f"`{tool}({', '.join(sorted(p))})`" for tool, p in sorted(FULL_ONLY_PARAMETERS.items())
    )
    return (
        f"{text} The {FULL} profile adds {', '.join(f'`{t}`' for t in more)} and the advanced parameters "
        f"{advanced}: set HM_MCP_TOOLS={FULL} on the server, or send the header `X-Hypermnesia-Tools: {FULL}` "
        "for one session, and reconnect (clients keep the tool list they connected with)."
    )


def _setup(gateway: GatewaySettings, session: Session) -> str:
    """How to connect, as Markdown an agent can write into a document (seed 001's shape), with this
    session's project where it has one: the project of a folder is what `hypermnesia connect`
    records in its .mcp.json, and what its hooks and imports use."""
    url = f"{gateway_url(gateway.host, gateway.gateway_port)}/mcp"
    if session.project_source == "default":
        project = "<the folder's project: `hypermnesia connect` writes it>"
    else:
        project = session.project_scope.removeprefix(PROJECT_PREFIX)
    mcp_json = {
        "mcpServers": {
            CONNECT_SERVER: {
                "type": "http",
                "url": url,
                "headers": {"Authorization": "Bearer ${HM_TOKEN}", PROJECT_HEADER: project},
            }
        }
    }
    claude_desktop = {
        "mcpServers": {
            "hypermnesia": {
                "command": "npx",
                "args": ["mcp-remote", url, "--header", "Authorization: Bearer <token>"],
            }
        }
    }
    # For clients that only spawn servers: `hypermnesia mcp` speaks MCP on stdio and calls the
    # same services as this gateway (token: HM_TOKEN, else the first-run token file).
    stdio = {
        "mcpServers": {
            "hypermnesia": {
                "command": "hypermnesia",
                "args": ["mcp", "--project", project],
                "env": {
                    "HM_TOKEN": "<token>",
                    "HM_RETRIEVAL_ADDRESS": gateway.retrieval_address,
                    "HM_CURATION_ADDRESS": gateway.curation_address,
                },
            }
        }
    }
    return "\n".join(
        [
            "### Connect a project folder (Claude Code)",
            "",
            "Run `hypermnesia connect` in the project's folder: it writes the hooks and the `.mcp.json` entry "
            "below with the folder's project (one project shared by the hooks, MCP, `map load` and `import`), "
            "and the token as ${HM_TOKEN}, which Claude Code expands from its environment.",
            "",
            "### .mcp.json",
            "",
            _json_block(mcp_json),
            "",
            "### Claude Code, by hand",
            "",
            "```bash",
            f'claude mcp add --transport http hypermnesia {url} --header "Authorization: Bearer <token>" '
            f'--header "{PROJECT_HEADER}: {project}"',
            "```",
            "",
            "### Claude Desktop (bridged with mcp-remote)",
            "",
            _json_block(claude_desktop),
            "",
            "### Clients that start servers as subprocesses (stdio)",
            "",
            _json_block(stdio),
            "",
            "Replace `<token>` with your token; this guide never prints one.",
        ]
    )


def _json_block(value: dict[str, Any]) -> str:
    return "```json\n" + json.dumps(value, indent=2) + "\n```"


def _session(session: Session) -> dict[str, Any]:
    """What this session resolved to, under seed 001's keys, plus where its project came from."""
    isolated = session.project_source != "default"
    return {
        "principal": session.principal.id,
        "project_scope": session.project_scope,
        "project_source": session.project_source,
        "scopes_you_can_read": session.readable_scopes(),
        "saves_default_to": session.project_scope,
        "workspace_roots_detected": session.project_source == "roots",
        "project_isolation": "active" if isolated else "NOT ACTIVE: see warnings",
    }


class GuideRequest(Request):
    section: str | None = field("Only this section; default all.", None, enum=SECTIONS)


class Guide:
    """Setup snippets and a ready-to-write CLAUDE.md section generated from this server's live
    settings and tools; `warnings` lists setup problems the server can observe."""

    def __init__(self, gateway: GatewaySettings, tool_names: list[str]) -> None:
        self.gateway = gateway
        self.tool_names = tool_names

    async def __call__(self, backends: Backends, session: Session, request: GuideRequest) -> dict[str, Any]:
        section = request.section
        if section is not None and section not in SECTIONS:
            raise InvalidArgument(f"unknown section {section!r}; use one of {', '.join(SECTIONS)}")
        settings = await backends.live_settings()
        warnings = []
        if session.project_source == "default":
            warnings.append(
                "No X-Hypermnesia-Project header and no workspace root: this session uses the shared 'default' "
                "scope, so projects are NOT isolated. Run `hypermnesia connect` in each project's folder: it "
                "writes the X-Hypermnesia-Project header its hooks use too (see setup)."
            )
        out: dict[str, Any] = {
            "claude_md": _claude_md(self.tool_names, settings),
            "setup": _setup(self.gateway, session),
            "session": _session(session),
        }
        if section is not None:
            out = {section: out[section]}
        out["warnings"] = warnings
        return out
