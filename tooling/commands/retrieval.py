"""`hypermnesia eval` and `hypermnesia bench search` (registered by tooling.cli)."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from hypermnesia import fusions

# The eval table's order: the single legs first (the bar every fusion is read against, docs/EVAL.md),
# then the fixed blends, then adaptive; a fusion this order does not name yet comes last.
_TABLE_ORDER = ("dense", "bm25", "weighted", "boost", "rrf", "adaptive")
FUSIONS = tuple(
    sorted(fusions.FUSIONS, key=lambda f: _TABLE_ORDER.index(f) if f in _TABLE_ORDER else len(_TABLE_ORDER))
)
DATASETS = ("locomo", "locomo-proactive", "scifact", "scifact-train", "wordnet")
# Not a retrieval set: the dedupe gate's labelled pairs (tooling/evaluation/dedupe_pairs.py).
DEDUPE = "dedupe"


def _run(factory: Callable[[], Coroutine[Any, Any, Any]]) -> Any:
    """tooling.console.run_async, exiting 1 when it has no result to print (stopped by Ctrl-C)."""
    from tooling.console import run_async

    result = run_async(factory)
    if result is None:
        raise SystemExit(1)
    return result


def _default_data_dir() -> Path:
    return Path.cwd().parent / "shared" / "data"


def cmd_eval(args: argparse.Namespace) -> None:
    from hypermnesia.settings import CommonSettings
    from hypermnesia.wording import count
    from tooling.console import configure_logging, load_settings
    from tooling.evaluation.run import depth_for, evaluate, format_bar, format_categories, format_table

    if args.dataset == DEDUPE:
        cmd_eval_dedupe(args)
        return
    settings = load_settings(CommonSettings)
    configure_logging("WARNING")
    if args.ask:
        _eval_ask(args, settings.database_url)
        return
    fusions = list(FUSIONS) if args.fusion == "all" else [args.fusion]
    results = _run(
        lambda: evaluate(
            args.dataset,
            fusions,
            Path(args.data_dir),
            settings.database_url,
            concurrency=args.concurrency or 8,
            max_corpora=args.corpora,
            time_boosts=args.time_boosts,
        )
    )
    if args.json:
        print(json.dumps([_result_json(r) for r in results], indent=2))
    else:
        print(f"{args.dataset}: {count(results[0].questions, 'question')}, k={depth_for(args.dataset)}")
        print(format_table(args.dataset, results))
        bar = format_bar(args.dataset, results)
        if bar:
            print(bar)
        details = format_categories(args.dataset, results)
        if details:
            print(details)


def _result_json(r: Any) -> dict[str, Any]:
    return r.__dict__ | {
        "queries_per_second": r.queries_per_second,
        "splits": {name: _result_json(s) for name, s in r.splits.items()},
    }


def _boosts(text: str) -> list[float]:
    try:
        values = [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        values = []
    if not values or any(not 0.0 <= v <= 10.0 for v in values):
        raise argparse.ArgumentTypeError(
            f"{text!r}: give weights between 0 and 10, comma-separated (e.g. 0,0.05,0.1)"
        )
    return values


def cmd_eval_dedupe(args: argparse.Namespace) -> None:
    from hypermnesia.settings import CurationSettings
    from tooling.console import configure_logging, load_settings
    from tooling.evaluation.dedupe_run import evaluate, format_report

    settings = load_settings(CurationSettings)
    configure_logging("WARNING")
    outcomes = _run(
        lambda: evaluate(
            Path(args.data_dir), settings.database_url, concurrency=min(args.concurrency or 4, 4)
        )
    )
    print(f"dedupe gate: {len(outcomes)} labelled pairs (HM_DEDUPE_THRESHOLD {settings.dedupe_threshold:g},")
    print(f"HM_DEDUPE_CONTENT_THRESHOLD {settings.dedupe_content_threshold:g})")
    print(format_report(outcomes, settings))


def _floors(text: str) -> list[str]:
    floors = [f.strip() for f in text.split(",") if f.strip()]
    for floor in floors:
        try:
            ok = 0.0 <= float(floor) <= 1.0
        except ValueError:
            ok = False
        if not ok:
            raise argparse.ArgumentTypeError(f"{floor!r} is not a similarity between 0 and 1")
    return floors


def _eval_ask(args: argparse.Namespace, database_url: str | None) -> None:
    from tooling.console import fail
    from tooling.evaluation.abstain import DATASETS as ASK_DATASETS
    from tooling.evaluation.abstain import DEFAULT_FLOOR, OFF, evaluate_abstention, format_abstention

    if args.dataset not in ASK_DATASETS:
        fail(f"--ask measures the Dialectic on {' or '.join(ASK_DATASETS)}; pick one of them", 2)
    floors = args.floors or [f"{DEFAULT_FLOOR:g}"]
    results = _run(
        lambda: evaluate_abstention(
            args.dataset,
            [OFF, *floors],
            Path(args.data_dir),
            database_url,
            concurrency=args.concurrency or 8,
            max_corpora=args.corpora,
        )
    )
    if args.json:
        print(
            json.dumps(
                [
                    {
                        "setting": r.setting,
                        "lexical_only": r.lexical_only,
                        "groups": {g: t.__dict__ for g, t in r.groups.items()},
                    }
                    for r in results
                ],
                indent=2,
            )
        )
    else:
        print(format_abstention(results))


def register(sub: argparse._SubParsersAction, bench: argparse._SubParsersAction) -> None:
    ev = sub.add_parser(
        "eval",
        help="retrieval quality on a dev set through the real service path (or, with --dataset dedupe, "
        "the dedupe gate on its labelled pairs)",
    )
    ev.add_argument("--dataset", choices=(*DATASETS, DEDUPE), required=True)
    ev.add_argument("--fusion", choices=(*FUSIONS, "all"), default="all")
    ev.add_argument(
        "--data-dir",
        default=str(_default_data_dir()),
        help="folder holding locomo/ and scifact/ (default: ../shared/data; wordnet is read from"
        " Debian's wordnet-base)",
    )
    ev.add_argument(
        "--concurrency",
        type=int,
        default=None,
        help="questions in flight (default 8)",
    )
    ev.add_argument(
        "--corpora", type=int, default=None, help="only the first N stores (LoCoMo conversations)"
    )
    ev.add_argument(
        "--ask",
        action="store_true",
        help="measure the Dialectic's abstention instead (locomo or scifact): off-topic questions "
        "answered with a claim and answerable ones citing their evidence, with abstention off and at "
        "each floor",
    )
    ev.add_argument(
        "--floors",
        type=_floors,
        default=None,
        help="with --ask: relevance floors to measure, comma-separated (default HM_DIALECTIC_MIN_SIMILARITY's default)",
    )
    ev.add_argument(
        "--time-boosts",
        type=_boosts,
        default=None,
        help="measure each fusion under each of these HM_TIME_BOOST weights, comma-separated, side "
        "by side over one import (the sweep that chooses it; default: the setting's value)",
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
    main(
        args.memories,
        args.queries,
        settings.database_url,
        settings.data_dir / "bench-vectors",
        args.json,
        fusions=args.fusions,
        deliveries=args.deliveries,
        at=args.at,
    )


def register_bench(bench: argparse._SubParsersAction) -> None:
    b = bench.add_parser("search", help="search latency (gRPC and REST) and ANN recall on a synthetic store")
    b.add_argument("--memories", type=int, default=10_000)
    b.add_argument("--queries", type=int, default=200)
    b.add_argument(
        "--fusions",
        nargs="+",
        choices=FUSIONS,
        metavar="FUSION",
        help="also time the gRPC path under each of these fusions, side by side in one run "
        f"({', '.join(FUSIONS)})",
    )
    b.add_argument(
        "--deliveries",
        nargs="+",
        choices=("on", "off"),
        metavar="ARM",
        help="also time REST through a gateway with the delivery log on and one with it off, side by "
        "side in one run, taking turns (on, off)",
    )
    b.add_argument(
        "--at",
        nargs="*",
        type=int,
        metavar="MEMORIES",
        help="also measure the store at these smaller sizes first, in the same run, as it grows "
        "(default: 100000 when --memories is larger; none with the flag alone)",
    )
    b.add_argument("--json", action="store_true")
    b.set_defaults(func=cmd_bench_search)
