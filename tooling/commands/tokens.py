"""`hypermnesia token create | list | revoke`: bearer tokens kept in the store (only their sha256),
beside those of HM_AUTH_TOKENS. Like the other admin commands they open the store directly, so
they work with the stack stopped; the gateway sees a revoked token within its cache time
(HM_TOKEN_CACHE_S, 10 s by default; gateway/auth.py)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from hypermnesia.scopes import PROJECT_PREFIX
from hypermnesia.settings import CurationSettings
from hypermnesia.times import iso
from hypermnesia.wording import count
from tooling.console import configure_logging, load_settings, run_async


def _settings() -> CurationSettings:
    settings = load_settings(CurationSettings)
    configure_logging("WARNING" if settings.log_level == "INFO" else settings.log_level)
    return settings


def _row_json(row: Any) -> dict[str, Any]:
    return {
        "id": str(row["id"]),
        "principal": row["principal"],
        "scopes": list(row["scopes"]),
        "description": row["description"],
        "created_at": iso(row["created_at"]),
        "revoked_at": iso(row["revoked_at"]),
        "last_used_at": iso(row["last_used_at"]),
    }


def reach(grants: list[str]) -> str:
    """What a store token reaches, said when it is made: a store token opens only the projects it
    is granted (a HM_AUTH_TOKENS token opens any project its session names; gateway/auth.py)."""
    if "*" in grants:
        return "every scope, every project included"

    def all_projects(grant: str) -> bool:  # 'project:*', or a wider prefix such as 'proj*'
        return grant.endswith("*") and PROJECT_PREFIX.startswith(grant[:-1])

    every = any(all_projects(g) for g in grants)
    projects = [g for g in grants if g.startswith(PROJECT_PREFIX)]
    others = [g for g in grants if g not in projects and not all_projects(g)]
    if every:
        projects_said = "every project"
    elif projects:
        projects_said = f"only the projects {', '.join(projects)}"
    else:
        projects_said = (
            "no project (a session's project needs a grant on it: --scope 'project:NAME', "
            "or --scope 'project:*' for every project)"
        )
    return f"{', '.join(others)} and {projects_said}" if others else projects_said


def cmd_create(args: argparse.Namespace) -> None:
    from services.curation import admin, tokens

    settings = _settings()

    async def go() -> tuple[str, Any]:
        async with admin.open_pool(settings) as pool:
            return await tokens.create(pool, args.principal, args.scope, args.description)

    token, row = run_async(go)
    reaches = reach(list(row["scopes"]))
    if args.json:
        print(json.dumps({"token": token, **_row_json(row), "reaches": reaches}))
        return
    print(f"token for {row['principal']} ({', '.join(row['scopes'])}), id {row['id']}:")
    print(token)
    print(f"It reaches {reaches}.")
    print("It is shown once: only its sha256 is stored. Send it as 'Authorization: Bearer <token>'.")


def cmd_list(args: argparse.Namespace) -> None:
    from services.curation import admin, tokens_repo

    settings = _settings()

    async def go() -> list[Any]:
        async with admin.open_pool(settings) as pool:
            return await tokens_repo.listing(pool, include_revoked=True)

    everything = [_row_json(r) for r in run_async(go)]
    rows = everything if args.all else [r for r in everything if not r["revoked_at"]]
    hidden = len(everything) - len(rows)
    if args.json:
        print(json.dumps(rows))
        return
    if not rows:
        print("no tokens in the store (tokens from HM_AUTH_TOKENS are not listed)")
    for r in rows:
        state = (
            f"revoked {r['revoked_at']}" if r["revoked_at"] else f"last used {r['last_used_at'] or 'never'}"
        )
        note = f"  {r['description']}" if r["description"] else ""
        print(f"{r['id']}  {r['principal']:<16} {','.join(r['scopes']):<40} {state}{note}")
    if hidden:
        print(f"{count(hidden, 'revoked token')} not shown (`hypermnesia token list --all` lists them)")


def cmd_revoke(args: argparse.Namespace) -> None:
    from services.curation import admin, tokens

    settings = _settings()

    async def go() -> Any:
        async with admin.open_pool(settings) as pool:
            return await tokens.revoke(pool, args.id)

    row = run_async(go)
    print(f"revoked token {row['id']} of {row['principal']} (at {iso(row['revoked_at'])})")


def register(sub: argparse._SubParsersAction, bench: argparse._SubParsersAction) -> None:
    """Add `hypermnesia token ...` to `sub`."""
    group = sub.add_parser("token", help="bearer tokens kept in the store (create, list, revoke)")
    actions = group.add_subparsers(dest="token_command", required=True)
    p = actions.add_parser("create", help="make a token; it is printed once")
    p.add_argument("--principal", required=True, help="who the token acts as, e.g. alice")
    p.add_argument(
        "--scope",
        action="append",
        required=True,
        help="a scope it may use, or a prefix ending in * (repeatable): --scope user:alice --scope 'project:*'",
    )
    p.add_argument("--description", default="", help="a note on what the token is for")
    p.add_argument("--json", action="store_true", help="print one JSON document")
    p.set_defaults(func=cmd_create)
    p = actions.add_parser("list", help="the tokens in the store (never their text)")
    p.add_argument("--all", action="store_true", help="revoked ones too")
    p.add_argument("--json", action="store_true", help="print one JSON document")
    p.set_defaults(func=cmd_list)
    p = actions.add_parser("revoke", help="revoke a token by id (see `token list`)")
    p.add_argument("id", help="the token's id")
    p.set_defaults(func=cmd_revoke)
