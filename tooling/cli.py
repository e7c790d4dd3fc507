"""The `hypermnesia` command: run services (`serve`, `up`, `mcp`) and, through the area modules in
tooling/commands/, administer the store, evaluate and benchmark. `python -m hypermnesia` runs it."""

from __future__ import annotations

import argparse
import importlib
import os
import sys

# No module-level import of the settings (pydantic) or the services: `hypermnesia hook` runs on
# every prompt within a 1.5 s budget and needs neither; each command imports what it uses.

SERVICES = ("embedder", "retrieval", "curation", "gateway")


def cmd_serve(args: argparse.Namespace) -> None:
    from hypermnesia.settings import CurationSettings, EmbedderSettings, GatewaySettings, RetrievalSettings
    from tooling.console import configure_logging, load_settings, run_async

    if args.service == "embedder":
        from services.embedder.server import serve as embedder_serve

        embedder = load_settings(EmbedderSettings)
        configure_logging(embedder.log_level)
        run_async(lambda: embedder_serve(embedder))
    elif args.service == "retrieval":
        from services.retrieval.server import serve as retrieval_serve

        retrieval = load_settings(RetrievalSettings)
        configure_logging(retrieval.log_level)
        run_async(lambda: retrieval_serve(retrieval))
    elif args.service == "curation":
        from services.curation.server import serve as curation_serve

        curation = load_settings(CurationSettings)
        configure_logging(curation.log_level)
        run_async(lambda: curation_serve(curation))
    else:
        from gateway.app import serve as gateway_serve

        gateway = load_settings(GatewaySettings)
        configure_logging(gateway.log_level)
        run_async(lambda: gateway_serve(gateway))


def cmd_mcp(args: argparse.Namespace) -> None:
    from gateway.stdio import serve_stdio
    from hypermnesia.scopes import project_name_for_root
    from hypermnesia.settings import GatewaySettings
    from tooling.console import configure_logging, load_settings, run_async
    from tooling.local_token import read_local_token
    from tooling.stack_record import resolve_addresses

    settings = resolve_addresses(load_settings(GatewaySettings))
    configure_logging(settings.log_level)  # to stderr: stdout carries the protocol
    # As the hooks do: HM_TOKEN, else the first run's token kept in HM_DATA_DIR.
    token = settings.token or read_local_token(settings.data_dir)
    project = args.project
    # Claude Code tells a stdio server its project folder this way (it answers no roots/list).
    claude_dir = os.environ.get("CLAUDE_PROJECT_DIR", "").strip()
    if not project and claude_dir:
        project = project_name_for_root(os.path.abspath(claude_dir))
    run_async(lambda: serve_stdio(settings, token=token, project=project))


def cmd_up(args: argparse.Namespace) -> None:
    from hypermnesia.errors import StartupError
    from hypermnesia.settings import CurationSettings, EmbedderSettings, GatewaySettings, RetrievalSettings
    from tooling.console import configure_logging, fail, load_settings
    from tooling.up import StackSettings, run_stack

    # Every service's settings are checked here, before the database or any child starts.
    settings = StackSettings(
        embedder=load_settings(EmbedderSettings),
        retrieval=load_settings(RetrievalSettings),
        curation=load_settings(CurationSettings),
        gateway=load_settings(GatewaySettings),
    )
    configure_logging(settings.gateway.log_level)
    try:
        raise SystemExit(run_stack(settings))
    except StartupError as exc:
        fail(str(exc))


