"""MCP over stdio (`hypermnesia mcp`): for clients that start their servers as subprocesses.

The process is a gateway without HTTP. It talks to the running retrieval and curation services
over gRPC, like the HTTP gateway. A stdio session has no headers, so the token and the project
come from the command line and the environment and hold for every call. They are checked once at
start, so a wrong token fails before the client's first call instead of on each tool call.
"""

from __future__ import annotations

import logging

from gateway.auth import PROJECT_HEADER, Authenticator
from gateway.backends import Backends
from gateway.deliveries import DeliveryLog
from gateway.mcp_tools import build_mcp
from hypermnesia.errors import HypermnesiaError, StartupError
from hypermnesia.settings import GatewaySettings

log = logging.getLogger(__name__)


def session_headers(token: str, project: str) -> dict[str, str]:
    """The headers an HTTP client would send, for the session of a stdio process."""
    headers = {}
    if token:
        headers["authorization"] = f"Bearer {token}"
    if project:
        headers[PROJECT_HEADER] = project
    return headers


async def serve_stdio(settings: GatewaySettings, *, token: str, project: str) -> None:
    backends = Backends(settings.retrieval_address, settings.curation_address, settings.rpc_timeout_s)
    try:
        # Store tokens (`hypermnesia token create`) are resolved through curation, as over HTTP.
        auth = Authenticator.from_settings(settings, backends.resolve_token)
        headers = session_headers(token, project)
        try:
            session = await auth.session(headers)
        except HypermnesiaError as exc:
            raise StartupError(
                f"{exc.message} (stdio: the token is HM_TOKEN, else HM_DATA_DIR/local-token; retrieval at "
                f"{settings.retrieval_address}, curation at {settings.curation_address}, from HM_*_PORT or the "
                "`hypermnesia up` running on HM_DATA_DIR)"
            ) from exc
        deliveries = DeliveryLog(backends, enabled=settings.delivery_log)
        mcp = build_mcp(backends, auth, settings, stdio_headers=headers, deliveries=deliveries)
        # stdout carries the protocol; everything said to a person goes to stderr.
        log.info(
            "MCP over stdio as %s in %s (services at %s, %s)",
            session.principal.id,
            session.project_scope,
            settings.retrieval_address,
            settings.curation_address,
        )
        try:
            await mcp.run_stdio_async()
        finally:
            await deliveries.close()
    finally:
        await backends.close()
