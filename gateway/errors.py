"""The one place where service errors become HTTP statuses and MCP tool errors, and where a request
that fails its model's validation becomes a sentence a user can act on (REST and MCP alike)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import grpc

from hypermnesia.errors import HypermnesiaError, Unprocessable

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

# pydantic's type of the error for a field the operation does not take.
UNKNOWN_FIELD = "extra_forbidden"
_SHOULD = "Input should be "


def http_status(exc: HypermnesiaError) -> int:
    if isinstance(exc, Unprocessable):
        return 422  # well formed, but not storable as it is (a secret under HM_REDACT=refuse)
    return HTTP_STATUS.get(exc.code, 500)


def error_body(exc: HypermnesiaError) -> dict:
    return {"error": {"code": exc.code.name, "message": exc.message}}


def _problem(err: Any, fields_listed_in: str) -> str:
    where = ".".join(str(p) for p in err.get("loc", ()) if p != "body") or "the request"
    kind, message = err.get("type"), str(err.get("msg", ""))
    if kind == UNKNOWN_FIELD:
        return f"{where} is not a field of this operation; remove it ({fields_listed_in} lists the fields)"
    if kind == "missing":
        return f"{where} is required"
    if message.startswith(_SHOULD):
        return f"{where} must be {message.removeprefix(_SHOULD)}"
    # The gateway's own checks (gateway.fields) read on from the field's name.
    return f"{where} {message}" if message[:1].islower() else f"{where}: {message}"


def invalid_request(errors: Iterable[Any], fields_listed_in: str) -> str:
    """One sentence for everything wrong with a request's shape (pydantic's `errors()`), naming
    each field and what to send instead; no input values, types or links to pydantic's pages.
    `fields_listed_in` is where the caller finds the fields (/docs, tools/list)."""
    return "invalid request: " + "; ".join(_problem(err, fields_listed_in) for err in errors)


def names_an_unknown_field(errors: Iterable[Any]) -> bool:
    return any(err.get("type") == UNKNOWN_FIELD for err in errors)
