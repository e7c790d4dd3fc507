"""The REST routes, built from the operation table (gateway.operations): each route takes its
operation's request model, the fields its path names from the URL, the rest from the JSON body (the
query string for a GET), and calls the operation. The OpenAPI document comes from the same models
as the MCP tool schemas."""

from __future__ import annotations

import functools
import inspect
import re
import uuid
from collections.abc import Callable, Sequence
from copy import copy
from typing import Annotated, Any

from fastapi import APIRouter, Body, Path, Query, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, create_model

from gateway import fields
from gateway.auth import Authenticator
from gateway.deliveries import session_id
from gateway.operations import Operation, OperationFn, Route

__all__ = ["PATH_PARAMETER", "build_router", "lean_parameters", "without"]

PATH_PARAMETER = re.compile(r"{(\w+)(?::(\w+))?}")


@functools.cache
def without(model: type[BaseModel], *names: str) -> type[BaseModel]:
    """The model minus the fields the URL path carries: REST names a memory in its path, MCP in the
    tool's arguments, and both reach the operation as the one model."""
    kept = {
        name: (info.annotation, copy(info)) for name, info in model.model_fields.items() if name not in names
    }
    return create_model(f"{model.__name__}Body", __base__=fields.Request, __doc__=model.__doc__, **kept)  # type: ignore[call-overload]


def doc(function: Any) -> str:
    return inspect.cleandoc(function.__doc__ or "")


def _parameter(name: str, annotation: Any, default: Any = inspect.Parameter.empty) -> inspect.Parameter:
    return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation)


async def _request_of(route: Route, operation: Operation, given: dict[str, Any]) -> BaseModel:
    """The operation's request: the body's (or query's) fields, the path's and the route's own."""
    if route.adapter is not None:
        return await route.adapter(**given)
    given.pop("http")
    values: dict[str, Any] = {}
    part = given.pop("body", None)
    if isinstance(part, BaseModel):
        values.update(part.model_dump(exclude_unset=True))
    values.update({k: str(v) if isinstance(v, uuid.UUID) else v for k, v in given.items()})
    values.update(route.fixed)
    return operation.request.model_validate(values)


def _signature(route: Route, operation: Operation) -> inspect.Signature:
    """The parameters FastAPI reads: the path's, then the body or query model, then the request."""
    if route.adapter is not None:
        return inspect.signature(route.adapter)
    model = operation.request
    names = [(name, convertor) for name, convertor in PATH_PARAMETER.findall(route.path)]
    parameters = [_parameter("http", Request)]
    for name, convertor in names:
        kind = uuid.UUID if convertor == "uuid" else str
        description = model.model_fields[name].description
        parameters.append(_parameter(name, Annotated[kind, Path(description=description)]))
    taken = {name for name, _ in names} | set(route.fixed)
    if set(model.model_fields) - taken:
        part = without(model, *sorted(taken)) if taken else model
        if route.method == "GET":
            parameters.append(_parameter("body", Annotated[part, Query()]))
        elif route.optional_body:
            parameters.append(_parameter("body", Annotated[part | None, Body()], None))
        else:
            parameters.append(_parameter("body", Annotated[part, Body()]))
    return inspect.Signature(parameters)


def _endpoint(route: Route, operation: Operation, function: OperationFn, name: str) -> Callable[..., Any]:
    async def endpoint(**given: Any) -> JSONResponse:
        http: Request = given["http"]
        request = await _request_of(route, operation, dict(given))
        state = http.app.state
        auth: Authenticator = state.auth
        session = await auth.session(http.headers, identity=await auth.identity_of(http.scope))
        result = await function(state.backends, session, request)
        response = JSONResponse(result)
        # The body as rendered is what the client receives: the delivery log hashes these bytes.
        state.deliveries.record(
            operation.delivers,
            name,
            "rest",
            session,
            session_id(http.headers, mcp=False),
            request,
            result,
            bytes(response.body),
        )
        return response

    endpoint.__signature__ = _signature(route, operation)  # type: ignore[attr-defined]
    endpoint.__name__ = name
    return endpoint


def _route_name(operation: Operation) -> str:
    """The route's name (its summary in /docs): its tool's name, so REST and MCP name it alike, else
    its function's."""
    if operation.tool is not None:
        return operation.tool.name
    return getattr(operation.function, "__name__", type(operation.function).__name__)


def lean_parameters(openapi: dict[str, Any]) -> None:
    """The OpenAPI document's query and path parameters as lean as the bodies and the tool schemas
    (fields.lean_schema): FastAPI renders them field by field, without the model's schema hook."""
    for methods in openapi.get("paths", {}).values():
        for spec in methods.values():
            for parameter in spec.get("parameters", []):
                fields.lean_property(parameter["schema"])


def build_router(operations: Sequence[Operation], functions: Sequence[OperationFn]) -> APIRouter:
    """Every route of `operations`; `functions` are their bound functions (Operation.bind), in order."""
    router = APIRouter()
    for operation, function in zip(operations, functions, strict=True):
        for route in operation.rest:
            description = doc(operation.function)
            if route.note:
                description += "\n\n" + route.note
            router.add_api_route(
                route.path,
                _endpoint(route, operation, function, _route_name(operation)),
                methods=[route.method],
                description=description,
                response_model=dict[str, Any],
            )
    return router
