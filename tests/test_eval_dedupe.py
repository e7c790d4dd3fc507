"""The dedupe gate's labelled set and its evaluation (`hypermnesia eval --dataset dedupe`): the set
is the same on every build, its halves share no source, and a slice runs end to end through the
real save path (the full run's tables live in docs/EVAL.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from hypermnesia.settings import CurationSettings
from tooling.evaluation import dedupe_pairs
from tooling.evaluation.dedupe_run import evaluate, format_report, scores

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"

pytestmark = pytest.mark.timeout(900)


def _conversation(source: str) -> str:
    return source.split(":")[1]


def test_the_labelled_set_is_deterministic_and_its_halves_share_no_source() -> None:
    pairs = dedupe_pairs.build(DATA)
    assert pairs == dedupe_pairs.build(DATA)
    rules = {p.rule: p.label for p in pairs}
    assert rules == {
        **{r: "same" for r in dedupe_pairs.RESTATEMENTS},
        **{r: "different" for r in dedupe_pairs.CHANGES},
    }
    for rule in rules:
        for split in dedupe_pairs.SPLITS:
            count = sum(1 for p in pairs if p.rule == rule and p.split == split)
            assert 1 <= count, (rule, split)
            if rule not in ("scifact-repeat", "scifact-opposite"):
                assert count <= dedupe_pairs.PER_RULE
    assert all(
        " ".join(p.older.split()) != " ".join(p.newer.split()) for p in pairs if p.rule != "scifact-repeat"
    )
    locomo = {
        split: {_conversation(p.source) for p in pairs if p.split == split and p.source.startswith("locomo:")}
        for split in dedupe_pairs.SPLITS
    }
    assert locomo["dev"] and locomo["held-out"] and not locomo["dev"] & locomo["held-out"]
    for p in pairs:
        if p.source.startswith("scifact:"):
            assert dedupe_pairs.SPLITS[int(p.source.split(":")[1]) % 2] == p.split
    # A quick slice is the start of each rule's list.
    quick = dedupe_pairs.build(DATA, limit=2)
    for rule in rules:
        for split in dedupe_pairs.SPLITS:
            full = [p for p in pairs if p.rule == rule and p.split == split]
            assert [p for p in quick if p.rule == rule and p.split == split] == full[:2]


def test_precision_and_recall_of_merging_and_keeping_apart() -> None:
    labelled = (
        [("same", True)] * 6 + [("same", False)] * 2 + [("different", True)] * 1 + [("different", False)] * 3
    )
    s = scores(labelled)
    assert s.pairs == 12
    assert s.merge_precision == pytest.approx(6 / 7) and s.merge_recall == pytest.approx(6 / 8)
    assert s.apart_precision == pytest.approx(3 / 5) and s.apart_recall == pytest.approx(3 / 4)


async def test_a_slice_runs_through_the_real_save_path(pg_server_url: str, tmp_path: Path) -> None:
    outcomes = await evaluate(DATA, pg_server_url, concurrency=2, limit=2, work_dir=tmp_path)
    assert {o.pair.rule for o in outcomes} == {*dedupe_pairs.RESTATEMENTS, *dedupe_pairs.CHANGES}
    assert len(outcomes) <= 2 * len(dedupe_pairs.SPLITS) * len(
        dedupe_pairs.RESTATEMENTS + dedupe_pairs.CHANGES
    )
    # Restatements by punctuation and case merge; a changed number or date never does, and is
    # named under `similar` when the cosine gates found it (a margin: stored vectors may be
    # half precision).
    threshold = CurationSettings().dedupe_threshold
    for o in outcomes:
        if o.pair.rule in ("punctuation", "case"):
            assert o.merged, o.pair
        if o.pair.rule in ("number", "date", "polarity", "identifier"):
            assert not o.merged, o.pair
            if abs(o.cosine - threshold) > 0.01:
                assert o.similar == (o.cosine > threshold), o
    report = format_report(outcomes, CurationSettings())
    assert "### dev" in report and "### held-out" in report
    assert "| punctuation | same | 2 |" in report and "| this gate, all pairs |" in report
