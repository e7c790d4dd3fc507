"""gRPC server plumbing shared by the services: one error interceptor, RPC metrics, the standard
health service, reflection, a /metrics HTTP endpoint, and graceful shutdown."""

from __future__ import annotations

import asyncio
import logging
import signal
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection
from prometheus_client import Counter, Histogram, start_http_server

from hypermnesia.errors import HypermnesiaError

log = logging.getLogger(__name__)

RPC_SECONDS = Histogram(
    "hm_rpc_seconds",
    "Server-side duration of an RPC",
    ["method"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)
RPC_ERRORS = Counter("hm_rpc_errors_total", "RPCs that ended with a non-OK status", ["method", "code"])


class ErrorInterceptor(grpc.aio.ServerInterceptor):
    """Turns HypermnesiaError into its status; any other exception into INTERNAL without details
    (those go to the log, never to the caller). Also times every unary RPC."""

    def __init__(self) -> None:
        # One wrapped handler per method: building it on every call costs measurable CPU.
        self._wrapped: dict[str, grpc.RpcMethodHandler] = {}

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        cached = self._wrapped.get(handler_call_details.method)
        if cached is not None:
            return cached
        handler = await continuation(handler_call_details)
        if handler is None or handler.unary_unary is None:
            return handler
        wrapped_handler = self._wrap(handler, handler_call_details.method)
        self._wrapped[handler_call_details.method] = wrapped_handler
        return wrapped_handler

    @staticmethod
    def _wrap(handler: grpc.RpcMethodHandler, full_method: str) -> grpc.RpcMethodHandler:
        method = full_method.rsplit("/", 1)[-1]
        inner = handler.unary_unary
        seconds = RPC_SECONDS.labels(method)

        async def wrapped(request: Any, context: grpc.aio.ServicerContext) -> Any:
            started = time.perf_counter()
            try:
                return await inner(request, context)
            except HypermnesiaError as exc:
                RPC_ERRORS.labels(method, exc.code.name).inc()
                await context.abort(exc.code, exc.message, trailing_metadata=SERVICE_ERROR_MARK)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if isinstance(exc, grpc.aio.AbortError):
                    raise
                RPC_ERRORS.labels(method, "INTERNAL").inc()
                log.exception("unhandled error in %s", method)
                await context.abort(grpc.StatusCode.INTERNAL, "internal error; see the service log")
            finally:
                seconds.observe(time.perf_counter() - started)

        return grpc.unary_unary_rpc_method_handler(
            wrapped,
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )


# Marks a status a service chose (its message is for the caller), as opposed to one made by the
# transport (refused connection, deadline), whose details are not.
SERVICE_ERROR_MARK = (("hm-error", "service"),)

Registration = tuple[Callable[[Any, grpc.aio.Server], None], Any, str]


def create_server(
    registrations: Iterable[Registration], host: str, port: int, *, max_message_mb: int = 64
) -> tuple[grpc.aio.Server, int, health.aio.HealthServicer]:
    """A grpc.aio server with the given servicers, health and reflection; returns the bound port
    (pass port 0 to let the OS choose). Services start NOT_SERVING; call `mark_serving`."""
    options = [
        ("grpc.max_receive_message_length", max_message_mb * 1024 * 1024),
        ("grpc.max_send_message_length", max_message_mb * 1024 * 1024),
        ("grpc.so_reuseport", 0),
        # Accept the clients' keepalive pings (hypermnesia.grpc_client pings every 30 s); the
        # defaults answer pings more frequent than every 5 minutes with GOAWAY, failing calls.
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.http2.min_recv_ping_interval_without_data_ms", 10_000),
        ("grpc.http2.max_ping_strikes", 0),
    ]
    server = grpc.aio.server(interceptors=[ErrorInterceptor()], options=options)
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    names = [health_pb2.DESCRIPTOR.services_by_name["Health"].full_name, reflection.SERVICE_NAME]
    for add, servicer, full_name in registrations:
        add(servicer, server)
        names.append(full_name)
    reflection.enable_server_reflection(names, server)
    bound = server.add_insecure_port(f"{host}:{port}")
    if bound == 0:
        raise OSError(f"could not bind {host}:{port}; is the port taken?")
    return server, bound, health_servicer


async def mark_serving(health_servicer: health.aio.HealthServicer, names: Iterable[str]) -> None:
    for name in ("", *names):
        await health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)


def start_metrics_server(host: str, port: int) -> int:
    """Serve the process's Prometheus registry at http://host:port/metrics; returns the port."""
    server, _thread = start_http_server(port, addr=host)
    return int(server.server_port)


async def run_until_signalled(server: grpc.aio.Server, grace_s: float = 5.0) -> None:
    """Wait until SIGTERM/SIGINT, then stop accepting calls and let in-flight ones finish."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    waiter = asyncio.create_task(server.wait_for_termination())
    stopper = asyncio.create_task(stop.wait())
    await asyncio.wait({waiter, stopper}, return_when=asyncio.FIRST_COMPLETED)
    log.info("shutting down")
    await server.stop(grace_s)
    waiter.cancel()
    stopper.cancel()
