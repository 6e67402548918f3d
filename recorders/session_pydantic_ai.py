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
"""Record a pydantic-ai agent's runs into a ``session.py`` file.

    from session_pydantic_ai import recording

    async with recording("chat.jsonl", checkpoint=True) as recorder:
        result = await agent.run("Hi", message_history=recorder.history(), capabilities=[recorder])

``recording`` creates the file (or opens it to continue the conversation), begins a run and
yields a ``SessionRecorder``: a pydantic-ai capability that writes the run's events, from
``agent_start`` to ``agent_end``, every model attempt and tool call, and, with *checkpoint*,
the message history at each turn's end.  ``recorder.history()`` is that history as pydantic-ai
messages, ready for ``message_history=`` (empty for a new file).  Copy this file next to
``session.py``; it needs only pydantic-ai.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import dataclasses
import functools
import hashlib
import json
import os
import re
import threading
import uuid
import warnings
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from types import TracebackType
from typing import Any, NamedTuple, TypeVar

import pydantic
import pydantic_ai
import pydantic_core
from pydantic_ai import messages as pm
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.capabilities.abstract import (
    RawToolArgs,
    ValidatedToolArgs,
    WrapRunHandler,
    WrapToolExecuteHandler,
    WrapToolValidateHandler,
)
from pydantic_ai.models import Model, ModelRequestContext, ModelRequestParameters
from pydantic_ai.models.wrapper import WrapperModel
from pydantic_ai.run import AgentRunResult
from pydantic_ai.settings import ModelSettings
from pydantic_ai.tools import RunContext, ToolDefinition

import session

__all__ = ["SessionRecorder", "recording", "to_json", "to_messages"]

_NEEDED = (2, 68)  # the oldest pydantic-ai-slim the recorder is tested with, and records whole
if tuple(int(number) for number in re.findall(r"\d+", pydantic_ai.__version__)[:2]) < _NEEDED:
    raise ImportError(
        f"session_pydantic_ai needs pydantic-ai-slim 2.68 or later (which needs Python 3.11 or"
        f" later), not {pydantic_ai.__version__}: older releases (what pip gives on Python 3.10)"
        " fail inside the agent's run"
    )


@contextlib.asynccontextmanager
async def recording(
    path: str | os.PathLike[str],
    *,
    checkpoint: bool = False,
    redact: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
    max_line_bytes: int | None = None,
) -> AsyncIterator[SessionRecorder]:
    """Open the session at *path* (create it if missing), begin a run and yield its recorder.

    *redact* and *max_line_bytes* are ``session.open``'s: *redact* takes each event's and
    checkpoint's JSON-ready data just before it is written and returns what to write instead
    (tool arguments and results included); *max_line_bytes* bounds a line (``session.open``'s
    default when not given).  The file is created, opened and closed in a worker thread: its
    fsyncs never block the event loop.  The run's events and checkpoints are converted,
    encoded and written in a thread of the recording's own, in order (see ``_Writer``): at
    the end, the recording waits for them, and raises what failed.  One recording records
    one conversation: run concurrent conversations each in its own ``recording`` of its own
    file.  A run that has not ended when the block is left (one left unfinished) ends then,
    ``aborted``, or ``error`` with the exception that left the block.
    """
    target = os.fspath(path)
    limit: dict[str, Any] = {} if max_line_bytes is None else {"max_line_bytes": max_line_bytes}
    opened = await _opened(functools.partial(session.open, target, create=True, redact=redact, **limit))
    writer: _Writer | None = None
    try:
        run = await asyncio.to_thread(opened.begin_run)
        recorder = SessionRecorder(run, checkpoint=checkpoint, source=opened)
        recorder._writer = writer = _Writer(run, threaded=True)
        try:
            yield recorder
        except BaseException as exc:
            recorder._left(exc)
            raise
        else:
            recorder._left(None)
    finally:
        await _close(writer, opened)


async def _opened(open_session: Callable[[], session.Session]) -> session.Session:
    """``open_session()`` in a thread of its own.  A wait cancelled (Ctrl-C, a timeout) or
    interrupted (a second Ctrl-C) leaves the session it opens to be closed once open, from
    that thread, whatever the event loop does then: not to the garbage collector, which
    would keep the file locked until it ran."""
    opening: concurrent.futures.Future[session.Session] = concurrent.futures.Future()
    opening.set_running_or_notify_cancel()  # running: a cancelled wait cannot cancel it

    def run() -> None:
        try:
            opening.set_result(open_session())
        except BaseException as exc:  # noqa: BLE001 - raised again where it is waited for
            opening.set_exception(exc)

    opener = threading.Thread(target=run, name="session-open")
    try:
        opener.start()
        return await asyncio.wrap_future(opening)
    except BaseException:  # cancelled, interrupted (a second Ctrl-C), or the open's own error
        opening.add_done_callback(functools.partial(_close_once_open, opener))
        raise


def _close_once_open(opener: threading.Thread, opening: concurrent.futures.Future[session.Session]) -> None:
    """Close the session *opening* opened, if it did: in *opener*, which calls this as it
    opens it (when the interpreter may be shutting down, and no thread can start), else in
    a thread of its own (this is the event loop's, which must not wait for a close)."""
    if opening.exception() is None:
        if threading.current_thread() is opener:
            opening.result().close()
        else:
            threading.Thread(target=opening.result().close, name="session-close").start()


async def _close(writer: _Writer | None, opened: session.Session) -> None:
    """Close *writer* (its records written, its first failure raised), then the session
    *opened*, in a worker thread: a wait cancelled again (Ctrl-C pressed twice) leaves both
    done in that order, never the file closed before the run's last records, nor left open."""

    def close() -> None:
        try:
            if writer is not None:
                writer.close()
        finally:
            opened.close()

    await asyncio.shield(asyncio.get_running_loop().run_in_executor(None, close))


def to_json(value: Any) -> Any:
    """*value* as plain JSON, through pydantic's own JSON form: models, dataclasses, enums and
    datetimes as pydantic writes them, bytes as base64, NaN and infinities as strings; a value
    pydantic cannot serialize (nor the python dump of a model) becomes ``{"type": ...,
    "repr": ...}`` rather than fail; an integer of more digits than a reader reads (4300)
    becomes the string of its digits.  A string is itself (no pass over it, however long)."""
    if type(value) is str:
        return value
    text = _json_text(value)
    try:
        return json.loads(text)
    except ValueError:  # an integer int() refuses to read: the only error in pydantic's JSON
        return json.loads(text, parse_int=_int_or_digits)


def _int_or_digits(digits: str) -> int | str:
    try:
        return int(digits) if len(digits.lstrip("-")) <= 4300 else digits
    except ValueError:  # a lower limit the host set
        return digits


def _json_text(value: Any) -> bytes:
    """*value*'s JSON text, as ``to_json`` describes it."""
    try:
        return _dumped(value)
    except Exception:  # noqa: BLE001 - a model's config says bytes are text; its own code raised
        pass
    try:
        return _dumped(value.model_dump() if isinstance(value, pydantic.BaseModel) else _unknown(value))
    except Exception:  # noqa: BLE001 - and so did its python dump
        return json.dumps(_unknown(value)).encode()


def _dumped(value: Any) -> bytes:
    return pydantic_core.to_json(value, bytes_mode="base64", inf_nan_mode="strings", fallback=_unknown)


def _unknown(value: Any) -> Any:
    try:
        text = repr(value)
    except Exception as exc:  # noqa: BLE001 - a repr that raises, or nests past the recursion limit
        text = f"(its repr failed: {type(exc).__name__})"
    return {"type": f"{type(value).__module__}.{type(value).__qualname__}", "repr": text}


_T = TypeVar("_T")


class _Later(NamedTuple):
    """An event's field converted where the event is written: ``convert(value)``."""

    convert: Callable[[Any], Any]
    value: Any


class _Writer:
    """Where a recorder's events and checkpoints are converted, encoded and written.

    ``recording()``'s recorder has one with a thread of its own (*threaded*): every event,
    checkpoint and ``call`` runs there, one at a time, in the order handed over, so that the
    event loop waits for no conversion (``_Later``), encoding, write or fsync.  An event's
    time is when it is handed over.  A hook waits (the loop free) for a checkpoint until it
    is synced, for a ``call``'s result, and, having handed over a large value, for it to be
    written (``flush``): the conversions then run while the agent's own work waits, not in
    turns with it at the GIL.  The first hand-over that fails is kept: the next one raises
    it, and so does ``close``.  A recorder made directly from a ``session.Run`` writes and
    converts in the caller's thread as it hands over, and saves checkpoints in a worker
    thread.
    """

    def __init__(self, run: session.Run, threaded: bool) -> None:
        self._run = run
        self._thread = concurrent.futures.ThreadPoolExecutor(1, "session-recorder") if threaded else None
        self._failure: BaseException | None = None
        self._failed_at: TracebackType | None = None  # the failure's traceback, as it was then
        self._last: concurrent.futures.Future[Any] | None = None  # the latest hand-over

    def record(self, kind: str, fields: dict[str, Any], when: datetime | None = None) -> None:
        """Write the event *kind* with *fields*, time-stamped *when* (default now)."""
        job = functools.partial(self._record, kind, when or datetime.now(timezone.utc), fields)
        if self._thread is None:
            job()
        else:
            self._put(job)

    async def checkpoint(self, snapshot: _Later) -> None:
        """Save *snapshot* as a checkpoint after the events handed over, and wait until it
        is synced (an error writing it, or any before it, is raised here)."""
        job = functools.partial(self._checkpoint, snapshot)
        if self._thread is None:
            await asyncio.to_thread(job)
        else:
            await self._wait(self._put(job))

    async def call(self, convert: Callable[..., _T], *args: Any) -> _T:
        """``convert(*args)``, made after everything handed over."""
        if self._thread is None:
            return convert(*args)
        made: _T = await self._wait(self._put(functools.partial(convert, *args)))
        return made

    async def flush(self) -> None:
        """Wait until everything handed over is written, raising what failed (the last
        hand-over's failure too when it failed just now, before ``_note`` saw it)."""
        if self._last is not None:
            await self._wait(self._last)
        self._raise_failure()

    def close(self) -> None:
        """Wait until everything handed over is written; raise the first failure.  A hook
        called after this writes in its own thread (and the closed run refuses it)."""
        if self._thread is not None:
            self._thread.shutdown(wait=True)
            self._thread = None
        self._raise_failure()

    def _raise_failure(self) -> None:
        """Raise the first failure, if any, its traceback as it was when it failed: each raise
        of one exception adds the raiser's frames to it, and a hook raises it at every call."""
        if self._failure is not None:
            raise self._failure.with_traceback(self._failed_at)

    def _put(self, job: Callable[[], Any]) -> concurrent.futures.Future[Any]:
        self._raise_failure()
        thread = self._thread
        if thread is None:  # closed since the caller looked
            raise ValueError(f"{self._run!r}: its recording has ended")
        future = self._last = thread.submit(job)
        future.add_done_callback(self._note)
        return future

    async def _wait(self, future: concurrent.futures.Future[Any]) -> Any:
        # shielded: a cancelled wait must not take the job out of the queue
        return await asyncio.shield(asyncio.wrap_future(future))

    def _note(self, future: concurrent.futures.Future[Any]) -> None:
        if self._failure is None and not future.cancelled():
            failure = future.exception()
            # its traceback first: a hook that sees the failure at once raises it with that
            self._failed_at = None if failure is None else failure.__traceback__
            self._failure = failure

    def _record(self, kind: str, when: datetime, fields: dict[str, Any]) -> None:
        ready = {name: _made(value) for name, value in fields.items()}
        self._run.record(session.Event(kind, timestamp=when, **ready))

    def _checkpoint(self, snapshot: _Later) -> None:
        self._run.save_checkpoint(_made(snapshot))


def _made(value: Any) -> Any:
    return value.convert(value.value) if type(value) is _Later else value


# a run that stops because it was cancelled, interrupted or (a stream) closed early: aborted
_ABORTS = (asyncio.CancelledError, KeyboardInterrupt, GeneratorExit)


_CODEC = session.JSONCodec()
_MARK = f"digest-{uuid.uuid4()}"  # marks a digest in a content key: in no message
_LONG = 4096  # a string this long is keyed by its digest (hashlib hashes it without the GIL)


def _digest(text: str | bytes) -> str:
    data = text if isinstance(text, bytes) else text.encode("utf-8", "surrogatepass")
    return hashlib.sha256(data).hexdigest()


def _keyed(value: Any) -> Any:
    """A codec value as a content key holds it: a long string, or a ``RawJSON``'s text, as
    its digest, marked (one ``json.dumps`` of a long string would hold the GIL throughout)."""
    if type(value) is dict:
        return {name: _keyed(item) for name, item in value.items()}
    if type(value) is list:
        return [_keyed(item) for item in value]
    if isinstance(value, session.RawJSON):
        return [_MARK, "raw", _digest(value.text)]
    if type(value) is str and len(value) >= _LONG:
        return [_MARK, "str", _digest(value)]
    return value


def _keyed_text(value: Any) -> Any:
    """A value ``json`` cannot write (a framework's object) as a content key holds it: its
    JSON text (``to_json``'s) read back, keyed."""
    return _keyed(json.loads(_json_text(value)))


def _content_key(value: Any) -> str:
    """*value*'s content, as the digest of its JSON text, a long string in it by its own
    digest (see ``_keyed``): two values of one key are written alike."""
    return _digest(json.dumps(_keyed(value), default=_keyed_text))


def _message_key(message: session.Message) -> str:
    """What a file holds of *message* but its time and usage (``_content_key``): two messages
    of one key are written alike but for those (a reply sent back carries no usage)."""
    value = _CODEC.encode(message)
    inner = {name: item for name, item in value["value"].items() if name not in ("timestamp", "usage")}
    return _content_key({**value, "value": inner})


def _fields(value: Any) -> tuple[Any, ...]:
    """The values of *value*'s fields (or items), compared by identity: one given a new value
    is another object (and, kept alive by whoever keeps this tuple, never at their address)."""
    fields = value if isinstance(value, dict) else getattr(value, "__dict__", {})
    return tuple(fields.values())


def _unchanged(kept: tuple[Any, ...], now: tuple[Any, ...]) -> bool:
    return len(kept) == len(now) and all(was is value for was, value in zip(kept, now))


class _Converted:
    """The conversation's messages as this recorder converted them the first time it saw
    them (one per recorder).  A framework message sent again, the same object or another
    that converts to an equal message but for its time (a copy, or one stamped anew), comes
    back as the same converted object, timestamp and all: a version-2 file neither writes
    nor encodes it again (the writer knows a ``session.Message`` of the request before by
    the object).  Of equal messages in one request, the n-th is the n-th seen: two alike
    stay two.  An object one of whose fields was given a new value since is converted
    again (a value changed in place, a list appended to, is not seen: replace it).  It
    keeps each distinct message converted, and the framework's object with its fields'
    values, so that no address it compares is reused.  *first_seen* takes a message
    converted for the first time, before it is kept."""

    def __init__(
        self,
        convert: Callable[[Any], session.Message],
        first_seen: Callable[[session.Message], session.Message],
    ) -> None:
        self._convert = convert
        self._first_seen = first_seen
        # id -> (the object, its fields' values, its key, converted)
        self._objects: dict[int, tuple[Any, tuple[Any, ...], str, session.Message]] = {}
        self._contents: dict[str, list[session.Message]] = {}  # key -> converted, in the order first seen
        self._lock = threading.Lock()  # the recorder's writer converts too

    def all(self, sources: Sequence[Any]) -> list[session.Message]:
        """Each of *sources*, one request's messages in order, as first converted."""
        with self._lock:
            counts: dict[str, int] = {}
            out: list[session.Message] = []
            for source in sources:
                hit = self._objects.get(id(source))
                known = hit is not None and hit[0] is source
                if hit is not None and known and _unchanged(hit[1], _fields(source)):
                    key, converted = hit[2], hit[3]
                else:
                    converted = self._convert(source)
                    key = _message_key(converted)
                    seen = self._contents.setdefault(key, [])
                    fresh = counts.get(key, 0) >= len(seen)
                    if fresh:
                        seen.append(self._first_seen(converted))
                    converted = seen[-1] if fresh else seen[counts.get(key, 0)]
                    if fresh or known:  # not an equal copy (a framework may make one anew for every call)
                        self._objects[id(source)] = (source, _fields(source), key, converted)
                counts[key] = counts.get(key, 0) + 1
                out.append(converted)
            return out

    def add(self, source: Any, converted: session.Message) -> None:
        """Note *converted* as what *source* converts to before it is sent (a model's reply)."""
        with self._lock:
            key = _message_key(converted)
            self._contents.setdefault(key, []).append(converted)
            self._objects[id(source)] = (source, _fields(source), key, converted)


def _as_converted(message: session.Message) -> session.Message:
    """*message*, converted for the first time, as kept: pydantic-ai's messages carry their
    own time."""
    return message


def _aware(moment: datetime) -> datetime:
    """A naive time read as local time, as ``datetime.astimezone`` does; aware ones unchanged."""
    return moment if moment.tzinfo is not None else moment.astimezone()


# ---------------------------------------------------------------------------- messages


def to_messages(message: pm.ModelMessage) -> list[session.Message]:
    """One pydantic-ai message as agentgo-shaped messages: a response is one assistant
    message; a request is one message per part (system, user, tool results)."""
    return [_unit_message(unit) for unit in _units(message)]


def _units(message: pm.ModelMessage) -> list[Any]:
    """What ``to_messages`` makes one message of: a response, or each part of a request."""
    return [message] if isinstance(message, pm.ModelResponse) else list(message.parts)


def _unit_message(unit: Any) -> session.Message:
    return _response_message(unit) if isinstance(unit, pm.ModelResponse) else _request_part_message(unit)


def _request_part_message(part: Any) -> session.Message:
    when = _aware(getattr(part, "timestamp", None) or datetime.now().astimezone())
    if isinstance(part, pm.SystemPromptPart):
        return session.Message("system", [session.text_block(part.content)], timestamp=when)
    if isinstance(part, pm.UserPromptPart):
        items = [part.content] if isinstance(part.content, str) else list(part.content)
        return session.Message("user", [_user_block(item) for item in items], timestamp=when)
    if isinstance(part, pm.BaseToolReturnPart):
        is_error = part.outcome in pm.ERROR_OUTCOMES
        text = part.content if isinstance(part.content, str) else _json_text(part.content).decode()
        return session.tool_result(part.tool_call_id, text, is_error=is_error, timestamp=when)
    if isinstance(part, pm.RetryPromptPart):
        if part.tool_name is None:
            return session.Message("user", [session.text_block(part.model_response())], timestamp=when)
        return session.tool_result(part.tool_call_id, part.model_response(), is_error=True, timestamp=when)
    return session.Message("user", [session.text_block(_json_text(part).decode())], timestamp=when)


def _user_block(item: Any) -> session.ContentBlock:
    if isinstance(item, str):
        return session.text_block(item)
    if isinstance(item, pm.BinaryContent) and item.is_image:
        return session.image_block(data=item.data, mime_type=item.media_type)
    if isinstance(item, pm.ImageUrl):
        return session.image_block(url=item.url)
    return session.text_block(_json_text(item).decode())  # audio, documents: kept as their JSON


_STOP_REASONS = {"stop": "stop", "length": "length", "content_filter": "safety", "tool_call": "toolUse"}


def _response_message(response: pm.ModelResponse) -> session.Message:
    blocks: list[session.ContentBlock] = []
    for part in response.parts:
        if isinstance(part, pm.TextPart):
            blocks.append(session.text_block(part.content))
        elif isinstance(part, pm.ThinkingPart):
            blocks.append(session.thinking_block(part.content))
        elif isinstance(part, pm.ToolCallPart):
            blocks.append(_tool_call_block(part))
        elif isinstance(part, pm.FilePart) and part.content.is_image:
            blocks.append(session.image_block(data=part.content.data, mime_type=part.content.media_type))
        else:
            blocks.append(session.text_block(_json_text(part).decode()))
    calls = any(isinstance(part, pm.ToolCallPart) for part in response.parts)
    stop = _STOP_REASONS.get(response.finish_reason or "", "toolUse" if calls else "stop")
    return session.Message(
        "assistant",
        blocks,
        stop_reason="error" if response.finish_reason == "error" else stop,
        usage=_usage(response),
        timestamp=_aware(response.timestamp),
    )


def _tool_call_block(part: pm.ToolCallPart) -> session.ToolCallBlock:
    if isinstance(part.args, str):
        return _call_from_text(part.tool_call_id, part.tool_name, part.args)
    return session.tool_call_block(part.tool_call_id, part.tool_name, to_json(part.args or {}))


def _call_from_text(call_id: str, name: str, text: str) -> session.ToolCallBlock:
    """A tool call with the model's argument text kept exactly as sent; text that is not
    strict JSON is kept as ``args_raw_text``, marked invalid."""
    try:
        json.loads(text or "{}", parse_constant=_not_json)
    except ValueError as exc:
        return session.tool_call_block(
            call_id, name, {}, args_invalid=True, args_raw_text=text, args_parse_error=str(exc)
        )
    return session.tool_call_block(call_id, name, text or "{}")


def _not_json(constant: str) -> Any:
    raise ValueError(f"{constant} is not JSON")


def _usage(response: pm.ModelResponse) -> session.Usage:
    used = response.usage
    usage: session.Usage = {
        "input": used.input_tokens,
        "output": used.output_tokens,
        "cache_read": used.cache_read_tokens,
        "cache_write": used.cache_write_tokens,
        "total_tokens": used.input_tokens + used.output_tokens,
    }
    if response.provider_name:
        usage["provider"] = response.provider_name
    if response.model_name:
        usage["model"] = response.model_name
    return usage


def _request(
    messages: list[session.Message],
    settings: ModelSettings | None,
    params: ModelRequestParameters,
    model: str,
) -> session.ModelRequest:
    tools = [
        {
            "name": tool.name,
            "description": tool.description,
            "parameters": to_json(tool.parameters_json_schema),
        }
        for tool in [*params.function_tools, *params.output_tools]
    ]
    extra = to_json({key: value for key, value in (settings or {}).items() if key != "max_tokens"})
    limit = (settings or {}).get("max_tokens")
    config = session.CallConfig(
        max_tokens=limit if isinstance(limit, int) else 0, extra={"model": model, **extra}
    )
    return session.ModelRequest(messages, tools, config)


# ---------------------------------------------------------------------------- the capability


@dataclass
class _Nested:
    """The work of delegate agents run in one tool call."""

    calls: int = 0  # their model calls
    model: session.Execution | None = None  # the latest model call attempt
    error: BaseException | None = None  # and why it failed
    tools: dict[str, session.Execution] = field(default_factory=dict)  # their tool calls, by call id


@dataclass
class SessionRecorder(AbstractCapability[Any]):
    """A capability that records one agent run into *run* (a ``session.Run``).

    Pass it to one run: ``agent.run(..., capabilities=[recorder])``.  With *checkpoint*, the
    message history (pydantic-ai's own JSON form) is saved at the end of every turn; resume by
    passing ``recorder.history()`` (or ``ModelMessagesTypeAdapter.validate_python`` of the
    checkpoint) as ``message_history``.  *source* is the session the history is read from.
    A delegate agent run inside one of its tool calls and handed the recorder
    (``capabilities=[recorder]``) has its model and tool calls recorded nested in that call;
    one run without it, sharing the run's usage (``usage=ctx.usage``), is a warning and a
    ``recording_gap`` event in the call.
    """

    run: session.Run
    checkpoint: bool = False
    source: session.Session | None = None
    _turn: int = field(default=0, init=False)
    _in_turn: bool = field(default=False, init=False)
    _started: bool = field(default=False, init=False)
    _open: bool = field(default=False, init=False)  # agent_start recorded, agent_end not yet
    _seen: int = field(default=-1, init=False)  # history messages already written as message_end
    _attempt: int = field(default=1, init=False)
    _model: session.Execution | None = field(default=None, init=False)
    _last_error: BaseException | None = field(default=None, init=False)
    _tools: dict[str, session.Execution] = field(default_factory=dict, init=False)
    _tool_calls: int = field(default=0, init=False)
    _tool_errors: int = field(default=0, init=False)
    _nested: dict[str, _Nested] = field(default_factory=dict, init=False)  # by the tool call's id
    _answered: int = field(default=0, init=False)  # model requests answered, the run's and nested
    _unseen: int = field(default=0, init=False)  # model requests no recorder saw, said in a gap
    _running: dict[str, set[str]] = field(default_factory=dict, init=False)  # tool calls: those beside each
    # every response and request part converted once: the same object whenever it is sent again
    # (per part: pydantic-ai and capabilities add parts to a request after the hooks saw it)
    _converted: _Converted = field(
        default_factory=lambda: _Converted(_unit_message, _as_converted), init=False
    )
    _writer: _Writer = field(init=False)  # recording() gives it one with a thread of its own

    def __post_init__(self) -> None:
        self._writer = _Writer(self.run, threaded=False)

    def history(self) -> list[pm.ModelMessage]:
        """The message history of the session's latest checkpoint; empty when it has none."""
        saved = self.source.load_checkpoint() if self.source is not None else None
        return [] if saved is None else pm.ModelMessagesTypeAdapter.validate_python(saved.snapshot)

    def ref(self, execution: session.Execution) -> session.CallRef:
        """The ``CallRef`` of *execution* in this run, for the host's timeline."""
        return self.run.ref(execution)

    async def for_run(self, ctx: RunContext[Any]) -> AbstractCapability[Any]:
        """This recorder for its run; for a run inside one of its tool calls (a delegate
        agent), a capability that records that run's model and tool calls nested in the call."""
        caller = _CALLER.get()
        if self._started and caller is not None and caller[0] is self:
            return _Delegated(self, caller[1])
        if self._started:
            raise RuntimeError("a SessionRecorder records one run: give each run its own recording()")
        self._started = True
        return self

    async def wrap_run(self, ctx: RunContext[Any], *, handler: WrapRunHandler) -> AgentRunResult[Any]:
        self._record("agent_start")
        try:
            result = await handler()
        except BaseException as exc:
            if self._open:  # not ended already (its recording() block left before)
                reason = "aborted" if isinstance(exc, _ABORTS) else "error"
                self._end_turn()
                self._record("agent_end", summary=self._summary(reason), error=exc)
            raise
        history = result.all_messages()
        await self._commit(history)
        self._end_turn()
        if self.checkpoint:
            await self._writer.checkpoint(_Later(to_json, list(history)))
        self._record("agent_end", summary=self._summary("stop"))
        return result

    async def before_model_request(
        self, ctx: RunContext[Any], request_context: ModelRequestContext
    ) -> ModelRequestContext:
        if self._seen < 0:  # the first request: what came before this run is history
            earlier = [m for m in ctx.messages if m.run_id != ctx.run_id]
            self._seen = len(earlier)
            self._turn = sum(isinstance(m, pm.ModelResponse) for m in earlier)
        await self._commit(ctx.messages)
        if self._in_turn:
            self._end_turn()
            if self.checkpoint:
                await self._writer.checkpoint(_Later(to_json, list(ctx.messages)))
        self._turn += 1
        self._in_turn = True
        self._record("turn_start", turn_index=self._turn)
        await self._writer.flush()
        return request_context

    async def prepare_model_request(
        self, ctx: RunContext[Any], request_context: ModelRequestContext
    ) -> ModelRequestContext:
        self._attempt = request_context.attempt
        return request_context

    def get_wrapper_model(self, model: Model) -> Model | None:
        return _RecordingModel(model, self)

    async def wrap_tool_validate(
        self,
        ctx: RunContext[Any],
        *,
        call: pm.ToolCallPart,
        tool_def: ToolDefinition,
        args: RawToolArgs,
        handler: WrapToolValidateHandler,
    ) -> ValidatedToolArgs:
        return await self._validate(None, call, args, handler)

    async def wrap_tool_execute(
        self,
        ctx: RunContext[Any],
        *,
        call: pm.ToolCallPart,
        tool_def: ToolDefinition,
        args: ValidatedToolArgs,
        handler: WrapToolExecuteHandler,
    ) -> Any:
        return await self._execute(ctx, None, call, args, handler)

    # -- tool calls, of the run (*caller* None) or of a delegate run in the tool call *caller*

    async def _validate(
        self,
        caller: session.Execution | None,
        call: pm.ToolCallPart,
        args: RawToolArgs,
        handler: WrapToolValidateHandler,
    ) -> ValidatedToolArgs:
        execution = self._tool_start(caller, call)
        try:
            validated = await handler(args)
        except BaseException as exc:
            self._tool_end(execution, call, None, exc)
            raise
        self._record(
            "tool_invoke_start",
            execution=execution,
            tool_id=call.tool_call_id,
            tool=call.tool_name,
            args=_Later(to_json, validated),
        )
        await self._writer.flush()  # converted before the tool, which may change them in place, runs
        return validated

    def _tool_start(self, caller: session.Execution | None, call: pm.ToolCallPart) -> session.Execution:
        """``tool_exec_start`` of *call*: a call of the run, or nested in *caller*."""
        if caller is None:
            name, model, tools = f"tool-{self._turn}-{call.tool_call_id}", self._model, self._tools
        else:
            nested = self._nested.setdefault(caller.id, _Nested())
            name, model, tools = f"{caller.id}/tool-{call.tool_call_id}", nested.model, nested.tools
        parent = model.id if model is not None else ""
        execution = session.Execution(name, "tool", parent_id=parent, turn_index=self._turn)
        tools[call.tool_call_id] = execution
        self._tool_calls += 1
        model_args = _tool_call_block(call)["tool_call"]["args"]
        self._record(
            "tool_exec_start",
            execution=execution,
            tool_id=call.tool_call_id,
            tool=call.tool_name,
            args=model_args,
        )
        return execution

    async def _execute(
        self,
        ctx: RunContext[Any],
        caller: session.Execution | None,
        call: pm.ToolCallPart,
        args: ValidatedToolArgs,
        handler: WrapToolExecuteHandler,
    ) -> Any:
        tools = self._tools if caller is None else self._nested[caller.id].tools
        execution = tools[call.tool_call_id]
        before = (ctx.usage.requests, self._answered, self._unseen)
        token = _CALLER.set((self, execution))
        self._start_running(execution.id)
        try:
            result = await handler(args)
        except BaseException as exc:
            self._tool_end(execution, call, None, exc)
            raise
        finally:
            _CALLER.reset(token)
            beside = self._running.pop(execution.id)
        # the run's usage counts the requests of every call running beside this one: those
        # the recorder saw, and those said in another call's gap, are not this call's
        unseen = ctx.usage.requests - before[0] - (self._answered - before[1]) - (self._unseen - before[2])
        if unseen > 0:
            self._unseen += unseen
            self._gap(execution, call, unseen, beside)
        self._tool_end(execution, call, result, None)
        await self._writer.flush()
        return result

    def _start_running(self, execution_id: str) -> None:
        """Note that the tool call *execution_id* runs, beside every call running now but
        those it is nested in."""
        mine: set[str] = set()
        for other, beside in self._running.items():
            if not execution_id.startswith(other + "/"):
                beside.add(execution_id)
                mine.add(other)
        self._running[execution_id] = mine

    def _gap(
        self, execution: session.Execution, call: pm.ToolCallPart, unseen: int, beside: set[str]
    ) -> None:
        """Say loudly, at run time and in the file (a ``recording_gap`` event in the tool
        call), that *unseen* model requests made while the tool call ran went unrecorded:
        made in it, or in one of the tool calls that ran *beside* it (the run's usage does
        not say which)."""
        where = f" or in one running beside it ({', '.join(sorted(beside))})" if beside else ""
        why = (
            f"{unseen} model request(s) the recorder did not see were made while the tool"
            f" {call.tool_name!r} ran: an agent run without the recorder, in this tool call{where}"
            " (pass it capabilities=[recorder])"
        )
        warnings.warn(f"session_pydantic_ai: {why}", RuntimeWarning, stacklevel=2)
        self._record("recording_gap", execution=execution, details={"unrecorded": why})

    # -- writing

    def _record(self, kind: str, **fields: Any) -> None:
        self._writer.record(kind, fields)
        self._open = kind == "agent_start" or (self._open and kind != "agent_end")

    def _left(self, error: BaseException | None) -> None:
        """The block recording the run was left, by *error* or not: a run begun and not
        ended ends now, ``aborted`` (or ``error`` when *error* is not a cancellation or an
        interruption), the calls under way left unfinished."""
        if self._open:
            self._end_turn()
            reason = "error" if error is not None and not isinstance(error, _ABORTS) else "aborted"
            self._record("agent_end", summary=self._summary(reason), error=error)

    def _tool_end(
        self, execution: session.Execution, call: pm.ToolCallPart, result: Any, error: BaseException | None
    ) -> None:
        self._tool_errors += error is not None
        self._record(
            "tool_exec_end",
            execution=execution,
            tool_id=call.tool_call_id,
            tool=call.tool_name,
            result=None if error is not None else _Later(to_json, result),
            is_error=error is not None,
            error=error,
        )

    async def _commit(self, history: Sequence[pm.ModelMessage]) -> None:
        """``message_end`` for every history message not yet written (converted in the writer)."""
        units = [(at, unit) for at, message in enumerate(history) for unit in _units(message)]
        every = await self._writer.call(self._converted.all, [unit for _, unit in units])
        for (at, _), converted in zip(units, every):
            if at >= max(self._seen, 0):
                execution = self._execution_of(history[at], converted)
                self._record("message_end", execution=execution, message=converted)
        self._seen = len(history)

    def _execution_of(self, message: pm.ModelMessage, converted: session.Message) -> session.Execution | None:
        if isinstance(message, pm.ModelResponse):
            return self._model
        call_id = (converted.metadata or {}).get("tool_call_id")
        return self._tools.get(call_id) if isinstance(call_id, str) else None

    def _end_turn(self) -> None:
        if self._in_turn:
            self._record("turn_end", turn_index=self._turn)
        self._in_turn, self._model, self._tools = False, None, {}

    def _summary(self, reason: str) -> session.RunSummary:
        return session.RunSummary(self._turn, self._tool_calls, self._tool_errors, reason)

    # -- model attempts (called by _RecordingModel)

    async def _flush(self) -> None:
        await self._writer.flush()

    def _attempt_start(
        self,
        messages: list[pm.ModelMessage],
        settings: ModelSettings | None,
        params: ModelRequestParameters,
        model: str,
    ) -> session.Execution:
        execution = session.Execution(
            f"model-{self._turn}", "model", turn_index=self._turn, attempt=self._attempt
        )
        if self._attempt > 1:
            info = session.RetryInfo(error=self._last_error)
            self._record("retry", execution=execution, retry=info, error=self._last_error)
        self._model = execution
        self._record("model_exec_start", execution=execution)
        sent = self._converted.all([unit for message in messages for unit in _units(message)])
        self._record("model_request", execution=execution, request=_request(sent, settings, params, model))
        return execution

    def _nested_start(
        self,
        caller: session.Execution,
        attempt: int,
        messages: list[pm.ModelMessage],
        settings: ModelSettings | None,
        params: ModelRequestParameters,
        model: str,
    ) -> session.Execution:
        """Attempt *attempt* of a model call of a delegate agent run in the tool call
        *caller*: nested in it, a retry numbered as the run's are."""
        nested = self._nested.setdefault(caller.id, _Nested())
        if attempt > 1 and nested.model is not None:
            execution = dataclasses.replace(nested.model, attempt=attempt)
            info = session.RetryInfo(error=nested.error)
            self._record("retry", execution=execution, retry=info, error=nested.error)
        else:
            nested.calls += 1
            execution = session.Execution(
                f"{caller.id}/model-{nested.calls}", "model", parent_id=caller.id, turn_index=self._turn
            )
        nested.model = execution
        self._record("model_exec_start", execution=execution)
        sent = self._converted.all([unit for message in messages for unit in _units(message)])
        self._record("model_request", execution=execution, request=_request(sent, settings, params, model))
        return execution

    def _attempt_end(
        self, execution: session.Execution, response: pm.ModelResponse | None, error: BaseException | None
    ) -> None:
        nested = self._nested.get(execution.parent_id) if execution.parent_id else None
        if nested is None:
            self._last_error = error
        else:
            nested.error = error
        self._answered += response is not None
        if response is not None:
            self._record("model_exec_end", execution=execution, message=_response_message(response))
        else:
            self._record("model_exec_end", execution=execution, error=error)


# the recorder and the tool call running now: a delegate agent run in it is nested in it
_CALLER: contextvars.ContextVar[tuple[SessionRecorder, session.Execution] | None] = contextvars.ContextVar(
    "session_pydantic_ai_caller", default=None
)


@dataclass
class _Delegated(AbstractCapability[Any]):
    """The recorder, given to a delegate agent's run inside its tool call *caller*: that
    run's model calls (their attempts numbered as the run's are) and tool calls are recorded
    as executions nested in the call, with their usage."""

    recorder: SessionRecorder
    caller: session.Execution
    _attempt: int = field(default=1, init=False)

    async def prepare_model_request(
        self, ctx: RunContext[Any], request_context: ModelRequestContext
    ) -> ModelRequestContext:
        self._attempt = request_context.attempt
        return request_context

    async def _flush(self) -> None:
        await self.recorder._writer.flush()

    def get_wrapper_model(self, model: Model) -> Model | None:
        return _RecordingModel(model, self)

    async def wrap_tool_validate(
        self,
        ctx: RunContext[Any],
        *,
        call: pm.ToolCallPart,
        tool_def: ToolDefinition,
        args: RawToolArgs,
        handler: WrapToolValidateHandler,
    ) -> ValidatedToolArgs:
        return await self.recorder._validate(self.caller, call, args, handler)

    async def wrap_tool_execute(
        self,
        ctx: RunContext[Any],
        *,
        call: pm.ToolCallPart,
        tool_def: ToolDefinition,
        args: ValidatedToolArgs,
        handler: WrapToolExecuteHandler,
    ) -> Any:
        return await self.recorder._execute(ctx, self.caller, call, args, handler)

    def _attempt_start(
        self,
        messages: list[pm.ModelMessage],
        settings: ModelSettings | None,
        params: ModelRequestParameters,
        model: str,
    ) -> session.Execution:
        return self.recorder._nested_start(self.caller, self._attempt, messages, settings, params, model)

    def _attempt_end(
        self, execution: session.Execution, response: pm.ModelResponse | None, error: BaseException | None
    ) -> None:
        self.recorder._attempt_end(execution, response, error)


class _RecordingModel(WrapperModel):
    """The model of one attempt: records what is sent and what comes back or fails."""

    def __init__(self, wrapped: Model, recorder: SessionRecorder | _Delegated) -> None:
        super().__init__(wrapped)
        self._recorder = recorder

    async def request(
        self,
        messages: list[pm.ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
    ) -> pm.ModelResponse:
        recorder = self._recorder
        execution = recorder._attempt_start(
            messages, model_settings, model_request_parameters, self.model_name
        )
        try:
            await recorder._flush()
            response = await self.wrapped.request(messages, model_settings, model_request_parameters)
        except BaseException as exc:
            recorder._attempt_end(execution, None, exc)
            raise
        recorder._attempt_end(execution, response, None)
        return response

    @contextlib.asynccontextmanager
    async def request_stream(
        self,
        messages: list[pm.ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
        run_context: RunContext[Any] | None = None,
    ) -> AsyncGenerator[Any]:
        recorder = self._recorder
        execution = recorder._attempt_start(
            messages, model_settings, model_request_parameters, self.model_name
        )
        try:
            await recorder._flush()
            async with self.wrapped.request_stream(
                messages, model_settings, model_request_parameters, run_context
            ) as stream:
                yield stream
        except BaseException as exc:
            recorder._attempt_end(execution, None, exc)
            raise
        recorder._attempt_end(execution, stream.get(), None)
