"""HM_DATA_DIR/stack.json: which `hypermnesia up` runs on this data dir, and where its services are.

`up` writes it once its ports are checked and removes it when it stops. A second `up` on the same
data dir reads it to name the running stack (pid and addresses) instead of failing on a taken port,
and the commands that call the stack (`map load`, `consolidate`, `proposals`, `ask`, `mcp`,
`connect`, `hook install`) read it when the environment does not say where a service is.

Where a command looks for a service, first to last: HM_<SERVICE>_ADDRESS (HM_GATEWAY_URL), then
HM_<SERVICE>_PORT with HM_HOST, then this record of a live `up` on HM_DATA_DIR, then the default
ports. A record whose process is gone (or is another process that took its pid) is ignored.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TypeVar

import psutil

from hypermnesia.addresses import DEFAULT_GATEWAY_PORT, DEFAULT_SERVICE_PORTS, gateway_url
from hypermnesia.settings import CommonSettings

__all__ = [
    "RECORD_FILE",
    "StackRecord",
    "read_live",
    "remove",
    "resolve_addresses",
    "resolve_gateway_url",
    "write",
]

RECORD_FILE = "stack.json"
S = TypeVar("S", bound=CommonSettings)


@dataclass(frozen=True)
class StackRecord:
    pid: int
    # The process's start time (psutil), so a pid taken over by another process is not mistaken for it.
    started: float
    gateway_url: str
    # embedder, retrieval, curation -> host:port as dialled from this machine.
    addresses: dict[str, str]

    def describe(self) -> str:
        services = ", ".join(f"{name} {address}" for name, address in self.addresses.items())
        return f"pid {self.pid}; gateway {self.gateway_url}, {services}"


def record_path(data_dir: Path) -> Path:
    return data_dir / RECORD_FILE


def write(data_dir: Path, gateway: str, addresses: dict[str, str]) -> StackRecord:
    """Record this process as the stack of `data_dir`."""
    record = StackRecord(os.getpid(), psutil.Process().create_time(), gateway, dict(addresses))
    path = record_path(data_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_text(json.dumps(asdict(record), indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    return record


def remove(data_dir: Path) -> None:
    """Remove the record if it is this process's (a later `up` may have replaced it)."""
    path = record_path(data_dir)
    with contextlib.suppress(OSError, ValueError, TypeError, KeyError):
        if json.loads(path.read_text(encoding="utf-8"))["pid"] == os.getpid():
            path.unlink()


def read_live(data_dir: Path) -> StackRecord | None:
    """The record of the `up` running on `data_dir`, or None (no record, a broken one, or its
    process is gone)."""
    try:
        data = json.loads(record_path(data_dir).read_text(encoding="utf-8"))
        record = StackRecord(
            int(data["pid"]),
            float(data["started"]),
            str(data["gateway_url"]),
            {str(k): str(v) for k, v in dict(data["addresses"]).items()},
        )
    except (OSError, ValueError, TypeError, KeyError):
        return None
    try:
        alive = abs(psutil.Process(record.pid).create_time() - record.started) < 1.0
    except psutil.Error:
        return None
    return record if alive else None


def resolve_addresses(settings: S, env: Mapping[str, str] | None = None) -> S:
    """`settings` with each service address the environment left to its default (neither
    HM_<SERVICE>_ADDRESS nor HM_<SERVICE>_PORT set) taken from the live `up` on HM_DATA_DIR."""
    env = os.environ if env is None else env
    record = None
    update = {}
    for service in DEFAULT_SERVICE_PORTS:
        field = f"{service}_address"
        named = (f"HM_{service.upper()}_ADDRESS", f"HM_{service.upper()}_PORT")
        if field not in type(settings).model_fields or any(env.get(name, "").strip() for name in named):
            continue
        record = record or read_live(settings.data_dir)
        if record is not None and service in record.addresses:
            update[field] = record.addresses[service]
    return settings.model_copy(update=update) if update else settings


def unreachable(service: str, address: str) -> str:
    """What a command says when `service` does not answer at `address`."""
    upper = service.upper()
    return (
        f"cannot reach {service} at {address}: is `hypermnesia up` running with the same HM_* settings "
        f"(HM_{upper}_PORT, HM_HOST, HM_DATA_DIR)? HM_{upper}_ADDRESS points a command elsewhere"
    )


def resolve_gateway_url(env: Mapping[str, str], data_dir: Path) -> str:
    """The gateway's base URL for a command run with `env`: HM_GATEWAY_URL, else HM_GATEWAY_PORT
    (with HM_HOST), else the live `up` on `data_dir`, else the default port."""
    url = env.get("HM_GATEWAY_URL", "").strip()
    if url:
        return url.rstrip("/")
    host, port = env.get("HM_HOST", "").strip(), env.get("HM_GATEWAY_PORT", "").strip()
    if port:
        return gateway_url(host, port)
    record = read_live(data_dir)
    if record is not None:
        return record.gateway_url
    return gateway_url(host, DEFAULT_GATEWAY_PORT)
