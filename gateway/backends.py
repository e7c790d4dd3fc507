"""The gateway's gRPC clients to retrieval and curation, with one translation of failures."""

from __future__ import annotations

import asyncio
from typing import Any

import grpc

from hypermnesia.errors import HypermnesiaError
from hypermnesia.grpc_client import open_channel
from hypermnesia.grpc_server import SERVICE_ERROR_MARK
from hypermnesia.v1 import common_pb2, curation_pb2_grpc, retrieval_pb2_grpc, structure_pb2_grpc


class BackendError(HypermnesiaError):
    """A service answered with a non-OK status; carries that status and its message."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code


def _from_service(exc: grpc.aio.AioRpcError) -> bool:
    """A status the service itself raised (see SERVICE_ERROR_MARK): its message is meant for the caller."""
    metadata = exc.trailing_metadata() or ()
    return any((key, value) in SERVICE_ERROR_MARK for key, value in metadata)


class Backends:
    def __init__(self, retrieval_address: str, curation_address: str, timeout_s: float) -> None:
        self._channels = [open_channel(retrieval_address), open_channel(curation_address)]
        self.retrieval = retrieval_pb2_grpc.RetrievalStub(self._channels[0])
        self.curation = curation_pb2_grpc.CurationStub(self._channels[1])
        # Structure reads are served by the retrieval process, map loads by the curation process.
        self.structure = structure_pb2_grpc.StructureStub(self._channels[0])
        self.structure_admin = structure_pb2_grpc.StructureAdminStub(self._channels[1])
        self.timeout_s = timeout_s

    async def call(self, method: Any, request: Any, timeout_s: float | None = None) -> Any:
        """Call a service method; a non-OK status becomes a BackendError with a caller-facing
        message. `timeout_s` lengthens the deadline for calls that embed many texts."""
        timeout = max(self.timeout_s, timeout_s or 0.0)
        try:
            # wait_for_ready rides out a service restart (reconnect) within the deadline.
            return await method(request, timeout=timeout, wait_for_ready=True)
        except grpc.aio.AioRpcError as exc:
            code = exc.code()
            if _from_service(exc):
                message = exc.details() or code.name
            elif code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
                message = "a hypermnesia service is unreachable or too slow; check that the stack is running"
            elif code in (grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN):
                message = "internal error in a hypermnesia service; see its log"
            else:
                message = exc.details() or code.name
            raise BackendError(code, message) from exc

    async def live_settings(self) -> dict[str, str]:
        """The settings retrieval and curation run with ("HM_NAME" -> value), asked of each: they may
        run elsewhere, with another environment than the gateway's."""
        answers = await asyncio.gather(
            self.call(self.retrieval.GetLiveSettings, common_pb2.LiveSettingsRequest()),
            self.call(self.curation.GetLiveSettings, common_pb2.LiveSettingsRequest()),
        )
        return {name: value for answer in answers for name, value in answer.values.items()}

    async def close(self) -> None:
        for channel in self._channels:
            await channel.close()
