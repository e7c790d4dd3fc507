"""`hypermnesia consolidate | proposals | ask`: the curation intelligence of issue 18, asked of the
running stack (the curation service at HM_CURATION_ADDRESS) over gRPC, never of the database
directly, so a run takes the same advisory lock and writes the same raw-log records as a scheduled
one. The command acts as the local operator (`cli:<user>`) with every scope granted, as the other
operator commands do; `--json` prints exactly one JSON document on stdout (the shapes of the REST
API), and errors go to stderr with a non-zero exit code. Registered by tooling.cli through
COMMAND_MODULES."""

from __future__ import annotations

import argparse
import asyncio
import getpass
import json
import os
import sys
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Annotated, Any, TypeVar

import grpc
from pydantic import Field

from hypermnesia.scopes import project_scope_for_root
from hypermnesia.settings import DEFAULT_CURATION_PORT, CommonSettings, Port
from hypermnesia.v1 import common_pb2, intelligence_pb2, intelligence_pb2_grpc
from hypermnesia.wording import count
from tooling.console import fail, load_settings
from tooling.stack_record import resolve_addresses, unreachable

T = TypeVar("T")

JOBS = ("daily", "weekly", "monthly")
DEPTHS = ("explicit", "derived", "premises", "ancestry", "auto")
STATUSES = ("pending", "approved", "rejected", "all")
# Exit codes: 1 = the service refused the request (it says why), 3 = it could not be asked.
REFUSED, UNREACHABLE = 1, 3


class IntelligenceCommandSettings(CommonSettings):
    # Unset: HM_CURATION_PORT, else the `up` recorded in HM_DATA_DIR (tooling/stack_record.py).
    curation_address: str = ""
    curation_port: Port = DEFAULT_CURATION_PORT
    # An answer may wait on an LLM with retries; a consolidation over every scope takes longer.
    rpc_timeout_s: Annotated[float, Field(gt=0, le=3600)] = 120.0
    consolidate_timeout_s: Annotated[float, Field(gt=0, le=86_400)] = 1800.0


def _operator() -> common_pb2.Caller:
    try:
        name = f"cli:{getpass.getuser()}"
    except (KeyError, OSError):  # no passwd entry (containers)
        name = "cli"
    # The operator of this machine's stack: every scope, as `hypermnesia admin` has on the store.
    return common_pb2.Caller(principal=name, grants=["*"])


class _Failed(Exception):
    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def _explain(exc: grpc.aio.AioRpcError, address: str, timeout_s: float, retry: str) -> _Failed:
    code = exc.code()
    if code == grpc.StatusCode.UNAVAILABLE:
        return _Failed(unreachable("curation", address), UNREACHABLE)
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return _Failed(
            f"the curation service at {address} did not answer within {timeout_s:g} s; {retry}", UNREACHABLE
        )
    if code == grpc.StatusCode.UNIMPLEMENTED:
        return _Failed(
            f"the curation service at {address} does not serve consolidation, proposals or ask; upgrade it",
            UNREACHABLE,
        )
    if code in (grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN):
        return _Failed(f"internal error in the curation service at {address}; see its log", UNREACHABLE)
    return _Failed(exc.details() or code.name, REFUSED)


def _call(
    rpc: Callable[[intelligence_pb2_grpc.IntelligenceAsyncStub, float], Awaitable[T]],
    *,
    long: bool = False,
    retry: str = "run the command again",
    waiting: str = "",
) -> T:
    """One RPC to the running curation service; a failure ends the command with one line saying
    what to do. `waiting` shows an indeterminate progress bar (elapsed time) on stderr meanwhile:
    the RPC answers once, when the work is done, so there is nothing finer to count."""
    settings = resolve_addresses(load_settings(IntelligenceCommandSettings))
    timeout_s = settings.consolidate_timeout_s if long else settings.rpc_timeout_s

    async def go() -> T:
        from hypermnesia.grpc_client import open_channel

        async with open_channel(settings.curation_address) as channel:
            stub = intelligence_pb2_grpc.IntelligenceStub(channel)
            try:
                if not waiting:
                    return await rpc(stub, timeout_s)
                return await _with_spinner(rpc(stub, timeout_s), waiting)
            except grpc.aio.AioRpcError as exc:
                raise _explain(exc, settings.curation_address, timeout_s, retry) from exc

    try:
        return asyncio.run(go())
    except _Failed as exc:
        fail(str(exc), exc.exit_code)
    except KeyboardInterrupt:
        fail("interrupted", 130)


