"""A service's own checks for the gateway's /health (the GetStatus RPC of retrieval and curation):
each dependency "ok" or, in a few words, what is wrong with it. Every check has a short deadline,
so a dependency that hangs makes /health say so instead of hanging /health."""

from __future__ import annotations

import asyncio
import logging

import asyncpg

from hypermnesia import __version__
from hypermnesia.embedder_client import EmbedderClient
from hypermnesia.v1 import common_pb2

__all__ = ["CHECK_TIMEOUT_S", "OK", "database", "embedder", "service_status"]

log = logging.getLogger(__name__)

OK = "ok"
# Below the gateway's /health deadline (2 s), so a slow dependency is named rather than the
# service that asked it being reported as unreachable.
CHECK_TIMEOUT_S = 1.0


async def database(pool: asyncpg.Pool) -> str:
    """One round trip to Postgres."""
    try:
        await asyncio.wait_for(pool.fetchval("SELECT 1"), CHECK_TIMEOUT_S)
    except TimeoutError:
        return f"no answer within {CHECK_TIMEOUT_S:g} s"
    # Whatever stops the round trip (refused connection, dropped database, broken pool) is the
    # answer to report, not an error of the status call itself.
    except Exception as exc:
        log.warning("status: the database check failed: %s", exc)
        return f"unreachable ({type(exc).__name__}); see this service's log"
    return OK


async def embedder(client: EmbedderClient) -> str:
    """The embedder's Info, which must still name the model this service started with."""
    started_with = (client.model_id, client.dimension)
    try:
        info = await asyncio.wait_for(client.wait_for_info(CHECK_TIMEOUT_S), CHECK_TIMEOUT_S)
    except TimeoutError:
        return f"unreachable at {client.address}: no answer within {CHECK_TIMEOUT_S:g} s"
    except Exception as exc:  # wait_for_info's own StartupError, or a broken channel
        log.warning("status: the embedder check failed: %s", exc)
        return f"unreachable at {client.address} ({type(exc).__name__})"
    if (info.model_id, info.dimension) != started_with:
        client.model_id, client.dimension = started_with
        return (
            f"serves {info.model_id} ({info.dimension} dimensions), but this service started with "
            f"{started_with[0]} ({started_with[1]}); restart the services after a model change"
        )
    return OK


async def service_status(pool: asyncpg.Pool, client: EmbedderClient) -> common_pb2.ServiceStatus:
    """The answer of a GetStatus RPC: the database and the embedder, checked in parallel."""
    db, emb = await asyncio.gather(database(pool), embedder(client))
    return common_pb2.ServiceStatus(checks={"database": db, "embedder": emb}, version=__version__)
