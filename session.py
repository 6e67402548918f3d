# SPDX-License-Identifier: MIT
"""Record an AI agent's conversation as an append-only JSON Lines file, and read it back.

    import session

    with session.create("chat.jsonl") as s, s.begin_run() as run:
        run.record(session.Event("turn_start", turn_index=1))

    for record in session.iter_records("chat.jsonl"):
        print(record.seq, record.type, record.data)

One file, standard library only: copy it into a project as it is.  ``python -m session
validate FILE`` checks a file against the format.
"""

from __future__ import annotations

import builtins
import contextlib
import dataclasses
import errno
import io
import json
import json.scanner
import math
import os
import re
import stat
import sys
import types
import typing
import warnings
import weakref
from _thread import RLock  # threading.RLock, without importing threading
from collections import deque
from datetime import datetime, timedelta, timezone
from typing import (
    Any,
    BinaryIO,
    Callable,
    Deque,
    Dict,
    FrozenSet,
    Iterator,
    List,
    NamedTuple,
    Optional,
    Protocol,
    Sequence,
    Set,
    TextIO,
    Tuple,
    Union,
)

__all__ = [
    "create",
    "open",
    "read",
    "iter_records",
    "repair",
    "Session",
    "Run",
    "Event",
    "Execution",
    "ModelRequest",
    "CallConfig",
    "RetryInfo",
    "RunSummary",
    "RawJSON",
    "CallRef",
    "Record",
    "ReadResult",
    "RepairResult",
    "find",
    "summarize",
    "Summary",
    "RunInfo",
    "Gap",
    "Checkpoint",
    "EventData",
    "Codec",
    "JSONCodec",
    "TypeSpec",
    "Message",
    "AgentState",
    "AgentSnapshot",
    "SessionError",
    "FormatError",
    "UnsupportedVersionError",
    "CodecError",
    "RecordingError",
    "RunOpenError",
    "LockedError",
    "main",
]

__version__ = "1.0.0"

# ---------------------------------------------------------------------------- constants

_FORMAT_VERSION = 1
_MAX_LINE_BYTES = 256 << 20  # 256 MiB: far above any real record, far below a DoS
_READ_BUFFER = 1 << 20  # readline on 32 KB lines is 3x faster than with the default 8 KB
_RESERVED = frozenset({"session_start", "run_start", "run_close", "checkpoint"})
_CREDENTIAL_KEY = re.compile("api_key|apikey|authorization|password|secret|access_token", re.I)

# ---------------------------------------------------------------------------- errors


class SessionError(Exception):
    """Base class of every error this module raises on purpose."""


class FormatError(SessionError, ValueError):
    """A session file breaks the format: *reason*, in file *path*, at *line* and byte *offset*.

    *line* is 1-based and *offset* is where the line starts; either is ``None`` when
    unknown.  Rendered like ``json.JSONDecodeError``:
    ``chat.jsonl: seq 58 expected, found 60 (line 57, offset 10240)``.
    """

    def __init__(
        self,
        reason: str,
        path: str | None = None,
        line: int | None = None,
        offset: int | None = None,
    ) -> None:
        super().__init__(reason, path, line, offset)
        self.reason = reason
        self.path = path
        self.line = line
        self.offset = offset

    def __str__(self) -> str:
        where = [f"{k} {v}" for k, v in (("line", self.line), ("offset", self.offset)) if v is not None]
        text = f"{self.reason} ({', '.join(where)})" if where else self.reason
        return f"{self.path}: {text}" if self.path else text


class UnsupportedVersionError(FormatError):
    """Line 1 declares a format *version* this module does not read."""

    def __init__(
        self,
        version: int,
        path: str | None = None,
        line: int | None = None,
        offset: int | None = None,
    ) -> None:
        super().__init__(f"unsupported format version {version} (this module reads 1)", path, line, offset)
        self.args = (version, path, line, offset)
        self.version = version


class CodecError(SessionError, ValueError):
    """A value the codec cannot encode or decode; the message names its type and JSON path."""


class RecordingError(SessionError):
    """Writing, syncing or encoding failed; the session records nothing more (sticky)."""


class RunOpenError(SessionError, RuntimeError):
    """``begin_run`` was called while a run of the same session is still open."""


class LockedError(SessionError):
    """Another handle, in this process or another, is writing to the file."""


# ---------------------------------------------------------------------------- value types


@dataclasses.dataclass(frozen=True)
class Execution:
    """One logical call: run-local *id*, *kind* (``model``, ``tool`` or ``compact``), and
    *attempt*, counting retries from 1."""

    id: str
    kind: str
    parent_id: str = ""
    turn_index: int = 0
    attempt: int = 1

    def __post_init__(self) -> None:
        for name, kind in (
            ("id", str),
            ("kind", str),
            ("parent_id", str),
            ("turn_index", int),
            ("attempt", int),
        ):
            _require(getattr(self, name), kind, f"Execution.{name}")


@dataclasses.dataclass
class CallConfig:
    """The resolved per-call configuration of a model request.  *api_key* is never written
    and never shown by ``repr``."""

    thinking_level: str = ""
    thinking_budget: int = 0
    max_tokens: int = 0
    session_id: str = ""
    prompt_cache_key: str = ""
    tool_choice: Any = None
    response_format: Any = None
    extra: Any = None
    api_key: str = dataclasses.field(default="", repr=False)


@dataclasses.dataclass
class ModelRequest:
    """What the executor sent to the model: *messages* (codec values), *tools* (JSON values)
    and *config*."""

    messages: Sequence[Any]
    tools: Sequence[Any] = ()
    config: Optional[CallConfig] = None


@dataclasses.dataclass
class RetryInfo:
    """A retry decision: *max_retries*, *delay* in seconds, and the *error* that caused it."""

    max_retries: int = 0
    delay: float = 0.0
    error: Any = None


@dataclasses.dataclass
class RunSummary:
    """The totals an ``agent_end`` event reports."""

    turn_count: int = 0
    tool_calls: int = 0
    tool_errors: int = 0
    end_reason: str = ""


@dataclasses.dataclass(frozen=True)
class RawJSON:
    """Exactly one JSON value given as *text*; checked when recorded, then written compacted
    (insignificant whitespace removed, every token kept), like Go's ``json.RawMessage``."""

    text: Union[str, bytes]


@dataclasses.dataclass(init=False)
class Event:
    """One kernel event, as the host hands it to ``Run.record``.

    *timestamp* is an aware ``datetime`` (``None``: now, at ``record``).  *message* and
    *partial_message* are codec values; *args*, *result*, *details* and *preview* are JSON
    values or ``RawJSON``; *error* is an exception or a string.  *state* and *delta* let a host
    pass whole kernel events; they are never written.
    """

    type: str
    timestamp: Optional[datetime] = None
    execution: Optional[Execution] = None
    turn_index: int = 0
    message: Any = None
    partial_message: Any = None
    request: Optional[ModelRequest] = None
    tool_id: str = ""
    tool: str = ""
    tool_label: str = ""
    args: Any = None
    result: Any = None
    details: Any = None
    preview: Any = None
    is_error: bool = False
    disposition: str = ""
    context_operation: str = ""
    context_items: Any = None
    compaction: Any = None
    retry: Optional[RetryInfo] = None
    summary: Optional[RunSummary] = None
    recovery: str = ""
    error: Any = None
    state: Any = None
    delta: str = ""

    def __init__(
        self,
        type: str,  # noqa: A002 - the field's name in the contract
        *,
        timestamp: Optional[datetime] = None,
        execution: Optional[Execution] = None,
        turn_index: int = 0,
        message: Any = None,
        partial_message: Any = None,
        request: Optional[ModelRequest] = None,
        tool_id: str = "",
        tool: str = "",
        tool_label: str = "",
        args: Any = None,
        result: Any = None,
        details: Any = None,
        preview: Any = None,
        is_error: bool = False,
        disposition: str = "",
        context_operation: str = "",
        context_items: Any = None,
        compaction: Any = None,
        retry: Optional[RetryInfo] = None,
        summary: Optional[RunSummary] = None,
        recovery: str = "",
        error: Any = None,
        state: Any = None,
        delta: str = "",
    ) -> None:
        self.type = type
        self.timestamp = timestamp
        self.execution = execution
        self.turn_index = turn_index
        self.message = message
        self.partial_message = partial_message
        self.request = request
        self.tool_id = tool_id
        self.tool = tool
        self.tool_label = tool_label
        self.args = args
        self.result = result
        self.details = details
        self.preview = preview
        self.is_error = is_error
        self.disposition = disposition
        self.context_operation = context_operation
        self.context_items = context_items
        self.compaction = compaction
        self.retry = retry
        self.summary = summary
        self.recovery = recovery
        self.error = error
        self.state = state
        self.delta = delta


