"""The Deliveries gRPC service (protos/hypermnesia/v1/deliveries.proto): the gateway's batches in,
services/curation/deliveries.py's listing out behind the caller's grants, and the chain's verify."""

from __future__ import annotations

import asyncpg
import grpc

from hypermnesia.errors import InvalidArgument
from hypermnesia.grpc_server import Registration
from hypermnesia.scopes import permits
from hypermnesia.times import field_time, from_timestamp, timestamp
from hypermnesia.v1 import deliveries_pb2, deliveries_pb2_grpc
from services.curation import deliveries

SERVICE_NAME = deliveries_pb2.DESCRIPTOR.services_by_name["Deliveries"].full_name
MAX_BATCH = 10_000
EVERY_SCOPE = "*"


def _entry(d: deliveries_pb2.Delivery) -> deliveries.Entry:
    if not d.scopes:
        raise InvalidArgument("a delivery names the scopes it read (who may see it); none was given")
    return deliveries.Entry(
        principal=d.principal,
        session=d.session,
        thread=d.thread,
        operation=d.operation,
        transport=d.transport,
        delivered_at=from_timestamp(d.delivered_at),
        request=d.request_json,
        scopes=list(d.scopes),
        items=[{"id": i.id, "score": i.score if i.has_score else None} for i in d.items],
        text_sha256=d.text_sha256,
        text_bytes=d.text_bytes,
    )


def _view(listed: deliveries.Listed) -> deliveries_pb2.DeliveryView:
    row = listed.row
    return deliveries_pb2.DeliveryView(
        seq=row["seq"],
        prev_hash=row["prev_hash"],
        entry_hash=row["entry_hash"],
        delivery=deliveries_pb2.Delivery(
            principal=row["principal"],
            session=row["session"],
            thread=row["thread"],
            operation=row["operation"],
            transport=row["transport"],
            delivered_at=timestamp(row["delivered_at"]),
            request_json=row["request"],
            scopes=list(row["scopes"]),
            text_sha256=row["text_sha256"],
            text_bytes=row["text_bytes"],
        ),
        memories=[
            deliveries_pb2.DeliveredMemory(
                id=m.id,
                has_score=m.score is not None,
                score=m.score or 0.0,
                state=m.state,
                hash=m.hash,
                scope=m.scope,
                description=m.description,
                content=m.content,
                superseded_by=m.superseded_by,
            )
            for m in listed.memories
        ],
    )


class DeliveriesServicer(deliveries_pb2_grpc.DeliveriesServicer):
    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool

    async def RecordDeliveries(
        self, request: deliveries_pb2.RecordDeliveriesRequest, context: grpc.aio.ServicerContext
    ) -> deliveries_pb2.RecordDeliveriesResponse:
        if len(request.deliveries) > MAX_BATCH:
            raise InvalidArgument(f"at most {MAX_BATCH:,} deliveries a batch; send the rest in another")
        entries = [_entry(d) for d in request.deliveries]
        return deliveries_pb2.RecordDeliveriesResponse(recorded=await deliveries.append(self.pool, entries))

    async def ListDeliveries(
        self, request: deliveries_pb2.ListDeliveriesRequest, context: grpc.aio.ServicerContext
    ) -> deliveries_pb2.DeliveryList:
        if request.limit < 0 or request.limit > deliveries.MAX_LIST:
            raise InvalidArgument(f"limit must be between 1 and {deliveries.MAX_LIST:,} (0: the default)")
        grants = list(request.caller.grants)
        principal = request.principal
        if EVERY_SCOPE not in grants:
            # What another principal was given (its requests, its sessions) is its own: only a
            # caller granted every scope (the operator, `hypermnesia replay`) reads everyone's.
            if principal and principal != request.caller.principal:
                return deliveries_pb2.DeliveryList()
            principal = request.caller.principal
        listed, truncated = await deliveries.listing(
            self.pool, request.session, field_time(request, "since"), principal, request.limit
        )
        # Row security shows only the permitted rows already; the service checks as well.
        shown = [d for d in listed if all(permits(grants, s) for s in d.row["scopes"])]
        return deliveries_pb2.DeliveryList(deliveries=[_view(d) for d in shown], truncated=truncated)

    async def VerifyDeliveries(
        self, request: deliveries_pb2.VerifyDeliveriesRequest, context: grpc.aio.ServicerContext
    ) -> deliveries_pb2.VerifyDeliveriesResponse:
        result = await deliveries.verify(self.pool)
        return deliveries_pb2.VerifyDeliveriesResponse(
            checked=result.checked,
            first_broken_seq=result.first_broken_seq or 0,
            reason=result.reason,
            floor_seq=result.floor_seq,
            floor_hash=result.floor_hash,
        )


def registration(pool: asyncpg.Pool) -> Registration:
    """The entry for `create_server([...])` in services/curation/server.py."""
    return (deliveries_pb2_grpc.add_DeliveriesServicer_to_server, DeliveriesServicer(pool), SERVICE_NAME)
