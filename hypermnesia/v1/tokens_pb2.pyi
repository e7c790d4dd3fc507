from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable
from typing import ClassVar as _ClassVar, Optional as _Optional

DESCRIPTOR: _descriptor.FileDescriptor

class ResolveTokenRequest(_message.Message):
    __slots__ = ("token_sha256",)
    TOKEN_SHA256_FIELD_NUMBER: _ClassVar[int]
    token_sha256: str
    def __init__(self, token_sha256: _Optional[str] = ...) -> None: ...

class ResolveTokenResponse(_message.Message):
    __slots__ = ("found", "principal", "scopes")
    FOUND_FIELD_NUMBER: _ClassVar[int]
    PRINCIPAL_FIELD_NUMBER: _ClassVar[int]
    SCOPES_FIELD_NUMBER: _ClassVar[int]
    found: bool
    principal: str
    scopes: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, found: _Optional[bool] = ..., principal: _Optional[str] = ..., scopes: _Optional[_Iterable[str]] = ...) -> None: ...
