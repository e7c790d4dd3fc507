"""Embedder-specific errors (the shared hierarchy is hypermnesia.errors)."""

from __future__ import annotations

import grpc

from hypermnesia.errors import HypermnesiaError


class BatchFailed(HypermnesiaError):
    """Inference failed for a batch; every request with a text in it gets this, none is left hanging."""

    code = grpc.StatusCode.INTERNAL
