"""`HM_*` settings: one class per service over a shared base, validated at start-up.

Nothing here reads the environment at import time; `main()` of each process builds its settings
and passes them down. Validation errors are turned into one sentence per field by
`describe_settings_error` so a user can act on them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Literal

import platformdirs
from pydantic import Field, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

Port = Annotated[int, Field(ge=0, le=65535)]
Fraction = Annotated[float, Field(ge=0.0, le=1.0)]

DEFAULT_EMBEDDER_PORT = 50051
DEFAULT_RETRIEVAL_PORT = 50052
DEFAULT_CURATION_PORT = 50053
DEFAULT_GATEWAY_PORT = 8765


def default_data_dir() -> Path:
    return platformdirs.user_data_path("hypermnesia")


class CommonSettings(BaseSettings):
    """Settings every process reads."""

    model_config = SettingsConfigDict(env_prefix="HM_", extra="ignore", frozen=True)

    database_url: str | None = Field(
        default=None,
        description="Postgres with pgvector; unset means the embedded server kept in HM_DATA_DIR.",
    )
    data_dir: Path = Field(default_factory=default_data_dir)
    host: str = "127.0.0.1"
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    startup_timeout_s: Annotated[float, Field(gt=0, le=3600)] = 120.0
    db_pool_size: Annotated[int, Field(gt=0, le=200)] = 10

    @field_validator("database_url")
    @classmethod
    def _url_scheme(cls, value: str | None) -> str | None:
        if value is not None and value.strip() == "":
            return None
        if value is not None and not value.startswith(("postgres://", "postgresql://")):
            raise ValueError("must start with postgresql:// (e.g. postgresql://user:pass@host:5432/db)")
        return value

    @property
    def model_cache_dir(self) -> Path:
        return self.data_dir / "models"


class EmbedderSettings(CommonSettings):
    embedder_port: Port = DEFAULT_EMBEDDER_PORT
    embedder_metrics_port: Port = 9101
    embedding_provider: Literal["onnx"] = "onnx"
    embedding_model_dir: Path | None = Field(
        default=None,
        description="A folder with model.onnx + tokenizer.json, or BERT safetensors + config.json to convert.",
    )
    embedding_max_tokens: Annotated[int, Field(gt=0, le=8192)] = 256
    # One Embed call may carry at most this many texts; above it the call is refused (not truncated).
    embed_max_texts: Annotated[int, Field(gt=0, le=100_000)] = 2048
    embed_threads: Annotated[int, Field(ge=0, le=256)] = 0  # 0 = the cores available to the process

    @field_validator("embedding_model_dir")
    @classmethod
    def _model_dir_exists(cls, value: Path | None) -> Path | None:
        if value is not None and not value.is_dir():
            raise ValueError(f"{value} is not a folder; point it at a folder holding model.onnx + tokenizer.json")
        return value


class EmbedderClientSettings(CommonSettings):
    """For the services that call the embedder."""

    # Comma-separated host:port list, or one DNS name; calls are spread round robin.
    embedder_address: str = f"127.0.0.1:{DEFAULT_EMBEDDER_PORT}"
    embed_timeout_ms: Annotated[int, Field(gt=0, le=600_000)] = 300


class RetrievalSettings(EmbedderClientSettings):
    retrieval_port: Port = DEFAULT_RETRIEVAL_PORT
    retrieval_metrics_port: Port = 9102
    search_min_similarity: Fraction = 0.25
    search_relative_cutoff: Fraction = 0.15
    hybrid_search: bool = True
    hybrid_lexical_boost: Fraction = 0.10
    hybrid_rank_decay_k: Annotated[float, Field(gt=0, le=1000)] = 5.0
    fusion: Literal["rrf", "boost", "weighted"] = "boost"
    score_weight_similarity: Annotated[float, Field(ge=0, le=10)] = 1.0
    score_weight_recency: Annotated[float, Field(ge=0, le=10)] = 0.10
    score_weight_importance: Annotated[float, Field(ge=0, le=10)] = 0.06
    recency_half_life_days: Annotated[float, Field(gt=0, le=36500)] = 30.0
    search_max_k: Annotated[int, Field(gt=0, le=10_000)] = 100
    search_candidates: Annotated[int, Field(gt=0, le=10_000)] = 100
    search_log_enabled: bool = True


class CurationSettings(EmbedderClientSettings):
    curation_port: Port = DEFAULT_CURATION_PORT
    curation_metrics_port: Port = 9103
    # Writes are not latency-critical the way a search is; give the embedder longer.
    embed_write_timeout_ms: Annotated[int, Field(gt=0, le=600_000)] = 30_000
    dedupe_threshold: Fraction = 0.92
    dedupe_content_threshold: Fraction = 0.9


class GatewaySettings(CommonSettings):
    gateway_port: Port = DEFAULT_GATEWAY_PORT
    retrieval_address: str = f"127.0.0.1:{DEFAULT_RETRIEVAL_PORT}"
    curation_address: str = f"127.0.0.1:{DEFAULT_CURATION_PORT}"
    rpc_timeout_s: Annotated[float, Field(gt=0, le=600)] = 15.0
    auth_tokens: dict[str, dict[str, Any]] = Field(default_factory=dict)
    require_auth: bool = True
    default_project: str = "default"

    @field_validator("auth_tokens", mode="before")
    @classmethod
    def _parse_tokens(cls, value: Any) -> Any:
        if isinstance(value, str):
            try:
                value = json.loads(value or "{}")
            except json.JSONDecodeError as exc:
                raise ValueError(
                    'must be JSON like {"token": {"principal": "id", "scopes": ["user:alice", "project:*"]}}'
                ) from exc
        if not isinstance(value, dict):
            raise ValueError('must be a JSON object mapping each token to {"principal", "scopes"}')
        for token, entry in value.items():
            if not isinstance(entry, dict) or not isinstance(entry.get("principal"), str):
                raise ValueError(f'token {token[:4]}…: needs a "principal" string')
            scopes = entry.get("scopes", [])
            if not isinstance(scopes, list) or not all(isinstance(s, str) and s for s in scopes):
                raise ValueError(f'token {token[:4]}…: "scopes" must be a list of non-empty strings')
        return value


def describe_settings_error(exc: ValidationError) -> str:
    """One line per bad setting, naming the environment variable."""
    lines = []
    for err in exc.errors():
        name = "HM_" + "_".join(str(p) for p in err["loc"]).upper()
        lines.append(f"{name}: {err['msg']}")
    return "invalid settings:\n  " + "\n  ".join(lines)
