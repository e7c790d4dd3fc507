"""Curation RPCs (thin: translate messages, the domain modules do the work)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import grpc
from google.protobuf.json_format import MessageToDict

from hypermnesia import status, validation
from hypermnesia.errors import InvalidArgument, NotFound
from hypermnesia.memory_rows import memory_from_row
from hypermnesia.scopes import permits, require
from hypermnesia.times import field_time
from hypermnesia.v1 import common_pb2, curation_pb2, curation_pb2_grpc
from hypermnesia.wal import report_commit
from services.curation import fusion_refits, records_repo, repo, tasks
from services.curation.ingest import Ingester
from services.curation.lifecycle import ForgetInput, Forgetter
from services.curation.messages import import_response, record_spec, record_view, redacted_message
from services.curation.rebuild import Rebuilder
from services.curation.records import RecordImporter, stage
from services.curation.writer import MemoryWriter, SaveInput, UpdateInput


@dataclass
class Curation:
    """Everything the RPCs delegate to."""

    writer: MemoryWriter
    importer: RecordImporter
    forgetter: Forgetter
    rebuilder: Rebuilder | None = None
    ingester: Ingester | None = None


def _grants(caller: common_pb2.Caller) -> tuple[str, ...]:
    return tuple(caller.grants)


def _unset_fields(request: curation_pb2.SaveRequest) -> frozenset[str]:
    """The fields a save does not give (curation.proto SaveRequest): a supersede keeps the replaced
    memory's. An empty description, tag list or metadata is given only when its set_ flag says so."""
    given = {
        "type": bool(request.type),
        "kind": bool(request.kind),
        "decay_class": bool(request.decay_class),
        "importance": request.HasField("importance"),
        "description": bool(request.description) or request.set_description,
        "tags": bool(request.tags) or request.set_tags,
        "metadata": bool(request.metadata.fields) or request.set_metadata,
    }
    return frozenset(name for name, is_given in given.items() if not is_given)


