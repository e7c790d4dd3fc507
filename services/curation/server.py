"""Builds and runs the curation gRPC server."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import grpc

from hypermnesia import row_security, scope_graphs
from hypermnesia.bootstrap import connect_embedder, open_store
from hypermnesia.grpc_server import create_server, mark_serving, run_until_signalled, start_metrics_server
from hypermnesia.settings import CurationSettings
from hypermnesia.v1 import curation_pb2, curation_pb2_grpc
from services.curation import (
    checkpoints,
    deliveries,
    deliveries_servicer,
    fusion_refits,
    intelligence_servicer,
    provenance_servicer,
    structure_load,
    tokens,
    verify_schedule,
)
from services.curation.ingest import Ingester
from services.curation.lifecycle import Forgetter
from services.curation.projection import Projector
from services.curation.rebuild import Rebuilder
from services.curation.records import RecordImporter
from services.curation.servicer import Curation, CurationServicer
from services.curation.writer import MemoryWriter

log = logging.getLogger(__name__)

SERVICE_NAME = curation_pb2.DESCRIPTOR.services_by_name["Curation"].full_name


@asynccontextmanager
async def running(settings: CurationSettings) -> AsyncIterator[tuple[grpc.aio.Server, int, MemoryWriter]]:
    """A started curation server (port 0 picks a free one); stopped and closed on exit."""
    store = await open_store(settings)
    embedder = await connect_embedder(settings, store.pool)
    writer = MemoryWriter(
        store.pool,
        embedder,
        embed_timeout_s=settings.embed_write_timeout_ms / 1000,
        dedupe_threshold=settings.dedupe_threshold,
        dedupe_content_threshold=settings.dedupe_content_threshold,
        redact=settings.redact,
    )
    curation = Curation(
        writer=writer,
        importer=RecordImporter(
            store.pool,
            writer.embeddings,
            task_extraction=settings.task_extraction,
            redact=settings.redact,
            store_assistant_turns=settings.store_assistant_turns,
        ),
        forgetter=Forgetter(
            store.pool,
            after_days=settings.forget_after_days,
            importance_floor=settings.forget_importance_floor,
        ),
    )
    _attach_optional(curation, store.pool, writer)
    intelligence = intelligence_servicer.Intelligence.build(store.pool, writer.embeddings, settings)
    intelligence.consolidator.daily_upkeep.append(
        lambda: deliveries.enforce_retention(store.pool, settings.delivery_retention_days)
    )
    server, port, health = create_server(
        [
            (curation_pb2_grpc.add_CurationServicer_to_server, CurationServicer(curation), SERVICE_NAME),
            structure_load.registration(store.pool),
            tokens.registration(store.pool),
            provenance_servicer.registration(store.pool),
            intelligence_servicer.registration(intelligence),
            deliveries_servicer.registration(store.pool),
        ],
        settings.host,
        settings.curation_port,
    )
    await server.start()
    await mark_serving(
        health,
        [
            SERVICE_NAME,
            structure_load.SERVICE_NAME,
            tokens.SERVICE_NAME,
            provenance_servicer.SERVICE_NAME,
            intelligence_servicer.SERVICE_NAME,
            deliveries_servicer.SERVICE_NAME,
        ],
    )
    # The service's own work (for no caller): not under any caller's grants.
    with row_security.internal():
        background = _start_background(settings, store.pool, curation, intelligence)
    log.info("curation serving on %s:%d", settings.host, port)
    try:
        yield server, port, writer
    finally:
        for task in background:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await server.stop(2)
        await intelligence.close()
        await embedder.close()
        await store.close()


def _start_background(
    settings: CurationSettings,
    pool: Any,
    curation: Curation,
    intelligence: intelligence_servicer.Intelligence,
) -> list[asyncio.Task[Any]]:
    background: list[asyncio.Task[Any]] = []
    if settings.checkpoint_dir is not None and settings.checkpoint_hours > 0:
        background.append(
            asyncio.create_task(
                checkpoints.run_schedule(
                    pool,
                    settings.checkpoint_dir,
                    settings.checkpoint_hours,
                    settings.checkpoint_key,
                    settings.data_dir,
                ),
                name="checkpoints",
            )
        )
    if settings.verify_hours > 0:
        background.append(
            asyncio.create_task(verify_schedule.run_schedule(pool, settings.verify_hours), name="verify")
        )
    if settings.forget_sweep_hours > 0:
        background.append(asyncio.create_task(curation.forgetter.run_sweeps(settings.forget_sweep_hours)))
    if settings.fusion_refit_hours > 0:
        background.append(
            asyncio.create_task(
                fusion_refits.run_schedule(pool, settings.fusion_refit_hours), name="fusion-refits"
            )
        )
    if settings.scope_graph_rows > 0:
        background.append(asyncio.create_task(scope_graphs.maintain(pool, settings.scope_graph_rows)))
    if settings.viz_refresh_s > 0:
        projector = Projector(
            pool, refit_growth=settings.viz_refit_growth, refit_hours=settings.viz_refit_hours
        )
        background.append(asyncio.create_task(projector.run(settings.viz_refresh_s)))
    for job, hours in (
        ("daily", settings.consolidation_daily_hours),
        ("weekly", settings.consolidation_weekly_hours),
        ("monthly", settings.consolidation_monthly_hours),
    ):
        if hours > 0:
            background.append(asyncio.create_task(intelligence.consolidator.run_schedule(job, hours)))
    return background


def _attach_optional(curation: Curation, pool: Any, writer: MemoryWriter) -> None:
    """Rebuild and ingestion share the writer's embedder."""

    async def count_tokens(texts: list[str]) -> list[int]:
        return await writer.embedder.count_tokens(texts, writer.embed_timeout_s)

    curation.rebuilder = Rebuilder(pool, writer.embeddings.many)
    curation.ingester = Ingester(pool, writer.embeddings.many, count_tokens, writer.redact)


async def serve(settings: CurationSettings) -> None:
    async with running(settings) as (server, _port, _writer):
        start_metrics_server(settings.host, settings.curation_metrics_port)
        await run_until_signalled(server)
