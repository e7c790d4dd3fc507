"""The dedupe gate's labelled set (issue 27), built deterministically from the public dev data.

A pair is an older and a newer statement saved one after the other into an empty scope, labelled
`same` (the newer restates the older: the gate should merge) or `different` (another fact: the
gate should keep both). The statements are LoCoMo dialogue turns (`"<speaker>: <text>"`, as the
retrieval eval stores them) and observations (the dataset's per-session facts about each
speaker), and SciFact claims.

Restatements (`same`), each statement rewritten one way:
- `punctuation`: the final stop dropped (or added), commas dropped, "!" for the last ".";
- `case`: all lower case, or the first letter's case flipped;
- `filler`: "Also, ", "By the way, ", "Note: ", "FYI, " before the text (after a turn's speaker),
  or " too", " as well", " again" before its final stop;
- `order`: the first two sentences swapped (texts of two sentences or more);
- `mixed`: lower case, a filler and a punctuation change at once;
- `synonym`: one word (four letters or more) replaced by another single-word lemma of its most
  frequent WordNet sense (Debian's wordnet-base), e.g. "glad" for "happy"; a wrong sense makes
  some of these not quite the same fact;
- `observation` (natural): a LoCoMo observation and the dialogue turn it cites as its evidence
  (the dataset's own link): the same fact, worded by someone else;
- `scifact-repeat` (natural): two SciFact claims with the same text under different ids.
Changed facts (`different`), each statement with one thing changed:
- `number`: a number (digits or a number word) replaced by another;
- `date`: a month, weekday or relative day replaced by another of its kind, or a year by the next;
- `name`: a speaker's name replaced by another speaker's (LoCoMo);
- `identifier`: a token of letters and digits (CD4, HNF4A, IL-10) with one digit changed (SciFact);
- `polarity`: "not" added after the first auxiliary (is, was, can, ...), or a not/n't/never removed;
- `scifact-opposite` (natural): two claims about the same abstract sentences, one SUPPORTed by
  them and the other CONTRADICTed (SciFact's annotation): they cannot both hold.
Each rule takes up to PER_RULE statements per split, chosen by a seeded shuffle.

Splits: `dev` is LoCoMo conversations 1-5 and SciFact claims with an even id (for a pair, its
lower id): the difference rules' word lists were written looking at it (in-sample). `held-out` is
conversations 6-10 and odd ids, run once the rules were fixed.
"""

from __future__ import annotations

import json
import random
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from tooling.evaluation.datasets import WORDNET_DIR, _need

SPLITS = ("dev", "held-out")
PER_RULE = 100
MAX_CHARS = 400
SEED = 27

RESTATEMENTS = ("punctuation", "case", "filler", "order", "mixed", "synonym", "observation", "scifact-repeat")
CHANGES = ("number", "date", "name", "identifier", "polarity", "scifact-opposite")


@dataclass(frozen=True)
class Pair:
    older: str
    newer: str
    label: str  # same | different
    rule: str
    split: str
    source: str  # where `older` comes from, e.g. locomo:conv-26:D1:3, scifact:12


@dataclass(frozen=True)
class Statement:
    text: str
    source: str
    split: str
    speaker: str = ""  # a LoCoMo turn's speaker (its "<speaker>: " prefix)


# ---- sources -----------------------------------------------------------------------------------


def locomo_statements(data_dir: Path) -> tuple[list[Statement], dict[str, list[str]], list[Pair]]:
    """Turns and observations, each split's speaker names, and the `observation` pairs (an
    observation after the turn it cites)."""
    raw = json.loads(_need(data_dir / "locomo" / "locomo10.json").read_text())
    out: list[Statement] = []
    observed: list[Pair] = []
    speakers: dict[str, list[str]] = {split: [] for split in SPLITS}
    for n, sample in enumerate(raw):
        split = SPLITS[0] if n < len(raw) // 2 else SPLITS[1]
        name = sample.get("sample_id", str(n))
        conv = sample["conversation"]
        for who in (conv["speaker_a"], conv["speaker_b"]):
            if who not in speakers[split]:
                speakers[split].append(who)
        said: dict[str, str] = {}
        for key, turns in conv.items():
            if not re.fullmatch(r"session_\d+", key):
                continue
            for turn in turns:
                text = f"{turn['speaker']}: {turn['text']}"
                said[turn["dia_id"]] = text
                out.append(Statement(text, f"locomo:{name}:{turn['dia_id']}", split, turn["speaker"]))
        for session, by_speaker in sorted(sample.get("observation", {}).items()):
            for items in by_speaker.values():
                for text, dia_id in items:
                    out.append(Statement(text, f"locomo:{name}:{session}:{dia_id}", split))
                    turn_text = said.get(dia_id) if isinstance(dia_id, str) else None
                    if turn_text and len(turn_text) <= MAX_CHARS:
                        observed.append(
                            Pair(turn_text, text, "same", "observation", split, f"locomo:{name}:{dia_id}")
                        )
    return [s for s in out if len(s.text) <= MAX_CHARS], speakers, observed