@dataclasses.dataclass(frozen=True)
class CallRef:
    """The four coordinates of one model or tool call, for an application's timeline."""

    session_id: str
    run_id: str
    execution_id: str
    attempt: int

    def to_json(self) -> Dict[str, Any]:
        """The reference as a JSON object (a ``dict``)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, value: Union[str, bytes, Dict[str, Any]]) -> CallRef:
        """Rebuild a reference from ``to_json()``'s object, or from that object's JSON text."""
        obj = json.loads(value) if isinstance(value, (str, bytes)) else value
        if not isinstance(obj, dict):
            raise ValueError("a CallRef is a JSON object")
        try:
            return cls(**{f: obj[f] for f in ("session_id", "run_id", "execution_id", "attempt")})
        except KeyError as exc:
            raise ValueError(f"CallRef lacks {exc}") from None

    def __post_init__(self) -> None:
        for name, kind in (("session_id", str), ("run_id", str), ("execution_id", str), ("attempt", int)):
            _require(getattr(self, name), kind, f"CallRef.{name}")


class Record(NamedTuple):
    """One line of a session file: the envelope, *data* as parsed, and the byte *offset*
    where the line starts.  *run_id* is ``None`` on ``session_start``; *time* is the string
    as written."""

    session_id: str
    seq: int
    type: str
    time: str
    run_id: Optional[str]
    data: Dict[str, Any]
    offset: int

    @property
    def ref(self) -> Optional[CallRef]:
        """The ``CallRef`` of an event record that has an execution, else ``None``."""
        if self.run_id is None or self.type in _RESERVED or "execution" not in self.data:
            return None
        ex = _execution_from_json(self.data["execution"], self)
        return CallRef(self.session_id, self.run_id, ex.id, ex.attempt)


class ReadResult(NamedTuple):
    """What a read found: *records* complete records spanning *complete_bytes*, and the
    length of the ignored unfinished last line, *tail_bytes*."""

    session_id: str
    records: int
    complete_bytes: int
    tail_bytes: int


@dataclasses.dataclass(frozen=True)
class Checkpoint:
    """The latest explicit checkpoint: the decoded *snapshot*, and the *seq*, *run_id* and
    *time* (as written) of its record."""

    snapshot: Any
    seq: int
    run_id: str
    time: str


@dataclasses.dataclass(frozen=True)
class EventData:
    """A typed view of an event record's ``data``; absent keys take the empty default.

    *execution*, *retry* and *summary* are rebuilt as their classes; *error* stays a dict;
    *message*, *partial_message* and ``request["messages"]`` stay codec values: decode them
    with the codec that wrote them.
    """

    execution: Optional[Execution] = None
    turn_index: int = 0
    message: Any = None
    partial_message: Any = None
    request: Optional[Dict[str, Any]] = None
    snapshot_error: str = ""
    redacted: Tuple[str, ...] = ()
    tool_id: str = ""
    tool: str = ""
    tool_label: str = ""
    args: Any = None
    result: Any = None
    details: Any = None
    preview: Any = None
    is_error: bool = False
    disposition: str = ""
    context_operation: str = ""
    context_items: Any = None
    compaction: Any = None
    retry: Optional[RetryInfo] = None
    summary: Optional[RunSummary] = None
    recovery: str = ""
    error: Optional[Dict[str, Any]] = None
    committed: bool = False

    @classmethod
    def from_record(cls, record: Record) -> EventData:
        """Check the JSON types of *record*'s data keys and build the view; a key of the
        wrong type raises ``FormatError``."""
        data = record.data
        fields: Dict[str, Any] = {}
        for key, kind in _EVENT_DATA_KINDS.items():
            if key in data:
                value = data[key]
                if kind is not None and type(value) is not kind:
                    where = f"data.{key} must be {_json_kind(kind)}, found {_json_kind(type(value))}"
                    raise FormatError(where, None, record.seq, record.offset)
                fields[key] = value
        if "execution" in fields:
            fields["execution"] = _execution_from_json(fields["execution"], record)
        if "retry" in fields:
            fields["retry"] = _retry_from_json(fields["retry"], record)
        if "summary" in fields:
            fields["summary"] = _summary_from_json(fields["summary"], record)
        if "redacted" in fields:
            fields["redacted"] = _strings_from_json(fields["redacted"], record, "redacted")
        return cls(**fields)


_EVENT_DATA_KINDS: Dict[str, Optional[type]] = {
    "execution": dict,
    "turn_index": int,
    "message": None,
    "partial_message": None,
    "request": dict,
    "snapshot_error": str,
    "redacted": list,
    "tool_id": str,
    "tool": str,
    "tool_label": str,
    "args": None,
    "result": None,
    "details": None,
    "preview": None,
    "is_error": bool,
    "disposition": str,
    "context_operation": str,
    "context_items": None,
    "compaction": None,
    "retry": dict,
    "summary": dict,
    "recovery": str,
    "error": dict,
    "committed": bool,
}


def _require(value: object, kind: type, name: str) -> None:
    # bool is an int to Python, never to this format.
    if type(value) is not kind and not (kind is str and isinstance(value, str)):
        raise TypeError(f"{name} must be {kind.__name__}, not {type(value).__name__}")


def _json_kind(kind: type) -> str:
    names = {dict: "an object", list: "an array", str: "a string", int: "an integer", bool: "a boolean"}
    return names.get(kind, "a number" if kind is float else "null" if kind is type(None) else kind.__name__)


def _take(obj: Dict[str, Any], key: str, kind: type, default: Any, record: Record, where: str) -> Any:
    value = obj.get(key, default)
    if type(value) is not kind and not (kind is float and type(value) is int):
        problem = f"data.{where}.{key} must be {_json_kind(kind)}, found {_json_kind(type(value))}"
        raise FormatError(problem, None, record.seq, record.offset)
    return value


def _execution_from_json(obj: Any, record: Record) -> Execution:
    if type(obj) is not dict:
        raise FormatError("data.execution must be an object", None, record.seq, record.offset)
    return Execution(
        _take(obj, "id", str, None, record, "execution"),
        _take(obj, "kind", str, None, record, "execution"),
        _take(obj, "parent_id", str, "", record, "execution"),
        _take(obj, "turn_index", int, 0, record, "execution"),
        _take(obj, "attempt", int, 1, record, "execution"),
    )


def _retry_from_json(obj: Dict[str, Any], record: Record) -> RetryInfo:
    error = obj.get("error")
    if error is not None and type(error) is not dict:
        raise FormatError("data.retry.error must be an object", None, record.seq, record.offset)
    delay = _take(obj, "delay", float, 0.0, record, "retry")
    try:
        delay = float(delay)
    except OverflowError:
        raise FormatError("data.retry.delay is out of range", None, record.seq, record.offset) from None
    return RetryInfo(_take(obj, "max_retries", int, 0, record, "retry"), delay, error)


def _summary_from_json(obj: Dict[str, Any], record: Record) -> RunSummary:
    return RunSummary(
        _take(obj, "turn_count", int, 0, record, "summary"),
        _take(obj, "tool_calls", int, 0, record, "summary"),
        _take(obj, "tool_errors", int, 0, record, "summary"),
        _take(obj, "end_reason", str, "", record, "summary"),
    )


def _strings_from_json(items: List[Any], record: Record, key: str) -> Tuple[str, ...]:
    if any(type(item) is not str for item in items):
        raise FormatError(f"data.{key} must hold strings", None, record.seq, record.offset)
    return tuple(items)


# ---------------------------------------------------------------------------- codec


class Codec(Protocol):
    """Turns application values into JSON values (``encode``) and back (``decode``)."""

    def encode(self, value: Any) -> Any: ...

    def decode(self, value: Any) -> Any: ...


@dataclasses.dataclass(frozen=True)
class TypeSpec:
    """Registers *cls* under *type_id* with a ``JSONCodec``.

    Without functions, *cls* must be a dataclass: its fields become an object.  With them,
    *encode(obj)* returns a JSON value (itself encoded further) and *decode(value)* rebuilds
    the object from it.
    """

    type_id: str
    cls: type
    encode: Optional[Callable[[Any], Any]] = None
    decode: Optional[Callable[[Any], Any]] = None

    def __post_init__(self) -> None:
        _require(self.type_id, str, "TypeSpec.type_id")
        if not self.type_id:
            raise ValueError("TypeSpec.type_id must not be empty")
        if not isinstance(self.cls, type):
            raise TypeError(f"TypeSpec.cls must be a class, not {self.cls!r}")
        if (self.encode is None) != (self.decode is None):
            raise ValueError(f"{self.type_id}: give both encode and decode, or neither")
        if self.encode is None and not dataclasses.is_dataclass(self.cls):
            raise TypeError(
                f"{self.type_id}: {self.cls.__qualname__} is not a dataclass; give encode and decode"
            )


@dataclasses.dataclass
class Message:
    """A conversation message (``agentgo.message.v1``): *content* is a list of block dicts
    such as ``{"type": "text", "text": "hi"}``; *usage* a dict such as ``{"input": 10,
    "output": 5, "total_tokens": 15}``."""

    role: str
    content: List[Any]
    stop_reason: str = ""
    usage: Optional[Dict[str, Any]] = None
    metadata: Optional[Dict[str, Any]] = None
    timestamp: Optional[datetime] = None


@dataclasses.dataclass
class AgentState:
    """An agent's conversation state (``agentgo.agent-state.v1``)."""

    messages: List[Any] = dataclasses.field(default_factory=list)
    artifacts: List[Any] = dataclasses.field(default_factory=list)
    total_usage: Optional[Dict[str, Any]] = None
    progress: Any = None


@dataclasses.dataclass
class AgentSnapshot:
    """A state plus the input queues an agent had accepted (``agentgo.agent-snapshot.v1``)."""

    state: AgentState
    steering_queue: List[Any] = dataclasses.field(default_factory=list)
    follow_up_queue: List[Any] = dataclasses.field(default_factory=list)


_BUILTIN_TYPES = (
    TypeSpec("agentgo.message.v1", Message),
    TypeSpec("agentgo.agent-state.v1", AgentState),
    TypeSpec("agentgo.agent-snapshot.v1", AgentSnapshot),
)


class _CodecFault(Exception):
    """A codec failure on its way out; containers add their step of the JSON path."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason
        self.steps: List[str] = []

    def error(self) -> CodecError:
        return CodecError(f"{self.reason} at ${''.join(reversed(self.steps))}")


class _Kind(NamedTuple):
    """A registered type, ready for use."""

    type_id: str
    cls: type
    fields: Tuple[str, ...]  # for dataclasses without functions
    datetimes: FrozenSet[str]  # those of *fields* annotated as datetime
    encode: Optional[Callable[[Any], Any]]
    decode: Optional[Callable[[Any], Any]]


_DATETIME_ANNOTATION = re.compile(
    r"(?:\w+\.)?(?:Optional\[D\]|Union\[D,None\]|Union\[None,D\])|D(?:\|None)?|None\|D".replace(
        "D", r"(?:\w+\.)?datetime"
    )
)


def _is_datetime(annotation: Any) -> bool:
    if isinstance(annotation, str):  # an annotation this Python could not evaluate
        return _DATETIME_ANNOTATION.fullmatch(re.sub(r"[\s'\"]", "", annotation)) is not None
    if annotation is datetime:
        return True
    args = set(typing.get_args(annotation))
    return typing.get_origin(annotation) in _UNIONS and datetime in args and args <= {datetime, type(None)}


_UNIONS = (Union, getattr(types, "UnionType", Union))


def _kind_of(spec: TypeSpec) -> _Kind:
    if spec.encode is not None:
        return _Kind(spec.type_id, spec.cls, (), frozenset(), spec.encode, spec.decode)
    fields = [f for f in dataclasses.fields(spec.cls) if f.init]
    try:
        hints = typing.get_type_hints(spec.cls)
    except Exception:  # noqa: BLE001 - e.g. "datetime | None" on Python 3.9: read the text
        hints = {}
    datetimes = frozenset(f.name for f in fields if _is_datetime(hints.get(f.name, f.type)))
    return _Kind(spec.type_id, spec.cls, tuple(f.name for f in fields), datetimes, None, None)


def _path_step(key: str) -> str:
    return f".{key}" if key.isidentifier() else f"[{json.dumps(key, ensure_ascii=False)}]"


class JSONCodec:
    """The default codec: JSON values pass through; registered *types* become
    ``{"$type": type_id, "value": ...}``; anything else raises ``CodecError``.

    ``Message``, ``AgentState`` and ``AgentSnapshot`` are registered first.  Immutable, and
    safe to share between threads.
    """

    def __init__(self, *types: TypeSpec) -> None:
        by_id: Dict[str, _Kind] = {}
        by_class: Dict[type, _Kind] = {}
        for spec in _BUILTIN_TYPES + types:
            if not isinstance(spec, TypeSpec):
                raise TypeError(f"JSONCodec takes TypeSpec values, not {spec!r}")
            if spec.type_id in by_id:
                raise ValueError(f"type id {spec.type_id!r} is registered twice")
            if spec.cls in by_class:
                raise ValueError(f"class {spec.cls.__qualname__} is registered twice")
            by_id[spec.type_id] = by_class[spec.cls] = _kind_of(spec)
        self._by_id = by_id
        self._by_class = by_class

    def __repr__(self) -> str:
        return f"JSONCodec({', '.join(sorted(self._by_id))})"

    def encode(self, value: Any) -> Any:
        """Return *value* as a JSON value (``dict``, ``list``, ``str``, ``int``, ``float``,
        ``bool`` or ``None``); ``CodecError`` names what cannot be encoded and where."""
        try:
            return self._encode(value)
        except _CodecFault as fault:
            raise fault.error() from fault.__cause__
        except RecursionError:
            raise CodecError("value nested too deeply to encode") from None

    def decode(self, value: Any) -> Any:
        """Rebuild what ``encode`` produced *value* from; ``CodecError`` for an unknown type
        id or a value its class rejects."""
        try:
            return self._decode(value)
        except _CodecFault as fault:
            raise fault.error() from fault.__cause__
        except RecursionError:
            raise CodecError("value nested too deeply to decode") from None

    # JSON scalars are handled inline in the loops below: they are most of any message.
    def _encode(self, value: Any) -> Any:
        t = type(value)
        if t is str or t is int or t is bool or value is None:
            return value
        if t is dict:
            return self._encode_dict(value)
        if t is list or t is tuple:
            return self._encode_list(value)
        if t is float:
            if math.isfinite(value):
                return value
            raise _CodecFault(f"non-finite float {value!r}")
        kind = self._by_class.get(t)
        if kind is not None:
            return {"$type": kind.type_id, "value": self._encode_object(kind, value)}
        if t is datetime:
            return _rfc3339(value)
        raise _CodecFault(f"unregistered type {t.__module__}.{t.__qualname__}")

    # Containers are copied only where something inside them changes: most of a message is
    # plain JSON already, and checking it costs less than rebuilding it.
    def _encode_dict(self, items: Dict[Any, Any]) -> Dict[str, Any]:
        out = None
        key = None
        try:
            for key, item in items.items():
                if type(key) is not str:
                    raise _CodecFault(f"object key {key!r} of type {type(key).__name__}")
                t = type(item)
                if t is str or t is int or t is bool or item is None:
                    continue
                encoded = self._encode_dict(item) if t is dict else self._encode(item)
                if encoded is not item:
                    if out is None:
                        out = dict(items)
                    out[key] = encoded
        except _CodecFault as fault:
            if type(key) is str:
                fault.steps.append(_path_step(key))
            raise
        result = items if out is None else out
        if ("$type" in result and "value" in result) or (len(result) == 1 and "$object" in result):
            return {"$object": result}  # would read back as a tagged value or an escape
        return result

    def _encode_list(self, items: Sequence[Any]) -> List[Any]:
        out = list(items) if type(items) is tuple else None
        index = 0
        try:
            for index, item in enumerate(items):
                t = type(item)
                if t is str or t is int or t is bool or item is None:
                    continue
                encoded = self._encode_dict(item) if t is dict else self._encode(item)
                if encoded is not item:
                    if out is None:
                        out = list(items)
                    out[index] = encoded
        except _CodecFault as fault:
            fault.steps.append(f"[{index}]")
            raise
        return items if out is None else out  # type: ignore[return-value]

    def _encode_object(self, kind: _Kind, obj: Any) -> Any:
        if kind.encode is not None:
            try:
                plain = kind.encode(obj)
            except Exception as exc:  # the host's function: report, don't crash
                raise _CodecFault(f"{kind.type_id} encode function failed: {exc!r}") from exc
            return self._encode(plain)
        out = {}
        for name in kind.fields:
            item = getattr(obj, name)
            t = type(item)
            if t is str or t is int or t is bool:
                out[name] = item
            elif item is not None:
                try:
                    out[name] = self._encode(item)
                except _CodecFault as fault:
                    fault.steps.append(f".{name}")
                    raise
        return out

    def _decode(self, value: Any) -> Any:
        t = type(value)
        if t is dict:
            if "$type" in value and "value" in value:
                return self._decode_tagged(value)
            if len(value) == 1 and "$object" in value:
                inner = value["$object"]
                if type(inner) is not dict:
                    raise _CodecFault("$object must wrap an object")
                return self._decode_dict(inner)
            return self._decode_dict(value)
        if t is list:
            out: List[Any] = []
            try:
                for item in value:
                    out.append(self._decode(item))
            except _CodecFault as fault:
                fault.steps.append(f"[{len(out)}]")
                raise
            return out
        return value

    def _decode_dict(self, items: Dict[str, Any]) -> Dict[str, Any]:
        out: Dict[str, Any] = {}
        key = ""
        try:
            for key, item in items.items():
                out[key] = self._decode(item) if type(item) is dict or type(item) is list else item
        except _CodecFault as fault:
            fault.steps.append(_path_step(key))
            raise
        return out

    def _decode_tagged(self, tagged: Dict[str, Any]) -> Any:
        type_id = tagged["$type"]
        kind = self._by_id.get(type_id) if type(type_id) is str else None
        if kind is None:
            raise _CodecFault(f"unknown type id {type_id!r}")
        value = tagged["value"]
        if kind.decode is not None:
            plain = self._decode(value)
            try:
                return kind.decode(plain)
            except Exception as exc:  # the host's function meets a hostile file
                raise _CodecFault(f"{type_id} decode function failed: {exc!r}") from exc
        if type(value) is not dict:
            raise _CodecFault(f"{type_id} value must be an object")
        fields = {}
        for name in kind.fields:
            if name in value:
                try:
                    item = self._decode(value[name])
                    if name in kind.datetimes and type(item) is str:
                        item = _parse_rfc3339(item)
                except _CodecFault as fault:
                    fault.steps.append(f".{name}")
                    raise
                fields[name] = item
        try:
            return kind.cls(**fields)
        except Exception as exc:  # the class rejects what a file holds
            raise _CodecFault(f"{type_id}: {kind.cls.__qualname__} rejects its fields: {exc!r}") from exc


def _rfc3339(moment: datetime) -> str:
    """RFC 3339 with microseconds and the value's own offset (``Z`` for UTC)."""
    offset = moment.utcoffset()
    if offset is None:
        raise _CodecFault("naive datetime (give it a timezone)")
    if not offset:
        return _clock(moment) + "Z"
    minutes = int(offset.total_seconds()) // 60
    return "%s%s%02d:%02d" % (_clock(moment), "-" if minutes < 0 else "+", *divmod(abs(minutes), 60))  # noqa: UP031


