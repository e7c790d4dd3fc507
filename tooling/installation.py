"""How to run this installation's `hypermnesia` from anywhere: the hooks Claude Code runs (with a
minimal PATH), the line `up` prints, and what `connect` writes. No third-party imports."""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from pathlib import Path


def command_words() -> list[str]:
    """The absolute command of this installation: the `hypermnesia` script beside this interpreter
    (a venv's bin), else this interpreter with `-m hypermnesia`. The interpreter's path is kept as
    it is, not resolved: a venv's python is a symlink whose target has no access to the venv."""
    python = Path(sys.executable).absolute()
    script = python.parent / "hypermnesia"
    if script.is_file() and os.access(script, os.X_OK):
        return [str(script)]
    return [str(python), "-m", "hypermnesia"]


def command_line() -> str:
    return shlex.join(command_words())


def how_to_call() -> str:
    """A line saying how to call `hypermnesia` in a shell: by name when PATH finds this one."""
    words = command_words()
    found = shutil.which("hypermnesia")
    if len(words) == 1 and found and Path(found).absolute() == Path(words[0]):
        return "hypermnesia (on PATH)"
    if len(words) == 1:
        # A link in ~/.local/bin (on PATH in most shells) rather than the venv's bin on PATH, which
        # would put the venv's python first too.
        return (
            f"{shlex.join(words)}  (not on PATH; to call it by name: ln -s {shlex.join(words)} ~/.local/bin/)"
        )
    return shlex.join(words)
