"""`hypermnesia replay`: what agents were given, from the delivery log (issue 30 item 3), asked of
the running curation service over gRPC as the local operator (every scope, as `hypermnesia ask`).

`replay --session S` lists one session's deliveries, `replay --since T` every delivery since a time,
each narrowed by `--principal P`; every delivery shows its operation, request, the sha256 of the
exact text sent, and each memory with its state now. `replay --verify` walks the log's hash chain
from its retention boundary. Registered by tooling.cli through COMMAND_MODULES."""

from __future__ import annotations

import argparse
import asyncio
import json
from typing import Any

import grpc

from hypermnesia.v1 import deliveries_pb2, deliveries_pb2_grpc
from hypermnesia.wording import count
from tooling.commands.intelligence import (
    IntelligenceCommandSettings,
    _explain,
    _Failed,
    _iso_time,
    _operator,
    _print_json,
    _short,
)
from tooling.console import fail, load_settings
from tooling.stack_record import resolve_addresses

BROKEN = 3


async def _ask(method: str, request: Any) -> Any:
    settings = resolve_addresses(load_settings(IntelligenceCommandSettings))
    from hypermnesia.grpc_client import open_channel

    async with open_channel(settings.curation_address) as channel:
        stub = deliveries_pb2_grpc.DeliveriesStub(channel)
        try:
            return await getattr(stub, method)(request, timeout=settings.rpc_timeout_s)
        except grpc.aio.AioRpcError as exc:
            raise _explain(exc, settings.curation_address, settings.rpc_timeout_s, "run it again") from exc


def _run(method: str, request: Any) -> Any:
    try:
        return asyncio.run(_ask(method, request))
    except _Failed as exc:
        fail(str(exc), exc.exit_code)


def _lines(d: dict[str, Any]) -> list[str]:
    where = ", ".join(f"{k} {d[k]}" for k in ("session", "thread") if d[k])
    request = json.dumps(d["request"], ensure_ascii=False, sort_keys=True)
    out = [
        f"#{d['seq']} {d['delivered_at']} {d['principal']} {d['operation']} ({d['transport']}"
        f"{', ' + where if where else ''})",
        f"  request: {_short(request)}",
        f"  sent {count(d['text_bytes'], 'byte')}, sha256 {d['text_sha256']}",
    ]
    for m in d["memories"]:
        score = f" score {m['score']:.4f}" if m["score"] is not None else ""
        what = f": {_short(m.get('description') or m.get('content') or '', 100)}" if "content" in m else ""
        hashed = f" hash {m['hash']}" if m["state"] in ("deleted", "purged") else ""
        out.append(f"  - {m['id']} [{m['state']}]{score}{hashed}{what}")
    return out


def cmd_replay(args: argparse.Namespace) -> None:
    from gateway.shaping import deliveries_json
    from hypermnesia.times import timestamp

    if args.verify:
        result = _run("VerifyDeliveries", deliveries_pb2.VerifyDeliveriesRequest())
        if result.first_broken_seq:
            fail(f"replay --verify: BROKEN at delivery {result.first_broken_seq}: {result.reason}", BROKEN)
        print(
            f"replay --verify: ok, {count(result.checked, 'delivery', 'deliveries')} after the retention "
            f"boundary (seq {result.floor_seq}), the chain holds"
        )
        return
    if not args.session and args.since is None:
        fail("replay: name a session (--session S) or a time (--since T), or check the chain (--verify)", 2)
    request = deliveries_pb2.ListDeliveriesRequest(
        caller=_operator(), session=args.session or "", principal=args.principal or "", limit=args.limit
    )
    if args.since is not None:
        request.since.CopyFrom(timestamp(args.since))
    listed = deliveries_json(_run("ListDeliveries", request))
    if args.json:
        _print_json(listed)
        return
    if not listed["deliveries"]:
        print("replay: no delivery matches")
    for d in listed["deliveries"]:
        print("\n".join(_lines(d)))
    if listed["truncated"]:
        print(f"(more than {args.limit}; narrow with --since or raise --limit)")


def register(sub: argparse._SubParsersAction, bench: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "replay",
        help="what agents were given: the delivery log of a session or since a time, with each memory's state now",
    )
    p.add_argument("--session", default="", help="an MCP session id or X-Hypermnesia-Session value")
    p.add_argument("--since", type=_iso_time, default=None, help="deliveries at or after this ISO 8601 time")
    p.add_argument("--principal", default="", help="only what this principal was given")
    p.add_argument(
        "--limit", type=int, default=200, choices=range(1, 1001), metavar="1-1000", help="default 200"
    )
    p.add_argument("--verify", action="store_true", help="walk the delivery log's hash chain instead")
    p.add_argument("--json", action="store_true", help="print one JSON document (GET /deliveries' shape)")
    p.set_defaults(func=cmd_replay)
