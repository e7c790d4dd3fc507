"""`hypermnesia bench embedder` (registered by tooling.cli)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def cmd_bench(args: argparse.Namespace) -> None:
    from tooling.bench.embedder import format_report, run

    report = run(
        Path(args.data_dir) if args.data_dir else None,
        clients=args.clients,
        scale=args.scale,
        rounds=args.rounds,
        quantization=args.quantization,
    )
    print(json.dumps(report.as_dict(), indent=2) if args.json else format_report(report))


def register(sub: argparse._SubParsersAction, bench: argparse._SubParsersAction) -> None:
    """Add this area's subcommands to `sub` and its benchmarks to `bench` (`hypermnesia bench NAME`)."""
    parser = bench.add_parser(
        "embedder",
        help="raw onnxruntime vs the embedder service (1 and N clients, batching on/off, short/long texts)",
    )
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.add_argument("--clients", type=int, default=32, help="concurrent clients (default 32)")
    parser.add_argument(
        "--scale", type=float, default=1.0, help="multiply the number of calls (e.g. 0.05 for a smoke run)"
    )
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds; the best of each is kept")
    parser.add_argument("--quantization", choices=("fp32", "int8"), default="fp32")
    parser.add_argument(
        "--data-dir", help="where the ONNX model is cached (default: a fresh temporary folder)"
    )
    parser.set_defaults(func=cmd_bench)
