"""Memory kinds, decay classes (how fast each kind fades) and the other defaults a save fills in,
shared by the gateway, the write path, the importer and the scorer."""

from __future__ import annotations

DEFAULT_KIND = "semantic"
DEFAULT_IMPORTANCE = 1.0

# The type a memory gets when its writer names none. Two values today, by entry point:
# - curation stores `note` for a gRPC save or a dump line that names no type (and for the
#   memories it derives itself);
# - REST and MCP send `fact` when the agent names none, as seed 001's server did; `hypermnesia
#   import` gives the same to that server's export lines and to markdown files (tooling/moving_in.py).
# The gateway's save and a bare gRPC Save therefore store different types for the same omission.
DEFAULT_TYPE = "note"
AGENT_DEFAULT_TYPE = "fact"

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
DECAY_CLASSES = tuple(HALF_LIFE_DAYS)