UP_VARIABLES = """\
main variables (HM_*; a command run with the same values reaches this stack):
  HM_DATA_DIR            the embedded Postgres, the model cache, the first-run token
                         (local-token), the hook state and the checkpoint key (default:
                         ~/.local/share/hypermnesia)
  HM_DATABASE_URL        use this Postgres (with pgvector) instead of the embedded one
  HM_HOST                bind address of every service (default 127.0.0.1)
  HM_GATEWAY_PORT        MCP + REST + the web UI (default 8765)
  HM_EMBEDDER_PORT, HM_RETRIEVAL_PORT, HM_CURATION_PORT
                         the gRPC services (default 50051, 50052, 50053); each has a
                         _METRICS_PORT too (9101, 9102, 9103)
  HM_AUTH_TOKENS         tokens as JSON; with none, the first run makes one for you
  HM_REQUIRE_AUTH        false: every caller is anonymous with every scope
  HM_LLM_BASE_URL, HM_LLM_MODEL
                         an OpenAI-compatible endpoint for the Dreamer and the Dialectic
  HM_LOG_LEVEL           DEBUG, INFO (default), WARNING, ERROR
"""

# Each area adds its own subcommands (admin, eval, bench, ...) through `register(subparsers)`.
COMMAND_MODULES = (
    "tooling.commands.embedder",
    "tooling.commands.retrieval",
    "tooling.commands.load",
    "tooling.commands.import_bench",
    "tooling.bench.viz",
    "tooling.bench.small_scopes",
    "tooling.bench.consolidation",
    "tooling.bench.replica_lag",
    "tooling.bench.tools",
    "tooling.bench.mcp",
    "tooling.commands.structure",
    "tooling.commands.admin",
    "tooling.commands.tokens",
    "tooling.commands.intelligence",
    "tooling.commands.fusion",
    "tooling.commands.deliveries",
    "tooling.hooks",
    "tooling.connect",
)


# The commands that run a service (or the stack) and stay resident: they need none of the area
# modules, whose imports (the benchmarks' onnx, ml_dtypes, numpy, httpx, ...) cost every service
# process ~50 MB of resident memory it never uses.
RESIDENT_COMMANDS = ("serve", "up", "mcp")


def build_parser(*, areas: bool = True) -> argparse.ArgumentParser:
    """The whole command line; `areas=False` leaves out COMMAND_MODULES' subcommands."""
    parser = argparse.ArgumentParser(prog="hypermnesia", description="Memory service for AI agents.")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run one service in the foreground")
    serve.add_argument("service", choices=SERVICES)
    serve.set_defaults(func=cmd_serve)
    up = sub.add_parser(
        "up",
        help="run the whole stack on this machine (embedded Postgres if needed)",
        description="Run the whole stack on this machine: the embedded Postgres (unless "
        "HM_DATABASE_URL is set) and the embedder, curation, retrieval and gateway services, "
        "supervised. Every setting is an HM_* environment variable (docs/SETTINGS.md).",
        epilog=UP_VARIABLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    up.set_defaults(func=cmd_up)
    mcp = sub.add_parser(
        "mcp",
        help="MCP over stdio for clients that spawn their servers (token: HM_TOKEN, else the "
        "first-run token); needs the stack running (hypermnesia up, same HM_* settings)",
    )
    mcp.add_argument(
        "--project",
        default="",
        help="project slug: memories go to project:<slug> (default: the project of $CLAUDE_PROJECT_DIR, "
        "else the client's workspace root)",
    )
    mcp.set_defaults(func=cmd_mcp)
    bench = sub.add_parser("bench", help="benchmarks that print a table")
    bench_sub = bench.add_subparsers(dest="bench", required=True)
    for module in COMMAND_MODULES if areas else ():
        importlib.import_module(module).register(sub, bench_sub)
    return parser


def main(argv: list[str] | None = None) -> None:
    words = sys.argv[1:] if argv is None else argv
    if words[:1] == ["hook"]:
        # A hook runs on every prompt and edit within a 1.5 s budget: skip building the whole
        # command line (its imports cost most of a second) and go straight to the hook.
        from tooling.hooks import main as hook_main

        hook_main(words[1:])
        return
    resident = bool(words) and words[0] in RESIDENT_COMMANDS
    args = build_parser(areas=not resident).parse_args(argv)
    args.func(args)
