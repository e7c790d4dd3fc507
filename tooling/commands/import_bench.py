"""`hypermnesia bench import` (registered by tooling.cli)."""

from __future__ import annotations

import argparse


def cmd_bench_import(args: argparse.Namespace) -> None:
    from tooling.bench.import_bench import MAX_BATCH, MAX_RECORDS, main
    from tooling.console import configure_logging, fail

    if not 1 <= args.records <= MAX_RECORDS:
        fail(f"--records must be between 1 and {MAX_RECORDS:,}")
    if not 1 <= args.batch <= MAX_BATCH:
        fail(f"--batch must be between 1 and {MAX_BATCH:,} (curation's limit per call)")
    configure_logging("WARNING")
    # A database of its own on --database-url's server when given, else on an embedded one.
    main(args.source, args.records, args.batch, args.database_url, args.json)


def register(sub: argparse._SubParsersAction, bench: argparse._SubParsersAction) -> None:
    b = bench.add_parser(
        "import",
        help="bulk import through POST /records/import against the embedder's own throughput on the"
        " same texts, side by side, with the import's time per stage; the raw log verified after",
    )
    b.add_argument(
        "--source",
        choices=("locomo", "synthetic"),
        default="locomo",
        help="LoCoMo's turns or synthetic 20-100 word turns",
    )
    b.add_argument("--records", type=int, default=3000, help="records to import (default 3000)")
    b.add_argument("--batch", type=int, default=250, help="records per POST (default 250)")
    b.add_argument("--database-url", default=None, help="a Postgres server to use (default: an embedded one)")
    b.add_argument("--json", action="store_true")
    b.set_defaults(func=cmd_bench_import)
