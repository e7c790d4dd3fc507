"""What differs between two statements of a fact: the dedupe gate's second half (issue 27).

Deterministic, no model. Two near-duplicate statements are the same fact (a restatement) when
they differ only in case, punctuation, word order, articles and auxiliaries, filler words
("too", "also", ...) or added and dropped ordinary words. They are different facts when they
differ in

- a number (``100 -> 1000``, ``1.2 -> 1.3``, ``two -> 3``; ``1,000`` is ``1000`` and ``two`` is
  ``2``, but ``one hundred`` is not read as ``100``),
- a date or time (month, weekday, yesterday/today/tomorrow, ``2024-03-01``, ``9:30``, ``2pm``),
- an identifier (a code token, path, URL, handle, version, ticket, host: ``q1 -> q2``),
- a name (a capitalised word inside a sentence, an acronym),
- polarity (a negation added or removed: ``not added``),
- or a word replaced by another at the same place (``increases -> decreases``, ``vim -> emacs``).

A number, date, identifier or name that is only added or only dropped is a difference too
("retried" vs "retried 3 times"); an ordinary word that is only added or dropped is not
(elaboration, filler). The two token streams are aligned (difflib) so that a change is
reported where it happened; a token that moved (present on both sides, outside the alignment)
is a reordering, not a change, unless two places swapped their words ("A before B" vs
"B before A").
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from difflib import SequenceMatcher

__all__ = ["Difference", "contradiction", "describe", "differences"]

# The kinds a difference can have, most specific first (a changed span holding a number and a
# word is a number change); besides these, "passage" (a differing part too long to align).
KINDS = ("polarity", "number", "date", "identifier", "name", "word")
# The part where two texts differ is aligned when it is at most this many words (alignment is
# quadratic at worst); a longer one is one difference, so a text never merges on what was not read.
MAX_TOKENS = 1000
# Chunks kept either side of the part where two texts differ (for sentence starts, "9 am", and
# where a change sits in its sentence).
CONTEXT = 8

NEGATIONS = frozenset("not no never none nobody nothing nowhere neither nor without".split())
# Words whose presence or replacement never makes a different fact: articles, auxiliaries, common
# prepositions and conjunctions, conversational filler. Not pronouns: "she" for "he" is another fact.
_STOP = frozenset(
    """a an the 's is are was were be been being am do does did has have had having will would
    shall of to in on at for with by from as into onto about than and or but so then that which
    also too really actually just very quite basically indeed again anyway btw fyi note ok okay oh
    well yes yeah hey hi please e.g i.e etc and/or 're 've 'll 'd 'm""".split()
)
_ARTICLES = frozenset({"a", "an", "the"})
_MONTHS = frozenset(
    "january february march april may june july august september october november december".split()
)
_MONTH_ABBREVIATIONS = frozenset("jan feb mar apr jun jul aug sep sept oct nov dec".split())
_WEEKDAYS = frozenset("monday tuesday wednesday thursday friday saturday sunday".split())
_RELATIVE_DAYS = frozenset({"yesterday", "today", "tomorrow", "tonight"})
_NUMBER_WORDS = {
    word: value
    for value, word in enumerate(
        "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen"
        " fifteen sixteen seventeen eighteen nineteen twenty".split()
    )
} | {
    "thirty": 30,
    "forty": 40,
    "fifty": 50,
    "sixty": 60,
    "seventy": 70,
    "eighty": 80,
    "ninety": 90,
    "hundred": 100,
    "thousand": 1000,
    "million": 1_000_000,
    "billion": 1_000_000_000,
    "dozen": 12,
    "twice": 2,
}

