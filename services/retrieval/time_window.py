"""Time in queries: the dates a query names ("last Tuesday", "in March", "two weeks ago", "May
2023", "the week before 16 November 2023"), resolved against the time of the question into
windows that BOOST (never filter) the candidates whose event time falls inside one.

- **Finding the words.** A small grammar of regular expressions finds the date phrases and what
  is said around them (the week before X, the last week of X, between X and Y, since X);
  `dateparser` (English only) resolves each phrase against the reference time and says its
  granularity (day, week, month, year), which sets the window's width. Relative phrases prefer
  the past: a question asks about what was remembered.
- **Cheap when there is nothing.** A query with no date-like word is rejected by one regular
  expression before any parsing (most queries); dateparser runs only on the phrases found.
- **Several windows** are all kept: an ordering question ("which came first, the trip in May
  2023 or the party in June 2023?") boosts both; "before X" and "after X" keep X itself in the
  window, so "before or after May 2023" still holds May.
- **Event time** is the memory's `created_at` (as imported), unless its content names dates of
  its own ("I went camping last week", "back in 2019"): then those, read against `created_at`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import lru_cache

_MONTHS = (
    r"jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|may|june?|july?|aug(?:ust)?"
    r"|sep(?:t(?:ember)?)?|oct(?:ober)?|nov(?:ember)?|dec(?:ember)?"
)
# Months that count anywhere; "may" and "march" (verbs) only after a preposition or beside a day or year.
_FULL_MONTHS = r"january|february|april|june|july|august|september|october|november|december"
_WEEKDAYS = r"monday|tuesday|wednesday|thursday|friday|saturday|sunday"
_UNITS = r"day|week|weekend|month|year"
_COUNT = r"\d{1,2}|an?|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|a\s+couple\s+of|a\s+few"
# A word or number that may be part of a date: a text without one has no window (the cheap check
# before any parsing).
_DATE_LIKE = re.compile(
    rf"\b(?:{_MONTHS}|{_WEEKDAYS}|yesterday|today|tonight|ago|(?:19|20)\d\d"
    r"|(?:last|this|past|previous)\s+(?:week|weekend|month|year)|spring|summer|autumn|fall|winter)\b",
    re.IGNORECASE,
)

# The date phrases, longest forms first (one alternation: leftmost, then first listed, wins).
_DAY = r"\d{1,2}(?:st|nd|rd|th)?"
_YEAR = r"(?:19|20)\d\d"
_PHRASE = re.compile(
    rf"\b(?:"
    rf"(?P<iso>{_YEAR}-\d\d-\d\d)"
    rf"|(?P<dmy>{_DAY}(?:\s+of)?\s+(?:{_MONTHS})\.?(?:,?\s+{_YEAR})?)"
    rf"|(?P<mdy>(?:{_MONTHS})\.?\s+{_DAY}(?!\d)(?:,?\s+{_YEAR})?)"
    rf"|(?P<my>(?:{_MONTHS})\.?,?\s+(?:of\s+)?{_YEAR})"
    rf"|(?P<season>(?:spring|summer|autumn|fall|winter)(?:\s+(?:of\s+)?{_YEAR}))"
    rf"|(?P<rel>yesterday|today|tonight"
    rf"|(?:{_COUNT})\s+(?:{_UNITS})s?\s+ago"
    rf"|(?:last|this|past|previous)\s+(?:{_UNITS}|{_WEEKDAYS})(?!\s+of\b)"
    rf"|(?:on\s+)?(?:{_WEEKDAYS}))"
    rf"|(?P<month>(?<=in\s)(?:{_MONTHS})|(?<=during\s)(?:{_MONTHS})|(?<=since\s)(?:{_MONTHS})"
    rf"|(?<=of\s)(?:{_MONTHS})|(?<=early\s)(?:{_MONTHS})|(?<=late\s)(?:{_MONTHS})|{_FULL_MONTHS})"
    rf"|(?P<lseason>(?<=last\s)(?:spring|summer|autumn|fall|winter)|(?<=this\s)(?:spring|summer|autumn|winter)"
    rf"|(?<=in\s)(?:spring|summer|autumn|winter)|(?<=the\s)(?:spring|summer|autumn|winter))"
    rf"|(?P<year>(?<![\d/:-])(?<!\d[.,]){_YEAR}(?![\d/:-]|[.,]\d))"  # not 1/2000, 1,2000, 2000.5
    rf")\b",
    re.IGNORECASE,
)
# What is said just before a phrase that changes its window.
_SHIFT = re.compile(
    rf"(?:the\s+)?(?P<n>{_COUNT})?\s*(?P<unit>{_UNITS})s?\s+(?P<dir>before|after|prior\s+to)\s+(?:the\s+)?$",
    re.IGNORECASE,
)
_PART = re.compile(
    r"(?:the\s+)?(?P<part>first|last|second|third|final)\s+(?P<unit>week|weekend|half|days?)\s+of\s+(?:the\s+)?$",
    re.IGNORECASE,
)
_EDGE = re.compile(
    r"(?P<edge>early|mid|mid-|late|(?:the\s+)?(?:beginning|start|end|middle)\s+of)\s*(?:the\s+)?$",
    re.IGNORECASE,
)
_SIDE = re.compile(r"(?P<side>before|after|since|until|till|by)\s+(?:the\s+)?$", re.IGNORECASE)
_BETWEEN = re.compile(r"(?:between|from)\s+(?:the\s+)?$", re.IGNORECASE)
_AND = re.compile(r"^\s*(?:and|to|until|till|through|-)\s+(?:the\s+)?$", re.IGNORECASE)

_NUMBERS = {
    "a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
    "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "a couple of": 2, "a few": 3,
}  # fmt: skip
_SEASON_MONTHS = {"spring": 3, "summer": 6, "autumn": 9, "fall": 9, "winter": 12}
DAY = timedelta(days=1)
WEEK = timedelta(days=7)
# How far a window's text may be searched in a memory's content (a long document's dates are
# its topic, not when it happened; and the cost stays bounded).
CONTENT_CHARS = 600


@dataclass(frozen=True)
class Window:
    """[start, end) in UTC, and the words it was read from."""

    start: datetime
    end: datetime
    phrase: str

    def overlaps(self, other: Window) -> bool:
        return self.start < other.end and other.start < self.end


@dataclass(frozen=True)
class Match:
    """Why a candidate was boosted: the query's window and the event time inside it."""

    window: Window
    event: Window  # the memory's created_at (a zero-length window) or the date its content names
    source: str  # "created_at" or "content"