def _clock(moment: datetime) -> str:
    """Date and time of day with microseconds, as RFC 3339 writes them: its offset to add."""
    global _last_second
    second = (moment.year, moment.month, moment.day, moment.hour, moment.minute, moment.second)
    last = _last_second  # one read: another thread may replace it, never half of it
    if last[0] != second:
        last = _last_second = (second, "%04d-%02d-%02dT%02d:%02d:%02d" % second)  # noqa: UP031
    return f"{last[1]}.{moment.microsecond:06d}"


# Most records of a session share their second with the one before: formatting only the
# microseconds halves the cost of a time stamp, which every record pays at least once.
_last_second: Tuple[Tuple[int, ...], str] = ((), "")


_RFC3339 = re.compile(r"(\d{4})-(\d\d)-(\d\d)[Tt ](\d\d):(\d\d):(\d\d)(?:\.(\d+))?(?:[Zz]|([+-]\d\d):(\d\d))")


def _parse_rfc3339(text: str) -> datetime:
    """An aware datetime; fractions beyond microseconds (Go's RFC3339Nano) are cut."""
    match = _RFC3339.fullmatch(text)
    try:
        if match is None:
            raise ValueError("not RFC 3339 with an offset")
        year, month, day, hour, minute, second, fraction, hours, minutes = match.groups()
        offset = timedelta(
            hours=int(hours or 0), minutes=int(minutes or 0) * (-1 if (hours or "+")[0] == "-" else 1)
        )
        micro = int((fraction or "0")[:6].ljust(6, "0"))
        zone = timezone(offset) if offset else timezone.utc
        return datetime(int(year), int(month), int(day), int(hour), int(minute), int(second), micro, zone)
    except ValueError as exc:
        raise _CodecFault(f"invalid RFC 3339 time {text!r}: {exc}") from None


_DEFAULT_CODEC = JSONCodec()


# ---------------------------------------------------------------------------- JSON text


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not strict JSON")


def _finite(text: str) -> float:
    value = float(text)
    if math.isfinite(value):
        return value
    raise ValueError(f"number {text} is out of range for a double")  # 1e999: Go refuses it too


_DECODER = json.JSONDecoder(parse_constant=_refuse_constant, parse_float=_finite)
_scan_once = json.scanner.make_scanner(_DECODER)  # type: ignore[arg-type]  # a decoder is its context
_quote = json.encoder.encode_basestring  # a str as a JSON string, non-ASCII kept
_SURROGATE = re.compile("[\ud800-\udfff]")
_RAW_MARK = "\x00\ue000RawJSON\ue000\x00"  # stands for a RawJSON while its line is encoded


class _HasRaw(Exception):
    """A RawJSON value turned up: encode the line the slower way that splices it in."""


def _unencodable(value: Any) -> Any:
    if type(value) is RawJSON:
        raise _HasRaw
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def _make_encoder(default: Callable[[Any], Any]) -> Callable[[Any, int], Sequence[str]]:
    """The encoder ``json.dumps`` runs inside: compact, non-ASCII kept, NaN refused.  Called
    as ``encoder(value, 0)``, it gives the text in pieces."""
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is not None:
        return make(None, default, _quote, None, ":", ",", False, False, False)  # type: ignore[no-any-return]
    # no C accelerator (another interpreter): the pure-Python encoder
    encoder = json.JSONEncoder(
        ensure_ascii=False, separators=(",", ":"), allow_nan=False, check_circular=False, default=default
    )
    return lambda value, level: [encoder.encode(value)]


_encode_plain = _make_encoder(_unencodable)


def _dumps(value: Any) -> str:
    """Compact JSON text of *value*: non-ASCII kept, NaN refused, ``RawJSON`` spliced in."""
    try:
        return "".join(_encode_plain(value, 0))
    except _HasRaw:
        pass
    raws: List[str] = []

    def default(obj: Any) -> Any:
        if type(obj) is RawJSON:
            raws.append(_compact(obj))
            return _RAW_MARK
        return _unencodable(obj)

    pieces = "".join(_make_encoder(default)(value, 0)).split(_quote(_RAW_MARK))
    if len(pieces) != len(raws) + 1:
        raise ValueError("a string equal to the RawJSON placeholder cannot be recorded")
    return "".join(piece + raw for piece, raw in zip(pieces, raws)) + pieces[-1]


_JSON_STRING_OR_SPACE = re.compile(r'("[^"\\]*(?:\\.[^"\\]*)*")|[ \t\n\r]+')


def _compact(raw: RawJSON) -> str:
    """*raw*'s text, checked to be one strict JSON value, without insignificant whitespace."""
    text = raw.text.decode("utf-8") if isinstance(raw.text, bytes) else raw.text
    if type(text) is not str:
        raise TypeError(f"RawJSON.text must be str or bytes, not {type(raw.text).__name__}")
    try:
        _DECODER.decode(text)
    except (ValueError, RecursionError) as exc:
        raise ValueError(f"RawJSON is not one strict JSON value: {exc}") from None
    return _JSON_STRING_OR_SPACE.sub(r"\1", text)


def _escaped_utf8(text: str) -> bytes:
    """JSON *text* as UTF-8, its lone surrogates written as ``\\udXXX`` escapes."""
    return _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text).encode()


def _utc_text(moment: Optional[datetime]) -> str:
    """The envelope's time: RFC 3339 in UTC, with microseconds and ``Z``."""
    if moment is None:
        moment = datetime.now(timezone.utc)
    elif not isinstance(moment, datetime):
        raise TypeError(f"timestamp must be a datetime, not {type(moment).__name__}")
    offset = moment.utcoffset()
    if offset is None:
        raise ValueError(f"naive timestamp {moment} (give it a timezone)")
    return _clock(moment - offset if offset else moment) + "Z"


# ---------------------------------------------------------------------------- event data
# Each _put_* writes one Event field into a record's data, leaving out empty values.


def _put_text(data: Dict[str, Any], key: str, value: Any, codec: Codec) -> None:
    if type(value) is not str:
        _require(value, str, key)
    if value:
        data[key] = value


def _put_int(data: Dict[str, Any], key: str, value: Any, codec: Codec) -> None:
    if type(value) is not int:
        _require(value, int, key)
    if value:
        data[key] = value


def _put_flag(data: Dict[str, Any], key: str, value: Any, codec: Codec) -> None:
    if value is not False:
        _require(value, bool, key)
        data[key] = value


def _put_json(data: Dict[str, Any], key: str, value: Any, codec: Codec) -> None:
    if value is not None:
        data[key] = value  # checked when the line is encoded; RawJSON spliced in then


def _put_codec(data: Dict[str, Any], key: str, value: Any, codec: Codec) -> None:
    if value is not None:
        data[key] = codec.encode(value)


def _put_execution(data: Dict[str, Any], key: str, value: Any, codec: Codec) -> None:
    if value is not None:
        if type(value) is not Execution:
            raise TypeError(f"execution must be an Execution, not {type(value).__name__}")
        out: Dict[str, Any] = {"id": value.id, "kind": value.kind}
        if value.parent_id:
            out["parent_id"] = value.parent_id
        if value.turn_index:
            out["turn_index"] = value.turn_index
        out["attempt"] = value.attempt
        data[key] = out


def _put_error(data: Dict[str, Any], key: str, value: Any, codec: Codec) -> None:
    if isinstance(value, BaseException):
        data[key] = {"message": str(value), "type": type(value).__name__}
    elif value is not None and value != "":
        _require(value, str, key)
        data[key] = {"message": value}


def _put_retry(data: Dict[str, Any], key: str, value: Any, codec: Codec) -> None:
    if value is not None:
        if type(value) is not RetryInfo:
            raise TypeError(f"retry must be a RetryInfo, not {type(value).__name__}")
        out: Dict[str, Any] = {}
        _put_int(out, "max_retries", value.max_retries, codec)
        if value.delay:
            out["delay"] = float(value.delay)
        _put_error(out, "error", value.error, codec)
        data[key] = out


def _put_summary(data: Dict[str, Any], key: str, value: Any, codec: Codec) -> None:
    if value is not None:
        if type(value) is not RunSummary:
            raise TypeError(f"summary must be a RunSummary, not {type(value).__name__}")
        for name in ("turn_count", "tool_calls", "tool_errors"):
            _require(getattr(value, name), int, f"summary.{name}")
        _require(value.end_reason, str, "summary.end_reason")
        data[key] = dataclasses.asdict(value)


def _put_request(data: Dict[str, Any], key: str, value: Any, codec: Codec) -> None:
    if value is None:
        return
    if type(value) is not ModelRequest:
        raise TypeError(f"request must be a ModelRequest, not {type(value).__name__}")
    config = value.config or CallConfig()
    out: Dict[str, Any] = {}
    for name in ("thinking_level", "session_id", "prompt_cache_key"):
        _put_text(out, name, getattr(config, name), codec)
    for name in ("thinking_budget", "max_tokens"):
        _put_int(out, name, getattr(config, name), codec)
    problems: List[str] = []
    redacted: List[str] = []
    for name in ("tool_choice", "response_format", "extra"):
        item = getattr(config, name)
        if item is None:
            continue
        try:
            if name == "extra":
                item = _without_credentials(item, "config.extra", redacted)
            _dumps(item)  # freeze now: what cannot be encoded is left out, not kept
        except (TypeError, ValueError, RecursionError) as exc:
            problems.append(f"config.{name}: {exc}")
        else:
            out[name] = item
    data[key] = {
        "messages": [codec.encode(m) for m in value.messages],
        "tools": list(value.tools),
        "config": out,
    }
    if problems:
        data["snapshot_error"] = "; ".join(problems)
    if redacted:
        data["redacted"] = redacted


def _without_credentials(value: Any, path: str, dropped: List[str]) -> Any:
    """A copy of *value* without the object keys that name credentials; their paths go to
    *dropped*."""
    if isinstance(value, RawJSON):
        value = _DECODER.decode(_compact(value))
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            step = f"{path}.{key}"
            if isinstance(key, str) and _CREDENTIAL_KEY.search(key):
                dropped.append(step)
            else:
                out[key] = _without_credentials(item, step, dropped)
        return out
    if isinstance(value, (list, tuple)):
        return [_without_credentials(item, f"{path}[{i}]", dropped) for i, item in enumerate(value)]
    return value


_Put = Callable[[Dict[str, Any], str, Any, Codec], None]
_PUTS: Dict[str, _Put] = {
    "execution": _put_execution,
    "turn_index": _put_int,
    "message": _put_codec,
    "partial_message": _put_codec,
    "request": _put_request,
    "tool_id": _put_text,
    "tool": _put_text,
    "tool_label": _put_text,
    "args": _put_json,
    "result": _put_json,
    "details": _put_json,
    "preview": _put_json,
    "is_error": _put_flag,
    "disposition": _put_text,
    "context_operation": _put_text,
    "context_items": _put_codec,
    "compaction": _put_codec,
    "retry": _put_retry,
    "summary": _put_summary,
    "recovery": _put_text,
    "error": _put_error,
}


def _projection(*names: str) -> Tuple[Tuple[str, _Put], ...]:
    return tuple((name, _PUTS[name]) for name in names)


_Projection = Tuple[Tuple[str, _Put], ...]
_EXEC_END_OK = _projection("execution", "message")
_EXEC_END_FAILED = _projection("execution", "partial_message", "error")
_EVERY_FIELD = _projection(*_PUTS)
_PROJECTIONS: Dict[str, Optional[_Projection]] = {  # None: not written (transient)
    "message_start": None,
    "message_update": None,
    "tool_exec_update": None,
    "model_stream": None,
    "model_response": _projection("execution", "recovery"),
    "model_request": _projection("execution", "request"),
    "model_exec_start": _projection("execution"),
    "model_exec_end": _EXEC_END_OK,
    "message_end": _projection("execution", "message"),
    "tool_queued": _projection("execution", "tool_id", "tool"),
    "tool_exec_start": _projection("execution", "tool_id", "tool", "tool_label", "args"),
    "tool_invoke_start": _projection("execution", "tool_id", "tool", "args"),
    "tool_invoke_end": _projection("execution", "tool_id", "tool", "is_error", "error"),
    "tool_exec_end": _projection(
        "execution", "tool_id", "tool", "tool_label", "result", "details", "is_error", "disposition", "error"
    ),
    "context_projected": _projection("execution", "context_items"),
    "context_compacted": _projection("execution", "compaction"),
    "context_prepare_start": _projection("execution", "context_operation", "error"),
    "context_prepare_end": _projection("execution", "context_operation", "error"),
    "retry": _projection("execution", "retry", "error"),
    "retry_wait_start": _projection("execution", "retry", "error"),
    "retry_wait_end": _projection("execution", "retry", "error"),
    "turn_start": _projection("turn_index"),
    "turn_end": _projection("turn_index", "error"),
    "agent_start": _projection(),
    "agent_end": _projection("summary", "error"),
    "error": _projection("error"),
}


