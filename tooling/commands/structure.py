"""`hypermnesia map load FILE [--repo NAME]`: check a repository's map file here, then send it to
the curation service of the running stack, which replaces that repo's map atomically. The repo
defaults to the project of the current folder (hypermnesia/scopes.py `folder_project`), the one its
hooks and MCP sessions use, so the map reaches them.

The write goes through curation's StructureAdmin.LoadMap, so the write path stays in one service.
Registered by tooling.cli through COMMAND_MODULES.
"""

from __future__ import annotations

import argparse
import asyncio
import getpass
import os
from pathlib import Path
from typing import Annotated

import grpc
from pydantic import Field

from hypermnesia.errors import InvalidArgument
from hypermnesia.scopes import folder_project
from hypermnesia.settings import DEFAULT_CURATION_PORT, CommonSettings, Port
from hypermnesia.structure_map import MapError, check_repo, parse_map
from hypermnesia.v1 import common_pb2, structure_pb2, structure_pb2_grpc
from hypermnesia.wording import count
from tooling.console import fail, load_settings
from tooling.stack_record import resolve_addresses, unreachable


class MapCommandSettings(CommonSettings):
    # Unset: HM_CURATION_PORT, else the `up` recorded in HM_DATA_DIR (tooling/stack_record.py).
    curation_address: str = ""
    curation_port: Port = DEFAULT_CURATION_PORT
    rpc_timeout_s: Annotated[float, Field(gt=0, le=600)] = 30.0


class _LoadFailed(Exception):
    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def _operator() -> str:
    try:
        return f"cli:{getpass.getuser()}"
    except (KeyError, OSError):  # no passwd entry (containers)
        return "cli"


def _read(path: Path) -> str:
    if not path.is_file():
        fail(f"{path} is not a file; give the path of the map file (e.g. hypermnesia-map.yaml)")
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        fail(f"{path} is not UTF-8 text; save the map file as UTF-8")
    except OSError as exc:
        fail(f"cannot read {path}: {exc.strerror}")


async def _send(
    settings: MapCommandSettings, request: structure_pb2.LoadMapRequest
) -> structure_pb2.LoadMapResponse:
    from hypermnesia.grpc_client import open_channel

    address = settings.curation_address
    async with open_channel(address) as channel:
        stub = structure_pb2_grpc.StructureAdminStub(channel)
        try:
            return await stub.LoadMap(request, timeout=settings.rpc_timeout_s)
        except grpc.aio.AioRpcError as exc:
            code = exc.code()
            if code == grpc.StatusCode.UNAVAILABLE:
                message = f"{unreachable('curation', address)}. Nothing was loaded"
            elif code == grpc.StatusCode.DEADLINE_EXCEEDED:
                message = (
                    f"the curation service at {address} did not answer within {settings.rpc_timeout_s:g}s; "
                    "the load may or may not have happened: run the command again "
                    "(it replaces the map as a whole)"
                )
            elif code == grpc.StatusCode.UNIMPLEMENTED:
                message = f"the curation service at {address} does not serve map loading; upgrade it"
            else:
                message = exc.details() or code.name
            raise _LoadFailed(message, 1 if code == grpc.StatusCode.INVALID_ARGUMENT else 3) from exc


def cmd_map_load(args: argparse.Namespace) -> None:
    settings = resolve_addresses(load_settings(MapCommandSettings))
    path = Path(args.file)
    text = _read(path)
    try:
        repo = check_repo(args.repo or folder_project(os.getcwd()).name)
        # Checked here first so a broken file is reported without a round trip; curation checks again.
        parse_map(text, str(path))
    except MapError as exc:
        fail(exc.message)
    except InvalidArgument as exc:
        fail(exc.message, 2)
    request = structure_pb2.LoadMapRequest(
        caller=common_pb2.Caller(principal=_operator(), grants=[f"project:{repo}"]),
        repo=repo,
        source=text,
        source_name=path.name,
    )
    try:
        reply = asyncio.run(_send(settings, request))
    except _LoadFailed as exc:
        fail(str(exc), exc.exit_code)
    verb = "replaced the previous map" if reply.replaced else "first map of this repo"
    print(
        f"map load: repo {reply.repo!r} from {path}: {count(reply.components, 'component')}, "
        f"{count(reply.constraints, 'constraint')}, {count(reply.relationships, 'relationship')} "
        f"({verb}; sha256 {reply.source_sha256[:12]})"
    )


def register(sub: argparse._SubParsersAction, bench: argparse._SubParsersAction) -> None:
    """Add `hypermnesia map load` to `sub`."""
    group = sub.add_parser("map", help="the repository map of tiers 0/1 (components, constraints)")
    actions = group.add_subparsers(dest="map_command", required=True)
    p = actions.add_parser("load", help="replace a repo's map with a map file (through the curation service)")
    p.add_argument("file", help="the map file (YAML, or JSON), e.g. hypermnesia-map.yaml")
    p.add_argument(
        "--repo",
        default="",
        help="the repository the map describes (default: the project of the current folder, as its "
        "hooks and MCP sessions name it)",
    )
    p.set_defaults(func=cmd_map_load)
