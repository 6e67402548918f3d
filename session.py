# SPDX-License-Identifier: MIT
# MIT License
#
# Copyright (c) 2026 The session.py authors
#
# Permission is hereby granted, free of charge, to any person obtaining a copy
# of this software and associated documentation files (the "Software"), to deal
# in the Software without restriction, including without limitation the rights
# to use, copy, modify, merge, publish, distribute, sublicense, and/or sell
# copies of the Software, and to permit persons to whom the Software is
# furnished to do so, subject to the following conditions:
#
# The above copyright notice and this permission notice shall be included in all
# copies or substantial portions of the Software.
#
# THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR
# IMPLIED, INCLUDING BUT NOT LIMITED TO THE WARRANTIES OF MERCHANTABILITY,
# FITNESS FOR A PARTICULAR PURPOSE AND NONINFRINGEMENT. IN NO EVENT SHALL THE
# AUTHORS OR COPYRIGHT HOLDERS BE LIABLE FOR ANY CLAIM, DAMAGES OR OTHER
# LIABILITY, WHETHER IN AN ACTION OF CONTRACT, TORT OR OTHERWISE, ARISING FROM,
# OUT OF OR IN CONNECTION WITH THE SOFTWARE OR THE USE OR OTHER DEALINGS IN THE
# SOFTWARE.
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

import _thread
import builtins
import codecs
import contextlib
import dataclasses
import errno
import functools
import io
import itertools
import json
import json.scanner
import math
import operator
import os
import re
import sys
import types
import typing
import warnings
import weakref
from _thread import RLock, allocate_lock, start_new_thread  # threading's, without importing it
from array import array
from bisect import bisect_left, bisect_right
from collections import OrderedDict, deque
from dataclasses import dataclass, field
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
    Literal,
    NamedTuple,
    Optional,
    Protocol,
    Sequence,
    Set,
    TextIO,
    Tuple,
    TypedDict,
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
    "register_event_type",
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
    "TextBlock",
    "ThinkingBlock",
    "ToolCall",
    "ToolCallBlock",
    "ImageData",
    "ImageBlock",
    "ToolReferenceBlock",
    "ContentBlock",
    "Usage",
    "Cost",
    "STOP_REASONS",
    "text_block",
    "thinking_block",
    "tool_call_block",
    "image_block",
    "tool_reference_block",
    "tool_result",
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

_FORMAT_VERSION = 2  # what create writes unless asked for 1; every reader reads both
_VERSIONS = (1, 2)
_MAX_LINE_BYTES = 256 << 20  # 256 MiB: far above any real record, far below a DoS
_READ_BUFFER = 1 << 20  # readline on 32 KB lines is 3x faster than with the default 8 KB
_RESERVED = frozenset({"session_start", "run_start", "run_close", "checkpoint"})
# Version 2 writes each message, and each list of tool declarations, once, in a record of its
# own; a model_request refers to those records (see _Written and _Index).
_POOLED = frozenset({"message", "tools"})


# The module's patterns are compiled on their first use, through these two: most serve a few
# commands (the terminal's escapes, the long-line scanner, a redactor), and compiling all
# thirteen at import took 8-14% of `import session`. A thread, or a signal handler, that
# needs one while it is first compiled compiles it too; either copy will do.
@functools.lru_cache(maxsize=None)
def _compiled(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern)


@functools.lru_cache(maxsize=None)
def _compiled_bytes(pattern: bytes) -> re.Pattern[bytes]:
    return re.compile(pattern)


# Names of credentials, matched against a key folded to lowercase letters and digits (so that
# X-Api-Key, x_api_key and XApiKey are one name): the headers and fields AI providers,
# clouds and OAuth use for keys, tokens, cookies and passwords. A name that ends in "token"
# (PRIVATE-TOKEN, X-Vault-Token, github_token) is one; counts (max_tokens) end in "tokens".
_CREDENTIAL_KEY = (
    "apikey|apitoken|authorization|authkey|authtoken|accesskey|accesstoken|refreshtoken"
    "|sessiontoken|securitytoken|subscriptionkey|privatekey|secret|pass(?:word|wd|phrase)|cookie"
    "|credential|token$|^(?:auth|bearer|key)$"
)
_NOT_ALNUM = "[^0-9a-z]"

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
        super().__init__(
            f"unsupported format version {version} (this module reads 1 and 2)", path, line, offset
        )
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


@dataclass(frozen=True)
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


@dataclass()
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
    api_key: str = field(default="", repr=False)


@dataclass()
class ModelRequest:
    """What the executor sent to the model: *messages* (codec values), *tools* (JSON values)
    and *config*."""

    messages: Sequence[Any]
    tools: Sequence[Any] = ()
    config: Optional[CallConfig] = None


@dataclass()
class RetryInfo:
    """A retry decision: *max_retries*, *delay* in seconds, and the *error* that caused it."""

    max_retries: int = 0
    delay: float = 0.0
    error: Any = None


@dataclass()
class RunSummary:
    """The totals an ``agent_end`` event reports."""

    turn_count: int = 0
    tool_calls: int = 0
    tool_errors: int = 0
    end_reason: str = ""


@dataclass(frozen=True)
class RawJSON:
    """Exactly one JSON value given as *text*; checked when recorded, then written compacted
    (insignificant whitespace removed, every token kept), like Go's ``json.RawMessage``."""

    text: Union[str, bytes]


@dataclass(init=False)
class Event:
    """One kernel event, as the host hands it to ``Run.record``.

    *timestamp* is an aware ``datetime`` (``None``: now, at ``record``).  *message* and
    *partial_message* are codec values; *args*, *result*, *details* and *preview* are JSON
    values or ``RawJSON``; *error* is an exception, a string or a dict ``{"message": str,
    "type": str}`` (``type`` optional).  *state* and *delta* let a host pass whole kernel
    events; they are never written.
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


@dataclass(frozen=True)
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
        if self.run_id is None or self.type in _RESERVED:
            return None
        call = _execution_key(self)
        return None if call is None else CallRef(self.session_id, self.run_id, *call)


class ReadResult(NamedTuple):
    """What a read found: *records* complete records spanning *complete_bytes*, and the
    length of the ignored unfinished last line, *tail_bytes*."""

    session_id: str
    records: int
    complete_bytes: int
    tail_bytes: int


@dataclass(frozen=True)
class Checkpoint:
    """The latest explicit checkpoint: the decoded *snapshot*, and the *seq*, *run_id* and
    *time* (as written) of its record."""

    snapshot: Any
    seq: int
    run_id: str
    time: str


@dataclass(frozen=True)
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
            if any(type(item) is not str for item in fields["redacted"]):
                raise FormatError("data.redacted must hold strings", None, record.seq, record.offset)
            fields["redacted"] = tuple(fields["redacted"])
        return cls(**fields)


# The JSON type of each EventData field in a record's data (None: any JSON value), read from
# its annotation: the Optional classes are objects.
_JSON_TYPES: Dict[str, Optional[type]] = {
    "int": int,
    "str": str,
    "bool": bool,
    "Tuple[str, ...]": list,
    "Any": None,
}
_EVENT_DATA_KINDS = {f.name: _JSON_TYPES.get(str(f.type), dict) for f in dataclasses.fields(EventData)}


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


def _execution_key(record: Record) -> Optional[Tuple[str, int]]:
    """The execution id and attempt of *record*'s ``data.execution`` (``None`` without
    one), checked as ``_execution_from_json`` checks it, without building the Execution."""
    data = record.data
    if "execution" not in data:
        return None
    obj = data["execution"]
    if type(obj) is dict:
        ex_id, attempt = obj.get("id"), obj.get("attempt", 1)
        if (
            type(ex_id) is str
            and type(attempt) is int
            and type(obj.get("kind")) is str
            and type(obj.get("parent_id", "")) is str
            and type(obj.get("turn_index", 0)) is int
        ):
            return ex_id, attempt
    ex = _execution_from_json(obj, record)  # raises the FormatError that names the problem
    return ex.id, ex.attempt


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


class TextBlock(TypedDict):
    """A text block: ``{"type": "text", "text": "..."}``; built by ``text_block``."""

    type: Literal["text"]
    text: str


class ThinkingBlock(TypedDict):
    """The model's reasoning: ``{"type": "thinking", "thinking": "..."}``."""

    type: Literal["thinking"]
    thinking: str


class ToolCall(TypedDict, total=False):
    """One tool call inside a ``ToolCallBlock``.  *id*, *name* and *args* are always written;
    *args* is the JSON value the model sent (a ``RawJSON`` keeps its text as sent).  When the
    model's arguments did not parse, *args* is ``{}``, *args_invalid* is true and
    *args_raw_text* holds the text.  *thought_signature* is an opaque provider signature to
    replay verbatim."""

    id: str
    name: str
    args: Any
    args_invalid: bool
    args_raw_text: str
    args_parse_error: str
    thought_signature: str


class ToolCallBlock(TypedDict):
    """``{"type": "toolCall", "tool_call": {...}}``; built by ``tool_call_block``."""

    type: Literal["toolCall"]
    tool_call: ToolCall


class ImageData(TypedDict, total=False):
    """An image as base64 *data* with its *mime_type*, or as a *url*."""

    data: str
    url: str
    mime_type: str


class ImageBlock(TypedDict):
    """``{"type": "image", "image": {...}}``; built by ``image_block``."""

    type: Literal["image"]
    image: ImageData


class ToolReferenceBlock(TypedDict):
    """A reference to a tool by name: ``{"type": "tool_reference", "tool_name": "..."}``."""

    type: Literal["tool_reference"]
    tool_name: str


ContentBlock = Union[TextBlock, ThinkingBlock, ToolCallBlock, ImageBlock, ToolReferenceBlock]


class Cost(TypedDict, total=False):
    """What a model call cost, in USD."""

    input: float
    output: float
    cache_read: float
    cache_write: float
    total: float


class Usage(TypedDict, total=False):
    """A model call's token counts (integers that fit in 64 bits), for ``Message.usage``.
    Any subset of the keys is valid; Go reads a missing count as 0."""

    provider: str
    model: str
    input: int
    output: int
    cache_read: int
    cache_write: int
    total_tokens: int
    cost: Cost


STOP_REASONS = ("stop", "length", "toolUse", "error", "safety", "aborted")
"""The values of ``Message.stop_reason`` besides ``""`` (none given)."""


def _now() -> datetime:
    return datetime.now(timezone.utc)


_MESSAGE_COMPARISONS = itertools.count()  # calls of Message.__eq__ in every thread (atomic)
_MESSAGE_FIELDS = operator.attrgetter("role", "content", "stop_reason", "usage", "metadata", "timestamp")


@dataclass()
class Message:
    """A conversation message (``agentgo.message.v1``).

    *role* is ``user``, ``assistant``, ``system`` or ``tool``; *content* a list of blocks
    (``text_block`` and its siblings build them); *stop_reason* one of ``STOP_REASONS`` or
    ``""``; *usage* a ``Usage`` dict; *metadata* free-form JSON (a tool result's
    ``tool_call_id``: see ``tool_result``); *timestamp* when the message was made (default
    now, in UTC; ``None`` stands for Go's zero time).
    """

    role: str
    content: Optional[List[ContentBlock]]
    stop_reason: str = ""
    usage: Optional[Usage] = None
    metadata: Optional[Dict[str, Any]] = None
    timestamp: Optional[datetime] = field(default_factory=_now)

    def __eq__(self, other: object) -> bool:
        """Field by field, as a dataclass compares; each call counted (see ``_starts_with``)."""
        next(_MESSAGE_COMPARISONS)
        if other.__class__ is not self.__class__:
            return NotImplemented
        return _MESSAGE_FIELDS(self) == _MESSAGE_FIELDS(other)


@dataclass()
class AgentState:
    """An agent's conversation state (``agentgo.agent-state.v1``)."""

    messages: List[Any] = field(default_factory=list)
    artifacts: List[Any] = field(default_factory=list)
    total_usage: Optional[Dict[str, Any]] = None
    progress: Any = None


@dataclass()
class AgentSnapshot:
    """A state plus the input queues an agent had accepted (``agentgo.agent-snapshot.v1``)."""

    state: AgentState
    steering_queue: List[Any] = field(default_factory=list)
    follow_up_queue: List[Any] = field(default_factory=list)


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
_SURROGATE = "[\ud800-\udfff]"
_RAW_MARK = "\x00\ue000RawJSON\ue000\x00"  # stands for a RawJSON while its line is encoded


class _HasRaw(Exception):
    """A RawJSON value turned up: encode the line the slower way that splices it in."""


def _unencodable(value: Any) -> Any:
    if type(value) is RawJSON:
        raise _HasRaw
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


_PIECE = 1 << 18  # characters quoted in one call: well under a millisecond


def _quote_in_pieces(text: str) -> str:
    """``_quote(text)``, a long *text* a piece at a time: one call over 20 MB keeps the GIL
    for 50 to 100 ms, and between pieces a thread that waits for it (an event loop) gets it.
    A str subclass's own ``len`` and slices are not asked: its characters are quoted."""
    if type(text) is not str:
        text = str.__str__(text)
    if len(text) <= _PIECE:
        return _quote(text)
    pieces = [_quote(text[at : at + _PIECE])[1:-1] for at in range(0, len(text), _PIECE)]
    return '"' + "".join(pieces) + '"'


def _make_encoder(
    default: Callable[[Any], Any], quote: Callable[[str], str] = _quote
) -> Callable[[Any, int], Sequence[str]]:
    """The encoder ``json.dumps`` runs inside: compact, non-ASCII kept, NaN refused, strings
    quoted by *quote*.  Called as ``encoder(value, 0)``, it gives the text in pieces."""
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is not None:
        return make(None, default, quote, None, ":", ",", False, False, False)  # type: ignore[no-any-return]
    # no C accelerator (another interpreter): the pure-Python encoder
    encoder = json.JSONEncoder(
        ensure_ascii=False, separators=(",", ":"), allow_nan=False, check_circular=False, default=default
    )
    return lambda value, level: [encoder.encode(value)]


# Alone in its process, a writer encodes in one call (the C encoder's own quoting); beside
# other threads it quotes each string through a call of Python's (15-30% slower on a small
# record), which cuts long ones in pieces.  No count of threads: assume there are others.
_other_threads: Callable[[], int] = getattr(_thread, "_count", lambda: 1)
_encode_plain = _make_encoder(_unencodable)
_encode_shared = _make_encoder(_unencodable, _quote_in_pieces)


def _dumps(value: Any) -> str:
    """Compact JSON text of *value*: non-ASCII kept, NaN refused, ``RawJSON`` spliced in."""
    shared = _other_threads()
    try:
        return "".join((_encode_shared if shared else _encode_plain)(value, 0))
    except _HasRaw:
        pass
    raws: List[str] = []

    def default(obj: Any) -> Any:
        if type(obj) is RawJSON:
            raws.append(_compact(obj))
            return _RAW_MARK
        return _unencodable(obj)

    encode = _make_encoder(default, _quote_in_pieces if shared else _quote)
    pieces = "".join(encode(value, 0)).split(_quote(_RAW_MARK))
    if len(pieces) != len(raws) + 1:
        raise ValueError("a string equal to the RawJSON placeholder cannot be recorded")
    return "".join(piece + raw for piece, raw in zip(pieces, raws)) + pieces[-1]


_JSON_STRING_OR_SPACE = r'("[^"\\]*(?:\\.[^"\\]*)*")|[ \t\n\r]+'


def _compact(raw: RawJSON) -> str:
    """*raw*'s text, checked to be one strict JSON value, without insignificant whitespace."""
    text = raw.text.decode("utf-8") if isinstance(raw.text, bytes) else raw.text
    if type(text) is not str:
        raise TypeError(f"RawJSON.text must be str or bytes, not {type(raw.text).__name__}")
    try:
        _DECODER.decode(text)
    except (ValueError, RecursionError) as exc:
        raise ValueError(f"RawJSON is not one strict JSON value: {exc}") from None
    return _compiled(_JSON_STRING_OR_SPACE).sub(r"\1", text)


_INT_DIGITS = 4300  # int_max_str_digits' default: a reader refuses longer integers
_DIGITS_AS_ZEROS = bytes.maketrans(b"123456789", b"000000000")
_STRING_OR_LONG_INT = rb'"[^"\\]*(?:\\.[^"\\]*)*"|(?<![0-9.eE+-])-?[0-9]{%d,}(?![0-9.eE])' % (_INT_DIGITS + 1)


def _long_integer(text: str) -> int:
    """The digit count of the first integer in JSON *text* too long for a reader with the
    default ``int_max_str_digits``; 0 when there is none."""
    if len(text) <= _INT_DIGITS:  # most lines: no room for such an integer
        return 0
    limit = getattr(sys, "get_int_max_str_digits", lambda: 0)()
    if 0 < limit <= _INT_DIGITS:
        return 0  # this Python refused to write such an integer already
    line = text.encode("utf-8", "surrogatepass")
    if b"0" * (_INT_DIGITS + 1) not in line.translate(_DIGITS_AS_ZEROS):
        return 0
    for match in _compiled_bytes(_STRING_OR_LONG_INT).finditer(line):  # digits inside strings do not count
        if match.group()[:1] != b'"':
            return len(match.group().lstrip(b"-"))
    return 0


def _escaped_utf8(text: str) -> bytes:
    """JSON *text* as UTF-8, its lone surrogates written as ``\\udXXX`` escapes."""
    return _compiled(_SURROGATE).sub(lambda m: f"\\u{ord(m.group()):04x}", text).encode()


# Most records of a session share their second with the one before: formatting only the
# microseconds halves the cost of a time stamp, which every record pays at least once.
_last_second: Tuple[Tuple[int, ...], str] = ((), "")


def _clock(moment: datetime) -> str:
    """Date and time of day with microseconds, as RFC 3339 writes them: its offset to add."""
    global _last_second
    second = (moment.year, moment.month, moment.day, moment.hour, moment.minute, moment.second)
    last = _last_second  # one read: another thread may replace it, never half of it
    if last[0] != second:
        last = _last_second = (second, "%04d-%02d-%02dT%02d:%02d:%02d" % second)  # noqa: UP031
    return "%s.%06d" % (last[1], moment.microsecond)  # noqa: UP031 - a third faster than format()


_UTC = timezone.utc


def _utc_text(moment: Optional[datetime]) -> str:
    """The envelope's time: RFC 3339 in UTC, with microseconds and ``Z``."""
    if moment is None:
        moment = datetime.now(_UTC)
    elif type(moment) is not datetime or moment.tzinfo is not _UTC:  # else in UTC: no offset to ask
        if not isinstance(moment, datetime):
            raise TypeError(f"timestamp must be a datetime, not {type(moment).__name__}")
        offset = moment.utcoffset()
        if offset is None:
            raise ValueError(f"naive timestamp {moment} (give it a timezone)")
        if offset:
            moment = moment - offset
    return _clock(moment) + "Z"


# ---------------------------------------------------------------------------- codec


class Codec(Protocol):
    """Turns application values into JSON values (``encode``) and back (``decode``)."""

    def encode(self, value: Any) -> Any: ...

    def decode(self, value: Any) -> Any: ...


@dataclass(frozen=True)
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


def text_block(text: str) -> TextBlock:
    """A text block holding *text*."""
    _require(text, str, "text")
    return {"type": "text", "text": text}


def thinking_block(thinking: str) -> ThinkingBlock:
    """A block holding the model's reasoning, *thinking*."""
    _require(thinking, str, "thinking")
    return {"type": "thinking", "thinking": thinking}


def tool_call_block(
    id: str,  # noqa: A002 - agentgo's field name
    name: str,
    args: Any,
    *,
    args_invalid: bool = False,
    args_raw_text: str = "",
    args_parse_error: str = "",
    thought_signature: str = "",
) -> ToolCallBlock:
    """A block for the call *id* of the tool *name* with the arguments *args*.

    *args* is a JSON value (usually a dict), or the model's JSON text as a ``str`` or
    ``RawJSON``, written exactly as sent.  When the model's text did not parse, pass
    ``args_invalid=True``, the text as *args_raw_text* (and the parser's message as
    *args_parse_error*); *args* must then be ``{}`` or ``None``.  *thought_signature* is an
    opaque provider signature replayed verbatim.
    """
    _require(id, str, "id")
    _require(name, str, "name")
    _require(args_invalid, bool, "args_invalid")
    _require(args_raw_text, str, "args_raw_text")
    _require(args_parse_error, str, "args_parse_error")
    _require(thought_signature, str, "thought_signature")
    if not name:
        raise ValueError("a tool call needs the tool's name")
    if args_invalid:
        if args is not None and args != {}:
            raise ValueError("args must be {} when args_invalid is set (give the text as args_raw_text)")
        args = {}
    elif args_raw_text or args_parse_error:
        raise ValueError("args_raw_text and args_parse_error go with args_invalid=True")
    elif isinstance(args, str):
        args = RawJSON(args)
    call: ToolCall = {"id": id, "name": name, "args": _tool_args(args)}
    if args_invalid:
        call["args_invalid"] = True
    if args_raw_text:
        call["args_raw_text"] = args_raw_text
    if args_parse_error:
        call["args_parse_error"] = args_parse_error
    if thought_signature:
        call["thought_signature"] = thought_signature
    return {"type": "toolCall", "tool_call": call}