def _event_data(event: Event, codec: Codec) -> Optional[Dict[str, Any]]:
    """The ``data`` that records *event*, or ``None`` when its type is not written."""
    kind = event.type
    projection = _PROJECTIONS.get(kind, _EVERY_FIELD)
    if projection is None or (kind == "model_response" and not event.recovery):
        return None
    if kind == "model_exec_end" and event.error is not None and event.error != "":
        projection = _EXEC_END_FAILED
    data: Dict[str, Any] = {}
    name = ""
    try:
        for name, put in projection:
            put(data, name, getattr(event, name), codec)
    except CodecError as exc:
        raise CodecError(f"{name}: {exc}") from exc
    if kind == "turn_end" and event.state is not None:
        data["committed"] = True
    return data


# ---------------------------------------------------------------------------- platform

_O_BINARY: int = getattr(os, "O_BINARY", 0)  # Windows would otherwise write "\r\n"

if sys.platform == "win32":
    import msvcrt

    # One byte far past any data: Windows locks are mandatory, and readers take none.
    _LOCK_OFFSET = 1 << 62

    def _lock(fd: int, name: str) -> None:
        os.lseek(fd, _LOCK_OFFSET, os.SEEK_SET)
        try:
            msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
        except OSError:
            raise LockedError(f"{name} is open for writing by another handle") from None

    def _unlock(fd: int) -> None:
        os.lseek(fd, _LOCK_OFFSET, os.SEEK_SET)
        msvcrt.locking(fd, msvcrt.LK_UNLCK, 1)

    def _sync_directory(name: str) -> None:
        """Nothing to do: NTFS journals directory entries, and a directory cannot be opened."""

    def _pread(fd: int, size: int, offset: int) -> bytes:
        os.lseek(fd, offset, os.SEEK_SET)  # callers hold the session lock
        return os.read(fd, size)

else:
    import fcntl

    def _lock(fd: int, name: str) -> None:
        # flock locks belong to the open file description, so a second open() in this
        # process conflicts too (fcntl/lockf locks would not).
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise LockedError(f"{name} is open for writing by another handle") from None

    def _unlock(fd: int) -> None:
        """Nothing to do: closing releases the lock, and an explicit unlock would also
        release it for a forked child's copy, or a parent's."""

    def _sync_directory(name: str) -> None:
        """Make a new directory entry durable (a file's fsync does not cover it)."""
        fd = os.open(os.path.dirname(os.path.abspath(name)), os.O_RDONLY)
        try:
            os.fsync(fd)
        except OSError as exc:
            if exc.errno != errno.EINVAL:  # a file system that cannot sync directories
                raise
        finally:
            os.close(fd)

    def _pread(fd: int, size: int, offset: int) -> bytes:
        return os.pread(fd, size, offset)


if sys.platform == "darwin":

    def _sync(fd: int) -> None:
        # macOS fsync reaches the drive but not its platter: F_FULLFSYNC flushes the cache.
        os.fsync(fd)
        try:
            fcntl.fcntl(fd, fcntl.F_FULLFSYNC)
        except OSError as exc:
            if exc.errno not in (errno.EINVAL, errno.ENOTSUP):
                raise

else:

    def _sync(fd: int) -> None:
        os.fsync(fd)


def _write_all(fd: int, data: Union[bytes, memoryview]) -> None:
    """One ``os.write`` loop: short writes are continued, never repeated."""
    done = os.write(fd, data)
    if done != len(data):
        view = memoryview(data)
        while done < len(view):
            more = os.write(fd, view[done:])
            if more <= 0:
                raise OSError(errno.EIO, "write made no progress")
            done += more


def _read_at(fd: int, offset: int, size: int) -> bytes:
    chunks = []
    while size > 0:
        chunk = _pread(fd, size, offset)
        if not chunk:
            break
        chunks.append(chunk)
        offset += len(chunk)
        size -= len(chunk)
    return b"".join(chunks)


def _release(fd: int) -> None:
    try:
        _unlock(fd)
    finally:
        os.close(fd)


def _name(path: Union[str, bytes, os.PathLike[str], os.PathLike[bytes]]) -> str:
    """A path as text, for messages and for the os calls alike."""
    return os.fsdecode(os.fspath(path))


def _new_id() -> str:
    """A random (version 4) UUID as 32 lowercase hex digits, as ``uuid.uuid4().hex`` gives."""
    raw = bytearray(os.urandom(16))
    raw[6] = raw[6] & 0x0F | 0x40  # version 4
    raw[8] = raw[8] & 0x3F | 0x80  # RFC 4122 variant
    return raw.hex()


# ---------------------------------------------------------------------------- writer

_SESSIONS: weakref.WeakSet[Session] = weakref.WeakSet()  # what a forked child must disown


class _CheckpointAt(NamedTuple):
    offset: int
    end: int
    seq: int
    run_id: str
    time: str


def _line_head(session_id: str) -> str:
    return f'{{"session_id":"{session_id}","seq":'  # every line starts so: seq and the rest follow


def create(
    path: Union[str, os.PathLike[str]],
    codec: Optional[Codec] = None,
    *,
    redact: Optional[Callable[[Dict[str, Any]], Dict[str, Any]]] = None,
    max_line_bytes: int = _MAX_LINE_BYTES,
) -> Session:
    """Create a new session file at *path* and return its writer.

    The file is made with mode 0600 and must not exist (``FileExistsError``); its first line,
    ``session_start``, is synced with the directory entry before this returns.  One file
    that exists is started afresh: what a ``create`` cut short by a crash leaves, a regular
    file of this user's, private (0600), holding only the start of a header or zeros
    (``open`` and ``repair`` refuse it: "no complete line"); ``LockedError`` while another
    ``create`` writes it.  *codec*
    encodes messages and checkpoints (default: ``JSONCodec()``).  *redact*, if given, takes
    each event's and checkpoint's JSON-ready ``data`` just before it is encoded and returns
    what to write instead.  A line longer than *max_line_bytes* is refused
    (``RecordingError``): the session never writes what its own ``open`` would reject.
    The codec and *redact* run under the session's lock: they should not call the session
    (if they do, the calls are done as a signal handler's are: see ``Session.close``).
    """
    name = _name(path)
    try:
        fd = os.open(name, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_APPEND | _O_BINARY, 0o600)
    except FileExistsError:
        taken = _take_over_torn(name)
        if taken is None:
            raise
        fd = taken
    else:
        try:
            _lock(fd, name)
        except LockedError:  # a create that takes over torn files got it first: it is theirs
            os.close(fd)
            raise
        except BaseException:
            os.close(fd)
            os.unlink(name)  # it is ours (O_EXCL) and holds nothing
            raise
        if os.fstat(fd).st_size:  # one took it over, wrote and closed it before this lock
            os.close(fd)
            raise FileExistsError(errno.EEXIST, "another create has written it", name)
    session_id = _new_id()
    header = _header(session_id, _utc_text(None))
    try:
        _write_all(fd, header)
        _sync(fd)
        _sync_directory(name)
    except BaseException as exc:
        _release(fd)
        with contextlib.suppress(OSError):  # the error below says what went wrong
            os.unlink(name)
        if isinstance(exc, Exception):
            raise RecordingError(f"{name}: cannot write the session header: {exc}") from exc
        raise
    return Session(name, fd, session_id, codec, redact, max_line_bytes, 1, len(header), None)


def _header(session_id: str, time: str) -> bytes:
    data = f'{{"version":{_FORMAT_VERSION}}}'
    return f'{_line_head(session_id)}1,"type":"session_start","time":"{time}","data":{data}}}\n'.encode()


_HEADER_BYTES = len(_header(32 * "0", "2000-01-01T00:00:00.000000Z"))


def _take_over_torn(name: str) -> Optional[int]:
    """The locked, emptied descriptor of the file at *name* if a crash cut its ``create``
    short, else ``None``.

    Such a file holds no complete line, so no record: nothing is lost by starting it again.
    Only what a ``create`` writes qualifies (a regular file, no symlink, private to this user
    as ``create`` makes it, shorter than a header, starting as one does or zeros, as some file
    systems leave after a power loss), so that a mistyped path never empties a file that is
    not a session's, and no one else can have the file open to read what is recorded next.
    """
    try:
        fd = os.open(name, os.O_RDWR | os.O_APPEND | _O_BINARY | getattr(os, "O_NOFOLLOW", 0))
    except OSError:  # a symlink, or a file this process may not write
        return None
    try:
        if _is_torn_header(fd):
            _lock(fd, name)  # LockedError: a create is writing it now
            if _is_torn_header(fd):  # looked again under the lock
                os.ftruncate(fd, 0)
                return fd
    except BaseException:
        os.close(fd)  # a lock taken above goes with it
        raise
    os.close(fd)
    return None


def _is_torn_header(fd: int) -> bool:
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        return False
    if sys.platform != "win32" and (info.st_uid != os.geteuid() or info.st_mode & 0o077):
        return False  # not as this user's create makes it (0600): another may have it open
    raw = _read_at(fd, 0, _HEADER_BYTES)
    start = b'{"session_id":"'
    torn = raw.startswith(start) or start.startswith(raw) or not raw.strip(b"\0")
    return torn and len(raw) < _HEADER_BYTES and b"\n" not in raw


def open(  # noqa: A001 - the contract's name; the builtin stays reachable as builtins.open
    path: Union[str, os.PathLike[str]],
    codec: Optional[Codec] = None,
    *,
    redact: Optional[Callable[[Dict[str, Any]], Dict[str, Any]]] = None,
    max_line_bytes: int = _MAX_LINE_BYTES,
) -> Session:
    """Open an existing session file at *path* to append to it.

    The whole file is validated first (``FormatError``, nothing changed, if any complete
    line is bad); an unfinished last line is then cut off and the cut synced.  Appending
    continues its ``seq``; an interrupted run stays incomplete.  *codec* and *redact* are as
    for ``create``; lines longer than *max_line_bytes* are a ``FormatError``.
    """
    name = _name(path)
    fd = os.open(name, os.O_RDWR | os.O_APPEND | _O_BINARY)
    try:
        _lock(fd, name)
        tally = _Tally()
        with builtins.open(fd, "rb", _READ_BUFFER, closefd=False) as f:
            f.seek(0)
            result = _read(f, name, max_line_bytes, tally)
        if result.tail_bytes:
            try:
                os.ftruncate(fd, result.complete_bytes)
                _sync(fd)
            except OSError as exc:
                raise RecordingError(f"{name}: cannot cut the unfinished last line: {exc}") from exc
    except BaseException:
        _release(fd)
        raise
    checkpoint = tally.latest_checkpoint(result)
    return Session(
        name,
        fd,
        result.session_id,
        codec,
        redact,
        max_line_bytes,
        result.records,
        result.complete_bytes,
        checkpoint,
    )


class _Pending(NamedTuple):
    """A line on its way into the file, and the open run and latest checkpoint once it is there."""

    line: bytes
    start: int
    seq: int
    run: Optional[Run]
    checkpoint: Optional[_CheckpointAt]


