"""The fusion names are declared once (hypermnesia/fusions.py); the settings, the gateway's enum
and the eval command read them from there."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from gateway.memories import SearchMemories
from hypermnesia.fusions import FUSIONS
from hypermnesia.settings import RetrievalSettings
from tooling.commands import retrieval as retrieval_cli


def test_the_settings_accept_every_declared_fusion_and_name_them_when_refusing() -> None:
    assert FUSIONS == ("rrf", "boost", "weighted", "adaptive", "dense", "bm25")
    for name in FUSIONS:
        assert RetrievalSettings(fusion=name).fusion == name
    with pytest.raises(ValidationError, match="'rrf', 'boost', 'weighted', 'adaptive', 'dense' or 'bm25'"):
        RetrievalSettings(fusion="linear")


def test_the_gateway_enum_is_the_declared_list() -> None:
    schema = SearchMemories.model_json_schema()["properties"]["fusion"]
    options = schema.get("anyOf", [schema])
    (choices,) = [option["enum"] for option in options if "enum" in option]
    assert tuple(choices) == FUSIONS


def test_the_eval_table_shows_every_fusion_single_legs_first() -> None:
    assert retrieval_cli.FUSIONS == ("dense", "bm25", "weighted", "boost", "rrf", "adaptive")
    assert sorted(retrieval_cli.FUSIONS) == sorted(FUSIONS)
