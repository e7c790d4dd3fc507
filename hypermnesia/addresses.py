"""Where a client on this machine reaches a service: the default ports, and host:port as dialled.

No third-party imports: the Claude Code hooks use it on every prompt within their time budget.
"""

from __future__ import annotations

__all__ = [
    "DEFAULT_CURATION_PORT",
    "DEFAULT_EMBEDDER_PORT",
    "DEFAULT_GATEWAY_PORT",
    "DEFAULT_RETRIEVAL_PORT",
    "DEFAULT_SERVICE_PORTS",
    "dial_host",
    "gateway_url",
    "local_address",
]

DEFAULT_EMBEDDER_PORT = 50051
DEFAULT_RETRIEVAL_PORT = 50052
DEFAULT_CURATION_PORT = 50053
DEFAULT_GATEWAY_PORT = 8765

# The gRPC services another process dials, by the name their HM_<NAME>_PORT / _ADDRESS use.
DEFAULT_SERVICE_PORTS = {
    "embedder": DEFAULT_EMBEDDER_PORT,
    "retrieval": DEFAULT_RETRIEVAL_PORT,
    "curation": DEFAULT_CURATION_PORT,
}


def dial_host(host: str) -> str:
    """The host to dial for a server bound to `host`: one bound to every interface is reached on
    loopback; an IPv6 literal gets its brackets."""
    host = host.strip()
    if host in ("", "0.0.0.0", "::", "[::]"):
        return "127.0.0.1"
    if ":" in host and not host.startswith("["):
        return f"[{host}]"
    return host


def local_address(host: str, port: int | str) -> str:
    """`host:port` of a service bound to HM_HOST=host on that port, as a client dials it."""
    return f"{dial_host(host)}:{str(port).strip()}"


def gateway_url(host: str, port: int | str) -> str:
    return f"http://{local_address(host, port)}"