class Session:
    """The one writer of a session file; get one from ``create`` or ``open``.

    Safe to share between threads: every line is written whole, in ``seq`` order.  Safe to
    call from a signal handler too (see ``Session.close``).  After ``close()`` every method
    but ``close`` raises ``ValueError``.  A session dropped unclosed releases its file with a
    ``ResourceWarning``, as an unclosed ``io`` file does, and writes nothing more.
    """

    def __init__(
        self,
        path: str,
        fd: int,
        session_id: str,
        codec: Optional[Codec],
        redact: Optional[Callable[[Dict[str, Any]], Dict[str, Any]]],
        max_line_bytes: int,
        seq: int,
        size: int,
        checkpoint: Optional[_CheckpointAt],
    ) -> None:
        self.path = path
        self.session_id = session_id
        self._fd = fd  # -1 once closed
        self._codec: Codec = _DEFAULT_CODEC if codec is None else codec
        self._redact = redact
        self._max_line_bytes = max_line_bytes
        self._lock = RLock()  # re-entrant: a signal handler in a locked thread gets in (see _write)
        self._writing = False  # a write is under way (see _interrupting)
        self._later: Deque[Callable[[], object]] = deque()  # writes that interrupted _write wait here
        self._pending: Optional[_Pending] = None  # a write an exception may have cut short
        self._head = _line_head(session_id)
        self._seq = seq
        self._size = size
        self._checkpoint = checkpoint
        self._run: Optional[Run] = None  # the run open in the file
        self._ending: Optional[Run] = None  # a run whose run_close is decided, maybe not written yet
        self._closing = False  # close() has begun: no new records
        self._failure: Optional[Exception] = None
        _SESSIONS.add(self)

    def __repr__(self) -> str:
        state = "closed" if self._fd < 0 else "failed" if self._failure else "open"
        return f"<session.Session {self.path!r} {self.session_id} {state}>"

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __del__(self) -> None:
        # What io does for an unclosed file: warn, and let go of the descriptor, and so of the
        # lock.  Nothing is written or synced: this runs whenever the collector does, in any
        # thread or at exit, where a write's or a slow fsync's error could only be printed, and
        # a run_close would claim an end the program never reached.  What was written is in the
        # operating system's hands already and outlives the descriptor; the open run reads as
        # interrupted, which it was.
        fd = getattr(self, "_fd", -1)  # __init__ may not have got that far
        if fd >= 0:
            self._fd = -1
            self._closing = True
            warnings.warn(f"unclosed session {self.path!r}", ResourceWarning, stacklevel=2, source=self)
            _release(fd)

    def begin_run(self) -> Run:
        """Start a run with a fresh ``run_id``; ``RunOpenError`` while another is open.

        ``RuntimeError`` from a signal handler that interrupted a write of this session.
        """
        with self._lock:
            self._check_no_run()
            if self._interrupting():  # the new run would start only after the write under way
                raise RuntimeError(f"{self.path}: begin_run cannot interrupt a write to its session")
            run = Run(self, _new_id())
            self._write(
                self._check_no_run, lambda: self._append(run.run_id, "run_start", _utc_text(None), "{}", run)
            )
        return run

    def sync(self) -> None:
        """Flush every record written so far to stable storage (fsync)."""
        with self._lock:
            self._check(None)
            self._sync()

    def load_checkpoint(self) -> Optional[Checkpoint]:
        """The latest checkpoint of this file, decoded with the session's codec, or ``None``.

        It is read from where it lies, not searched for.  Loading starts nothing: the host
        rebinds its model, tools and configuration and installs the snapshot itself.
        """
        with self._lock:
            if self._fd < 0:  # closed; a failed session stays readable
                self._check(None)
            at = self._checkpoint
            if at is None:
                return None
            raw = _read_at(self._fd, at.offset, at.end - at.offset)
        return Checkpoint(self._codec.decode(_snapshot_of(raw, self.path, at)), at.seq, at.run_id, at.time)

    def close(self) -> None:
        """Close an open run, sync, and release the file and its lock.

        Idempotent; raises ``RecordingError`` (again) if recording failed, after releasing.
        A signal handler may call this (or ``record``, ``save_checkpoint``, ``sync``) at any
        moment.  If it interrupted a write of this session in its own thread, what is written
        is synced at once, and the rest (``run_close``, the last sync, the release) is done
        right after the interrupted line: before that call returns, or unwinds from the
        handler's ``sys.exit``.  Only ``os._exit`` in the handler would skip it.
        """
        with self._lock:
            if self._fd >= 0:
                try:
                    if self._failure is None and self._interrupting():
                        self._sync()  # what is written is safe, even if the handler ends the process
                finally:
                    self._write(self._decide_close, self._close_now)
            self._check_failure()

    # Everything below runs with self._lock held.

    def _check(self, run: Optional[Run]) -> None:
        self._check_failure()
        if self._closing:
            raise ValueError(f"{self.path}: session is closed")
        if run is not None and (run is not self._run or run is self._ending):
            raise ValueError(f"{self.path}: run {run.run_id} is closed")

    def _check_no_run(self) -> None:
        self._check(None)
        if self._run is not None:
            raise RunOpenError(f"{self.path}: run {self._run.run_id} is still open; close it first")

    def _check_failure(self) -> None:
        if self._failure is not None:
            raise RecordingError(
                f"{self.path}: recording failed earlier ({self._failure!r}); nothing more is written"
            ) from self._failure

    def _fail(self, exc: Exception, what: str) -> RecordingError:
        """Make *exc* the sticky failure; the caller raises what this returns."""
        if self._failure is None:
            self._failure = exc
        self._pending = None  # nothing more is written
        return RecordingError(f"{self.path}: {what}: {exc}")

    def _write(self, check: Callable[[], None], write: Callable[[], object]) -> None:
        """Run *check*, then *write* now, or right after the write this thread is in.

        The lock is re-entrant, so a signal handler that interrupts this thread's own write
        gets in, at any point of it: even after ``os.write`` returned and before the seq moved
        on.  Writing then would repeat that seq, so its *write* waits in ``_later``, checked
        now (it raises now) and done in order as soon as the write under way is, by
        ``_finish``: also when the handler raised (``sys.exit``).
        """
        if self._interrupting():
            check()
            self._later.append(write)
            return
        self._writing = True
        try:
            if self._pending is not None:
                self._settle()
            check()
            self._later.append(write)  # after what a _finish cut short left there: in order
        finally:
            self._writing = False
            self._finish()

    def _finish(self) -> None:
        """Do the queued writes in order, each marked as under way while it runs: a call that
        interrupts one waits for it, and one that comes between two writes is done at once.

        An exception that cuts this loop short (a second handler's ``sys.exit`` between two
        writes) leaves the rest queued, and the session's next call does them first.
        """
        first: Optional[BaseException] = None
        while True:
            self._writing = True
            try:
                if not self._later:
                    break
                if self._pending is not None:
                    self._settle()
                self._later.popleft()()
            except BaseException as exc:  # noqa: BLE001 - a handler's sys.exit too: do the rest first
                first = first or exc
            finally:
                self._writing = False
        if first is not None:
            raise first

    def _interrupting(self) -> bool:
        """Whether this call interrupted a write of this session in this thread: a signal
        handler's, or the codec's.  The mark alone could be stale, where an exception cut a
        write's ``finally`` short (Python 3.8-3.10 check for signals there too): the stack
        has the last word, and a stale mark is cleared, never left to queue calls for ever."""
        if not self._writing:
            return False
        frame: Optional[types.FrameType] = sys._getframe(2)  # above this and its caller
        while frame is not None:
            if frame.f_code is _WRITE_CODE and frame.f_locals.get("self") is self:
                return True
            frame = frame.f_back
        self._writing = False
        return False

    def _settle(self) -> None:
        """Bring the state up to the file after a write that an exception (a signal handler's,
        raised anywhere in it) cut short: its line is in the file whole, in part, or not at all."""
        pending = self._pending
        assert pending is not None
        try:
            size = os.fstat(self._fd).st_size
            end = pending.start + len(pending.line)
            if pending.start < size < end:  # continue it, never repeat it
                _write_all(self._fd, memoryview(pending.line)[size - pending.start :])
        except OSError as exc:
            raise self._fail(exc, "cannot write") from exc
        if size > pending.start:
            self._seq, self._size, self._run = pending.seq, end, pending.run
            self._checkpoint = pending.checkpoint
        self._pending = None

    def _append(
        self, run_id: str, kind: str, time: str, data: str, run: Optional[Run], sync: bool = False
    ) -> None:
        """Write one record with the next seq, after which *run* is open."""
        self._check_failure()  # an interrupting call may have failed the session
        seq = self._seq + 1
        text = (
            f'{self._head}{seq},"type":{_quote(kind)},"time":"{time}","run_id":"{run_id}","data":{data}}}\n'
        )
        try:
            line = text.encode()
        except UnicodeEncodeError:  # a lone surrogate: escape it, and the file stays UTF-8
            line = _escaped_utf8(text)
        if len(line) > self._max_line_bytes + 1:
            too_long = ValueError(f"a line of {len(line) - 1} bytes is longer than max_line_bytes")
            raise self._fail(too_long, "cannot write") from too_long
        offset = self._size
        end = offset + len(line)
        at = _CheckpointAt(offset, end, seq, run_id, time) if kind == "checkpoint" else self._checkpoint
        self._pending = _Pending(line, offset, seq, run, at)
        try:
            done = os.write(self._fd, line)
            if done != len(line):  # a short write: continue it, never repeat it
                _write_all(self._fd, memoryview(line)[done:])
        except Exception as exc:  # not KeyboardInterrupt or SystemExit: _settle sees to those
            raise self._fail(exc, "cannot write") from exc
        self._seq, self._size, self._run = seq, end, run
        if sync:
            self._sync()
        # A checkpoint is the latest once synced (a failed sync clears _pending); if an
        # exception cuts this short, _settle makes it so as it finds the line in the file.
        self._checkpoint, self._pending = at, None

    def _decide_close(self) -> None:
        self._closing = True

    def _close_now(self) -> None:
        if self._fd < 0:  # an interrupting close() queued after this one
            return
        try:
            if self._failure is None:
                if self._run is not None:
                    self._append(self._run.run_id, "run_close", _utc_text(None), "{}", None)
                self._sync()
        finally:
            fd, self._fd, self._run, self._pending = self._fd, -1, None, None
            try:
                _release(fd)
            except OSError as exc:  # NFS reports write errors here
                raise self._fail(exc, "cannot close") from exc

    def _sync(self) -> None:
        try:
            _sync(self._fd)
        except Exception as exc:
            raise self._fail(exc, "cannot sync") from exc

    def _data_text(self, data: Dict[str, Any]) -> str:
        """*data* passed through the redactor, then encoded; ``ValueError`` names a bad key."""
        if self._redact is not None:
            data = self._redact(data)
            if type(data) is not dict:
                raise TypeError(f"redact must return a dict, not {type(data).__name__}")
        try:
            return _dumps(data)
        except (
            TypeError,
            ValueError,
        ) as exc:  # not RecursionError: encoding again could overflow the stack for good
            bad = next((key for key, value in data.items() if not _encodable(value)), None)
            raise ValueError(f"data.{bad}: {exc}" if bad else str(exc)) from exc

    def _forked(self) -> None:
        """In a forked child: never write through the parent's descriptor, nor keep it (the
        lock lives as long as any copy of it: the parent could not open the file again)."""
        self._lock = RLock()
        self._writing, self._later, self._pending = False, deque(), None  # another thread's, gone
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
            self._failure = self._failure or RecordingError(
                f"{self.path}: this handle belongs to process {os.getppid()}"
            )


_WRITE_CODE = Session._write.__code__


def _snapshot_of(raw: bytes, name: str, at: _CheckpointAt) -> Any:
    """The JSON snapshot on the checkpoint line *raw*, read back from where *at* says."""
    obj = _parse_line(raw, name, at.seq, at.offset) if raw.endswith(b"\n") else {}
    if obj.get("seq") != at.seq or obj.get("type") != "checkpoint":
        raise FormatError("checkpoint record changed while it was read", name, at.seq, at.offset)
    data = obj.get("data")
    if type(data) is not dict or "snapshot" not in data:
        raise FormatError("checkpoint record has no data.snapshot", name, at.seq, at.offset)
    return data["snapshot"]


def _encodable(value: Any) -> bool:
    try:
        _dumps(value)
    except (TypeError, ValueError, RecursionError):
        return False
    return True


def _after_fork_in_child() -> None:
    for session in list(_SESSIONS):
        session._forked()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


class Run:
    """One loop invocation inside a session; get one from ``Session.begin_run``.

    Safe to share between threads.  After ``close()``, ``record`` and ``save_checkpoint``
    raise ``ValueError``; ``ref`` always works.
    """

    def __init__(self, session: Session, run_id: str) -> None:
        self._session = session
        self.run_id = run_id
        self.session_id = session.session_id

    def __repr__(self) -> str:
        return f"<session.Run {self.run_id} of {self.session_id}>"

    def __enter__(self) -> Run:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def record(self, event: Event) -> bool:
        """Append *event* as one line; ``False`` when its type is not written (transient).

        ``ValueError`` for a reserved type and ``TypeError`` for a type that is not a
        non-empty string (nothing written, nothing sticky).  An encoding or write failure
        raises ``RecordingError`` and ends recording for the whole session.
        """
        if not isinstance(event, Event):
            raise TypeError(f"record takes an Event, not {type(event).__name__}")
        kind = event.type
        if type(kind) is not str or not kind:
            raise TypeError(f"event type must be a non-empty str, not {kind!r}")
        if kind in _RESERVED:
            raise ValueError(f"{kind!r} is a reserved record type")
        session = self._session
        # Encoding under the lock too: threads then wait on the lock, not for the GIL while
        # holding it around a write (measured: 8 threads keep 0.7x, not 0.3x, of one thread's pace).
        with session._lock:
            session._check(self)
            try:
                data = _event_data(event, session._codec)
                if data is None:
                    return False
                text = session._data_text(data)
                time = _utc_text(event.timestamp)
            except Exception as exc:
                raise session._fail(exc, f"cannot encode a {kind} event") from exc
            # checked again: a signal handler (or the codec) may have closed the run meanwhile
            session._write(
                lambda: session._check(self), lambda: session._append(self.run_id, kind, time, text, self)
            )
        return True

    def ref(self, execution: Execution) -> CallRef:
        """The ``CallRef`` of *execution* in this run (pure; works after close too)."""
        return CallRef(self.session_id, self.run_id, execution.id, execution.attempt)

    def save_checkpoint(self, snapshot: Any) -> None:
        """Append *snapshot*, codec-encoded, as a checkpoint, and sync it with every record
        before it.  ``Session.load_checkpoint`` returns the latest.  From a signal handler
        that interrupted a write of this session, it is written and synced right after the
        interrupted line (see ``Session.close``)."""
        session = self._session
        with session._lock:
            session._check(self)
            time = _utc_text(None)
            try:
                text = session._data_text({"snapshot": session._codec.encode(snapshot)})
            except Exception as exc:
                raise session._fail(exc, "cannot encode the checkpoint") from exc
            session._write(
                lambda: session._check(self),
                lambda: session._append(self.run_id, "checkpoint", time, text, self, sync=True),
            )

    def close(self) -> None:
        """Write ``run_close`` and sync.  Idempotent; ``RecordingError`` if recording failed."""
        session = self._session
        with session._lock:
            session._check_failure()
            if session._run is self:
                session._write(self._decide_close, self._close_now)

    def _decide_close(self) -> None:
        self._session._ending = self

    def _close_now(self) -> None:
        session = self._session
        if session._run is self and session._fd >= 0:  # not closed by a call that interrupted this one
            session._append(self.run_id, "run_close", _utc_text(None), "{}", None, sync=True)


