"""A service's gRPC status comes back to the gateway as the error class it stands for."""

from __future__ import annotations

import grpc
import pytest

from gateway.errors import HTTP_STATUS
from hypermnesia import errors


@pytest.mark.parametrize("code", sorted(HTTP_STATUS, key=lambda c: c.name))
def test_each_status_the_gateway_answers_comes_back_as_its_code(code: grpc.StatusCode) -> None:
    error = errors.from_status(code, "what went wrong, and what to do")
    assert error.code == code
    assert error.message == "what went wrong, and what to do"


def test_named_statuses_come_back_as_their_classes() -> None:
    assert isinstance(errors.from_status(grpc.StatusCode.NOT_FOUND, "gone"), errors.NotFound)
    assert isinstance(errors.from_status(grpc.StatusCode.INVALID_ARGUMENT, "bad"), errors.InvalidArgument)
    assert isinstance(errors.from_status(grpc.StatusCode.UNAVAILABLE, "down"), errors.Unavailable)
    other = errors.from_status(grpc.StatusCode.ABORTED, "raced")
    assert type(other) is errors.ServiceError and other.code == grpc.StatusCode.ABORTED
