"""The error hierarchy shared by every service; each class carries its gRPC status code.

Services raise these; `hypermnesia.grpc_server` turns them into `context.abort(...)` in one
place (`guarded`), and the gateway maps gRPC status to HTTP status and MCP tool errors in one place.
Messages are written for the caller: they say what was wrong and what to do instead.
"""

from __future__ import annotations

import grpc


class HypermnesiaError(Exception):
    code: grpc.StatusCode = grpc.StatusCode.INTERNAL
    # Told apart from others of its status across gRPC (trailing metadata `hm-reason`), where the
    # HTTP status differs (Unprocessable).
    reason: str = ""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class InvalidArgument(HypermnesiaError):
    code = grpc.StatusCode.INVALID_ARGUMENT


class Unprocessable(InvalidArgument):
    """A well-formed write the store will not keep as it is (a secret under HM_REDACT=refuse):
    INVALID_ARGUMENT over gRPC, 422 over HTTP."""

    reason = "unprocessable"


class NotFound(HypermnesiaError):
    code = grpc.StatusCode.NOT_FOUND


class PermissionDenied(HypermnesiaError):
    code = grpc.StatusCode.PERMISSION_DENIED


class FailedPrecondition(HypermnesiaError):
    code = grpc.StatusCode.FAILED_PRECONDITION


class AlreadyExists(HypermnesiaError):
    code = grpc.StatusCode.ALREADY_EXISTS


class ResourceExhausted(HypermnesiaError):
    code = grpc.StatusCode.RESOURCE_EXHAUSTED


class Unavailable(HypermnesiaError):
    code = grpc.StatusCode.UNAVAILABLE


class DeadlineExceeded(HypermnesiaError):
    code = grpc.StatusCode.DEADLINE_EXCEEDED


class ServiceError(HypermnesiaError):
    """A status no class above names (INTERNAL, ABORTED, ...), as a service answered it."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code


_BY_STATUS: dict[grpc.StatusCode, type[HypermnesiaError]] = {
    cls.code: cls
    for cls in (
        InvalidArgument,
        NotFound,
        PermissionDenied,
        FailedPrecondition,
        AlreadyExists,
        ResourceExhausted,
        Unavailable,
        DeadlineExceeded,
    )
}


def from_status(code: grpc.StatusCode, message: str, reason: str = "") -> HypermnesiaError:
    """The error a gRPC status (and the service's `hm-reason`, when it gave one) stands for, so
    that a caller of a service catches `NotFound` rather than comparing status codes."""
    if code == Unprocessable.code and reason == Unprocessable.reason:
        return Unprocessable(message)
    error_class = _BY_STATUS.get(code)
    return error_class(message) if error_class is not None else ServiceError(code, message)


class StartupError(Exception):
    """A process cannot start; the message is the one sentence printed to the user."""