# ---------------------------------------------------------------------------- reader

_Source = Union[str, bytes, "os.PathLike[str]", BinaryIO]


def read(
    source: _Source, visit: Callable[[Record], object], *, max_line_bytes: int = _MAX_LINE_BYTES
) -> ReadResult:
    """Validate *source* as it streams and call *visit* with each complete record.

    *source* is a path or a binary file (read from its current position; offsets count from
    the file's start).  One line is held at a time; a line longer than *max_line_bytes* is a
    ``FormatError``, as is any other violation, after the records before it were visited.  An
    exception from *visit* stops the read and propagates.
    """
    with _opened(source) as (f, name):
        return _read(f, name, max_line_bytes, visit)


def iter_records(source: _Source, *, max_line_bytes: int = _MAX_LINE_BYTES) -> Iterator[Record]:
    """Yield the complete records of *source* as ``read`` validates them."""
    with _opened(source) as (f, name):
        yield from _records(f, name, max_line_bytes, [])


@contextlib.contextmanager
def _opened(source: _Source) -> Iterator[Tuple[BinaryIO, Optional[str]]]:
    if hasattr(source, "read"):
        if isinstance(source, io.TextIOBase):
            raise TypeError("a session is read from a binary file (mode 'rb'), not a text file")
        name = getattr(source, "name", None)
        yield source, name if isinstance(name, str) else None  # type: ignore[misc]
    else:
        name = _name(source)
        with builtins.open(name, "rb", _READ_BUFFER) as f:
            yield f, name


class _Lines(Protocol):
    """What the reader needs of a binary file."""

    def tell(self) -> int: ...

    def readline(self, size: int = -1, /) -> bytes: ...


def _read(
    f: _Lines, name: Optional[str], max_line_bytes: int, visit: Callable[[Record], object]
) -> ReadResult:
    result: List[ReadResult] = []
    try:
        for record in _records(f, name, max_line_bytes, result):
            visit(record)
    except FormatError as exc:  # from visit too (say, EventData.from_record): name the file
        if exc.path is None:
            exc.path = name
        raise
    return result[0]


def _records(
    f: _Lines, name: Optional[str], max_line_bytes: int, result: List[ReadResult]
) -> Iterator[Record]:
    """The reader: yields each record once its line passed every rule, then appends the
    ``ReadResult`` to *result*."""
    try:
        base = f.tell()
    except (OSError, ValueError):  # a pipe: offsets count from where reading started
        base = 0
    limit = max_line_bytes + 1
    readline = f.readline
    raw = readline(limit)
    if raw[-1:] != b"\n":
        raise _unfinished(
            raw,
            limit,
            name,
            1,
            base,
            "no complete line: not a session file, or one whose create was cut short (create replaces it)",
        )
    header = _parse_line(raw, name, 1, base)
    session_id = _check_header(header, name, base)
    new = tuple.__new__  # Record(...) without the Python-level __new__: this loop is hot
    yield new(Record, (session_id, 1, "session_start", header["time"], None, header["data"], base))
    seq = 1
    offset = base + len(raw)
    open_run = None
    seen: Set[str] = set()
    while True:
        raw = readline(limit)
        if raw[-1:] != b"\n":
            break
        obj = _parse_line(raw, name, seq + 1, offset)
        run_id = obj.get("run_id")
        kind = obj.get("type")
        time = obj.get("time")
        data = obj.get("data")
        n = obj.get("seq")
        if (
            type(n) is not int
            or n != seq + 1
            or obj.get("session_id") != session_id
            or type(kind) is not str
            or type(time) is not str
            or type(run_id) is not str
            or type(data) is not dict
        ):
            raise FormatError(_envelope_problem(obj, session_id, seq + 1), name, seq + 1, offset)
        if kind == "run_start":
            if run_id in seen:
                raise FormatError(f"run_start reuses run_id {run_id!r}", name, seq + 1, offset)
            seen.add(run_id)
            open_run = run_id
        elif run_id != open_run or kind == "session_start":
            raise FormatError(_run_problem(kind, run_id, open_run, seen), name, seq + 1, offset)
        elif kind == "run_close":
            open_run = None
        seq += 1
        yield new(Record, (session_id, seq, kind, time, run_id, data, offset))
        offset += len(raw)
    if raw:
        _unfinished(raw, limit, name, seq + 1, offset, "")
    result.append(ReadResult(session_id, seq, offset - base, len(raw)))


def _unfinished(
    raw: bytes, limit: int, name: Optional[str], line: int, offset: int, reason: str
) -> FormatError:
    """The error for a line without newline: too long (raised here), or *reason*."""
    if len(raw) >= limit:
        raise _LineTooLong(f"line longer than max_line_bytes ({limit - 1})", name, line, offset)
    return FormatError(reason, name, line, offset)


class _LineTooLong(FormatError):
    """A line longer than ``max_line_bytes``: not necessarily a bad one."""


def _parse_line(raw: bytes, name: Optional[str], line: int, offset: int) -> Dict[str, Any]:
    """The object on one line (*raw* ends with its newline), or ``FormatError``."""
    try:
        text = raw.decode()
    except UnicodeDecodeError as exc:
        raise FormatError(f"invalid UTF-8 at byte {exc.start} of the line", name, line, offset) from None
    deep = False
    try:
        obj, end = _scan_once(text, 0)  # json.loads without its Python-level wrapping
    except (StopIteration, ValueError):
        end = -1
    except RecursionError:
        end, deep = -1, True
    if end != len(text) - 1:  # an error, or whitespace around the value: ask the full decoder
        try:
            obj = _decode_anywhere(text[:-1], deep)
        except json.JSONDecodeError as exc:  # "Invalid control character at": json adds a position
            problem = exc.msg[:-3] if exc.msg.endswith(" at") else exc.msg
            raise FormatError(f"invalid JSON: {problem} at column {exc.colno}", name, line, offset) from None
        except ValueError as exc:  # NaN, Infinity, an integer too long to convert
            raise FormatError(f"invalid JSON: {exc}", name, line, offset) from None
        except RecursionError:
            raise FormatError("invalid JSON: nested too deeply", name, line, offset) from None
    if type(obj) is not dict:
        raise FormatError(f"line holds {_json_kind(type(obj))}, not an object", name, line, offset)
    return obj


def _decode_anywhere(text: str, deep: bool = False) -> Any:
    """``json.loads``, strict, whose outcome does not depend on the caller's stack depth.

    Deep nesting counts against the recursion limit: a text known to be *deep*, or found so
    here, is decoded in a new thread, whose count starts at zero.  (Never twice that deep in
    a row in one thread: right after a RecursionError, that has aborted CPython 3.8 with
    "Cannot recover from stack overflow".)
    """
    if not deep:
        try:
            return _DECODER.decode(text)
        except RecursionError:
            pass
    return _on_fresh_stack(_DECODER.decode, text)


def _on_fresh_stack(call: Callable[..., Any], *args: Any) -> Any:
    """``call(*args)`` in a new thread, whose recursion count starts at zero; its
    ``ValueError`` or ``RecursionError`` is raised here."""
    outcome: List[Tuple[bool, Any]] = []

    def run() -> None:
        try:
            outcome.append((True, call(*args)))
        except (ValueError, RecursionError) as exc:
            outcome.append((False, exc))

    import threading  # only here: importing it costs every session's start up

    thread = threading.Thread(target=run, name="session-deep-value")
    thread.start()
    thread.join()
    done, value = outcome[0]
    if not done:
        raise value
    return value


def _check_header(obj: Dict[str, Any], name: Optional[str], offset: int) -> str:
    """Line 1's session_id, once the line passed rule 3."""
    data = obj.get("data")
    version = data.get("version") if type(data) is dict else None
    if obj.get("type") != "session_start":
        problem = f"line 1 must be a session_start record, found type {obj.get('type')!r}"
    elif type(version) is not int:
        problem = "session_start needs an integer data.version"
    elif version != _FORMAT_VERSION:
        raise UnsupportedVersionError(version, name, 1, offset)
    elif "run_id" in obj:
        problem = "session_start carries no run_id"
    else:
        problem = _envelope_problem(obj, None, 1)
    if problem:
        raise FormatError(problem, name, 1, offset)
    return obj["session_id"]  # type: ignore[no-any-return]


_ENVELOPE = (("session_id", str), ("seq", int), ("type", str), ("time", str), ("data", dict))


def _envelope_problem(obj: Dict[str, Any], session_id: Optional[str], seq: int) -> str:
    """What is wrong with the envelope of line *seq* (``""`` when nothing is: line 1 only)."""
    for key, kind in _ENVELOPE:
        if key not in obj:
            return f"missing key {key!r}"
        if type(obj[key]) is not kind:
            return f"{key} must be {_json_kind(kind)}, found {_json_kind(type(obj[key]))}"
    if obj["seq"] != seq:
        return f"seq {seq} expected, found {obj['seq']}"
    if session_id is None:
        return ""
    if obj["session_id"] != session_id:
        return f"session_id {obj['session_id']!r} differs from line 1's {session_id!r}"
    if obj["type"] == "session_start":
        return "session_start is allowed on line 1 only"
    if "run_id" not in obj:
        return "missing key 'run_id'"
    return f"run_id must be a string, found {_json_kind(type(obj['run_id']))}"


def _run_problem(kind: str, run_id: str, open_run: Optional[str], seen: Set[str]) -> str:
    if kind == "session_start":
        return "session_start is allowed on line 1 only"
    if run_id not in seen:
        return f"run_id {run_id!r} has no run_start"
    if open_run is None:
        return f"run {run_id!r} is already closed"
    return f"record for run {run_id!r} after run {open_run!r} started"


class _Tally:
    """Counts runs and checkpoints as records stream by (for ``validate``), and keeps where
    the latest checkpoint lies (for ``open``)."""

    def __init__(self) -> None:
        self.runs = 0
        self.closed_runs = 0
        self.checkpoints = 0
        self._latest: Optional[Record] = None
        self._latest_end: Optional[int] = None

    def __call__(self, record: Record) -> None:
        if self._latest_end is None and self._latest is not None:
            self._latest_end = record.offset
        kind = record.type
        if kind == "run_start":
            self.runs += 1
        elif kind == "run_close":
            self.closed_runs += 1
        elif kind == "checkpoint":
            self.checkpoints += 1
            self._latest = record._replace(data={})  # where it is, not what it holds
            self._latest_end = None

    def latest_checkpoint(self, result: ReadResult) -> Optional[_CheckpointAt]:
        at = self._latest
        if at is None:
            return None
        end = result.complete_bytes if self._latest_end is None else self._latest_end
        return _CheckpointAt(at.offset, end, at.seq, at.run_id or "", at.time)


# ---------------------------------------------------------------------------- analysis


@dataclasses.dataclass(frozen=True)
class RunInfo:
    """One run of a session: its records' seq span and times (the ``run_start``'s and the
    last record's), whether it was closed, and its ``agent_end``'s end reason and error."""

    run_id: str
    first_seq: int
    last_seq: int
    start_time: str
    end_time: str
    records: int
    closed: bool
    end_reason: str
    error: Optional[Dict[str, Any]]


@dataclasses.dataclass(frozen=True)
class Gap:
    """Missing evidence: *kind* is ``run_not_closed``, ``no_agent_end``,
    ``model_call_unfinished`` or ``tool_call_unfinished``; *seq* is the record that opened
    it; *ref* the call to look up (``None`` for the first two)."""

    kind: str
    run_id: str
    seq: int
    ref: Optional[CallRef]


@dataclasses.dataclass(frozen=True)
class Summary:
    """What ``summarize`` found in one session file; *uninterpreted* counts the records it
    needed to read whose data is not of the shape the format writes (left out of the rest)."""

    session_id: str
    records: int
    counts: Dict[str, int]
    runs: List[RunInfo]
    checkpoints: int
    gaps: List[Gap]
    usage: Dict[str, int]
    tail_bytes: int
    uninterpreted: int = 0


def find(source: _Source, ref: CallRef, *, max_line_bytes: int = _MAX_LINE_BYTES) -> List[Record]:
    """Every record of the call *ref* in *source*, in file order (validating as ``read`` does)."""
    found: List[Record] = []

    def visit(record: Record) -> None:
        if record.run_id == ref.run_id and _call_ref(record) == ref:
            found.append(record)

    read(source, visit, max_line_bytes=max_line_bytes)
    return found


def summarize(source: _Source, *, max_line_bytes: int = _MAX_LINE_BYTES) -> Summary:
    """Runs, record counts, checkpoints, token usage and evidence gaps of *source*, in one
    streaming pass (memory grows with the runs and the calls still open, not the file).
    Works on every file ``read`` accepts: data of a shape the format does not write is
    counted in ``Summary.uninterpreted``, not an error."""
    tally = _Summarizer()
    result = read(source, tally, max_line_bytes=max_line_bytes)
    return tally.summary(result)


