"""Memory kinds, decay classes (how fast each kind fades) and the other defaults a save fills in,
shared by the gateway, the write path, the importer and the scorer."""

from __future__ import annotations

DEFAULT_KIND = "semantic"
DEFAULT_IMPORTANCE = 1.0

# The type a memory gets when its writer names none, on every path (seed 001's default): a save
# over REST, MCP or gRPC, a dump line read by `hypermnesia import`, seed 001's export lines and
# markdown files read in (tooling/moving_in.py). A memory curation makes itself names its own type
# where it is made (services/curation/writer.new_memory requires one).
DEFAULT_TYPE = "fact"

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
