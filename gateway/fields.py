"""The base of every request model: documented fields with their bounds, and the one check a request
must pass before it goes on the wire.

The services are the validation authority: a bound stated here goes into the OpenAPI document and
the MCP input schemas, so a client sees it, but the service enforces it, so a mistake reads the same
whichever transport made it. The gateway itself checks only the request's shape (types, required
fields, no field the operation does not take) and that its text can travel at all.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator
from pydantic_core import PydanticCustomError


def field(
    description: str,
    default: Any = ...,
    *,
    ge: float | None = None,
    le: float | None = None,
    max_length: int | None = None,
    max_items: int | None = None,
    nonzero: bool = False,
    enum: Sequence[str] | None = None,
    **extra: Any,
) -> Any:
    """A field with its description and its bounds in the JSON schema; the service enforces them.

    `nonzero` marks a count the gateway itself refuses below 1: proto3 sends 0 as "unset", which the
    service reads as its default, so a 0 would be answered as if it had not been given. `enum` names
    the values a text (or each text of a list) may take: a JSON Schema `enum`, so a client sees
    them; the service refuses any other with a message that lists them."""
    if nonzero:
        extra["ge"] = 1
        ge = None
    bounds = {"minimum": ge, "maximum": le, "maxLength": max_length, "maxItems": max_items}
    stated: dict[str, Any] = {key: value for key, value in bounds.items() if value is not None}
    if enum is not None:
        stated[ENUM_MARK] = list(enum)
    return Field(default, description=description, json_schema_extra=stated or None, **extra)


# Where `field` leaves a field's enum for `lean_schema`, which puts it on the text or on the items.
ENUM_MARK = "x-enum"


def lean_schema(schema: dict[str, Any]) -> None:
    """A request's JSON schema as a client needs it, for every operation's tool and body alike:
    no generated titles (the property names say it), an optional field as its own type (not
    `anyOf` with null: omitting it is how a caller leaves it unset, and a null sent is still taken),
    and each enum on the values it constrains. Every tool's schema is read by an agent on every
    session, so what says nothing costs it context for nothing."""
    schema.pop("title", None)
    for prop in schema.get("properties", {}).values():
        lean_property(prop)


def lean_property(prop: dict[str, Any]) -> None:
    """One field's schema as lean_schema leaves it (also each query and path parameter's in the
    OpenAPI document, which FastAPI renders field by field)."""
    prop.pop("title", None)
    variants = prop.get("anyOf")
    if isinstance(variants, list) and {"type": "null"} in variants and len(variants) == 2:
        (kept,) = [v for v in variants if v != {"type": "null"}]
        del prop["anyOf"]
        if prop.get("default", ...) is None:
            del prop["default"]
        for key, value in kept.items():
            prop.setdefault(key, value)
    enum = prop.pop(ENUM_MARK, None)
    if enum is not None:
        target = prop["items"] if prop.get("type") == "array" else prop
        target["enum"] = enum


def _texts(value: Any) -> list[str]:
    """Every string in a field's value: itself, its items, a mapping's keys and values."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, list | tuple):
        return [text for item in value for text in _texts(item)]
    if isinstance(value, dict):
        return [text for key, item in value.items() for text in (*_texts(key), *_texts(item))]
    return []  # numbers, times, nested request models (which check themselves)


def _encodes(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


class Request(BaseModel):
    """A request to one operation, as both REST and MCP receive it.

    A field the operation does not take is refused, naming it (REST answers 422): silently dropped,
    a misspelt `importance` or `tags` would be a write that did not do what its caller meant."""

    model_config = ConfigDict(extra="forbid", json_schema_extra=lean_schema)

    @field_validator("*", mode="after")
    @classmethod
    def _text_travels(cls, value: Any) -> Any:
        texts = _texts(value)
        # A JSON escape such as "\ud800" decodes to a lone surrogate, which protobuf cannot
        # serialise and Postgres cannot store; refuse it here with a message, not a crash.
        if not all(_encodes(text) for text in texts):
            raise PydanticCustomError(
                "utf8", "is not valid UTF-8 text (it holds a lone surrogate); send UTF-8"
            )
        # A NUL travels, but Postgres keeps it in no text or JSON column, and a filter holding one
        # matches nothing: refused in every field, so no service meets it as an internal error.
        if any("\x00" in text for text in texts):
            raise PydanticCustomError(
                "nul", "holds a NUL character (\\u0000), which cannot be stored; remove it"
            )
        return value


def _iso_time(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value)
        except ValueError:
            raise PydanticCustomError(
                "iso_time", "is not an ISO 8601 time such as 2024-05-01T12:00:00Z"
            ) from None
    return value


# A time as ISO 8601 text; naive times are taken as UTC (hypermnesia.times.timestamp).
IsoTime = Annotated[datetime, BeforeValidator(_iso_time)]