def _call_ref(record: Record) -> Optional[CallRef]:
    """``record.ref``, or ``None`` when its ``data.execution`` is not of the format's shape."""
    try:
        return record.ref
    except FormatError:
        return None


class _RunState:
    """What ``summarize`` keeps of one run while it streams."""

    def __init__(self, record: Record) -> None:
        self.start = record
        self.last = record
        self.records = 0
        self.closed = False
        self.end_reason = ""
        self.error: Optional[Dict[str, Any]] = None
        self.agent_start: Optional[int] = None  # seq of the first agent_start not yet ended
        self.open_calls: Dict[Tuple[str, CallRef], int] = {}  # (gap kind, ref) -> opening seq


_OPENS = {
    "model_exec_start": "model_call_unfinished",
    "model_request": "model_call_unfinished",
    "tool_exec_start": "tool_call_unfinished",
}
_CLOSES = {"model_exec_end": "model_call_unfinished", "tool_exec_end": "tool_call_unfinished"}


class _Summarizer:
    def __init__(self) -> None:
        self.counts: Dict[str, int] = {}
        self.runs: Dict[str, _RunState] = {}
        self.usage: Dict[str, int] = {}
        self.uninterpreted = 0

    def __call__(self, record: Record) -> None:
        kind = record.type
        self.counts[kind] = self.counts.get(kind, 0) + 1
        if record.run_id is None:
            return
        if kind == "run_start":
            self.runs[record.run_id] = _RunState(record)
        run = self.runs[record.run_id]
        run.last = record
        run.records += 1
        try:
            self._interpret(record, run)
        except FormatError:  # data the format does not write: counted, never a failure
            self.uninterpreted += 1

    def _interpret(self, record: Record, run: _RunState) -> None:
        """Take what the summary needs from *record*; ``FormatError`` before changing anything
        when its data is not of the format's shape."""
        kind = record.type
        if kind == "run_close":
            run.closed = True
        elif kind == "agent_start":
            if run.agent_start is None:
                run.agent_start = record.seq
        elif kind == "agent_end":
            data = EventData.from_record(record)
            run.agent_start = None
            run.end_reason = data.summary.end_reason if data.summary else ""
            run.error = data.error
        elif kind in _OPENS:
            ref = record.ref
            if ref is not None:
                run.open_calls.setdefault((_OPENS[kind], ref), record.seq)
        elif kind in _CLOSES:
            ref = record.ref
            if ref is not None:
                run.open_calls.pop((_CLOSES[kind], ref), None)
            if kind == "model_exec_end" and "error" not in record.data:
                self._add_usage(record.data.get("message"))

    def _add_usage(self, message: Any) -> None:
        value = message.get("value") if type(message) is dict else None
        usage = value.get("usage") if type(value) is dict else None
        if type(usage) is dict:
            for key, count in usage.items():
                if type(count) is int:
                    self.usage[key] = self.usage.get(key, 0) + count

    def summary(self, result: ReadResult) -> Summary:
        runs, gaps = [], []
        for run_id, run in self.runs.items():
            runs.append(
                RunInfo(
                    run_id,
                    run.start.seq,
                    run.last.seq,
                    run.start.time,
                    run.last.time,
                    run.records,
                    run.closed,
                    run.end_reason,
                    run.error,
                )
            )
            if not run.closed:
                gaps.append(Gap("run_not_closed", run_id, run.start.seq, None))
            if run.agent_start is not None:
                gaps.append(Gap("no_agent_end", run_id, run.agent_start, None))
            gaps += [Gap(kind, run_id, seq, ref) for (kind, ref), seq in run.open_calls.items()]
        gaps.sort(key=lambda gap: gap.seq)
        checkpoints = self.counts.get("checkpoint", 0)
        return Summary(
            result.session_id,
            result.records,
            self.counts,
            runs,
            checkpoints,
            gaps,
            self.usage,
            result.tail_bytes,
            self.uninterpreted,
        )


# ---------------------------------------------------------------------------- repair


class RepairResult(NamedTuple):
    """What ``repair`` did: *kept_records* before the cut, *dropped_bytes* from the cut to
    the old end, the untouched copy at *backup_path*, and the *error* that set the cut (both
    ``None`` when the file was valid and nothing changed)."""

    kept_records: int
    dropped_bytes: int
    backup_path: Optional[str]
    error: Optional[FormatError]


def repair(path: Union[str, os.PathLike[str]], *, max_line_bytes: int = _MAX_LINE_BYTES) -> RepairResult:
    """Keep every record before the first bad line of the session file at *path*; drop the rest.

    For a file that ``open`` refuses because a crash left garbage or a NUL run in it.  The
    untouched file is first copied to ``FILE.broken-<UTC time>`` and synced; then the file is
    cut at the first bad line and synced.  Takes the writer's lock (``LockedError`` while a
    session has the file open).  A valid file is left as it is, unfinished tail included.  A
    file whose first line is bad cannot be repaired: ``FormatError``.  Nothing else in this
    module rewrites a file.
    """
    name = _name(path)
    fd = os.open(name, os.O_RDWR | _O_BINARY)
    try:
        _lock(fd, name)
        with builtins.open(fd, "rb", _READ_BUFFER, closefd=False) as f:
            f.seek(0)
            try:
                result = _read(f, name, max_line_bytes, lambda record: None)
            except FormatError as exc:
                error = exc
            else:
                return RepairResult(result.records, 0, None, None)
        cut = error.offset
        if error.line == 1 or cut is None:
            raise error
        if isinstance(error, _LineTooLong):  # maybe a valid line: cutting it is not for a default to decide
            raise FormatError(
                f"{error.reason}; not cut: repair with a larger max_line_bytes", *error.args[1:]
            )
        size = os.fstat(fd).st_size
        backup = _backup(fd, name)
        try:
            if os.fstat(fd).st_size != size or os.stat(backup).st_size != size:
                raise OSError(errno.EAGAIN, "the file changed while it was copied; nothing was cut")
            os.ftruncate(fd, cut)
            _sync(fd)
            _sync_directory(name)
        except OSError as exc:
            raise RecordingError(
                f"{name}: cannot cut at offset {cut} (the original is in {backup}): {exc}"
            ) from exc
        return RepairResult(error.line - 1 if error.line else 0, size - cut, backup, error)
    finally:
        _release(fd)


def _backup(fd: int, name: str) -> str:
    """Copy the file open at *fd* to a new ``NAME.broken-<UTC time>[-N]``, synced with its
    directory entry; the path of the copy."""
    stamp = f"{name}.broken-{datetime.now(timezone.utc):%Y%m%dT%H%M%SZ}"
    for n in range(1, 1000):
        backup = stamp if n == 1 else f"{stamp}-{n}"
        try:
            out = os.open(backup, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _O_BINARY, 0o600)
            break
        except FileExistsError:
            continue
    else:
        raise FileExistsError(errno.EEXIST, "too many backups", stamp)
    try:
        offset = 0
        while chunk := _pread(fd, 1 << 20, offset):
            _write_all(out, chunk)
            offset += len(chunk)
        _sync(out)
    except BaseException:
        os.close(out)
        os.unlink(backup)  # a partial copy is no backup
        raise
    os.close(out)
    _sync_directory(backup)
    return backup


# ---------------------------------------------------------------------------- command line


