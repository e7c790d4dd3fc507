"""Claude Code's configuration files, edited for `hook install` and `connect`.

Each edit adds our entries where they are missing and keeps every other entry (the file is read as
JSON and written back with two-space indents), refuses a file that is not a JSON object (nothing
changed), and returns what `connect --undo` needs to remove exactly what it added: the hooks and
server entries it wrote, a command or entry it replaced (put back), and the containers, the file
and the folder it created (removed again only while empty).

The files (docs/PROJECTS.md): hooks in `settings.json` / `settings.local.json` under `.claude/`
(`hooks` -> event -> [{matcher, hooks: [{type, command, timeout}]}]); MCP servers in a folder's
`.mcp.json` (`mcpServers` -> name -> entry) or, for one folder in the user's own config,
`~/.claude.json` (`projects` -> folder -> `mcpServers`).
"""

from __future__ import annotations

import contextlib
import difflib
import json
import os
import re
import shlex
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "CAPTURE",
    "HOOKS",
    "ConfigError",
    "Edit",
    "add_hooks",
    "add_server",
    "atomic_write",
    "hook_commands",
    "undo_edit",
]

# (our hook name, Claude Code's event, matcher); the capture hook serves three events.
CAPTURE = "capture"
HOOKS: tuple[tuple[str, str, str | None], ...] = (
    ("session-start", "SessionStart", None),
    ("pre-edit", "PreToolUse", "Edit|Write|MultiEdit"),
    ("prompt", "UserPromptSubmit", None),
    (CAPTURE, "Stop", None),
    (CAPTURE, "PreCompact", None),
    (CAPTURE, "SessionEnd", None),
)
# Seconds Claude Code lets a hook run: a bound for the case the hook's own 1.5 s budget cannot hold
# (a machine so loaded that the interpreter does not start); never reached otherwise.
HOOK_TIMEOUT_S = 10


class ConfigError(Exception):
    """A file we cannot edit safely; the message says what to do. Nothing was changed."""


@dataclass
class Edit:
    """One file's change: its text now and after (None: no file), what changes in words, and the
    record `undo_edit` takes (None when nothing changes)."""

    path: Path
    before: str | None
    after: str | None
    said: list[str] = field(default_factory=list)
    record: dict[str, Any] | None = None

    @property
    def changes(self) -> bool:
        return self.before != self.after

    def diff(self) -> str:
        return "".join(
            difflib.unified_diff(
                (self.before or "").splitlines(keepends=True),
                (self.after or "").splitlines(keepends=True),
                fromfile=f"{self.path} (now)" if self.before is not None else "/dev/null",
                tofile=f"{self.path} (after)" if self.after is not None else "/dev/null",
            )
        )

    def apply(self) -> None:
        if not self.changes:
            return
        if self.after is None:
            with contextlib.suppress(FileNotFoundError):
                self.path.unlink()
            for folder in reversed((self.record or {}).get("made_dirs", [])):
                with contextlib.suppress(OSError):  # not empty: it holds something else now
                    Path(folder).rmdir()
            return
        mode = self.path.stat().st_mode & 0o777 if self.path.exists() else None
        atomic_write(self.path, self.after, mode)


def atomic_write(path: Path, text: str, mode: int | None = None) -> None:
    """Write via a temporary file in the same folder and rename, so a reader never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _read(path: Path, what: str) -> tuple[str | None, dict[str, Any]]:
    """The file's text and its JSON object ({} when there is no file or it is blank)."""
    try:
        text = path.read_text(encoding="utf-8") if path.exists() else None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read {path}: {exc}. Nothing was changed") from exc
    if text is None or not text.strip():
        return text, {}
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ConfigError(
            f"{path} is not valid JSON ({exc}); fix or move it, then run {what} again. Nothing was changed"
        ) from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{path} does not hold a JSON object; fix it first. Nothing was changed")
    return text, data


_INDENT = re.compile(r"^[{\[][ \t]*\r?\n([ \t]+)\S")


def _dump(data: dict[str, Any], like: str | None) -> str:
    """The JSON text, indented as the file was (two spaces for a new or one-line file), so that a
    diff shows what changed and not a re-indented file."""
    found = _INDENT.match(like.lstrip()) if like else None
    indent: str | int = found.group(1) if found else 2
    return json.dumps(data, indent=indent, ensure_ascii=False) + "\n"


