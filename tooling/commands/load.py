"""`hypermnesia bench load` (registered by tooling.cli)."""

from __future__ import annotations

import argparse
from pathlib import Path


def cmd_bench_load(args: argparse.Namespace) -> None:
    from hypermnesia.settings import CommonSettings
    from tooling.bench.load import MAX_ROUNDS, check_bounds, main
    from tooling.console import configure_logging, fail, load_settings

    try:
        check_bounds(args.memories, args.clients, args.duration)
    except ValueError as exc:
        fail(str(exc))
    if not 1 <= args.rounds <= MAX_ROUNDS:
        fail(f"--rounds must be between 1 and {MAX_ROUNDS}")
    if args.baseline is not None and not (args.baseline / "hypermnesia" / "__main__.py").is_file():
        fail(
            f"--baseline {args.baseline} is not a hypermnesia checkout (no hypermnesia/__main__.py);"
            " make one with `git worktree add --detach PATH COMMIT`"
        )
    settings = load_settings(CommonSettings)
    configure_logging("WARNING")
    main(
        args.memories,
        args.clients,
        args.duration,
        settings.database_url,
        settings.data_dir,
        args.json,
        settings.pg_shared_buffers_mb,
        args.baseline,
        args.rounds,
    )


def register(sub: argparse._SubParsersAction, bench: argparse._SubParsersAction) -> None:
    b = bench.add_parser(
        "load",
        help="mixed searches and saves from concurrent REST clients against the stack as processes;"
        " throughput, latency percentiles, errors and each process's resident memory",
    )
    b.add_argument("--memories", type=int, required=True, help="store size (built once, then reused)")
    b.add_argument("--clients", type=int, default=32, help="concurrent clients (default 32)")
    b.add_argument("--duration", type=float, default=20.0, help="seconds of load (default 20)")
    b.add_argument(
        "--baseline",
        type=Path,
        default=None,
        help="a checkout of another commit (git worktree add --detach PATH COMMIT) to run on the same"
        " store, taking turns with this one, with the ratio of the two",
    )
    b.add_argument("--rounds", type=int, default=1, help="runs of each checkout (default 1)")
    b.add_argument("--json", action="store_true")
    b.set_defaults(func=cmd_bench_load)