_EDGE_OPEN = "\"'([{<*`“‘"
_EDGE_CLOSE = "\"')]}>,;:!?.*`”’"
_SENTENCE_END = (".", "!", "?", ":", ";")
_NUMBER = re.compile(
    r"^(?P<sign>[-+−]?)[$€£¥]?(?P<digits>\d{1,3}(?:,\d{3})+|\d+)(?P<fraction>\.\d+)?"
    r"(?P<unit>%|[A-Za-zµμ/]+)?$"
)
_ORDINAL = frozenset({"st", "nd", "rd", "th"})
_TIME = re.compile(
    r"^(?P<h>\d{1,2})(?::(?P<m>\d{2}))?(?::(?P<s>\d{2}))?(?P<ampm>[ap]\.?m\.?)?$", re.IGNORECASE
)
_AMPM = re.compile(r"^[ap]\.?m\.?$", re.IGNORECASE)
_DATE = re.compile(r"^(?:\d{4}-\d{2}-\d{2}(?:[T ][\d:.]+Z?)?|\d{1,2}/\d{1,2}/\d{2,4})$")
_VERSION = re.compile(r"^v\d+(?:\.\d+)*(?:[-+][\w.]+)?$|^\d+(?:\.\d+){2,}(?:[-+][\w.]+)?$", re.IGNORECASE)
_RANGE = re.compile(r"^(\d+(?:\.\d+)?)[-–](\d+(?:\.\d+)?)(%|[A-Za-z]+)?$")
# URLs and handles, snake_case, dotted names and paths, camelCase, letters with digits (q1, HNF4A).
_IDENTIFIER_SHAPE = re.compile(r"^(?:https?://|@)|_|\w[./]\w|[a-z][A-Z]|^(?=.*\d)(?=.*[A-Za-z])")
_IP = re.compile(r"^\d{1,3}(?:\.\d{1,3}){3}(?::\d+)?$")
_CAPITALISED = re.compile(r"^[A-Z][a-z]")
_ACRONYM = re.compile(r"^[A-Z]{2,}s?$")
_CONTRACTIONS = {
    "can't": ("can", "not"),
    "cannot": ("can", "not"),
    "won't": ("will", "not"),
    "ain't": ("is", "not"),
}
_CLITIC = re.compile(r"^(?P<base>.+?)(?P<clitic>n't|'s|'re|'ve|'ll|'d|'m)$", re.IGNORECASE)


@dataclass(frozen=True)
class Token:
    text: str  # as written (edge punctuation stripped)
    key: str  # what the alignment compares
    kind: str  # one of KINDS (not polarity), "negation" or "stop"


@dataclass(frozen=True)
class Difference:
    """One change from the older statement to the newer. `old` is empty when something was added,
    `new` when something was dropped. `shared_before` counts the words both statements share
    before the change (articles not counted): where the change sits in the statement."""

    kind: str
    old: str
    new: str
    shared_before: int = 0

    def __str__(self) -> str:
        if self.kind == "passage":
            return f"a passage of more than {MAX_TOKENS} words differs"
        if self.kind == "polarity":
            return f"{self.new} added" if self.new else f"{self.old} removed"
        if not self.old:
            return f"{self.new} added"
        if not self.new:
            return f"{self.old} removed"
        return f"{self.old} -> {self.new}"


def _stem(word: str) -> str:
    """A crude suffix strip so that inflections of one word align (increases = increased)."""
    if len(word) > 4:
        for suffix in ("ing", "ed", "es", "s"):
            if word.endswith(suffix) and len(word) - len(suffix) >= 3:
                word = word[: -len(suffix)]
                break
        if word.endswith("e") and len(word) > 3:
            word = word[:-1]
    return word


def _number_key(digits: str, fraction: str | None) -> str:
    whole = digits.replace(",", "")
    frac = (fraction or "").rstrip("0").rstrip(".")
    return f"{int(whole)}{frac}"


def _number_word(lower: str) -> int | None:
    if lower in _NUMBER_WORDS:
        return _NUMBER_WORDS[lower]
    tens, _, unit = lower.partition("-")
    if unit and tens in _NUMBER_WORDS and unit in _NUMBER_WORDS:
        if 20 <= _NUMBER_WORDS[tens] <= 90 and 1 <= _NUMBER_WORDS[unit] <= 9:
            return _NUMBER_WORDS[tens] + _NUMBER_WORDS[unit]
    return None


