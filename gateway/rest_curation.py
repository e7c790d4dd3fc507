"""REST routes of the curation area (included by gateway.app.create_app)."""

from __future__ import annotations

from fastapi import APIRouter


def build_router() -> APIRouter:
    router = APIRouter()
    return router
