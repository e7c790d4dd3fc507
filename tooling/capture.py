"""`hypermnesia hook capture`: a Claude Code session's turns into the raw log (Stop, PreCompact,
SessionEnd), with no LLM: consolidation makes episodes and proposals of them later.

Claude Code's transcript (`transcript_path` in the hook's JSON) is JSON Lines, appended to as the
session goes: `user` lines (a prompt, or tool results), `assistant` lines (text, thinking or
tool_use blocks; one message may span several lines that share `message.id`), `system` lines
(a `compact_boundary` where the conversation was compacted), a `user` line with
`isCompactSummary` (Claude's own summary of what was compacted), `summary` lines, and lines we
do not read (sidechains of subagents, meta lines, snapshots, ...).

Each capture reads on from where the last one stopped (a cursor per session in HM_DATA_DIR/capture,
saved only once the gateway has the records) and appends, as conversation records in the thread
of the session id:
- each prompt the user typed, bounded to MAX_PROMPT_CHARS;
- each final answer of the assistant (the text of its last message in the turn), bounded to
  MAX_ANSWER_CHARS, followed by a short list of the tools it used with the first line of each
  result; tool output is otherwise left out.
Each record names its `speaker` (user or assistant): the gateway stores both, and leaves the
assistant's out under HM_STORE_ASSISTANT_TURNS=false.
A record's `source_ref` is its transcript line's uuid, so the gateway writes a re-sent record
once whatever the cursor says (a cursor lost, a capture cut off before its answer came back).
Claude Code may write the transcript a little behind the hook: a turn not finished yet (its last
line a tool call or result) stays for the next capture.

One capture sends at most MAX_RECORDS records in one POST and reads at most MAX_READ_BYTES of the
transcript; a long transcript is caught up over the next captures. The project can opt out
(`hypermnesia connect --no-capture`, recorded in HM_DATA_DIR/capture-off.json).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import time
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

__all__ = [
    "CAPTURE_OFF_FILE",
    "MAX_ANSWER_CHARS",
    "MAX_PROMPT_CHARS",
    "MAX_RECORDS",
    "Cursor",
    "Turn",
    "capture_off",
    "read_on",
    "set_capture",
]

MAX_PROMPT_CHARS = 4_000
MAX_ANSWER_CHARS = 4_000
# Tools listed under an answer, and the characters of each line of that list.
MAX_TOOLS = 8
MAX_TOOL_LINE_CHARS = 200
# One capture's batch and read: small enough that the gateway embeds the batch within a hook's
# budget on a loaded machine; the next capture goes on from there.
MAX_RECORDS = 24
MAX_READ_BYTES = 4 * 1024 * 1024
CAPTURE_DIR = "capture"
CAPTURE_OFF_FILE = "capture-off.json"
SOURCE = "claude-code"
# The gateway's answer to a batch it will not take as it is (422): passed over, and said.
REFUSED_BATCH = 422
# A cursor not touched for this long belongs to a session that is over.
CURSOR_KEEP_S = 30 * 24 * 3600

# What Claude Code writes as a "user" line that is not something the user typed.
_NOT_TYPED = re.compile(
    r"^\s*(<command-(name|message|args)>|<local-command-(stdout|stderr)>|\[Request interrupted by user)"
)


def _truncate(text: str, limit: int, left_out: int = 0) -> str:
    """`text` cut to `limit` characters, saying how many were left out (`left_out` of them before
    `text` reached us)."""
    text = text.strip()
    cut = max(0, len(text) - limit) + left_out
    if not cut:
        return text
    return f"{text[:limit].rstrip()} [... {cut:,} more characters left out]"


def _one_line(text: str, limit: int) -> str:
    first = next((line.strip() for line in text.splitlines() if line.strip()), "")
    return first if len(first) <= limit else first[: limit - 3].rstrip() + "..."


def _is_time(value: Any) -> bool:
    """Whether the gateway takes `value` as a time (a record keeps when it was said); a line with
    a damaged timestamp is recorded at the time it arrives instead of failing the whole batch."""
    if not isinstance(value, str) or not value:
        return False
    try:
        datetime.fromisoformat(value)
    except ValueError:
        return False
    return True


def _clean(text: str) -> str:
    """Text the store accepts: valid UTF-8 without NULs."""
    return text.encode("utf-8", "replace").decode("utf-8").replace("\x00", "")


# --- the transcript's lines -----------------------------------------------------------------------


def _blocks(message: Any) -> list[dict[str, Any]]:
    content = message.get("content") if isinstance(message, dict) else None
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if isinstance(content, list):
        return [b for b in content if isinstance(b, dict)]
    return []


def _text_of(blocks: list[dict[str, Any]]) -> str:
    return "\n\n".join(str(b.get("text") or "") for b in blocks if b.get("type") == "text").strip()


def _result_text(block: dict[str, Any]) -> str:
    content = block.get("content")
    if isinstance(content, list):
        return "\n".join(str(c.get("text") or "") for c in content if isinstance(c, dict))
    return str(content or "")


def _tool_line(block: dict[str, Any]) -> str:
    """A tool call in a few words: its name and what it was called on."""
    name = str(block.get("name") or "tool")
    given = block.get("input")
    if not isinstance(given, dict):
        given = {}
    for key in ("file_path", "path", "command", "pattern", "url", "query", "description", "prompt"):
        value = given.get(key)
        if isinstance(value, str) and value.strip():
            return f"{name} {_one_line(value, 120)}"
    return name


@dataclass
class Turn:
    """What a capture keeps of the turn in progress, between captures (in the cursor)."""

    prompt_ref: str = ""  # the source_ref of its prompt ('' before the first prompt)
    answer: str = ""  # the text of the assistant's latest message with text, its first MAX_ANSWER_CHARS
    answer_chars: int = 0  # that text's whole length
    answer_uuid: str = ""
    answer_message: str = ""  # that message's id (its text may span several lines)
    answer_at: str = ""
    written: bool = True  # the answer above is in a record already (or there is none)
    ended_on_text: bool = False  # its last line read was the assistant's text (no tool call after it)
    tools: list[dict[str, str]] = field(default_factory=list)  # {id, line, result}
    more_tools: int = 0  # tools used beyond those listed


@dataclass
class Cursor:
    """Where a session's capture stopped: the byte offset after the last line it read, the turn in
    progress there, and the source_ref of the last record it wrote (the next one's prev)."""

    transcript: str = ""
    offset: int = 0
    turn: Turn = field(default_factory=Turn)
    last_ref: str = ""

    @classmethod
    def load(cls, data: Any, transcript: str) -> Cursor:
        """The saved cursor, or a fresh one when there is none, it is damaged or names another file."""
        try:
            if data["transcript"] != transcript:
                return cls(transcript=transcript)
            turn = Turn(**data["turn"])
            if not isinstance(turn.tools, list) or not all(isinstance(t, dict) for t in turn.tools):
                raise TypeError("tools")
            return cls(transcript, int(data["offset"]), turn, str(data.get("last_ref") or ""))
        except (KeyError, TypeError, ValueError):
            return cls(transcript=transcript)

    def dump(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Reading:
    records: list[dict[str, Any]]
    cursor: Cursor


def _lines(path: Path, offset: int, limit: int) -> Iterator[tuple[int, bytes]]:
    """(offset after the line, the line) for each complete line from `offset`, at most `limit`
    bytes; a last line without its newline is being written and waits for the next capture."""
    with path.open("rb") as handle:
        handle.seek(offset)
        data = handle.read(limit)
    start = 0
    while True:
        end = data.find(b"\n", start)
        if end < 0:
            return
        yield offset + end + 1, data[start:end]
        start = end + 1


def _past_line(path: Path, offset: int) -> int:
    """The offset after the line that starts at `offset` (its end, or the file's)."""
    with path.open("rb") as handle:
        handle.seek(offset)
        while chunk := handle.read(1 << 20):
            end = chunk.find(b"\n")
            if end >= 0:
                return offset + end + 1
            offset += len(chunk)
    return offset


class _Reader:
    """The transcript's lines in order -> conversation records, keeping the turn in progress."""

    def __init__(self, session: str, cursor: Cursor) -> None:
        self.session = session
        self.turn = Turn(**asdict(cursor.turn))
        self.last_ref = cursor.last_ref
        self.records: list[dict[str, Any]] = []

    def ref(self, uuid: Any, offset: int) -> str:
        name = uuid if isinstance(uuid, str) and uuid.strip() else f"@{offset}"
        return f"{SOURCE}:{self.session}:{name}"[:500]

    def _record(self, ref: str, content: str, role: str, at: Any, event: str) -> None:
        record: dict[str, Any] = {
            "type": "conversation",
            "content": _clean(content),
            "source_ref": ref,
            "thread_id": self.session,
            "speaker": role,  # user | assistant: a gateway may leave the assistant's out
            "metadata": {"source": SOURCE, "role": role, "hook_event": event},
        }
        if _is_time(at):
            record["created_at"] = at
        if self.last_ref:
            record["prev_source_ref"] = self.last_ref
        self.records.append(record)
        self.last_ref = ref

    def flush(self, event: str) -> None:
        """Write the turn's answer, if it has one not written yet."""
        turn = self.turn
        if turn.written or not turn.answer:
            return
        content = "Assistant: " + _truncate(
            turn.answer, MAX_ANSWER_CHARS, turn.answer_chars - len(turn.answer)
        )
        if turn.tools:
            shown = turn.tools[:MAX_TOOLS]
            lines = [
                _one_line(t["line"] + (f" -> {t['result']}" if t.get("result") else ""), MAX_TOOL_LINE_CHARS)
                for t in shown
            ]
            more = len(turn.tools) - len(shown) + turn.more_tools
            if more:
                lines.append(f"... and {more} more")
            content += "\n\nTools used: " + "; ".join(lines)
        self._record(self.ref(turn.answer_uuid, 0), content, "assistant", turn.answer_at, event)
        turn.written, turn.tools, turn.more_tools = True, [], 0

    def line(self, raw: bytes, offset: int, event: str) -> None:
        try:
            entry = json.loads(raw)
        except ValueError:
            return
        if not isinstance(entry, dict) or entry.get("isSidechain") or entry.get("isMeta"):
            return
        kind = entry.get("type")
        # A compaction (a `compact_boundary` system line, then Claude's summary as a user line with
        # isCompactSummary) changes nothing here: the turns it summarised were read as they came.
        blocks = _blocks(entry.get("message"))
        if kind == "user" and not entry.get("isCompactSummary"):
            results = [b for b in blocks if b.get("type") == "tool_result"]
            if results:
                self._results(results)
                return
            text = _text_of(blocks)
            if text and not _NOT_TYPED.match(text):
                self.flush(event)
                ref = self.ref(entry.get("uuid"), offset)
                self.turn = Turn(prompt_ref=ref)
                self._record(
                    ref, "User: " + _truncate(text, MAX_PROMPT_CHARS), "user", entry.get("timestamp"), event
                )
        elif kind == "assistant":
            self._assistant(entry, blocks, offset)

    def _results(self, results: list[dict[str, Any]]) -> None:
        self.turn.ended_on_text = False
        by_id = {t.get("id"): t for t in self.turn.tools}
        for block in results:
            tool = by_id.get(block.get("tool_use_id"))
            if tool is not None and not tool.get("result"):
                tool["result"] = _one_line(_result_text(block), MAX_TOOL_LINE_CHARS) or "(no output)"

    def _assistant(self, entry: dict[str, Any], blocks: list[dict[str, Any]], offset: int) -> None:
        turn = self.turn
        message = entry.get("message")
        if not isinstance(message, dict):
            message = {}
        message_id = str(message.get("id") or entry.get("uuid") or "")
        text = _text_of(blocks)
        if text:
            if message_id and message_id == turn.answer_message and not turn.written:
                whole = turn.answer + "\n\n" + text
                turn.answer_chars += 2 + len(text)
            else:
                # A later message of the turn: its text is the answer so far. One already written
                # stays (it was said); this one is written as the turn's next answer.
                whole, turn.answer_chars = text, len(text)
                turn.answer_message = message_id
            turn.answer = whole[:MAX_ANSWER_CHARS]  # the cursor keeps no more than a record would
            line_uuid = entry.get("uuid")
            turn.answer_uuid = line_uuid if isinstance(line_uuid, str) and line_uuid.strip() else f"@{offset}"
            turn.answer_at = str(entry.get("timestamp") or "")
            turn.written = False
            turn.ended_on_text = True
        for block in blocks:
            if block.get("type") == "tool_use":
                turn.ended_on_text = False
                # The tools since the last answer written go with the next one (a count beyond
                # what is listed, so that the list stays small in a long turn).
                if len(turn.tools) < MAX_TOOLS:
                    turn.tools.append(
                        {"id": str(block.get("id") or ""), "line": _tool_line(block), "result": ""}
                    )
                else:
                    turn.more_tools += 1

    def finished(self) -> bool:
        """Whether the turn in progress looks finished: an answer with no tool call after it."""
        return not self.turn.written and self.turn.ended_on_text


def read_on(
    path: Path, session: str, cursor: Cursor, event: str, max_read_bytes: int = MAX_READ_BYTES
) -> Reading:
    """The records of the transcript after `cursor`, at most MAX_RECORDS from at most
    `max_read_bytes` of it, and the cursor after them."""
    size = path.stat().st_size
    offset = cursor.offset if 0 <= cursor.offset <= size else 0  # a shorter file is another file
    reader = _Reader(session, cursor if offset == cursor.offset else Cursor(cursor.transcript))
    at = offset
    more = False
    for after, raw in _lines(path, offset, max_read_bytes):
        reader.line(raw, at, event)
        at = after
        if len(reader.records) >= MAX_RECORDS - 1:
            more = True
            break
    else:
        more = size - offset > max_read_bytes
        if more and at == offset:
            at = _past_line(path, offset)  # one line longer than a read (a huge tool result): skipped
    if not more and at >= size and reader.finished():
        # At the end of what Claude Code has written, a finished turn is written now; if the turn
        # goes on after all, its next answer is written as another record.
        reader.flush(event)
    return Reading(reader.records, Cursor(cursor.transcript, at, reader.turn, reader.last_ref))


# --- the state kept in the data dir ---------------------------------------------------------------


def cursor_path(data_dir: Path, session: str, transcript: str) -> Path:
    key = hashlib.sha256(f"{session}\n{transcript}".encode()).hexdigest()[:32]
    return data_dir / CAPTURE_DIR / f"{key}.json"


def load_cursor(path: Path, transcript: str) -> Cursor:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return Cursor(transcript=transcript)
    return Cursor.load(data, transcript)


def save_cursor(path: Path, cursor: Cursor) -> None:
    from tooling.claude_config import atomic_write

    new_session = not path.exists()
    atomic_write(path, json.dumps(cursor.dump()) + "\n")
    if new_session:  # a session's first cursor: those of sessions long over go
        for old in path.parent.glob("*.json"):
            with contextlib.suppress(OSError):
                if time.time() - old.stat().st_mtime > CURSOR_KEEP_S:
                    old.unlink()


def _off_file(data_dir: Path) -> Path:
    return data_dir / CAPTURE_OFF_FILE


def _read_off(data_dir: Path) -> dict[str, Any]:
    try:
        data = json.loads(_off_file(data_dir).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    projects = data.get("projects") if isinstance(data, dict) else None
    return projects if isinstance(projects, dict) else {}


def capture_off(data_dir: Path, project: str) -> bool:
    """Whether capture is turned off for `project` (`connect --no-capture`)."""
    return project in _read_off(data_dir)


def set_capture(data_dir: Path, project: str, on: bool, folder: str) -> bool:
    """Turn capture on or off for `project`; whether that changed anything."""
    from tooling.claude_config import atomic_write

    projects = _read_off(data_dir)
    if on == (project not in projects):
        return False
    if on:
        del projects[project]
    else:
        projects[project] = {"folder": folder, "since": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    atomic_write(_off_file(data_dir), json.dumps({"projects": projects}, indent=2) + "\n")
    return True


def session_of(hook: Mapping[str, Any], transcript: Path) -> str:
    """The session id Claude Code gave, else the transcript's name (Claude Code names it so)."""
    value = hook.get("session_id")
    session = value.strip() if isinstance(value, str) else ""
    session = session or transcript.stem
    return re.sub(r"[^\x21-\x7e]", "_", session)[:200]


def transcript_of(hook: Mapping[str, Any]) -> Path | None:
    value = hook.get("transcript_path")
    if not isinstance(value, str) or not value.strip():
        return None
    path = Path(os.path.expanduser(value.strip()))
    return path if path.is_file() else None


# --- the hook -------------------------------------------------------------------------------------


def run_capture(raw: str, env: Mapping[str, str], started: float) -> str:
    """The capture hook's stdout for this stdin: '' or Claude Code's JSON with a `systemMessage`
    (an outage, once). Reads the transcript on from the cursor, POSTs the new records to
    /records/import in one call within the budget, and moves the cursor when the gateway has them."""
    from hypermnesia.scopes import folder_project
    from tooling import hooks

    deadline = started + hooks.budget(env) - hooks.MARGIN_S
    try:
        hook = json.loads(raw) if raw.strip() else {}
    except ValueError:
        hook = {}
    if not isinstance(hook, dict):
        return ""
    transcript = transcript_of(hook)
    if transcript is None:
        return ""
    project = folder_project(hooks.project_folder(hook, env))
    folder = hooks.data_dir(env)
    if capture_off(folder, project.name):
        return ""
    session = session_of(hook, transcript)
    event = str(hook.get("hook_event_name") or "capture")
    where = cursor_path(folder, session, str(transcript))
    cursor = load_cursor(where, str(transcript))
    reading = read_on(transcript, session, cursor, event)
    if not reading.records:
        if reading.cursor.offset != cursor.offset:
            with contextlib.suppress(OSError):
                save_cursor(where, reading.cursor)
        return ""
    call = hooks.Call("capture", "POST", "/records/import", json={"records": reading.records}, handoff=True)
    url = hooks.gateway_url(env)
    replies = hooks.fetch(url, hooks.request_headers(hook, project, env), [call], deadline)
    reply = replies["capture"]
    lines, _ = hooks.announce(replies, env, url)
    if reply.outcome == "ok" or reply.status == REFUSED_BATCH:
        with contextlib.suppress(OSError):
            save_cursor(where, reading.cursor)
    if reply.status == REFUSED_BATCH:
        # The gateway refuses this batch as it is (HM_REDACT=refuse and a secret in it, say): sent
        # again it would be refused again and hold back every later turn, so it is passed over,
        # and the user is told which turns were not recorded and why.
        first, last = (str(r.get("created_at") or "?") for r in (reading.records[0], reading.records[-1]))
        lines.append(
            f"hypermnesia did not record {len(reading.records)} records of this session "
            f"({first} to {last}): {reply.detail}"
        )
    elif reply.outcome == "other":
        # Sent again next time (a rate limit, say); said to a person in Claude Code's debug output.
        import sys

        sys.stderr.write(f"hypermnesia hook capture: {reply.detail}\n")
    return json.dumps({"systemMessage": "\n".join(lines)}) if lines else ""
