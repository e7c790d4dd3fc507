"""The fusion modes a search can rank by, declared once (services/retrieval/scoring.py implements
each): the settings' `HM_FUSION`, the search's check of a request's fusion, the gateway's enum and
the eval and bench commands read them from here."""

from __future__ import annotations

from typing import Literal, get_args

Fusion = Literal["rrf", "boost", "weighted", "adaptive", "dense", "bm25"]
FUSIONS: tuple[str, ...] = get_args(Fusion)
