"""Time in queries (services/retrieval/time_window.py): real phrases resolved against a fixed
reference time, and on the real stack a dated query lifting the memory whose event time falls in
its window, with the signal that says why."""

from __future__ import annotations

from datetime import UTC, date, datetime
from pathlib import Path

import httpx
import pytest

from hypermnesia.settings import RetrievalSettings
from services.retrieval.time_window import event_windows, match, windows
from tests.conftest import Stack, start_stack

# A Friday afternoon: the time of the question.
NOW = datetime(2023, 10, 20, 15, 30, tzinfo=UTC)


def _spans(text: str, now: datetime = NOW) -> list[tuple[date, date]]:
    """Each window as (first day, last day)."""
    return [(w.start.date(), (w.end - (w.end - w.start) / 10**6).date()) for w in windows(text, now)]


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("What happened last Tuesday?", [(date(2023, 10, 17), date(2023, 10, 17))]),
        ("What did we talk about in March?", [(date(2023, 3, 1), date(2023, 3, 31))]),
        ("What did I buy two weeks ago?", [(date(2023, 10, 3), date(2023, 10, 9))]),
        ("Which hobby did Sam take up in May 2023?", [(date(2023, 5, 1), date(2023, 5, 31))]),
        ("Where was Tim in the week before 16 November 2023?", [(date(2023, 11, 9), date(2023, 11, 15))]),
        ("What did Calvin book a flight for on 1st September 2023?", [(date(2023, 9, 1), date(2023, 9, 1))]),
        ("What is Nate creating for YouTube on 9 November, 2022?", [(date(2022, 11, 9), date(2022, 11, 9))]),
        (
            "What kind of painting did she share on October 13, 2023?",
            [(date(2023, 10, 13), date(2023, 10, 13))],
        ),
        ("What did Melanie paint last year?", [(date(2022, 1, 1), date(2022, 12, 31))]),
        ("What happened to John's job situation in 2022?", [(date(2022, 1, 1), date(2022, 12, 31))]),
        ("What did Joanna write yesterday?", [(date(2023, 10, 19), date(2023, 10, 19))]),
        ("Where was Jolene during the last week of August 2023?", [(date(2023, 8, 25), date(2023, 8, 31))]),
        ("In what country was Jolene during summer 2022?", [(date(2022, 6, 1), date(2022, 8, 31))]),
        ("Was the first half of September 2022 a good month?", [(date(2022, 9, 1), date(2022, 9, 15))]),
        (
            "Did they meet in Boston between August and November 2023?",
            [(date(2023, 8, 1), date(2023, 11, 30))],
        ),
        ("What did we decide last week?", [(date(2023, 10, 9), date(2023, 10, 15))]),
        ("What did Sam say on Wednesday?", [(date(2023, 10, 18), date(2023, 10, 18))]),
        ("Friday deploy notes", [(date(2023, 10, 13), date(2023, 10, 13))]),
        # "in August" with no year: the latest August by the time of the question.
        ("When did Caroline attend a pride parade in August?", [(date(2023, 8, 1), date(2023, 8, 31))]),
        ("What did she plan in December?", [(date(2022, 12, 1), date(2022, 12, 31))]),
    ],
)
def test_a_querys_dates_resolve_to_windows(query: str, expected: list[tuple[date, date]]) -> None:
    assert _spans(query) == expected


@pytest.mark.parametrize(
    "query",
    [
        "When did Caroline go to the LGBTQ support group?",
        "How long ago was Caroline's 18th birthday?",
        "What may I bring to the party?",  # the verb, not the month
        "Did the band march in the parade?",
        "Which came first, the wedding or the move?",
        "Why did Alice change billing_service?",
    ],
)
def test_a_query_naming_no_date_has_no_window(query: str) -> None:
    assert windows(query, NOW) == []


def test_an_ordering_question_keeps_both_candidates() -> None:
    spans = _spans("Which came first, the trip in May 2023 or the party in June 2023?")
    assert spans == [(date(2023, 5, 1), date(2023, 5, 31)), (date(2023, 6, 1), date(2023, 6, 30))]
    # "before or after X" keeps X itself in the window.
    ((first, last),) = _spans("Did the move happen before or after May 2023?")
    assert first <= date(2023, 5, 1) and last >= date(2023, 5, 31)