def scifact_claims(data_dir: Path) -> list[dict]:
    with _need(data_dir / "scifact" / "queries.jsonl").open() as handle:
        return [json.loads(line) for line in handle]


def _claim_split(claim_id: str) -> str:
    return SPLITS[int(claim_id) % 2]


def scifact_statements(claims: list[dict]) -> list[Statement]:
    return [Statement(c["text"], f"scifact:{c['_id']}", _claim_split(c["_id"])) for c in claims]


def scifact_natural(claims: list[dict]) -> list[Pair]:
    """Same-text claims (`scifact-repeat`) and SUPPORT/CONTRADICT claims of one evidence set."""
    out: list[Pair] = []
    by_text: dict[str, list[dict]] = {}
    for claim in claims:
        by_text.setdefault(" ".join(claim["text"].split()), []).append(claim)
    for group in by_text.values():
        if len(group) > 1:
            first, second = sorted(group, key=lambda c: int(c["_id"]))[:2]
            split = _claim_split(first["_id"])
            out.append(
                Pair(
                    first["text"], second["text"], "same", "scifact-repeat", split, f"scifact:{first['_id']}"
                )
            )
    evidence: dict[tuple[str, tuple[int, ...]], dict[str, list[dict]]] = {}
    for claim in claims:
        for doc, sets in claim["metadata"].items():
            for item in sets:
                key = (doc, tuple(item["sentences"]))
                evidence.setdefault(key, {}).setdefault(item["label"], []).append(claim)
    seen: set[tuple[str, str]] = set()
    for labels in evidence.values():
        for supported in labels.get("SUPPORT", []):
            for contradicted in labels.get("CONTRADICT", []):
                first, second = sorted((supported, contradicted), key=lambda c: int(c["_id"]))
                ids = (first["_id"], second["_id"])
                if ids in seen or " ".join(first["text"].split()) == " ".join(second["text"].split()):
                    continue
                seen.add(ids)
                out.append(
                    Pair(
                        first["text"],
                        second["text"],
                        "different",
                        "scifact-opposite",
                        _claim_split(first["_id"]),
                        f"scifact:{first['_id']}",
                    )
                )
    return out


# ---- restatements ------------------------------------------------------------------------------


def _body(statement: Statement) -> tuple[str, str]:
    """A turn's speaker prefix and its text (the prefix stays as it is)."""
    prefix = f"{statement.speaker}: " if statement.speaker else ""
    return prefix, statement.text[len(prefix) :]


def restate_punctuation(s: Statement, rng: random.Random) -> str | None:
    prefix, body = _body(s)
    choice = rng.randrange(3)
    if choice == 0:
        changed = body[:-1] if body[-1:] in ".!?" else body + "."
    elif choice == 1:
        changed = body.replace(",", "")
    else:
        cut = body.rfind(".")
        changed = body[:cut] + "!" + body[cut + 1 :] if cut >= 0 else body + "!"
    return prefix + changed if changed != body else None


def restate_case(s: Statement, rng: random.Random) -> str | None:
    if rng.randrange(2) == 0:
        return s.text.lower() if s.text.lower() != s.text else None
    prefix, body = _body(s)
    first = body[:1]
    return prefix + (first.lower() if first.isupper() else first.upper()) + body[1:]


_PREFIXES = ("Also, ", "By the way, ", "Note: ", "FYI, ")
_SUFFIXES = (" too", " as well", " again")


def _with_filler(body: str, rng: random.Random) -> str:
    if rng.randrange(2) == 0:
        start = body[:1].lower() if body[:1].isupper() and not body.startswith("I ") else body[:1]
        return rng.choice(_PREFIXES) + start + body[1:]
    end = len(body.rstrip(" .!?"))
    return body[:end] + rng.choice(_SUFFIXES) + body[end:]


def restate_filler(s: Statement, rng: random.Random) -> str | None:
    prefix, body = _body(s)
    return prefix + _with_filler(body, rng)


def restate_order(s: Statement, rng: random.Random) -> str | None:
    prefix, body = _body(s)
    sentences = re.split(r"(?<=[.!?])\s+", body.strip())
    if len(sentences) < 2:
        return None
    del rng
    return prefix + " ".join([sentences[1], sentences[0], *sentences[2:]])


