"""The Provenance gRPC service (protos/hypermnesia/v1/provenance.proto): services/curation/
provenance.py behind the caller's grants, for the gateway's `GET /memories/{id}/provenance` and
its MCP tool."""

from __future__ import annotations

from typing import Any

import asyncpg
import grpc

from hypermnesia.grpc_server import Registration
from hypermnesia.v1 import provenance_pb2, provenance_pb2_grpc
from services.curation import provenance

SERVICE_NAME = provenance_pb2.DESCRIPTOR.services_by_name["Provenance"].full_name


def _record(r: dict[str, Any]) -> provenance_pb2.ProvenanceRecord:
    return provenance_pb2.ProvenanceRecord(
        seq=r["seq"],
        id=r["id"],
        kind=r["kind"],
        operation=r["operation"],
        author=r["author"],
        scope=r["scope"],
        created_at=r["created_at"] or "",
        record_hash=r["record_hash"],
        content_sha256=r["content_sha256"],
        verifies=r["verifies"],
        text_purged=r["text"] == "purged",
    )


def message(data: dict[str, Any]) -> provenance_pb2.ProvenanceResponse:
    lineage = data["lineage"]
    return provenance_pb2.ProvenanceResponse(
        id=data["id"],
        scope=data["scope"],
        state=data["state"],
        owner=data["owner"] or "",
        stale_because=data["stale_because"] or "",
        records=[_record(r) for r in data["records"]],
        mentioned_by=[_record(r) for r in data["mentioned_by"]],
        all_verify=data["all_verify"],
        supersedes=lineage["supersedes"],
        superseded_by=lineage["superseded_by"],
        closed_by_its_records=lineage["closed_by_its_records"],
        premises=[
            provenance_pb2.RelatedMemory(id=p["id"], state=p["state"], by=p["by"]) for p in data["premises"]
        ],
        conclusions=[
            provenance_pb2.RelatedMemory(id=c["id"], state="stale" if c["stale"] else "live", by=c["by"])
            for c in data["conclusions"]
        ],
        proposals=[
            provenance_pb2.ProposalProvenance(
                id=p["id"],
                kind=p["kind"],
                status=p["status"],
                role=p["role"],
                decided_by=p["decided_by"] or "",
                decided_at=p["decided_at"] or "",
                reason=p["reason"] or "",
                records=[_record(r) for r in p["records"]],
            )
            for p in data["proposals"]
        ],
        written_by=data["written_by"],
        approved_by=data["approved_by"],
    )


class ProvenanceServicer(provenance_pb2_grpc.ProvenanceServicer):
    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool

    async def Explain(
        self, request: provenance_pb2.ProvenanceRequest, context: grpc.aio.ServicerContext
    ) -> provenance_pb2.ProvenanceResponse:
        async with self.pool.acquire() as conn:
            data = await provenance.provenance(conn, request.id, tuple(request.caller.grants))
        return message(data)


def registration(pool: asyncpg.Pool) -> Registration:
    """The entry for `create_server([...])` in services/curation/server.py."""
    return (provenance_pb2_grpc.add_ProvenanceServicer_to_server, ProvenanceServicer(pool), SERVICE_NAME)
