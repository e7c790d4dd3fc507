"""The dedupe gate's fact check (services/curation/differences.py): restatements have no
difference; a changed number, date, identifier, name, polarity or word has one, reported where
it happened; and the contradiction rule the daily check uses."""

from __future__ import annotations

import pytest

from services.curation.differences import MAX_TOKENS, contradiction, describe, differences

SEED_PAIR = (
    "The user prefers pluggable local CPU embedding models.",
    "The user prefers pluggable local CPU embedding models too.",
)


@pytest.mark.parametrize(
    ("old", "new"),
    [
        SEED_PAIR,
        ("The nightly backup runs at 02:30 UTC", "The nightly backup runs at 2:30 UTC."),
        ("Payments are retried twice.", "payments are retried 2 times"),
        ("I don't use Python 3.11", "I do not use Python 3.11"),
        ("The user can't log in", "The user cannot log in!"),
        ("At 9:30 am the standup starts.", "The standup starts at 9:30am"),
        ("The standup is at 9 a.m.", "The standup is at 9am"),
        ("The limit is 1,000 requests.", "The limit is 1000 requests"),
        ("Ten people came.", "10 people came"),
        ("There is no cache", "There is not a cache"),
        (
            "Caroline: I went to a LGBTQ support group yesterday.",
            "caroline: i went to a lgbtq support group yesterday",
        ),
        ("Also, the deploy job uses `make deploy`.", "The deploy job uses `make deploy` as well"),
        ("It rained. We stayed in.", "We stayed in. It rained."),
        (
            "The cache lives in /var/cache/app and expires daily",
            "The cache lives in /var/cache/app, and expires daily.",
        ),
        ("PPAR-RXRs can be activated by PPAR ligands.", "FYI, pPAR-RXRs can be activated by PPAR ligands."),
        ("Rate limit increases are logged", "Rate limit increased are logged"),
        ("Dana's editor is vim", "Dana’s editor is vim"),
    ],
)
def test_restatements_have_no_difference(old: str, new: str) -> None:
    assert differences(old, new) == []


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        (
            "The rate limit is 100 requests per minute.",
            "The rate limit is 1000 requests per minute.",
            ["100 -> 1000"],
        ),
        ("The ratio is 1.2", "The ratio is 1.3", ["1.2 -> 1.3"]),
        ("I have two kids", "I have 3 kids", ["two -> 3"]),
        ("The timeout is 100ms", "The timeout is 100s", ["ms -> s"]),
        ("Payments are retried", "Payments are retried 3 times", ["3 added"]),
        ("We release in March", "We release in April", ["March -> April"]),
        ("We deploy on Tuesdays", "We deploy on Thursdays", ["Tuesdays -> Thursdays"]),
        ("Caroline went to the park yesterday", "Caroline went to the park today", ["yesterday -> today"]),
        ("Freeze starts 2024-03-01", "Freeze starts 2024-03-08", ["2024-03-01 -> 2024-03-08"]),
        ("The standup is at 9:30", "The standup is at 10:00", ["9:30 -> 10:00"]),
        ("The standup is at 9 am", "The standup is at 9 pm", ["9 am -> 9 pm"]),
        ("Service 2 talks to queue q1", "Service 2 talks to queue q2", ["q1 -> q2"]),
        ("Pin the client to v1.2.3", "Pin the client to v1.2.4", ["v1.2.3 -> v1.2.4"]),
        (
            "The handler lives in services/api/main.py",
            "The handler lives in services/api/app.py",
            ["services/api/main.py -> services/api/app.py"],
        ),
        ("Tracked in ABC-123", "Tracked in ABC-124", ["ABC-123 -> ABC-124"]),
        (
            "The primary is db1.prod.example.com",
            "The primary is db2.prod.example.com",
            ["db1.prod.example.com -> db2.prod.example.com"],
        ),
        ("Use the `fetch_rows` helper", "Use the `fetch_all` helper", ["fetch_rows -> fetch_all"]),
        ("The report goes to Alice", "The report goes to Bob", ["Alice -> Bob"]),
        ("The queue speaks AMQP", "The queue speaks MQTT", ["AMQP -> MQTT"]),
        ("Payments are NOT retried", "Payments are retried", ["not removed"]),
        ("Payments are retried", "Payments are never retried", ["never added"]),
        ("The user doesn't want email", "The user wants email", ["not removed"]),
        ("Dark mode is enabled", "Dark mode is disabled", ["enabled -> disabled"]),
        (
            "Rapamycin increases the concentration",
            "Rapamycin decreases the concentration",
            ["increases -> decreases"],
        ),
        ("Dana's editor is vim.", "Dana's editor is emacs.", ["vim -> emacs"]),
        # A swap of two places is a different fact, unlike a phrase that moved.
        (
            "Arterioles are wider than venules",
            "Venules are wider than arterioles",
            ["Arterioles -> Venules", "venules -> arterioles"],
        ),
        # Words dropped at one place and others added at another: a replaced word around a move.
        (
            "TNFAIP3 is a glioblastoma tumor enhancer",
            "TNFAIP3 is a tumor suppressor in glioblastoma",
            ["enhancer -> suppressor"],
        ),
    ],
)
def test_changed_facts_name_the_change(old: str, new: str, expected: list[str]) -> None:
    assert describe(differences(old, new)) == expected


