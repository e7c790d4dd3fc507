"""Anchored checkpoints of the raw log (issue 22).

The sha256 chain (services/curation/rawlog.py) catches an edit made behind the application's back,
but not a rewrite by someone who can recompute every record_hash and the chain head. A checkpoint
is the chain head signed with an Ed25519 key that lives outside the database: whoever rewrites the
log cannot produce a matching signature, so `verify --checkpoint` recomputes the chain from the
rows and compares it with what was signed.

A checkpoint holds, besides the head, a commitment that lets verify name the first changed seq and
not only say "something before the head changed": the full record_hash every `block` records and a
2-byte fingerprint of every record's hash. No memory text, no payload: ids of nothing, hashes,
seqs, scope names and a time.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import logging
import os
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import asyncpg
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from hypermnesia.errors import InvalidArgument, StartupError
from services.curation import rawlog

log = logging.getLogger(__name__)

FORMAT = "hypermnesia-checkpoint/1"
DEFAULT_BLOCK = 1000
FINGERPRINT_BYTES = 2
KEY_ENV = "HM_CHECKPOINT_KEY"
KEY_FILE = "checkpoint-key.pem"


# ---- the key ---------------------------------------------------------------------------------


def key_path(configured: Path | None, data_dir: Path) -> Path:
    """HM_CHECKPOINT_KEY, else checkpoint-key.pem in HM_DATA_DIR: never the database. A key kept in
    the user's config dir (where it used to go) is used from there while the data dir holds none,
    so the checkpoints it signed still verify."""
    if configured is not None:
        return configured.expanduser()
    here = data_dir / KEY_FILE
    if here.exists():
        return here
    import platformdirs

    earlier = platformdirs.user_config_path("hypermnesia") / KEY_FILE
    return earlier if earlier.exists() else here


def load_key(configured: Path | None, create: bool, data_dir: Path) -> tuple[Ed25519PrivateKey, Path, bool]:
    """The signing key (HM_CHECKPOINT_KEY, else the default file), and whether it was created now
    (only `checkpoint` and the schedule create one)."""
    path = key_path(configured, data_dir)
    if not path.exists():
        if not create:
            raise StartupError(
                f"no checkpoint key at {path}; verify needs the key the checkpoints were signed with "
                f"(set {KEY_ENV} to its path)"
            )
        key = Ed25519PrivateKey.generate()
        pem = key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as out:
            out.write(pem)
        return key, path, True
    try:
        loaded = serialization.load_pem_private_key(path.read_bytes(), password=None)
    except (ValueError, TypeError) as exc:
        raise StartupError(
            f"{path} is not an unencrypted PEM private key ({exc}); {KEY_ENV} names it"
        ) from exc
    if not isinstance(loaded, Ed25519PrivateKey):
        raise StartupError(f"{path} is not an Ed25519 key; checkpoints are signed with Ed25519")
    return loaded, path, False


def public_raw(key: Ed25519PublicKey) -> bytes:
    return key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def key_id(key: Ed25519PublicKey) -> str:
    """A short name for a public key: the first 16 hex digits of its sha256."""
    return hashlib.sha256(public_raw(key)).hexdigest()[:16]


# ---- writing ---------------------------------------------------------------------------------


def _signed_bytes(body: dict[str, Any]) -> bytes:
    return rawlog.canonical_json({k: v for k, v in body.items() if k != "signature"}).encode()


async def make(
    conn: asyncpg.Connection, key: Ed25519PrivateKey, block: int = DEFAULT_BLOCK
) -> dict[str, Any]:
    """A signed checkpoint of the chain as it is now (one consistent snapshot)."""
    if block < 1:
        raise InvalidArgument(f"--block must be at least 1 (got {block})")
    marks: dict[str, str] = {}
    fingerprints = bytearray()
    scopes: set[str] = set()
    async with conn.transaction(isolation="repeatable_read", readonly=True):
        head = await conn.fetchrow("SELECT last_seq, last_hash FROM record_chain")
        seq = int(head["last_seq"])
        async for row in conn.cursor(
            "SELECT seq, scope, record_hash FROM records WHERE seq <= $1 ORDER BY seq", seq, prefetch=5000
        ):
            scopes.add(row["scope"])
            fingerprints += bytes.fromhex(row["record_hash"][: FINGERPRINT_BYTES * 2])
            if row["seq"] % block == 0:
                marks[str(row["seq"])] = row["record_hash"]
    public = key.public_key()
    body: dict[str, Any] = {
        "format": FORMAT,
        "seq": seq,
        "record_hash": str(head["last_hash"]),
        "scopes": sorted(scopes),
        "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "key_id": key_id(public),
        "public_key": base64.b64encode(public_raw(public)).decode(),
        "block": block,
        "marks": marks,
        "fingerprints": base64.b64encode(bytes(fingerprints)).decode(),
    }
    body["signature"] = base64.b64encode(key.sign(_signed_bytes(body))).decode()
    return body


def write(body: dict[str, Any], out: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(json.dumps(body, indent=1, sort_keys=True) + "\n")
    tmp.replace(out)


def default_name(body: dict[str, Any]) -> str:
    stamp = body["created_at"].replace(":", "").replace("-", "").replace("+0000", "Z")
    return f"checkpoint-{body['seq']:010d}-{stamp}.json"


# ---- verifying -------------------------------------------------------------------------------


@dataclass(frozen=True)
class CheckResult:
    path: str
    seq: int
    ok: bool
    first_bad_seq: int | None
    reason: str


def load(path: Path, key: Ed25519PrivateKey) -> dict[str, Any]:
    """The checkpoint, its signature checked against this host's key; InvalidArgument otherwise."""
    try:
        body = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise InvalidArgument(f"{path}: not a readable checkpoint ({exc})") from exc
    if not isinstance(body, dict) or body.get("format") != FORMAT:
        raise InvalidArgument(f"{path}: not a hypermnesia checkpoint (format {FORMAT} expected)")
    ours = key.public_key()
    if body.get("key_id") != key_id(ours):
        raise InvalidArgument(
            f"{path}: signed by another key (key id {body.get('key_id')}); the key given has id "
            f"{key_id(ours)}. Point {KEY_ENV} at the key that signed it"
        )
    try:
        ours.verify(base64.b64decode(body["signature"]), _signed_bytes(body))
    except (InvalidSignature, KeyError, ValueError) as exc:
        raise InvalidArgument(
            f"{path}: the signature does not match its contents (the checkpoint file was altered)"
        ) from exc
    return body