def _word(text: str, initial: bool) -> Token:
    lower = text.lower()
    if lower in NEGATIONS:
        return Token(text, lower, "negation")
    if lower in _STOP:
        return Token(text, lower, "stop")
    value = _number_word(lower)
    if value is not None:
        return Token(text, str(value), "number")
    singular = lower[:-1] if lower.endswith("s") else lower
    if singular in _WEEKDAYS or lower in _RELATIVE_DAYS:
        return Token(text, singular if singular in _WEEKDAYS else lower, "date")
    # A capitalised month is a date; "may" and "march" in lower case are a verb.
    if text[:1].isupper() and (lower in _MONTHS or lower.rstrip(".") in _MONTH_ABBREVIATIONS):
        if not (lower == "may" and initial):
            return Token(text, lower.rstrip(".")[:3], "date")
    if _IDENTIFIER_SHAPE.search(text):
        return Token(text, _stem(lower), "identifier")
    key = _stem(lower)
    if not initial and (_CAPITALISED.match(text) or _ACRONYM.match(text)):
        return Token(text, key, "name")
    return Token(text, key, "word")


def _split(core: str) -> list[str]:
    """A word with a clitic or contraction as its parts (don't -> do not, Dana's -> Dana 's)."""
    lower = core.lower()
    if lower in _CONTRACTIONS:
        return list(_CONTRACTIONS[lower])
    match = _CLITIC.match(core)
    if match and match["base"].isalpha():
        clitic = match["clitic"].lower()
        return [match["base"], "not" if clitic == "n't" else clitic]
    return [core]


def _classify(core: str, initial: bool, backticked: bool) -> list[Token]:
    if backticked:
        return [Token(core, _stem(core.lower()), "identifier")]
    if _DATE.match(core):
        return [Token(core, core.lower(), "date")]
    if _VERSION.match(core) or _IP.match(core):
        return [Token(core, core.lower(), "identifier")]
    time = _TIME.match(core)
    if time and (time["m"] or time["ampm"]):
        return [_time_token(core, time)]
    spread = _RANGE.match(core)
    if spread:
        low, high, unit = spread.groups()
        out = [_number(low), _number(high)]
        return out + ([_unit(unit)] if unit else [])
    number = _NUMBER.match(core)
    if number:
        sign = "-" if number["sign"] in ("-", "−") else ""
        token = Token(core, sign + _number_key(number["digits"], number["fraction"]), "number")
        unit = number["unit"]
        if unit is None or unit.lower() in _ORDINAL:
            return [token]
        return [token, _unit(unit)]
    return [_word(part, initial and n == 0) for n, part in enumerate(_split(core))]


def _number(text: str) -> Token:
    whole, _, frac = text.partition(".")
    return Token(text, _number_key(whole, f".{frac}" if frac else None), "number")


def _unit(text: str) -> Token:
    lower = "percent" if text == "%" else text.lower()
    return Token(text, lower, "word")


def _time_token(text: str, match: re.Match[str]) -> Token:
    hour, minute = int(match["h"]), match["m"] or "00"
    ampm = (match["ampm"] or "").replace(".", "").lower()
    key = f"{hour}{'' if ampm and minute == '00' else ':' + minute}{ampm}"
    return Token(text, key, "date")


def _chunks(text: str) -> list[str]:
    """The text split at white space, a line break kept as its own chunk."""
    return re.findall(r"\S+|\n", text.replace("’", "'").replace("‘", "'"))


def _plain(chunk: str) -> str:
    """A chunk as a cheap comparison sees it (case and edge punctuation aside)."""
    return chunk.lower().strip(_EDGE_OPEN + _EDGE_CLOSE)


