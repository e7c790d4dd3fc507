"""The client side of the Embedder contract, used by retrieval and curation.

One address or several (`a:1,b:2`, or a DNS name with several records): calls are spread round
robin across the replicas with deadlines and keepalive (hypermnesia.grpc_client)."""

from __future__ import annotations

import asyncio
import logging

import grpc
import numpy as np

from hypermnesia.errors import FailedPrecondition, InvalidArgument, StartupError, Unavailable
from hypermnesia.grpc_client import open_channel
from hypermnesia.v1 import embedder_pb2, embedder_pb2_grpc

log = logging.getLogger(__name__)

QUERY = embedder_pb2.INPUT_TYPE_QUERY
DOCUMENT = embedder_pb2.INPUT_TYPE_DOCUMENT

# A full queue clears in tens of milliseconds at a few hundred texts per second.
_BUSY_BACKOFF_S = 0.02
_BUSY_BACKOFF_MAX_S = 0.5


class EmbedderClient:
    def __init__(self, address: str) -> None:
        self.address = address
        self._channel = open_channel(address)
        self._stub = embedder_pb2_grpc.EmbedderStub(self._channel)
        self.model_id = ""
        self.dimension = 0

    async def wait_for_info(self, timeout_s: float) -> embedder_pb2.InfoResponse:
        """Ask the embedder which model it serves, retrying until it answers or timeout_s passes."""
        deadline = asyncio.get_running_loop().time() + timeout_s
        while True:
            try:
                info = await self._stub.Info(embedder_pb2.InfoRequest(), timeout=5, wait_for_ready=True)
            except grpc.aio.AioRpcError as exc:
                if asyncio.get_running_loop().time() >= deadline:
                    raise StartupError(
                        f"the embedder at {self.address} did not answer within {timeout_s:.0f} s "
                        f"({exc.code().name}); start it (`hypermnesia serve embedder`) or fix "
                        "HM_EMBEDDER_ADDRESS"
                    ) from exc
                await asyncio.sleep(0.5)
                continue
            self.model_id, self.dimension = info.model_id, info.dimension
            return info

    async def embed(
        self, texts: list[str], input_type: embedder_pb2.InputType, timeout_s: float
    ) -> np.ndarray:
        """One float32 row per text. Raises Unavailable when the embedder cannot answer in time.
        A busy embedder (RESOURCE_EXHAUSTED) is retried with backoff while the deadline allows,
        which also moves the call on to the next replica."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        backoff = _BUSY_BACKOFF_S
        while True:
            try:
                response = await self._stub.Embed(
                    embedder_pb2.EmbedRequest(texts=texts, input_type=input_type),
                    timeout=max(deadline - loop.time(), 0.001),
                    # A query waits (within its short deadline) for a reconnecting embedder; a write
                    # fails fast instead, so a stopped embedder is a prompt "unavailable", not a hang.
                    wait_for_ready=input_type == QUERY,
                )
                break
            except grpc.aio.AioRpcError as exc:
                code = exc.code()
                if code == grpc.StatusCode.INVALID_ARGUMENT:
                    raise InvalidArgument(exc.details() or "the embedder refused the input") from exc
                if code == grpc.StatusCode.RESOURCE_EXHAUSTED and loop.time() + backoff < deadline:
                    await asyncio.sleep(backoff)
                    backoff = min(backoff * 2, _BUSY_BACKOFF_MAX_S)
                    continue
                raise Unavailable(f"the embedder is unavailable ({code.name}); try again shortly") from exc
        if self.model_id and response.model_id != self.model_id:
            raise Unavailable(
                f"the embedder now serves {response.model_id}, not the pinned {self.model_id}; "
                "restart it with the pinned model or run `hypermnesia reindex`"
            )
        vectors = np.frombuffer(response.vectors, dtype="<f4")
        return vectors.reshape(len(texts), response.dimension) if texts else vectors.reshape(0, 0)

    async def count_tokens(self, texts: list[str], timeout_s: float) -> list[int]:
        try:
            response = await self._stub.CountTokens(
                embedder_pb2.CountTokensRequest(texts=texts), timeout=timeout_s
            )
        except grpc.aio.AioRpcError as exc:
            raise Unavailable(f"the embedder is unavailable ({exc.code().name})") from exc
        return list(response.counts)

    async def rerank(self, query: str, documents: list[str], timeout_s: float) -> np.ndarray:
        """Cross-encoder scores in 0..1, one per document in order. Raises FailedPrecondition when
        the embedder has no reranker (HM_RERANK_MODEL_DIR unset), Unavailable when it cannot answer."""
        try:
            response = await self._stub.Rerank(
                embedder_pb2.RerankRequest(query=query, documents=documents), timeout=timeout_s
            )
        except grpc.aio.AioRpcError as exc:
            if exc.code() == grpc.StatusCode.FAILED_PRECONDITION:
                raise FailedPrecondition(exc.details() or "reranking is off") from exc
            if exc.code() == grpc.StatusCode.INVALID_ARGUMENT:
                raise InvalidArgument(exc.details() or "the embedder refused the input") from exc
            raise Unavailable(f"the embedder is unavailable ({exc.code().name})") from exc
        return np.asarray(response.scores, dtype=np.float32)

    async def close(self) -> None:
        await self._channel.close()