def main(argv: Optional[Sequence[str]] = None) -> int:
    """The command line, ``python -m session`` (installed: ``session-jsonl``); returns the exit
    status: 0, 1 as each command's ``--help`` says, 2 for a usage error, 74 when the output
    cannot be written, 130 when interrupted."""
    import argparse

    # Installed, the console script calls main() from a module imported as "session".
    prog = (
        "python -m session" if argv is not None or __name__ == "__main__" else os.path.basename(sys.argv[0])
    )
    class Parser(argparse.ArgumentParser):
        def error(self, message: str) -> typing.NoReturn:  # it quotes arguments: "-\x1b[2J.jsonl"
            super().error(_for_terminal(message))

    parser = Parser(prog=prog, description=(__doc__ or "").split("\n", 1)[0])
    parser.add_argument("--version", action="version", version=f"session.py {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    commands.required = True

    def command(name: str, handler: Callable[[Any], int], about: str, status: str, many: bool = False) -> Any:
        epilog = f"exit status: {status}; 2 usage error; {_EX_IOERR} output not written; 130 interrupted"
        sub = commands.add_parser(name, help=about, description=about, epilog=epilog)
        stdin = "- reads stdin" if name in _READS_STDIN else None
        sub.add_argument("files" if many else "file", nargs="+" if many else None, metavar="FILE", help=stdin)
        sub.add_argument(
            "--max-line-bytes",
            type=int,
            default=_MAX_LINE_BYTES,
            metavar="N",
            help="longest line read, in bytes (default: %(default)s, 256 MiB)",
        )
        sub.set_defaults(handler=handler)
        return sub

    check = command(
        "validate",
        _validate_command,
        "check session files against the format",
        "0 every file valid; 1 any invalid or unreadable (all are checked)",
        many=True,
    )
    check.add_argument("--json", action="store_true", help="print one JSON object per file")
    command(
        "repair",
        _repair_command,
        "keep the records before the first bad line, drop the rest (keeps a copy)",
        "0 the file is valid afterwards; 1 otherwise",
    )
    report = command(
        "summary",
        _summary_command,
        "runs, counts, token usage and missing evidence of a session",
        "0 valid, whatever its gaps; 1 invalid or unreadable",
    )
    report.add_argument("--json", action="store_true", help="print one JSON object")
    show = command(
        "show",
        _show_command,
        "print the matching records' lines as they are in the file",
        "0 valid; 1 invalid or unreadable (the records before the bad line are printed)",
    )
    show.add_argument("--run", metavar="RUN_ID", help="records of this run")
    show.add_argument(
        "--type", action="append", metavar="TYPE", help="records of this type (repeat: any of them)"
    )
    show.add_argument("--execution", metavar="ID", help="records of this execution id")
    show.add_argument("--attempt", type=int, metavar="N", help="of this attempt (needs --execution)")
    show.add_argument("--pretty", action="store_true", help="a readable transcript instead of the lines")
    command(
        "checkpoint",
        _checkpoint_command,
        "print the latest checkpoint's snapshot as JSON",
        "0 printed; 1 no checkpoint, or the file invalid or unreadable",
    )
    args = parser.parse_args(argv)
    for stream in (sys.stdout, sys.stderr):  # a lone surrogate prints as \udXXX, in JSON too
        if isinstance(stream, io.TextIOWrapper):
            stream.reconfigure(errors="backslashreplace")
    if getattr(args, "attempt", None) is not None and args.execution is None:
        show.error("--attempt needs --execution")
    args.prog = prog
    status: int = 0
    try:
        status = args.handler(args)
        sys.stdout.flush()  # with default buffering, a closed pipe or a full disk shows here
    except KeyboardInterrupt:
        _print_error(f"{prog} {args.command}: interrupted")
        return 130
    except (OSError, _OutputError) as exc:  # the commands report what they read: this is the output
        failure = exc.error if isinstance(exc, _OutputError) else exc
        _discard_closed_outputs()
        if isinstance(failure, BrokenPipeError):  # the reader stopped early (| head): not our error
            return status
        _print_error(f"{prog} {args.command}: cannot write the output: {_os_reason(failure)}")
        return _EX_IOERR
    return status


_EX_IOERR = 74  # BSD sysexits.h: an error while doing I/O on some file (here, the output)
_READS_STDIN = ("validate", "summary", "show")  # checkpoint reads its line twice; repair cuts a file


def _validate_command(args: Any) -> int:
    status = 0
    for name in args.files:
        tally = _Tally()
        try:
            result = _read_file(name, args.max_line_bytes, tally)
        except (FormatError, OSError) as exc:
            status = 1
            _print_failure(name, exc, args.json)
            continue
        incomplete = tally.runs - tally.closed_runs
        if args.json:
            _print_json(
                {
                    "file": name,
                    "ok": True,
                    "session_id": result.session_id,
                    "records": result.records,
                    "runs": tally.runs,
                    "incomplete_runs": incomplete,
                    "checkpoints": tally.checkpoints,
                    "complete_bytes": result.complete_bytes,
                    "tail_bytes": result.tail_bytes,
                }
            )
        else:
            _print_text(
                f"{name}: ok, {result.records} records, {tally.runs} runs ({incomplete} incomplete), "
                f"{tally.checkpoints} checkpoints{_tail_text(result.tail_bytes)}"
            )
    return status


def _tail_text(size: int) -> str:
    return f", ignored {size}-byte unfinished tail" if size else ""


def _repair_command(args: Any) -> int:
    name = args.file
    try:
        result = repair(name, max_line_bytes=args.max_line_bytes)
        valid = result.error is None  # and maybe ending in an unfinished line, which repair leaves
        tail = read(name, lambda record: None, max_line_bytes=args.max_line_bytes).tail_bytes if valid else 0
    except (SessionError, OSError) as exc:
        _print_failure(name, exc, False)
        if isinstance(exc, FormatError) and exc.line == 1:
            _print_error(f"{name}: not repaired: without a good first line there is no session to keep")
        return 1
    error = result.error
    if error is None:
        left = f"; its {tail}-byte unfinished last line is left for open, which removes it" if tail else ""
        _print_text(f"{name}: valid, nothing to repair ({result.kept_records} records){left}")
    else:
        _print_text(
            f"{name}: kept {result.kept_records} records; dropped {result.dropped_bytes} bytes "
            f"from line {error.line} (offset {error.offset}): {error.reason}"
        )
        _print_text(f"{name}: the original is kept as {result.backup_path}")
    return 0


def _summary_command(args: Any) -> int:
    tally = _Summarizer()
    try:
        result = _read_file(args.file, args.max_line_bytes, tally)
    except (FormatError, OSError) as exc:
        _print_failure(args.file, exc, args.json)
        return 1
    summary = tally.summary(result)
    try:  # a hostile file's values can be too deep to print, or too long a number
        if args.json:
            fields = dict(vars(summary), runs=[vars(run) for run in summary.runs])
            fields["gaps"] = [dict(vars(gap), ref=gap.ref and gap.ref.to_json()) for gap in summary.gaps]
            _print_json({"file": args.file, "ok": True, **fields})
        else:
            for line in _summary_lines(args.prog, args.file, summary):
                _print_text(line)
    except (ValueError, RecursionError) as exc:
        _print_failure(args.file, ValueError(f"cannot print the summary: {exc}"), args.json)
        return 1
    return 0


def _summary_lines(prog: str, name: str, summary: Summary) -> List[str]:
    import shlex

    out = [
        f"{name}: session {summary.session_id}, {summary.records} records, {len(summary.runs)} runs, "
        f"{summary.checkpoints} checkpoints{_tail_text(summary.tail_bytes)}"
    ]
    for run in summary.runs:
        state = "closed" if run.closed else "not closed"
        reason = f", end reason {run.end_reason}" if run.end_reason else ""
        out.append(
            f"run {run.run_id}: seq {run.first_seq}-{run.last_seq}, {run.records} records, {state}{reason}"
        )
        out.append(f"  {run.start_time} to {run.end_time} ({_duration(run.start_time, run.end_time)})")
        if run.error is not None:
            out.append(f"  error: {_error_text(run.error)}")
    out.append("records by type: " + ", ".join(f"{k} {v}" for k, v in sorted(summary.counts.items())))
    out.append("usage: " + (", ".join(f"{k} {v}" for k, v in summary.usage.items()) or "none reported"))
    if summary.uninterpreted:
        out.append(f"uninterpreted: {summary.uninterpreted} records whose data has an unexpected shape")
    out.append("gaps: none" if not summary.gaps else f"gaps: {len(summary.gaps)}")
    for gap in summary.gaps:
        where = (
            f"run {gap.run_id}" if gap.ref is None else f"{gap.ref.execution_id} attempt {gap.ref.attempt}"
        )
        out.append(f"  seq {gap.seq}: {gap.kind}, {where}")
        if gap.ref is not None:
            out.append(f"    ref {json.dumps(gap.ref.to_json())}")
            show = ["show", name, "--run", gap.run_id, "--execution", gap.ref.execution_id]
            out.append(f"    {prog} {' '.join(map(shlex.quote, show))} --attempt {gap.ref.attempt} --pretty")
    return out


def _duration(start: str, end: str) -> str:
    try:
        seconds = (_parse_rfc3339(end) - _parse_rfc3339(start)).total_seconds()
    except _CodecFault:
        return "duration unknown"
    return f"{seconds:.3f} s"


def _error_text(error: Any) -> str:
    if type(error) is dict and type(error.get("message")) is str:
        kind = error.get("type")
        return f"{_in_line(kind)}: {error['message']}" if type(kind) is str else error["message"]
    return _json_text(error)


def _in_line(value: Any) -> str:
    """*value* for a place in a line of text: a string with its line breaks and controls
    escaped (a name cannot start a line that looks like a record), anything else as JSON."""
    return _for_terminal(value) if type(value) is str else _json_text(value)


def _show_command(args: Any) -> int:
    types = set(args.type or ())
    out = sys.stdout.buffer
    unreadable = 0  # records whose execution is not of the shape the format writes

    def visit(record: Record) -> None:
        nonlocal unreadable
        if args.run is not None and record.run_id != args.run:
            return
        if types and record.type not in types:
            return
        if args.execution is not None:
            ref = _call_ref(record)
            if ref is None:
                if "execution" in record.data:
                    unreadable += 1
                return
            if ref.execution_id != args.execution:
                return
            if args.attempt is not None and ref.attempt != args.attempt:
                return
        if args.pretty:
            line = _for_terminal(_transcript(record), newlines=True).encode(errors="backslashreplace")
        else:
            line = lines.last
        try:
            out.write(line)
        except OSError as exc:
            raise _OutputError(exc) from exc

    try:
        with _input(args.file) as f:
            lines = _Tap(f)
            _read_file(args.file, args.max_line_bytes, visit, lines)
    except (FormatError, OSError) as exc:
        out.flush()
        _print_failure(args.file, exc, False)
        return 1
    if unreadable:
        _print_error(f"{args.file}: {unreadable} records with an execution of unexpected shape not matched")
    return 0


class _OutputError(Exception):
    """Writing the output failed with *error*: not the input's fault."""

    def __init__(self, error: OSError) -> None:
        super().__init__(error)
        self.error = error


class _Tap:
    """A binary file that keeps the last line it handed out: ``show`` prints it as it was."""

    def __init__(self, f: BinaryIO) -> None:
        self._f = f
        self.last = b""

    def tell(self) -> int:
        return self._f.tell()

    def readline(self, size: int = -1, /) -> bytes:
        self.last = self._f.readline(size)
        return self.last


def _transcript(record: Record) -> str:
    """One record as readable text: roles and texts of messages, tool names, arguments and
    results, errors; nothing cut short."""
    head = f"#{record.seq} {record.time} {record.type}"
    execution = record.data.get("execution")
    if type(execution) is dict:
        head += f"  [{execution.get('kind')} {execution.get('id')} attempt {execution.get('attempt')}]"
    out = [_for_terminal(head)]  # one line, whatever the ids hold
    for key, value in record.data.items():
        if key == "execution":
            continue
        if key in ("message", "partial_message"):
            out += _message_text(value, key)
        elif key == "error":
            out.append(f"  error: {_error_text(value)}".replace("\n", "\n    "))
        elif key == "request" and type(value) is dict and type(value.get("messages", [])) is list:
            for message in value.get("messages", []):
                out += _message_text(message, "request")
            out.append(f"  tools: {_json_text(value.get('tools'))}")
            out.append(f"  config: {_json_text(value.get('config'))}")
        else:
            out.append(f"  {_in_line(key)}: {_json_text(value)}")
    return "\n".join(out) + "\n"


def _message_text(message: Any, label: str) -> List[str]:
    """A codec-encoded message as ``role: text`` lines; anything unexpected as JSON."""
    value = message.get("value") if type(message) is dict and "$type" in message else message
    if type(value) is not dict or type(value.get("content")) is not list:
        return [f"  {label}: {_json_text(message)}"]
    role = _in_line(value.get("role", "?"))
    out = []
    for block in value["content"]:
        kind = block.get("type") if type(block) is dict else None
        if kind == "text":
            text = str(block.get("text", "")).replace("\n", "\n    ")
            out.append(f"  {role}: {text}")
        elif kind == "tool_call":
            call = f"{_in_line(block.get('name'))}({_json_text(block.get('arguments'))})"
            out.append(f"  {role} calls {call} id {_in_line(block.get('id'))}")
        else:
            out.append(f"  {role}: {_json_text(block)}")
    for key in ("stop_reason", "usage"):
        if value.get(key):
            out.append(f"  {key}: {_json_text(value[key])}")
    return out


def _json_text(value: Any, indent: Optional[int] = None) -> str:
    try:
        return json.dumps(value, ensure_ascii=False, indent=indent)
    except RecursionError:  # deeper than this stack allows: compact, from a fresh stack, as read
        return _on_fresh_stack(_dumps, value)  # type: ignore[no-any-return]


def _checkpoint_command(args: Any) -> int:
    tally = _Tally()
    try:
        with builtins.open(args.file, "rb", _READ_BUFFER) as f:  # opened once: a FIFO too
            result = _read_file(args.file, args.max_line_bytes, tally, f)
            at = tally.latest_checkpoint(result)
            if at is None:
                _print_error(f"{args.file}: no checkpoint in {result.records} records")
                return 1
            f.seek(at.offset)  # a pipe: "not seekable", where a second open would wait for a writer
            snapshot = _snapshot_of(f.read(at.end - at.offset), args.file, at)
    except (FormatError, OSError) as exc:
        _print_failure(args.file, exc, False)
        return 1
    _emit(_json_for_terminal(_json_text(snapshot, indent=2)), sys.stdout)
    return 0


@contextlib.contextmanager
def _input(name: str) -> Iterator[BinaryIO]:
    """The file *name*, opened for reading; ``-`` is standard input (left open)."""
    if name == "-":
        yield sys.stdin.buffer
    else:
        with builtins.open(name, "rb", _READ_BUFFER) as f:
            yield f


def _read_file(
    name: str, max_line_bytes: int, visit: Callable[[Record], object], lines: Optional[_Lines] = None
) -> ReadResult:
    """``read`` for the commands, showing a percentage on a terminal while a big file is read."""
    size = 0 if name == "-" else os.stat(name).st_size
    progress = _Progress(name, size, visit) if size > _PROGRESS_FROM and sys.stderr.isatty() else None
    try:
        if lines is not None:
            return _read(lines, name, max_line_bytes, progress or visit)
        with _input(name) as f:
            return _read(f, name, max_line_bytes, progress or visit)
    finally:
        if progress is not None:
            progress.done()


_PROGRESS_FROM = 64 << 20  # bytes: smaller files take no time worth showing


class _Progress:
    """Calls *visit*, and shows on stderr how much of *size* bytes has been read."""

    def __init__(self, name: str, size: int, visit: Callable[[Record], object]) -> None:
        self._name = _for_terminal(name)
        self._size = size
        self._visit = visit
        self._next = 0

    def __call__(self, record: Record) -> None:
        if record.offset >= self._next:
            percent = record.offset * 100 // self._size
            print(f"\r{self._name}: {percent}%", end="", file=sys.stderr, flush=True)
            self._next = (percent + 1) * self._size // 100
        self._visit(record)

    def done(self) -> None:
        print("\r\033[K", end="", file=sys.stderr, flush=True)  # erase the line


def _print_failure(name: str, exc: Exception, as_json: bool) -> None:
    """One file's failure: ``FILE:LINE: reason (offset N)`` on stderr, or a JSON object on
    stdout."""
    if isinstance(exc, FormatError):
        line, offset, reason = exc.line, exc.offset, exc.reason
    else:
        line, offset, reason = None, None, _os_reason(exc) if isinstance(exc, OSError) else str(exc)
    if as_json:
        _print_json({"file": name, "ok": False, "line": line, "offset": offset, "error": reason})
    elif isinstance(exc, (LockedError, RecordingError)):  # their message names the file already
        _print_error(reason)
    elif line is None:
        _print_error(f"{name}: {reason}")
    else:
        _print_error(f"{name}:{line}: {reason}" + ("" if offset is None else f" (offset {offset})"))


def _os_reason(exc: OSError) -> str:
    return exc.strerror or str(exc)


def _print_json(obj: Dict[str, Any]) -> None:
    _emit(_json_for_terminal(_json_text(obj)), sys.stdout)


def _print_text(line: str) -> None:
    _emit(_for_terminal(line), sys.stdout)


def _print_error(text: str) -> None:
    _emit(_for_terminal(text), sys.stderr)


def _emit(text: str, stream: TextIO) -> None:
    """Print *text*.  Once *stream* is a closed pipe its output goes nowhere and the command
    goes on: ``validate bad.jsonl good.jsonl | head -1`` still checks every file."""
    try:
        print(text, file=stream)
    except BrokenPipeError:
        _discard_closed_outputs()


def _discard_closed_outputs() -> None:
    """Point stdout or stderr, whichever cannot be written, at the null device, so that what
    is left in its buffer, and the flush at exit, go nowhere instead of ending in "Exception
    ignored" (https://docs.python.org/3/library/signal.html#note-on-sigpipe)."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except OSError:
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, stream.fileno())
            os.close(null)
            with contextlib.suppress(OSError):
                stream.flush()


# Shown as escapes: C0 and C1 controls, DEL, and the marks and overrides that reorder text.
_TERMINAL_UNSAFE = "\x00-\x09\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"
_UNSAFE_IN_LINE = re.compile(f"[\n{_TERMINAL_UNSAFE}]")
_UNSAFE_IN_TEXT = re.compile(f"[{_TERMINAL_UNSAFE}]")


def _for_terminal(text: str, newlines: bool = False) -> str:
    """*text* safe to print on a terminal: a file's content cannot move the cursor, set the
    window title or reorder what is shown.  Each control character, DEL and bidirectional
    override or mark becomes a visible escape (``\\x1b``, ``\\u202e``); newlines stay only when
    *newlines* (a transcript's texts keep their lines)."""
    unsafe = _UNSAFE_IN_TEXT if newlines else _UNSAFE_IN_LINE
    return unsafe.sub(_escape, text)


def _json_for_terminal(text: str) -> str:
    """JSON *text* with what ``_for_terminal`` escapes written as JSON escapes (``\\u202e``):
    the same value, safe on a terminal too.  (JSON escapes C0 controls itself, and only
    strings can hold the others.)"""
    return _UNSAFE_IN_TEXT.sub(lambda match: f"\\u{ord(match.group()):04x}", text)


def _escape(match: typing.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


if __name__ == "__main__":
    raise SystemExit(main())
