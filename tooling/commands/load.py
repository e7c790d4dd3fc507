"""`hypermnesia bench load` (registered by tooling.cli)."""

from __future__ import annotations

import argparse


def cmd_bench_load(args: argparse.Namespace) -> None:
    from hypermnesia.settings import CommonSettings
    from tooling.bench.load import check_bounds, main
    from tooling.console import configure_logging, fail, load_settings

    try:
        check_bounds(args.memories, args.clients, args.duration)
    except ValueError as exc:
        fail(str(exc))
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
    b.add_argument("--json", action="store_true")
    b.set_defaults(func=cmd_bench_load)
