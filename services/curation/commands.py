"""`hypermnesia` subcommands of the curation area (registered by hypermnesia.cli)."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction, bench: argparse._SubParsersAction) -> None:
    """Add this area's subcommands to `sub` and its benchmarks to `bench` (`hypermnesia bench NAME`)."""