async def check(conn: asyncpg.Connection, body: dict[str, Any], path: str = "") -> CheckResult:
    """Recompute the chain from the rows (never trusting a stored record_hash) up to the
    checkpoint's seq, and compare it with what was signed; name the first seq that differs."""
    seq, block = int(body["seq"]), int(body["block"])
    marks: dict[str, str] = body["marks"]
    prints = base64.b64decode(body["fingerprints"])
    prev = rawlog.GENESIS_HASH
    expected = 1
    scopes: set[str] = set()
    # Where the recomputed hash first disagrees with the signed 2-byte fingerprint: the first
    # changed record (unless its new hash collides on 16 bits, 1 in 65,536: then the next one).
    first_print_miss: int | None = None

    def bad(at: int, reason: str) -> CheckResult:
        return CheckResult(path, seq, False, at, reason)

    async with conn.transaction(isolation="repeatable_read", readonly=True):
        async for row in conn.cursor(
            "SELECT r.*, t.payload FROM records r LEFT JOIN record_texts t ON t.record_id = r.id"
            " WHERE r.seq <= $1 ORDER BY r.seq",
            seq,
            prefetch=5000,
        ):
            if row["seq"] != expected:
                return bad(expected, f"seq {expected} is missing")
            payload = row["payload"]
            if payload is not None and hashlib.sha256(payload.encode()).hexdigest() != row["content_sha256"]:
                if first_print_miss is not None:
                    break  # an earlier record already differs: that is the first bad seq
                return bad(expected, "the record's text does not match its content_sha256")
            prev = rawlog.compute_hash(row, row["content_sha256"], prev)
            scopes.add(row["scope"])
            offset = (expected - 1) * FINGERPRINT_BYTES
            signed_print = prints[offset : offset + FINGERPRINT_BYTES].hex()
            if first_print_miss is None and signed_print != prev[: FINGERPRINT_BYTES * 2]:
                first_print_miss = expected
            mark = marks.get(str(expected))
            if mark is not None and mark != prev:
                at = first_print_miss or expected - block + 1
                return bad(at, f"the log differs from the signed one from seq {at} (block ending {expected})")
            expected += 1
    if first_print_miss is not None:
        return bad(first_print_miss, f"the log differs from the signed one from seq {first_print_miss}")
    if expected - 1 < seq:
        return bad(expected, f"the log ends at seq {expected - 1}, before the checkpoint's seq {seq}")
    if prev != body["record_hash"]:
        at = first_print_miss or max(1, seq - seq % block + 1)
        return bad(at, f"the log differs from the signed one from seq {at}")
    if sorted(scopes) != body["scopes"]:
        return bad(seq, "the set of scopes up to the checkpoint differs from the signed one")
    return CheckResult(path, seq, True, None, "ok")


# ---- scheduled checkpoints -------------------------------------------------------------------


async def run_schedule(
    pool: asyncpg.Pool, directory: Path, hours: float, key_file: Path | None, data_dir: Path
) -> None:
    """Write a checkpoint to `directory` every `hours` (curation's optional background task:
    HM_CHECKPOINT_DIR, HM_CHECKPOINT_HOURS; 0 = off). A failed write is logged and retried next time."""
    if hours <= 0:
        return
    key, path, created = load_key(key_file, True, data_dir)
    if created:
        log.warning("created a checkpoint key at %s (keep a copy elsewhere: verify needs it)", path)
    while True:
        try:
            async with pool.acquire() as conn:
                body = await make(conn, key)
            write(body, directory / default_name(body))
            log.info("checkpoint at seq %d written to %s", body["seq"], directory)
        except Exception:
            log.exception("scheduled checkpoint failed; next try in %.1f hours", hours)
        await asyncio.sleep(hours * 3600)
