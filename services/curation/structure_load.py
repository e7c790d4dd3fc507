"""The StructureAdmin RPC: load a repository's map file, replacing its previous map atomically."""

from __future__ import annotations

import asyncio
import hashlib
import logging

import asyncpg
import grpc

from hypermnesia.grpc_server import Registration
from hypermnesia.scopes import PROJECT_PREFIX, require
from hypermnesia.structure_map import check_repo, parse_map
from hypermnesia.v1 import structure_pb2, structure_pb2_grpc
from hypermnesia.wal import report_commit
from services.curation import structure_repo

log = logging.getLogger(__name__)

SERVICE_NAME = structure_pb2.DESCRIPTOR.services_by_name["StructureAdmin"].full_name
MAX_SOURCE_NAME_CHARS = 300


def _source_name(name: str) -> str:
    """The file name used in messages; never trusted for anything else."""
    cleaned = "".join(ch for ch in name if ord(ch) >= 32).strip()
    return cleaned[:MAX_SOURCE_NAME_CHARS] or "map"


class StructureAdminServicer(structure_pb2_grpc.StructureAdminServicer):
    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool

    async def LoadMap(
        self, request: structure_pb2.LoadMapRequest, context: grpc.aio.ServicerContext
    ) -> structure_pb2.LoadMapResponse:
        repo = check_repo(request.repo)
        # The gateway checked this already; a service re-checks every scope it touches.
        require(request.caller.grants, [PROJECT_PREFIX + repo])
        source_name = _source_name(request.source_name)
        # Parsing a large file is CPU work; keep the event loop answering other calls meanwhile.
        parsed = await asyncio.to_thread(parse_map, request.source, source_name)
        digest = hashlib.sha256(request.source.encode("utf-8")).hexdigest()
        replaced = await structure_repo.replace_map(
            self.pool,
            repo,
            parsed,
            source_name=source_name,
            source_sha256=digest,
            loaded_by=request.caller.principal or "unknown",
        )
        await report_commit(self.pool, context)
        log.info(
            "loaded the map of repo %s from %s (%d components, %d constraints) for %s",
            repo,
            source_name,
            len(parsed.components),
            len(parsed.constraints),
            request.caller.principal,
        )
        return structure_pb2.LoadMapResponse(
            repo=repo,
            components=len(parsed.components),
            constraints=len(parsed.constraints),
            relationships=len(parsed.relationships),
            replaced=replaced,
            source_sha256=digest,
        )


def registration(pool: asyncpg.Pool) -> Registration:
    """The entry for `create_server([...])` in services/curation/server.py."""
    return (
        structure_pb2_grpc.add_StructureAdminServicer_to_server,
        StructureAdminServicer(pool),
        SERVICE_NAME,
    )