def image_block(*, data: Union[bytes, str, None] = None, mime_type: str = "", url: str = "") -> ImageBlock:
    """An image: *data* (bytes, or their base64 text) with its *mime_type*, or a *url*.
    Exactly one of *data* and *url*."""
    _require(mime_type, str, "mime_type")
    _require(url, str, "url")
    if (data is None) == (not url):
        raise ValueError("give exactly one of data and url")
    image: ImageData = {}
    if data is not None:
        if not mime_type:
            raise ValueError("image data needs its mime_type")
        image["data"] = _base64_text(data)
    else:
        image["url"] = url
    if mime_type:
        image["mime_type"] = mime_type
    return {"type": "image", "image": image}


def _base64_text(data: Union[bytes, str]) -> str:
    import base64

    if isinstance(data, (bytes, bytearray, memoryview)):
        return base64.b64encode(data).decode("ascii")
    _require(data, str, "data")
    try:
        base64.b64decode(data, validate=True)
    except ValueError:  # binascii.Error is one
        raise ValueError("image data given as str must be base64 text") from None
    return data


def tool_reference_block(tool_name: str) -> ToolReferenceBlock:
    """A block that refers to the tool *tool_name*."""
    _require(tool_name, str, "tool_name")
    if not tool_name:
        raise ValueError("a tool reference needs the tool's name")
    return {"type": "tool_reference", "tool_name": tool_name}


def tool_result(
    tool_call_id: str,
    content: Union[str, Sequence[ContentBlock]],
    *,
    is_error: bool = False,
    timestamp: Optional[datetime] = None,
) -> Message:
    """The ``tool``-role message answering the call *tool_call_id*.

    *content* is the result's text or a list of blocks; *is_error* marks a failed call
    (``metadata["is_error"]``, written only when true); *timestamp* defaults to now.
    """
    _require(tool_call_id, str, "tool_call_id")
    if not tool_call_id:
        raise ValueError("a tool result needs the id of the call it answers")
    _require(is_error, bool, "is_error")
    blocks: List[ContentBlock] = [text_block(content)] if isinstance(content, str) else list(content)
    metadata: Dict[str, Any] = {"tool_call_id": tool_call_id}
    if is_error:
        metadata["is_error"] = True
    return Message("tool", blocks, metadata=metadata, timestamp=timestamp or _now())


def _tool_args(args: Any) -> Any:
    """*args* checked to be one JSON value (a ``RawJSON``'s text included)."""
    if type(args) is RawJSON:
        _compact(args)
    else:
        _dumps(args)
    return args


class _CodecFault(Exception):
    """A codec failure at *steps* (outermost first) on its way out; containers add their step
    of the JSON path."""

    def __init__(self, reason: str, *steps: str) -> None:
        super().__init__(reason)
        self.reason = reason
        self.steps = list(reversed(steps))

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
    write: Optional[Callable[[JSONCodec, Any], Any]] = None  # agentgo's types: checked shapes
    read: Optional[Callable[[JSONCodec, Dict[str, Any]], Any]] = None


_DATETIME_ANNOTATION = (
    r"(?:\w+\.)?(?:Optional\[D\]|Union\[D,None\]|Union\[None,D\])|D(?:\|None)?|None\|D".replace(
        "D", r"(?:\w+\.)?datetime"
    )
)


_UNIONS = (Union, getattr(types, "UnionType", Union))


def _is_datetime(annotation: Any) -> bool:
    if isinstance(annotation, str):  # an annotation this Python could not evaluate
        return _compiled(_DATETIME_ANNOTATION).fullmatch(re.sub(r"[\s'\"]", "", annotation)) is not None
    if annotation is datetime:
        return True
    args = set(typing.get_args(annotation))
    return typing.get_origin(annotation) in _UNIONS and datetime in args and args <= {datetime, type(None)}


def _path_step(key: str) -> str:
    return f".{key}" if key.isidentifier() else f"[{json.dumps(key, ensure_ascii=False)}]"


class _NestedTooDeeply(RecursionError):
    """Too deep for a fresh stack, so for any caller's: unlike a RecursionError raised on the
    caller's own stack, which says that the caller had too little room left."""


def _on_fresh_stack(function: Callable[[Any], Any], arg: Any) -> Any:
    """``function(arg)`` on a new thread, whose recursion count starts at zero: what the
    writer nested as deep as the recursion limit let it, the reader unnests, however deep
    its caller is.  A bare ``_thread`` adds no frames of its own (``threading`` adds three).
    A RecursionError there is raised here as ``_NestedTooDeeply``."""
    outcome: List[Tuple[bool, Any]] = []
    done = allocate_lock()
    done.acquire()

    def run() -> None:
        try:
            outcome.append((True, function(arg)))
        except RecursionError as exc:
            outcome.append((False, _NestedTooDeeply(*exc.args)))
        except BaseException as exc:  # noqa: BLE001 - raised again in the caller's thread
            outcome.append((False, exc))
        finally:
            done.release()

    start_new_thread(run, ())
    with done:
        ok, value = outcome[0]
    if ok:
        return value
    raise value


# CPython 3.8 marks a thread's stack overflowed when it raises a RecursionError, and clears the
# mark only once the stack has unwound 50 levels below the recursion limit.  While it is marked
# no RecursionError is raised, and 50 levels past the limit the process aborts ("Fatal Python
# error: Cannot recover from stack overflow").  So a recursion that reaches the limit kills the
# process if the mark is set already (a caller near the limit caught a RecursionError, or the
# reader caught its own there) or if code that runs unasked at that depth (a gc callback, a
# finalizer) catches a RecursionError of its own while the recursion goes on.  On 3.8 the reader
# therefore bounds how deep a file's content can make it recurse before it recurses: on the
# caller's stack never up to the limit, on a fresh one never 50 levels past it.  From 3.9 on a
# RecursionError leaves no state behind: the reader tries, and tries again on a fresh stack.
_OVERFLOW_LINGERS: bool = sys.version_info < (3, 9)
_ANY_DEPTH = sys.maxsize  # the room a stack has for a recursion where nothing lingers
_KEPT_FREE = 16  # levels: the calls between a check and its recursion, and at its deepest point
_PAST_THE_LIMIT = 32  # levels a recursion on a fresh stack may go past the limit (fewer than 50)


def _room(above: int = 1) -> Tuple[int, int]:
    """How deep a recursion that the caller starts may go without nearing the recursion limit
    (_ANY_DEPTH where nothing lingers after a RecursionError), and the frames on the stack,
    the caller's included (or, *above* 2, its caller's).  Each frame counts twice: a call that
    goes through C, to a class or a ``__call__``, takes two levels where it shows one."""
    if not _OVERFLOW_LINGERS:
        return _ANY_DEPTH, 0
    frame: Optional[types.FrameType] = sys._getframe(above)
    frames = 0
    while frame is not None:
        frame, frames = frame.f_back, frames + 1
    return max(sys.getrecursionlimit() - 2 * frames - _KEPT_FREE, 0), frames


def _has_room(levels: int) -> bool:
    """Whether a recursion *levels* deep that the caller starts stays clear of the recursion
    limit, as ``_room`` counts: one look in C, where ``_room`` walks the stack."""
    try:
        sys._getframe((sys.getrecursionlimit() - _KEPT_FREE - levels) // 2)
    except ValueError:  # fewer frames than that
        return True
    return False


def _anywhere(function: Callable[[Any], Any], arg: Any, levels: Callable[[], int], deep: bool = False) -> Any:
    """``function(arg)``, a recursion on a file's content, with the outcome a shallow caller
    gets, however deep this one is: here where this stack has room, else on a fresh one, and
    ``_NestedTooDeeply`` where no stack has.  ``levels()`` bounds how deep it recurses (asked
    only where an overflow lingers); *deep*: this stack was found too shallow already."""
    if _OVERFLOW_LINGERS:
        most = levels()
        if not deep and _has_room(most):
            return function(arg)
        if most > sys.getrecursionlimit() + _PAST_THE_LIMIT:
            raise _NestedTooDeeply("nested too deeply")
    elif not deep:
        try:
            return function(arg)
        except RecursionError:  # deeper than this stack allows
            pass
    return _on_fresh_stack(function, arg)


def _nesting(value: Any, by_id: Optional[Dict[str, _Kind]] = None) -> int:
    """How deep the lists and dicts of *value* nest; with *by_id*, a tagged value whose type
    reads it with a function of its own counts one level more (as ``JSONCodec._decode``
    recurses).  Walked without recursing."""
    deepest = 0
    todo: List[Tuple[Any, int]] = [(value, 1)] if type(value) is dict or type(value) is list else []
    while todo:
        item, depth = todo.pop()
        deepest = max(deepest, depth)
        children = item
        if type(item) is dict:
            type_id = item.get("$type")
            kind = by_id.get(type_id) if by_id and type(type_id) is str and "value" in item else None
            if kind is not None and (kind.decode is not None or kind.read is not None):
                depth += 1
            children = item.values()
        todo.extend((child, depth + 1) for child in children if type(child) is dict or type(child) is list)
    return deepest


class JSONCodec:
    """The default codec: JSON values pass through; registered *types* become
    ``{"$type": type_id, "value": ...}``; anything else raises ``CodecError``.

    ``Message``, ``AgentState`` and ``AgentSnapshot`` are registered first.  Immutable, and
    safe to share between threads.
    """

    def __init__(self, *types: TypeSpec) -> None:
        by_id: Dict[str, _Kind] = {}
        by_class: Dict[type, _Kind] = {}
        for spec in (*(TypeSpec(type_id, cls) for cls, (type_id, *_) in _BUILTIN_TYPES.items()), *types):
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
        ``bool`` or ``None``; a tool call's ``RawJSON`` args stay as they are, to be written
        as sent); ``CodecError`` names what cannot be encoded and where."""
        try:
            return self._encode(value)
        except _CodecFault as fault:
            raise fault.error() from fault.__cause__
        except RecursionError:
            raise CodecError("value nested too deeply to encode") from None

    def decode(self, value: Any) -> Any:
        """Rebuild what ``encode`` produced *value* from; ``CodecError`` for an unknown type
        id or a value its class rejects.  Whatever ``encode`` took, this gives back, however
        deep the caller's stack."""
        try:
            return _anywhere(self._decode, value, lambda: _nesting(value, self._by_id))
        except _CodecFault as fault:
            raise fault.error() from fault.__cause__
        except _NestedTooDeeply:
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
        if kind.write is not None:
            return kind.write(self, obj)
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

    # One frame per level of nesting, as _encode_dict spends: what encodes, decodes.
    def _decode(self, value: Any) -> Any:
        t = type(value)
        if t is dict:
            if "$type" in value and "value" in value:
                return self._decode_tagged(value)
            if len(value) == 1 and "$object" in value:
                value = value["$object"]
                if type(value) is not dict:
                    raise _CodecFault("$object must wrap an object")
            out: Dict[str, Any] = {}
            key = ""
            try:
                for key, item in value.items():
                    out[key] = self._decode(item) if type(item) is dict or type(item) is list else item
            except _CodecFault as fault:
                fault.steps.append(_path_step(key))
                raise
            return out
        if t is list:
            items: List[Any] = []
            try:
                for item in value:
                    items.append(self._decode(item))
            except _CodecFault as fault:
                fault.steps.append(f"[{len(items)}]")
                raise
            return items
        return value

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
            except RecursionError:  # no fault of the value: decode tries again on a fresh stack
                raise
            except Exception as exc:  # the host's function meets a hostile file
                raise _CodecFault(f"{type_id} decode function failed: {exc!r}") from exc
        if type(value) is not dict:
            raise _CodecFault(f"{type_id} value must be an object")
        if kind.read is not None:
            return kind.read(self, value)
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
        except RecursionError:
            raise
        except Exception as exc:  # the class rejects what a file holds
            raise _CodecFault(f"{type_id}: {kind.cls.__qualname__} rejects its fields: {exc!r}") from exc


_MINUTE = timedelta(minutes=1)


def _rfc3339(moment: datetime) -> str:
    """RFC 3339 with microseconds and the value's own offset (``Z`` for UTC).  An offset
    RFC 3339 cannot write (seconds, as in zoneinfo's local mean times before 1900) is not
    rounded: the moment is written in UTC."""
    if type(moment) is datetime and moment.tzinfo is _UTC:  # most: no offset to ask for
        return _clock(moment) + "Z"
    offset = moment.utcoffset()
    if offset is None:
        raise _CodecFault("naive datetime (give it a timezone)")
    if not offset:
        return _clock(moment) + "Z"
    if offset % _MINUTE:
        return _clock(moment - offset) + "Z"
    minutes = offset // _MINUTE
    return "%s%s%02d:%02d" % (_clock(moment), "-" if minutes < 0 else "+", *divmod(abs(minutes), 60))  # noqa: UP031


_RFC3339 = r"(\d{4})-(\d\d)-(\d\d)[Tt ](\d\d):(\d\d):(\d\d)(?:\.(\d+))?(?:[Zz]|([+-]\d\d):(\d\d))"


def _parse_rfc3339(text: str) -> datetime:
    """An aware datetime; fractions beyond microseconds (Go's RFC3339Nano) are cut."""
    match = _compiled(_RFC3339).fullmatch(text)
    try:
        if match is None:
            raise ValueError("not RFC 3339 with an offset")
        year, month, day, hour, minute, second, fraction, hours, minutes = match.groups()
        zone = _UTC  # a "Z": no offset to build (most times; a third of the cost)
        if hours is not None:
            offset = timedelta(hours=int(hours), minutes=int(minutes) * (-1 if hours[0] == "-" else 1))
            zone = timezone(offset) if offset else _UTC
        micro = int(fraction[:6].ljust(6, "0")) if fraction else 0
        return datetime(int(year), int(month), int(day), int(hour), int(minute), int(second), micro, zone)
    except ValueError as exc:
        raise _CodecFault(f"invalid RFC 3339 time {text!r}: {exc}") from None


# agentgo's Go codec ignores the keys it does not know and reads a missing one as zero, so a
# wrong shape would arrive empty, silently: its types are checked here on the way out.
# Reading stays lenient (JSON in, JSON out), so that files from older writers stay readable.

_BLOCK_PAYLOADS = {
    "text": "text",
    "thinking": "thinking",
    "toolCall": "tool_call",
    "image": "image",
    "tool_reference": "tool_name",
}
_USAGE_COUNTS = frozenset({"input", "output", "cache_read", "cache_write", "total_tokens"})
# The members of agentgo's objects, each of a JSON type (int: a count that fits Go's int,
# float: a finite number), a nested object's members, or object: one JSON value, as args.
_IMAGE_MEMBERS: Dict[str, Any] = dict.fromkeys(("data", "url", "mime_type"), str)
_TOOL_CALL_MEMBERS: Dict[str, Any] = {
    **dict.fromkeys(("id", "name", "args_raw_text", "args_parse_error", "thought_signature"), str),
    "args": object,
    "args_invalid": bool,
}
_COST_MEMBERS = dict.fromkeys(("input", "output", "cache_read", "cache_write", "total"), float)
_USAGE_MEMBERS = {**dict.fromkeys(_USAGE_COUNTS, int), "provider": str, "model": str, "cost": _COST_MEMBERS}
_PROGRESS_MEMBERS: Dict[str, Any] = {
    **dict.fromkeys(("completed_turns", "length_recoveries", "tool_calls", "tool_errors"), int),
    **dict.fromkeys(("active", "next_turn"), bool),
}
_INT64 = range(-(1 << 63), 1 << 63)  # Go's int; `in` on a range is arithmetic
_GO_ZERO_TIME = "0001-01-01T00:00:00Z"  # what Go writes for a time never set: None here


def _key_step(key: Any) -> str:
    return _path_step(key) if type(key) is str else f"[{key!r}]"


def _encode_at(codec: JSONCodec, value: Any, step: str) -> Any:
    return _at_step(codec._encode, value, step)


def _at_step(convert: Callable[[Any], Any], value: Any, step: str) -> Any:
    """*convert(value)*, a fault in it placed at *step*."""
    try:
        return convert(value)
    except _CodecFault as fault:
        fault.steps.append(step)
        raise


def _write_message(codec: JSONCodec, message: Message) -> Dict[str, Any]:
    if type(message.role) is not str:
        _expect(message.role, str, "role", ".role")
    out: Dict[str, Any] = {"role": message.role, "content": _write_content(message.content)}
    stop_reason = message.stop_reason
    if stop_reason:
        if stop_reason not in STOP_REASONS:
            raise _CodecFault(
                f"stop reason {stop_reason!r} is not one of {', '.join(STOP_REASONS)}", ".stop_reason"
            )
        out["stop_reason"] = stop_reason
    elif stop_reason != "":
        raise _CodecFault(f"stop_reason must be a string, not {type(stop_reason).__name__}", ".stop_reason")
    if message.usage is not None:
        out["usage"] = _checked_usage(message.usage, ".usage")
    if message.metadata is not None:
        _expect(message.metadata, dict, "metadata", ".metadata")
        out["metadata"] = _encode_at(codec, message.metadata, ".metadata")
    moment = message.timestamp
    if moment is not None and type(moment) is not datetime:
        raise _CodecFault(f"timestamp must be a datetime, not {type(moment).__name__}", ".timestamp")
    out["timestamp"] = _GO_ZERO_TIME if moment is None else _at_step(_rfc3339, moment, ".timestamp")
    return out


def _write_content(content: Any) -> Any:
    """*content*, checked: blocks are written as they are (``None`` is Go's nil list)."""
    if content is None:
        return None
    if type(content) is not list and type(content) is not tuple:
        raise _CodecFault(f"content must be a list of blocks, not {type(content).__name__}", ".content")
    for index, block in enumerate(content):
        try:
            _check_block(block)
        except _CodecFault as fault:
            fault.steps.append(f".content[{index}]")
            raise
    return content


def _check_block(block: Any) -> None:
    if type(block) is not dict:
        _expect(block, dict, "a content block")
    kind = block.get("type")
    payload = _BLOCK_PAYLOADS.get(kind) if type(kind) is str else None
    if payload is None:
        raise _CodecFault(f"unknown block type {kind!r} (agentgo's: {', '.join(_BLOCK_PAYLOADS)})", ".type")
    for key, value in block.items():
        if key == payload:
            if kind == "toolCall":
                _check_object(value, _TOOL_CALL_MEMBERS, "tool_call", "a tool call's", ".tool_call")
            elif kind == "image":
                _check_object(value, _IMAGE_MEMBERS, "image", "an image's", ".image")
            elif type(value) is not str:
                _expect(value, str, key, _path_step(key))
        elif key != "type":
            raise _CodecFault(f"key {key!r} does not belong in a {kind} block", _key_step(key))
    if payload not in block and (kind == "toolCall" or kind == "image"):
        raise _CodecFault(f"a {kind} block needs its {payload}", f".{payload}")


def _expect(value: Any, kind: type, name: Any, *steps: str) -> None:
    """A fault at *steps* unless *value* is of the JSON type *kind* (``float``: any number)."""
    if type(value) is not kind and not (kind is float and type(value) is int):
        raise _CodecFault(f"{name} must be {_json_kind(kind)}, not {type(value).__name__}", *steps)


def _check_object(obj: Any, members: Dict[str, Any], name: str, what: str, *steps: str) -> None:
    """*obj* checked to be an object of agentgo's *members*: a stray key is not *what*."""
    _expect(obj, dict, name, *steps)
    for key, value in obj.items():
        kind = members.get(key)
        if kind is None:
            raise _CodecFault(f"key {key!r} is not {what}", *steps, _key_step(key))
        t = type(value)
        if t is kind and (t is str or t is bool or (t is int and value in _INT64)):
            continue  # most members: nothing more to check, no steps to name
        _check_member(value, kind, key, *steps, f".{key}")


def _is_double(value: Any) -> bool:
    """Whether the number *value* is one Go can hold in a float64."""
    try:
        return math.isfinite(value)
    except OverflowError:  # an int beyond any double
        return False


def _number_text(value: Any) -> str:
    """The number *value* in a message: an int too long to read (or for str() to convert,
    over ``sys.int_max_str_digits``) by its length."""
    if type(value) is int and value.bit_length() > 128:
        return f"of about {value.bit_length() * 0.30103:.0f} digits"
    return repr(value)


def _check_member(value: Any, kind: Any, key: Any, *steps: str) -> None:
    if type(kind) is dict:
        _check_object(value, kind, key, f"agentgo's {key} (Go would drop it)", *steps)
    elif kind is object:
        try:
            _tool_args(value)
        except (TypeError, ValueError, RecursionError) as exc:
            raise _CodecFault(f"{key} are not one JSON value: {exc}", *steps) from None
    else:
        _expect(value, kind, key, *steps)
        if kind is int and value not in _INT64:
            raise _CodecFault(f"{key} {_number_text(value)} does not fit in 64 bits", *steps)
        if kind is float and not _is_double(value):
            raise _CodecFault(f"{key} {_number_text(value)} is not a finite double", *steps)


def _checked_usage(usage: Any, step: str) -> Any:
    """*usage* as written: any of agentgo's keys, token counts that fit Go's int."""
    _check_object(usage, _USAGE_MEMBERS, "usage", "agentgo's usage (Go would drop it)", step)
    return usage


def _read_message(codec: JSONCodec, value: Dict[str, Any]) -> Message:
    fields: Dict[str, Any] = {
        name: codec._decode(value[name])
        for name in ("role", "stop_reason", "usage", "metadata")
        if name in value
    }
    fields["content"] = _read_content(codec, value.get("content"))
    moment = value.get("timestamp")
    if moment is None or moment == _GO_ZERO_TIME:
        fields["timestamp"] = None
    elif type(moment) is str:
        fields["timestamp"] = _at_step(_parse_rfc3339, moment, ".timestamp")
    else:
        raise _CodecFault("timestamp must be an RFC 3339 string", ".timestamp")
    try:
        return Message(**fields)
    except TypeError as exc:
        raise _CodecFault(f"agentgo.message.v1: Message rejects its fields: {exc!r}") from exc


