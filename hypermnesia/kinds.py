"""Memory kinds and decay classes (how fast each kind fades), shared by the write path and the scorer."""

from __future__ import annotations

DEFAULT_KIND = "semantic"

DECAY_CLASS_FOR_KIND = {
    "core": "none",
    "working": "fast",
    "episodic": "medium",
    "semantic": "slow",
    "procedural": "slow",
    "document": "slow",
}

# Half-lives in days; `none` never decays.
HALF_LIFE_DAYS = {"none": None, "slow": 90.0, "medium": 14.0, "fast": 2.0}