def test_each_change_is_reported_where_it_happened() -> None:
    old = "UI bar memory 1: service 1 talks to queue q1 over AMQP."
    new = "UI bar memory 6: service 1 talks to queue q6 over AMQP."
    found = differences(old, new)
    assert [(d.kind, d.old, d.new) for d in found] == [("number", "1", "6"), ("identifier", "q1", "q6")]
    # The same change twice is listed once in the answer.
    both = differences(old, "UI bar memory 2: service 2 talks to queue q2 over AMQP.")
    assert len(both) == 3 and describe(both) == ["1 -> 2", "q1 -> q2"]


def test_only_added_or_dropped_ordinary_words_are_elaboration() -> None:
    assert differences("The user prefers dark mode", "The user really prefers dark mode in the editor") == []
    assert (
        differences(
            "MICAL enzymes regulate actin dynamics in many cell types.",
            "MICAL enzymes regulate actin dynamics.",
        )
        == []
    )


def test_long_texts_are_compared_where_they_differ() -> None:
    body = " ".join(f"word{i}" for i in range(5 * MAX_TOKENS))
    assert differences("Also, " + body + " ends at 5 pm.", body + " ends at 5 pm") == []
    found = differences(body + " ends at 5 pm", body + " ends at 6 pm")
    assert describe(found) == ["5 pm -> 6 pm"] and found[0].shared_before >= 5 * MAX_TOKENS
    # A differing part too long to align is one difference, never a merge.
    reworded = " ".join(f"other{i}" for i in range(MAX_TOKENS + 1))
    assert describe(differences(f"A {body} B", f"A {reworded} B")) == [
        f"a passage of more than {MAX_TOKENS} words differs"
    ]


@pytest.mark.parametrize(
    ("old", "new", "change"),
    [
        (
            "The rate limit is 100 requests per minute.",
            "The rate limit is 1000 requests per minute.",
            "100 -> 1000",
        ),
        ("Payments are NOT retried", "Payments are retried", "not removed"),
        ("The standup is at 9:30", "The standup is at 10:00", "9:30 -> 10:00"),
        (
            "Rapamycin increases the concentration",
            "Rapamycin decreases the concentration",
            "increases -> decreases",
        ),
        ("The CI runners use Python 3.11", "The CI runners use Python 3.12", "3.11 -> 3.12"),
    ],
)
def test_one_value_of_the_same_entity_and_attribute_is_a_contradiction(
    old: str, new: str, change: str
) -> None:
    found = contradiction(old, new)
    assert found is not None and str(found) == change


@pytest.mark.parametrize(
    ("old", "new"),
    [
        # Different entities: the change is at the start, or the statements differ in several places.
        ("Alice's laptop is a MacBook", "Bob's laptop is a MacBook"),
        (
            "UI bar memory 1: service 1 talks to queue q1 over AMQP.",
            "UI bar memory 2: service 2 talks to queue q2 over AMQP.",
        ),
        (
            "UI bar memory 0: service 0 talks to queue q0 over AMQP.",
            "UI bar memory 5: service 0 talks to queue q5 over AMQP.",
        ),
        # One word and a number is a name ("service 1"), not an attribute and its value.
        ("Service 1 talks to queue q1", "Service 2 talks to queue q1"),
        # An addition refines a fact; a restatement is no contradiction.
        ("Payments are retried", "Payments are retried 3 times"),
        SEED_PAIR,
    ],
)
def test_other_differences_are_no_contradiction(old: str, new: str) -> None:
    assert contradiction(old, new) is None