def _read_content(codec: JSONCodec, content: Any) -> Any:
    """Blocks as written, except that a tool call's args are raw JSON, never unescaped."""
    if type(content) is not list:
        return codec._decode(content)
    out = []
    for block in content:
        call = block.get("tool_call") if type(block) is dict and block.get("type") == "toolCall" else None
        if type(call) is dict and "args" in call:
            decoded = codec._decode({**block, "tool_call": {**call, "args": None}})
            decoded["tool_call"]["args"] = call["args"]
            out.append(decoded)
        else:
            out.append(codec._decode(block))
    return out


def _write_messages(codec: JSONCodec, items: Any, step: str) -> Any:
    """*items* each encoded as a tagged value: Go reads these lists as ``AgentMessage`` (or
    ``Artifact``)."""
    if items is None:
        return None
    if type(items) is not list and type(items) is not tuple:
        raise _CodecFault(f"{step[1:]} must be a list, not {type(items).__name__}", step)
    out = []
    for index, item in enumerate(items):
        if type(item) not in codec._by_class:
            need = "a tagged value (a Message or a registered type)"
            raise _CodecFault(f"a plain {type(item).__name__} where agentgo needs {need}", step, f"[{index}]")
        out.append(_encode_at(codec, item, f"{step}[{index}]"))
    return out


def _write_state(codec: JSONCodec, state: AgentState) -> Dict[str, Any]:
    out = {"messages": _write_messages(codec, state.messages, ".messages")}
    if state.artifacts:  # Go: omitempty; each a registered, tagged value (an Artifact)
        out["artifacts"] = _write_messages(codec, state.artifacts, ".artifacts")
    if state.total_usage is not None:
        out["total_usage"] = _checked_usage(state.total_usage, ".total_usage")
    if state.progress is not None:
        out["progress"] = _write_progress(codec, state.progress)
    return out


def _write_progress(codec: JSONCodec, progress: Any) -> Dict[str, Any]:
    _expect(progress, dict, "progress", ".progress")
    out = dict(progress)
    for key, value in progress.items():
        kind = _PROGRESS_MEMBERS.get(key)
        if kind is not None:
            _check_member(value, kind, key, ".progress", f".{key}")
        elif key == "consecutive_tool_errors":
            _expect(value, dict, key, ".progress", f".{key}")
            for tool, count in value.items():
                _check_member(count, int, tool, f".progress.{key}", f".{tool}")
        elif key == "pending_messages":
            out[key] = _write_messages(codec, value, ".progress.pending_messages")
        else:
            raise _CodecFault(
                f"key {key!r} is not agentgo's run progress (Go would drop it)", ".progress", _key_step(key)
            )
    return out


def _write_snapshot(codec: JSONCodec, snapshot: AgentSnapshot) -> Dict[str, Any]:
    if type(snapshot.state) is not AgentState:
        raise _CodecFault(f"state must be an AgentState, not {type(snapshot.state).__name__}", ".state")
    out = {"state": _encode_at(codec, snapshot.state, ".state")}
    if snapshot.steering_queue:
        out["steering_queue"] = _write_messages(codec, snapshot.steering_queue, ".steering_queue")
    if snapshot.follow_up_queue:
        out["follow_up_queue"] = _write_messages(codec, snapshot.follow_up_queue, ".follow_up_queue")
    return out


# agentgo's types, registered first, each with the functions that write (and read) its shape
_BUILTIN_TYPES: Dict[type, Tuple[str, Any, Any]] = {
    Message: ("agentgo.message.v1", _write_message, _read_message),
    AgentState: ("agentgo.agent-state.v1", _write_state, None),
    AgentSnapshot: ("agentgo.agent-snapshot.v1", _write_snapshot, None),
}


def _kind_of(spec: TypeSpec) -> _Kind:
    if spec.encode is not None:
        return _Kind(spec.type_id, spec.cls, (), frozenset(), spec.encode, spec.decode)
    fields = [f for f in dataclasses.fields(spec.cls) if f.init]
    try:
        hints = typing.get_type_hints(spec.cls)
    except Exception:  # noqa: BLE001 - e.g. "datetime | None" on Python 3.9: read the text
        hints = {}
    datetimes = frozenset(f.name for f in fields if _is_datetime(hints.get(f.name, f.type)))
    _, write, read = _BUILTIN_TYPES.get(spec.cls, ("", None, None))
    return _Kind(spec.type_id, spec.cls, tuple(f.name for f in fields), datetimes, None, None, write, read)


@functools.lru_cache(maxsize=None)
def _default_codec() -> JSONCodec:
    """``JSONCodec()``, built when first needed."""
    return JSONCodec()


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
    elif type(value) is dict:  # an error handed over as data, as EventData reads it back
        if not value.keys() <= {"message", "type"} or type(value.get("message")) is not str:
            raise ValueError(f'{key} as a dict is {{"message": str, "type": str}}, not {value!r}')
        _require(value.get("type", ""), str, f"{key}.type")
        error = {"message": value["message"]}
        if value.get("type"):
            error["type"] = value["type"]
        data[key] = error
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
        counts = {name: getattr(value, name) for name in ("turn_count", "tool_calls", "tool_errors")}
        for name, count in counts.items():
            _require(count, int, f"summary.{name}")
        _require(value.end_reason, str, "summary.end_reason")
        data[key] = {**counts, "end_reason": value.end_reason}


def _put_request(data: Dict[str, Any], key: str, value: Any, codec: Codec) -> None:
    """A request as version 1 writes it: its messages and tools inline."""
    if value is not None:
        config, problems = _request_config(value, codec)
        messages = [codec.encode(m) for m in value.messages]
        data[key] = {"messages": messages, "tools": list(value.tools), "config": config}
        data.update(problems)


def _put_request_config(data: Dict[str, Any], key: str, value: Any, codec: Codec) -> None:
    """A request as version 2 writes it: its config alone, and its messages and tools in
    records of their own, referred to (see ``Session._record_request``)."""
    if value is not None:
        config, problems = _request_config(value, codec)
        data[key] = {"config": config}
        data.update(problems)


def _request_config(value: Any, codec: Codec) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    """The JSON of a request's config, and ``snapshot_error`` and ``redacted`` if some of it
    could not be kept or named a credential."""
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
    beside: Dict[str, Any] = {}
    if problems:
        beside["snapshot_error"] = "; ".join(problems)
    if redacted:
        beside["redacted"] = redacted
    return out, beside


def _without_credentials(value: Any, path: str, dropped: List[str]) -> Any:
    """A copy of *value* without the object keys and the pairs that name credentials; their
    paths go to *dropped*."""
    value = _plain(value)
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            step = f"{path}.{key}"
            if _names_credential(key):
                dropped.append(step)
            else:
                out[key] = _without_credentials(item, step, dropped)
        return out
    if isinstance(value, (list, tuple)):
        kept = []
        for i, item in enumerate(value):
            step, item = f"{path}[{i}]", _plain(item)
            # Headers and query parameters as (name, value) pairs, the form httpx and aiohttp take
            if isinstance(item, (list, tuple)) and len(item) == 2 and _names_credential(item[0]):
                dropped.append(step)
            else:
                kept.append(_without_credentials(item, step, dropped))
        return kept
    return value


def _plain(value: Any) -> Any:
    return _DECODER.decode(_compact(value)) if isinstance(value, RawJSON) else value


def _names_credential(name: Any) -> bool:
    return (
        isinstance(name, str)
        and _compiled(_CREDENTIAL_KEY).search(_compiled(_NOT_ALNUM).sub("", name.casefold())) is not None
    )


_Put = Callable[[Dict[str, Any], str, Any, Codec], None]
_Projection = Tuple[Tuple[str, _Put], ...]
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


def _projection(*names: str) -> _Projection:
    return tuple((name, _PUTS[name]) for name in names)


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
    "model_exec_end": _projection("execution", "message"),
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
# The types a misspelling is told from; a host's own are registered (register_event_type)
_EVENT_TYPES = frozenset(_PROJECTIONS) | {"recording_gap"} | _POOLED
_HOST_TYPES: Set[str] = set()
# Version 2 writes a model_request's messages and tools apart (other types' requests whole)
_REQUEST_V2 = (*_projection("execution"), ("request", _put_request_config))


def _event_data(event: Event, codec: Codec, version: int = _FORMAT_VERSION) -> Optional[Dict[str, Any]]:
    """The ``data`` that records *event* in a file of format *version*, or ``None`` when its
    type is not written."""
    kind = event.type
    projection = (
        _REQUEST_V2 if kind == "model_request" and version > 1 else _PROJECTIONS.get(kind, _EVERY_FIELD)
    )
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


class _File(io.FileIO):
    """A session file's descriptor.  Dropped open before a session has it (an interrupt
    between two steps of ``create`` or ``open``), it is closed, and its lock with it; once a
    session has it, the session's finalizer warns and releases it (``Session.__del__``)."""

    owned = False

    def __del__(self) -> None:
        if not self.owned:
            self.close()


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

    def _held(name: str) -> bool:
        """Whether a writer has the file at *name* locked (taken for an instant if not)."""
        fd = os.open(name, os.O_RDONLY | _O_BINARY)
        try:
            _lock(fd, name)
        except LockedError:
            return True
        else:
            _unlock(fd)
        finally:
            os.close(fd)
        return False

    def _sync_directory(name: str) -> None:
        """Nothing to do: NTFS journals directory entries, and a directory cannot be opened."""

    def _pread(fd: int, size: int, offset: int) -> bytes:
        os.lseek(fd, offset, os.SEEK_SET)  # callers hold the session lock
        return os.read(fd, size)

    def _file(name: str, new: bool) -> _File:
        """The file at *name* open to append (*new*: created, mode 0600, never replacing one)."""
        flags = os.O_RDWR | os.O_APPEND | _O_BINARY | (os.O_CREAT | os.O_EXCL if new else 0)
        return _File(name, "r+", opener=lambda path, _: os.open(path, flags, 0o600))

    def _link(file: _File, temporary: str, name: str) -> _File:
        """The file *file* holds at *temporary* moved to *name*, locked: Windows renames no
        open file, and its rename never replaces one (``FileExistsError``)."""
        file.close()
        os.rename(temporary, name)
        file = _file(name, False)
        try:
            _lock(file.fileno(), name)  # LockedError: an open of the new file came first, and has it
        except BaseException:
            file.close()
            raise
        return file

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

    def _held(name: str) -> bool:
        """Whether a writer has the file at *name* locked: a shared lock of a new file
        description is refused (or else taken for an instant; shared, as NFS grants only
        that to a file open for reading)."""
        fd = os.open(name, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        finally:
            os.close(fd)
        return False

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

    # FileIO calls it in C, and owns the descriptor before a signal's handler can run
    _CREATE = functools.partial(os.open, mode=0o600)

    def _file(name: str, new: bool) -> _File:
        """The file at *name* open to append (*new*: created, mode 0600, never replacing one),
        owned by its ``_File`` from the moment it is open: an interrupt anywhere later drops
        or closes that, and so the descriptor and its lock."""
        file = _File(name, "x+" if new else "r+", opener=_CREATE if new else None)
        try:
            fd = file.fileno()
            fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_APPEND)
        except BaseException:
            file.close()
            raise
        return file

    def _link(file: _File, temporary: str, name: str) -> _File:
        """*file*, locked, at *temporary*, now at *name* instead: a link never replaces a file
        (``FileExistsError``), and the lock is held before the name exists."""
        os.link(temporary, name)
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        try:
            _sync_directory(name)
        except Exception as exc:
            raise RecordingError(f"{name}: cannot sync its directory: {exc}") from exc
        return file


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


def _release_file(file: io.FileIO) -> None:
    try:
        _unlock(file.fileno())
    finally:
        file.close()


def _name(path: Union[str, bytes, os.PathLike[str], os.PathLike[bytes]]) -> str:
    """A path as text, for messages and for the os calls alike."""
    return os.fsdecode(os.fspath(path))


def _new_id() -> str:
    """A random (version 4) UUID as 32 lowercase hex digits, as ``uuid.uuid4().hex`` gives."""
    raw = bytearray(os.urandom(16))
    raw[6] = raw[6] & 0x0F | 0x40  # version 4
    raw[8] = raw[8] & 0x3F | 0x80  # RFC 4122 variant
    return raw.hex()


# ---------------------------------------------------------------------------- lines
# Reading and checking a file's lines, record by record: what the reader and the writer's
# ``open`` (which validates a file before it appends to it) share.


class _CheckpointAt(NamedTuple):
    offset: int
    end: int
    seq: int
    run_id: str
    time: str


class _Lines(Protocol):
    """What the reader needs of a binary file."""

    def tell(self) -> int: ...

    def readline(self, size: int = -1, /) -> bytes: ...


# A line holds at most max_line_bytes, but the objects json builds of it can take 34 times
# that ([{},{},...]: a dict per 3 bytes).  The readers that need no data (validate, open,
# repair) or a few keys of it (summarize) parse a line whole only where json builds little
# of it (no more than _PARSE_BUDGET bytes: ten times faster); else they check it byte by byte,
# exactly as strictly as json.loads, and build only the envelope and the keys they use: the
# line itself is then most of the memory they take.

_BIG_LINE = 1 << 20  # bytes: shorter lines are always parsed whole (their objects: under 34 MiB)
_PARSE_BUDGET = 40 << 20  # bytes json may build of a longer line that is parsed whole
_VALUE_BYTES = 96  # bytes json builds of a value at most, beside its text (a dict per '{,')
_NOT_VALUE_START = bytes(sorted(set(range(256)) - set(b"[{,:")))  # a value starts after one of these
_DataKeys = Dict[str, FrozenSet[str]]  # record type -> the keys of its data a reader uses
_NO_DATA: _DataKeys = {  # what every reader checks: the version, and a version-2 file's references
    "session_start": frozenset({"version"}),
    "message": frozenset({"message"}),
    "tools": frozenset({"tools"}),
    "model_request": frozenset({"request", "messages", "tools"}),
}


def _read(
    f: _Lines,
    name: Optional[str],
    max_line_bytes: int,
    visit: Callable[[Record], object],
    keys: Optional[_DataKeys] = None,
    index: Optional[_Index] = None,
) -> ReadResult:
    result: List[ReadResult] = []
    try:
        for record in _records(f, name, max_line_bytes, result, keys, True, index):
            visit(record)
    except FormatError as exc:  # from visit too (say, EventData.from_record): name the file
        if exc.path is None:
            exc.path = name
        raise
    return result[0]


_RUN_CHANGES = frozenset({"run_start", "run_close", "session_start"})
_INDEXED = _POOLED | {"model_request"}


def _records(
    f: _Lines,
    name: Optional[str],
    max_line_bytes: int,
    result: List[ReadResult],
    keys: Optional[_DataKeys] = None,
    steady: bool = False,
    index: Optional[_Index] = None,
) -> Iterator[Record]:
    """The reader: yields each record once its line passed every rule, then appends the
    ``ReadResult`` to *result*.  With *keys*, the data of a long line holds only the keys
    it maps the record's type to.  *steady*: every line is asked for from the same frame,
    so the stack has the same room for parsing each (see ``_room``).  *index* checks the
    references of a version-2 file (and resolves them, if it was made to)."""
    _check_line_limit(max_line_bytes)
    steady = steady or not _OVERFLOW_LINGERS
    room, frames = _room()
    limit = max_line_bytes + 1
    readline = f.readline
    base, raw, header = _first_line(f, name, limit, keys, room)
    session_id = _check_header(header, name, base)
    index = _index_for(header, index, f, limit)
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
        if not steady:  # iter_records on 3.8: a line may be asked for from a deeper stack
            room, frames = _room_again(room, frames)
        obj = _parse_line(raw, name, seq + 1, offset, keys, room)
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
        if run_id != open_run or kind in _RUN_CHANGES:
            open_run = _open_run(kind, run_id, open_run, seen, name, seq + 1, offset)
        if index is not None and kind in _INDEXED:
            data = index.take(kind, seq + 1, offset, raw, obj, name)
        seq += 1
        yield new(Record, (session_id, seq, kind, time, run_id, data, offset))
        offset += len(raw)
    if raw:
        _unfinished(raw, limit, name, seq + 1, offset, "")
    result.append(ReadResult(session_id, seq, offset - base, len(raw)))


def _first_line(
    f: _Lines, name: Optional[str], limit: int, keys: Optional[_DataKeys], room: int
) -> Tuple[int, bytes, Dict[str, Any]]:
    """Where reading starts, the first line, and its object."""
    try:
        base = f.tell()
    except (OSError, ValueError):  # a pipe: offsets count from where reading started
        base = 0
    raw = f.readline(limit)
    if raw[-1:] != b"\n":
        raise _unfinished(raw, limit, name, 1, base, "no complete line: not a session file")
    return base, raw, _parse_line(raw, name, 1, base, keys, room)


def _index_for(header: Dict[str, Any], index: Optional[_Index], f: _Lines, limit: int) -> Optional[_Index]:
    """The index that checks (*index*, or a new one) a version-2 file's references, a request
    with the lines it refers to taking no more than *limit* bytes; ``None`` for version 1."""
    if header["data"]["version"] < 2:
        return None
    index = index or _Index(f)
    index.version = 2
    index.limit = limit
    return index


def _open_run(
    kind: str,
    run_id: str,
    open_run: Optional[str],
    seen: Set[str],
    name: Optional[str],
    line: int,
    offset: int,
) -> Optional[str]:
    """The run open after the record *line* of type *kind* and run *run_id*, when it is not
    simply the run already open; ``FormatError`` if rule 5 forbids the record."""
    if kind == "run_start":
        if run_id in seen:
            raise FormatError(f"run_start reuses run_id {run_id!r}", name, line, offset)
        seen.add(run_id)
        return run_id
    if run_id == open_run and kind != "session_start":
        return None  # run_close
    if kind == "session_start":
        problem = "session_start is allowed on line 1 only"
    elif run_id not in seen:
        problem = f"run_id {run_id!r} has no run_start"
    elif open_run is None:
        problem = f"run {run_id!r} is already closed"
    else:
        problem = f"record for run {run_id!r} after run {open_run!r} started"
    raise FormatError(problem, name, line, offset)


def _room_again(room: int, frames: int) -> Tuple[int, int]:
    """``_room()`` for the caller again if its stack is no longer *frames* deep, else (*room*,
    *frames*) as they are."""
    try:
        moved = sys._getframe(frames).f_back is not None
    except ValueError:  # shallower
        moved = True
    return _room(2) if moved else (room, frames)


def _check_line_limit(max_line_bytes: int) -> None:
    if max_line_bytes < 1:  # 0 would refuse every line; a negative limit, none
        raise ValueError(f"max_line_bytes must be at least 1, not {max_line_bytes}")


def _unfinished(
    raw: bytes, limit: int, name: Optional[str], line: int, offset: int, reason: str
) -> FormatError:
    """The error for a line without newline: too long (raised here), or *reason*."""
    if len(raw) >= limit:
        raise _LineTooLong(f"line longer than max_line_bytes ({limit - 1})", name, line, offset)
    return FormatError(reason, name, line, offset)


class _LineTooLong(FormatError):
    """A line longer than ``max_line_bytes``: not necessarily a bad one."""


def _parse_line(
    raw: bytes,
    name: Optional[str],
    line: int,
    offset: int,
    keys: Optional[_DataKeys] = None,
    room: int = _ANY_DEPTH,
) -> Dict[str, Any]:
    """The object on one line (*raw* ends with its newline), or ``FormatError``.

    With *keys*, a line longer than ``_BIG_LINE`` of which json would build much (see
    ``_builds_little``) is checked without building it, and its ``data`` holds only the keys
    its type maps to (see ``_big_line``).  *room*: how deep json may recurse on this stack,
    as ``_room`` found it, or -1 to look."""
    if keys is not None and len(raw) > _BIG_LINE and not _builds_little(raw):
        return _big_line(raw, name, line, offset, keys)
    try:
        text = raw.decode()
    except UnicodeDecodeError as exc:
        raise FormatError(f"invalid UTF-8 at byte {exc.start} of the line", name, line, offset) from None
    end = -1
    deep = _OVERFLOW_LINGERS and len(raw) >= room and not _fits(raw, room)  # shorter: nests less
    if not deep:
        try:
            obj, end = _scan_once(text, 0)  # json.loads without its Python-level wrapping
        except (StopIteration, ValueError):
            pass
        except RecursionError:
            if _OVERFLOW_LINGERS:  # the stack is deeper than its frames tell: the caller's to handle
                raise
            deep = True
    if end != len(text) - 1:  # an error, or whitespace around the value: ask the full decoder
        try:
            obj = _decode_anywhere(text[:-1], raw, deep)
        except json.JSONDecodeError as exc:  # "Invalid control character at": json adds a position
            problem = exc.msg[:-3] if exc.msg.endswith(" at") else exc.msg
            raise FormatError(f"invalid JSON: {problem} at column {exc.colno}", name, line, offset) from None
        except ValueError as exc:  # NaN, Infinity, an integer too long to convert
            raise FormatError(f"invalid JSON: {exc}", name, line, offset) from None
        except _NestedTooDeeply:
            raise FormatError("invalid JSON: nested too deeply", name, line, offset) from None
    if type(obj) is not dict:
        raise FormatError(f"line holds {_json_kind(type(obj))}, not an object", name, line, offset)
    return obj


