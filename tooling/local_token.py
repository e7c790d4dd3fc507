"""The first-run token's file, HM_DATA_DIR/local-token (written by tooling/first_run.py), and how
the processes that act as the local user read it: the hooks and `hypermnesia mcp` when HM_TOKEN is
unset, and `connect` to say where it is. No third-party imports: the hooks read it on every prompt."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

TOKEN_FILE = "local-token"


def token_path(data_dir: Path) -> Path:
    return data_dir / TOKEN_FILE


def read_local_token(data_dir: Path) -> str:
    """The token kept in the data dir ('' when there is none or it cannot be read). The file holds
    the token on its first line; a JSON object with a "token" key is read too."""
    try:
        text = token_path(data_dir).read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return ""
    if text.startswith("{"):
        with contextlib.suppress(ValueError, AttributeError):
            return str(json.loads(text).get("token", "")).strip()
        return ""
    return text.splitlines()[0].strip() if text else ""
