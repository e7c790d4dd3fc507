"""`hypermnesia connect [DIR]`: make a folder a Claude Code project of this stack in one step.

It writes, keeping every other entry of each file:
- the MCP server entry, in `DIR/.mcp.json` (or, with --user, in `~/.claude.json` for that folder
  only): this stack's gateway URL, `Authorization: Bearer ${HM_TOKEN}` (Claude Code expands it from
  its environment; the token is never written into the folder, which may be committed) and
  `X-Hypermnesia-Project: <the folder's project>`, which records the project for everyone who reads
  the file (docs/PROJECTS.md);
- the hooks, in `DIR/.claude/settings.local.json` (or, with --user, `~/.claude/settings.json`):
  this installation's executable by its absolute path, this stack's gateway URL and data dir; the
  capture hook (Stop, PreCompact, SessionEnd) too unless --no-capture.

`--no-capture` turns capture off for the folder's project (HM_DATA_DIR/capture-off.json, which the
capture hook reads on every call, so it holds for hooks already written, in any settings file);
`--capture` turns it back on.

What it added is recorded in HM_DATA_DIR/connections.json, so `--undo` removes exactly that and
puts back what it replaced. `--dry-run` prints the diff and writes nothing. Registered by
tooling.cli through COMMAND_MODULES.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

from hypermnesia.scopes import CONNECT_SERVER, PROJECT_HEADER, folder_project, project_slug
from hypermnesia.settings import CommonSettings
from tooling.capture import capture_off, set_capture
from tooling.claude_config import (
    ConfigError,
    Edit,
    add_hooks,
    add_server,
    atomic_write,
    hook_commands,
    undo_edit,
)
from tooling.console import fail, load_settings
from tooling.installation import command_words
from tooling.local_token import token_path
from tooling.stack_record import resolve_gateway_url

RECORD_FILE = "connections.json"
WHAT = "`hypermnesia connect`"
TOKEN_REFERENCE = "Bearer ${HM_TOKEN}"


def _records(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {"folders": {}}
    except (OSError, ValueError) as exc:
        fail(f"cannot read {path} ({exc}); it records what connect wrote. Nothing was changed")
    if not isinstance(data, dict) or not isinstance(data.get("folders"), dict):
        fail(f"{path} is not a record connect wrote; move it away. Nothing was changed")
    return data


def _save_records(path: Path, data: dict[str, Any]) -> None:
    atomic_write(path, json.dumps(data, indent=2, ensure_ascii=False) + "\n")


def _show(edits: list[Edit], dry_run: bool) -> None:
    for edit in edits:
        if not edit.changes:
            continue
        if dry_run:
            print(edit.diff(), end="")
        else:
            gone = " (removed)" if edit.after is None else ""
            print(f"{edit.path}{gone}:")
            for line in edit.said:
                print(f"  {line}")


def _token_advice(data_dir: Path) -> str:
    if os.environ.get("HM_TOKEN", "").strip():
        return "Claude Code sends the token from HM_TOKEN: start `claude` from a shell where it is set."
    kept = token_path(data_dir)
    if kept.exists():
        return (
            f'Claude Code sends the token from HM_TOKEN: export HM_TOKEN="$(cat {kept})" in the shell that '
            "starts `claude` (e.g. in ~/.bashrc). The hooks read that file themselves."
        )
    return (
        "Claude Code sends the token from HM_TOKEN: set it to your token (`hypermnesia token create` makes "
        "one) in the shell that starts `claude`."
    )


def _reachable(url: str) -> bool:
    import httpx

    try:
        return httpx.get(f"{url}/health", timeout=2, trust_env=False).status_code < 500
    except httpx.HTTPError:
        return False


def connect(args: argparse.Namespace, folder: Path, data_dir: Path) -> None:
    found = folder_project(str(folder))
    if args.project and args.user:
        fail(
            "--project is recorded in DIR/.mcp.json, which --user does not write: connect without --user "
            f"to name the project, or leave --project out (the folder's project is {found.name!r})",
            2,
        )
    if args.capture and args.no_capture:
        fail("--capture and --no-capture contradict each other: give one of them", 2)
    project = project_slug(args.project) if args.project else found.name
    url = resolve_gateway_url(os.environ, data_dir)
    entry = {
        "type": "http",
        "url": f"{url}/mcp",
        "headers": {"Authorization": TOKEN_REFERENCE, PROJECT_HEADER: project},
    }
    home = Path.home()
    try:
        if args.user:
            server = add_server(
                home / ".claude.json",
                ["projects", str(folder), "mcpServers"],
                args.name,
                entry,
                WHAT,
                force=args.force,
            )
            hooks_file = home / ".claude" / "settings.json"
        else:
            server = add_server(
                folder / ".mcp.json", ["mcpServers"], args.name, entry, WHAT, force=args.force
            )
            hooks_file = folder / ".claude" / "settings.local.json"
        commands = hook_commands(command_words(), url, data_dir, capture=not args.no_capture)
        hooks = add_hooks(hooks_file, commands, WHAT)
    except ConfigError as exc:
        fail(str(exc), 2)
    edits = [server, hooks]
    if args.dry_run:
        _show(edits, dry_run=True)
        if args.capture or args.no_capture:
            print(f"dry run: capture would be {'on' if args.capture else 'off'} for project {project!r}")
        print(f"dry run: {folder} would be project {project!r} on {url}; nothing was written")
        return
    for edit in edits:
        edit.apply()
    flipped = (args.capture or args.no_capture) and set_capture(data_dir, project, args.capture, str(folder))
    changed = [edit.record for edit in edits if edit.changes and edit.record is not None]
    if changed:
        record_file = data_dir / RECORD_FILE
        records = _records(record_file)
        mine = records["folders"].setdefault(str(folder), {"edits": []})
        mine["project"] = project
        # With --user the hooks file serves every folder connected that way: undo reads this to keep
        # the hooks while another folder still uses them.
        mine["hooks_file"] = str(hooks_file)
        mine["edits"] += changed
        _save_records(record_file, records)
    _show(edits, dry_run=False)
    if args.project:
        origin = "named with --project"
    elif found.recorded_in:
        origin = f"as recorded in {found.recorded_in}"
    else:
        origin = "derived from the folder's path"
    verb = (
        "connected"
        if changed
        else "already connected"
        if flipped
        else "already connected (nothing to change)"
    )
    print(f"{folder}: {verb}: project {project!r} ({origin}), gateway {url}")
    if capture_off(data_dir, project):
        print(
            f"capture is off for project {project!r}: its sessions are not recorded (--capture turns it on)"
        )
    else:
        print(
            f"capture is on: the session's prompts and answers are recorded in project {project!r} "
            "(--no-capture turns it off)"
        )
    print(_token_advice(data_dir))
    if not _reachable(url):
        print(
            f"nothing answers at {url} now: start the stack with `hypermnesia up` and the same HM_* settings"
        )


def _sharing_folder(records: dict[str, Any], folder: str, hooks_file: str | None) -> str | None:
    """Another connected folder whose hooks are in `hooks_file`, or None."""
    if not hooks_file:
        return None
    return next(
        (
            other
            for other, rec in records["folders"].items()
            if other != folder and rec.get("hooks_file") == hooks_file
        ),
        None,
    )


def undo(args: argparse.Namespace, folder: Path, data_dir: Path) -> None:
    record_file = data_dir / RECORD_FILE
    records = _records(record_file)
    mine = records["folders"].get(str(folder))
    if not mine or not mine.get("edits"):
        fail(
            f"{record_file} records no connect of {folder} (connect keeps its record in HM_DATA_DIR: run "
            "--undo with the same HM_DATA_DIR). Nothing was changed"
        )
    # Hooks this folder added to a file another connected folder uses too (~/.claude/settings.json
    # with --user) stay, and pass to that folder's record: the last one undone removes them.
    heir = _sharing_folder(records, str(folder), mine.get("hooks_file"))
    handed = [r for r in mine["edits"] if heir is not None and r["kind"] == "hooks"]
    by_file: dict[str, list[dict[str, Any]]] = {}
    for record in mine["edits"]:
        if record not in handed:
            by_file.setdefault(record["path"], []).append(record)
    try:
        edits = [undo_edit(Path(path), recs, WHAT) for path, recs in by_file.items()]
    except ConfigError as exc:
        fail(str(exc), 2)
    kept = f"the hooks in {mine.get('hooks_file')} stay: {heir} (connected with --user) uses them too"
    if args.dry_run:
        _show(edits, dry_run=True)
        if handed:
            print(kept)
        print(f"dry run: would take back what connect added for {folder}; nothing was written")
        return
    for edit in edits:
        edit.apply()
    if heir is not None and handed:
        records["folders"][heir]["edits"] += handed
    del records["folders"][str(folder)]
    _save_records(record_file, records)
    _show(edits, dry_run=False)
    if handed:
        print(kept)
    print(f"{folder}: disconnected; everything else in those files is as it was")


def cmd_connect(args: argparse.Namespace) -> None:
    settings = load_settings(CommonSettings)
    folder = Path(args.dir).expanduser()
    if not folder.is_dir():
        fail(f"{folder} is not a folder; give the project's folder (default: the current one)", 2)
    # Resolved like the working directory Claude Code reports (and a hook sees), symlinks and all.
    folder = folder.resolve()
    data_dir = settings.data_dir.expanduser().absolute()
    (undo if args.undo else connect)(args, folder, data_dir)


def register(sub: argparse._SubParsersAction, bench: argparse._SubParsersAction | None = None) -> None:
    """Add `hypermnesia connect` to `sub`."""
    p = sub.add_parser(
        "connect",
        help="make a folder a Claude Code project of this stack: hooks + MCP entry, one project identity",
        description="Write the hooks and the MCP server entry that make DIR a Claude Code project of "
        "the stack these HM_* settings reach, keeping every other entry; print what was written.",
    )
    p.add_argument("dir", nargs="?", default=".", help="the project's folder (default: the current one)")
    p.add_argument(
        "--user",
        action="store_true",
        help="write the MCP entry into ~/.claude.json (for this folder only) and the hooks into "
        "~/.claude/settings.json, instead of DIR/.mcp.json and DIR/.claude/settings.local.json",
    )
    p.add_argument(
        "--project",
        default="",
        help="the project's name (recorded in DIR/.mcp.json; default: the one recorded there, else "
        "derived from the folder's path)",
    )
    p.add_argument("--name", default=CONNECT_SERVER, help=f"the MCP server's name (default {CONNECT_SERVER})")
    p.add_argument("--force", action="store_true", help="replace a different MCP entry of that name")
    p.add_argument("--dry-run", action="store_true", help="print the change as a diff; write nothing")
    p.add_argument(
        "--no-capture",
        action="store_true",
        help="turn capture off for the folder's project: its Claude Code sessions are not recorded "
        "(holds for hooks already written; no capture hook is added)",
    )
    p.add_argument("--capture", action="store_true", help="turn capture back on for the folder's project")
    p.add_argument(
        "--undo",
        action="store_true",
        help="take back what connect added to DIR's files (and put back what it replaced)",
    )
    p.set_defaults(func=cmd_connect)