def _builds_little(raw: bytes) -> bool:
    """Whether what json builds of the line *raw* takes no more than ``_PARSE_BUDGET``: at
    most its text decoded, the text of its strings again, and ``_VALUE_BYTES`` for each value,
    counted a megabyte at a time, in C, at a twentieth of what parsing takes."""
    # a character takes up to 4 bytes in a str; and json takes a few KiB whatever the line
    text = 2 * len(raw) * (1 if raw.isascii() else 4) + (64 << 10)
    values = 0
    for at in range(0, len(raw), _BIG_LINE):
        values += len(raw[at : at + _BIG_LINE].translate(None, _NOT_VALUE_START))
        if text + values * _VALUE_BYTES > _PARSE_BUDGET:
            return False
    return True


def _fits(raw: bytes, room: int) -> bool:
    """Whether json parses the line *raw* here without nearing the recursion limit: nested
    less than *room* levels deep, or with *room* -1, less than ``_has_room`` finds left."""
    if room < 0 and _has_room(len(raw)):  # a line nests no deeper than it is long
        return True
    try:
        levels = _json_levels(raw)
    except ValueError:  # not JSON, and too deep to try here: _decode_anywhere says why
        return False
    return levels < room if room >= 0 else _has_room(levels)


def _decode_anywhere(text: str, raw: bytes, deep: bool = False) -> Any:
    """``json.loads(text)``, strict, with the outcome a shallow caller gets (``_anywhere``):
    *raw* is text's UTF-8, or a longer text that holds it; *deep*: too deep for this stack."""
    return _anywhere(_DECODER.decode, text, functools.partial(_json_levels, raw), deep)


_SAFE_DEPTH = 100  # json parses this deep anywhere; beyond, _parse_depth_limit says how deep


def _json_levels(raw: bytes) -> int:
    """How deep json recurses on the JSON text *raw*, at most: as deep as it has brackets, as
    ``_bracket_depth`` finds where those are many, or where they are too many to try, as
    ``_scan_json`` finds (any deeper than ``_parse_depth_limit()``: too deep to parse).
    ``ValueError`` if that finds no JSON.  All without recursing."""
    # replace finds them with memchr, several times faster than count, which reads every byte
    most = 2 * len(raw) - len(raw.replace(b"[", b"")) - len(raw.replace(b"{", b""))
    if most <= 2 * _SAFE_DEPTH:
        return most
    depth = _bracket_depth(raw)
    if depth >= 0 or most <= sys.getrecursionlimit() + _PAST_THE_LIMIT:
        return depth if depth >= 0 else most
    for deepest in (_SAFE_DEPTH, _parse_depth_limit()):
        try:
            _scan_json(raw, frozenset(), deepest)
        except _TooDeep:
            continue
        except _NotJSON as exc:
            raise ValueError(str(exc)) from None
        return deepest
    return most


_SHAPE = bytes.maketrans(b"{}", b"[]")  # _bracket_depth counts one kind of bracket ...
_NOT_SHAPE = bytes(sorted(set(range(256)) - set(b'"[]{}')))  # ... and keeps quotes and brackets


def _bracket_depth(raw: bytes) -> int:
    """How deep the brackets of the JSON text *raw* nest outside its strings, at most; -1
    where a string holds a bracket or they nest more than a few levels.  A few passes in C."""
    unescaped = raw.replace(b"\\\\", b"").replace(b'\\"', b"")  # escaped backslashes, escaped quotes
    # Two adjacent quotes are a string without brackets, or the end of one and the start of the
    # next: gone, they leave every bracket inside or outside a string as it was.
    shape = unescaped.translate(_SHAPE, _NOT_SHAPE).replace(b'""', b"")
    if b'"' in shape:
        return -1
    for passes in range(16):
        if b"[]" not in shape:  # each pass took away the innermost pairs
            return passes + shape.count(b"[")  # and those never closed
        shape = shape.replace(b"[]", b"")
    return -1


_ENVELOPE_KEYS = frozenset({"session_id", "seq", "type", "time", "run_id", "data"})

# re keeps about 80 bytes per repetition of a group until a match ends: every repetition
# below is bounded, and the loops in _scan_json repeat the match.
_WS = rb"[ \t\n\r]*"
_CHARS = rb'[^"\\\x00-\x1f]*(?:\\(?:["\\/bfnrt]|u[0-9a-fA-F]{4})[^"\\\x00-\x1f]*)'
_STRING_PART = _CHARS + rb"{0,1024}"
_NUMBER = rb"-?(?:0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?"
_LITERAL = rb"true|false|null"
# Values json takes whatever follows (no exponent, under 300 integer digits, few escapes),
# alone or in small objects and arrays up to three levels deep, in runs of "value," checked at
# the speed of re.
_W = rb"[ \t\n\r]*"
# a run of plain characters is bounded: a longer string is left to _scalar_end, which is linear,
# where re would backtrack over the whole of it each time a pattern around it fails
_RUN = rb'[^"\\\x00-\x1f]{0,4096}'
_TEXT = rb'"' + _RUN + rb'(?:\\(?:["\\/bfnrt]|u[0-9a-fA-F]{4})' + _RUN + rb'){0,8}"'
_SCALAR = rb"(?:" + _TEXT + rb"|-?(?:0|[1-9][0-9]{0,299})(?:\.[0-9]+)?|true|false|null)"


def _small_containers(value: bytes, most: int) -> bytes:
    """An object or array of up to *most* + 1 *value* patterns, as a pattern."""
    pair = _TEXT + _W + rb":" + _W + value + _W
    item = value + _W
    return rb"\{%s(?:%s(?:,%s%s){0,%d})?\}|\[%s(?:%s(?:,%s%s){0,%d})?\]" % (
        *(_W, pair, _W, pair, most),
        *(_W, item, _W, item, most),
    )


_PLAIN = _SCALAR
for _level in range(3):
    _PLAIN = rb"(?:" + _SCALAR + rb"|" + _small_containers(_PLAIN, 8) + rb")"
_PLAIN += _W + rb"," + _W


@functools.lru_cache(maxsize=None)
def _plain_runs() -> Tuple[re.Pattern[bytes], re.Pattern[bytes]]:
    """Runs of plain items and of plain members, compiled on first use (it takes a tenth of
    a second, which only a long line is worth)."""
    items = re.compile(rb"(?:" + _PLAIN + rb"){1,64}")
    return items, re.compile(rb"(?:" + _TEXT + _W + rb":" + _W + _PLAIN + rb"){1,64}")


class _NotJSON(Exception):
    """Why and where (*at*, a byte of the line) a long line is not strict JSON."""

    def __init__(self, reason: str, at: int) -> None:
        super().__init__(f"{reason} at byte {at} of the line")


class _TooDeep(_NotJSON):
    """Nested deeper than asked for."""


_OBJECT, _ARRAY = b"{["


def _big_line(raw: bytes, name: Optional[str], line: int, offset: int, keys: _DataKeys) -> Dict[str, Any]:
    """``_parse_line`` for a long line: its envelope, and of its data the keys *keys* maps
    its type to.  An object or array in the envelope (a bad line) comes back empty: only
    its type is checked."""
    bad = _invalid_utf8(raw)
    if bad >= 0:
        raise FormatError(f"invalid UTF-8 at byte {bad} of the line", name, line, offset)
    try:
        start, top, data = _scan_json(raw, frozenset().union(*keys.values()))
    except _NotJSON as exc:
        raise FormatError(f"invalid JSON: {exc}", name, line, offset) from None
    if raw[start] != _OBJECT:
        held = _json_kind(type(_shallow_value(raw, start, len(raw))))
        raise FormatError(f"line holds {held}, not an object", name, line, offset)
    obj = {key: _shallow_value(raw, *span) for key, span in top.items() if key in _ENVELOPE_KEYS}
    kind = obj.get("type")
    kind = kind if type(kind) is str else ""
    if type(obj.get("data")) is dict:
        wanted = keys.get(kind, frozenset())
        obj["data"] = {
            key: _BUILT_AS.get((kind, key), _value_at)(raw, *span)
            for key, span in data.items()
            if key in wanted
        }
    return obj


def _value_at(raw: bytes, start: int, end: int) -> Any:
    span = raw[start:end]
    return _decode_anywhere(span.decode(), span)


def _shallow_value(raw: bytes, start: int, end: int) -> Any:
    """The JSON value at ``raw[start:end]`` (checked already), an object or array empty."""
    if raw[start] == _OBJECT:
        return {}
    if raw[start] == _ARRAY:
        return []
    return _DECODER.decode(raw[start:end].decode())  # a string, number or literal: no recursion


_STAND_IN = {_OBJECT: dict, _ARRAY: list, b'"'[0]: str}  # of a value whose JSON type alone matters


def _integer_value(raw: bytes, start: int, end: int) -> Any:
    """For a key that must hold an integer: the JSON value at ``raw[start:end]`` (checked
    already) if it is one (of 4,300 digits at most), else an empty value of its type, and
    0.0 for any other number."""
    stand_in = _STAND_IN.get(raw[start])
    if stand_in is not None:
        return stand_in()
    number = _compiled_bytes(_NUMBER).match(raw, start, end)
    if number is None:
        return _shallow_value(raw, start, end)  # true, false or null
    return 0.0 if number.lastindex else int(raw[start:end])  # lastindex: a fraction or an exponent


_RANGE_CHUNK = 1 << 16  # bytes of a long data.messages parsed at a time


def _ranges_value(raw: bytes, start: int, end: int) -> Any:
    """A version-2 request's data.messages at ``raw[start:end]`` (checked already): built, or
    where that would take much memory, as ``_LongRanges``."""
    if end - start <= _RANGE_CHUNK:
        return _value_at(raw, start, end)
    return _LongRanges(raw, start, end) if raw[start] == _ARRAY else _shallow_value(raw, start, end)


class _LongRanges:
    """A long JSON array (``raw[start:end]``, checked already) of a request's data.messages,
    whose items are parsed as they are asked for, ``_RANGE_CHUNK`` bytes at a time, up to
    the last ']' they hold.  Its whitespace is dropped first (in JSON it only parts tokens,
    or is inside a string, which no list of ranges holds): then a ``[first, last]`` range
    ends with the first ']' after its '[', two integers on.  ``None`` stands for what is no
    list of ranges: a chunk that parses as none, or no ']' where a range would have ended."""

    def __init__(self, raw: bytes, start: int, end: int) -> None:
        self._raw, self._start, self._close = raw, start, end - 1  # where the array's ']' is

    def __iter__(self) -> Iterator[Any]:
        raw, close = self._raw, self._close
        longest = 2 * (_int_digits_limit() + 1) + 3  # "[-1,-2]", the integers of the most digits
        held = b""  # what is left of the chunks read, without whitespace
        for at in range(self._start + 1, close, _RANGE_CHUNK):
            held += raw[at : min(at + _RANGE_CHUNK, close)].translate(None, b" \t\n\r")
            cut = held.rfind(b"]") + 1
            chunk, held = held[1:cut] if held[:1] == b"," else held[:cut], held[cut:]  # less a comma before
            try:
                yield from _decode_anywhere(f"[{chunk.decode()}]", chunk) if chunk else ()
            except (ValueError, _NestedTooDeeply):  # cut inside an item: that is no range
                yield None
                return
            if len(held) > longest:
                break
        if held:  # what followed the last ']' (a range has none after it)
            yield None


# How a long line's data keys are built where not whole (_value_at): of some only the JSON type
# matters (an object or array comes empty), of others only an integer is built
_BUILT_AS: Dict[Tuple[str, str], Callable[[bytes, int, int], Any]] = {
    ("message", "message"): _shallow_value,
    ("tools", "tools"): _shallow_value,
    ("model_request", "request"): _shallow_value,
    ("model_request", "tools"): _integer_value,
    ("model_request", "messages"): _ranges_value,
    ("session_start", "version"): _integer_value,
}


def _invalid_utf8(raw: bytes) -> int:
    """Where *raw* stops being UTF-8 (-1 if it is), decoded a megabyte at a time."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    for at in range(0, len(raw), _BIG_LINE):
        pending = len(decoder.getstate()[0])
        try:
            decoder.decode(raw[at : at + _BIG_LINE], at + _BIG_LINE >= len(raw))
        except UnicodeDecodeError as exc:
            return at - pending + exc.start
    return -1


_Spans = Dict[str, Tuple[int, int]]
_CLOSING = {_OBJECT: b"}"[0], _ARRAY: b"]"[0]}


def _scan_json(
    raw: bytes, wanted: FrozenSet[str], deepest: Optional[int] = None
) -> Tuple[int, _Spans, _Spans]:
    """Check that *raw* is one strict JSON value, accepting and refusing exactly what ``json.loads``
    does, without building it.  Returns where the value starts, the spans of the members of the
    top object and those of the *wanted* members of its ``data`` (the last of duplicate keys, as
    json keeps them).  ``_NotJSON`` otherwise, ``_TooDeep`` if it nests deeper than *deepest* (or
    ``_parse_depth_limit()``) levels."""
    stack = bytearray()  # the closing brackets of the open containers
    top: _Spans = {}
    data: _Spans = {}
    keys: List[Optional[str]] = [None, None, None]  # depth 1, 2: the member being read, if noted
    starts = [0, 0, 0]  # ... and where its value starts
    in_data = False  # the open object at depth 2 is the top object's data
    window = _Window(raw, deepest is None and not _OVERFLOW_LINGERS)  # json's depth is checked here alone
    pos = start = _after_ws(raw, 0)
    while True:
        opening = raw[pos] if pos < len(raw) else 0  # a value starts at pos
        end = window.skip(pos) if len(stack) > 1 else -1  # the top object's members are read here
        if opening in _CLOSING and end < 0:
            stack.append(_CLOSING[opening])
            if len(stack) > _SAFE_DEPTH and len(stack) > (deepest or _parse_depth_limit()):
                raise _TooDeep("nested too deeply", pos)
            if len(stack) == 2:
                in_data = keys[1] == "data" and opening == _OBJECT
                data = {} if in_data else data
            pos = _after_ws(raw, pos + 1)
            ended = raw[pos : pos + 1] == bytes(stack[-1:])
        else:  # a scalar, or a value json skipped: it ended
            pos, opening, ended = end if end >= 0 else _scalar_end(raw, pos), 0, False
        while True:  # a value ended at pos, or a container opened there
            if ended:
                stack.pop()
                pos += 1
            depth = len(stack)
            if ended or opening not in _CLOSING:
                if not depth:
                    if _after_ws(raw, pos) != len(raw):
                        raise _NotJSON("Extra data", _after_ws(raw, pos))
                    return start, top, data
                key = keys[depth] if depth <= 2 else None
                if key is not None:
                    (top if depth == 1 else data)[key] = (starts[depth], pos)
                    keys[depth] = None
                pos = _after_ws(raw, pos)
                if raw[pos : pos + 1] == bytes(stack[-1:]):
                    ended = True
                    continue
                if raw[pos : pos + 1] != b",":
                    raise _NotJSON("Expecting ',' delimiter", pos)
                pos = _after_ws(raw, pos + 1)
            fast = depth < _SAFE_DEPTH - 3  # the plain values skipped nest three levels deeper at most
            if stack[-1] == _CLOSING[_ARRAY]:
                pos = _skip_runs(_plain_runs()[0], raw, pos) if fast else pos
            else:
                noted = depth == 1 or (depth == 2 and in_data and bool(wanted))
                pos, key = _member(raw, pos, noted, fast)
                if key is not None and (depth == 1 or key in wanted):
                    keys[depth], starts[depth] = key, pos
            break


_WINDOW = 1 << 16  # bytes of a long line json's C scanner is given at a time


class _Window:
    """Skips the values of a long line that fit in ``_WINDOW`` bytes at json's C speed, one
    window of the line decoded as Latin-1 at a time (a character per byte: the same
    offsets, and UTF-8 is checked apart).  A value it cannot parse (too long, too deep, or
    not JSON) is left to the scanner, and so are the values of the window after it: the
    scanner finds the reason, and no byte is given to json more than a few times."""

    def __init__(self, raw: bytes, enabled: bool) -> None:
        self._raw = raw
        self._start = 0
        self._text = ""
        self._resume = 0 if enabled else len(raw)  # no value before this is tried

    def skip(self, pos: int) -> int:
        """Where the value at *pos* ends, or -1 if it is the scanner's to check."""
        if pos < self._resume:
            return -1
        for fresh in (False, True):
            if fresh or not self._start <= pos < self._start + len(self._text):
                self._start, self._text = pos, self._raw[pos : pos + _WINDOW].decode("latin-1")
            end = self._end(pos - self._start)
            if end >= 0:
                return self._start + end
            if self._start == pos:  # a whole window from pos was no help
                break
        self._resume = pos + _WINDOW
        return -1

    def _end(self, at: int) -> int:
        """Where json ends the value at *at* of the window, if it surely ends there: not where
        the window may have cut it (a number, or "1." in "1.5", ends up to two bytes before)."""
        try:
            end: int = _scan_once(self._text, at)[1]
        except (StopIteration, ValueError, RecursionError):
            return -1
        whole = self._start + len(self._text) == len(self._raw)
        return end if whole or end + 3 <= len(self._text) else -1


def _after_ws(raw: bytes, pos: int) -> int:
    return _compiled_bytes(_WS).match(raw, pos).end()  # type: ignore[union-attr]  # [ \t\n\r]* always matches


def _skip_runs(runs: re.Pattern[bytes], raw: bytes, pos: int) -> int:
    """Past the plain items or members (*runs*, of ``_plain_runs``) from *pos*: where the next starts."""
    run = runs.match(raw, pos)
    while run is not None:
        pos = run.end()
        run = runs.match(raw, pos)
    return pos


def _member(raw: bytes, pos: int, noted: bool, fast: bool) -> Tuple[int, Optional[str]]:
    """From *pos* in an object, past plain members if *fast* and each need not be *noted*,
    then past a member's key and colon: where its value starts, and the key if *noted*."""
    if fast and not noted:
        pos = _skip_runs(_plain_runs()[1], raw, pos)
    if raw[pos : pos + 1] != b'"':
        raise _NotJSON("Expecting property name enclosed in double quotes", pos)
    end = _scalar_end(raw, pos)
    key = _DECODER.decode(raw[pos:end].decode()) if noted else None
    pos = _after_ws(raw, end)
    if raw[pos : pos + 1] != b":":
        raise _NotJSON("Expecting ':' delimiter", pos)
    return _after_ws(raw, pos + 1), key


def _scalar_end(raw: bytes, pos: int) -> int:
    """Where the string, number or literal at *pos* ends, once checked as json checks it."""
    first = raw[pos : pos + 1]
    if first == b'"':
        end = pos + 1
        while True:
            part = _compiled_bytes(_STRING_PART).match(raw, end)
            if part is None or (part.end() == end and raw[end : end + 1] != b'"'):
                raise _NotJSON("Unterminated string or invalid character or escape", end)
            end = part.end()
            if raw[end : end + 1] == b'"':
                return end + 1
    number = _compiled_bytes(_NUMBER).match(raw, pos)
    if number is not None:
        text = number.group()
        if number.group(1) or number.group(2):
            try:
                _finite(text.decode())
            except ValueError as exc:
                raise _NotJSON(str(exc), pos) from None
        elif len(text.lstrip(b"-")) > _int_digits_limit():
            raise _NotJSON(f"an integer of {len(text.lstrip(b'-'))} digits exceeds the limit", pos)
        return number.end()
    literal = _compiled_bytes(_LITERAL).match(raw, pos)
    if literal is None:
        raise _NotJSON("Expecting value", pos)
    return literal.end()


def _int_digits_limit() -> float:
    """The longest integer json converts: ``sys.int_max_str_digits`` (0: no limit)."""
    return getattr(sys, "get_int_max_str_digits", lambda: 0)() or math.inf


_depth_limits: Dict[int, int] = {}  # recursion limit -> how deep json parses on a fresh stack


def _parse_depth_limit() -> int:
    """How deep a line json parses on a fresh stack (where the reader parses a deep line):
    found once per recursion limit, by trying."""
    recursion = sys.getrecursionlimit()
    if recursion not in _depth_limits:
        # Where an overflow lingers, json's depth stays below the recursion limit, and no try
        # may go 50 levels past it (see _OVERFLOW_LINGERS).
        most = recursion if _OVERFLOW_LINGERS else 1 << 22
        low, high = _SAFE_DEPTH, _SAFE_DEPTH * 2
        while high < most and _parses(high):
            low, high = high, high * 2
        high = min(high, most)
        while high - low > 1:
            middle = (low + high) // 2
            low, high = (middle, high) if _parses(middle) else (low, middle)
        _depth_limits[recursion] = low
    return _depth_limits[recursion]


def _parses(depth: int) -> bool:
    try:
        _on_fresh_stack(_DECODER.decode, "[" * depth + "]" * depth)
    except _NestedTooDeeply:
        return False
    return True


def _check_header(obj: Dict[str, Any], name: Optional[str], offset: int) -> str:
    """Line 1's session_id, once the line passed rule 3."""
    data = obj.get("data")
    version = data.get("version") if type(data) is dict else None
    kind = obj.get("type")
    if kind != "session_start":
        found = f"type {kind!r}" if type(kind) is str else "no type" if kind is None else "a non-string type"
        problem = f"line 1 must be a session_start record, found {found}"
    elif type(version) is not int:
        problem = "session_start needs an integer data.version"
    elif version not in _VERSIONS:
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


