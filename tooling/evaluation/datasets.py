"""Loading the public evaluation sets (kept outside the repository, in ../shared/data).

LoCoMo (turn level): one isolated scope per conversation; each dialog turn is one conversation
record `"<speaker>: <text>"` (+ `[shares a photo: <caption>]`) in its session's thread, dated by
its session; questions of categories 1-4 with normalised evidence turn ids.
SciFact (BEIR): the corpus as documents (title as description, abstract as content), the test
queries and their relevance judgements.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

from hypermnesia.errors import StartupError

_SESSION_KEY = re.compile(r"session_(\d+)")
_EVIDENCE = re.compile(r"D\s*:?\s*(\d+)\s*:\s*(\d+)")


@dataclass
class Doc:
    ref: str
    content: str
    description: str = ""
    thread_id: str = ""
    created_at: datetime | None = None


@dataclass
class Question:
    text: str
    relevant: dict[str, int]  # doc ref -> grade
    category: int = 0


@dataclass
class Corpus:
    name: str  # becomes part of the scope
    docs: list[Doc] = field(default_factory=list)
    questions: list[Question] = field(default_factory=list)


def _need(path: Path) -> Path:
    if not path.exists():
        raise StartupError(
            f"{path} not found; pass --data-dir pointing at the folder holding locomo/ and scifact/"
        )
    return path


def normalise_evidence(raw: list) -> list[str]:
    """`D8:6; D9:17`, `D:11:26`, `D30:05`, ranges like `D1:3-5` -> canonical `D<s>:<t>` ids."""
    out: list[str] = []
    for item in raw:
        text = str(item)
        for part in re.split(r"[;,]", text):
            match = _EVIDENCE.search(part)
            if not match:
                continue
            session, turn = int(match.group(1)), int(match.group(2))
            span = re.search(r"-\s*(\d+)\s*$", part)
            last = int(span.group(1)) if span else turn
            out.extend(f"D{session}:{t}" for t in range(turn, max(turn, last) + 1))
    return out


def _session_time(text: str) -> datetime:
    return datetime.strptime(text.strip(), "%I:%M %p on %d %B, %Y").replace(tzinfo=UTC)


def load_locomo(data_dir: Path) -> list[Corpus]:
    raw = json.loads(_need(data_dir / "locomo" / "locomo10.json").read_text())
    corpora = []
    for n, sample in enumerate(raw, start=1):
        conv = sample["conversation"]
        corpus = Corpus(name=f"locomo:{sample.get('sample_id', n)}")
        sessions = sorted((int(m.group(1)), k) for k in conv if (m := _SESSION_KEY.fullmatch(k)))
        for number, key in sessions:
            start = _session_time(conv[f"{key}_date_time"])
            for index, turn in enumerate(conv[key]):
                text = f"{turn['speaker']}: {turn['text']}"
                if turn.get("blip_caption"):
                    text += f" [shares a photo: {turn['blip_caption']}]"
                ref = normalise_evidence([turn["dia_id"]])[0]
                # Turns of a session share its date; a second apart keeps their order.
                corpus.docs.append(
                    Doc(
                        ref=ref,
                        content=text,
                        thread_id=f"session-{number}",
                        created_at=start + timedelta(seconds=index),
                    )
                )
        refs = {d.ref for d in corpus.docs}
        for qa in sample["qa"]:
            if qa.get("category") not in (1, 2, 3, 4):
                continue
            evidence = [e for e in normalise_evidence(qa.get("evidence", [])) if e in refs]
            if evidence:
                corpus.questions.append(
                    Question(text=qa["question"], relevant={e: 1 for e in evidence}, category=qa["category"])
                )
        corpora.append(corpus)
    return corpora


def load_scifact(data_dir: Path) -> list[Corpus]:
    folder = data_dir / "scifact"
    corpus = Corpus(name="scifact")
    with _need(folder / "corpus.jsonl").open() as handle:
        for line in handle:
            doc = json.loads(line)
            corpus.docs.append(
                Doc(ref=str(doc["_id"]), content=doc["text"], description=doc.get("title", ""))
            )
    queries = {}
    with _need(folder / "queries.jsonl").open() as handle:
        for line in handle:
            q = json.loads(line)
            queries[str(q["_id"])] = q["text"]
    judged: dict[str, dict[str, int]] = {}
    with _need(folder / "qrels" / "test.tsv").open() as handle:
        next(handle)
        for line in handle:
            qid, doc_id, grade = line.split()
            judged.setdefault(qid, {})[doc_id] = int(grade)
    for qid in sorted(judged, key=int):
        corpus.questions.append(Question(text=queries[qid], relevant=judged[qid]))
    return [corpus]
