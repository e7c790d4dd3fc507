"""`memory_usage_guide` (seed 001): CLAUDE.md guidance generated from this server's live settings
and registered tools, so it never drifts from how the server actually behaves."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError

from hypermnesia.scopes import readable_scopes
from hypermnesia.settings import CurationSettings, GatewaySettings, RetrievalSettings

if TYPE_CHECKING:
    from gateway.mcp_tools import ToolKit

SECTIONS = ("claude_md", "setup", "session")


def _claude_md(tools: list[str], retrieval: RetrievalSettings, curation: CurationSettings) -> str:
    return "\n".join(
        [
            "## Memory (hypermnesia)",
            "",
            "You have a long-term memory over MCP. Use it; do not keep durable facts only in this conversation.",
            "",
            "- At the start of a task call `memory_context` (pass `path` before editing a file: it returns the rules "
            "that apply to that file).",
            "- Before answering about the user, the project or past decisions, call `memory_search(query)`. Results "
            f"below cosine {retrieval.search_min_similarity:g}, or more than {retrieval.search_relative_cutoff:g} below "
            "the best hit, are dropped unless they contain every query word.",
            "- When you learn a durable fact, preference or decision, call `memory_save(content, description)`: "
            "`description` is a one-line summary. A near-duplicate (combined similarity >= "
            f"{curation.dedupe_threshold:g} and content agreement >= {curation.dedupe_content_threshold:g}) updates "
            "the existing memory instead (`created: false`).",
            "- When a fact changes, supersede it rather than saving a contradiction; the old version stays in its lineage.",
            f"- `memory_forget` archives memories not recalled for {curation.forget_after_days:g} days with importance "
            f"<= {curation.forget_importance_floor:g}; it is a dry run unless `apply: true`; `memory_restore` undoes it.",
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


def register(mcp: MCPServer, kit: ToolKit, gateway: GatewaySettings) -> None:
    retrieval = RetrievalSettings()
    curation = CurationSettings()

    @mcp.tool(structured_output=True)
    async def memory_usage_guide(ctx: Context, section: str | None = None) -> dict[str, Any]:
        """Setup snippets and a ready-to-write CLAUDE.md section generated from this server's live
        settings and tools; `warnings` lists setup problems the server can observe."""
        if section is not None and section not in SECTIONS:
            raise ToolError(f"section must be one of {', '.join(SECTIONS)}")
        session = await kit.run(lambda: _session(kit, ctx))
        tools = [t.name for t in await mcp.list_tools()]
        warnings = []
        if session.project_source == "default":
            warnings.append(
                "No X-Hypermnesia-Project header: this session uses the shared 'default' scope, so projects are "
                "not isolated. Add the header per project (see setup.mcp_json)."
            )
        out: dict[str, Any] = {
            "claude_md": _claude_md(tools, retrieval, curation),
            "setup": _setup(gateway),
            "session": {
                "principal": session.principal.id,
                "project_scope": session.project_scope,
                "project_source": session.project_source,
                "readable_scopes": readable_scopes(session.principal, session.project_scope),
            },
        }
        if section is not None:
            out = {section: out[section]}
        out["warnings"] = warnings
        return out


async def _session(kit: ToolKit, ctx: Context) -> Any:
    return kit.session_of(ctx)
