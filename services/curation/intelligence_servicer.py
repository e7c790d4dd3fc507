"""The Intelligence RPCs (protos/hypermnesia/v1/intelligence.proto), served by the curation process:
thin — translate messages; graph.py, proposals.py, consolidation.py and dialectic.py do the work
and re-check every scope against the caller's grants."""

from __future__ import annotations

from dataclasses import dataclass

import asyncpg
import grpc

from hypermnesia.grpc_server import Registration
from hypermnesia.settings import CurationSettings
from hypermnesia.times import field_time
from hypermnesia.v1 import intelligence_pb2, intelligence_pb2_grpc
from hypermnesia.wal import report_commit
from services.curation.consolidation import Consolidator
from services.curation.dialectic import Dialectic
from services.curation.dreamer import Dreamer
from services.curation.embedding import BatchEmbedder
from services.curation.graph import Graph
from services.curation.llm import LlmClient
from services.curation.proposals import Proposals, proposal_message

SERVICE_NAME = intelligence_pb2.DESCRIPTOR.services_by_name["Intelligence"].full_name


@dataclass
class Intelligence:
    graph: Graph
    proposals: Proposals
    consolidator: Consolidator
    dialectic: Dialectic

    @classmethod
    def build(cls, pool: asyncpg.Pool, embeddings: BatchEmbedder, settings: CurationSettings) -> Intelligence:
        llm = LlmClient.from_settings(pool, settings)
        dreamer = Dreamer(
            pool,
            llm,
            similarity=settings.consolidation_similarity,
            similarity_alone=settings.consolidation_similarity_alone,
            near_duplicate=settings.dedupe_threshold,
        )
        return cls(
            graph=Graph(pool),
            proposals=Proposals(pool, embeddings),
            consolidator=Consolidator(
                pool,
                dreamer,
                promote_importance=settings.consolidation_promote_importance,
                min_age_days=settings.consolidation_min_age_days,
            ),
            dialectic=Dialectic(
                pool,
                settings.retrieval_address,
                llm,
                min_similarity=settings.dialectic_min_similarity if settings.dialectic_abstain else None,
            ),
        )

    async def close(self) -> None:
        await self.dialectic.close()


def _grants(caller: object) -> tuple[str, ...]:
    return tuple(caller.grants)  # type: ignore[attr-defined]


class IntelligenceServicer(intelligence_pb2_grpc.IntelligenceServicer):
    def __init__(self, intelligence: Intelligence) -> None:
        self.i = intelligence

    async def _committed(self, context: grpc.aio.ServicerContext) -> None:
        """Read-after-write: the caller's next reads wait for a replica to replay this write."""
        await report_commit(self.i.graph.pool, context)

    async def AddEvidence(
        self, request: intelligence_pb2.AddEvidenceRequest, context: grpc.aio.ServicerContext
    ) -> intelligence_pb2.EvidenceResponse:
        grants = _grants(request.caller)
        derived = await self.i.graph.add_evidence(
            request.caller.principal, grants, request.derived_id, list(request.premise_ids)
        )
        await self._committed(context)
        return await self.i.graph.evidence(grants, str(derived), "premises")

    async def Evidence(
        self, request: intelligence_pb2.EvidenceRequest, context: grpc.aio.ServicerContext
    ) -> intelligence_pb2.EvidenceResponse:
        return await self.i.graph.evidence(_grants(request.caller), request.id, request.depth)

    async def CreateIdentity(
        self, request: intelligence_pb2.CreateIdentityRequest, context: grpc.aio.ServicerContext
    ) -> intelligence_pb2.Identity:
        row = await self.i.graph.create_identity(
            request.caller.principal, _grants(request.caller), request.scope, request.name
        )
        await self._committed(context)
        return intelligence_pb2.Identity(
            id=str(row["id"]), scope=row["scope"], name=row["name"], owner_id=row["owner_id"]
        )

    async def SetPerspective(
        self, request: intelligence_pb2.SetPerspectiveRequest, context: grpc.aio.ServicerContext
    ) -> intelligence_pb2.Perspective:
        memory_id, observer, observed = await self.i.graph.set_perspective(
            request.caller.principal,
            _grants(request.caller),
            request.memory_id,
            request.observer,
            request.observed,
        )
        await self._committed(context)
        return intelligence_pb2.Perspective(
            memory_id=str(memory_id), observer=str(observer or ""), observed=str(observed or "")
        )

    async def ListProposals(
        self, request: intelligence_pb2.ListProposalsRequest, context: grpc.aio.ServicerContext
    ) -> intelligence_pb2.ProposalList:
        grants = _grants(request.caller)
        rows = await self.i.proposals.list(grants, list(request.scopes), request.status, request.limit)
        readable = await self.i.proposals.readable_evidence(grants, rows)
        return intelligence_pb2.ProposalList(proposals=[proposal_message(r, readable) for r in rows])

    async def DecideProposal(
        self, request: intelligence_pb2.DecideProposalRequest, context: grpc.aio.ServicerContext
    ) -> intelligence_pb2.DecideProposalResponse:
        grants = _grants(request.caller)
        decision = await self.i.proposals.decide(
            request.caller.principal, grants, request.id, request.decision, request.reason
        )
        await self._committed(context)
        readable = await self.i.proposals.readable_evidence(grants, [decision.proposal])
        return intelligence_pb2.DecideProposalResponse(
            proposal=proposal_message(decision.proposal, readable), memory_id=str(decision.memory_id or "")
        )

    async def Consolidate(
        self, request: intelligence_pb2.ConsolidateRequest, context: grpc.aio.ServicerContext
    ) -> intelligence_pb2.ConsolidateResponse:
        reports = await self.i.consolidator.consolidate(
            request.caller.principal,
            _grants(request.caller),
            request.job,
            request.scope,
            since=field_time(request, "since"),
            until=field_time(request, "until"),
        )
        await self._committed(context)
        return intelligence_pb2.ConsolidateResponse(reports=[r.to_message() for r in reports])

    async def Ask(
        self, request: intelligence_pb2.AskRequest, context: grpc.aio.ServicerContext
    ) -> intelligence_pb2.AskResponse:
        return await self.i.dialectic.ask(
            request.caller.principal,
            _grants(request.caller),
            request.question,
            list(request.scopes),
            request.depth,
            request.k,
        )


def registration(intelligence: Intelligence) -> Registration:
    """The entry for `create_server([...])` in services/curation/server.py."""
    return (
        intelligence_pb2_grpc.add_IntelligenceServicer_to_server,
        IntelligenceServicer(intelligence),
        SERVICE_NAME,
    )
