"""Channels to the internal services: several addresses (or one DNS name with several records)
are spread round robin; keepalive so a dead peer is noticed without a request timing out."""

from __future__ import annotations

import json

import grpc

_SERVICE_CONFIG = json.dumps(
    {
        "loadBalancingConfig": [{"round_robin": {}}],
        "methodConfig": [
            {
                "name": [{}],
                "retryPolicy": {
                    "maxAttempts": 3,
                    "initialBackoff": "0.05s",
                    "maxBackoff": "0.5s",
                    "backoffMultiplier": 2,
                    "retryableStatusCodes": ["UNAVAILABLE"],
                },
            }
        ],
    }
)

_OPTIONS = [
    ("grpc.service_config", _SERVICE_CONFIG),
    ("grpc.enable_retries", 1),
    ("grpc.keepalive_time_ms", 30_000),
    # Generous: a busy 2-core box can be slow to answer a ping, and a missed one drops every call.
    ("grpc.keepalive_timeout_ms", 20_000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.max_receive_message_length", 64 * 1024 * 1024),
    ("grpc.max_send_message_length", 64 * 1024 * 1024),
    # Reconnect quickly after a replica restarts instead of backing off for up to two minutes.
    ("grpc.initial_reconnect_backoff_ms", 200),
    ("grpc.max_reconnect_backoff_ms", 2_000),
]


def target_for(address: str) -> str:
    """`a:1,b:2` -> `ipv4:a:1,b:2` (static list); `name:port` -> `dns:///name:port`."""
    parts = [p.strip() for p in address.split(",") if p.strip()]
    if not parts:
        raise ValueError("an address is empty; use host:port (several separated by commas)")
    if len(parts) > 1:
        return "ipv4:" + ",".join(parts)
    only = parts[0]
    if "://" in only or only.startswith(("ipv4:", "ipv6:", "unix:", "dns:")):
        return only
    return f"dns:///{only}"


def open_channel(address: str) -> grpc.aio.Channel:
    return grpc.aio.insecure_channel(target_for(address), options=_OPTIONS)
