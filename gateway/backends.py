"""The gateway's gRPC clients to retrieval and curation, with one translation of failures."""

from __future__ import annotations

import asyncio
import copy
from collections import OrderedDict
from typing import Any, TypeVar

import grpc
from google.protobuf.message import Message

from hypermnesia.errors import from_status
from hypermnesia.grpc_client import open_channel
from hypermnesia.grpc_server import REASON_KEY, SERVICE_ERROR_MARK
from hypermnesia.read_after_write import commit_lsn
from hypermnesia.scopes import Principal
from hypermnesia.v1 import (
    common_pb2,
    curation_pb2_grpc,
    deliveries_pb2_grpc,
    intelligence_pb2_grpc,
    provenance_pb2_grpc,
    retrieval_pb2_grpc,
    structure_pb2_grpc,
    tokens_pb2,
    tokens_pb2_grpc,
    viz_pb2_grpc,
)

# A token lookup holds up the request it authenticates: a curation that cannot answer in this
# time is reported as unreachable (503) rather than kept waiting for the full RPC deadline.
TOKEN_LOOKUP_TIMEOUT_S = 3.0
# How long a call waits for a service that is not connected (restarting) before it fails (503).
CONNECT_WAIT_S = 2.0
TOKEN_STORE_UNREACHABLE = (
    "cannot check this bearer token: it is not in HM_AUTH_TOKENS, and the curation service, which "
    "keeps the tokens made by `hypermnesia token create`, is unreachable or too slow; check that the "
    "stack is running (`hypermnesia up`)"
)


# Principals whose last write position is remembered; past it the longest idle is forgotten (its
# writes are long replayed by then: a replica lags milliseconds, deploy/README.md).
MAX_WRITERS = 10_000


class WritePositions:
    """Read-after-write (hypermnesia/read_after_write.py): the WAL position of each principal's
    last write, as curation reported it, sent as `min_lsn` on that principal's next reads so a
    lagging read replica does not hide what it just saved. Per principal (a token's identity),
    since a gateway's sessions do not outlive a request; its other sessions wait the same way.
    Per gateway process: with several gateways, a read that lands on another one does not wait."""

    def __init__(self, max_writers: int = MAX_WRITERS) -> None:
        self.max_writers = max_writers
        self._last: OrderedDict[str, int] = OrderedDict()

    def wrote(self, principal: str, lsn: int) -> None:
        if lsn > self._last.get(principal, 0):
            self._last[principal] = lsn
        if principal in self._last:
            self._last.move_to_end(principal)
        while len(self._last) > self.max_writers:
            self._last.popitem(last=False)

    def min_lsn(self, principal: str) -> int:
        return self._last.get(principal, 0)


def _principal(request: Any) -> str:
    """The caller a request names, if it carries one (a token lookup does not)."""
    fields = request.DESCRIPTOR.fields_by_name
    return request.caller.principal if "caller" in fields and request.HasField("caller") else ""


