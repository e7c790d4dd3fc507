"""The admin subcommands (registered by tooling.cli): verify, checkpoint, why, purge, redact, export, import,
reindex and rebuild of the store, and document ingestion. They work on the database directly (curation's
maintenance functions in services/curation/admin.py) with the model run in this process."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from hypermnesia.errors import StartupError
from hypermnesia.settings import CurationSettings, EmbedderSettings
from hypermnesia.wording import count
from tooling.console import configure_logging, fail, load_settings, run_async


def _settings() -> tuple[CurationSettings, EmbedderSettings]:
    curation = load_settings(CurationSettings)
    configure_logging("WARNING" if curation.log_level == "INFO" else curation.log_level)
    return curation, load_settings(EmbedderSettings)


def _bar(total: int | None, unit: str, desc: str) -> Any:
    """A progress bar on a terminal, gone (leave=False) before the summary line is printed. Where
    stderr is not a terminal (a pipe, a log, an agent's captured output) there is none: its
    redraws would land among, or after, the summary (disable=None)."""
    from tqdm import tqdm

    return tqdm(
        total=total, unit=unit, desc=desc, file=sys.stderr, dynamic_ncols=True, leave=False, disable=None
    )


def cmd_verify(args: argparse.Namespace) -> None:
    if args.forgotten:
        _verify_forgotten(args.forgotten)
        return
    from services.curation import admin, maintenance_repo

    curation, _ = _settings()

    async def go() -> Any:
        async with admin.open_pool(curation) as pool:
            total = await maintenance_repo.count_records(pool)
            with _bar(total, "rec", "verify") as bar:
                return await admin.verify(pool, bar)

    result = run_async(go)
    if result.first_broken_seq is not None:
        fail(
            f"verify: BROKEN at seq {result.first_broken_seq}: {result.reason} "
            f"({count(result.checked, 'record')} before it verified)",
            3,
        )
    print(f"verify: ok, {count(result.checked, 'record')}, the chain holds")
    if args.checkpoint:
        _verify_checkpoints(curation, args.checkpoint)


def _verify_checkpoints(curation: CurationSettings, files: list[str]) -> None:
    from hypermnesia.errors import InvalidArgument
    from services.curation import admin, checkpoints

    try:
        key, _, _ = checkpoints.load_key(curation.checkpoint_key, False, curation.data_dir)
    except StartupError as exc:
        fail(f"verify --checkpoint: {exc}")
    bodies = []
    for name in files:
        try:
            bodies.append((name, checkpoints.load(Path(name), key)))
        except InvalidArgument as exc:
            fail(f"verify --checkpoint: REFUSED {exc.message}", 3)

    async def go() -> list[Any]:
        async with admin.open_pool(curation) as pool, pool.acquire() as conn:
            return [await checkpoints.check(conn, body, name) for name, body in bodies]

    broken = False
    for result in run_async(go):
        if result.ok:
            print(f"verify --checkpoint {result.path}: ok, the log up to seq {result.seq} is the one signed")
        else:
            broken = True
            print(
                f"hypermnesia: verify --checkpoint {result.path}: BROKEN at seq {result.first_bad_seq}: "
                f"{result.reason} (signed at seq {result.seq})",
                file=sys.stderr,
            )
    if broken:
        raise SystemExit(3)


def _verify_forgotten(memory_id: str) -> None:
    from services.curation import admin

    curation, _ = _settings()

    async def go() -> Any:
        async with admin.open_pool(curation) as pool:
            return await admin.forgotten(pool, memory_id)

    report = run_async(go)
    for line in report.lines():
        print(line)
    if report.holding:
        fail(
            f"verify --forgotten: {memory_id} is NOT forgotten: {', '.join(report.holding)} still hold it", 6
        )
    print(f"verify --forgotten: {memory_id} is forgotten: no derived place holds it")


def cmd_checkpoint(args: argparse.Namespace) -> None:
    from services.curation import admin, checkpoints

    curation, _ = _settings()

    async def go() -> tuple[dict[str, Any], Path, bool]:
        key, path, created = checkpoints.load_key(curation.checkpoint_key, True, curation.data_dir)
        async with admin.open_pool(curation) as pool, pool.acquire() as conn:
            return await checkpoints.make(conn, key, args.block), path, created

    body, key_file, created = run_async(go)
    if created:
        print(
            f"checkpoint: created a signing key at {key_file} (0600); keep a copy off this host: "
            "verify needs it",
            file=sys.stderr,
        )
    if args.out == "-":
        import json

        print(json.dumps(body, indent=1, sort_keys=True))
        return
    out = Path(args.out) if args.out else Path(checkpoints.default_name(body))
    if out.is_dir():
        out = out / checkpoints.default_name(body)
    checkpoints.write(body, out)
    print(
        f"checkpoint: seq {body['seq']} ({body['record_hash'][:16]}) signed by key {body['key_id']} -> {out}"
    )


def cmd_why(args: argparse.Namespace) -> None:
    from services.curation import admin, provenance

    curation, _ = _settings()

    async def go() -> dict[str, Any]:
        async with admin.open_pool(curation) as pool, pool.acquire() as conn:
            return await provenance.provenance(conn, args.id)

    data = run_async(go)
    if args.json:
        import json

        print(json.dumps(data, indent=1, sort_keys=True))
    else:
        print("\n".join(provenance.render(data)))
    if not data["all_verify"]:
        raise SystemExit(3)


def cmd_purge(args: argparse.Namespace) -> None:
    from services.curation import admin

    curation, _ = _settings()

    async def go() -> int:
        async with admin.open_pool(curation) as pool:
            return await admin.purge(pool, args.id, admin.admin_principal())

    removed = run_async(go)
    print(f"purge: removed {args.id} and the text of {count(removed, 'record')}; a purge record audits it")


def cmd_export(args: argparse.Namespace) -> None:
    from services.curation import admin, maintenance_repo

    curation, _ = _settings()

    async def go() -> int:
        async with admin.open_pool(curation) as pool:
            total = await maintenance_repo.count_memories(pool, args.scope)
            out = sys.stdout if args.out == "-" else open(args.out, "w", encoding="utf-8")  # noqa: SIM115
            try:
                with _bar(total, "mem", "export") as bar:
                    return await admin.export(pool, out, args.scope, bar)
            finally:
                if out is not sys.stdout:
                    out.close()

    written = run_async(go)
    where = "stdout" if args.out == "-" else args.out
    print(f"export: {count(written, 'memory')} written to {where}", file=sys.stderr)


def cmd_import(args: argparse.Namespace) -> None:
    from itertools import chain

    from services.curation import admin, fusion_refits
    from tooling import moving_in
    from tooling.encoder import LocalEncoder

    curation, embedder = _settings()
    path = None if args.file == "-" else Path(args.file)
    if path is not None and not path.exists():
        fail(
            f"{args.file} is not a file or a folder; give a JSONL dump, a Markdown file or a folder of notes (or - for stdin)"
        )
    markdown = path is not None and (path.is_dir() or path.suffix.lower() in moving_in.MARKDOWN_SUFFIXES)
    if markdown and path is not None and not moving_in.markdown_files(path):
        fail(f"{args.file} holds no Markdown files (.md, .markdown)")
    principal = admin.admin_principal()

    async def go() -> Any:
        encoder = None if args.dry_run else LocalEncoder(embedder)
        try:
            async with admin.open_pool(curation) as pool:
                if encoder is not None:
                    await admin.require_pin(pool, encoder)
                handle = None
                if markdown:
                    assert path is not None
                    lines: Any = moving_in.markdown_dump_lines(path, args.scope, principal)
                else:
                    handle = sys.stdin if path is None else open(path, encoding="utf-8", errors="replace")  # noqa: SIM115
                    # An earlier server's export has no memory kinds; its lines are completed here.
                    lines = moving_in.normalised_dump_lines(handle, principal)
                    if args.scope:
                        lines = (_rescoped(line, args.scope) for line in lines)
                try:
                    with _bar(None, "mem", "import (dry run)" if args.dry_run else "import") as bar:
                        report = await admin.import_dump(
                            pool,
                            encoder,
                            chain(lines),
                            principal,
                            bar,
                            dry_run=args.dry_run,
                            redact=curation.redact,
                        )
                    if report.imported and not args.dry_run:  # one of adaptive fusion's refit moments
                        await fusion_refits.after_import(pool, report.scopes)
                    return report
                finally:
                    if handle is not None and handle is not sys.stdin:
                        handle.close()
        finally:
            if encoder is not None:
                await encoder.close()

    report = run_async(go)
    for problem in report.bad_lines:
        print(f"import: skipped {problem}", file=sys.stderr)
    verb = "import --dry-run (nothing written)" if args.dry_run else "import"
    print(f"{verb}: {report.summary()}")
    if report.bad_lines:
        raise SystemExit(4)


def _rescoped(line: str, scope: str) -> str:
    import json

    try:
        data = json.loads(line)
    except json.JSONDecodeError:
        return line
    if isinstance(data, dict):
        data["scope"] = scope
        return json.dumps(data, ensure_ascii=False)
    return line


def cmd_reindex(args: argparse.Namespace) -> None:
    from services.curation import admin, maintenance_repo
    from tooling.encoder import LocalEncoder

    curation, embedder = _settings()

    async def go() -> tuple[int, str, int]:
        encoder = LocalEncoder(embedder)
        try:
            async with admin.open_pool(curation) as pool:
                total = await maintenance_repo.count_memories(pool)
                with _bar(total, "mem", "reindex") as bar:
                    count = await admin.reindex(pool, encoder, bar)
                return count, encoder.model_id, encoder.dimension
        finally:
            await encoder.close()

    done, model_id, dimension = run_async(go)
    print(
        f"reindex: {count(done, 'memory')} re-embedded with {model_id} ({dimension} dims); pin updated. "
        "Restart the services with the same HM_EMBEDDING_* settings"
    )


def cmd_rebuild(args: argparse.Namespace) -> None:
    from services.curation import admin, maintenance_repo
    from services.curation.rebuild import Rebuilder
    from tooling.encoder import LocalEncoder

    curation, embedder = _settings()

    async def go() -> Any:
        encoder = LocalEncoder(embedder) if not args.check else None
        try:
            async with admin.open_pool(curation) as pool:
                if encoder is not None:
                    await admin.require_pin(pool, encoder)
                total = await maintenance_repo.count_records(pool)
                rebuilder = Rebuilder(pool, encoder.embed if encoder else _no_embed)
                with _bar(total, "rec", "replay") as bar:
                    return await rebuilder.rebuild(args.scope or None, check=args.check, progress=bar.update)
        finally:
            if encoder is not None:
                await encoder.close()

    report = run_async(go)
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
    from tooling.encoder import LocalEncoder

    curation, embedder = _settings()
    root = Path(args.path)
    if not root.is_dir():
        fail(f"{root} is not a folder; give the root of the tree to ingest")

    async def go() -> Any:
        encoder = LocalEncoder(embedder)
        try:
            async with admin.open_pool(curation) as pool:
                await admin.require_pin(pool, encoder)
                files, skipped = walk_markdown(root)
                ingester = Ingester(pool, encoder.embed, encoder.count_tokens, curation.redact)
                with _bar(len(files), "file", "ingest") as bar:
                    report = await ingester.ingest_files(
                        admin.admin_principal(),
                        args.scope or f"project:{args.repo}",
                        args.repo,
                        files,
                        progress=bar.update,
                    )
                report.skipped = skipped + report.skipped
                return report
        finally:
            await encoder.close()

    report = run_async(go)
    for line in report.skipped:
        print(f"ingest: skipped {line}", file=sys.stderr)
    print(f"ingest: {report.summary()}")


def cmd_redact(args: argparse.Namespace) -> None:
    from services.curation import admin, redaction
    from tooling.encoder import LocalEncoder

    curation, embedder = _settings()

    async def go() -> Any:
        if not args.apply:
            async with admin.open_pool(curation) as pool:
                return await redaction.scan(pool, args.scope)
        encoder = LocalEncoder(embedder)
        try:
            async with admin.open_pool(curation) as pool:
                await admin.require_pin(pool, encoder)
                return await redaction.apply(pool, encoder.embed, admin.admin_principal(), args.scope)
        finally:
            await encoder.close()

    report = run_async(go)
    for line in report.lines():
        print(line)
    print(f"redact{' --apply' if args.apply else ' --scan'}: {report.summary()}")


def register(sub: argparse._SubParsersAction, bench: argparse._SubParsersAction) -> None:
    """Add this area's subcommands to `sub` and its benchmarks to `bench` (`hypermnesia bench NAME`)."""
    p = sub.add_parser("verify", help="walk the raw log's sha256 chain; name the first broken seq")
    p.add_argument(
        "--checkpoint",
        nargs="+",
        metavar="FILE",
        help="also prove the log up to each signed checkpoint is unchanged (catches a rewritten chain)",
    )
    p.add_argument(
        "--forgotten", metavar="ID", help="check that no derived place still holds a deleted or purged memory"
    )
    p.set_defaults(func=cmd_verify)
    p = sub.add_parser(
        "checkpoint", help="sign the raw log's head with the key outside the database (HM_CHECKPOINT_KEY)"
    )
    p.add_argument(
        "--out", help="file or folder to write (default: checkpoint-<seq>-<time>.json here; - = stdout)"
    )
    p.add_argument(
        "--block",
        type=int,
        default=1000,
        help="also sign the chain hash every this many records (default 1000)",
    )
    p.set_defaults(func=cmd_checkpoint)
    p = sub.add_parser("why", help="the provenance of a memory: its records, lineage, evidence and decisions")
    p.add_argument("id", help="the memory id")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=cmd_why)
    p = sub.add_parser("purge", help="GDPR erasure of a memory's text (audited; the chain still verifies)")
    p.add_argument("id", help="the memory id")
    p.set_defaults(func=cmd_purge)
    p = sub.add_parser(
        "redact",
        help="find secrets already stored (ids, kinds and counts, never the text); --apply masks them "
        "and erases the raw-log texts holding them (the chain still verifies)",
    )
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--scan", action="store_true", help="report only (the default)")
    mode.add_argument("--apply", action="store_true", help="mask what --scan reports")
    p.add_argument("--scope", action="append", help="only this scope (repeatable)")
    p.set_defaults(func=cmd_redact)
    p = sub.add_parser("export", help="write every memory (archived too, no vectors) as JSONL")
    p.add_argument("--out", default="-", help="file to write, or - for stdout (default)")
    p.add_argument("--scope", action="append", help="only this scope (repeatable)")
    p.set_defaults(func=cmd_export)
    p = sub.add_parser(
        "import",
        help="restore a JSONL dump (this store's, or an earlier hypermnesia server's export), or import "
        "Markdown memory files (CLAUDE.md, MEMORY.md, a folder of notes): re-embed, keep ids and times, "
        "skip existing ids",
    )
    p.add_argument("file", help="the dump, a Markdown file, a folder of Markdown notes, or - for stdin")
    p.add_argument(
        "--scope",
        help="put every memory in this scope (default: the dump's own scopes; for Markdown, the project of "
        "the file's folder, as an MCP session or hook started there would use)",
    )
    p.add_argument(
        "--dry-run", action="store_true", help="check and count what would be imported; write nothing"
    )
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
