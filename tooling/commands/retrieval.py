"""`hypermnesia eval` and `hypermnesia bench search` (registered by tooling.cli)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

FUSIONS = ("weighted", "boost", "rrf")


def _default_data_dir() -> Path:
    return Path.cwd().parent / "shared" / "data"


def cmd_eval(args: argparse.Namespace) -> None:
    from hypermnesia.settings import CommonSettings
    from tooling.console import configure_logging, load_settings, run_async
    from tooling.evaluation.run import evaluate, format_table

    settings = load_settings(CommonSettings)
    configure_logging("WARNING")
    fusions = list(FUSIONS) if args.fusion == "all" else [args.fusion]
    results = run_async(
        lambda: evaluate(
            args.dataset,
            fusions,
            Path(args.data_dir),
            settings.database_url,
            concurrency=args.concurrency,
            max_corpora=args.corpora,
        )
    )
    if results is None:
        raise SystemExit(1)
    if args.json:
        print(
            json.dumps([r.__dict__ | {"queries_per_second": r.queries_per_second} for r in results], indent=2)
        )
    else:
        print(
            f"{args.dataset}: {results[0].questions} questions, k={100 if args.dataset == 'scifact' else 10}"
        )
        print(format_table(args.dataset, results))


def register(sub: argparse._SubParsersAction, bench: argparse._SubParsersAction) -> None:
    ev = sub.add_parser("eval", help="retrieval quality on LoCoMo or SciFact through the real service path")
    ev.add_argument("--dataset", choices=("locomo", "scifact"), required=True)
    ev.add_argument("--fusion", choices=(*FUSIONS, "all"), default="all")
    ev.add_argument(
        "--data-dir",
        default=str(_default_data_dir()),
        help="folder holding locomo/ and scifact/ (default: ../shared/data)",
    )
    ev.add_argument("--concurrency", type=int, default=8)
    ev.add_argument(
        "--corpora", type=int, default=None, help="only the first N stores (LoCoMo conversations)"
    )
    ev.add_argument("--json", action="store_true")
    ev.set_defaults(func=cmd_eval)
    register_bench(bench)


def cmd_bench_search(args: argparse.Namespace) -> None:
    from hypermnesia.settings import CommonSettings
    from tooling.bench.search import main
    from tooling.console import configure_logging, load_settings

    settings = load_settings(CommonSettings)
    configure_logging("WARNING")
    main(args.memories, args.queries, settings.database_url, settings.data_dir / "bench-vectors", args.json)


def register_bench(bench: argparse._SubParsersAction) -> None:
    b = bench.add_parser("search", help="search latency (gRPC and REST) and ANN recall on a synthetic store")
    b.add_argument("--memories", type=int, default=10_000)
    b.add_argument("--queries", type=int, default=200)
    b.add_argument("--json", action="store_true")
    b.set_defaults(func=cmd_bench_search)
