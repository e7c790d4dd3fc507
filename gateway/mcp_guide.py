"""`memory_usage_guide`: CLAUDE.md guidance generated from this server's live settings
and registered tools, so it never drifts from how the server actually behaves."""

from __future__ import annotations

from typing import Any

from gateway.auth import Session
from gateway.backends import Backends
from gateway.fields import Request, field
from hypermnesia.errors import InvalidArgument
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
            "Tools on this server: " + ", ".join(f"`{t}`" for t in sorted(tools)) + ".",
        ]
    )


def _setup(gateway: GatewaySettings) -> dict[str, Any]:
    url = f"http://{gateway.host}:{gateway.gateway_port}/mcp"
    return {
        "claude_code": f'claude mcp add --transport http hypermnesia {url} --header "Authorization: Bearer <token>" '
        '--header "X-Hypermnesia-Project: <repo-slug>"',
        "mcp_json": {
            "mcpServers": {
                "hypermnesia": {
                    "type": "http",
                    "url": url,
                    "headers": {"Authorization": "Bearer <token>", "X-Hypermnesia-Project": "<repo-slug>"},
                }
            }
        },
        "claude_desktop": {
            "mcpServers": {
                "hypermnesia": {
                    "command": "npx",
                    "args": ["mcp-remote", url, "--header", "Authorization: Bearer <token>"],
                }
            }
        },
        # For clients that only spawn servers: `hypermnesia mcp` speaks MCP on stdio and calls the
        # same services as this gateway.
        "stdio": {
            "mcpServers": {
                "hypermnesia": {
                    "command": "hypermnesia",
                    "args": ["mcp", "--project", "<repo-slug>"],
                    "env": {
                        "HM_TOKEN": "<token>",
                        "HM_RETRIEVAL_ADDRESS": gateway.retrieval_address,
                        "HM_CURATION_ADDRESS": gateway.curation_address,
                    },
                }
            }
        },
    }


class GuideRequest(Request):
    section: str | None = field(f"Only this section: one of {', '.join(SECTIONS)}; default all.", None)


class Guide:
    """Setup snippets and a ready-to-write CLAUDE.md section generated from this server's live
    settings and tools; `warnings` lists setup problems the server can observe."""

    def __init__(self, gateway: GatewaySettings, tool_names: list[str]) -> None:
        self.gateway = gateway
        self.tool_names = tool_names

    async def __call__(self, backends: Backends, session: Session, request: GuideRequest) -> dict[str, Any]:
        section = request.section
        if section is not None and section not in SECTIONS:
            raise InvalidArgument(f"section must be one of {', '.join(SECTIONS)}")
        settings = await backends.live_settings()
        warnings = []
        if session.project_source == "default":
            warnings.append(
                "No X-Hypermnesia-Project header and no workspace root: this session uses the shared 'default' "
                "scope, so projects are "
                "not isolated. Add the header per project (see setup.mcp_json)."
            )
        out: dict[str, Any] = {
            "claude_md": _claude_md(self.tool_names, settings),
            "setup": _setup(self.gateway),
            "session": {
                "principal": session.principal.id,
                "project_scope": session.project_scope,
                "project_source": session.project_source,
                "readable_scopes": session.readable_scopes(),
            },
        }
        if section is not None:
            out = {section: out[section]}
        out["warnings"] = warnings
        return out