_POOLED_KEYS = frozenset({"messages", "tools"})  # where a version-2 request's references are
_AsText = Callable[[bytes], Any]
_KEPT = 64 << 20  # bytes of message and tool list lines a resolving reader keeps at most
_RANGES = "data.messages must be a list of [first, last] seq ranges"


# What a message or tool list record's line holds beside its value, its type (twice) and the
# text of its envelope's strings
_POOLED_FRAME = '{"session_id":"","seq":,"type":"","time":"","run_id":"","data":{"":}}\n'


def _referred(size: int, frame: int) -> int:
    """What the value of a message or tool list record adds to a request that refers to it,
    from its line's *size* and the bytes of the line around the value (exactly, for a line
    this module writes; at least, for any other): its bytes, and one for a comma in the list
    version 1 writes.  A request and what it refers to so count no more than version 1's
    line of it, whose references become the values and their brackets and keys."""
    return size - frame + 1


def _own_referred(kind: str, line: bytes) -> int:
    """``_referred`` of the *kind* record *line* this module made: its value follows its first
    ``"data":{"`` (the envelope's strings before it hold no bare quote)."""
    return _referred(len(line), line.index(b'"data":{"') + len('"data":{"":}}\n') + len(kind))


class _Index:
    """Where the message and tool list records of a version-2 file lie (32 bytes a message
    record), to check every reference of a request as it comes, and, when *resolving*, to give
    each request its messages and tools back, as version 1 writes them: from lines kept as they
    streamed by (the latest ``_KEPT`` bytes of them, or all where the file cannot seek), else
    read again from the file."""

    def __init__(self, f: Any, resolving: bool = False, keep: Optional[bool] = None) -> None:
        self.version = 1
        self.limit = _MAX_LINE_BYTES + 1  # bytes a request may take with what it refers to
        self.resolving = resolving
        self.last_size = 0  # of the latest message or tool list line
        self.last_referred = 0  # what it adds to a request that refers to it (see _referred)
        self._f = f
        self._seqs = array("q")  # of the message records, ...
        self._places = array("q")  # ... where their lines start, ...
        self._sizes = array("q")  # ... how long they are, ...
        self._sums = array("q", [0])  # ... and what those before each add to a request, and all
        self._tools: Dict[int, Tuple[int, int, int]] = {}  # seq -> (offset, size, what it adds)
        self._seekable = _seekable(f)
        self._fd = _descriptor(f)
        self._keep = resolving if keep is None else keep
        self._kept: OrderedDict[int, bytes] = OrderedDict()  # seq -> line
        self._kept_bytes = 0

    def take(
        self, kind: str, seq: int, offset: int, raw: bytes, obj: Dict[str, Any], name: Optional[str]
    ) -> Dict[str, Any]:
        """The data of the record *seq*, *obj* on the line *raw*, checked (``FormatError``),
        and resolved if asked to."""
        data: Dict[str, Any] = obj["data"]
        if kind == "model_request":
            problem = self._check(seq, len(raw), data) if data.keys() & _POOLED_KEYS else ""
            if problem:
                raise FormatError(problem, name, seq, offset)
            return self.resolved(data, name) if self.resolving and "messages" in data else data
        if kind not in data:
            raise FormatError(f"a {kind} record needs data.{kind}", name, seq, offset)
        if kind == "tools" and type(data[kind]) is not list:
            raise FormatError("data.tools of a tools record must be an array", name, seq, offset)
        # the least its envelope can take: its strings a byte a character
        strings = len(obj["session_id"]) + len(obj["time"]) + len(obj["run_id"])
        referred = _referred(len(raw), len(_POOLED_FRAME) + len(str(seq)) + 2 * len(kind) + strings)
        if kind == "message":
            self._seqs.append(seq)
            self._places.append(offset)
            self._sizes.append(len(raw))
            self._sums.append(self._sums[-1] + referred)
        else:
            self._tools[seq] = (offset, len(raw), referred)
        self.last_size, self.last_referred = len(raw), referred
        if self._keep:
            self._hold(seq, raw)
        return data

    def _check(self, seq: int, size: int, data: Dict[str, Any]) -> str:
        """What is wrong with the references of the model_request *seq*, *size* bytes, or ``""``."""
        if type(data.get("request")) is not dict:
            return "data.messages and data.tools come with data.request, an object"
        ranges = data.get("messages")
        if type(ranges) is not list and type(ranges) is not _LongRanges:
            return _RANGES
        size -= len(',"messages":[]')  # the references, as written here (less a comma before each)
        for index, item in enumerate(ranges):
            if type(item) is not list or len(item) != 2 or not all(type(end) is int for end in item):
                return _RANGES
            first, last = item
            if not first <= last < seq:
                return f"data.messages: [{first}, {last}] is no range of records before this one"
            ends = [bisect_left(self._seqs, end) for end in item]
            for end, at in zip(item, ends):
                if at == len(self._seqs) or self._seqs[at] != end:
                    return f"data.messages: record {end} is no message record"
            size += self._sums[ends[1] + 1] - self._sums[ends[0]] - len(f"[{first},{last}]") - (index > 0)
        if "tools" in data:
            tools = data["tools"]
            if type(tools) is not int or tools not in self._tools:
                return "data.tools must be the seq of a tool list record before this one"
            size += self._tools[tools][2] - len(f',"tools":{tools}')
        if size > self.limit:  # what the writer refuses: more than version 1 writes in a line
            return (
                f"the request takes {size - 1} bytes with the messages and tools it refers to:"
                " longer than max_line_bytes"
            )
        return ""

    def _hold(self, seq: int, raw: bytes) -> None:
        self._kept[seq] = raw
        self._kept_bytes += len(raw)
        while self._seekable and self._kept_bytes > _KEPT:
            self._kept_bytes -= len(self._kept.popitem(last=False)[1])

    def _spans(self, ranges: List[List[int]]) -> List[Tuple[int, int]]:
        """Where the message records the checked *ranges* cover lie among all of them."""
        seqs = self._seqs
        return [(bisect_left(seqs, first), bisect_right(seqs, last)) for first, last in ranges]

    def message_seqs(self, ranges: List[List[int]]) -> List[int]:
        """The seqs of the message records that the checked *ranges* of a request cover."""
        out = array("q")
        for start, end in self._spans(ranges):
            out.extend(self._seqs[start:end])
        return out.tolist()

    def _message(self, at: int, name: Optional[str], as_text: Optional[_AsText] = None) -> Any:
        return self._content("message", self._seqs[at], self._places[at], self._sizes[at], name, as_text)

    def resolved(
        self,
        data: Dict[str, Any],
        name: Optional[str],
        only: Optional[Set[int]] = None,
        as_text: Optional[_AsText] = None,
    ) -> Dict[str, Any]:
        """A copy of the checked request *data* with its messages and tools in ``request``;
        with *only*, the messages at those positions alone, the others ``None``; with
        *as_text*, what it gives for each one's text in its line, not the value."""
        spans = self._spans(data["messages"])
        if only is None:
            messages = [self._message(at, name, as_text) for start, end in spans for at in range(start, end)]
        else:
            messages = [None] * sum(end - start for start, end in spans)
            wanted, before = iter(sorted(only)), 0  # before: the messages of the spans before
            index = next(wanted, None)
            for start, end in spans:
                while index is not None and index < before + end - start:
                    messages[index] = self._message(start + index - before, name)
                    index = next(wanted, None)
                before += end - start
        tools = data.get("tools")
        out = {key: value for key, value in data.items() if key not in _POOLED_KEYS}
        tool_list = (
            [] if tools is None else self._content("tools", tools, *self._tools[tools][:2], name, as_text)
        )
        request = {"messages": messages, "tools": tool_list}
        request.update((key, value) for key, value in data["request"].items() if key not in _POOLED_KEYS)
        out["request"] = request
        return out

    def _content(
        self,
        kind: str,
        seq: int,
        offset: int,
        size: int,
        name: Optional[str],
        as_text: Optional[_AsText] = None,
    ) -> Any:
        """The message or tool list in the record *seq*, as new objects; with *as_text*, what
        that gives for its text in the line, where ``_value_text`` finds it."""
        raw = self._kept.get(seq)
        if raw is None:
            raw = self._line_at(offset, size)
        elif self._seekable:
            self._kept.move_to_end(seq)
        obj = _parse_line(raw, name, seq, offset, None, -1) if raw.endswith(b"\n") else {}
        data = obj.get("data")
        if obj.get("seq") != seq or obj.get("type") != kind or type(data) is not dict or kind not in data:
            raise FormatError(f"record {seq} changed while it was read", name, seq, offset)
        value = data[kind]
        if as_text is not None:
            text = _value_text(raw, kind, value)
            if text is not None:
                return as_text(text)
        return value

    def _line_at(self, offset: int, size: int) -> bytes:
        """The line at *offset* read again: from a plain file's descriptor, which leaves the
        file's position alone, or else seeking there and back."""
        if self._fd is not None:
            return _read_at(self._fd, offset, size)
        f = self._f
        here = f.tell()
        f.seek(offset)
        raw = f.read(size)
        f.seek(here)
        return raw  # type: ignore[no-any-return]


def _descriptor(f: Any) -> Optional[int]:
    """The descriptor of *f* if it is a plain file (not gzip's, nor a buffer over a stream
    that has none), to read a line again with ``pread``; else ``None``."""
    raw = f.raw if type(f) is io.BufferedReader else f
    if not hasattr(os, "pread") or type(raw) is not io.FileIO:
        return None
    return raw.fileno()


def _value_text(raw: bytes, kind: str, value: Any) -> Optional[bytes]:
    """The JSON text of *value*, the message or tool list of the *kind* record *raw*, as the
    line holds it (a ``RawJSON``'s digits as given), where it lies as this module writes it:
    after the first ``"data":{"KIND":``, to the line's closing ``}}``; else ``None``."""
    start = raw.find(b'"data":{"%s":' % kind.encode())
    if start >= 0 and raw.endswith(b"}}\n"):
        text = raw[start + len(kind) + len('"data":{"":') : -3]
        with contextlib.suppress(ValueError, RecursionError):  # not JSON: some other layout
            if json.loads(text) == value:
                return text
    return None


def _seekable(f: Any) -> bool:
    try:
        return bool(f.seekable())
    except (AttributeError, OSError, ValueError):
        return False


class _Tally:
    """Keeps where the latest checkpoint lies as records stream by (for ``open`` and the
    ``checkpoint`` command)."""

    def __init__(self) -> None:
        self.run_ids: Set[str] = set()  # for a writer that chooses its run ids (begin_run)
        self._latest: Optional[Record] = None
        self._latest_end: Optional[int] = None

    def __call__(self, record: Record) -> None:
        if self._latest_end is None and self._latest is not None:
            self._latest_end = record.offset
        if record.type == "run_start":
            self.run_ids.add(record.run_id or "")
        elif record.type == "checkpoint":
            self._latest = record._replace(data={})  # where it is, not what it holds
            self._latest_end = None

    def latest_checkpoint(self, result: ReadResult) -> Optional[_CheckpointAt]:
        at = self._latest
        if at is None:
            return None
        end = result.complete_bytes if self._latest_end is None else self._latest_end
        return _CheckpointAt(at.offset, end, at.seq, at.run_id or "", at.time)


# ---------------------------------------------------------------------------- writer

_SESSIONS: weakref.WeakSet[Session] = weakref.WeakSet()  # what a forked child must disown


_Redact = Callable[[Dict[str, Any]], Dict[str, Any]]
_Place = Tuple[int, int, int]  # a message record's seq, the message records before it, _referred
_NO_PLACE: _Place = (0, -2, 0)  # no record: seq 0, and no message record comes right after it


class _Context(NamedTuple):
    """The latest request's messages, if each is a ``Message``, and its references: the closed
    ranges' text, the open range's ends, what the messages add to it (``_referred``).  A
    request that sends the same objects and more goes on from here, without looking up or
    encoding them again."""

    messages: List[Any]  # the writer's own, only ever appended to: the first *length* are these
    length: int = 0
    ranges: Tuple[str, ...] = ()
    first: _Place = _NO_PLACE
    last: _Place = _NO_PLACE  # a seq of 0: no range open
    size: int = 0

    def head(self) -> List[Any]:
        """The messages of this context (another that went on from it may have added more)."""
        return self.messages if len(self.messages) == self.length else self.messages[: self.length]

    def extended(self, new: List[Any], places: List[_Place]) -> _Context:
        """The context of this one's messages and then *new*, at *places*."""
        ranges, first, last = list(self.ranges), self.first, self.last
        for place in places:
            if place[1] != last[1] + 1:  # not the message record after the last one
                if last[0]:
                    ranges.append(f"[{first[0]},{last[0]}]")
                first = place
            last = place
        size = self.size + sum(place[2] for place in places)
        # appended to in place, not copied: a copy would touch every message of a long context
        if self.length and len(self.messages) == self.length:
            messages = self.messages
        else:  # _NO_CONTEXT's, or a context another went on from already
            messages = self.messages[: self.length]
        messages += new
        return _Context(messages, len(messages), tuple(ranges), first, last, size)

    def references(self) -> str:
        """The seq ranges of the message records that hold these messages, in order."""
        ranges = self.ranges + ((f"[{self.first[0]},{self.last[0]}]",) if self.last[0] else ())
        return f'"messages":[{",".join(ranges)}]'


_NO_CONTEXT = _Context([])


def _starts_with(items: List[Any], head: List[Any]) -> bool:
    """Whether *items* starts with the very objects of *head* (``Message`` objects): ``<=`` walks
    both lists in C, comparing by identity, without touching a message; only where two differ
    does it call ``Message.__eq__``, which counts its calls: then identity decides, in Python."""
    before = next(_MESSAGE_COMPARISONS)
    try:
        if not head <= items:
            return False
    except Exception:  # noqa: BLE001 - a host's value that cannot be compared: not the same
        return False
    if next(_MESSAGE_COMPARISONS) == before + 1:
        return True
    return len(items) >= len(head) and all(map(operator.is_, head, items))


class _Written:
    """The message and tool list records of a version-2 writer's file, by a digest of their
    JSON, and the latest request's ``Message`` objects by identity (a host changes a message by
    making a new one).  A record is added once its line is in the file (by ``_append``, or
    ``_settle`` after an interrupt): a reference always names a record that is there."""

    def __init__(self) -> None:
        import hashlib  # here, not at import: it takes as long as the rest of the module

        self._hash = hashlib.blake2b
        self.messages: Dict[bytes, _Place] = {}
        self.tools: Dict[bytes, Tuple[int, int]] = {}  # digest -> (seq, size)
        self.mark = (0, 0)  # message records in the file, and the latest one's seq: set at once
        self.latest: Dict[int, Tuple[Any, _Place]] = {}  # id -> (Message, place)
        self.context = _NO_CONTEXT

    def digest(self, text: str) -> bytes:
        return self._hash(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()

    def add(self, kind: str, key: Optional[bytes], seq: int, size: int) -> None:
        """Note the record *seq* of *kind*, adding *size* to a request (``_referred``), whose
        content has digest *key* (``None``: not to be referred to); idempotent."""
        if kind == "tools":
            if key is not None:
                self.tools[key] = (seq, size)
            return
        count, last = self.mark
        if seq > last:
            count += 1
            self.mark = (count, seq)
        if key is not None:
            self.messages[key] = (seq, count - 1, size)

    def plan(
        self, messages: Sequence[Any], codec: Codec
    ) -> Tuple[_Context, List[Any], List[Any], Dict[bytes, Tuple[Any, str]]]:
        """The context of the latest request if *messages* starts with its very objects (else
        none), and the messages after it; each one's place if it is written already, else its
        digest; and the JSON (value and text) of the new ones by digest, in order."""
        if type(messages) is not list:
            messages = list(messages)
        context = self.context
        # the tail before the check: a list another thread changes meanwhile then fails the
        # check (and is taken whole), or only grew after the tail was taken
        new = messages[context.length :]
        if not _starts_with(messages, context.head()):
            context, new = _NO_CONTEXT, messages[:]
        latest, known = self.latest, self.messages
        places: List[Any] = []
        fresh: Dict[bytes, Tuple[Any, str]] = {}
        for message in new:
            hit = latest.get(id(message))
            if hit is not None and hit[0] is message:
                places.append(hit[1])
                continue
            try:
                value = codec.encode(message)
            except CodecError as exc:
                raise CodecError(f"request: {exc}") from exc
            text = _dumps(value)
            key = self.digest(text)
            place = known.get(key, key)  # its digest while it is not written
            if place is key:
                fresh.setdefault(key, (value, text))
            places.append(place)
        return context, new, places, fresh

    def tool_list(self, tools: Sequence[Any]) -> Tuple[Any, Optional[Tuple[Any, str]]]:
        """Where the record of *tools* is if it is written already, else its digest and its
        JSON (value and text); ``(None, None)`` for no tools."""
        value = list(tools)
        if not value:
            return None, None
        try:
            text = _dumps(value)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"data.request.tools: {exc}") from exc
        key = self.digest(text)
        place = self.tools.get(key)
        return (key, (value, text)) if place is None else (place, None)

    def request_text(
        self, text: str, context: _Context, new: List[Any], places: List[Any], tools: Any
    ) -> Tuple[str, int]:
        """The data *text* of a request with its ``messages`` and ``tools`` references, from
        what ``plan`` and ``tool_list`` found, and what the records they name add to its size
        (``_referred``), less the references' own text.  Called
        as its line is written, the new records being in the file; the request becomes the
        latest even if its line is then refused as too long (what it names is in the file)."""
        try:
            if type(tools) is bytes:
                tools = self.tools[tools]
            places = [self.messages[place] if type(place) is bytes else place for place in places]
        except KeyError:
            raise ValueError("a message or tool list of this request is not in the file") from None
        if not context.length:  # not going on from the latest request: its messages are not latest
            self.latest = {}
        self.latest.update((id(m), (m, place)) for m, place in zip(new, places) if type(m) is Message)
        context = context.extended(new, places)
        self.context = context if all(type(m) is Message for m in new) else _NO_CONTEXT
        tail = f",{context.references()}" + ("" if tools is None else f',"tools":{tools[0]}')
        referred = context.size + (0 if tools is None else tools[1]) - len(tail)
        return (f"{text[:-1]}{tail}}}" if text != "{}" else f"{{{tail[1:]}}}"), referred


def _line_head(session_id: str) -> str:
    return f'{{"session_id":"{session_id}","seq":'  # every line starts so: seq and the rest follow


def create(
    path: Union[str, os.PathLike[str]],
    codec: Optional[Codec] = None,
    *,
    version: int = _FORMAT_VERSION,
    redact: Optional[_Redact] = None,
    max_line_bytes: int = _MAX_LINE_BYTES,
    session_id: Optional[str] = None,
    time: Optional[datetime] = None,
) -> Session:
    """Create a new session file at *path* and return its writer.

    The file appears at *path* complete: its first line, ``session_start``, is written and
    synced under a temporary name beside it (``.NAME.<16 hex digits>.tmp``), locked, and
    then linked to *path*, which is never replaced: ``FileExistsError`` if anything is
    there.  Of two creates of one path, one wins and the other gets ``FileExistsError``; a
    create that fails removes its temporary name and leaves nothing at *path*.  The file has
    mode 0600.  *codec* encodes messages and checkpoints (default: ``JSONCodec()``).
    *redact*, if given, takes each event's and checkpoint's JSON-ready ``data`` just before
    it is encoded and returns what to write instead.  A line longer than *max_line_bytes*
    is refused (``RecordingError``): the session never writes what its own ``open`` would
    reject.  The codec and *redact* run under the session's lock; a call they make to the
    session is done as a signal handler's is (see ``Session.close``).  *version* 2 (the
    default) writes each message and tool list once and refers to it; 1 writes each request
    whole, for readers of version 1 only.

    *session_id* (32 lowercase hex digits) and *time* (an aware ``datetime``, the
    ``session_start`` record's time) are for a writer that rebuilds a session it did not
    see happen, such as an import, and must give the same bytes each time; by default the
    id is random and the time is now.  ``ValueError`` for an id of another form or a naive
    time, ``TypeError`` for a time that is not a ``datetime``.
    """
    _check_line_limit(max_line_bytes)
    if type(version) is not int or version not in _VERSIONS:
        raise ValueError(f"version must be 1 or 2, not {version!r}")
    session_id = _new_id() if session_id is None else _checked_id("session_id", session_id)
    stamp = _utc_text(time)
    codec = _default_codec() if codec is None else codec
    return _new_session(_name(path), codec, redact, max_line_bytes, version, session_id, stamp)


_HEX_ID = "[0-9a-f]{32}"


def _checked_id(name: str, value: str) -> str:
    """*value*, a session or run id a writer chose, once it has the form the format gives ids."""
    if type(value) is not str or _compiled(_HEX_ID).fullmatch(value) is None:
        raise ValueError(f"{name} must be 32 lowercase hex digits, not {value!r}")
    return value


