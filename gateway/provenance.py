"""Provenance (`why`): where a memory came from — the raw-log records with their seqs and hashes and
whether each verifies, its supersede lineage, its evidence and conclusions, who wrote and who
approved what. Served by curation's Provenance service; scope-checked like every read."""

from __future__ import annotations

from typing import Any

from google.protobuf.json_format import MessageToDict

from gateway.auth import Session
from gateway.backends import Backends
from gateway.fields import Request, field
from gateway.shaping import caller
from hypermnesia.v1 import provenance_pb2

__all__ = ["MemoryProvenance", "provenance"]


class MemoryProvenance(Request):
    memory_id: str = field("The memory's id (a UUID).")


async def provenance(backends: Backends, session: Session, request: MemoryProvenance) -> dict[str, Any]:
    """Why this memory exists: the raw-log records it came from (seq, hash, whether each hash
    recomputes), its supersede lineage, its premises and conclusions, and who wrote and who approved
    it. Related memories outside your scopes are left out."""
    message = provenance_pb2.ProvenanceRequest(caller=caller(session), id=request.memory_id)
    answer = await backends.call(backends.provenance.Explain, message)
    return MessageToDict(answer, preserving_proto_field_name=True, always_print_fields_with_no_presence=True)
