"""`hypermnesia` subcommands of the curation area (registered by hypermnesia.cli): the admin CLI
of seed 001 (verify, purge, export, import, reindex), rebuild, and document ingestion."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from hypermnesia.errors import HypermnesiaError, StartupError


def _settings() -> tuple[Any, Any]:
    from hypermnesia.cli import configure_logging, load_settings
    from hypermnesia.settings import CurationSettings, EmbedderSettings

    curation = load_settings(CurationSettings)
    configure_logging("WARNING" if curation.log_level == "INFO" else curation.log_level)
    return curation, load_settings(EmbedderSettings)


def _bar(total: int | None, unit: str, desc: str) -> Any:
    from tqdm import tqdm

    return tqdm(total=total, unit=unit, desc=desc, file=sys.stderr, dynamic_ncols=True, leave=False)


def _fail(message: str, code: int = 1) -> None:
    print(f"hypermnesia: {message}", file=sys.stderr)
    raise SystemExit(code)


def _run(factory: Any) -> Any:
    import asyncio

    try:
        return asyncio.run(factory())
    except (StartupError, HypermnesiaError) as exc:
        _fail(str(exc))


def cmd_verify(args: argparse.Namespace) -> None:
    from services.curation import admin

    curation, _ = _settings()

    async def go() -> Any:
        async with admin.open_pool(curation) as pool:
            total = await pool.fetchval("SELECT count(*) FROM records")
            with _bar(total, "rec", "verify") as bar:
                return await admin.verify(pool, bar)

    result = _run(go)
    if result.first_broken_seq is None:
        print(f"verify: ok, {result.checked} records, the chain holds")
        return
    _fail(f"verify: BROKEN at seq {result.first_broken_seq}: {result.reason} "
          f"({result.checked} records before it verified)", 3)


def cmd_purge(args: argparse.Namespace) -> None:
    from services.curation import admin

    curation, _ = _settings()

    async def go() -> int:
        async with admin.open_pool(curation) as pool:
            return await admin.purge(pool, args.id, admin.admin_principal())

    removed = _run(go)
    print(f"purge: removed {args.id} and the text of {removed} records; a purge record audits it")


def cmd_export(args: argparse.Namespace) -> None:
    from services.curation import admin

    curation, _ = _settings()

    async def go() -> int:
        async with admin.open_pool(curation) as pool:
            where = " WHERE scope = ANY($1::text[])" if args.scope else ""
            total = await pool.fetchval(f"SELECT count(*) FROM memories{where}", *([args.scope] if args.scope else []))
            out = sys.stdout if args.out == "-" else open(args.out, "w", encoding="utf-8")  # noqa: SIM115
            try:
                with _bar(total, "mem", "export") as bar:
                    return await admin.export(pool, out, args.scope, bar)
            finally:
                if out is not sys.stdout:
                    out.close()

    count = _run(go)
    print(f"export: {count} memories written to {'stdout' if args.out == '-' else args.out}", file=sys.stderr)


def cmd_import(args: argparse.Namespace) -> None:
    from services.curation import admin

    curation, embedder = _settings()
    source = sys.stdin if args.file == "-" else None
    if source is None and not Path(args.file).is_file():
        _fail(f"{args.file} is not a file; give the path of a JSONL dump (or - for stdin)")

    async def go() -> Any:
        encoder = admin.LocalEncoder(embedder)
        try:
            async with admin.open_pool(curation) as pool:
                await admin.require_pin(pool, encoder)
                handle = source or open(args.file, encoding="utf-8", errors="replace")  # noqa: SIM115
                try:
                    with _bar(None, "mem", "import") as bar:
                        return await admin.import_dump(pool, encoder, handle, admin.admin_principal(), bar)
                finally:
                    if handle is not sys.stdin:
                        handle.close()
        finally:
            await encoder.close()

    report = _run(go)
    for problem in report.bad_lines:
        print(f"import: skipped {problem}", file=sys.stderr)
    print(f"import: {report.summary()}")
    if report.bad_lines:
        raise SystemExit(4)


def cmd_reindex(args: argparse.Namespace) -> None:
    from services.curation import admin

    curation, embedder = _settings()

    async def go() -> tuple[int, str, int]:
        encoder = admin.LocalEncoder(embedder)
        try:
            async with admin.open_pool(curation) as pool:
                total = await pool.fetchval("SELECT count(*) FROM memories")
                with _bar(total, "mem", "reindex") as bar:
                    count = await admin.reindex(pool, encoder, bar)
                return count, encoder.model_id, encoder.dimension
        finally:
            await encoder.close()

    count, model_id, dimension = _run(go)
    print(f"reindex: {count} memories re-embedded with {model_id} ({dimension} dims); pin updated. "
          "Restart the services with the same HM_EMBEDDING_* settings")


def cmd_rebuild(args: argparse.Namespace) -> None:
    from services.curation import admin
    from services.curation.rebuild import Rebuilder

    curation, embedder = _settings()

    async def go() -> Any:
        encoder = admin.LocalEncoder(embedder) if not args.check else None
        try:
            async with admin.open_pool(curation) as pool:
                if encoder is not None:
                    await admin.require_pin(pool, encoder)
                total = await pool.fetchval("SELECT count(*) FROM records")
                rebuilder = Rebuilder(pool, encoder.embed if encoder else _no_embed)
                with _bar(total, "rec", "replay") as bar:
                    return await rebuilder.rebuild(args.scope or None, check=args.check, progress=bar.update)
        finally:
            if encoder is not None:
                await encoder.close()

    report = _run(go)
    for line in report.differences:
        print(line)
    print(f"rebuild{' --check' if args.check else ''}: {report.summary()}")
    if args.check and report.differences:
        raise SystemExit(5)


async def _no_embed(texts: list[str]) -> Any:
    raise StartupError("rebuild --check does not embed")


def cmd_ingest(args: argparse.Namespace) -> None:
    from services.curation import admin
    from services.curation.ingest import Ingester, walk_markdown

    curation, embedder = _settings()
    root = Path(args.path)
    if not root.is_dir():
        _fail(f"{root} is not a folder; give the root of the tree to ingest")

    async def go() -> Any:
        encoder = admin.LocalEncoder(embedder)
        try:
            async with admin.open_pool(curation) as pool:
                await admin.require_pin(pool, encoder)
                files, skipped = walk_markdown(root)
                ingester = Ingester(pool, encoder.embed, encoder.count_tokens)
                with _bar(len(files), "file", "ingest") as bar:
                    report = await ingester.ingest_files(
                        admin.admin_principal(), args.scope or f"project:{args.repo}", args.repo, files,
                        progress=bar.update,
                    )
                report.skipped = skipped + report.skipped
                return report
        finally:
            await encoder.close()

    report = _run(go)
    for line in report.skipped:
        print(f"ingest: skipped {line}", file=sys.stderr)
    print(f"ingest: {report.summary()}")


def register(sub: argparse._SubParsersAction, bench: argparse._SubParsersAction) -> None:
    """Add this area's subcommands to `sub` and its benchmarks to `bench` (`hypermnesia bench NAME`)."""
    p = sub.add_parser("verify", help="walk the raw log's sha256 chain; name the first broken seq")
    p.set_defaults(func=cmd_verify)
    p = sub.add_parser("purge", help="GDPR erasure of a memory's text (audited; the chain still verifies)")
    p.add_argument("id", help="the memory id")
    p.set_defaults(func=cmd_purge)
    p = sub.add_parser("export", help="write every memory (archived too, no vectors) as JSONL")
    p.add_argument("--out", default="-", help="file to write, or - for stdout (default)")
    p.add_argument("--scope", action="append", help="only this scope (repeatable)")
    p.set_defaults(func=cmd_export)
    p = sub.add_parser("import", help="restore a JSONL dump: re-embed, keep ids and times, skip existing ids")
    p.add_argument("file", help="the dump, or - for stdin")
    p.set_defaults(func=cmd_import)
    p = sub.add_parser("reindex", help="re-embed everything with the configured model and move the pin")
    p.set_defaults(func=cmd_reindex)
    p = sub.add_parser("rebuild", help="re-derive the memories from the raw log")
    p.add_argument("--scope", action="append", help="only this scope (repeatable)")
    p.add_argument("--check", action="store_true", help="replay without swapping; print every difference")
    p.set_defaults(func=cmd_rebuild)
    p = sub.add_parser("ingest", help="ingest a tree of markdown files as document memories")
    p.add_argument("path", help="the root folder (its .gitignore is honoured)")
    p.add_argument("--repo", required=True, help="the repository name the documents belong to")
    p.add_argument("--scope", help="the scope to write to (default project:<repo>)")
    p.set_defaults(func=cmd_ingest)