def restate_mixed(s: Statement, rng: random.Random) -> str | None:
    prefix, body = _body(s)
    body = _with_filler(body, rng).lower()
    body = body[:-1] if body[-1:] in ".!?" else body + "."
    return prefix + body


class WordNet:
    """The most frequent sense's other single-word lemmas, from Debian's wordnet-base."""

    POS = ("verb", "adj", "adv", "noun")

    def __init__(self, folder: Path = WORDNET_DIR) -> None:
        self.folder = folder
        self.first: dict[str, tuple[str, int]] = {}  # lemma -> (pos, offset of its first sense)
        for pos in reversed(self.POS):  # the earlier part of speech wins
            for line in _need(folder / f"index.{pos}").read_text(encoding="latin-1").splitlines():
                if line.startswith(" "):
                    continue
                fields = line.split()
                self.first[fields[0]] = (pos, int(fields[-int(fields[2])]))

    def synonyms(self, word: str) -> list[str]:
        if word not in self.first:
            return []
        pos, offset = self.first[word]
        with (self.folder / f"data.{pos}").open("rb") as handle:
            handle.seek(offset)
            fields = handle.readline().decode("latin-1").split()
        count = int(fields[3], 16)
        lemmas = [re.sub(r"\(.*\)$", "", fields[4 + 2 * i]) for i in range(count)]
        return [w for w in lemmas if w.isalpha() and w.islower() and w != word and not w.startswith(word[:4])]


_WORD = re.compile(r"(?<![\w'-])[a-z]{4,}(?![\w'-])")
_COMMON = frozenset("that this with have from they them then than what when were been will your just".split())


def restate_synonym(s: Statement, rng: random.Random, wordnet: WordNet) -> str | None:
    prefix, body = _body(s)
    options = [
        (m, syn)
        for m in _WORD.finditer(body)
        if m.group(0) not in _COMMON
        for syn in wordnet.synonyms(m.group(0))
    ]
    if not options:
        return None
    found, synonym = rng.choice(options)
    return prefix + _replace(body, found, synonym)


# ---- changes -----------------------------------------------------------------------------------

_NUMBER_WORDS = "two three four five six seven eight nine ten eleven twelve".split()
_DIGITS = re.compile(r"(?<![\w.:/$-])\d+(?:\.\d+)?(?![\w.:/-]\d)")
_NUMBER_WORD = re.compile(r"\b(" + "|".join(_NUMBER_WORDS) + r")\b", re.IGNORECASE)
_MONTHS = "January February March April June July August September October November December".split()
_WEEKDAYS = "Monday Tuesday Wednesday Thursday Friday Saturday Sunday".split()
_RELATIVE = {"yesterday": "last week", "today": "yesterday", "tomorrow": "next week", "tonight": "last night"}
_DATE = re.compile(
    r"\b("
    + "|".join(_MONTHS + _WEEKDAYS)
    + r")\b|\b(yesterday|today|tomorrow|tonight)\b|\b(19[5-9]\d|20[0-3]\d)\b"
)
_IDENTIFIER = re.compile(r"\b(?=[\w-]*\d)(?=[\w-]*[A-Za-z])[A-Za-z][\w-]*\b")
_AUXILIARY = re.compile(r"\b(is|are|was|were|can|will|should|could|would|has|have|had)\b (?!not\b)")
_NEGATION = re.compile(r"\b(not|never) |n't\b")


def _pick(matches: list[re.Match[str]], rng: random.Random) -> re.Match[str] | None:
    return rng.choice(matches) if matches else None


def _replace(text: str, match: re.Match[str], new: str) -> str:
    return text[: match.start()] + new + text[match.end() :]


def _rewrite(
    s: Statement,
    rng: random.Random,
    matches: Callable[[str], list[re.Match[str]]],
    new: Callable[[re.Match[str]], str],
) -> str | None:
    """The statement with one of the matches in its body, picked by rng, replaced by new(match);
    None when its body has none."""
    prefix, body = _body(s)
    found = _pick(matches(body), rng)
    if found is None:
        return None
    return prefix + _replace(body, found, new(found))


def change_number(s: Statement, rng: random.Random) -> str | None:
    def new(found: re.Match[str]) -> str:
        old = found.group(0)
        if old[0].isdigit():
            if "." in old:
                whole, frac = old.split(".")
                return f"{whole}.{frac[:-1]}{(int(frac[-1]) + rng.randint(1, 8)) % 10}"
            value = int(old)
            return str(value * 10 if value and rng.randrange(2) == 0 else value + rng.randint(1, 9))
        word = rng.choice([w for w in _NUMBER_WORDS if w != old.lower()])
        return word.capitalize() if old[0].isupper() else word

    return _rewrite(
        s, rng, lambda body: list(_DIGITS.finditer(body)) + list(_NUMBER_WORD.finditer(body)), new
    )