def _starts_sentence(chunk: str) -> bool:
    """Whether the chunk after this one starts a sentence, a line or a list item."""
    return (
        chunk == "\n"
        or chunk in ("-", "*", "•")
        or chunk.rstrip("\"')]}*`”").endswith(_SENTENCE_END)
        or bool(re.fullmatch(r"\d+[.)]", chunk))
    )


def tokens(chunks: list[str], initial: bool = True) -> list[Token]:
    """Chunks of a statement as aligned tokens (pure punctuation dropped); `initial`: the first
    chunk starts a sentence."""
    out: list[Token] = []
    for chunk in chunks:
        if chunk == "\n":
            initial = True
            continue
        core = chunk.lstrip(_EDGE_OPEN).rstrip(_EDGE_CLOSE)
        backticked = chunk.startswith("`") and chunk.rstrip(_EDGE_CLOSE.replace("`", "")).endswith("`")
        if not any(c.isalnum() for c in core):
            initial = initial or _starts_sentence(chunk)
            continue
        previous = out[-1] if out else None
        joined = _TIME.match(previous.text + core) if previous and _AMPM.match(core) else None
        if previous and joined and previous.kind in ("number", "date") and int(joined["h"]) <= 12:
            out[-1] = _time_token(f"{previous.text} {core}", joined)  # "9 am", "9:30 pm": one time
        else:
            out.extend(_classify(core, initial, backticked))
        initial = _starts_sentence(chunk)
    return out


def _significant(token: Token) -> bool:
    return token.kind not in ("stop", "negation")


def _fact(token: Token) -> bool:
    return token.kind in ("number", "date", "identifier", "name")


def _kind(tokens_: list[Token]) -> str:
    kinds = {t.kind for t in tokens_}
    return next((k for k in KINDS if k in kinds), "word")


def _polarity(old: list[Token], new: list[Token]) -> list[Difference]:
    before = Counter(t.key for t in old if t.kind == "negation")
    after = Counter(t.key for t in new if t.kind == "negation")
    if sum(before.values()) == sum(after.values()):
        return []  # "no" for "not": the same polarity, worded otherwise
    out = []
    for cue in sorted(before.keys() | after.keys()):
        delta = after[cue] - before[cue]
        if delta > 0:
            out.append(Difference("polarity", "", cue))
        elif delta < 0:
            out.append(Difference("polarity", cue, ""))
    return out


@dataclass
class _Span:
    """One place where the alignment found the texts unequal."""

    tag: str  # replace | delete | insert
    start: int  # in the old text's tokens
    old: list[Token]
    new: list[Token]


def _unmoved(spans: list[_Span]) -> None:
    """Drop the tokens that only moved: dropped at one place and added at another. Two
    replacements that trade words ("A before B" -> "B before A") are a swap and stay."""
    added: dict[str, list[tuple[_Span, Token]]] = {}
    for span in spans:
        for token in span.new:
            added.setdefault(token.key, []).append((span, token))
    for span in spans:
        for token in list(span.old):
            candidates = added.get(token.key, [])
            found = next(
                (
                    n
                    for n, (other, _) in enumerate(candidates)
                    if other is not span and not (span.tag == "replace" and other.tag == "replace")
                ),
                None,
            )
            if found is not None:
                other, match = candidates.pop(found)
                span.old.remove(token)
                other.new.remove(match)


def _trimmed(old: str, new: str) -> tuple[list[str], list[str], bool, int]:
    """The two statements' chunks around the part where they differ: a common start and end
    (equal but for case and edge punctuation) are left out but for CONTEXT chunks, so a long text
    costs what its changes cost. Also whether the kept part starts a sentence, and how many words
    the left-out start holds."""
    ca, cb = _chunks(old), _chunks(new)
    pa, pb = [_plain(c) for c in ca], [_plain(c) for c in cb]
    start = 0
    while start < min(len(pa), len(pb)) and pa[start] == pb[start]:
        start += 1
    end = 0
    while end < min(len(pa), len(pb)) - start and pa[-1 - end] == pb[-1 - end]:
        end += 1
    lo = max(0, start - CONTEXT)
    tail = max(0, end - CONTEXT)
    initial = lo == 0 or _starts_sentence(ca[lo - 1])
    skipped = sum(1 for c in pa[:lo] if c not in _ARTICLES and any(ch.isalnum() for ch in c))
    return ca[lo : len(ca) - tail], cb[lo : len(cb) - tail], initial, skipped


