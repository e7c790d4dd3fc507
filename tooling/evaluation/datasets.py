"""Loading the public evaluation sets (kept outside the repository, in ../shared/data).

LoCoMo (turn level): one isolated scope per conversation; each dialog turn is one conversation
record `"<speaker>: <text>"` (+ `[shares a photo: <caption>]`) in its session's thread, dated by
its session; questions of categories 1-4 with normalised evidence turn ids.
LoCoMo's question categories (its authors' scoring code; CATEGORIES): 1 multi-hop, 2 temporal,
3 open-domain, 4 single-hop, 5 adversarial (no answer in the conversation: left out). Its ten
conversations split in two: 1-5 decide constants (dev), 6-10 are held out (LOCOMO_SPLITS).
SciFact (BEIR): the corpus as documents (title as description, abstract as content), the test
queries and their relevance judgements; `scifact-train` the same corpus with the train queries.
LoCoMo-proactive: what a prompt hook sends. The query is the dialogue before an evidence turn (3-6
turns, every fifth query 24 turns: a long, pasted dialogue); the evidence turn is the relevant
memory. That dialogue is the conversation going on now, so its turns are not in the store.
WordNet-define (reverse dictionary, another domain and style): each memory is a sense's words
and usage examples (`"bank: he sat on the bank of the river"`), the query is the sense's
definition, which shares few words with its examples.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

from hypermnesia.errors import StartupError

CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}
# Which conversations (1-based, in the file's order) decide constants and which are held out.
LOCOMO_SPLITS = {"dev": range(1, 6), "held-out": range(6, 11)}
_SESSION_KEY = re.compile(r"session_(\d+)")
_EVIDENCE = re.compile(r"D\s*:?\s*(\d+)\s*:\s*(\d+)")


@dataclass
class Doc:
    ref: str
    content: str
    description: str = ""
    thread_id: str = ""
    created_at: datetime | None = None
    speaker: str = ""  # a conversation turn's speaker


@dataclass
class Question:
    text: str
    relevant: dict[str, int]  # doc ref -> grade
    category: int = 0
    # When it is asked, if not at its corpus's `now` (a proactive query: the time of its dialogue).
    now: datetime | None = None


@dataclass
class Corpus:
    name: str  # becomes part of the scope
    docs: list[Doc] = field(default_factory=list)
    questions: list[Question] = field(default_factory=list)
    # The time its questions are asked at, which their relative dates are read against ("last
    # year"): LoCoMo's questions carry no date, so its conversation's last session's.
    now: datetime | None = None


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
                        speaker=turn["speaker"],
                    )
                )
        corpus.now = max(d.created_at for d in corpus.docs if d.created_at)
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


def load_scifact(data_dir: Path, split: str = "test") -> list[Corpus]:
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
    with _need(folder / "qrels" / f"{split}.tsv").open() as handle:
        next(handle)
        for line in handle:
            qid, doc_id, grade = line.split()
            judged.setdefault(qid, {})[doc_id] = int(grade)
    for qid in sorted(judged, key=int):
        corpus.questions.append(Question(text=queries[qid], relevant=judged[qid]))
    return [corpus]


def load_scifact_train(data_dir: Path) -> list[Corpus]:
    return load_scifact(data_dir, "train")


PROACTIVE_TURNS = (3, 4, 5, 6, 24)  # the window before each evidence turn, in rotation
PROACTIVE_PER_CONVERSATION = 30


def load_locomo_proactive(data_dir: Path) -> list[Corpus]:
    """Per conversation, up to PROACTIVE_PER_CONVERSATION evidence turns (of the category 1-4
    questions, in dialogue order) whose preceding window lies in the same session and holds no
    chosen evidence turn nor a turn of an earlier window. The windows' turns leave the store."""
    out = []
    for corpus in load_locomo(data_dir):
        evidence = {ref for q in corpus.questions for ref in q.relevant}
        position = {d.ref: n for n, d in enumerate(corpus.docs)}
        used: set[int] = set()
        held_out: set[str] = set()
        questions: list[Question] = []
        for ref in sorted(evidence, key=position.__getitem__):
            if len(questions) == PROACTIVE_PER_CONVERSATION:
                break
            at = position[ref]
            turns = PROACTIVE_TURNS[len(questions) % len(PROACTIVE_TURNS)]
            window = list(range(at - turns, at))
            if window[0] < 0 or at in used:
                continue
            docs = [corpus.docs[i] for i in window]
            if any(d.thread_id != corpus.docs[at].thread_id for d in docs):
                continue
            if any(i in used for i in window):
                continue
            held_out.update(d.ref for d in docs)
            used.update(window)
            used.add(at)
            text = "\n".join(d.content for d in docs)
            questions.append(
                Question(
                    text=text,
                    relevant={ref: 1},
                    category=2 if turns > 6 else 1,
                    now=corpus.docs[at].created_at,
                )
            )
        out.append(
            Corpus(
                name=corpus.name.replace("locomo:", "locomo-proactive:"),
                docs=[d for d in corpus.docs if d.ref not in held_out],
                questions=questions,
                now=corpus.now,
            )
        )
    return out


WORDNET_DIR = Path("/usr/share/wordnet")  # Debian's wordnet-base
WORDNET_DOCS = 5000
WORDNET_QUERIES = 300


def load_wordnet(data_dir: Path) -> list[Corpus]:
    """Noun and verb senses with a usage example, every n-th of them (deterministic) up to
    WORDNET_DOCS; every m-th of those is asked for by its definition."""
    del data_dir  # read from the Debian package, not ../shared/data
    senses: list[tuple[str, str, str]] = []
    for part in ("noun", "verb"):
        path = WORDNET_DIR / f"data.{part}"
        if not path.exists():
            raise StartupError(
                f"{path} not found; install Debian's wordnet-base (apt-get install wordnet-base)"
            )
        for line in path.read_text(encoding="latin-1").splitlines():
            if line.startswith(" ") or "|" not in line:
                continue
            head, gloss = line.split("|", 1)
            fields = head.split()
            count = int(fields[3], 16)
            words = [fields[4 + 2 * i].replace("_", " ") for i in range(count)]
            examples = re.findall(r'"([^"]+)"', gloss)
            definition = re.sub(r'"[^"]*"', "", gloss).strip(" ;")
            if not examples or not definition:
                continue
            senses.append(
                (f"{part[0]}{fields[0]}", f"{', '.join(words)}: {' / '.join(examples)}", definition)
            )
    step = max(1, len(senses) // WORDNET_DOCS)
    chosen = senses[::step][:WORDNET_DOCS]
    corpus = Corpus(name="wordnet", docs=[Doc(ref=ref, content=text) for ref, text, _ in chosen])
    every = max(1, len(chosen) // WORDNET_QUERIES)
    for ref, _text, definition in chosen[::every][:WORDNET_QUERIES]:
        corpus.questions.append(Question(text=definition, relevant={ref: 1}))
    return [corpus]