class CurationServicer(curation_pb2_grpc.CurationServicer):
    def __init__(self, curation: Curation) -> None:
        self.c = curation
        self.writer = curation.writer

    async def _committed(self, context: grpc.aio.ServicerContext) -> None:
        """Read-after-write: the caller's next reads wait for a replica to replay this write."""
        await report_commit(self.writer.pool, context)

    async def Save(
        self, request: curation_pb2.SaveRequest, context: grpc.aio.ServicerContext
    ) -> curation_pb2.SaveResponse:
        result = await self.writer.save(
            SaveInput(
                principal=request.caller.principal,
                grants=_grants(request.caller),
                content=request.content,
                description=request.description,
                scope=request.scope,
                type=request.type,
                tags=list(request.tags),
                metadata=MessageToDict(request.metadata),
                importance=request.importance if request.HasField("importance") else None,
                kind=request.kind,
                supersedes=request.supersedes,
                decay_class=request.decay_class,
                unset=_unset_fields(request),
            )
        )
        response = curation_pb2.SaveResponse(
            created=result.created,
            memory=memory_from_row(result.memory),
            redacted=redacted_message(result.redacted),
        )
        if result.replaced is not None:
            response.replaced.CopyFrom(memory_from_row(result.replaced))
        response.similar.extend(
            curation_pb2.SimilarMemory(
                id=str(s.memory["id"]), content=s.memory["content"], differences=list(s.differences)
            )
            for s in result.similar
        )
        await self._committed(context)
        return response

    async def AppendRecord(
        self, request: curation_pb2.AppendRecordRequest, context: grpc.aio.ServicerContext
    ) -> curation_pb2.ImportRecordsResponse:
        result = await self.c.importer.import_records(
            request.caller.principal,
            _grants(request.caller),
            [record_spec(request.record)],
            operation="append",
        )
        await self._committed(context)
        return import_response(result)

    async def ImportRecords(
        self, request: curation_pb2.ImportRecordsRequest, context: grpc.aio.ServicerContext
    ) -> curation_pb2.ImportRecordsResponse:
        with stage("request decode"):
            specs = [record_spec(r) for r in request.records]
        result = await self.c.importer.import_records(
            request.caller.principal, _grants(request.caller), specs
        )
        if result.imported:  # an import is one of adaptive fusion's refit moments
            with stage("fusion refit"):
                await fusion_refits.after_import(self.writer.pool, [s.scope for s in specs])
        with stage("read-after-write report"):
            await self._committed(context)
        return import_response(result)

    async def GetRecord(
        self, request: curation_pb2.RecordRequest, context: grpc.aio.ServicerContext
    ) -> curation_pb2.RecordView:
        record_id = validation.parse_id(request.id, "record")
        async with self.writer.pool.acquire() as conn:
            row = await records_repo.record(conn, record_id)
            if row is None or not permits(request.caller.grants, row["scope"]):
                raise NotFound(f"no record {request.id} in your scopes")
            mems = await records_repo.memories(conn, [record_id])
        return record_view(row, mems.get(record_id))

    async def Lineage(
        self, request: curation_pb2.RecordRequest, context: grpc.aio.ServicerContext
    ) -> curation_pb2.RecordList:
        some_id = validation.parse_id(request.id, "record")
        async with self.writer.pool.acquire() as conn:
            memory_id = await records_repo.memory_of(conn, some_id)
            chain = await records_repo.lineage(conn, memory_id) if memory_id else []
            if not chain or not permits(request.caller.grants, chain[0]["scope"]):
                raise NotFound(f"no record or memory {request.id} in your scopes")
            created = {}
            for m in chain:
                rec = await records_repo.creating_record(conn, m["id"])
                if rec is not None:
                    created[m["id"]] = rec
        return curation_pb2.RecordList(
            memories=[memory_from_row(m) for m in chain],
            records=[record_view(created[m["id"]], m) for m in chain if m["id"] in created],
        )

    async def Derivations(
        self, request: curation_pb2.RecordRequest, context: grpc.aio.ServicerContext
    ) -> curation_pb2.RecordList:
        some_id = validation.parse_id(request.id, "record")
        async with self.writer.pool.acquire() as conn:
            own = await records_repo.record(conn, some_id)
            mems, recs = await records_repo.derivations(conn, some_id)
        scope = own["scope"] if own is not None else (mems[0]["scope"] if mems else None)
        if scope is None or not permits(request.caller.grants, scope):
            raise NotFound(f"no record {request.id} in your scopes")
        return curation_pb2.RecordList(
            memories=[memory_from_row(m) for m in mems], records=[record_view(r, None) for r in recs]
        )

    async def QueryRecords(
        self, request: curation_pb2.QueryRecordsRequest, context: grpc.aio.ServicerContext
    ) -> curation_pb2.RecordList:
        if not request.scopes:
            raise InvalidArgument("name at least one scope to query")
        for scope in request.scopes:
            validation.check_scope(scope)
        require(request.caller.grants, request.scopes)
        limit = request.limit or 100
        validation.check_limit(limit, validation.MAX_RECORD_QUERY_LIMIT)
        types = [("note" if t == "memory" else t) for t in map(validation.check_type, request.types)]
        if request.thread_id:
            validation.check_ref(request.thread_id, "thread_id")
        async with self.writer.pool.acquire() as conn:
            rows = await records_repo.query(
                conn,
                list(request.scopes),
                types,
                field_time(request, "since"),
                field_time(request, "until"),
                request.thread_id or None,
                limit,
            )
            mems = await records_repo.memories(conn, [r["id"] for r in rows])
        return curation_pb2.RecordList(records=[record_view(r, mems.get(r["id"])) for r in rows])

    async def StateObject(
        self, request: curation_pb2.StateRequest, context: grpc.aio.ServicerContext
    ) -> curation_pb2.RecordList:
        validation.check_scope(request.scope)
        require(request.caller.grants, [request.scope])
        if not request.kind or not request.key:
            raise InvalidArgument("name the state object's kind and key")
        validation.check_ref(request.kind, "kind")
        validation.check_ref(request.key, "key")
        async with self.writer.pool.acquire() as conn:
            rows = await records_repo.state(
                conn, request.scope, f"{request.kind}/{request.key}", request.history
            )
        if not rows:
            raise NotFound(f"no state object {request.kind}/{request.key} in scope {request.scope!r}")
        return curation_pb2.RecordList(memories=[memory_from_row(r) for r in rows])

    async def Update(
        self, request: curation_pb2.UpdateRequest, context: grpc.aio.ServicerContext
    ) -> common_pb2.Memory:
        changes: dict[str, Any] = {}
        for name in ("content", "description", "type", "importance", "decay_class"):
            if request.HasField(name):
                changes[name] = getattr(request, name)
        if request.set_tags:
            changes["tags"] = list(request.tags)
        if request.set_metadata:
            changes["metadata"] = MessageToDict(request.metadata)
        row, redacted = await self.writer.update(
            UpdateInput(request.caller.principal, _grants(request.caller), request.id, changes)
        )
        await self._committed(context)
        memory = memory_from_row(row)
        if (report := redacted_message(redacted)) is not None:
            memory.redacted.CopyFrom(report)
        return memory

    async def Delete(
        self, request: curation_pb2.MemoryRequest, context: grpc.aio.ServicerContext
    ) -> common_pb2.Memory:
        row = await self.writer.delete(request.caller.principal, _grants(request.caller), request.id)
        await self._committed(context)
        return memory_from_row(row)

    async def Restore(
        self, request: curation_pb2.MemoryRequest, context: grpc.aio.ServicerContext
    ) -> common_pb2.Memory:
        row = await self.c.forgetter.restore(request.caller.principal, _grants(request.caller), request.id)
        await self._committed(context)
        return memory_from_row(row)

    async def Archive(
        self, request: curation_pb2.MemoryRequest, context: grpc.aio.ServicerContext
    ) -> common_pb2.Memory:
        row = await self.c.forgetter.archive_one(
            request.caller.principal, _grants(request.caller), request.id
        )
        await self._committed(context)
        return memory_from_row(row)

    async def Forget(
        self, request: curation_pb2.ForgetRequest, context: grpc.aio.ServicerContext
    ) -> curation_pb2.ForgetResponse:
        result = await self.c.forgetter.forget(
            ForgetInput(
                principal=request.caller.principal,
                grants=_grants(request.caller),
                scopes=list(request.scopes),
                tags=list(request.tags),
                older_than_days=request.older_than_days if request.HasField("older_than_days") else None,
                importance_floor=request.importance_floor if request.HasField("importance_floor") else None,
                apply=request.apply,
                limit=request.limit or 100,
            )
        )
        await self._committed(context)
        return curation_pb2.ForgetResponse(
            matched=result.matched,
            archived=result.archived,
            truncated=result.truncated,
            applied=result.applied,
            memories=[memory_from_row(m) for m in result.memories],
        )

    async def ConfirmTask(
        self, request: curation_pb2.TaskDecision, context: grpc.aio.ServicerContext
    ) -> common_pb2.Memory:
        task_id = validation.parse_id(request.id, "task")
        async with self.writer.pool.acquire() as conn, conn.transaction():
            await tasks.decide(
                conn, request.caller.principal, _grants(request.caller), task_id, request.decision
            )
            row = await repo.fetch_memory(conn, task_id)
        assert row is not None
        await self._committed(context)
        return memory_from_row(row)

    async def Rebuild(
        self, request: curation_pb2.RebuildRequest, context: grpc.aio.ServicerContext
    ) -> curation_pb2.RebuildResponse:
        if self.c.rebuilder is None:
            raise NotFound("rebuild is not available in this server")
        for scope in request.scopes:
            validation.check_scope(scope)
        require(request.caller.grants, list(request.scopes) or ["*"])
        report = await self.c.rebuilder.rebuild(list(request.scopes) or None, check=request.check)
        await self._committed(context)
        return report.to_message()

    async def Ingest(
        self, request: curation_pb2.IngestRequest, context: grpc.aio.ServicerContext
    ) -> curation_pb2.IngestResponse:
        if self.c.ingester is None:
            raise NotFound("ingest is not available in this server")
        validation.check_scope(request.scope)
        require(request.caller.grants, [request.scope])
        report = await self.c.ingester.ingest_files(
            request.caller.principal,
            request.scope,
            request.repo,
            [(f.path, bytes(f.content)) for f in request.files],
        )
        await self._committed(context)
        return report.to_message()

    async def GetLiveSettings(
        self, request: common_pb2.LiveSettingsRequest, context: grpc.aio.ServicerContext
    ) -> common_pb2.LiveSettings:
        w, f = self.writer, self.c.forgetter
        return common_pb2.LiveSettings(
            values={
                "HM_DEDUPE_THRESHOLD": f"{w.dedupe_threshold:g}",
                "HM_DEDUPE_CONTENT_THRESHOLD": f"{w.dedupe_content_threshold:g}",
                "HM_FORGET_AFTER_DAYS": f"{f.after_days:g}",
                "HM_FORGET_IMPORTANCE_FLOOR": f"{f.importance_floor:g}",
            }
        )

    async def GetStatus(
        self, request: common_pb2.StatusRequest, context: grpc.aio.ServicerContext
    ) -> common_pb2.ServiceStatus:
        return await status.service_status(self.writer.pool, self.writer.embedder)
