"""Row-level security, the per-request half (the policies are migration 0025): whose grants the
database connections of a request act under.

Defence in depth under the services' own scope checks. Every RPC that carries a caller runs with
the caller's grants (`hypermnesia.grpc_server.guarded` sets them); each connection acquired while
they are set acts as the role `hm_service` with them in `hm.read_grants` / `hm.write_grants`
(hypermnesia/pool.py), and the policies show and accept only the rows of scopes they permit. Work
done for no caller (admin RPCs, token resolution, background jobs, start-up, tooling, in-process
calls such as the tests') is internal: its connections stay the owner, which the policies do not
bind (and which alone may change the schema). A caller's work that is the service's own (a
consolidation job a caller starts) runs in `internal()`.

The state is a context variable, so a task started inside a request inherits the caller's grants:
long-lived loops are started in `internal()` (asyncio copies the context when a task is created).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

__all__ = [
    "INTERNAL_STATE",
    "SERVICE_ROLE",
    "Access",
    "State",
    "acting_as",
    "current_state",
    "for_caller",
    "for_request",
    "internal",
]

SERVICE_ROLE = "hm_service"


@dataclass(frozen=True)
class Access:
    """Grants (scopes, or prefixes ending in `*`) a connection may read and write under."""

    read: tuple[str, ...]
    write: tuple[str, ...]


def for_caller(grants: Iterable[str]) -> Access:
    grants = tuple(grants)
    return Access(read=grants, write=grants)


def for_request(request: Any) -> Access | None:
    """The access of an RPC: its caller's grants, or internal for a request that carries no caller
    (admin, token resolution, status, live settings: the services' own plumbing). A request whose
    caller field is left empty has no grants, so it reaches no row, as the services' checks say."""
    if "caller" not in request.DESCRIPTOR.fields_by_name:
        return None
    return for_caller(request.caller.grants)


# What a connection acting under an access has set: (role, read grants, write grants) as
# set_config takes them (hypermnesia/pool.py applies it on acquire). 'none' is the session user
# (the owner); a fresh connection starts there with nothing set.
State = tuple[str, str, str]
INTERNAL_STATE: State = ("none", "", "")


def _array_literal(grants: tuple[str, ...]) -> str:
    """A text[] literal: scopes are free-form printable text (commas and quotes included)."""
    quoted = ('"' + g.replace("\\", "\\\\").replace('"', '\\"') + '"' for g in grants)
    return "{" + ",".join(quoted) + "}"


def _state_of(access: Access | None) -> State:
    if access is None:
        return INTERNAL_STATE
    return (SERVICE_ROLE, _array_literal(access.read), _array_literal(access.write))


# The state itself, built once per request (not on each of its acquires, which only compare it).
_current: ContextVar[State] = ContextVar("hm_row_state", default=INTERNAL_STATE)


@contextmanager
def acting_as(access: Access | None) -> Iterator[None]:
    token = _current.set(_state_of(access))
    try:
        yield
    finally:
        _current.reset(token)


def internal() -> AbstractContextManager[None]:
    """Internal work within the block (and in the tasks started in it): no caller's grants."""
    return acting_as(None)


def current_state() -> State:
    return _current.get()
