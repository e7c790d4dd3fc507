"""The secret detector (hypermnesia/secrets.py) on its own: the generated corpus's secrets are
found, prose is left alone, masking keeps every other word, a refusal names the field, kind and
offset without repeating the secret, and every regex plugin of detect-secrets is used or left out
on purpose. The write paths are tested on the real stack in tests/test_secrets_stack.py."""

from __future__ import annotations

from pathlib import Path

import pytest
from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class
from detect_secrets.plugins.base import RegexBasedDetector

from hypermnesia import secrets
from hypermnesia.errors import Unprocessable
from tooling.evaluation import secrets as evaluation

DATA = Path(__file__).resolve().parents[1] / ".." / "shared" / "data"


def test_the_corpus_secrets_are_found() -> None:
    # Another seed than docs/EVAL.md's figures: fresh secrets of every kind.
    examples = evaluation.generate(seed=7, per_kind=8)
    assert len(evaluation.KINDS) >= 25
    missed = [ex for ex in examples if not evaluation.caught(ex, secrets.find(ex.text))]
    assert len(missed) <= 0.01 * len(examples), [(m.kind, m.text) for m in missed]
    # What is masked no longer holds the secret, whatever the kind, and masking it again (or
    # scanning it: `hypermnesia redact --scan`) finds nothing more.
    for ex in examples:
        if ex not in missed:
            masked = secrets.masked(ex.text)
            assert ex.secret not in masked and secrets.find(masked) == [], ex.kind


def test_conversation_sentences_are_left_alone() -> None:
    sentences = evaluation.dataset_sentences(DATA)["LoCoMo"]
    assert len(sentences) > 10_000
    flagged = [s for s in sentences if secrets.find(s)]
    assert len(flagged) <= 0.001 * len(sentences), flagged[:5]
    for prose in (
        "my password is my dog's name, don't tell anyone",
        "token: the blue one from the arcade",
        "The secret to a good risotto is patience.",
        "Use the API key from the vault, not the one in Slack.",
        "Session 42 ended at 10:15 pm on 3 May, 2023",
    ):
        assert secrets.find(prose) == [], prose


def test_masking_keeps_every_other_word() -> None:
    key, url_password = "AKIA" + "Q" * 12 + "7ZX4", "n0tTh3Passw0rd"
    text = f"staging uses {key} and postgres://app:{url_password}@db:5432/prod, ask Ana"
    assert secrets.masked(text) == (
        "staging uses [REDACTED:aws_access_key] and postgres://app:[REDACTED:url_password]@db:5432/prod, ask Ana"
    )
    # A whole PEM block goes, not only its header.
    pem = (
        "-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo\n-----END RSA PRIVATE KEY-----"
    )
    assert (
        secrets.masked(f"the key:\n{pem}\nkeep it safe") == "the key:\n[REDACTED:private_key]\nkeep it safe"
    )


def test_a_refusal_names_field_kind_and_offset_never_the_secret() -> None:
    token = "ghp_" + "a1B2c3D4e5" * 3 + "f6G7h8"
    redactor = secrets.Redactor("refuse")
    assert redactor.text("no secret here", "content") == "no secret here"
    with pytest.raises(Unprocessable) as refused:
        redactor.text(f"push with {token} please", "records[2].content")
    message = refused.value.message
    assert "records[2].content" in message and "github_token" in message and "offset 10" in message
    assert token not in message and token[4:14] not in message


def test_mask_reports_kinds_and_off_keeps_the_text() -> None:
    stripe = "sk_live_" + "4eC39HqLyjWDarjtT1zdp7dc"
    redactor = secrets.Redactor("mask")
    metadata = redactor.value({"env": {"STRIPE_KEY": stripe}, "note": "plain"}, "metadata")
    assert metadata == {"env": {"STRIPE_KEY": "[REDACTED:stripe_key]"}, "note": "plain"}
    assert redactor.texts(["ops", stripe], "tags") == ["ops", "[REDACTED:stripe_key]"]
    assert redactor.report.as_json() == {"count": 2, "kinds": {"stripe_key": 2}}
    assert secrets.Redactor("off").text(f"key {stripe}", "content") == f"key {stripe}"


# Plugins of detect-secrets not used, and why: an IP address is not a secret; the entropy plugins
# flag ordinary identifiers in prose (hypermnesia/secrets.py's docstring); the keyword plugin is
# used through its patterns (keyword.QUOTES_REQUIRED_DENYLIST_REGEX_TO_GROUP), not its class.
LEFT_OUT = {"IPPublicDetector"}


def test_every_regex_plugin_of_detect_secrets_is_used() -> None:
    used = {rule.pattern for rule in secrets.RULES}
    plugins = [
        cls
        for cls in get_mapping_from_secret_type_to_class().values()
        if issubclass(cls, RegexBasedDetector) and cls.__name__ not in LEFT_OUT
    ]
    assert len(plugins) >= 20
    for cls in plugins:
        missing = [p.pattern for p in cls.denylist if p not in used]
        assert not missing, f"{cls.__name__}: patterns not in hypermnesia.secrets.RULES: {missing}"