def _new_session(
    name: str,
    codec: Codec,
    redact: Optional[_Redact],
    max_line_bytes: int,
    version: int,
    session_id: str,
    stamp: str,
) -> Session:
    """A session of a new file at *name*: its header written and synced under a temporary name
    beside it, locked, then given *name*, never replacing a file there.  Whatever cuts this
    short (an error, Ctrl-C at any step) leaves neither name, nor the descriptor, behind."""
    data = f'{{"version":{version}}}'
    header = f'{_line_head(session_id)}1,"type":"session_start","time":"{stamp}","data":{data}}}\n'
    written = _Written() if version > 1 else None
    folder, base = os.path.split(name)
    base = os.fsdecode(os.fsencode(base)[:200])  # room for the rest within a name's 255 bytes
    temporary = os.path.join(folder, f".{base}.{_new_id()[:16]}.tmp")
    file: Optional[_File] = None
    mine: Optional[os.stat_result] = None
    try:
        file = _file(temporary, True)
        mine = os.fstat(file.fileno())
        _lock(file.fileno(), temporary)
        try:
            _write_all(file.fileno(), header.encode())
            _sync(file.fileno())
        except Exception as exc:
            raise RecordingError(f"{name}: cannot write the session header: {exc}") from exc
        file = _link(file, temporary, name)
        return Session(name, file, session_id, codec, redact, max_line_bytes, 1, len(header), None, written)
    except BaseException as exc:
        if file is not None or not isinstance(exc, OSError):  # else nothing was created
            _abandon(file, mine, temporary, name)
        names_temporary = file is None or isinstance(exc, FileExistsError)  # the error names it
        if isinstance(exc, OSError) and exc.errno is not None and names_temporary:
            # the path's trouble, not the temporary name's (OSError prints a filename2 set to None)
            raise type(exc)(exc.errno, exc.strerror, name) from None
        raise


def _abandon(file: Optional[_File], mine: Optional[os.stat_result], temporary: str, name: str) -> None:
    """Undo a create cut short: remove its *temporary* name (random: nobody else's), and *name*
    while it is still the file *mine* describes; close *file* (after, where the lock keeps
    others out meanwhile; Windows removes no open file)."""
    if sys.platform == "win32" and file is not None:
        file.close()
    with contextlib.suppress(OSError):
        os.unlink(temporary)
    with contextlib.suppress(OSError):
        if mine is not None and os.path.samestat(os.stat(name, follow_symlinks=False), mine):
            os.unlink(name)
    if file is not None:
        file.close()


def open(  # noqa: A001 - the contract's name; the builtin stays reachable as builtins.open
    path: Union[str, os.PathLike[str]],
    codec: Optional[Codec] = None,
    *,
    create: bool = False,
    redact: Optional[_Redact] = None,
    max_line_bytes: int = _MAX_LINE_BYTES,
) -> Session:
    """Open an existing session file at *path* to append to it, in the file's own version.

    The whole file is validated first (``FormatError``, nothing changed, if any complete
    line is bad); an unfinished last line is then cut off and the cut synced.  Appending
    continues its ``seq``; an interrupted run stays incomplete.  With *create*, a file that
    does not exist is created, as ``create`` does: of several callers at once, one creates
    it and the others open it (``LockedError`` while another has it open).  *codec* and
    *redact* are as for ``create``; lines longer than *max_line_bytes* are a ``FormatError``.
    """
    _check_line_limit(max_line_bytes)
    codec = _default_codec() if codec is None else codec
    name = _name(path)
    if create:
        with contextlib.suppress(FileExistsError):
            return _new_session(
                name, codec, redact, max_line_bytes, _FORMAT_VERSION, _new_id(), _utc_text(None)
            )
    return _existing_session(name, codec, redact, max_line_bytes)


def _existing_session(name: str, codec: Codec, redact: Optional[_Redact], max_line_bytes: int) -> Session:
    file = _file(name, False)
    try:
        _lock(file.fileno(), name)
        tally = _Tally()
        with builtins.open(file.fileno(), "rb", _READ_BUFFER, closefd=False) as f:
            f.seek(0)
            index = _Index(f)
            written = _Written()
            result = _read(
                f, name, max_line_bytes, functools.partial(_note, tally, written, index), _NO_DATA, index
            )
        if result.tail_bytes:
            try:
                os.ftruncate(file.fileno(), result.complete_bytes)
                _sync(file.fileno())
            except OSError as exc:
                raise RecordingError(f"{name}: cannot cut the unfinished last line: {exc}") from exc
        session = Session(
            name,
            file,
            result.session_id,
            codec,
            redact,
            max_line_bytes,
            result.records,
            result.complete_bytes,
            tally.latest_checkpoint(result),
            written if index.version > 1 else None,
        )
        session._run_ids = tally.run_ids
        return session
    except BaseException:
        _release_file(file)
        raise


def _note(tally: _Tally, written: _Written, index: _Index, record: Record) -> None:
    """Note *record* in *tally*, and a message or tool list record in *written*, with the
    digest of its content unless its line was too long to be read whole."""
    tally(record)
    kind = record.type
    if kind in _POOLED and index.version > 1:
        key = None
        if index.last_size <= _BIG_LINE:
            value = record.data[kind]
            with contextlib.suppress(_NestedTooDeeply):  # no digest: never referred to
                key = written.digest(_anywhere(_dumps, value, functools.partial(_nesting, value)))
        written.add(kind, key, record.seq, index.last_referred)


def _too_long(size: int, referred: int) -> str:
    if not referred:
        return f"a line of {size - 1} bytes is longer than max_line_bytes"
    whole = size + referred - 1
    return (
        f"a request of {size - 1} bytes, {whole} with the messages and tools it refers to in place,"
        " is longer than max_line_bytes"
    )