async def _with_spinner(work: Awaitable[T], desc: str) -> T:
    from tqdm import tqdm

    task = asyncio.ensure_future(work)
    # disable=None: no bar when stderr is not a terminal (a script, a log file).
    with tqdm(
        total=None, desc=desc, bar_format="{desc}: {elapsed}", file=sys.stderr, leave=False, disable=None
    ) as bar:
        while not task.done():
            await asyncio.wait([task], timeout=0.2)
            bar.refresh()
    return task.result()


def _print_json(value: Any) -> None:
    print(json.dumps(value, ensure_ascii=False, indent=2))


def _short(text: str, limit: int = 160) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _iso_time(text: str) -> datetime:
    """An ISO 8601 date or time from the command line (a naive one is sent as UTC)."""
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not an ISO 8601 date or time such as 2023-05-01 or 2023-05-01T12:00:00Z"
        ) from None


def cmd_consolidate(args: argparse.Namespace) -> None:
    from gateway.shaping import consolidate_report_json
    from hypermnesia.times import timestamp

    request = intelligence_pb2.ConsolidateRequest(caller=_operator(), job=args.job, scope=args.scope or "")
    if args.since is not None:
        request.since.CopyFrom(timestamp(args.since))
    if args.until is not None:
        request.until.CopyFrom(timestamp(args.until))
    where = args.scope or "every scope"
    reply = _call(
        lambda stub, t: stub.Consolidate(request, timeout=t),
        long=True,
        retry="the run may still finish on the server; run the command again (a run is idempotent)",
        waiting=f"consolidate {args.job} ({where})",
    )
    reports = [consolidate_report_json(r) for r in reply.reports]
    if args.json:
        _print_json({"reports": reports})
        return
    if not reports:
        print(f"consolidate {args.job}: no scope holding memories to consolidate")
    for r in reports:
        if r["skipped"]:
            print(f"{r['job']} {r['scope']}: skipped ({r['skipped_reason']})")
            continue
        kinds = ", ".join(f"{k} {n}" for k, n in r["made_by_kind"].items() if n)
        read = f"read {r['read']} ({r['coverage']}); " if r["coverage"] else ""
        print(
            f"{r['job']} {r['scope']}: {read}{count(r['proposals_made'], 'proposal')} made"
            f"{f' ({kinds})' if kinds else ''}, {r['pending']} pending; promoted {r['promoted']}, "
            f"expired {r['expired']}, marked stale {r['marked_stale']} [{r['mode']}, {r['duration_ms']:.0f} ms]"
        )
        for note in r["notes"]:
            print(f"  note: {note}")
    if any(r["pending"] for r in reports):
        print("review them with `hypermnesia proposals list`")


def cmd_proposals_list(args: argparse.Namespace) -> None:
    from gateway.shaping import proposal_json

    request = intelligence_pb2.ListProposalsRequest(
        caller=_operator(), scopes=[args.scope] if args.scope else [], status=args.status, limit=args.limit
    )
    reply = _call(lambda stub, t: stub.ListProposals(request, timeout=t))
    proposals = [proposal_json(p) for p in reply.proposals]
    if args.json:
        _print_json({"proposals": proposals})
        return
    if not proposals:
        print(f"no {args.status} proposals" + (f" in {args.scope}" if args.scope else ""))
        return
    for p in proposals:
        print(f"{p['id']}  {p['kind']:<13} {p['status']:<9} {p['scope']}  [{p['mode']}]")
        print(f"  {_short(p['content'])}")
        print(f"  why: {_short(p['rationale'], 240)}")
        print(f"  evidence: {', '.join(p['evidence']) or '(none you may read)'}")
        if "supersedes" in p:
            print(f"  supersedes: {p['supersedes']}")
        if p["status"] != "pending":
            why = f": {p['decision_reason']}" if "decision_reason" in p else ""
            print(f"  {p['status']} by {p.get('decided_by', '?')} at {p.get('decided_at', '?')}{why}")


def _decide(args: argparse.Namespace, decision: str) -> None:
    from gateway.shaping import proposal_json

    request = intelligence_pb2.DecideProposalRequest(
        caller=_operator(), id=args.id, decision=decision, reason=args.reason or ""
    )
    reply = _call(
        lambda stub, t: stub.DecideProposal(request, timeout=t),
        retry="check with `hypermnesia proposals list --status all` whether it was decided",
    )
    out = {"proposal": proposal_json(reply.proposal), "memory_id": reply.memory_id or None}
    if args.json:
        _print_json(out)
    elif decision == "approve":
        print(f"approved proposal {args.id} ({reply.proposal.kind}): memory {reply.memory_id}")
    else:
        print(f"rejected proposal {args.id}: {reply.proposal.decision_reason}")


