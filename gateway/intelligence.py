"""The curation-intelligence operations (issue 18: the Dialectic, the Dreamer's proposals and the
evidence graph), one request model and one function per operation, served by the curation
process's Intelligence service. The session's scopes default as memory_search's do."""

from __future__ import annotations

from typing import Any

from gateway.auth import Session
from gateway.backends import Backends
from gateway.fields import Request, field
from gateway.shaping import ask_json, caller, decision_json, evidence_json, proposals_json, to_proto
from hypermnesia.recall_depth import ANCESTRY, DEPTHS, PREMISES
from hypermnesia.v1 import intelligence_pb2
from hypermnesia.validation import MAX_QUERY_CHARS, MAX_SCOPE_CHARS

__all__ = [
    "AskQuestion",
    "DecideProposal",
    "ListProposals",
    "MemoryEvidence",
    "ask",
    "decide_proposal",
    "evidence",
    "list_proposals",
]

# The curation service's bounds (services/curation/dialectic.py, proposals.py), stated here so a
# client sees them in the schema; the service enforces them.
MAX_ASK_K = 50
DEFAULT_ASK_K = 8
MAX_PROPOSALS = 1000
DEFAULT_PROPOSALS = 100
MAX_REASON_CHARS = 2000
PROPOSAL_STATUSES = ("pending", "approved", "rejected", "all")
PROPOSAL_DECISIONS = ("approve", "reject")

_SCOPE_TO_READ = "Only this scope (e.g. 'shared'); default: your project plus your token's granted scopes."


def _scopes(session: Session, scope: str | None) -> list[str]:
    return [scope] if scope is not None else session.readable_scopes()


class AskQuestion(Request):
    question: str = field("The question, in words.", max_length=MAX_QUERY_CHARS)
    depth: str = field(
        "How far recall follows the evidence graph: explicit (stored rows only), derived (plus "
        "conclusions derived from them), premises (plus their direct evidence), ancestry (transitive, "
        "capped), or auto (one of those, picked from the evidence found; the answer says why).",
        "auto",
        enum=DEPTHS,
    )
    scope: str | None = field(_SCOPE_TO_READ, None, max_length=MAX_SCOPE_CHARS)
    k: int = field(
        "How many evidence rows to search for.",
        DEFAULT_ASK_K,
        nonzero=True,
        le=MAX_ASK_K,
    )


async def ask(backends: Backends, session: Session, request: AskQuestion) -> dict[str, Any]:
    """Answer a question from memory as claims that each cite the memories they rest on. When no
    memory found answers the question (none close enough to it, or none sharing a word of it), the
    answer is no claim and `abstained` says why: nothing is made up. A validator drops every claim
    citing nothing, or citing an id that is absent, archived, stale, superseded or outside your
    scopes (`dropped`, with the reason). `mode` says whether an LLM phrased the claims or the best
    evidence sentences were quoted (extractive); `depth_reason` why that recall depth was used."""
    message = intelligence_pb2.AskRequest(
        caller=caller(session),
        question=request.question,
        scopes=_scopes(session, request.scope),
        depth=request.depth,
        k=request.k,
    )
    return ask_json(await backends.call(backends.intelligence.Ask, message))


class ListProposals(Request):
    scope: str | None = field(_SCOPE_TO_READ, None, max_length=MAX_SCOPE_CHARS)
    status: str = field(
        "Which proposals: pending, approved, rejected or all.", "pending", enum=PROPOSAL_STATUSES
    )
    limit: int = field(
        f"How many proposals at most (up to {MAX_PROPOSALS}), newest first.",
        DEFAULT_PROPOSALS,
        nonzero=True,
        le=MAX_PROPOSALS,
    )


async def list_proposals(backends: Backends, session: Session, request: ListProposals) -> dict[str, Any]:
    """What the Dreamer (consolidation) proposes: distilled facts, procedures, summaries, revisions
    of stale conclusions, retirements and contradictions, each with its evidence ids and rationale.
    Nothing is written until a proposal is approved (proposal_decide)."""
    message = to_proto(
        intelligence_pb2.ListProposalsRequest(),
        request,
        caller=caller(session),
        scopes=_scopes(session, request.scope),
    )
    response = await backends.call(backends.intelligence.ListProposals, message)
    return proposals_json(response)


class DecideProposal(Request):
    proposal_id: str = field("The proposal's id (a UUID).")
    decision: str = field(
        "approve (write what it proposes) or reject (never proposed again).", enum=PROPOSAL_DECISIONS
    )
    reason: str = field(
        f"Why; required to reject (at most {MAX_REASON_CHARS} characters).",
        "",
        max_length=MAX_REASON_CHARS,
    )


async def decide_proposal(backends: Backends, session: Session, request: DecideProposal) -> dict[str, Any]:
    """Approve or reject a proposal; a decision is final. Approving writes the derived memory with
    its evidence edges (or performs the suggested supersede or retirement) and answers with its id
    as `memory_id`; rejecting needs a reason and answers `memory_id: null`."""
    message = intelligence_pb2.DecideProposalRequest(
        caller=caller(session), id=request.proposal_id, decision=request.decision, reason=request.reason
    )
    response = await backends.call(backends.intelligence.DecideProposal, message)
    return decision_json(response)


class MemoryEvidence(Request):
    memory_id: str = field("The memory's id (a UUID).")
    depth: str = field(
        "premises (direct evidence and direct conclusions) or ancestry (transitive, at most 3 hops "
        "and 20 rows).",
        "premises",
        enum=(PREMISES, ANCESTRY),
    )


async def evidence(backends: Backends, session: Session, request: MemoryEvidence) -> dict[str, Any]:
    """A memory's place in the evidence graph: what it rests on (`premises`) and what rests on it
    (`derived`), each marked `stale` with `stale_because` when a premise changed. Rows outside
    your scopes are left out."""
    message = intelligence_pb2.EvidenceRequest(
        caller=caller(session), id=request.memory_id, depth=request.depth
    )
    return evidence_json(await backends.call(backends.intelligence.Evidence, message))