def _missing_dirs(path: Path) -> list[str]:
    """The folders above `path` that do not exist yet, outermost first (writing creates them)."""
    missing = []
    folder = path.parent
    while not folder.exists():
        missing.append(str(folder))
        folder = folder.parent
    return list(reversed(missing))


def _container(
    data: dict[str, Any], keys: Sequence[str], path: Path, kind: type
) -> tuple[Any, list[list[str]]]:
    """The object (or list) at `keys`, created where missing; and the key paths created."""
    node: Any = data
    created: list[list[str]] = []
    for depth, key in enumerate(keys):
        last = depth == len(keys) - 1
        if key not in node:
            node[key] = kind() if last else {}
            created.append(list(keys[: depth + 1]))
        node = node[key]
        if not isinstance(node, kind if last else dict):
            where = ".".join(keys[: depth + 1])
            raise ConfigError(
                f'{path}: "{where}" is not {"a list" if kind is list and last else "an object"}; '
                "fix it first. Nothing was changed"
            )
    return node, created


def _prune(data: dict[str, Any], created: list[list[str]]) -> None:
    """Remove, innermost first, the containers an edit created that are empty again."""
    for keys in sorted(created, key=len, reverse=True):
        parent: Any = data
        for key in keys[:-1]:
            parent = parent.get(key) if isinstance(parent, dict) else None
        if isinstance(parent, dict) and parent.get(keys[-1]) in ({}, []):
            del parent[keys[-1]]


# --- hooks ----------------------------------------------------------------------------------------


def hook_commands(
    executable: Sequence[str], gateway: str, data_dir: Path, *, capture: bool = True
) -> dict[str, str]:
    """Our hook name -> the shell command Claude Code runs: this installation's executable by its
    absolute path (the hook runs with Claude Code's PATH, which may not find it), this stack's
    gateway and data dir (for the first-run token and the hook state). Never the token. Without
    `capture`, no capture hook."""
    return {
        name: shlex.join([*executable, "hook", name, "--gateway", gateway, "--data-dir", str(data_dir)])
        for name, _event, _matcher in HOOKS
        if capture or name != CAPTURE
    }


def is_our_hook(command: str, name: str) -> bool:
    """Whether a hook command runs `hypermnesia hook <name>`, in any install's form (by name, by
    path, or `python -m hypermnesia`), with any options."""
    try:
        words = shlex.split(command)
    except ValueError:
        words = command.split()
    for i in range(1, len(words) - 1):
        if words[i] == "hook" and words[i + 1] == name:
            return os.path.basename(words[i - 1]) == "hypermnesia"
    return False