def test_event_time_is_created_at_unless_the_content_names_a_date() -> None:
    said = datetime(2023, 5, 25, 13, 0, tzinfo=UTC)  # a Thursday
    (event,), source = event_windows("I painted a sunset by the lake", said)
    assert source == "created_at" and event.start == said
    (event,), source = event_windows("I went camping with the kids last Sunday!", said)
    assert source == "content" and event.start.date() == date(2023, 5, 21)
    (event,), source = event_windows("Back in 2019 I ran my first marathon", said)
    assert source == "content" and (event.start.date(), event.end.date()) == (
        date(2019, 1, 1),
        date(2020, 1, 1),
    )
    in_may = windows("What did she do in May 2023?", NOW)
    assert match(in_may, "I painted a sunset by the lake", said) is not None
    assert match(in_may, "Back in 2019 I ran my first marathon", said) is None
    found = match(windows("What did she do the week before 25 May 2023?", NOW), "camping last Sunday", said)
    assert found is not None and found.source == "content" and found.event.phrase == "last sunday"


HEADERS = {"Authorization": "Bearer alice-token", "X-Hypermnesia-Project": "dates"}
GATES_OFF = {"min_similarity": 0.0, "relative_cutoff": 0.0, "k": 10}
DEFAULT_BOOST = RetrievalSettings.model_fields["time_boost"].default
UNDATED = "What did I cook for dinner?"
DATED = "What did I cook for dinner in March 2023?"
# Two notes about dinner, imported with their dates: the July one is the closer match. Its
# "tonight" is read against its own date: July.
DINNERS = [
    {"type": "note", "content": "Cooked lasagne for dinner with the family tonight", "created_at": "2023-07-14T19:00:00Z"},
    {"type": "note", "content": "Cooked a mushroom risotto for dinner", "created_at": "2023-03-10T19:00:00Z"},
]  # fmt: skip


async def _search(http: httpx.AsyncClient, query: str) -> list[dict]:
    response = await http.post("/memories/search", json={"query": query, **GATES_OFF})
    assert response.status_code == 200, response.text
    return response.json()["results"]


async def _dinners(http: httpx.AsyncClient) -> tuple[list[dict], list[dict]]:
    """The dinners imported, then the hits of the undated and the dated question."""
    imported = await http.post("/records/import", json={"records": DINNERS})
    assert imported.status_code == 200, imported.text
    return await _search(http, UNDATED), await _search(http, DATED)


def _firsts(hits: list[dict]) -> list[str]:
    return [h["content"].split()[1] for h in hits[:2]]


async def test_a_dated_query_ranks_the_memory_in_its_window_higher(stack: Stack) -> None:
    """The July note wins the undated question; asked about March 2023, the March note rises
    above it (the default boost), and its hit says which words of the query made the window and
    what dated the memory."""
    assert DEFAULT_BOOST > 0
    async with httpx.AsyncClient(base_url=stack.base_url, headers=HEADERS) as http:
        undated, dated = await _dinners(http)
    assert _firsts(undated) == ["lasagne", "a"]
    assert not any("time_match" in h for h in undated)
    assert _firsts(dated) == ["a", "lasagne"]
    signal = dated[0]["time_match"]
    assert signal["phrase"] == "march 2023"
    assert signal["start"].startswith("2023-03-01") and signal["end"].startswith("2023-04-01")
    assert signal["event"] == "created_at" and signal["boost"] == DEFAULT_BOOST
    assert "time_match" not in dated[1]


async def test_a_zero_time_boost_leaves_the_ranking_alone(
    pg_server_url: str, embedder: str, model_cache: Path
) -> None:
    async with (
        start_stack(pg_server_url, embedder, model_cache, time_boost=0.0) as stack,
        httpx.AsyncClient(base_url=stack.base_url, headers=HEADERS) as http,
    ):
        undated, dated = await _dinners(http)
    assert _firsts(undated) == _firsts(dated) == ["lasagne", "a"]
    assert not any("time_match" in h for h in undated + dated)
