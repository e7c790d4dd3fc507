"""`hypermnesia fusion refit | show`: adaptive fusion's per-scope estimates, which change only at
refits (services/curation/fusion_refits.py). Like the other admin commands they open the store
directly, so they work with the stack running or stopped; a refit reaches every retrieval replica
with its next search."""

from __future__ import annotations

import argparse
import json
from typing import Any

from hypermnesia.settings import CurationSettings
from hypermnesia.times import iso
from tooling.console import configure_logging, fail, load_settings, run_async


def _settings() -> CurationSettings:
    settings = load_settings(CurationSettings)
    configure_logging("WARNING" if settings.log_level == "INFO" else settings.log_level)
    return settings


def cmd_refit(args: argparse.Namespace) -> None:
    from hypermnesia import validation
    from services.curation import admin, fusion_refits

    settings = _settings()

    async def go() -> fusion_refits.Refit:
        for scope in args.scope or []:
            validation.check_scope(scope)
        async with admin.open_pool(settings) as pool:
            return await fusion_refits.refit(pool, fusion_refits.COMMAND, args.scope or None)

    done = run_async(go)
    if args.json:
        print(
            json.dumps(
                {
                    "refit": done.id,
                    "at": iso(done.at),
                    "reason": done.reason,
                    "keys": [
                        {
                            "scopes": k.scopes,
                            "previous": k.previous,
                            "estimate": k.estimate.value,
                            "observations": k.estimate.observations,
                        }
                        for k in done.keys
                    ],
                }
            )
        )
        return
    print(done.summary())


def cmd_show(args: argparse.Namespace) -> None:
    from services.curation import admin, fusion_refits_repo
    from services.retrieval.fusion import lexical_share

    settings = _settings()
    if args.refits < 0:
        fail("--refits must be 0 or more")

    async def go() -> tuple[list[Any], list[Any]]:
        async with admin.open_pool(settings) as pool, pool.acquire() as conn:
            return await fusion_refits_repo.current(conn), await fusion_refits_repo.recent_refits(
                conn, args.refits
            )

    current, refits = run_async(go)
    keys = [
        {
            "scopes": list(r["scopes"]),
            "estimate": r["estimate"],
            "lexical_weight": lexical_share(r["estimate"]),
            "observations": r["observations"],
            "refit": r["refit_id"],
            "at": iso(r["at"]),
            "reason": r["reason"],
        }
        for r in current
    ]
    history = [
        {
            "refit": r["id"],
            "at": iso(r["at"]),
            "reason": r["reason"],
            "scopes": None if r["scopes"] is None else list(r["scopes"]),
            "keys": r["keys"],
            "last_log_id": r["last_log_id"],
        }
        for r in refits
    ]
    if args.json:
        print(json.dumps({"estimates": keys, "refits": history}))
        return
    if not keys:
        print(
            "no estimates yet: adaptive fusion weighs every search with its prior until a refit "
            "(HM_FUSION_REFIT_HOURS, an import, or `hypermnesia fusion refit`) finds logged searches"
        )
    for k in keys:
        print(
            f"[{', '.join(k['scopes'])}]  estimate {k['estimate']:+.3f}  lexical weight"
            f" {k['lexical_weight']:.2f}  from {k['observations']} searches  (refit {k['refit']},"
            f" {k['at']}, {k['reason']})"
        )
    if history:
        print("refits, newest first:")
        for h in history:
            extent = "every key" if h["scopes"] is None else f"keys holding {', '.join(h['scopes'])}"
            print(f"  {h['refit']}  {h['at']}  {h['reason']:<9} {h['keys']} keys ({extent})")


def register(sub: argparse._SubParsersAction, bench: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "fusion", help="adaptive fusion's per-scope estimates: refit them now, or show them and their refits"
    )
    fusion_sub = p.add_subparsers(dest="fusion_command", required=True)
    r = fusion_sub.add_parser(
        "refit", help="fit every scope key searched since the last refit from its logged searches, now"
    )
    r.add_argument("--scope", action="append", help="only the keys holding this scope (repeatable)")
    r.add_argument("--json", action="store_true")
    r.set_defaults(func=cmd_refit)
    s = fusion_sub.add_parser("show", help="each scope key's current estimate, and the latest refits")
    s.add_argument("--refits", type=int, default=10, help="how many refits to list (default 10)")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_show)