class _Pending(NamedTuple):
    """A line on its way into the file, and the open run and latest checkpoint once it is
    there; and its type, with the digest of its content for a message or tool list record."""

    line: bytes
    start: int
    seq: int
    run: Optional[Run]
    checkpoint: Optional[_CheckpointAt]
    kind: str
    key: Optional[bytes]


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
        file: _File,
        session_id: str,
        codec: Codec,
        redact: Optional[_Redact],
        max_line_bytes: int,
        seq: int,
        size: int,
        checkpoint: Optional[_CheckpointAt],
        written: Optional[_Written],
    ) -> None:
        self._file = file  # first: from here __del__ releases it (the caller too, on an error)
        file.owned = True
        self._fd = file.fileno()
        self.path = path
        self.session_id = session_id
        self._codec = codec
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
        self._written = written  # None: a file of version 1
        self._run: Optional[Run] = None  # the run open in the file
        self._run_ids: Set[str] = set()  # every run's id in the file, for begin_run(run_id=...)
        self._ending: Optional[Run] = None  # a run whose run_close is decided, maybe not written yet
        self._closing = False  # close() has begun: no new records
        self._failure: Optional[Exception] = None
        _SESSIONS.add(self)

    def __repr__(self) -> str:
        state = "closed" if self._file.closed else "failed" if self._failure else "open"
        return f"<session.Session {self.path!r} {self.session_id} {state}>"

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __del__(self) -> None:
        # As io does for an unclosed file: warn, and release the descriptor and so the lock.
        # Nothing is written or synced: this runs whenever the collector does, in any thread or
        # at exit, where an error could only be printed, and a run_close would claim an end never
        # reached.  What was written outlives the descriptor; the open run reads as interrupted.
        file = getattr(self, "_file", None)  # __init__ may not have got that far
        if file is not None and not file.closed:
            self._closing = True
            warnings.warn(f"unclosed session {self.path!r}", ResourceWarning, stacklevel=2, source=self)
            _release_file(file)

    def begin_run(self, *, run_id: Optional[str] = None, time: Optional[datetime] = None) -> Run:
        """Start a run with a fresh ``run_id``; ``RunOpenError`` while another is open, and
        ``RuntimeError`` from a signal handler that interrupted a write of this session.

        *run_id* (32 lowercase hex digits, not used by a run of this file before) and *time*
        (an aware ``datetime``, the ``run_start`` record's time) are for a writer that must
        give the same bytes each time, as ``create``'s *session_id* and *time* are; by
        default the id is random and the time is now.  ``ValueError`` for an id of another
        form or already used, or a naive time; nothing is written then.
        """
        run_id = _new_id() if run_id is None else _checked_id("run_id", run_id)
        stamp = _utc_text(time)
        with self._lock:
            self._check_no_run()
            if self._interrupting():  # the new run would start only after the write under way
                raise RuntimeError(f"{self.path}: begin_run cannot interrupt a write to its session")
            if run_id in self._run_ids:
                raise ValueError(f"{self.path}: run_id {run_id} is already used in this file")
            run = Run(self, run_id)
            self._run_ids.add(run_id)
            self._write(self._check_no_run, lambda: self._append(run, "run_start", stamp, "{}"))
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
            if self._file.closed:  # a failed session stays readable
                self._check(None)
            at = self._checkpoint
            if at is None:
                return None
            raw = _read_at(self._fd, at.offset, at.end - at.offset)
        return Checkpoint(self._codec.decode(_snapshot_of(raw, self.path, at)), at.seq, at.run_id, at.time)

    def close(self) -> None:
        """Close an open run, sync, and release the file and its lock.

        Idempotent; raises ``RecordingError`` (again) if recording failed, after releasing.
        An interrupt (``KeyboardInterrupt``, a handler's ``sys.exit``) leaves the file open
        and locked, and the next ``close()`` finishes what it cut short.
        A signal handler may call this (or ``record``, ``save_checkpoint``, ``sync``) at any
        moment.  If it interrupted a write of this session in its own thread, what is written
        is synced at once, and the rest (``run_close``, the last sync, the release) is done
        right after the interrupted line: before that call returns, or unwinds from the
        handler's ``sys.exit``.  Only ``os._exit`` in the handler would skip it.
        """
        with self._lock:
            if not self._file.closed:
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
        run = self._run  # read once: a signal handler may close it between two reads
        if run is not None:
            raise RunOpenError(f"{self.path}: run {run.run_id} is still open; close it first")

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

        The lock is re-entrant: a signal handler that interrupts this thread's own write gets in
        at any point of it, even between ``os.write`` and the seq moving on.  Writing then would
        repeat that seq, so its *write* waits in ``_later`` (checked now), and ``_finish`` does
        it right after the write under way, also when the handler raised (``sys.exit``)."""
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
            self._writing = False  # before the try ends: see _finish
        finally:
            self._writing = False
            self._finish()

    def _finish(self) -> None:
        """Do the queued writes in order, each marked as under way while it runs: a call that
        interrupts one waits for it, and one that comes between two writes is done at once.  An
        exception that cuts this loop short (a second handler's ``sys.exit`` between two writes)
        leaves the rest queued, for the session's next call to do first."""
        first: Optional[BaseException] = None
        while True:
            self._writing = True
            try:
                if self._later:
                    if self._pending is not None:
                        self._settle()
                    self._later.popleft()()
                # Unmarked inside the try: Python 3.8 and 3.9 run signal handlers as a try is
                # left, outside it.  A handler's close() there, marked, would only queue its
                # run_close, and its sys.exit unwind past the loop that writes it.
                self._writing = False
            except BaseException as exc:  # noqa: BLE001 - a handler's sys.exit too: do the rest first
                first = first or exc
            finally:
                self._writing = False
            if not self._later:
                break
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
            if pending.key is not None:
                self._written.add(  # type: ignore[union-attr]
                    pending.kind, pending.key, pending.seq, _own_referred(pending.kind, pending.line)
                )
        self._pending = None

    def _append(
        self,
        run: Run,
        kind: str,
        time: str,
        data: Union[str, Callable[[], Tuple[str, int]]],
        sync: bool = False,
        key: Optional[bytes] = None,
    ) -> None:
        """Write one record of *run* with the next seq, if the file allows it: checked here, as
        a signal handler may close the run or the session after the caller's check.  *data* is
        its text, or makes it and counts the bytes of the lines it refers to (a request's, known
        only now); *key* notes a message or tool list as written.  (Inline: a record made deep
        in the stack has no level to spare.)"""
        self._check_failure()  # an interrupting call may have failed the session
        if self._file.closed:
            raise ValueError(f"{self.path}: session is closed")
        open_run = self._run
        if kind == "run_start" and open_run is not None:
            raise RunOpenError(f"{self.path}: run {open_run.run_id} is still open; close it first")
        if kind != "run_start" and open_run is not run:
            raise ValueError(f"{self.path}: run {run.run_id} is closed")
        referred = 0
        if not isinstance(data, str):
            try:
                data, referred = data()
            except ValueError as exc:
                raise self._fail(exc, "cannot write") from exc
        seq = self._seq + 1
        run_id = run.run_id
        text = (
            f'{self._head}{seq},"type":{_quote(kind)},"time":"{time}","run_id":"{run_id}","data":{data}}}\n'
        )
        try:
            line = text.encode()
        except UnicodeEncodeError:  # a lone surrogate: escape it, and the file stays UTF-8
            line = _escaped_utf8(text)
        if len(line) + referred > self._max_line_bytes + 1:  # a request: no bigger whole than a line
            too_long = ValueError(_too_long(len(line), referred))
            raise self._fail(too_long, "cannot write") from too_long
        offset = self._size
        end = offset + len(line)
        at = _CheckpointAt(offset, end, seq, run_id, time) if kind == "checkpoint" else self._checkpoint
        after = None if kind == "run_close" else run
        # _Pending(...) without NamedTuple's Python-level __new__: a third the cost
        self._pending = tuple.__new__(_Pending, (line, offset, seq, after, at, kind, key))
        try:
            done = os.write(self._fd, line)
            if done != len(line):  # a short write: continue it, never repeat it
                _write_all(self._fd, memoryview(line)[done:])
        except Exception as exc:  # not KeyboardInterrupt or SystemExit: _settle sees to those
            raise self._fail(exc, "cannot write") from exc
        self._seq, self._size, self._run = seq, end, after
        if key is not None:
            self._written.add(kind, key, seq, _own_referred(kind, line))  # type: ignore[union-attr]
        if sync:
            self._sync()
        # A checkpoint is the latest once synced (a failed sync clears _pending); if an
        # exception cuts this short, _settle makes it so as it finds the line in the file.
        self._checkpoint, self._pending = at, None

    def _decide_close(self) -> None:
        self._closing = True

    def _close_now(self) -> None:
        """Write the open run's ``run_close``, sync and release.  An error releases all the
        same; an interrupt (Ctrl-C, a handler's exit) leaves the rest to the next ``close``."""
        if self._file.closed:  # an interrupting close() queued after this one
            return
        try:
            if self._failure is None:
                run = self._run
                if run is not None:
                    self._append(run, "run_close", _utc_text(None), "{}")
                self._sync()
        except Exception:
            self._release()
            raise
        self._release()

    def _release(self) -> None:
        self._run, self._pending = None, None
        try:
            _release_file(self._file)
        except OSError as exc:  # NFS reports write errors here
            raise self._fail(exc, "cannot close") from exc

    def _sync(self) -> None:
        try:
            _sync(self._fd)
        except Exception as exc:
            raise self._fail(exc, "cannot sync") from exc

    def _redacted(self, data: Dict[str, Any]) -> Dict[str, Any]:
        if self._redact is not None:
            data = self._redact(data)
            if type(data) is not dict:
                raise TypeError(f"redact must return a dict, not {type(data).__name__}")
        return data

    def _encoded(self, data: Dict[str, Any]) -> str:
        """The JSON text of *data*, redacted already; ``ValueError`` names a bad key."""
        try:
            text = _dumps(data)
        # not RecursionError: encoding again could overflow the stack for good
        except (TypeError, ValueError) as exc:
            bad = next((key for key, value in data.items() if not _encodable(value)), None)
            raise ValueError(f"data.{bad}: {exc}" if bad else str(exc)) from exc
        digits = _long_integer(text)
        if digits:
            raise ValueError(f"an integer of {digits} digits: readers refuse more than {_INT_DIGITS}")
        return text

    def _request_writes(
        self, run: Run, time: str, data: Dict[str, Any], request: Optional[ModelRequest]
    ) -> List[Callable[[], None]]:
        """The writes that record a model_request in version 2: a ``message`` record for each
        message not written before and a ``tools`` record for a new tool list (each passed
        through the redactor alone, once), then the request, which refers to them."""
        written = self._written
        assert written is not None
        writes: List[Callable[[], None]] = []
        if request is not None:
            context, new, places, fresh = written.plan(request.messages, self._codec)
            tools, new_tools = written.tool_list(request.tools)
            pooled = [("message", key, json) for key, json in fresh.items()]
            if new_tools is not None:
                pooled.append(("tools", tools, new_tools))
            for kind, key, (value, text) in pooled:
                text = self._pooled_text(kind, value, text)
                writes.append(functools.partial(self._append, run, kind, time, text, key=key))
        data = self._redacted(data)
        if data.keys() & _POOLED_KEYS:
            raise ValueError(
                "redact may not add data.messages or data.tools: the writer puts references there"
            )
        text = self._encoded(data)
        if request is not None and type(data.get("request")) is dict:  # else the redactor took it
            later = functools.partial(written.request_text, text, context, new, places, tools)
            writes.append(functools.partial(self._append, run, "model_request", time, later))
        else:
            writes.append(functools.partial(self._append, run, "model_request", time, text))
        return writes

    def _pooled_text(self, kind: str, value: Any, text: str) -> str:
        """The data text of a message or tool list record of *value*, whose JSON is *text*:
        that text itself, unless a redactor has its say (or ``_encoded`` an error to raise)."""
        if self._redact is None and not _long_integer(text):
            return f'{{"{kind}":{text}}}'  # what _encoded makes of it
        data = self._redacted({kind: value})
        if kind not in data:
            raise ValueError(f"redact took data.{kind} of a {kind} record, which requests refer to")
        return self._encoded(data)

    def _forked(self) -> None:
        """In a forked child: never write through the parent's descriptor, nor keep it (the
        lock lives as long as any copy of it: the parent could not open the file again)."""
        self._lock = RLock()
        self._writing, self._later, self._pending = False, deque(), None  # another thread's, gone
        if not self._file.closed:
            self._file.close()
            self._failure = self._failure or RecordingError(
                f"{self.path}: this handle belongs to process {os.getppid()}"
            )


_WRITE_CODE = Session._write.__code__


def _snapshot_of(raw: bytes, name: str, at: _CheckpointAt) -> Any:
    """The JSON snapshot on the checkpoint line *raw*, read back from where *at* says."""
    obj = _parse_line(raw, name, at.seq, at.offset, None, -1) if raw.endswith(b"\n") else {}
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


def register_event_type(name: str) -> None:
    """Declare *name* an event type of the host's own: ``Run.record`` writes an event of a
    type it does not know either way (with every field, see the format), but warns of one
    that is not registered (a ``RuntimeWarning``: a misspelt type is a record nobody finds)."""
    if type(name) is not str or not name:
        raise TypeError(f"an event type is a non-empty str, not {name!r}")
    if name in _RESERVED or name in _POOLED:
        raise ValueError(f"{name!r} is a reserved record type")
    _HOST_TYPES.add(name)


def _warn_unknown_type(kind: str) -> None:
    import difflib  # here: only a type nobody registered needs it

    close = difflib.get_close_matches(kind, sorted(_EVENT_TYPES), n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    warnings.warn(
        f"{kind!r} is no known event type{hint}; it is recorded all the same."
        f" session.register_event_type({kind!r}) declares a type of your own",
        RuntimeWarning,
        stacklevel=3,  # the host's call of record
    )


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
        session = self._session
        if kind in _RESERVED or (kind in _POOLED and session._written is not None):
            raise ValueError(f"{kind!r} is a reserved record type")
        if kind not in _EVENT_TYPES and kind not in _HOST_TYPES:
            _warn_unknown_type(kind)
        # Encoding under the lock too: threads then wait on the lock, not for the GIL while
        # holding it around a write (measured: 8 threads keep 0.7x, not 0.3x, of one thread's pace).
        with session._lock:
            session._check(self)
            try:
                data = _event_data(event, session._codec, 1 if session._written is None else 2)
                if data is None:
                    return False
                time = _utc_text(event.timestamp)
                if session._written is not None and kind == "model_request":
                    writes = session._request_writes(self, time, data, event.request)
                else:
                    text = session._encoded(session._redacted(data))
                    writes = [lambda: session._append(self, kind, time, text)]
            except Exception as exc:
                raise session._fail(exc, f"cannot encode a {kind} event") from exc
            for write in writes:  # each checked again: a signal handler may have closed the run
                session._write(lambda: session._check(self), write)
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
                text = session._encoded(session._redacted({"snapshot": session._codec.encode(snapshot)}))
            except Exception as exc:
                raise session._fail(exc, "cannot encode the checkpoint") from exc
            session._write(
                lambda: session._check(self),
                lambda: session._append(self, "checkpoint", time, text, sync=True),
            )

    def close(self, *, time: Optional[datetime] = None) -> None:
        """Write ``run_close`` and sync.  Idempotent; ``RecordingError`` if recording failed.

        *time* (an aware ``datetime``) is the ``run_close`` record's time, for a writer that
        must give the same bytes each time; by default, now.
        """
        stamp = _utc_text(time)
        session = self._session
        with session._lock:
            session._check_failure()
            if session._run is self:
                session._write(self._decide_close, lambda: self._close_now(stamp))

    def _decide_close(self) -> None:
        self._session._ending = self

    def _close_now(self, stamp: str) -> None:
        session = self._session
        if session._run is self and not session._file.closed:  # not closed by an interrupting call
            session._append(self, "run_close", stamp, "{}", sync=True)


# ---------------------------------------------------------------------------- reader

_Source = Union[str, bytes, "os.PathLike[str]", BinaryIO]


def read(
    source: _Source,
    visit: Callable[[Record], object],
    *,
    max_line_bytes: int = _MAX_LINE_BYTES,
    resolve: bool = True,
) -> ReadResult:
    """Validate *source* as it streams and call *visit* with each complete record.

    *source* is a path or a binary file (read from its current position; offsets count from
    the file's start).  One line is held at a time; a line longer than *max_line_bytes* is a
    ``FormatError``, as is any other violation, after the records before it were visited.  An
    exception from *visit* stops the read and propagates.  In a version-2 file, a
    ``model_request`` comes with its messages and tools in ``data.request``, as version 1
    writes them; with *resolve* false, as written (with references: see the format's docs).
    """
    with _opened(source) as (f, name):
        return _read(f, name, max_line_bytes, visit, None, _Index(f, resolve))


def iter_records(
    source: _Source, *, max_line_bytes: int = _MAX_LINE_BYTES, resolve: bool = True
) -> Iterator[Record]:
    """Yield the complete records of *source* as ``read`` validates them."""
    with _opened(source) as (f, name):
        yield from _records(f, name, max_line_bytes, [], None, False, _Index(f, resolve))


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
                result = _read(f, name, max_line_bytes, lambda record: None, _NO_DATA)
            except FormatError as exc:
                error = exc
            else:
                return RepairResult(result.records, 0, None, None)
        cut = error.offset
        if error.line == 1 or cut is None:
            raise error
        if isinstance(error, _LineTooLong):  # maybe a valid line: cutting it is not for a default to decide
            raise _NotCut(error.reason, *error.args[1:])
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


class _NotCut(FormatError):
    """``repair`` cuts no line only for being longer than the limit: *too_long* says which
    line, and the reason names the limit as *option* (the keyword, or the command's flag)."""

    def __init__(
        self,
        too_long: str,
        path: Optional[str],
        line: Optional[int],
        offset: Optional[int],
        option: str = "max_line_bytes",
    ) -> None:
        super().__init__(f"{too_long}; not cut: repair with a larger {option}", path, line, offset)
        self.too_long = too_long


def _backup(fd: int, name: str) -> str:
    """Copy the file open at *fd* to a new ``NAME.broken-<UTC time>[-N]``, synced with its
    directory entry; the path of the copy."""
    stamp = f"{name}.broken-{datetime.now(timezone.utc):%Y%m%dT%H%M%SZ}"
    for n in range(1, 1000):
        backup = stamp if n == 1 else f"{stamp}-{n}"
        with contextlib.suppress(FileExistsError):
            out = os.open(backup, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _O_BINARY, 0o600)
            break
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


# ---------------------------------------------------------------------------- analysis


@dataclass(frozen=True)
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


@dataclass(frozen=True)
class Gap:
    """Missing evidence: *kind* is ``run_not_closed``, ``no_agent_end``,
    ``model_call_unfinished``, ``tool_call_unfinished`` or ``unrecorded`` (a
    ``recording_gap`` record: its recorder says it missed something); or a history that
    cannot have happened, as a recorder's bug writes it: ``call_ended_twice``,
    ``call_end_without_start`` (a ``model_exec_end`` or ``tool_exec_end`` of no call open
    before it) or ``unknown_parent`` (a call whose ``parent_id`` names no call before it in
    its run).  *seq* is the record that opened it (for the last three, the record that
    contradicts the history); *ref* the call to look up (``None`` for the first two, and for
    a ``recording_gap`` outside a call)."""

    kind: str
    run_id: str
    seq: int
    ref: Optional[CallRef]


@dataclass(frozen=True)
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


def find(
    source: _Source, ref: CallRef, *, max_line_bytes: int = _MAX_LINE_BYTES, resolve: bool = True
) -> List[Record]:
    """Every record of the call *ref* in *source*, in file order (validating as ``read`` does;
    a request's references resolved as ``read`` resolves them, once the file is read)."""
    found: List[Record] = []

    def visit(record: Record) -> None:
        if record.run_id == ref.run_id and _call_ref(record) == ref:
            found.append(record)

    with _opened(source) as (f, name):
        index = _Index(f, keep=resolve and not _seekable(f))
        _read(f, name, max_line_bytes, visit, None, index)
        if resolve and index.version > 1:
            found = [_resolved(record, index, name) for record in found]
    return found


def _resolved(record: Record, index: _Index, name: Optional[str]) -> Record:
    return record._replace(data=index.resolved(record.data, name)) if _refers(record) else record


def _refers(record: Record) -> bool:
    """Whether *record* is a request that refers to its messages (one read in a version-2 file)."""
    return record.type == "model_request" and "messages" in record.data


_OPENS = {
    "model_exec_start": "model_call_unfinished",
    "model_request": "model_call_unfinished",
    "tool_exec_start": "tool_call_unfinished",
}


_SUMMARY_DATA: _DataKeys = {
    **_NO_DATA,
    **dict.fromkeys(_OPENS, frozenset({"execution"})),
    "model_request": _NO_DATA["model_request"] | {"execution"},
    "tool_exec_end": frozenset({"execution"}),
    "model_exec_end": frozenset({"execution", "error", "message"}),
    "agent_end": frozenset(EventData.__annotations__),  # its fields: all it checks
    "recording_gap": frozenset({"execution"}),
}


def summarize(source: _Source, *, max_line_bytes: int = _MAX_LINE_BYTES) -> Summary:
    """Runs, record counts, checkpoints, token usage and evidence gaps of *source*, in one
    streaming pass (memory grows with the runs, the calls still open, the gaps and the calls
    of the run being read, not the file).
    Works on every file ``read`` accepts: data of a shape the format does not write is
    counted in ``Summary.uninterpreted``, not an error."""
    tally = _Summarizer()
    with _opened(source) as (f, name):
        result = _read(f, name, max_line_bytes, tally, _SUMMARY_DATA)
    return tally.summary(result)


def _call_ref(record: Record) -> Optional[CallRef]:
    """``record.ref``, or ``None`` when its ``data.execution`` is not of the format's shape."""
    try:
        return record.ref
    except FormatError:
        return None


def _usage_counts(usage: Dict[str, Any]) -> Dict[str, int]:
    """The token counts of a message's *usage*, as a summary sums them; ``FormatError`` when
    one does not fit in 64 bits (no sum beyond what any line can print)."""
    counts = {key: n for key, n in usage.items() if key in _USAGE_COUNTS and type(n) is int}
    if any(n not in _INT64 for n in counts.values()):
        raise FormatError("a token count does not fit in 64 bits")
    return counts


_RECENT_CALLS = 256  # ids an _Attempts keeps in a dict, where a call's parent mostly is


class _Attempts:
    """The attempts of a run's calls that started, by execution id (run-local).  The latest
    ids are in a dict; the others, moved there ``_RECENT_CALLS`` at a time, in four arrays
    rather than objects: the ids' UTF-8 one after another, where each starts, a bitmask of each
    one's attempts 1 to 63 (bit attempt - 1), and an open-addressing table of them, at most
    half full.  About 45 bytes a call beside its id's bytes, where sets of tuples of strings
    took some 250.  Any other attempt, which no recorder writes (they count from 1), goes to a
    set of its own."""

    def __init__(self) -> None:
        self._recent: Dict[str, int] = {}  # id -> bitmask, of the ids not moved yet
        self._ids = bytearray()
        self._starts = array("q", [0])  # where each id starts in _ids, and where the last ends
        self._bits = array("q")
        self._slots = array("q", [-1]) * 8  # an id's number, at its hash or after; -1: free
        self._other: Dict[str, Set[int]] = {}

    def add(self, call: str, attempt: int) -> None:
        counted = 0 < attempt < 64
        self._recent[call] = self._recent.get(call, 0) | (1 << attempt - 1 if counted else 0)
        if not counted:
            self._other.setdefault(call, set()).add(attempt)
        if len(self._recent) >= _RECENT_CALLS:
            self._move()

    def _move(self) -> None:
        """Move the recent ids to the arrays: an id there already takes their attempts into its
        entry (so that no id is there twice, and no look-up walks past copies of one)."""
        for call, bits in self._recent.items():
            key = call.encode("utf-8", "surrogatepass")
            code = hash(key)
            entry = self._entry(key, code)
            if entry is not None:
                self._bits[entry] |= bits
                continue
            self._ids += key
            self._starts.append(len(self._ids))
            self._bits.append(bits)
            if 2 * len(self._bits) > len(self._slots):
                self._grow()
            else:
                self._place(len(self._bits) - 1, code)
        self._recent.clear()

    def _grow(self) -> None:
        """Twice the slots, every id placed again."""
        self._slots = array("q", [-1]) * (2 * len(self._slots))
        starts, ids = self._starts, self._ids
        for entry in range(len(self._bits)):
            self._place(entry, hash(bytes(ids[starts[entry] : starts[entry + 1]])))

    def _place(self, entry: int, code: int) -> None:
        slots = self._slots
        mask = len(slots) - 1
        at = code & mask
        while slots[at] >= 0:
            at = (at + 1) & mask
        slots[at] = entry

    def _entry(self, key: bytes, code: int) -> Optional[int]:
        """The number of the id *key* (whose hash is *code*) in the arrays, if it is there."""
        slots, starts, ids = self._slots, self._starts, self._ids
        mask = len(slots) - 1
        at = code & mask
        while slots[at] >= 0:
            entry = slots[at]
            if ids[starts[entry] : starts[entry + 1]] == key:
                return entry
            at = (at + 1) & mask
        return None

    def _attempts(self, call: str) -> Optional[int]:
        """The bitmask of *call*'s attempts 1 to 63 that started (``None``: no attempt did)."""
        key = call.encode("utf-8", "surrogatepass")
        entry = self._entry(key, hash(key))
        found = self._recent.get(call)
        return found if entry is None else (found or 0) | self._bits[entry]

    def __contains__(self, call: str) -> bool:
        """Whether an attempt of *call* started."""
        return call in self._recent or self._attempts(call) is not None

    def started(self, call: str, attempt: int) -> bool:
        if 0 < attempt < 64:
            return bool((self._attempts(call) or 0) >> attempt - 1 & 1)
        return attempt in self._other.get(call, ())

    def latest(self, call: str) -> Optional[int]:
        """The highest attempt of *call* that started (``None`` when none did)."""
        bits = self._attempts(call)
        if bits is None:
            return None
        found = list(self._other.get(call, ()))
        if bits:
            found.append(bits.bit_length())  # the highest attempt counted in *bits*
        return max(found)


class _RunState:
    """What ``summarize`` keeps of one run while it streams."""

    def __init__(self, record: Record) -> None:
        self.start = record
        self.last = record  # a run's records come in a row: it holds last.seq - start.seq + 1
        self.closed = False
        self.end_reason = ""
        self.error: Optional[Dict[str, Any]] = None
        # the gaps open: (kind, its call's (execution id, attempt), else a recording_gap's seq
        # or 0) -> the seq of the first record that opened it; CallRefs are built for the gaps only
        self.open_gaps: Dict[Tuple[str, Union[Tuple[str, int], int]], int] = {}


_CLOSES = {"model_exec_end": "model_call_unfinished", "tool_exec_end": "tool_call_unfinished"}
# Gaps of a history that cannot have happened: what a recorder's bug writes
_IMPOSSIBLE = ("call_ended_twice", "call_end_without_start", "unknown_parent")


def _kind_attempt(opened: str, attempt: int) -> int:
    """*attempt* of a call of the kind *opened* (the gap an unfinished one is) as one number,
    for an ``_Attempts`` of calls of both kinds."""
    return 2 * attempt + (opened == "tool_call_unfinished")


class _Summarizer:
    def __init__(self) -> None:
        self.counts: Dict[str, int] = {}
        self.runs: Dict[str, _RunState] = {}
        self.run: Optional[_RunState] = None  # the latest run_start's: the reader lets no other through
        self.usage: Dict[str, int] = {}
        self.uninterpreted = 0
        self.replies = 0  # model_exec_end records of a call that succeeded
        # the attempts of the latest run's calls that started (see _kind_attempt): kept for
        # that run only (execution ids are run-local)
        self.started = _Attempts()

    def __call__(self, record: Record) -> None:
        kind = record.type
        counts = self.counts
        counts[kind] = counts.get(kind, 0) + 1
        if record.run_id is None:
            return
        if kind == "run_start":
            self.run = self.runs[record.run_id] = _RunState(record)
            self.started = _Attempts()
        run = self.run
        assert run is not None
        run.last = record
        try:
            self._interpret(record, run)
        except FormatError:  # data the format does not write: counted, never a failure
            self.uninterpreted += 1

    def _interpret(self, record: Record, run: _RunState) -> None:
        """Take what the summary needs from *record*; ``FormatError`` when its data is not of
        the format's shape, before changing anything but the call a model_exec_end ends."""
        kind = record.type
        opens = _OPENS.get(kind)
        if opens is not None:  # the calls first: most records are theirs
            call = _execution_key(record)
            if call is not None:
                self._open(run, opens, call, record)
        elif kind in _CLOSES:
            call = _execution_key(record)
            if call is not None:
                self._close(run, _CLOSES[kind], call, record.seq)
            if kind == "model_exec_end" and "error" not in record.data:
                self.replies += 1
                self._add_usage(record.data.get("message"))
        elif kind == "run_close":
            run.closed = True
        elif kind == "recording_gap":
            call = _execution_key(record)
            run.open_gaps.setdefault(("unrecorded", record.seq if call is None else call), record.seq)
        elif kind == "agent_start":
            run.open_gaps.setdefault(("no_agent_end", 0), record.seq)
        elif kind == "agent_end":
            data = EventData.from_record(record)
            run.open_gaps.pop(("no_agent_end", 0), None)
            run.end_reason = data.summary.end_reason if data.summary else ""
            run.error = data.error

    def _open(self, run: _RunState, opens: str, call: Tuple[str, int], record: Record) -> None:
        """Note the call *call* opened by *record*, and whether its parent is a call before it."""
        opened = (opens, call) in run.open_gaps  # by a record before: started already
        run.open_gaps.setdefault((opens, call), record.seq)
        parent = record.data["execution"].get("parent_id", "")
        if parent and ("unknown_parent", call) not in run.open_gaps and parent not in self.started:
            run.open_gaps[("unknown_parent", call)] = record.seq
        if not opened:
            self.started.add(call[0], _kind_attempt(opens, call[1]))

    def _close(self, run: _RunState, opened: str, call: Tuple[str, int], seq: int) -> None:
        """Note the end, at *seq*, of *call*: of an open call, or a gap of an impossible history."""
        if run.open_gaps.pop((opened, call), None) is None:
            ended = self.started.started(call[0], _kind_attempt(opened, call[1]))
            kind = "call_ended_twice" if ended else "call_end_without_start"
            run.open_gaps.setdefault((kind, call), seq)

    def _add_usage(self, message: Any) -> None:
        value = message.get("value") if type(message) is dict else None
        usage = value.get("usage") if type(value) is dict else None
        if type(usage) is dict:
            for key, count in _usage_counts(usage).items():
                self.usage[key] = self.usage.get(key, 0) + count

    def summary(self, result: ReadResult) -> Summary:
        runs, gaps, session_id = [], [], result.session_id
        for run_id, run in self.runs.items():
            start, last = run.start, run.last
            span = (start.seq, last.seq, start.time, last.time, last.seq - start.seq + 1)
            runs.append(RunInfo(run_id, *span, run.closed, run.end_reason, run.error))
            if not run.closed:
                gaps.append(Gap("run_not_closed", run_id, run.start.seq, None))
            for (kind, call), seq in run.open_gaps.items():
                ref = CallRef(session_id, run_id, *call) if isinstance(call, tuple) else None
                gaps.append(Gap(kind, run_id, seq, ref))
        gaps.sort(key=lambda gap: gap.seq)
        return Summary(
            session_id,
            result.records,
            self.counts,
            runs,
            self.counts.get("checkpoint", 0),
            gaps,
            self.usage,
            result.tail_bytes,
            self.uninterpreted,
        )


# ---------------------------------------------------------------------------- command line


_EX_IOERR = 74  # BSD sysexits.h: an error while doing I/O on some file (here, the output)
_READS_STDIN = ("validate", "summary", "show")  # checkpoint reads its line twice; repair cuts a file


def _valid_fields(name: str, result: ReadResult, tally: _Summarizer) -> Dict[str, Any]:
    """``validate --json``'s object for a valid file, from what *tally* saw of it: *impossible*
    lists the seqs of the records of a history that cannot have happened (valid all the same)."""
    summary = tally.summary(result)
    return {
        "file": name,
        "ok": True,
        "session_id": result.session_id,
        "records": result.records,
        "runs": len(summary.runs),
        "incomplete_runs": sum(not run.closed for run in summary.runs),
        "checkpoints": summary.checkpoints,
        "complete_bytes": result.complete_bytes,
        "tail_bytes": result.tail_bytes,
        "impossible": [gap.seq for gap in summary.gaps if gap.kind in _IMPOSSIBLE],
    }


def _failure_fields(name: str, exc: Exception) -> Dict[str, Any]:
    """``validate --json``'s object for an invalid or unreadable file."""
    if isinstance(exc, FormatError):
        line, offset, reason = exc.line, exc.offset, exc.reason
    else:
        line, offset, reason = None, None, _os_reason(exc) if isinstance(exc, OSError) else str(exc)
    return {"file": name, "ok": False, "line": line, "offset": offset, "error": reason}


def _failure_text(fields: Dict[str, Any]) -> str:
    """``validate``'s line for an invalid or unreadable file."""
    name, line, offset, error = fields["file"], fields["line"], fields["offset"], fields["error"]
    if line is None:
        return f"{name}: {error}"
    return f"{name}:{line}: {error}" + ("" if offset is None else f" (offset {offset})")


def _each_file(work: Callable[[Any, str], int], args: Any) -> int:
    """The highest status of *work* (which prints) on each of ``args.files``, in order."""
    return max([work(args, name) for name in args.files])


def _validate_file(args: Any, name: str) -> int:
    tally = _Summarizer()
    try:
        result = _read_file(name, args.max_line_bytes, tally, keys=_SUMMARY_DATA)
    except (FormatError, OSError) as exc:
        _print_failure(name, exc, args.json)
        return 1
    fields = _valid_fields(name, result, tally)
    if args.json:
        _print_json(fields)
    else:
        _print_text(
            f"{name}: ok, {_count(result.records, 'record')}, {_count(fields['runs'], 'run')} "
            f"({fields['incomplete_runs']} incomplete), {_count(fields['checkpoints'], 'checkpoint')}"
            f"{_impossible_text(fields['impossible'])}{_tail_text(result.tail_bytes)}"
        )
    return 0


_LISTED = 10  # seqs a line names at most


def _impossible_text(seqs: List[int]) -> str:
    """What ``validate`` says of the records of an impossible history (``summary`` says more)."""
    if not seqs:
        return ""
    shown = ", ".join(map(str, seqs[:_LISTED])) + (", ..." if len(seqs) > _LISTED else "")
    return f", {_count(len(seqs), 'record')} of an impossible history (seq {shown}; see summary)"


def _count(number: int, noun: str) -> str:
    """*number* *noun*s in English: "1 run", "2 runs"."""
    return f"{number} {noun}" if number == 1 else f"{number} {noun}s"


def _tail_text(size: int) -> str:
    return f", ignored {size}-byte unfinished tail" if size else ""


def _repair_command(args: Any) -> int:
    name = args.file
    try:
        result = repair(name, max_line_bytes=args.max_line_bytes)
        valid = result.error is None  # and maybe ending in an unfinished line, which repair leaves
        tail = read(name, lambda record: None, max_line_bytes=args.max_line_bytes).tail_bytes if valid else 0
    except (SessionError, OSError) as exc:
        if isinstance(exc, _NotCut):
            exc = _NotCut(exc.too_long, exc.path, exc.line, exc.offset, "--max-line-bytes")
        _print_failure(name, exc, False)
        if isinstance(exc, FormatError) and exc.line == 1:
            _print_error(f"{name}: not repaired: without a good first line there is no session to keep")
        return 1
    error = result.error
    if error is None:
        left = f"; its {tail}-byte unfinished last line is left for open, which removes it" if tail else ""
        _print_text(f"{name}: valid, nothing to repair ({_count(result.kept_records, 'record')}){left}")
    else:
        _print_text(
            f"{name}: kept {_count(result.kept_records, 'record')}; "
            f"dropped {_count(result.dropped_bytes, 'byte')} from line {error.line} "
            f"(offset {error.offset}): {error.reason}"
        )
        _print_text(f"{name}: the original is kept as {result.backup_path}")
    return 0


def _summarize_file(args: Any, name: str) -> int:
    as_json = args.json
    tally = _Summarizer()
    try:
        result = _read_file(name, args.max_line_bytes, tally, keys=_SUMMARY_DATA)
    except (FormatError, OSError) as exc:
        _print_failure(name, exc, as_json)
        return 1
    summary = tally.summary(result)
    try:  # a hostile file's values can be too deep to print, or too long a number
        if as_json:
            fields = dict(vars(summary), runs=[vars(run) for run in summary.runs])
            fields["gaps"] = [dict(vars(gap), ref=gap.ref and gap.ref.to_json()) for gap in summary.gaps]
            _print_json({"file": name, "ok": True, **fields})
        else:
            for line in _summary_lines(args.prog, name, summary, tally.replies):
                _print_text(line)
    except (ValueError, RecursionError) as exc:
        _print_failure(name, ValueError(f"cannot print the summary: {exc}"), as_json)
        return 1
    return 0


def _summary_lines(prog: str, name: str, summary: Summary, replies: int) -> List[str]:
    out = [
        f"{name}: session {summary.session_id}, {_count(summary.records, 'record')}, "
        f"{_count(len(summary.runs), 'run')}, {_count(summary.checkpoints, 'checkpoint')}"
        f"{_tail_text(summary.tail_bytes)}"
    ]
    for run in summary.runs:
        state = "closed" if run.closed else "not closed"
        reason = f", end reason {run.end_reason}" if run.end_reason else ""
        out.append(
            f"run {run.run_id}: seq {run.first_seq}-{run.last_seq}, {_count(run.records, 'record')}, "
            f"{state}{reason}"
        )
        out.append(f"  {run.start_time} to {run.end_time} ({_duration(run.start_time, run.end_time)})")
        if run.error is not None:
            out.append(f"  error: {_error_text(run.error)}")
    out.append("records by type: " + ", ".join(f"{k} {v}" for k, v in sorted(summary.counts.items())))
    out.append("usage: " + (", ".join(f"{k} {v}" for k, v in summary.usage.items()) or _no_usage(replies)))
    if summary.uninterpreted:
        out.append(f"uninterpreted: {summary.uninterpreted} records whose data has an unexpected shape")
    out.append("gaps: none" if not summary.gaps else f"gaps: {len(summary.gaps)}")
    for gap in summary.gaps:
        ref = gap.ref
        where = f"run {gap.run_id}" if ref is None else f"{ref.execution_id} attempt {ref.attempt}"
        out.append(f"  seq {gap.seq}: {gap.kind}, {where}")
        if ref is not None:
            out.append(f"    ref {json.dumps(ref.to_json())}")
            show = ["show", name, "--run", gap.run_id, "--execution", ref.execution_id]
            out.append(f"    {prog} {' '.join(map(_shell_word, show))} --attempt {ref.attempt} --pretty")
    return out


def _no_usage(replies: int) -> str:
    """Why a summary has no usage, from the *replies* (successful ``model_exec_end`` records):
    a host that records a provider's own message dicts gets none."""
    if not replies:
        return "none reported"
    return (
        f"none reported by {_count(replies, 'successful model_exec_end record')}: no message of theirs is a"
        f" Message whose usage has {', '.join(sorted(_USAGE_COUNTS))}; record each reply as"
        " session.Message(..., usage={'input': N, 'output': N})"
    )


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
    if args.attempt is not None and args.execution is None:
        args.usage_error("--attempt needs --execution")
    if args.follow and args.file == "-":
        args.usage_error("--follow needs a file, not standard input")
    types = set(args.type or ())
    never = sorted(kind for kind in types if _PROJECTIONS.get(kind, True) is None)
    if never:
        _print_error(f"{args.prog} show: --type {_in_line(never[0])}: that event type is never written")
        return 2
    out = sys.stdout.buffer
    unreadable = 0  # records whose execution is not of the shape the format writes
    seen: Set[str] = set()

    def visit(record: Record) -> None:
        nonlocal unreadable
        seen.add(record.type)
        if (args.run is not None and record.run_id != args.run) or (types and record.type not in types):
            return
        if args.execution is not None:
            ref = _call_ref(record)
            if ref is None:
                if "execution" in record.data:
                    unreadable += 1
                return
            if ref.execution_id != args.execution or args.attempt not in (None, ref.attempt):
                return
        line = lines.last
        if not args.as_written and index.version > 1 and _refers(record):
            if args.pretty:
                record = _resolved(record, index, args.file)
            else:
                line = _exact_line(record, index, args.file)
        if args.pretty:
            line = _for_terminal(_transcript(record), newlines=True).encode(errors="backslashreplace")
        try:
            out.write(line)
            if args.follow:
                out.flush()
        except OSError as exc:
            raise _OutputError(exc) from exc

    try:
        with _input(args.file) as f:
            lines = _Tap(_Following(f, args.file) if args.follow else f)
            index = _Index(f, keep=not (args.as_written or _seekable(f)))
            _read_file(args.file, args.max_line_bytes, visit, lines, None, index)
    except (FormatError, OSError) as exc:
        out.flush()
        _print_failure(args.file, exc, False)
        return 1
    if unreadable:
        _print_error(
            f"{args.file}: {_count(unreadable, 'record')} with an execution of unexpected shape not matched"
        )
    return _unknown_types(args, types - seen - _KNOWN_TYPES, seen)


_KNOWN_TYPES = _RESERVED | _POOLED | {kind for kind in _PROJECTIONS if _PROJECTIONS[kind] is not None}


def _unknown_types(args: Any, unknown: Set[str], seen: Set[str]) -> int:
    """2, with a message, when a ``--type`` is no known record type nor in the file (a typo?); else 0."""
    if not unknown:
        return 0
    found = ", ".join(sorted(seen)) or "none"
    _print_error(
        f"{args.prog} show: --type {_in_line(min(unknown))}: no such record type, and none in"
        f" {args.file} (its types: {_in_line(found)})"
    )
    return 2


class _OutputError(Exception):
    """Writing the output failed with *error*: not the input's fault."""

    def __init__(self, error: OSError) -> None:
        super().__init__(error)
        self.error = error


class _Following:
    """A session file read as it grows (``show --follow``): a line is handed out once whole;
    the end comes once the writer has let the file go, a torn last line then handed out as
    the unfinished tail it is.  A file truncated or replaced meanwhile is a ``FormatError``."""

    _WAIT = 0.2  # seconds between looks at a file that has not grown

    def __init__(self, f: BinaryIO, name: str) -> None:
        self._f = f
        self._name = name
        self._id = os.fstat(f.fileno())

    def tell(self) -> int:
        return self._f.tell()

    def readline(self, size: int = -1, /) -> bytes:
        line = b""
        while True:
            line += self._f.readline(size - len(line) if size >= 0 else -1)
            if line.endswith(b"\n") or 0 <= size <= len(line):
                return line
            self._check()
            if not self._written():
                return line + self._f.readline(size - len(line) if size >= 0 else -1)
            import time

            time.sleep(self._WAIT)

    def _check(self) -> None:
        now = os.stat(self._name)
        if (now.st_dev, now.st_ino) != (self._id.st_dev, self._id.st_ino) or now.st_size < self._f.tell():
            raise FormatError(
                "the file was truncated or replaced while followed (see python -m session repair)",
                self._name,
                None,
                self._f.tell(),
            )

    def _written(self) -> bool:
        """Whether a writer holds the file: its lock, tried for on a file description of
        our own, is taken (device numbers, as /proc/locks gives them, differ from stat's on
        btrfs and overlayfs)."""
        return _held(self._name)


class _Tap:
    """A binary file that keeps the last line it handed out: ``show`` prints it as it was."""

    def __init__(self, f: Union[BinaryIO, _Following]) -> None:
        self._f = f
        self.last = b""

    def tell(self) -> int:
        return self._f.tell()

    def readline(self, size: int = -1, /) -> bytes:
        self.last = self._f.readline(size)
        return self.last


def _exact_line(record: Record, index: _Index, name: str) -> bytes:
    """The version-2 request *record* as version 1 writes it, each message and tool list as
    its own record holds it: a mark in its place, then its text for the mark."""
    texts: List[bytes] = []
    token = _new_id()

    def mark(text: bytes) -> str:
        texts.append(text)
        return f"\0{token}{len(texts) - 1}"

    data = index.resolved(record.data, name, as_text=mark)
    line = _record_line(record._replace(data=data), name)
    return re.sub(rb'"\\u0000%s(\d+)"' % token.encode(), lambda m: texts[int(m[1])], line)


def _record_line(record: Record, name: str) -> bytes:
    """*record* as one line of JSON (a version-2 request as version 1 writes it)."""
    obj = {"session_id": record.session_id, "seq": record.seq, "type": record.type, "time": record.time}
    obj.update(run_id=record.run_id, data=record.data)
    try:
        text = _anywhere(_dumps, obj, functools.partial(_nesting, obj))
    except _NestedTooDeeply:  # two levels deeper than its deepest message: the reader's limit
        problem = "nested too deeply to print with its messages in place: --as-written prints it"
        raise FormatError(problem, name, record.seq, record.offset) from None
    return _escaped_utf8(text + "\n")


def _transcript(record: Record) -> str:
    """One record as readable text, nothing cut short: messages, tool calls and results, errors."""
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
            out += [f"  {key}: {_json_text(value.get(key))}" for key in ("tools", "config")]
        else:
            out.append(f"  {_in_line(key)}: {_json_text(value)}")
    return "\n".join(out) + "\n"


def _message_text(message: Any, label: str) -> List[str]:
    """A codec-encoded message as ``role: text`` lines, one per block; anything unexpected as JSON."""
    value = message.get("value") if type(message) is dict and "$type" in message else message
    content = value.get("content", False) if type(value) is dict else False  # null: Go's empty list
    if type(value) is not dict or (type(content) is not list and content is not None):
        return [f"  {label}: {_json_text(message)}"]
    role = _in_line(value.get("role", "?"))
    metadata = value.get("metadata")
    if role == "tool" and type(metadata) is dict and "tool_call_id" in metadata:
        outcome = "error" if metadata.get("is_error") is True else "result"
        role = f"tool {outcome} for {_in_line(metadata['tool_call_id'])}"
    out = [f"  {role}{_block_text(block)}" for block in content or ()]
    out += [f"  {key}: {_json_text(value[key])}" for key in ("stop_reason", "usage") if value.get(key)]
    return out or [f"  {role}: (no content)"]


def _block_text(block: Any) -> str:
    """One content block, after its role: agentgo's blocks in words, anything else as JSON."""
    kind = block.get("type") if type(block) is dict else None
    if kind == "text" or kind == "thinking":
        text = str(block.get(kind, "")).replace("\n", "\n    ")
        return f": {text}" if kind == "text" else f" thinks: {text}"
    if kind == "toolCall" and type(block.get("tool_call")) is dict:
        call = block["tool_call"]
        args = (
            f"unparsed {_json_text(call.get('args_raw_text'))}"
            if call.get("args_invalid")
            else _json_text(call.get("args"))
        )
        return f" calls {_in_line(call.get('name'))}({args}) id {_in_line(call.get('id'))}"
    if kind == "image" and type(block.get("image")) is dict:
        image = block["image"]
        data = image.get("data")
        where = (
            f"{len(data) * 3 // 4 - (len(data) - len(data.rstrip('=')))} bytes"
            if type(data) is str
            else f"at {_in_line(image.get('url'))}"
        )
        return f": [image, {where}, {_in_line(image.get('mime_type') or 'type not given')}]"
    if kind == "tool_reference":
        return f" refers to tool {_in_line(block.get('tool_name'))}"
    return f": {_json_text(block)}"


def _json_text(value: Any, indent: Optional[int] = None) -> str:
    try:
        return json.dumps(value, ensure_ascii=False, indent=indent)
    except RecursionError:  # deeper than this stack allows: compact, from a fresh stack, as read
        return _on_fresh_stack(_dumps, value)  # type: ignore[no-any-return]


def _checkpoint_command(args: Any) -> int:
    tally = _Tally()
    try:
        with builtins.open(args.file, "rb", _READ_BUFFER) as f:  # opened once: a FIFO too
            result = _read_file(args.file, args.max_line_bytes, tally, f, keys=_NO_DATA)
            at = tally.latest_checkpoint(result)
            if at is None:
                _print_error(f"{args.file}: no checkpoint in {_count(result.records, 'record')}")
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
    name: str,
    max_line_bytes: int,
    visit: Callable[[Record], object],
    lines: Optional[_Lines] = None,
    keys: Optional[_DataKeys] = None,
    index: Optional[_Index] = None,
) -> ReadResult:
    """``read`` for the commands, showing a percentage on a terminal while a big file is read."""
    size = 0 if name == "-" else os.stat(name).st_size
    progress = _Progress(name, size, visit) if size > _PROGRESS_FROM and sys.stderr.isatty() else None
    try:
        if lines is not None:
            return _read(lines, name, max_line_bytes, progress or visit, keys, index)
        with _input(name) as f:
            return _read(f, name, max_line_bytes, progress or visit, keys, index)
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
    """One file's failure: ``FILE:LINE: reason (offset N)`` on stderr, or a JSON object on stdout."""
    fields = _failure_fields(name, exc)
    if as_json:
        _print_json(fields)
    elif isinstance(exc, (LockedError, RecordingError)):  # their message names the file already
        _print_error(fields["error"])
    else:
        _print_error(_failure_text(fields))


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
_UNSAFE_IN_LINE = f"[\n{_TERMINAL_UNSAFE}]"
_UNSAFE_IN_TEXT = f"[{_TERMINAL_UNSAFE}]"


def _for_terminal(text: str, newlines: bool = False) -> str:
    """*text* with each character in ``_TERMINAL_UNSAFE`` as a visible escape (``\\x1b``), so that
    a file cannot move the cursor, set the window title or reorder what is shown; newlines stay
    only when *newlines* (a transcript's texts keep their lines)."""
    return _compiled(_UNSAFE_IN_TEXT if newlines else _UNSAFE_IN_LINE).sub(_escape, text)


def _json_for_terminal(text: str) -> str:
    """JSON *text* with what ``_for_terminal`` escapes written as JSON escapes (``\\u202e``):
    the same value, safe on a terminal too.  (JSON escapes C0 controls itself, and only
    strings can hold the others.)"""
    return _compiled(_UNSAFE_IN_TEXT).sub(lambda match: f"\\u{ord(match.group()):04x}", text)


def _escape(match: typing.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def _shell_word(word: str) -> str:
    """*word* quoted for a POSIX shell, and safe to show: one with an unprintable character is in
    bash's and zsh's ``$'…'`` form, whose escapes paste as the word itself, not as shown."""
    import shlex

    if word.isprintable():
        return shlex.quote(word)
    return "$'" + "".join(_shell_char(char) for char in word) + "'"


def _shell_char(char: str) -> str:
    if char in "\\'":
        return "\\" + char
    if char.isprintable():
        return char
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x80 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


class _Command(NamedTuple):
    """One command of ``python -m session``, as its help shows it, and what runs it."""

    name: str
    about: str
    status: str
    many: bool
    options: Callable[[Any], object]
    run: Callable[[Any], int]


def _file_arguments(sub: Any, command: _Command) -> None:
    """The arguments every command takes: its files, and the longest line it reads."""
    stdin = "- reads stdin" if command.name in _READS_STDIN else None
    if command.many:
        sub.add_argument("files", nargs="+", metavar="FILE", help=stdin)
    else:
        sub.add_argument("file", metavar="FILE", help=stdin)
    sub.add_argument(
        "--max-line-bytes",
        type=_line_limit_argument,
        default=_MAX_LINE_BYTES,
        metavar="N",
        help="longest line read, in bytes (default: %(default)s, 256 MiB)",
    )


def _line_limit_argument(text: str) -> int:
    import argparse

    try:
        limit = int(text)
        _check_line_limit(limit)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return limit


def _many_files_options(sub: Any) -> None:
    sub.add_argument("--json", action="store_true", help="print one JSON object per file (default: text)")


def _show_options(sub: Any) -> None:
    sub.add_argument("--run", metavar="RUN_ID", help="records of this run (default: every run)")
    sub.add_argument(
        "--type",
        action="append",
        metavar="TYPE",
        help="records of this type (repeat: any of them; default: every type)",
    )
    sub.add_argument("--execution", metavar="ID", help="records of this execution id (default: any)")
    sub.add_argument(
        "--attempt", type=int, metavar="N", help="of this attempt (needs --execution; default: every attempt)"
    )
    sub.add_argument(
        "--pretty",
        action="store_true",
        help="a readable transcript instead of the lines (default: the lines)",
    )
    sub.add_argument(
        "--as-written",
        action="store_true",
        help="a version-2 model_request as written, with references (default: with its messages and tools)",
    )
    sub.add_argument(
        "--follow",
        action="store_true",
        help="print records as they are appended, until the writer closes the file (default: read once)",
    )


def _no_options(sub: Any) -> None:
    """A command with no options of its own."""


_EXPORT_COMMANDS = {  # session_export.py's, by name, for the list of commands when it is missing
    "export": "copy sessions' complete records to JSON Lines, with a manifest",
    "html": "one self-contained HTML page to look at a session",
    "otlp": "send sessions' runs and calls to an OpenTelemetry backend as spans (OTLP/HTTP)",
}
_IMPORT_COMMANDS = {  # session_import.py's
    "import": "bring in sessions other tools recorded (Claude Code, Codex, Gemini CLI, claude-trace)",
}
_DIFF_COMMANDS = {  # session_diff.py's
    "diff": "compare two sessions: the first difference, explained, and each run's figures",
}
_COMPANIONS = {  # the modules beside this one with more commands: their commands, by module
    "session_export": _EXPORT_COMMANDS,
    "session_import": _IMPORT_COMMANDS,
    "session_diff": _DIFF_COMMANDS,
}


def _companion(name: str) -> Any:
    """The companion module *name* (``session_export``, ``session_import``, ``session_diff``):
    importable, or in the file beside this one (``python -I session.py`` puts no folder on
    the path); ``None`` without it."""
    import importlib.util

    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name != name:
            raise
    beside = os.path.join(os.path.dirname(os.path.abspath(__file__)), f"{name}.py")
    spec = importlib.util.spec_from_file_location(name, beside)
    if spec is None or spec.loader is None or not os.path.isfile(beside):
        return None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _needs_companion(name: str, args: Any) -> int:
    _print_error(
        f"{args.prog} {args.command}: needs {name}.py beside session.py"
        " (the wheel installs both; a vendored copy needs both files)"
    )
    return 2


def _is_missing(handler: Any) -> bool:
    """Whether *handler* stands in for a missing companion's command."""
    return getattr(handler, "func", None) is _needs_companion


def _missing_commands(name: str) -> List[_Command]:
    """Stand-ins for the companion *name*'s commands, which say what is missing."""

    def anything(sub: Any) -> None:
        sub.add_argument("arguments", nargs="*", help=f"see {name}.py")

    return [
        _Command(
            command, about, f"2 {name}.py missing", True, anything, functools.partial(_needs_companion, name)
        )
        for command, about in _COMPANIONS[name].items()
    ]


def _companion_commands(wanted: str) -> List[_Command]:
    """Every companion's commands; a companion is imported only for the *wanted* command."""
    commands: List[_Command] = []
    for name, names in _COMPANIONS.items():
        module = _companion(name) if wanted in names else None
        commands += module.COMMANDS if module is not None else _missing_commands(name)
    return commands


_COMMANDS = [
    _Command(
        "validate",
        "check session files against the format",
        "0 every file valid; 1 any invalid or unreadable (all are checked)",
        True,
        _many_files_options,
        functools.partial(_each_file, _validate_file),
    ),
    _Command(
        "repair",
        "keep the records before the first bad line, drop the rest (keeps a copy)",
        "0 the file is valid afterwards; 1 otherwise",
        False,
        _no_options,
        _repair_command,
    ),
    _Command(
        "summary",
        "runs, counts, token usage and missing evidence of sessions",
        "0 every file valid, whatever its gaps; 1 any invalid or unreadable (all are read)",
        True,
        _many_files_options,
        functools.partial(_each_file, _summarize_file),
    ),
    _Command(
        "show",
        "print the matching records' lines (a request with its messages in place)",
        "0 valid; 1 invalid or unreadable (the records before the bad line are printed)",
        False,
        _show_options,
        _show_command,
    ),
    _Command(
        "checkpoint",
        "print the latest checkpoint's snapshot as JSON",
        "0 printed; 1 no checkpoint, or the file invalid or unreadable",
        False,
        _no_options,
        _checkpoint_command,
    ),
]


def _parser(prog: str, wanted: str) -> Any:
    """The parser of every command; a companion module is imported only for the *wanted*
    command, if it is one of its own."""
    import argparse

    class Parser(argparse.ArgumentParser):
        def error(self, message: str) -> typing.NoReturn:  # it quotes arguments: "-\x1b[2J.jsonl"
            super().error(_for_terminal(message))

    parser = Parser(prog=prog, description=(__doc__ or "").split("\n", 1)[0])
    parser.add_argument("--version", action="version", version=f"session.py {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    commands.required = True
    for command in _COMMANDS + _companion_commands(wanted):
        epilog = (
            f"exit status: {command.status}; 2 usage error; {_EX_IOERR} output not written; 130 interrupted"
        )
        sub = commands.add_parser(command.name, help=command.about, description=command.about, epilog=epilog)
        if not _is_missing(command.run):
            _file_arguments(sub, command)
        command.options(sub)
        sub.set_defaults(handler=command.run, usage_error=sub.error)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    """The command line, ``python -m session`` (installed: ``session-jsonl``); returns the exit
    status: 0, 1 as each command's ``--help`` says, 2 for a usage error, 74 when the output
    cannot be written, 130 when interrupted."""
    # Installed, the console script calls main() from a module imported as "session".
    prog = (
        "python -m session" if argv is not None or __name__ == "__main__" else os.path.basename(sys.argv[0])
    )
    words = list(sys.argv[1:] if argv is None else argv)
    parser = _parser(prog, next((word for word in words if not word.startswith("-")), ""))
    args, unknown = parser.parse_known_args(words)
    if unknown and not _is_missing(args.handler):  # a missing command's options are unknown
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    for stream in (sys.stdout, sys.stderr):  # a lone surrogate prints as \udXXX, in JSON too
        if isinstance(stream, io.TextIOWrapper):
            stream.reconfigure(errors="backslashreplace")
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


if __name__ == "__main__":
    sys.modules.setdefault("session", sys.modules[__name__])  # what session_export imports
    raise SystemExit(main())
