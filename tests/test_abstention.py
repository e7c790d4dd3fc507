"""The Dialectic's relevance test (services/curation/dialectic.py `answering`) and the content words
it compares (hypermnesia/words.py), on search hits as the retrieval service returns them. The same
test on the real stack, through REST, MCP, the CLI and an LLM stand-in, is in test_intelligence.py
and test_intelligence_interfaces.py."""

from __future__ import annotations

import uuid

from hypermnesia.v1 import common_pb2, retrieval_pb2
from hypermnesia.words import STOPWORDS, content_words
from services.curation.dialectic import answering, best_sentence


def hit(content: str, similarity: float, lexical: bool = False) -> retrieval_pb2.SearchHit:
    memory = common_pb2.Memory(id=str(uuid.uuid4()), content=content)
    return retrieval_pb2.SearchHit(memory=memory, similarity=similarity, lexical_match=lexical)


def test_content_words_fold_inflections_and_leave_out_function_words() -> None:
    assert content_words("What did Caroline research?") == content_words("caroline RESEARCHED")
    assert content_words("the cities she studied") == content_words("a city to study")
    assert content_words("Which port? 9464") == {"port", "9464"}
    assert not content_words("What is it that you were doing there?") & STOPWORDS
    assert content_words("What is it that he had?") == set()


def test_nothing_close_enough_is_an_abstention_naming_the_closest() -> None:
    pizza = hit("Every Friday the team has a pizza lunch in the kitchen.", 0.18)
    other = hit("The shop ships orders within two days.", 0.11)
    kept, why = answering("What is the capital of France?", [other, pizza], 0.3)
    assert kept == []
    assert why == (
        f"no memory is close enough to the question: the closest ({pizza.memory.id}) has similarity "
        "0.18, below the relevance floor 0.30"
    )
    assert answering("What is the capital of France?", [], 0.3) == (
        [],
        "nothing in memory matched the question",
    )


def test_close_hits_must_share_a_content_word() -> None:
    near = hit("The cat sat on the mat all afternoon.", 0.45)
    kept, why = answering("Where does the kitten sleep?", [near], 0.3)
    assert (
        kept == [] and why == "no memory close to the question shares a word of its content (kitten, sleep)"
    )
    kept, why = answering("What is it?", [near], 0.3)
    assert kept == [] and why == "the question has no content word to look for"
    # One close hit sharing a word is enough: the close hits all answer, in rank order.
    sharing = hit("The kitten sleeps in the laundry basket.", 0.40)
    kept, why = answering("Where does the kitten sleep?", [near, sharing], 0.3)
    assert kept == [near, sharing] and why == ""


def test_the_floor_keeps_close_and_lexical_hits_and_none_turns_it_off() -> None:
    close = hit("Lunch is pizza on Fridays.", 0.52)
    far = hit("Pizza ovens reach 450 degrees.", 0.21)
    lexical = hit("When is lunch? Pizza lunch is on Fridays.", 0.12, lexical=True)
    kept, why = answering("When is the pizza lunch?", [close, far, lexical], 0.3)
    assert kept == [close, lexical] and why == ""
    kept, why = answering("What is the capital of France?", [far], None)
    assert kept == [far] and why == ""


def test_the_quoted_sentence_shares_most_content_words() -> None:
    content = "The shop opened in 2019. Lunch on Fridays is pizza. Deploys happen on Tuesdays."
    assert best_sentence("What do we eat for lunch on Friday?", content) == "Lunch on Fridays is pizza."