def _unit(unit: str) -> timedelta:
    unit = unit.lower().rstrip("s")
    return {"day": DAY, "week": WEEK, "weekend": WEEK, "month": 30 * DAY, "year": 365 * DAY}[unit]


def _count(text: str | None) -> int:
    if not text:
        return 1
    text = " ".join(text.lower().split())
    return int(text) if text.isdigit() else _NUMBERS.get(text, 1)


def _month_start(year: int, month: int) -> datetime:
    return datetime(year + (month - 1) // 12, (month - 1) % 12 + 1, 1, tzinfo=UTC)


@lru_cache(maxsize=1)
def _parser():  # type: ignore[no-untyped-def]
    # Imported on first use: dateparser takes ~0.1 s to import and is needed only for dated queries.
    from dateparser.date import DateDataParser

    return DateDataParser(languages=["en"], settings={"PREFER_DAY_OF_MONTH": "first"})


def _day(at: datetime) -> datetime:
    return datetime(at.year, at.month, at.day, tzinfo=UTC)


def _relative(text: str, now: datetime) -> Window | None:
    """yesterday, today, N units ago, last/this/past week|month|year, last <weekday>: read
    against `now` with calendar arithmetic (no parser)."""
    today = _day(now)
    if text in ("today", "tonight"):
        return Window(today, today + DAY, text)
    if text == "yesterday":
        return Window(today - DAY, today, text)
    ago = re.fullmatch(rf"({_COUNT})\s+({_UNITS})s?\s+ago", text)
    if ago:
        n, unit = _count(ago.group(1)), ago.group(2)
        if unit == "day":
            return Window(today - n * DAY, today - (n - 1) * DAY, text)
        if unit in ("week", "weekend"):
            return Window(today - n * WEEK - 3 * DAY, today - n * WEEK + 4 * DAY, text)
        if unit == "month":
            start = _month_start(now.year, now.month - n)
            return Window(start, _month_start(start.year, start.month + 1), text)
        return Window(
            datetime(now.year - n, 1, 1, tzinfo=UTC), datetime(now.year - n + 1, 1, 1, tzinfo=UTC), text
        )
    which, _, unit = text.partition(" ")
    monday = today - now.weekday() * DAY
    if unit in _WEEKDAYS.split("|"):
        back = (now.weekday() - _WEEKDAYS.split("|").index(unit)) % 7 or 7
        if which == "this":
            back %= 7
        return Window(today - back * DAY, today - back * DAY + DAY, text)
    if which == "this":
        start = {
            "week": monday,
            "weekend": monday + 5 * DAY,
            "month": _month_start(now.year, now.month),
            "year": datetime(now.year, 1, 1, tzinfo=UTC),
        }[unit]
        return Window(start, max(now, start + DAY), text)
    if which == "past":  # the past week/month/year: the span up to now
        return Window(now - _unit(unit), now, text)
    # last/previous: the calendar unit before this one
    if unit == "week":
        return Window(monday - WEEK, monday, text)
    if unit == "weekend":
        return Window(monday - 2 * DAY, monday, text)
    if unit == "month":
        return Window(_month_start(now.year, now.month - 1), _month_start(now.year, now.month), text)
    if unit == "day":
        return Window(today - DAY, today, text)
    return Window(datetime(now.year - 1, 1, 1, tzinfo=UTC), datetime(now.year, 1, 1, tzinfo=UTC), text)


def _season(text: str, now: datetime) -> Window | None:
    match = re.fullmatch(r"(spring|summer|autumn|fall|winter)(?:\s+(?:of\s+)?(\d{4}))?", text)
    if not match:
        return None
    first = _SEASON_MONTHS[match.group(1)]
    if match.group(2):
        start = _month_start(int(match.group(2)), first)
    else:  # the latest one begun by now
        start = _month_start(now.year, first)
        if start > now:
            start = _month_start(now.year - 1, first)
    return Window(start, _month_start(start.year, start.month + 3), text)


@lru_cache(maxsize=8192)
def _absolute(text: str) -> tuple[datetime, str] | None:
    """A calendar date, month or year by dateparser: (its first day, its granularity)."""
    data = _parser().get_date_data(text)
    if data.date_obj is None:
        return None
    return _day(data.date_obj), data.period or "day"


def _calendar(text: str, now: datetime) -> Window | None:
    parsed = _absolute(text)
    if parsed is None:
        return None
    start, period = parsed
    if not re.search(r"\d{4}", text):  # no year named: the latest such date by now
        while start > now:
            start = start.replace(year=start.year - 1)
    if period == "year":
        return Window(
            datetime(start.year, 1, 1, tzinfo=UTC), datetime(start.year + 1, 1, 1, tzinfo=UTC), text
        )
    if period == "month":
        return Window(_month_start(start.year, start.month), _month_start(start.year, start.month + 1), text)
    return Window(start, start + DAY, text)


def _phrase_window(kind: str, text: str, now: datetime) -> Window | None:
    text = " ".join(text.lower().replace(".", "").split())
    if kind == "rel":
        # "on Tuesday", "Tuesday": the last one before now.
        return _relative(re.sub(rf"^(?:on\s+)?(?=(?:{_WEEKDAYS})$)", "last ", text), now)
    if kind in ("season", "lseason"):
        return _season(re.sub(r"^(?:last|this)\s+", "", text), now)
    try:
        return _calendar(text, now)
    except (ValueError, OverflowError):
        return None


def _shifted(window: Window, before: str) -> Window:
    """The window as changed by the words just before its phrase: "the week before X", "two
    days after X", "the last week of X", "early X", "since X", "before X" / "after X"."""
    shift = _SHIFT.search(before)
    if shift:
        span = _count(shift.group("n")) * _unit(shift.group("unit"))
        phrase = f"{shift.group(0).strip()} {window.phrase}"
        if shift.group("dir").lower() == "after":
            return Window(window.end, window.end + span, phrase)
        return Window(window.start - span, window.start, phrase)
    part = _PART.search(before)
    if part:
        which, unit = part.group("part").lower(), part.group("unit").lower()
        phrase = f"{part.group(0).strip()} {window.phrase}"
        length = (
            (window.end - window.start) / 2 if unit == "half" else (DAY if unit.startswith("day") else WEEK)
        )
        if which in ("last", "final"):
            return Window(window.end - length, window.end, phrase)
        index = {"first": 0, "second": 1, "third": 2}[which]
        return Window(window.start + index * length, window.start + (index + 1) * length, phrase)
    edge = _EDGE.search(before)
    if edge:
        third = (window.end - window.start) / 3
        word = edge.group("edge").lower()
        phrase = f"{edge.group(0).strip()} {window.phrase}"
        if word.startswith(("early", "the beginning", "the start", "beginning", "start")):
            return Window(window.start, window.start + third, phrase)
        if word.startswith(("late", "the end", "end")):
            return Window(window.end - third, window.end, phrase)
        return Window(window.start + third, window.end - third, phrase)
    side = _SIDE.search(before)
    if side:
        # Kept in the window: X itself (an ordering question keeps both candidates) and as much
        # again on the side named.
        word = side.group("side").lower()
        length = window.end - window.start
        phrase = f"{side.group(0).strip()} {window.phrase}"
        if word in ("before", "until", "till", "by"):
            return Window(window.start - length, window.end, phrase)
        return Window(window.start, window.end + length, phrase)
    return window


def windows(text: str, now: datetime) -> list[Window]:
    """The time windows `text` names, read against `now` (the time of the question; for a
    memory's content, its created_at). Empty when it names none: the common case, decided by
    one regular expression."""
    if not _DATE_LIKE.search(text):
        return []
    now = now.astimezone(UTC)
    found: list[tuple[int, int, Window]] = []
    for match in _PHRASE.finditer(text):
        kind = match.lastgroup or ""
        window = _phrase_window(kind, match.group(0), now)
        if window is None:
            continue
        found.append(
            (match.start(), match.end(), _shifted(window, text[max(0, match.start() - 40) : match.start()]))
        )
    out: list[Window] = []
    i = 0
    while i < len(found):
        start, end, window = found[i]
        # "between X and Y", "from X to Y": one window from X's start to Y's end.
        if i + 1 < len(found) and _BETWEEN.search(text[max(0, start - 12) : start]):
            next_start, _next_end, other = found[i + 1]
            if _AND.match(text[end:next_start]) and other.end > window.start:
                out.append(Window(window.start, other.end, text[start:_next_end]))
                i += 2
                continue
        out.append(window)
        i += 1
    return out


@lru_cache(maxsize=16384)
def _content_windows(content: str, created_at: datetime) -> tuple[Window, ...]:
    return tuple(windows(content[:CONTENT_CHARS], created_at))


def event_windows(content: str, created_at: datetime) -> tuple[tuple[Window, ...], str]:
    """When a memory's event happened: the dates its content names, read against its
    created_at, or else its created_at itself (and which of the two it was)."""
    named = _content_windows(content, created_at)
    if named:
        return named, "content"
    return (Window(created_at, created_at + timedelta(microseconds=1), "created_at"),), "created_at"


def match(query_windows: list[Window], content: str, created_at: datetime) -> Match | None:
    """The first of the query's windows the memory's event time falls in, or None."""
    events, source = event_windows(content, created_at)
    for window in query_windows:
        for event in events:
            if window.overlaps(event):
                return Match(window=window, event=event, source=source)
    return None
