"""What reading a query's dates costs a search (services/retrieval/time_window.py), in process:
`windows()` over every LoCoMo and SciFact question (a query naming no date stops at the cheap
regular expression), and for the dated ones `match()` over 100 turns of its conversation, as the
search does for its candidates (the content cache starts cold).

    python -m tooling.evaluation.time_cost [--data-dir ../shared/data]
"""

from __future__ import annotations

import argparse
import statistics
import time
from datetime import UTC, datetime
from pathlib import Path

from services.retrieval import time_window
from tooling.evaluation import datasets

CANDIDATES = 100


def _ms(samples: list[float]) -> str:
    if not samples:
        return "none"
    ordered = sorted(samples)
    p95 = ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]
    return f"{len(samples)} queries: mean {statistics.fmean(samples):.3f} ms, p95 {p95:.3f} ms, max {ordered[-1]:.3f} ms"


def main(data_dir: Path) -> None:
    time_window.windows("in May 2023", datetime.now(UTC))  # dateparser's import and first parse
    undated: list[float] = []
    dated: list[float] = []
    matching: list[float] = []
    corpora = datasets.load_locomo(data_dir) + datasets.load_scifact(data_dir)
    for corpus in corpora:
        now = corpus.now or datetime.now(UTC)
        turns = corpus.docs[:: max(1, len(corpus.docs) // CANDIDATES)][:CANDIDATES]
        for question in corpus.questions:
            started = time.perf_counter()
            found = time_window.windows(question.text, now)
            spent = (time.perf_counter() - started) * 1000
            (dated if found else undated).append(spent)
            if found:
                started = time.perf_counter()
                for doc in turns:
                    time_window.match(found, doc.content, doc.created_at or now)
                matching.append((time.perf_counter() - started) * 1000)
    print(f"windows(), no date named: {_ms(undated)}")
    print(f"windows(), a date named: {_ms(dated)}")
    print(f"match() over {CANDIDATES} candidates, dated queries: {_ms(matching)}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default=str(Path.cwd().parent / "shared" / "data"))
    main(Path(parser.parse_args().data_dir))
