"""`hypermnesia bench tools`: what the MCP tool list costs an agent, per tool profile.

Every session of an agent starts by reading tools/list into its context. This builds the gateway's
MCP server as `hypermnesia up` does (no services needed: listing calls none), lists its tools
through the official MCP SDK client (in memory), and counts the result as compact JSON: bytes, and
tokens by the embedder's tokenizer (all-MiniLM-L6-v2's WordPiece, from the installed model package;
an LLM's tokenizer counts differently, but the ratio between profiles holds)."""

from __future__ import annotations

import argparse
import asyncio
import json
from typing import Any

from mcp import Client
from tokenizers import Tokenizer

from gateway.auth import Authenticator
from gateway.backends import Backends
from gateway.mcp_tools import build_mcp
from gateway.tool_profiles import PROFILES
from hypermnesia.settings import GatewaySettings
from services.embedder.model import default_model_dir

__all__ = ["measure", "register"]


def _tokenizer() -> Tokenizer:
    tokenizer = Tokenizer.from_file(str(default_model_dir() / "tokenizer.json"))
    # The whole text counted: the shipped tokenizer truncates and pads for the model.
    tokenizer.no_truncation()
    tokenizer.no_padding()
    return tokenizer


async def _listed(profile: str) -> dict[str, Any]:
    settings = GatewaySettings(mcp_tools=profile, require_auth=False)  # type: ignore[arg-type]
    backends = Backends(settings.retrieval_address, settings.curation_address, settings.rpc_timeout_s)
    try:
        server = build_mcp(backends, Authenticator.from_settings(settings, backends.resolve_token), settings)
        async with Client(server) as client:
            listed = await client.list_tools()
    finally:
        await backends.close()
    return listed.model_dump(mode="json", by_alias=True, exclude_none=True)


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def measure() -> dict[str, Any]:
    """Per profile: the tool count, bytes and tokens of the whole list, and of each tool."""
    tokenizer = _tokenizer()

    def cost(text: str) -> dict[str, int]:
        return {
            "bytes": len(text.encode()),
            "tokens": len(tokenizer.encode(text, add_special_tokens=False).ids),
        }

    out: dict[str, Any] = {}
    for profile in PROFILES:
        listed = asyncio.run(_listed(profile))
        out[profile] = {
            "tools": len(listed["tools"]),
            **cost(_compact(listed)),
            "per_tool": {t["name"]: cost(_compact(t)) for t in listed["tools"]},
        }
    return out


def format_table(result: dict[str, Any], per_tool: bool) -> str:
    lines = [
        "tools/list as compact JSON, tokens by the embedder's tokenizer (all-MiniLM-L6-v2 WordPiece):",
        "",
        "| profile | tools | bytes | KB | tokens |",
        "|---|---|---|---|---|",
    ]
    for profile, r in result.items():
        lines.append(
            f"| {profile} | {r['tools']} | {r['bytes']:,} | {r['bytes'] / 1024:.1f} | {r['tokens']:,} |"
        )
    if per_tool:
        full = result[PROFILES[-1]]["per_tool"]
        names = sorted(full, key=lambda n: -full[n]["bytes"])
        lines += ["", "| tool | " + " | ".join(f"{p} bytes / tokens" for p in result) + " |"]
        lines.append("|---|" + "---|" * len(result))
        for name in names:
            cells = []
            for r in result.values():
                c = r["per_tool"].get(name)
                cells.append(f"{c['bytes']:,} / {c['tokens']:,}" if c else "not listed")
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def cmd_bench_tools(args: argparse.Namespace) -> None:
    result = measure()
    print(json.dumps(result, indent=2) if args.json else format_table(result, args.per_tool))


def register(sub: argparse._SubParsersAction, bench: argparse._SubParsersAction) -> None:
    """Adds `hypermnesia bench tools` (tooling/cli.py lists this module in COMMAND_MODULES)."""
    b = bench.add_parser("tools", help="bytes and tokens of the MCP tools/list, per tool profile")
    b.add_argument("--per-tool", action="store_true", help="also each tool's share")
    b.add_argument("--json", action="store_true")
    b.set_defaults(func=cmd_bench_tools)