def cmd_approve(args: argparse.Namespace) -> None:
    _decide(args, "approve")


def cmd_reject(args: argparse.Namespace) -> None:
    if not args.reason.strip():
        fail("say why the proposal is rejected: --reason TEXT", 2)
    _decide(args, "reject")


def cmd_ask(args: argparse.Namespace) -> None:
    from gateway.shaping import ask_json

    # This folder's project, as the hooks and an MCP session started here name it.
    scopes = args.scope or [project_scope_for_root(os.getcwd())]
    request = intelligence_pb2.AskRequest(
        caller=_operator(), question=args.question, scopes=scopes, depth=args.depth, k=args.k
    )
    answer = ask_json(_call(lambda stub, t: stub.Ask(request, timeout=t)))
    if args.json:
        _print_json(answer)
        return
    if not answer["claims"]:
        print(f"no claim (searched {', '.join(scopes)}): {answer['abstained']}")
    for number, claim in enumerate(answer["claims"], 1):
        print(f"[{number}] {claim['text']}")
        print(f"    cites {', '.join(claim['citations'])}")
    for dropped in answer["dropped"]:
        print(f"dropped: {_short(dropped['text'], 80)} ({dropped['reason']})")
    print(f"depth {answer['depth']}: {answer['depth_reason']}; mode {answer['mode']}")
    for note in answer["notes"]:
        print(f"note: {note}")


def _json_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print one JSON document")


def register(sub: argparse._SubParsersAction, bench: argparse._SubParsersAction) -> None:
    """Add `hypermnesia consolidate`, `proposals list|approve|reject` and `ask` to `sub`."""
    p = sub.add_parser(
        "consolidate",
        help="run a consolidation job now on the running stack (HM_CURATION_ADDRESS); idempotent",
    )
    p.add_argument(
        "--job",
        required=True,
        choices=JOBS,
        help="daily: promote/expire working memory, mark conclusions of expired premises stale, propose "
        "revisions; weekly: cluster episodes into facts; monthly: summaries and procedures",
    )
    p.add_argument("--scope", default="", help="one scope (e.g. project:my-repo); default every scope")
    for flag, side in (("--since", "at or after"), ("--until", "before")):
        p.add_argument(
            flag,
            type=_iso_time,
            default=None,
            help=f"weekly/monthly: read only memories dated {side} this ISO 8601 date or time (their "
            "own dates; UTC unless given); a run reads everything not consolidated yet by default",
        )
    _json_flag(p)
    p.set_defaults(func=cmd_consolidate)

    group = sub.add_parser("proposals", help="what consolidation proposes: list, approve, reject")
    actions = group.add_subparsers(dest="proposals_command", required=True)
    p = actions.add_parser("list", help="list proposals (pending by default)")
    p.add_argument("--scope", default="", help="one scope; default every scope")
    p.add_argument("--status", default="pending", choices=STATUSES, help="default pending")
    p.add_argument("--limit", type=int, default=100, help="at most this many (1-1000), newest first")
    _json_flag(p)
    p.set_defaults(func=cmd_proposals_list)
    p = actions.add_parser("approve", help="write what a proposal proposes; prints the new memory's id")
    p.add_argument("id", help="the proposal's id (see `hypermnesia proposals list`)")
    p.add_argument("--reason", default="", help="an optional note kept with the decision")
    _json_flag(p)
    p.set_defaults(func=cmd_approve)
    p = actions.add_parser("reject", help="reject a proposal; it is never proposed again")
    p.add_argument("id", help="the proposal's id (see `hypermnesia proposals list`)")
    p.add_argument("--reason", required=True, help="why (required)")
    _json_flag(p)
    p.set_defaults(func=cmd_reject)

    p = sub.add_parser("ask", help="answer a question from memory, each claim citing memory ids")
    p.add_argument("question", help="the question, in words")
    p.add_argument(
        "--scope",
        action="append",
        help="a scope to search (repeatable), e.g. project:my-repo; default this folder's project",
    )
    p.add_argument("--depth", default="auto", choices=DEPTHS, help="recall depth (default auto)")
    p.add_argument("--k", type=int, default=8, help="evidence rows to search for (1-50)")
    _json_flag(p)
    p.set_defaults(func=cmd_ask)