def _hook_objects(entries: list[Any]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(group, hook) for every command hook in an event's list of groups."""
    found = []
    for group in entries:
        if isinstance(group, dict) and isinstance(group.get("hooks"), list):
            found += [(group, hook) for hook in group["hooks"] if isinstance(hook, dict)]
    return found


def add_hooks(path: Path, commands: dict[str, str], what: str) -> Edit:
    """Our hooks named in `commands` in the settings file at `path`: each added where the event has
    none of ours, an older command of ours (another install, another stack) replaced, an identical
    one kept."""
    before, data = _read(path, what)
    created: list[list[str]] = []
    added: list[dict[str, Any]] = []
    said: list[str] = []
    for name, event, matcher in HOOKS:
        if name not in commands:
            continue
        command = commands[name]
        entries, made = _container(data, ["hooks", event], path, list)
        created += made
        ours = [
            hook for _group, hook in _hook_objects(entries) if is_our_hook(str(hook.get("command", "")), name)
        ]
        if any(hook.get("command") == command for hook in ours):
            continue
        if ours:
            old = str(ours[0].get("command"))
            ours[0]["command"] = command
            added.append({"event": event, "command": command, "replaced": old})
            said.append(f"{event}: replaced `{old}` with this install's hook")
            continue
        group: dict[str, Any] = {"matcher": matcher} if matcher else {}
        group["hooks"] = [{"type": "command", "command": command, "timeout": HOOK_TIMEOUT_S}]
        entries.append(group)
        added.append({"event": event, "command": command, "replaced": None})
        said.append(f"{event}: `{command}`")
    if not added:
        return Edit(path, before, before)
    record = {
        "kind": "hooks",
        "path": str(path),
        "file_created": before is None,
        "made_dirs": _missing_dirs(path),
        "created": created,
        "hooks": added,
    }
    return Edit(path, before, _dump(data, before), said, record)


def _undo_hooks(data: dict[str, Any], record: dict[str, Any]) -> list[str]:
    said = []
    hooks = data.get("hooks") if isinstance(data.get("hooks"), dict) else {}
    for item in record["hooks"]:
        entries = hooks.get(item["event"]) if isinstance(hooks, dict) else None
        if not isinstance(entries, list):
            continue
        for group, hook in _hook_objects(entries):
            if hook.get("command") != item["command"]:
                continue
            if item["replaced"] is not None:
                hook["command"] = item["replaced"]
                said.append(f"{item['event']}: put back `{item['replaced']}`")
            else:
                group["hooks"].remove(hook)
                if not group["hooks"]:
                    entries.remove(group)
                said.append(f"{item['event']}: removed `{item['command']}`")
            break
        else:
            said.append(f"{item['event']}: our hook is no longer there; nothing to remove")
    return said


# --- MCP servers ----------------------------------------------------------------------------------


def add_server(
    path: Path, keys: Sequence[str], name: str, entry: dict[str, Any], what: str, *, force: bool = False
) -> Edit:
    """The MCP server `name` = `entry` in the object at `keys` of the file at `path`. An identical
    entry is kept; a different one is refused (naming what differs) unless `force`, which replaces
    it and keeps it in the record, so --undo puts it back."""
    before, data = _read(path, what)
    servers, created = _container(data, keys, path, dict)
    existing = servers.get(name)
    if existing == entry:
        return Edit(path, before, before)
    if existing is not None and not force:
        raise ConfigError(
            f"{path} already has an MCP server named {name!r} that differs from this one "
            f"(it has {json.dumps(existing)}); connect with --force to replace it (--undo puts it back), "
            "or with --name to add this one beside it. Nothing was changed"
        )
    servers[name] = entry
    record = {
        "kind": "server",
        "path": str(path),
        "file_created": before is None,
        "made_dirs": _missing_dirs(path),
        "created": created,
        "keys": list(keys),
        "name": name,
        "entry": entry,
        "replaced": existing,
    }
    verb = "replaced" if existing is not None else "added"
    return Edit(
        path, before, _dump(data, before), [f"{verb} MCP server {name!r}: {json.dumps(entry)}"], record
    )


def _undo_server(data: dict[str, Any], record: dict[str, Any]) -> list[str]:
    node: Any = data
    for key in record["keys"]:
        node = node.get(key) if isinstance(node, dict) else None
    name = record["name"]
    if not isinstance(node, dict) or name not in node:
        return [f"MCP server {name!r} is no longer there; nothing to remove"]
    if node[name] != record["entry"]:
        return [f"MCP server {name!r} was changed since connect wrote it; left as it is"]
    if record["replaced"] is not None:
        node[name] = record["replaced"]
        return [f"put back the earlier MCP server {name!r}"]
    del node[name]
    return [f"removed MCP server {name!r}"]


# --- undo -----------------------------------------------------------------------------------------


def undo_edit(path: Path, records: Sequence[dict[str, Any]], what: str) -> Edit:
    """The edit of one file that takes back what its `records` (oldest first) say was added,
    newest first, keeping everything else. The file, and the folders made for it, go too when they
    were made for it and hold nothing else now."""
    before, data = _read(path, what)
    if before is None:
        return Edit(path, None, None, [f"{path} is gone; nothing to remove"])
    said: list[str] = []
    for record in reversed(records):
        said += _undo_hooks(data, record) if record["kind"] == "hooks" else _undo_server(data, record)
        _prune(data, record.get("created", []))
    first = records[0]
    after: str | None = _dump(data, before)
    original = json.loads(before) if before.strip() else {}
    if first.get("file_created") and not data:
        after = None
        said.append(f"removed {path} (connect made it; nothing else is in it)")
    elif data == original:
        after = before  # nothing of ours was there: the file's text stays as it is
    return Edit(path, before, after, said, {"made_dirs": first.get("made_dirs", [])})