def differences(old: str, new: str) -> list[Difference]:
    """The changes from `old` to `new` that make them different facts; empty for a restatement."""
    chunks_a, chunks_b, initial, skipped = _trimmed(old, new)
    if len(chunks_a) > MAX_TOKENS or len(chunks_b) > MAX_TOKENS:
        # Too long to align: never merged on what was not read.
        return [Difference("passage", "", "", skipped)]
    a, b = tokens(chunks_a, initial), tokens(chunks_b, initial)
    out = _polarity(a, b)
    matcher = SequenceMatcher(None, [t.key for t in a], [t.key for t in b], autojunk=False)
    spans = [
        _Span(tag, i1, [t for t in a[i1:i2] if _significant(t)], [t for t in b[j1:j2] if _significant(t)])
        for tag, i1, i2, j1, j2 in matcher.get_opcodes()
        if tag != "equal"
    ]
    _unmoved(spans)
    equal_before = [skipped]  # words both texts share before each old position (articles aside)
    matched = {i for block in matcher.get_matching_blocks() for i in range(block.a, block.a + block.size)}
    for i, token in enumerate(a):
        equal_before.append(equal_before[-1] + (i in matched and token.key not in _ARTICLES))
    # Ordinary words dropped at one place and others added at another: a word was replaced
    # (with a reordering around it), unlike words only added or only dropped.
    dropped: list[Token] = []
    added: list[Token] = []
    first_change: int | None = None
    for span in spans:
        shared = equal_before[span.start]
        olds, news = span.old, span.new
        if olds and news:
            out.append(Difference(_kind(olds + news), _text(olds), _text(news), shared))
            continue
        facts_old, facts_new = [t for t in olds if _fact(t)], [t for t in news if _fact(t)]
        if facts_old:
            out.append(Difference(_kind(facts_old), _text(facts_old), "", shared))
        if facts_new:
            out.append(Difference(_kind(facts_new), "", _text(facts_new), shared))
        dropped += [t for t in olds if not _fact(t)]
        added += [t for t in news if not _fact(t)]
        if (olds or news) and first_change is None:
            first_change = shared
    if dropped and added:
        out.append(Difference("word", _text(dropped), _text(added), first_change or 0))
    return out


def _text(tokens_: list[Token]) -> str:
    return " ".join(t.text for t in tokens_)


def describe(found: list[Difference]) -> list[str]:
    """The differences as the save answer lists them: each once, in the order found."""
    return list(dict.fromkeys(str(d) for d in found))


def contradiction(old: str, new: str) -> Difference | None:
    """The one change by which `new` contradicts `old`, when the two give the same entity and
    attribute a different value: everything but the polarity or one value is the same, and the
    value comes after the entity and its attribute. A changed word needs one shared word before it
    ("Rapamycin increases ..." -> "... decreases ..."); a changed number, date, identifier or name
    two ("The rate limit is 100" -> "... 1000"), since one word and a number or name is usually
    itself a name ("service 1", "Python 3"). A change at the start ("Alice's laptop" -> "Bob's
    laptop"), several changes ("service 1 ... q1" -> "service 2 ... q2") or an addition is not one."""
    found = differences(old, new)
    if len(found) != 1:
        return None
    (change,) = found
    if change.kind == "polarity":
        return change
    needed = 1 if change.kind == "word" else 2
    if change.old and change.new and change.shared_before >= needed:
        return change
    return None
