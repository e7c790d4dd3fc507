"""Path globs of the structural map (tier 1), and how specific a glob is.

Syntax, anchored at the repository root and matched against the whole path:

- `**` as a whole path segment: any number of segments, including none (`a/**/b` matches `a/b`);
  as the last segment (`a/**`): everything below `a`.
- `*`: any run of characters within one segment; `?`: one character other than `/`.
- `[abc]`, `[a-z]`, `[!abc]` or `[^abc]`: one character of (not of) the class; a `]` right after
  the opening `[` (or `[!`) is literal. `\\x` matches `x` literally.

Specificity, the "longest match" that picks a path's component, is the pair (literal characters
before the first wildcard, literal characters in the whole glob); `/` counts as a literal, wildcards and
character classes count nothing. The first term prefers the deeper directory (`services/retrieval/**`
beats `services/*/server.py`), the second the narrower pattern within one directory
(`gateway/static/*.js` beats `gateway/static/**`). Equal pairs are broken by component priority.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from hypermnesia.errors import InvalidArgument

MAX_GLOB_CHARS = 500
MAX_PATH_CHARS = 4096


class GlobError(ValueError):
    """A glob that cannot be compiled; the message completes the sentence "glob 'x' ..."."""


@dataclass(frozen=True)
class Glob:
    pattern: str
    regex: re.Pattern[str]
    literal_prefix: int
    literal_chars: int

    @property
    def specificity(self) -> tuple[int, int]:
        return (self.literal_prefix, self.literal_chars)

    def matches(self, path: str) -> bool:
        return self.regex.fullmatch(path) is not None


def _char_class(seg: str, start: int, column: int) -> tuple[str, int]:
    """The regex of the class opening at seg[start] and the index just after its `]`."""
    i = start + 1
    negate = i < len(seg) and seg[i] in "!^"
    if negate:
        i += 1
    chars: list[str] = []
    first = True
    while i < len(seg) and (seg[i] != "]" or first):
        if seg[i] == "\\" and i + 1 < len(seg):
            i += 1
        chars.append(seg[i])
        first = False
        i += 1
    if i >= len(seg):
        raise GlobError(
            f"has an unbalanced '[' at column {column + start + 1}; "
            "close the class with ']' or escape it as '\\['"
        )
    parts: list[str] = []
    k = 0
    while k < len(chars):
        if k + 2 < len(chars) and chars[k + 1] == "-":
            low, high = chars[k], chars[k + 2]
            if low > high:
                raise GlobError(
                    f"has a reversed range '{low}-{high}' at column {column + start + 1}; "
                    f"write '{high}-{low}'"
                )
            parts.append(f"{re.escape(low)}-{re.escape(high)}")
            k += 3
        else:
            parts.append(re.escape(chars[k]))
            k += 1
    body = "".join(parts)
    # A path segment never holds '/', so a negated class must not match one either.
    return (f"[^/{body}]" if negate else f"[{body}]"), i + 1


def _segment(seg: str, column: int, counts: list[int]) -> str:
    """Regex of one segment; counts = [literal prefix, literal total, wildcard seen (0/1)]."""
    out: list[str] = []
    i = 0
    while i < len(seg):
        ch = seg[i]
        if ch in "*?[":
            counts[2] = 1
            if ch == "*":
                out.append("[^/]*")
                i += 1
            elif ch == "?":
                out.append("[^/]")
                i += 1
            else:
                regex, i = _char_class(seg, i, column)
                out.append(regex)
            continue
        if ch == "\\":
            if i + 1 >= len(seg):
                raise GlobError(
                    f"ends with a lone '\\' at column {column + i + 1}; write '\\\\' for a backslash"
                )
            i += 1
            ch = seg[i]
        out.append(re.escape(ch))
        _literal(counts)
        i += 1
    return "".join(out)


def _literal(counts: list[int]) -> None:
    counts[1] += 1
    if not counts[2]:
        counts[0] += 1


@lru_cache(maxsize=4096)
def compile_glob(pattern: str) -> Glob:
    """Compile a glob; raises GlobError with a message that says how to fix it."""
    if not pattern:
        raise GlobError("is empty; write a pattern such as 'src/**'")
    if len(pattern) > MAX_GLOB_CHARS:
        raise GlobError(f"is {len(pattern)} characters; the limit is {MAX_GLOB_CHARS}")
    if any(ord(ch) < 32 for ch in pattern):
        raise GlobError("contains control characters; use printable text")
    if pattern.startswith("/"):
        raise GlobError("starts with '/'; globs are relative to the repository root, so drop the leading '/'")
    if pattern.endswith("/"):
        raise GlobError(f"ends with '/'; write '{pattern}**' to match everything below that folder")
    segments = pattern.split("/")
    counts = [0, 0, 0]
    pieces: list[str] = []
    column = 0
    for index, seg in enumerate(segments):
        last = index == len(segments) - 1
        if seg in ("", ".", ".."):
            raise GlobError(f"has an empty, '.' or '..' path segment at column {column + 1}; remove it")
        if seg == "**":
            counts[2] = 1
            # Non-final `**` swallows its own separator, so `a/**/b` also matches `a/b`.
            pieces.append(".*" if last else "(?:[^/]+/)*")
        else:
            pieces.append(_segment(seg, column, counts))
            if not last:
                pieces.append("/")
                _literal(counts)
        column += len(seg) + 1
    try:
        regex = re.compile("".join(pieces), re.DOTALL)
    except re.error as exc:  # defensive: every piece above is escaped
        raise GlobError(f"cannot be compiled ({exc})") from exc
    return Glob(pattern, regex, counts[0], counts[1])


def normalize_path(path: str) -> str:
    """A repository-relative path in canonical form, or InvalidArgument saying what to send."""
    if not path or not path.strip():
        raise InvalidArgument(
            "path is empty; give a file path relative to the repository root, e.g. 'src/app.py'"
        )
    if len(path) > MAX_PATH_CHARS:
        raise InvalidArgument(f"path is {len(path):,} characters; the limit is {MAX_PATH_CHARS:,}")
    if any(ord(ch) < 32 for ch in path):
        raise InvalidArgument("path contains control characters; send a plain file path")
    try:
        path.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidArgument("path is not valid UTF-8 text; send UTF-8") from exc
    if path.startswith("/"):
        raise InvalidArgument(
            f"path {path[:80]!r} is absolute; send it relative to the repository root (e.g. 'src/app.py')"
        )
    parts = [p for p in path.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise InvalidArgument(f"path {path[:80]!r} contains '..'; send a path inside the repository")
    if not parts:
        raise InvalidArgument("path names no file; give a file path relative to the repository root")
    return "/".join(parts)
