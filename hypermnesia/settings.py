"""`HM_*` settings: one class per service over a shared base, validated at start-up.

Nothing here reads the environment at import time; `main()` of each process builds its settings
and passes them down. Validation errors are turned into one sentence per field by
`describe_settings_error` so a user can act on them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Literal, get_args

import platformdirs
from pydantic import Field, SecretStr, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from hypermnesia.addresses import (
    DEFAULT_CURATION_PORT,
    DEFAULT_EMBEDDER_PORT,
    DEFAULT_GATEWAY_PORT,
    DEFAULT_RETRIEVAL_PORT,
    DEFAULT_SERVICE_PORTS,
    local_address,
)
from hypermnesia.fusions import Fusion

__all__ = [
    "DEFAULT_CURATION_PORT",
    "DEFAULT_EMBEDDER_PORT",
    "DEFAULT_GATEWAY_PORT",
    "DEFAULT_RETRIEVAL_PORT",
    "CommonSettings",
    "CurationSettings",
    "EmbedderClientSettings",
    "EmbedderSettings",
    "GatewaySettings",
    "Port",
    "RedactMode",
    "RetrievalSettings",
    "default_data_dir",
    "describe_settings_error",
]

Port = Annotated[int, Field(ge=0, le=65535)]
Fraction = Annotated[float, Field(ge=0.0, le=1.0)]
# The MCP tool profiles (gateway/tool_profiles.py): default = the tools of an agent's loop, full = all.
McpToolProfile = Literal["default", "full"]


def default_data_dir() -> Path:
    return platformdirs.user_data_path("hypermnesia")


def _postgres_url(value: str | None) -> str | None:
    if value is not None and value.strip() == "":
        return None
    if value is not None and not value.startswith(("postgres://", "postgresql://")):
        raise ValueError("must start with postgresql:// (e.g. postgresql://user:pass@host:5432/db)")
    return value


# HM_REDACT's values; defined here rather than beside the scanner (hypermnesia/secrets.py) so that
# reading settings does not load it: detect_secrets and the rules took ~19 MB of every process,
# and the embedder, `up` and its database guard never scan a text.
RedactMode = Literal["mask", "refuse", "off"]


class CommonSettings(BaseSettings):
    """Settings every process reads."""

    model_config = SettingsConfigDict(env_prefix="HM_", extra="ignore", frozen=True)

    # Secrets in what is written (hypermnesia/secrets.py): masked, refused or kept as given. Curation
    # applies it to every write; retrieval to the queries search_log keeps (the delivery log masks
    # the requests it keeps in every mode).
    redact: RedactMode = "mask"

    database_url: str | None = Field(
        default=None,
        description="Postgres with pgvector; unset means the embedded server kept in HM_DATA_DIR.",
    )
    data_dir: Path = Field(default_factory=default_data_dir)
    host: str = "127.0.0.1"
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    startup_timeout_s: Annotated[float, Field(gt=0, le=3600)] = 120.0
    db_pool_size: Annotated[int, Field(gt=0, le=200)] = 10
    # The embedded Postgres's buffer cache; 0 = the store's size on disk and half again (+128 MB),
    # within a quarter of the machine's memory and 4 GiB
    # (hypermnesia/embedded_pg.py). Applies when that server starts; not to HM_DATABASE_URL's server.
    pg_shared_buffers_mb: Annotated[int, Field(ge=0, le=1_048_576)] = 0

    @model_validator(mode="before")
    @classmethod
    def _addresses_follow_ports(cls, data: Any) -> Any:
        """An unset HM_<SERVICE>_ADDRESS is HM_HOST:HM_<SERVICE>_PORT as dialled from this machine,
        so a process started with the same HM_*_PORT as `up` reaches that stack, not the default
        ports. Each class that dials a service declares both fields."""
        if not isinstance(data, dict):
            return data
        for service, default_port in DEFAULT_SERVICE_PORTS.items():
            address, port = f"{service}_address", f"{service}_port"
            if address in cls.model_fields and not str(data.get(address) or "").strip():
                data[address] = local_address(
                    str(data.get("host") or "127.0.0.1"), data.get(port, default_port)
                )
        return data

    @field_validator("database_url")
    @classmethod
    def _url_scheme(cls, value: str | None) -> str | None:
        return _postgres_url(value)

    @field_validator("pg_shared_buffers_mb")
    @classmethod
    def _shared_buffers(cls, value: int) -> int:
        if 0 < value < 16:
            raise ValueError("must be 0 (sized to the store) or at least 16 (MB)")
        return value

    @property
    def model_cache_dir(self) -> Path:
        return self.data_dir / "models"


class EmbedderSettings(CommonSettings):
    """The embedder process: model, provider, micro-batching and backpressure (services/embedder/README.md)."""

    embedder_port: Port = DEFAULT_EMBEDDER_PORT
    embedder_metrics_port: Port = 9101
    embedding_provider: Literal["onnx", "sentence_transformers", "openai"] = "onnx"
    embedding_model_dir: Path | None = Field(
        default=None,
        description="A folder with model.onnx + tokenizer.json, or BERT safetensors + config.json to convert.",
    )
    embedding_max_tokens: Annotated[int, Field(gt=0, le=8192)] = 256
    # fp32 is exact; int8 is weight-only (MatMulNBits): cosine >= 0.998 to fp32 and batch-invariant.
    embedding_quantization: Literal["fp32", "int8"] = "fp32"
    # One Embed call may carry at most this many texts; above it the call is refused (not truncated).
    embed_max_texts: Annotated[int, Field(gt=0, le=100_000)] = 2048
    # 0 = the cores available to the process.
    embed_intra_op_threads: Annotated[int, Field(ge=0, le=256)] = 0
    embed_inter_op_threads: Annotated[int, Field(ge=0, le=256)] = 0
    # onnx provider: batches run at once, each on its own session with its share of the intra-op
    # threads (a batch running alone gets them all). 0 = 2 on two or more cores, else 1.
    embed_workers: Annotated[int, Field(ge=0, le=64)] = 0
    # The sessions for batches running side by side are loaded when two first do, and released
    # after this many seconds without a batch on them (0 = kept once loaded).
    embed_load_sessions_idle_s: Annotated[float, Field(ge=0, le=86_400)] = 300.0
    # A batch holds at most this many texts and this many padded tokens (texts x longest text):
    # long texts gain nothing from big batches, short ones gain a lot.
    embed_max_batch_size: Annotated[int, Field(gt=0, le=1024)] = 32
    embed_max_batch_tokens: Annotated[int, Field(gt=0, le=1_000_000)] = 2048
    # How long a partial batch may wait for more texts, and only when more are expected (the
    # previous batch was bigger); a lone caller never waits.
    embed_max_wait_ms: Annotated[float, Field(ge=0, le=1000)] = 2.0
    # Texts waiting for a batch; above it Embed answers RESOURCE_EXHAUSTED at once.
    embed_max_queue: Annotated[int, Field(gt=0, le=1_000_000)] = 4096
    # Query embeddings remembered (LRU); 0 turns the cache off.
    embed_query_cache_size: Annotated[int, Field(ge=0, le=1_000_000)] = 4096
    # Cross-encoder (BERT sequence classification, ONNX or safetensors); unset = reranking off.
    rerank_model_dir: Path | None = None
    rerank_max_tokens: Annotated[int, Field(gt=0, le=8192)] = 512
    # `openai` provider: any OpenAI-compatible /v1/embeddings endpoint (Ollama, TEI, vLLM, ...).
    embedding_api_url: str | None = Field(default=None, description="Base URL ending in /v1.")
    embedding_api_model: str | None = None
    embedding_api_key: SecretStr | None = None
    embedding_api_timeout_s: Annotated[float, Field(gt=0, le=600)] = 30.0

    @field_validator("embedding_model_dir", "rerank_model_dir")
    @classmethod
    def _model_dir_exists(cls, value: Path | None) -> Path | None:
        if value is not None and not value.is_dir():
            raise ValueError(
                f"{value} is not a folder; point it at a folder holding model.onnx + tokenizer.json"
            )
        return value

    @model_validator(mode="after")
    def _consistent(self) -> EmbedderSettings:
        if self.embed_max_queue < self.embed_max_texts:
            raise ValueError(
                f"HM_EMBED_MAX_QUEUE ({self.embed_max_queue}) must be at least HM_EMBED_MAX_TEXTS "
                f"({self.embed_max_texts}), or the largest allowed call could never be queued"
            )
        if self.embedding_provider == "openai" and not (self.embedding_api_url and self.embedding_api_model):
            raise ValueError(
                "HM_EMBEDDING_PROVIDER=openai needs HM_EMBEDDING_API_URL (e.g. http://127.0.0.1:11434/v1) "
                "and HM_EMBEDDING_API_MODEL (the model name the endpoint serves)"
            )
        return self


class EmbedderClientSettings(CommonSettings):
    """For the services that call the embedder."""

    # Comma-separated host:port list, or one DNS name; calls are spread round robin. Unset: this
    # machine's HM_EMBEDDER_PORT.
    embedder_address: str = ""
    embedder_port: Port = DEFAULT_EMBEDDER_PORT
    embed_timeout_ms: Annotated[int, Field(gt=0, le=600_000)] = 300


class RetrievalSettings(EmbedderClientSettings):
    retrieval_port: Port = DEFAULT_RETRIEVAL_PORT
    retrieval_metrics_port: Port = 9102
    # A read replica's URL (deploy/kubernetes: the CloudNativePG `-ro` Service): searches, gets,
    # lists, context and stats read there; bookkeeping and migrations stay on HM_DATABASE_URL.
    database_read_url: str | None = None
    # How long a read waits for the replica to replay the caller's own last write before it runs on
    # the primary instead (read-after-write, services/retrieval/replica.py); 0 = no wait.
    replica_wait_ms: Annotated[float, Field(ge=0, le=10_000)] = 200.0
    # MiniLM scale: unrelated text ~0.0-0.1, related 0.2-0.5 (re-tune on a model swap).
    search_min_similarity: Fraction = 0.15
    # The relative gate drops hits more than this below the best one's cosine. 0.55: the smallest
    # cutoff with which no question of LoCoMo or SciFact loses a relevant hit from its top 10
    # (seed 001's job for the gate; docs/EVAL.md, "The relative cutoff"): on MiniLM's wide scale a
    # relevant hit can sit 0.5 below the best.
    search_relative_cutoff: Fraction = 0.55
    hybrid_search: bool = True
    hybrid_lexical_boost: Fraction = 0.10
    hybrid_rank_decay_k: Annotated[float, Field(gt=0, le=1000)] = 5.0
    # adaptive: the best mean over the four dev sets, within a question of its best leg on each
    # (docs/EVAL.md, "The bar").
    fusion: Fusion = "adaptive"
    # Answer-mode blend; manager mode uses its own profile (services/retrieval/search.py).
    score_weight_similarity: Annotated[float, Field(ge=0, le=10)] = 1.0
    score_weight_recency: Annotated[float, Field(ge=0, le=10)] = 0.05
    score_weight_importance: Annotated[float, Field(ge=0, le=10)] = 0.03
    # Jaccard overlap of the query's entities with the memory's (the entity term of the blend); 0 turns it off.
    score_weight_entity: Annotated[float, Field(ge=0, le=10)] = 0.05
    # Bonus for a memory filed under the search's `topic` (the topic term of the blend, 1.0 or 0.0).
    score_weight_topic: Annotated[float, Field(ge=0, le=10)] = 0.10
    # Added to the score of a memory whose event time falls in a date the query names ("last
    # Tuesday", "in May 2023"; services/retrieval/time_window.py); 0 turns it off. Chosen on LoCoMo
    # conversations 1-5 (docs/EVAL.md, "Time in queries").
    time_boost: Annotated[float, Field(ge=0, le=10)] = 0.2
    # Conversation context: how much a turn's best neighbour and its thread's best turn count.
    context_neighbour_weight: Annotated[float, Field(ge=0, le=10)] = 0.25
    context_thread_weight: Annotated[float, Field(ge=0, le=10)] = 0.2
    # A turn's session as a whole: the mean cosine of its thread's best candidates (query time, no
    # round trip), and the cosine of its thread's opening turn (one more column in the candidate
    # query, only when weighted). Off by default: neither helped LoCoMo (docs/EVAL.md, "Turns in
    # their session").
    context_session_weight: Annotated[float, Field(ge=0, le=10)] = 0.0
    context_opening_weight: Annotated[float, Field(ge=0, le=10)] = 0.0
    # An assistant turn (a conversation memory whose speaker is "assistant") longer than this many
    # words has its relevance multiplied by (words / this) ** -0.25, so a long answer that mentions
    # everything does not outrank a user's one-line fact on every query; 0 = no weight.
    assistant_turn_words: Annotated[int, Field(ge=0, le=1_000_000)] = 100
    bm25_k1: Annotated[float, Field(gt=0, le=10)] = 1.2
    bm25_b: Fraction = 0.4
    # Length normalisation for document chunks: BM25's customary 0.75, since chunks are long and
    # vary in length (SciFact nDCG@10 0.725 at 0.4, 0.733-0.735 from 0.6 to 1.0; docs/EVAL.md).
    bm25_b_documents: Fraction = 0.75
    search_max_k: Annotated[int, Field(gt=0, le=10_000)] = 100
    # Candidates taken from each leg (at least k), and how many of each leg's best get their
    # neighbours added. LoCoMo scores the same at 50, 100 and 200 (docs/EVAL.md); fewer is faster.
    search_candidates: Annotated[int, Field(gt=0, le=10_000)] = 50
    search_context_expansion: Annotated[int, Field(ge=0, le=1000)] = 20
    # The lexical leg selects rows by its rarest query terms while together they have at most this
    # many entries in the lexical index (over every scope, since reading a term reads them all):
    # the bound on its cost, whatever the store's size.
    search_lexical_rows: Annotated[int, Field(gt=0, le=10_000_000)] = 2_000
    # Searched scopes holding at most this many rows (or 5% of the store) get an exact dense scan
    # instead of the HNSW walk, which would skip most of what it visits (services/retrieval/repo.py).
    search_exact_rows: Annotated[int, Field(ge=0, le=10_000_000)] = 5_000
    hnsw_ef_search: Annotated[int, Field(gt=0, le=1000)] = 100  # pgvector's limit
    # Cross-encoder re-scoring of the fused top-N (per request `rerank`; needs HM_RERANK_MODEL_DIR).
    rerank_top_n: Annotated[int, Field(gt=0, le=200)] = 20
    rerank_timeout_ms: Annotated[int, Field(gt=0, le=600_000)] = 2_000
    search_log_enabled: bool = True
    # Recall refreshes last_accessed_at, which keeps a used memory from being forgotten;
    # evaluations turn it off so runs stay independent.
    search_bump_access: bool = True

    @field_validator("database_read_url")
    @classmethod
    def _read_url_scheme(cls, value: str | None) -> str | None:
        return _postgres_url(value)


class CurationSettings(EmbedderClientSettings):
    curation_port: Port = DEFAULT_CURATION_PORT
    curation_metrics_port: Port = 9103
    # Writes are not latency-critical the way a search is; give the embedder longer.
    embed_write_timeout_ms: Annotated[int, Field(gt=0, le=600_000)] = 30_000
    dedupe_threshold: Fraction = 0.92
    dedupe_content_threshold: Fraction = 0.9
    # Forgetting: stale = not recalled for this many days; unimportant = importance <= floor.
    forget_after_days: Annotated[float, Field(ge=0, le=36500)] = 180.0
    forget_importance_floor: Annotated[float, Field(ge=0, le=10)] = 1.0
    # The server's own periodic forget sweep over every scope; 0 = off.
    forget_sweep_hours: Annotated[float, Field(ge=0, le=8760)] = 0.0
    # Candidate tasks extracted from conversation records ("TODO: ...", "I need to ...").
    task_extraction: bool = True
    # Conversation records whose speaker is "assistant" (an agent's own answers) are stored and
    # searchable; false leaves them out of an import (answered as skipped, with no id).
    store_assistant_turns: bool = True
    # A scope with at least this many memories gets its own HNSW graph (hypermnesia/scope_graphs.py),
    # so a search of that scope alone need not walk every other scope's rows; 0 = never.
    scope_graph_rows: Annotated[int, Field(ge=0, le=1_000_000_000)] = 5_000
    # The Dialectic searches through the retrieval service (connected on first use, since the
    # local stack starts curation before retrieval). Unset: this machine's HM_RETRIEVAL_PORT.
    retrieval_address: str = ""
    retrieval_port: Port = DEFAULT_RETRIEVAL_PORT
    # The Dialectic answers only from retrieved memories at least this similar to the question
    # (cosine, the embedding model's scale: chosen for all-MiniLM-L6-v2 in docs/EVAL.md, "The
    # Dialectic's abstention"; lexical hits bypass it), and abstains when none is, or none shares a
    # word of the question's content. dialectic_abstain=false quotes whatever was retrieved.
    dialectic_min_similarity: Fraction = 0.3
    dialectic_abstain: bool = True
    # Optional LLM (issue 18): any OpenAI-compatible chat-completions endpoint; unset = every step
    # runs in its deterministic extractive mode.
    llm_base_url: str | None = Field(default=None, description="Base URL ending in /v1.")
    llm_model: str = ""
    llm_api_key: SecretStr | None = None
    llm_timeout_s: Annotated[float, Field(gt=0, le=600)] = 30.0
    llm_max_retries: Annotated[int, Field(ge=0, le=10)] = 2
    # Tokens per UTC day (the responses' `usage`); a spent budget falls back to extractive.
    llm_daily_tokens: Annotated[int, Field(ge=0, le=1_000_000_000)] = 200_000
    # Signed checkpoints of the raw log's head (services/curation/checkpoints.py): the Ed25519 key
    # lives outside the database (default: checkpoint-key.pem in HM_DATA_DIR); curation
    # writes one to HM_CHECKPOINT_DIR every HM_CHECKPOINT_HOURS (0 = off).
    checkpoint_key: Path | None = None
    checkpoint_dir: Path | None = None
    checkpoint_hours: Annotated[float, Field(ge=0, le=8760)] = 0.0
    # The whole raw log verified every this many hours (services/curation/verify_schedule.py), its
    # outcome exported for the HypermnesiaRawLogBroken alert; 0 = off.
    verify_hours: Annotated[float, Field(ge=0, le=8760)] = 24.0
    # Consolidation (daily, weekly, monthly jobs) inside the server: hours between runs, the first one
    # interval after start; 0 = off.
    consolidation_daily_hours: Annotated[float, Field(ge=0, le=8760)] = 24.0
    consolidation_weekly_hours: Annotated[float, Field(ge=0, le=8760)] = 168.0
    consolidation_monthly_hours: Annotated[float, Field(ge=0, le=8760)] = 720.0
    # Adaptive fusion's refit (services/curation/fusion_refits.py): every this many hours, counted
    # from the last refit, each scope key searched since gets a new estimate from its recent
    # searches; between refits ranking does not move. 0 = only after imports and on demand.
    fusion_refit_hours: Annotated[float, Field(ge=0, le=8760)] = 24.0
    # Episodes younger than this are left to settle before the weekly job clusters them.
    consolidation_min_age_days: Annotated[float, Field(ge=0, le=3650)] = 7.0
    # Two episodes cluster when they share an entity and their cosine reaches this (or reach
    # consolidation_similarity_alone without a shared entity).
    consolidation_similarity: Fraction = 0.5
    consolidation_similarity_alone: Fraction = 0.8
    # A working memory is promoted to episodic when accessed and at least this important.
    consolidation_promote_importance: Annotated[float, Field(ge=0, le=10)] = 1.0
    # The 3D map (issue 20, services/curation/projection.py): seconds between the projection's
    # passes (project what was written without a position, refit when due); 0 = off.
    viz_refresh_s: Annotated[float, Field(ge=0, le=86_400)] = 60.0
    # Refit the basis when the store grew by this fraction since the last fit, or after these hours.
    viz_refit_growth: Annotated[float, Field(gt=0, le=100)] = 0.25
    viz_refit_hours: Annotated[float, Field(gt=0, le=8760)] = 24.0
    # The delivery log (services/curation/deliveries.py) keeps what was delivered this many days;
    # the daily consolidation job drops older entries, keeping the boundary hash. 0 = keep all.
    delivery_retention_days: Annotated[float, Field(ge=0, le=36_500)] = 90.0

    @field_validator("llm_base_url")
    @classmethod
    def _llm_url(cls, value: str | None) -> str | None:
        if value is not None and value.strip() == "":
            return None
        if value is not None and not value.startswith(("http://", "https://")):
            raise ValueError("must be an http(s) URL ending in /v1, e.g. http://127.0.0.1:11434/v1")
        return value.rstrip("/") if value else value

    @model_validator(mode="after")
    def _llm_model_named(self) -> CurationSettings:
        if self.llm_base_url and not self.llm_model:
            raise ValueError(
                "HM_LLM_BASE_URL is set but HM_LLM_MODEL is not; name the model the endpoint serves"
            )
        return self


class GatewaySettings(CommonSettings):
    gateway_port: Port = DEFAULT_GATEWAY_PORT
    # Unset: this machine's HM_RETRIEVAL_PORT / HM_CURATION_PORT (see _addresses_follow_ports).
    retrieval_address: str = ""
    retrieval_port: Port = DEFAULT_RETRIEVAL_PORT
    curation_address: str = ""
    curation_port: Port = DEFAULT_CURATION_PORT
    rpc_timeout_s: Annotated[float, Field(gt=0, le=600)] = 15.0
    # NoDecode: the validator below parses the JSON itself, so an empty value means no tokens.
    # repr=False: a settings object printed or logged must not carry the tokens.
    auth_tokens: Annotated[dict[str, dict[str, Any]], NoDecode] = Field(default_factory=dict, repr=False)
    require_auth: bool = True
    default_project: str = "default"
    # false (drop-in with existing clients): a session's own project scope is readable and writable for
    # any token of HM_AUTH_TOKENS; a store token (`hypermnesia token create`) needs a grant on it either
    # way (gateway/auth.py). true: every token needs the grant, making projects a security boundary.
    project_requires_grant: bool = False
    # How long the gateway keeps curation's answer for a store token (`hypermnesia token create`),
    # found or not: a revoked token stops working within it. 0 asks curation on every request.
    token_cache_s: Annotated[float, Field(ge=0, le=3600)] = 10.0
    # Only `hypermnesia mcp` (stdio) reads it: the bearer token its whole session acts with.
    token: str = Field(default="", repr=False)
    # Limits (issue 20, gateway/limits.py). A request body above this many bytes is refused (413)
    # before it is read whole; 4 MiB holds the largest memory (64 Ki characters) many times over
    # and an import batch of a few thousand records.
    max_body_bytes: Annotated[int, Field(ge=1024, le=1 << 30)] = 4 * 1024 * 1024
    # Per-principal token buckets on writes and on searches (gateway/limits.py says which is
    # which): so many a minute, refilled continuously, up to `burst` at once; 0 = off. The defaults
    # are far above what one agent does (a few calls a second at most) and stop a runaway loop.
    rate_writes_per_min: Annotated[float, Field(ge=0, le=1_000_000)] = 1200.0
    rate_writes_burst: Annotated[int, Field(ge=1, le=1_000_000)] = 600
    rate_searches_per_min: Annotated[float, Field(ge=0, le=1_000_000)] = 1200.0
    rate_searches_burst: Annotated[int, Field(ge=1, le=1_000_000)] = 600
    # The MCP tools a session lists unless it asks for a profile (X-Hypermnesia-Tools): every
    # listed schema costs an agent context on every session (gateway/tool_profiles.py).
    mcp_tools: McpToolProfile = "default"
    # Record every delivery to an agent (search results, context blocks, a file's rules, Dialectic
    # answers) in curation's delivery log (gateway/deliveries.py); false records none.
    delivery_log: bool = True

    @field_validator("mcp_tools", mode="before")
    @classmethod
    def _tool_profile(cls, value: Any) -> Any:
        profile = value.strip().lower() if isinstance(value, str) else value
        if profile not in get_args(McpToolProfile):
            raise ValueError(
                f"{value!r} is not a tool profile; use default (seed 001's tools plus memory_context, "
                "memory_ask and memory_supersede) or full (every tool and parameter)"
            )
        return profile

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
    """One line per bad setting, naming the environment variable (a check across several settings
    names them in its own message)."""
    lines = []
    for err in exc.errors():
        message = str(err["msg"]).removeprefix("Value error, ")
        if err["loc"]:
            lines.append("HM_" + "_".join(str(p) for p in err["loc"]).upper() + ": " + message)
        else:
            lines.append(message)
    if len(lines) == 1:
        return "invalid settings: " + lines[0]
    return "invalid settings:\n  " + "\n  ".join(lines)