Request = TypeVar("Request", bound=Message)
Response = TypeVar("Response", bound=Message)
# A stub's method: the typed stubs (hypermnesia/v1/*_pb2_grpc.pyi) tie each one to its request and
# response types, so `call(backends.curation.Save, request)` is checked like a direct call.
Method = grpc.aio.UnaryUnaryMultiCallable[Request, Response]


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
        self.viz = viz_pb2_grpc.VizStub(self._channels[0])  # the 3D map, read by the retrieval process
        self.tokens = tokens_pb2_grpc.TokensStub(self._channels[1])
        self.intelligence = intelligence_pb2_grpc.IntelligenceStub(self._channels[1])
        self.provenance = provenance_pb2_grpc.ProvenanceStub(self._channels[1])
        self.deliveries = deliveries_pb2_grpc.DeliveriesStub(self._channels[1])
        self.timeout_s = timeout_s
        self.writes = WritePositions()
        # Which channel and service each stub method calls, for the readiness check in _rpc.
        self._routes: dict[int, tuple[grpc.aio.Channel, str]] = {}
        for stub, channel, service in (
            (self.retrieval, self._channels[0], "retrieval"),
            (self.curation, self._channels[1], "curation"),
            (self.structure, self._channels[0], "retrieval"),
            (self.structure_admin, self._channels[1], "curation"),
            (self.viz, self._channels[0], "retrieval"),
            (self.tokens, self._channels[1], "curation"),
            (self.intelligence, self._channels[1], "curation"),
            (self.provenance, self._channels[1], "curation"),
            (self.deliveries, self._channels[1], "curation"),
        ):
            for value in vars(stub).values():
                self._routes[id(value)] = (channel, service)

    def within(self, timeout_s: float) -> Backends:
        """These backends with a deadline of at least `timeout_s` for every call (an operation's,
        gateway.operations): the same channels and write positions."""
        longer = copy.copy(self)
        longer.timeout_s = max(self.timeout_s, timeout_s)
        return longer

    async def call(self, method: Method[Request, Response], request: Request) -> Response:
        """Call a service method within this object's deadline (HM_RPC_TIMEOUT_S, or an operation's
        longer one: Operation.timeout_s in gateway/operations.py, applied through `within`); a
        non-OK status raises the error class of hypermnesia/errors.py it stands for (NotFound,
        InvalidArgument, ...) with a caller-facing message."""
        return await self._rpc(method, request, self.timeout_s)

    async def _rpc(
        self, method: Method[Request, Response], request: Request, timeout: float, unreachable: str = ""
    ) -> Response:
        route = self._routes.get(id(method))
        if route is not None:
            channel, service = route
            if channel.get_state(try_to_connect=True) != grpc.ChannelConnectivity.READY:
                # A restart is over in a second or two; a service that is down fails the call
                # now rather than holding it for the whole deadline.
                try:
                    await asyncio.wait_for(channel.channel_ready(), min(timeout, CONNECT_WAIT_S))
                except TimeoutError:
                    raise from_status(
                        grpc.StatusCode.UNAVAILABLE,
                        unreachable
                        or f"the {service} service is unreachable; check that the stack is running "
                        "(`hypermnesia up` restarts it) and retry",
                    ) from None
        principal = _principal(request)
        if principal and "min_lsn" in request.DESCRIPTOR.fields_by_name:
            # Every read request has the field (checked just above); Message's type does not say so.
            request.min_lsn = self.writes.min_lsn(principal)  # type: ignore[attr-defined]
        try:
            # wait_for_ready rides out a service restart (reconnect) within the deadline.
            call = method(request, timeout=timeout, wait_for_ready=True)
            response = await call
            if principal:
                lsn = commit_lsn(await call.trailing_metadata())
                if lsn:
                    self.writes.wrote(principal, lsn)
            return response
        except grpc.aio.AioRpcError as exc:
            code = exc.code()
            reason = ""
            if _from_service(exc):
                message = exc.details() or code.name
                reason = dict(exc.trailing_metadata() or ()).get(REASON_KEY, "")
            elif code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
                message = unreachable or (
                    "a hypermnesia service is unreachable or too slow; check that the stack is running"
                )
                # Either way the caller may retry: an unreachable service is 503, never 504.
                code = grpc.StatusCode.UNAVAILABLE if unreachable else code
            elif code in (grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN):
                message = "internal error in a hypermnesia service; see its log"
            else:
                message = exc.details() or code.name
            raise from_status(code, message, reason) from exc

    async def resolve_token(self, token_sha256: str) -> Principal | None:
        """Who a store token stands for (gateway.auth's resolver); None for an unknown or revoked
        one. Raises Unavailable (503) when curation cannot be asked."""
        answer = await self._rpc(
            self.tokens.Resolve,
            tokens_pb2.ResolveTokenRequest(token_sha256=token_sha256),
            min(self.timeout_s, TOKEN_LOOKUP_TIMEOUT_S),
            unreachable=TOKEN_STORE_UNREACHABLE,
        )
        if not answer.found:
            return None
        return Principal(answer.principal, tuple(answer.scopes))

    async def status(self, deadline_s: float) -> dict[str, common_pb2.ServiceStatus | str]:
        """Each service's own checks and build, asked in parallel within `deadline_s`; for a
        service that does not answer, why not."""

        async def ask(method: Any) -> common_pb2.ServiceStatus | str:
            try:
                answer: common_pb2.ServiceStatus = await method(
                    common_pb2.StatusRequest(), timeout=deadline_s, wait_for_ready=True
                )
            except grpc.aio.AioRpcError as exc:
                if exc.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
                    return f"unreachable: no answer within {deadline_s:g} s"
                return f"failing: {exc.code().name}"
            return answer

        retrieval, curation = await asyncio.gather(
            ask(self.retrieval.GetStatus), ask(self.curation.GetStatus)
        )
        return {"retrieval": retrieval, "curation": curation}

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
