"""`hypermnesia bench mcp`: an agent's calls through a real MCP client, the workload of the
comparison with seed 001: one LoCoMo conversation (conv-26: its 419 turns saved with memory_save,
its 150 questions searched with memory_search, a save and a search in turn until the questions
run out), through fastmcp's client over streamable HTTP to the gateway of the stack as processes
(tooling/bench/load.py), each session kept open as an agent's is.

Each question is also sent through REST (`POST /memories/search`, the same body) right after its
MCP call, with the embedder's query cache off so both pay for the embedding: the difference is
what the MCP path costs beyond REST.

With `baseline` (a checkout of another commit, e.g. `git worktree add /tmp/hm-base bd8f5b1`), the
same workload runs at the same time against a second stack running that checkout's code, on a
database of its own on the same Postgres server; the two stacks take turns call by call (which
goes first alternates), so a slow spell of the machine lands on both."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg
from fastmcp import Client
from fastmcp.client.transports import StreamableHttpTransport

from gateway.auth import PROJECT_HEADER
from hypermnesia.embedded_pg import EmbeddedPostgres
from tooling.bench.load import TOKEN, HttpClient, ProcessStack, cpu_seconds, percentiles, process_stack
from tooling.evaluation.datasets import Corpus, load_locomo
from tooling.local_stack import create_database, drop_database

CONVERSATION = "conv-26"
SCOPE = "bench:locomo"
WARMUP_CALLS = 10
K = 10


@dataclass
class Arm:
    """One stack under test and its clients; the milliseconds of each call, by operation."""

    name: str
    stack: ProcessStack
    mcp: Client
    rest: HttpClient
    ms: dict[str, list[float]] = field(default_factory=dict)
    # CPU seconds of this process (the bench's MCP and REST clients) spent in this arm's calls.
    client_cpu_s: float = 0.0

    async def cpu(self) -> dict[str, float]:
        """CPU seconds used so far by each of the stack's processes and by the Postgres backends
        serving its database (its pools' connections live as long as the run)."""
        used = {p.name: cpu_seconds(p.pid) or 0.0 for p in self.stack.services}
        conn = await asyncpg.connect(self.stack.database_url)
        try:
            pids = await conn.fetch(
                "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
        finally:
            await conn.close()
        used["postgres"] = sum(cpu_seconds(r["pid"]) or 0.0 for r in pids)
        return used

    async def call(self, tool: str, arguments: dict[str, Any], label: str | None = None) -> None:
        started, cpu = time.perf_counter(), time.process_time()
        result = await self.mcp.call_tool(tool, arguments)
        elapsed = (time.perf_counter() - started) * 1000
        self.client_cpu_s += time.process_time() - cpu
        if result.is_error:
            raise RuntimeError(f"{self.name}: {tool} answered an error: {result.content}")
        if label:
            self.ms.setdefault(label, []).append(elapsed)

    async def rest_search(self, body: dict[str, Any], label: str | None = None) -> None:
        started, cpu = time.perf_counter(), time.process_time()
        status, data = await self.rest.request("POST", "/memories/search", body)
        elapsed = (time.perf_counter() - started) * 1000
        self.client_cpu_s += time.process_time() - cpu
        if status != 200:
            raise RuntimeError(f"{self.name}: REST search answered {status}: {data[:300]!r}")
        if label:
            self.ms.setdefault(label, []).append(elapsed)


def conversation(data_dir: Path, name: str) -> Corpus:
    for corpus in load_locomo(data_dir):
        if corpus.name == f"locomo:{name}":
            return corpus
    raise ValueError(f"LoCoMo has no conversation {name!r}; conv-26 is the one of the seed comparison")


def plan(corpus: Corpus) -> list[tuple[str, str]]:
    """(operation, text): a save and a search in turn while both last, then the rest."""
    saves = [("save", d.content) for d in corpus.docs]
    searches = [("search", q.text) for q in corpus.questions]
    out: list[tuple[str, str]] = []
    for i in range(max(len(saves), len(searches))):
        out += saves[i : i + 1] + searches[i : i + 1]
    return out


async def step(arm: Arm, op: str, text: str, label: bool = True) -> None:
    if op == "save":
        await arm.call("memory_save", {"content": text, "scope": SCOPE}, "mcp save" if label else None)
        return
    body = {"query": text, "scope": SCOPE, "k": K}
    await arm.call("memory_search", body, "mcp search" if label else None)
    await arm.rest_search(body, "rest search" if label else None)


@contextlib.asynccontextmanager
async def arm(name: str, server_url: str, data_dir: Path, logs: Path, code_root: Path | None) -> Any:
    url = await create_database(server_url, prefix=f"hm_mcp_{name}")
    try:
        async with process_stack(
            url,
            data_dir,
            logs / name,
            code_root=code_root,
            rate_writes_per_min=0,
            rate_searches_per_min=0,
            # Each question goes through MCP and then REST: both must pay for its embedding.
            embed_query_cache_size=0,
        ) as stack:
            headers = {"Authorization": f"Bearer {TOKEN}", PROJECT_HEADER: SCOPE}
            host, port = stack.gateway.address.split(":")
            async with Client(StreamableHttpTransport(f"{stack.base_url}/mcp", headers=headers)) as mcp:
                rest = HttpClient(host, int(port), TOKEN)
                try:
                    yield Arm(name, stack, mcp, rest)
                finally:
                    await rest.close()
    finally:
        await drop_database(url)


async def run(
    data_dir: Path,
    hm_data_dir: Path,
    baseline: Path | None,
    name: str,
    database_url: str | None,
    limit: int | None = None,
) -> dict[str, Any]:
    corpus = conversation(data_dir, name)
    calls = plan(corpus)[:limit]
    root = hm_data_dir / "bench-mcp"
    root.mkdir(parents=True, exist_ok=True)
    embedded = None if database_url else EmbeddedPostgres(root)
    server_url = database_url or embedded.url  # type: ignore[union-attr]
    try:
        with tempfile.TemporaryDirectory(prefix="hm-bench-mcp-") as tmp:
            async with contextlib.AsyncExitStack() as stacks:
                arms = [
                    await stacks.enter_async_context(arm("this", server_url, hm_data_dir, Path(tmp), None))
                ]
                if baseline is not None:
                    arms.append(
                        await stacks.enter_async_context(
                            arm("baseline", server_url, hm_data_dir, Path(tmp), baseline.resolve())
                        )
                    )
                for n in range(WARMUP_CALLS):  # first connections, first plans; not timed
                    for a in arms:
                        await step(a, "save", f"A warm-up note number {n} about nothing in particular")
                        await step(a, "search", f"warm-up question {n}?", label=False)
                load_before = os.getloadavg()[0]
                cpu_before = [await a.cpu() for a in arms]
                for a in arms:
                    a.client_cpu_s = 0.0
                started = time.perf_counter()
                for i, (op, text) in enumerate(calls):
                    for a in arms if i % 2 == 0 else arms[::-1]:
                        await step(a, op, text)
                seconds = time.perf_counter() - started
                cpu = {}
                for a, before in zip(arms, cpu_before, strict=True):
                    after = await a.cpu()
                    cpu[a.name] = {name: after[name] - before[name] for name in after}
                    cpu[a.name]["clients"] = a.client_cpu_s
    finally:
        if embedded is not None:
            embedded.close()
    return {
        "conversation": corpus.name,
        "saves": sum(1 for op, _ in calls if op == "save"),
        "searches": sum(1 for op, _ in calls if op == "search"),
        "seconds": seconds,
        "load_average": [load_before, os.getloadavg()[0]],
        "baseline": str(baseline) if baseline else None,
        "arms": {a.name: {label: percentiles(ms) for label, ms in a.ms.items()} for a in arms},
        # CPU ms per call of the workload (a save, or a search through MCP and again through REST).
        "cpu_ms_per_call": {
            name: {process: s * 1000 / len(calls) for process, s in used.items()}
            for name, used in cpu.items()
        },
    }


# The reference: seed 001's server measured with this workload and this client (issue 31), and
# our MCP search p50 the target is half of.
SEED_001 = {"mcp search": (33.8, 47.6), "mcp save": (36.0, None)}


def format_table(r: dict[str, Any]) -> str:
    lines = [
        f"{r['conversation']}: {r['saves']} saves and {r['searches']} searches through fastmcp's client"
        f" (streamable HTTP), each search also through REST; {r['seconds']:.0f} s;"
        f" load average {r['load_average'][0]:.2f} -> {r['load_average'][1]:.2f}",
        "",
        "| code | operation | p50 ms | p95 ms | p99 ms | mean ms |",
        "|---|---|---|---|---|---|",
    ]
    for name, ops in r["arms"].items():
        label = name if name == "this" else f"baseline ({r['baseline']})"
        for op in ("mcp search", "rest search", "mcp save"):
            p = ops[op]
            lines.append(
                f"| {label} | {op} | {p['p50_ms']:.1f} | {p['p95_ms']:.1f} | {p['p99_ms']:.1f} | {p['mean_ms']:.1f} |"
            )
    this = r["arms"]["this"]
    gap = this["mcp search"]["p50_ms"] - this["rest search"]["p50_ms"]
    lines += ["", f"MCP search p50 beyond REST's: {gap:+.1f} ms", ""]
    processes = list(next(iter(r["cpu_ms_per_call"].values())))
    lines += [
        "| code | CPU ms per call: " + " | ".join(processes) + " | total |",
        "|---" * (len(processes) + 2) + "|",
    ]
    for name, used in r["cpu_ms_per_call"].items():
        lines.append(
            f"| {name} | "
            + " | ".join(f"{used[p]:.2f}" for p in processes)
            + f" | {sum(used.values()):.2f} |"
        )
    lines.append("")
    if "baseline" in r["arms"]:
        base = r["arms"]["baseline"]
        for op in ("mcp search", "rest search", "mcp save"):
            lines.append(
                f"{op}: p50 this / baseline {this[op]['p50_ms'] / base[op]['p50_ms']:.2f},"
                f" p95 {this[op]['p95_ms'] / base[op]['p95_ms']:.2f}"
            )
    lines.append(
        f"seed 001 (issue 31's run, same workload and client): MCP search p50/p95 {SEED_001['mcp search'][0]}"
        f"/{SEED_001['mcp search'][1]} ms, save p50 {SEED_001['mcp save'][0]} ms;"
        f" this / seed 001 MCP search p50 {this['mcp search']['p50_ms'] / SEED_001['mcp search'][0]:.2f}"
    )
    return "\n".join(lines)


def cmd_bench_mcp(args: argparse.Namespace) -> None:
    from hypermnesia.settings import CommonSettings
    from tooling.console import configure_logging, fail, load_settings

    if args.calls is not None and args.calls < 2:
        fail(f"--calls must be at least 2 (a save and a search), not {args.calls}")
    if args.baseline is not None and not (args.baseline / "hypermnesia" / "__main__.py").exists():
        fail(f"{args.baseline} is not a hypermnesia checkout; make one with `git worktree add PATH COMMIT`")
    settings = load_settings(CommonSettings)
    configure_logging("WARNING")
    try:
        result = asyncio.run(
            run(
                args.data_dir,
                settings.data_dir,
                args.baseline,
                args.conversation,
                settings.database_url,
                args.calls,
            )
        )
    except ValueError as exc:
        fail(str(exc))
    print(json.dumps(result, indent=2) if args.json else format_table(result))


def register(sub: argparse._SubParsersAction, bench: argparse._SubParsersAction) -> None:
    """Adds `hypermnesia bench mcp` (tooling/cli.py lists this module in COMMAND_MODULES)."""
    b = bench.add_parser(
        "mcp",
        help="an agent's MCP calls (LoCoMo conv-26: 419 saves, 150 searches) through fastmcp's client;"
        " p50/p95 per operation, REST beside MCP, optionally side by side with another checkout",
    )
    b.add_argument("--baseline", type=Path, help="a checkout of another commit to run side by side")
    b.add_argument(
        "--conversation", default=CONVERSATION, help=f"LoCoMo conversation (default {CONVERSATION})"
    )
    b.add_argument(
        "--data-dir",
        type=Path,
        default=Path("../shared/data"),
        help="folder holding locomo/ (../shared/data)",
    )
    b.add_argument("--calls", type=int, help="only the first N calls of the workload (a smoke run)")
    b.add_argument("--json", action="store_true")
    b.set_defaults(func=cmd_bench_mcp)
