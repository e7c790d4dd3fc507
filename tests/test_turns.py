"""Both speakers of a conversation, on the real stack (issue 32 items 2 and 3): a conversation
record keeps its speaker (REST import in, MCP search out); the assistant's turns are stored and
searchable, a long one weighed by its length so that it does not outrank the user's one-line fact
(and does without the weight), and left out of the import under HM_STORE_ASSISTANT_TURNS=false;
`group_by=thread` answers threads with their best turns, over REST and MCP."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from hypermnesia import speakers
from tests.conftest import Stack, start_stack
from tests.helpers import mcp_session, tool_json

PROJECT = "turns"
HEADERS = {"Authorization": "Bearer alice-token", "X-Hypermnesia-Project": PROJECT}
NO_GATES = {"min_similarity": 0.0, "relative_cutoff": 0.0}

USER_FACT = "I'm allergic to peanuts, so never suggest satay or peanut sauce for me."
DISHES = [
    ("Monday", "chicken satay skewers with a peanut sauce swapped for sunflower seed butter"),
    ("Tuesday", "a Thai green curry with tofu, where the usual peanut garnish becomes toasted coconut"),
    ("Wednesday", "pad thai without peanuts, with cashew-free crispy shallots instead"),
    ("Thursday", "miso-glazed salmon with sesame greens and sticky rice"),
    ("Friday", "a satay-style noodle salad whose sauce is made from tahini, not peanut butter"),
    ("Saturday", "slow-roasted lamb shoulder with a peanut-free dukkah crust"),
    ("Sunday", "a mushroom risotto and a lemon tart; no peanut oil anywhere"),
]
FILLER = (
    "Shop for it early in the week, keep the allergy card on the fridge, read every label for "
    "traces, prepare the vegetables the night before, store leftovers in sealed boxes, and reheat "
    "them gently so the sauce does not split. "
)


def long_answer() -> str:
    """A week of dinners, ~2,000 words, mentioning peanuts, satay and sauce throughout."""
    parts = ["Here is a full week of dinners planned around your peanut allergy, satay and sauce included."]
    for day, dish in DISHES:
        parts.append(f"For {day}, I suggest {dish}. " + FILLER * 8)
    return " ".join(parts)


def turns() -> list[dict[str, Any]]:
    return [
        {
            "type": "conversation",
            "thread_id": "allergy",
            "source_ref": "a-1",
            "speaker": "user",
            "content": USER_FACT,
        },
        {
            "type": "conversation",
            "thread_id": "allergy",
            "source_ref": "a-2",
            "speaker": "assistant",
            "content": "Noted, I will keep peanuts out of every suggestion.",
        },
        {
            "type": "conversation",
            "thread_id": "dinners",
            "source_ref": "d-1",
            "speaker": "user",
            "content": "Can you plan my dinners for next week?",
        },
        {
            "type": "conversation",
            "thread_id": "dinners",
            "source_ref": "d-2",
            "speaker": "assistant",
            "content": long_answer(),
        },
        {
            "type": "conversation",
            "thread_id": "garden",
            "source_ref": "g-1",
            "speaker": "Caroline",
            "content": "The tomatoes in the greenhouse need watering twice a day in July.",
        },
        {
            "type": "conversation",
            "thread_id": "garden",
            "source_ref": "g-2",
            "speaker": "Melanie",
            "content": "Then I'll water the greenhouse tomatoes every morning and evening.",
        },
        {
            "type": "conversation",
            "thread_id": "garden",
            "source_ref": "g-3",
            "speaker": "Caroline",
            "content": "The compost heap by the shed is ready for the greenhouse beds.",
        },
    ]


async def _ok(response: httpx.Response) -> Any:
    assert response.status_code == 200, response.text
    return response.json()


@pytest.fixture(scope="module")
async def imported(stack: Stack) -> dict[str, str]:
    """source_ref -> memory id of the conversation above, imported through REST."""
    records = turns()
    async with httpx.AsyncClient(base_url=stack.base_url, headers=HEADERS, timeout=120) as http:
        body = await _ok(await http.post("/records/import", json={"records": records}))
    assert body["imported"] == len(records) and body["skipped"] == 0 and "left_out" not in body, body
    return {r["source_ref"]: i for r, i in zip(records, body["ids"], strict=True)}


async def _search(http: httpx.AsyncClient, query: str, **extra: Any) -> list[dict[str, Any]]:
    body = await _ok(await http.post("/memories/search", json={"query": query, "k": 10, **NO_GATES, **extra}))
    return list(body["results"])


async def test_speaker_round_trip_rest_import_to_mcp_search(stack: Stack, imported: dict[str, str]) -> None:
    async with httpx.AsyncClient(base_url=stack.base_url, headers=HEADERS, timeout=60) as http:
        record = await _ok(await http.get(f"/records/{imported['g-2']}"))
        assert record["memory"]["metadata"]["speaker"] == "Melanie", record
        # Bad input is refused, says what to do, and writes nothing.
        before = await _ok(await http.get("/records/query", params={"limit": 1000}))
        for bad, words in (
            ({"type": "note", "content": "a note", "speaker": "user"}, "conversation records only"),
            (
                {"type": "conversation", "content": "hi", "speaker": "user", "metadata": {"speaker": "bob"}},
                "send one of them",
            ),
        ):
            refused = await http.post("/records/import", json={"records": [bad]})
            assert refused.status_code == 400, refused.text
            assert words in refused.text, refused.text
        after = await _ok(await http.get("/records/query", params={"limit": 1000}))
        assert len(after["records"]) == len(before["records"])
    async with mcp_session(stack.mcp_url, "alice-token", PROJECT) as client:
        hits = tool_json(
            await client.call_tool("memory_search", {"query": "watering the greenhouse tomatoes", **NO_GATES})
        )
    by_id = {h["id"]: h for h in hits}
    assert by_id[imported["g-1"]]["metadata"]["speaker"] == "Caroline"
    assert by_id[imported["g-2"]]["metadata"]["speaker"] == "Melanie"


async def test_a_long_assistant_answer_does_not_outrank_the_users_fact(
    stack: Stack, imported: dict[str, str]
) -> None:
    answer, fact = imported["d-2"], imported["a-1"]
    words = speakers.word_count(long_answer())
    assert 1_800 <= words <= 2_400, words
    defaults = stack.searcher.settings
    async with httpx.AsyncClient(base_url=stack.base_url, headers=HEADERS, timeout=60) as http:
        weighed = await _search(http, "peanut allergy satay sauce")
        order = [h["id"] for h in weighed]
        assert order.index(fact) < order.index(answer), [h["content"][:60] for h in weighed]
        hit = weighed[order.index(answer)]
        expected = speakers.length_weight(words, defaults.assistant_turn_words)
        assert 0 < expected < 0.5 and hit["length_weight"] == pytest.approx(expected, abs=1e-6), hit
        assert "length_weight" not in weighed[order.index(fact)]  # a user turn is not weighed
        # The agent's own suggestion is still found when asked for (among the top three: the
        # user's fact says "suggest" too).
        asked = await _search(http, "what did you suggest with miso-glazed salmon?")
        assert answer in [h["id"] for h in asked[:3]], [h["content"][:60] for h in asked]
        # The same service without the weight (HM_ASSISTANT_TURN_WORDS=0): the long answer wins.
        stack.searcher.settings = defaults.model_copy(update={"assistant_turn_words": 0})
        try:
            unweighed = await _search(http, "peanut allergy satay sauce")
        finally:
            stack.searcher.settings = defaults
    order = [h["id"] for h in unweighed]
    assert order.index(answer) < order.index(fact), [h["content"][:60] for h in unweighed]
    assert all("length_weight" not in h for h in unweighed)


async def test_group_by_thread_answers_threads_with_their_best_turns(
    stack: Stack, imported: dict[str, str]
) -> None:
    query = "greenhouse tomatoes watering and the compost"
    async with httpx.AsyncClient(base_url=stack.base_url, headers=HEADERS, timeout=60) as http:
        flat = await _search(http, query)
        grouped = await _search(http, query, group_by="thread", k=2)
        refused = await http.post("/memories/search", json={"query": query, "group_by": "speaker"})
    assert refused.status_code == 400 and "group_by" in refused.text, refused.text
    assert len(grouped) == 2, grouped
    threads = [g["thread_id"] for g in grouped]
    assert threads[0] == "garden" and len(set(threads)) == 2, threads
    # Best thread first; each thread's turns are its own, best first, at most three.
    assert grouped[0]["score"] >= grouped[1]["score"]
    for group in grouped:
        assert 1 <= len(group["turns"]) <= 3
        assert {t["thread_id"] for t in group["turns"]} == {group["thread_id"]}
        scores = [t["score"] for t in group["turns"]]
        assert scores == sorted(scores, reverse=True) and group["score"] == scores[0]
    garden = {t["id"] for t in grouped[0]["turns"]}
    assert garden == {imported["g-1"], imported["g-2"], imported["g-3"]}
    # Flat, the same search answers memories, the garden's best turn first.
    assert flat[0]["id"] in garden and "turns" not in flat[0]
    async with mcp_session(stack.mcp_url, "alice-token", PROJECT, tools="full") as client:
        by_tool = tool_json(
            await client.call_tool(
                "memory_search", {"query": query, "group_by": "thread", "k": 2, **NO_GATES}
            )
        )
    assert [g["thread_id"] for g in by_tool] == threads
    assert {t["id"] for t in by_tool[0]["turns"]} == garden


@pytest.fixture(scope="module")
async def without_assistant(pg_server_url: str, embedder: str, model_cache: Path) -> AsyncIterator[Stack]:
    async with start_stack(pg_server_url, embedder, model_cache, store_assistant_turns=False) as running:
        yield running


async def test_assistant_turns_left_out_when_the_setting_is_off(without_assistant: Stack) -> None:
    records = turns()[:4]
    async with httpx.AsyncClient(base_url=without_assistant.base_url, headers=HEADERS, timeout=120) as http:
        body = await _ok(await http.post("/records/import", json={"records": records}))
        assert body["imported"] == 2 and body["skipped"] == 2 and body["left_out"] == 2, body
        assert body["ids"][0] and body["ids"][2] and body["ids"][1] == "" and body["ids"][3] == "", body
        stored = await _ok(await http.get("/records/query", params={"type": "conversation", "limit": 100}))
        contents = [r["memory"]["content"] for r in stored["records"]]
        assert contents == [USER_FACT, "Can you plan my dinners for next week?"], contents
        assert [r["memory"]["metadata"]["speaker"] for r in stored["records"]] == ["user", "user"]
        hits = await _search(http, "miso-glazed salmon dinners")
        assert all("salmon" not in h["content"] for h in hits), hits
        # A lone assistant turn: nothing stored, said so.
        alone = await _ok(await http.post("/records", json=records[1]))
        assert alone == {"id": "", "created": False, "left_out": 1}, alone
        # Sent again, the user's turns are skipped as duplicates, with the ids they have.
        again = await _ok(await http.post("/records/import", json={"records": records}))
        assert again["imported"] == 0 and again["skipped"] == 4 and again["ids"] == body["ids"], again