def change_date(s: Statement, rng: random.Random) -> str | None:
    def new(found: re.Match[str]) -> str:
        old = found.group(0)
        if found.group(1):
            pool = _MONTHS if old in _MONTHS else _WEEKDAYS
            return rng.choice([x for x in pool if x != old])
        if found.group(2):
            return _RELATIVE[old]
        return str(int(old) + 1)

    return _rewrite(s, rng, lambda body: list(_DATE.finditer(body)), new)


def change_name(s: Statement, rng: random.Random, names: list[str]) -> str | None:
    return _rewrite(
        s,
        rng,
        lambda body: [m for name in names for m in re.finditer(rf"\b{re.escape(name)}\b", body)],
        lambda found: rng.choice([n for n in names if n != found.group(0)]),
    )


def change_identifier(s: Statement, rng: random.Random) -> str | None:
    def new(found: re.Match[str]) -> str:
        token = found.group(0)
        at = rng.choice([i for i, c in enumerate(token) if c.isdigit()])
        return token[:at] + str((int(token[at]) + rng.randint(1, 9)) % 10) + token[at + 1 :]

    return _rewrite(s, rng, lambda body: list(_IDENTIFIER.finditer(body)), new)


def change_polarity(s: Statement, rng: random.Random) -> str | None:
    prefix, body = _body(s)
    negated = list(_NEGATION.finditer(body))
    if negated and rng.randrange(2) == 0:
        return prefix + _replace(body, rng.choice(negated), "")
    auxiliary = _AUXILIARY.search(body)
    if auxiliary is None:
        return prefix + _replace(body, negated[0], "") if negated else None
    return prefix + body[: auxiliary.end()] + "not " + body[auxiliary.end() :]


# ---- the set -----------------------------------------------------------------------------------

Rule = Callable[[Statement, random.Random], str | None]


def _apply(
    rule: str, label: str, func: Rule, statements: list[Statement], split: str, per_rule: int
) -> list[Pair]:
    rng = random.Random(f"{SEED}:{rule}:{split}")
    candidates = [s for s in statements if s.split == split]
    rng.shuffle(candidates)
    out: list[Pair] = []
    for statement in candidates:
        if len(out) == per_rule:
            break
        newer = func(statement, rng)
        if newer is None or " ".join(newer.split()) == " ".join(statement.text.split()):
            continue
        out.append(Pair(statement.text, newer, label, rule, split, statement.source))
    return out


def build(data_dir: Path, limit: int | None = None) -> list[Pair]:
    """The labelled set, in a fixed order (the same every run). `limit`: at most this many pairs
    per rule and split, for a quick slice; None is the whole set (the natural pairs all kept)."""
    per_rule = min(PER_RULE, limit) if limit is not None else PER_RULE
    turns, speakers, observed = locomo_statements(data_dir)
    claims = scifact_claims(data_dir)
    wordnet = WordNet()
    sci = scifact_statements(claims)
    both = turns + sci
    pairs: list[Pair] = []
    for split in SPLITS:
        restatements: dict[str, Rule] = {
            "punctuation": restate_punctuation,
            "case": restate_case,
            "filler": restate_filler,
            "order": restate_order,
            "mixed": restate_mixed,
            "synonym": partial(restate_synonym, wordnet=wordnet),
        }
        for rule, func in restatements.items():
            pairs += _apply(rule, "same", func, both, split, per_rule)
        names = speakers[split]
        changes: dict[str, tuple[Rule, list[Statement]]] = {
            "number": (change_number, both),
            "date": (change_date, turns),
            "name": (partial(change_name, names=names), turns),
            "identifier": (change_identifier, sci),
            "polarity": (change_polarity, both),
        }
        for rule, (func, statements) in changes.items():
            pairs += _apply(rule, "different", func, statements, split, per_rule)
        rng = random.Random(f"{SEED}:observation:{split}")
        mine = [p for p in observed if p.split == split]
        rng.shuffle(mine)
        pairs += mine[:per_rule]
    natural = scifact_natural(claims)
    return pairs + (_first(natural, limit) if limit is not None else natural)


def _first(pairs: list[Pair], limit: int) -> list[Pair]:
    """The first `limit` pairs of each rule and split."""
    seen: Counter[tuple[str, str]] = Counter()
    out = []
    for pair in pairs:
        seen[pair.rule, pair.split] += 1
        if seen[pair.rule, pair.split] <= limit:
            out.append(pair)
    return out
