"""Curation RPCs (thin: translate messages, the writer does the work)."""

from __future__ import annotations

import grpc
from google.protobuf.json_format import MessageToDict

from hypermnesia.memory_rows import memory_from_row
from hypermnesia.v1 import curation_pb2, curation_pb2_grpc
from services.curation.writer import MemoryWriter, SaveInput


class CurationServicer(curation_pb2_grpc.CurationServicer):
    def __init__(self, writer: MemoryWriter) -> None:
        self.writer = writer

    async def Save(
        self, request: curation_pb2.SaveRequest, context: grpc.aio.ServicerContext
    ) -> curation_pb2.SaveResponse:
        result = await self.writer.save(
            SaveInput(
                principal=request.caller.principal,
                grants=tuple(request.caller.grants),
                content=request.content,
                description=request.description,
                scope=request.scope,
                type=request.type,
                tags=list(request.tags),
                metadata=MessageToDict(request.metadata),
                importance=request.importance if request.HasField("importance") else None,
                kind=request.kind,
            )
        )
        response = curation_pb2.SaveResponse(created=result.created, memory=memory_from_row(result.memory))
        if result.replaced is not None:
            response.replaced.CopyFrom(memory_from_row(result.replaced))
        return response
