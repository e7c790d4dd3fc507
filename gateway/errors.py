"""The one place where service errors become HTTP statuses and MCP tool errors."""

from __future__ import annotations

import grpc

from hypermnesia.errors import HypermnesiaError

HTTP_STATUS = {
    grpc.StatusCode.INVALID_ARGUMENT: 400,
    grpc.StatusCode.OUT_OF_RANGE: 400,
    grpc.StatusCode.UNAUTHENTICATED: 401,
    grpc.StatusCode.PERMISSION_DENIED: 403,
    grpc.StatusCode.NOT_FOUND: 404,
    grpc.StatusCode.ALREADY_EXISTS: 409,
    grpc.StatusCode.FAILED_PRECONDITION: 409,
    grpc.StatusCode.ABORTED: 409,
    grpc.StatusCode.RESOURCE_EXHAUSTED: 429,
    grpc.StatusCode.UNIMPLEMENTED: 501,
    grpc.StatusCode.UNAVAILABLE: 503,
    grpc.StatusCode.DEADLINE_EXCEEDED: 504,
}


def http_status(exc: HypermnesiaError) -> int:
    return HTTP_STATUS.get(exc.code, 500)


def error_body(exc: HypermnesiaError) -> dict:
    return {"error": {"code": exc.code.name, "message": exc.message}}
