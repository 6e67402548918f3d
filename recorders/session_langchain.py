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
"""Record a LangChain or LangGraph run into a ``session.py`` file.

    from session_langchain import recording

    async with recording("chat.jsonl", checkpoint=True) as recorder:
        messages = [*recorder.history(), HumanMessage("Hi")]
        state = await graph.ainvoke({"messages": messages}, config={"callbacks": [recorder]})

``recording`` creates the file (or opens it to continue the conversation), begins a run and
yields a ``SessionRecorder``: a LangChain callback handler that writes the run's events, from
``agent_start`` to ``agent_end`` (the outermost chain: a graph, an agent, a chain; or a chat
model invoked or streamed alone, a run of one turn), every chat model attempt (retries from
``with_retry`` and fallbacks from ``with_fallbacks`` included) and tool call, and, with
*checkpoint*, the message list (``messages_to_dict``, LangChain's own form) at every turn's
end.  ``recorder.history()`` returns it as messages.  A synchronous host passes
``SessionRecorder(run)`` for a ``session.Run`` it began itself.  Copy this file next
to ``session.py``; it needs only ``langchain-core``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import functools
import hashlib
import json
import os
import re
import threading
from collections import deque
from collections.abc import AsyncIterator, Callable, Sequence
from datetime import datetime, timezone
from types import TracebackType
from typing import Any, NamedTuple, TypeVar
from uuid import UUID, uuid4

import langchain_core
import pydantic
import pydantic_core
from langchain_core.callbacks import AsyncCallbackHandler
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
    messages_from_dict,
    messages_to_dict,
)
from langchain_core.outputs import ChatGeneration, LLMResult

import session

__all__ = ["SessionRecorder", "recording", "to_json", "to_message"]

_NEEDED = (1, 8)  # the oldest langchain-core the recorder is tested with, and records whole
if tuple(int(number) for number in re.findall(r"\d+", langchain_core.__version__)[:2]) < _NEEDED:
    raise ImportError(
        f"session_langchain needs langchain-core 1.8 or later (which needs Python 3.11 or later),"
        f" not {langchain_core.__version__}: with older releases (what pip gives on Python 3.10)"
        " a model called inside a graph's own async node goes unrecorded"
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


def _messages_json(messages: Sequence[BaseMessage]) -> Any:
    """A checkpoint's snapshot: *messages* as LangChain's dicts, in JSON."""
    return to_json(messages_to_dict(messages))


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


# ---------------------------------------------------------------------------- messages


_CODEC = session.JSONCodec()
_MARK = f"digest-{uuid4()}"  # marks a digest in a content key: in no message
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


class _Recalled:
    """How the messages of a resumed conversation were first recorded: those the latest model
    request before the checkpoint its history comes from sent, and those recorded after it
    (the replies and tool results the next request sends), by their content.  A history
    message converted anew (this framework's messages carry no time of their own) takes the
    time, and a reply its usage, it was recorded with: it is the message recorded, which a
    version-2 file refers to rather than writing it again, and a reader knows as one."""

    def __init__(self) -> None:
        self._recorded: dict[str, deque[session.Message]] = {}
        self._left = 0

    def load(self, path: str, before: int) -> None:
        """Learn the messages of the latest model request before the record *before* of the
        session file at *path*, and those recorded after it (it reads the file: call it in a
        worker thread); a file that cannot be read teaches nothing."""
        try:
            sent = _sent_before(path, before)
        except (OSError, ValueError, session.SessionError):
            return
        for value in sent:
            with contextlib.suppress(session.CodecError, TypeError, ValueError):
                message = _CODEC.decode(value)
                if isinstance(message, session.Message):
                    self._recorded.setdefault(_unstamped(value), deque()).append(message)
                    self._left += 1

    def stamp(self, message: session.Message) -> session.Message:
        """*message*, given the time and usage it was recorded with if it is one of those
        learnt."""
        if self._left:
            with contextlib.suppress(session.CodecError, TypeError, ValueError):
                recorded = self._recorded.get(_unstamped(_CODEC.encode(message)))
                if recorded:
                    first = recorded.popleft()
                    message.timestamp, message.usage = first.timestamp, first.usage
                    self._left -= 1
        return message


def _sent_before(path: str, before: int) -> list[Any]:
    """The messages, as read back, of the latest model request before the record *before* of
    the session file at *path*, then those of the ``message_end`` records after it; an empty
    list when there is no request."""
    latest: session.Record | None = None
    after: list[Any] = []
    for record in session.iter_records(path, resolve=False):
        if record.seq >= before:
            break
        if record.type == "model_request":
            latest, after = record, []
        elif record.type == "message_end" and "message" in record.data:
            after.append(record.data["message"])
    ref = latest.ref if latest is not None else None
    if latest is None or ref is None:
        return []
    for record in session.find(path, ref):
        request = record.data.get("request")
        if record.seq == latest.seq and isinstance(request, dict):
            messages = request.get("messages")
            return [*messages, *after] if isinstance(messages, list) else after
    return after


def _unstamped(value: Any) -> str:
    """A message's codec value as text without its timestamp and usage: raw JSON parsed, keys
    sorted."""
    inner = value.get("value") if isinstance(value, dict) else None
    if isinstance(inner, dict):
        kept = {key: item for key, item in inner.items() if key not in ("timestamp", "usage")}
        value = {**value, "value": kept}
    return json.dumps(value, sort_keys=True, default=_parsed)


def _parsed(value: Any) -> Any:
    if isinstance(value, session.RawJSON):
        return json.loads(value.text)
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


_STOP_REASONS = {"stop": "stop", "end_turn": "stop", "length": "length", "max_tokens": "length"}


def to_message(message: BaseMessage) -> session.Message:
    """A LangChain message as an agentgo-shaped one."""
    now = datetime.now(timezone.utc)
    if isinstance(message, ToolMessage):
        text = message.content if isinstance(message.content, str) else _json_text(message.content).decode()
        return session.tool_result(
            message.tool_call_id, text, is_error=message.status == "error", timestamp=now
        )
    blocks = _blocks(message.content)
    if isinstance(message, AIMessage):
        blocks += [
            session.tool_call_block(call["id"] or "", call["name"], to_json(call["args"]))
            for call in message.tool_calls
        ]
        blocks += [
            session.tool_call_block(
                call["id"] or "",
                call["name"] or "?",
                {},
                args_invalid=True,
                args_raw_text=call["args"] or "",
                args_parse_error=call["error"] or "",
            )
            for call in message.invalid_tool_calls
        ]
        finish = str(
            message.response_metadata.get("finish_reason")
            or message.response_metadata.get("stop_reason")
            or ""
        )
        calls = message.tool_calls or message.invalid_tool_calls
        stop = _STOP_REASONS.get(finish, "toolUse" if calls else "stop")
        return session.Message("assistant", blocks, stop, _usage(message), timestamp=now)
    role = "system" if isinstance(message, SystemMessage) else "user"
    if not isinstance(message, SystemMessage | HumanMessage):
        blocks = [session.text_block(_json_text(messages_to_dict([message])[0]).decode())]
    return session.Message(role, blocks, timestamp=now)


def _blocks(content: str | list[Any]) -> list[session.ContentBlock]:
    if isinstance(content, str):
        return [session.text_block(content)] if content else []
    return [_block(part) for part in content]


def _block(part: Any) -> session.ContentBlock:
    if isinstance(part, str):
        return session.text_block(part)
    kind = part.get("type") if isinstance(part, dict) else None
    if kind == "text":
        return session.text_block(str(part.get("text", "")))
    if kind in ("thinking", "reasoning"):
        return session.thinking_block(str(part.get(kind) or part.get("text") or ""))
    if kind == "image" and isinstance(part.get("base64"), str):
        return session.image_block(data=part["base64"], mime_type=str(part.get("mime_type") or "image/png"))
    if kind == "image" and isinstance(part.get("url"), str):
        return session.image_block(url=part["url"])
    if kind == "image_url":
        url = part["image_url"]["url"] if isinstance(part.get("image_url"), dict) else part.get("image_url")
        return session.image_block(url=str(url))
    return session.text_block(_json_text(part).decode())  # audio, files: kept as their JSON


def _usage(message: AIMessage) -> session.Usage | None:
    used = message.usage_metadata
    if used is None:
        return None
    details = used.get("input_token_details") or {}
    return {
        "input": used["input_tokens"],
        "output": used["output_tokens"],
        "cache_read": details.get("cache_read", 0),
        "cache_write": details.get("cache_creation", 0),
        "total_tokens": used["total_tokens"],
    }


def _request(messages: list[session.Message], params: dict[str, Any]) -> session.ModelRequest:
    tools = [to_json(tool) for tool in params.get("tools") or []]
    rest = {key: value for key, value in params.items() if key not in ("tools", "tool_choice", "max_tokens")}
    config = session.CallConfig(
        max_tokens=limit if isinstance(limit := params.get("max_tokens"), int) else 0,
        tool_choice=to_json(params.get("tool_choice")),
        extra=to_json(rest),
    )
    return session.ModelRequest(messages, tools, config)


# ---------------------------------------------------------------------------- the handler


@dataclasses.dataclass
class _Nested:
    """The work of agents run in one tool call."""

    calls: int = 0  # their chat model calls
    model: session.Execution | None = None  # the latest attempt
    error: BaseException | None = None  # and why it failed


@dataclasses.dataclass
class _Turn:
    """A chat model call of the run, its turn open until a request sends its reply back (or
    the run ends): a branch run beside it has turns of its own."""

    execution: session.Execution  # the latest attempt
    parent: UUID | None  # the run it is made in: its retry's or fallback's too
    reply: session.Message | None = None  # its reply, once it came
    error: BaseException | None = None  # why its latest attempt failed: the next one there retries it


class SessionRecorder(AsyncCallbackHandler):
    """A callback handler that records one invocation into *run* (a ``session.Run``).

    Pass it in the config of one top-level call: ``config={"callbacks": [recorder]}``.  A
    graph, agent or chat model run inside one of its tool calls (which inherits the
    callbacks) has its model and tool calls recorded nested in that call.  With
    *checkpoint*, the messages are saved at each turn's end.  *source* is the session that
    ``history`` reads the latest checkpoint from.
    """

    run_inline = True  # events in the order they happen
    raise_error = True  # a recording failure is not to pass silently

    def __init__(
        self, run: session.Run, *, checkpoint: bool = False, source: session.Session | None = None
    ) -> None:
        self.run = run
        self.checkpoint = checkpoint
        self._source = source
        self._lock = threading.Lock()  # a synchronous graph runs tools, and their callbacks, in threads
        self._root: UUID | None = None
        self._open = False  # agent_start recorded, agent_end not yet
        self._alone: list[BaseMessage] | None = None  # a chat model called alone: what it was sent
        self._history = 0  # messages of the input that came from the checkpoint
        self._first = True  # no chat model called yet: the first one's input holds the history
        self._committed: dict[int, Any] = {}  # input messages written as message_end, their conversions too
        self._turn = 0
        self._turns: dict[int, _Turn] = {}  # the run's chat model calls whose turn is open, by turn
        self._turn_of: dict[UUID, _Turn] = {}  # a model attempt of the run running -> its call
        self._asked: dict[str, session.Execution | None] = {}  # tool call id -> the model call asking
        self._latest: dict[UUID, session.Execution] = {}  # a run under way -> its latest model call
        self._calls: dict[UUID, session.Execution] = {}  # model attempts and tool calls running
        self._tool_ids: dict[UUID, tuple[str, str]] = {}  # tool run -> (call id, tool name)
        self._finished: dict[str, session.Execution] = {}  # tool call id -> its execution
        self._parents: dict[UUID, UUID] = {}  # the runs under way in the run, by their parent run
        self._nested: dict[str, _Nested] = {}  # the work of agents run in a tool call, by its id
        self._tool_calls = 0
        self._tool_errors = 0
        self._recalled = _Recalled()  # when the history's messages were recorded
        # every message converted once: the same object whenever it is sent again
        self._converted = _Converted(to_message, self._recalled.stamp)
        self._recall = 0  # the seq of the checkpoint the history came from, until recalled
        self._writer = _Writer(run, threaded=False)  # recording() gives it one with a thread of its own

    def history(self) -> list[BaseMessage]:
        """The messages of the session's latest checkpoint; empty when it has none."""
        saved = self._source.load_checkpoint() if self._source is not None else None
        messages = [] if saved is None else messages_from_dict(saved.snapshot)
        self._history = len(messages)
        self._recall = 0 if saved is None else saved.seq
        return messages

    def ref(self, execution: session.Execution) -> session.CallRef:
        """The ``CallRef`` of *execution* in this run, for the host's timeline."""
        return self.run.ref(execution)

    # -- the outermost chain: the agent

    async def on_chain_start(
        self,
        serialized: dict[str, Any],
        inputs: dict[str, Any],
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        if parent_run_id is not None:
            self._parents[run_id] = parent_run_id
        if parent_run_id is None:
            with self._lock:
                if self._root is not None:
                    raise RuntimeError("a SessionRecorder records one run: give each run its own recording()")
                self._root = run_id
                self._record("agent_start")

    async def on_chain_end(self, outputs: Any, *, run_id: UUID, **kwargs: Any) -> None:
        self._parents.pop(run_id, None)
        self._latest.pop(run_id, None)
        if run_id != self._root or not self._open:  # not the run, or ended already
            return
        messages = outputs.get("messages") if isinstance(outputs, dict) else None
        listed = messages if isinstance(messages, list) else []
        converted = await self._writer.call(self._converted.all, list(listed))
        with self._lock:
            if isinstance(messages, list):
                self._commit(messages, converted)
            self._end_turns(list(self._turns))
        if self.checkpoint and isinstance(messages, list):
            await self._writer.checkpoint(_Later(_messages_json, list(messages)))
        with self._lock:
            self._record("agent_end", summary=self._summary("stop"))

    async def on_chain_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        self._parents.pop(run_id, None)
        self._latest.pop(run_id, None)
        if run_id != self._root or not self._open:  # not the run, or ended already
            return
        with self._lock:
            self._end(error)

    # -- chat model attempts

    async def on_chat_model_start(
        self,
        serialized: dict[str, Any],
        messages: list[list[BaseMessage]],
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        sent = messages[0] if messages else []
        caller = self._caller(parent_run_id)
        if caller is not None:  # an agent run in a tool call: nested in it
            converted = await self._writer.call(self._converted.all, list(sent))
            with self._lock:
                self._nested_start(run_id, caller, converted, kwargs)
            await self._writer.flush()
            return
        if parent_run_id is None:  # a chat model called alone (invoke, stream): it is the run
            await self.on_chain_start({}, {}, run_id=run_id)
            self._alone = list(sent)
        if self._recall and self._source is not None:
            before, self._recall = self._recall, 0
            await asyncio.to_thread(self._recalled.load, self._source.path, before)
        converted = await self._writer.call(self._converted.all, list(sent))
        with self._lock:
            retried = self._retried(parent_run_id)
            ended = retried is None and self._close_turns(sent, converted)
        if ended and self.checkpoint:
            await self._writer.checkpoint(_Later(_messages_json, list(sent)))
        with self._lock:
            turn = self._retry(retried) if retried is not None else self._begin_turn(parent_run_id)
            execution = self._calls[run_id] = turn.execution
            self._turn_of[run_id] = turn
            self._note_latest(parent_run_id, execution)
            self._record("model_exec_start", execution=execution)
            params = to_json(kwargs.get("invocation_params") or {})
            self._record("model_request", execution=execution, request=_request(converted, params))
        await self._writer.flush()

    async def on_llm_end(self, response: LLMResult, *, run_id: UUID, **kwargs: Any) -> None:
        generation = response.generations[0][0] if response.generations and response.generations[0] else None
        message = generation.message if isinstance(generation, ChatGeneration) else None
        with self._lock:
            if run_id not in self._calls:
                return
            execution = self._calls[run_id]
            if message is None:
                converted = session.Message("assistant", [])
            else:  # the next request sends this message as it is now: with the time it came
                converted = to_message(message)
                self._converted.add(message, converted)
                self._note_asked(message, execution)
            self._end_call(run_id, converted, None)
            if not execution.parent_id:
                self._record("message_end", execution=execution, message=converted)
        if run_id == self._root and self._alone is not None:
            reply = [] if message is None else [message]
            await self.on_chain_end({"messages": [*self._alone, *reply]}, run_id=run_id)

    async def on_llm_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        with self._lock:
            if run_id in self._calls:
                self._end_call(run_id, None, error)
        if run_id == self._root and self._alone is not None:
            await self.on_chain_error(error, run_id=run_id)

    # -- tools

    async def on_tool_start(
        self,
        serialized: dict[str, Any],
        input_str: str,
        *,
        run_id: UUID,
        inputs: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        call_id = str(kwargs.get("tool_call_id") or run_id)
        name = str(serialized.get("name") or kwargs.get("name") or "")
        parent = kwargs.get("parent_run_id")
        caller = self._caller(parent)
        with self._lock:
            if parent is not None:
                self._parents[run_id] = parent
            model = self._asker(call_id, parent, caller)
            turn = model.turn_index if model is not None else self._turn
            # in a tool call *caller* (an agent run in it): nested in that call
            label = f"tool-{turn}-{call_id}" if caller is None else f"{caller.id}/tool-{call_id}"
            parent_id = model.id if model is not None else ""
            execution = session.Execution(label, "tool", parent_id=parent_id, turn_index=turn)
            self._calls[run_id] = execution
            self._tool_ids[run_id] = (call_id, name)
            self._tool_calls += 1
            args = to_json(inputs) if inputs is not None else input_str
            self._record("tool_exec_start", execution=execution, tool_id=call_id, tool=name, args=args)

    async def on_tool_end(self, output: Any, *, run_id: UUID, **kwargs: Any) -> None:
        with self._lock:
            if run_id in self._calls:
                failed = isinstance(output, ToolMessage) and output.status == "error"
                self._end_call(run_id, output, RuntimeError(str(output.content)) if failed else None)
        await self._writer.flush()

    async def on_tool_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        with self._lock:
            if run_id in self._calls:
                self._end_call(run_id, None, error)

    def _asker(
        self, call_id: str, parent: UUID | None, caller: session.Execution | None
    ) -> session.Execution | None:
        """The model call that asked for the tool call *call_id* whose run's parent is
        *parent*: the one whose reply holds its id; else (a tool called without an id, or an
        id asked for twice) the latest model call of the agent run in the tool call
        *caller*, or, in the run, the latest made in the nearest run around the tool that
        made one (its branch: a branch of a graph run beside another has its own)."""
        asked = self._asked.get(call_id)
        if asked is not None:
            return asked
        if caller is not None:
            return self._nested.setdefault(caller.id, _Nested()).model
        while parent is not None:
            latest = self._latest.get(parent)
            if latest is not None:
                return latest
            parent = self._parents.get(parent)
        return None

    def _note_asked(self, message: BaseMessage, execution: session.Execution) -> None:
        """Note *execution* as the model call that asked for each tool call of its reply
        *message*; an id asked for twice is neither's (``None``: ambiguous)."""
        for call in message.tool_calls if isinstance(message, AIMessage) else []:
            asked = call["id"] or ""
            self._asked[asked] = execution if asked not in self._asked else None

    def _note_latest(self, parent: UUID | None, execution: session.Execution) -> None:
        """Note *execution* as the latest model call made in the run *parent* and in every
        run around it."""
        while parent is not None:
            self._latest[parent] = execution
            parent = self._parents.get(parent)

    def _caller(self, parent: UUID | None) -> session.Execution | None:
        """The tool call of the run that the run whose parent is *parent* is made in (an
        agent run in a tool), if any: the nearest tool call among its ancestors."""
        with self._lock:
            while parent is not None:
                execution = self._calls.get(parent)
                if execution is not None and execution.kind == "tool":
                    return execution
                parent = self._parents.get(parent)
        return None

    # -- writing (with self._lock held)

    def _nested_start(
        self, run_id: UUID, caller: session.Execution, sent: list[session.Message], kwargs: dict[str, Any]
    ) -> None:
        """An attempt of a chat model call of an agent run in the tool call *caller*, nested
        in it: the attempt after a failed one is its retry or fallback, numbered as the run's
        are."""
        nested = self._nested.setdefault(caller.id, _Nested())
        if nested.error is not None and nested.model is not None:
            execution = dataclasses.replace(nested.model, attempt=nested.model.attempt + 1)
            info = session.RetryInfo(error=nested.error)
            self._record("retry", execution=execution, retry=info, error=nested.error)
        else:
            nested.calls += 1
            execution = session.Execution(
                f"{caller.id}/model-{nested.calls}", "model", parent_id=caller.id, turn_index=self._turn
            )
        nested.model = execution
        self._calls[run_id] = execution
        self._record("model_exec_start", execution=execution)
        params = to_json(kwargs.get("invocation_params") or {})
        self._record("model_request", execution=execution, request=_request(sent, params))

    def _record(self, kind: str, **fields: Any) -> None:
        self._writer.record(kind, fields)
        self._open = kind == "agent_start" or (self._open and kind != "agent_end")

    def _end(self, error: BaseException) -> None:
        """The run raised: close what it left open, then ``agent_end`` with the error."""
        for call_id in list(self._calls):
            self._end_call(call_id, None, error)
        self._end_turns(list(self._turns))
        reason = "aborted" if isinstance(error, _ABORTS) else "error"
        self._record("agent_end", summary=self._summary(reason), error=error)

    def _left(self, error: BaseException | None) -> None:
        """The block recording the run was left, by *error* or not: a run begun and not
        ended ends now, ``aborted`` (or ``error`` when *error* is not a cancellation or an
        interruption), the calls under way failed with it."""
        with self._lock:
            if self._open:
                self._end(error or asyncio.CancelledError("the run was left before it ended"))

    def _retried(self, parent: UUID | None) -> _Turn | None:
        """The model call of the run whose latest attempt failed, made in the run *parent*:
        the call that an attempt made there now retries (``with_retry``) or falls back from
        (``with_fallbacks``)."""
        for turn in self._turns.values():
            if turn.error is not None and turn.parent == parent:
                return turn
        return None

    def _retry(self, turn: _Turn) -> _Turn:
        """The next attempt of *turn*'s call, after a ``retry`` event naming the failure."""
        execution = dataclasses.replace(turn.execution, attempt=turn.execution.attempt + 1)
        info = session.RetryInfo(error=turn.error)
        self._record("retry", execution=execution, retry=info, error=turn.error)
        turn.execution, turn.error = execution, None
        return turn

    def _begin_turn(self, parent: UUID | None) -> _Turn:
        """A new model call of the run, made in the run *parent*, and its turn."""
        self._turn += 1
        self._record("turn_start", turn_index=self._turn)
        execution = session.Execution(f"model-{self._turn}", "model", turn_index=self._turn)
        turn = self._turns[self._turn] = _Turn(execution, parent)
        return turn

    def _close_turns(self, sent: Sequence[BaseMessage], converted: list[session.Message]) -> bool:
        """Commit what *sent* (*converted*) adds and end the turns whose reply it sends back;
        whether there was one."""
        if self._first:  # the first call: what came from the checkpoint is history
            self._first = False
            self._turn = sum(isinstance(message, AIMessage) for message in sent[: self._history])
            for message, made in zip(sent[: self._history], converted):
                self._committed.update({id(message): message, id(made): made})
        self._commit(sent, converted)
        answered = {id(message) for message in converted}
        ended = [index for index, turn in self._turns.items() if id(turn.reply) in answered]
        self._end_turns(ended)
        return bool(ended)

    def _end_call(self, run_id: UUID, result: Any, error: BaseException | None) -> None:
        execution = self._calls.pop(run_id)
        self._parents.pop(run_id, None)
        if execution.kind == "model":
            nested = self._nested.get(execution.parent_id)
            if nested is not None:
                nested.error = error
            turn = self._turn_of.pop(run_id, None)
            if turn is not None:
                turn.reply, turn.error = (result, None) if error is None else (None, error)
            if error is None:
                self._record("model_exec_end", execution=execution, message=result)
            else:
                self._record("model_exec_end", execution=execution, error=error)
            return
        call_id, name = self._tool_ids.pop(run_id)
        self._finished[call_id] = execution
        self._tool_errors += error is not None
        content = result.content if isinstance(result, ToolMessage) else result
        self._record(
            "tool_exec_end",
            execution=execution,
            tool_id=call_id,
            tool=name,
            result=None if result is None else _Later(to_json, content),
            details=_Later(to_json, result.artifact)
            if isinstance(result, ToolMessage) and result.artifact is not None
            else None,
            is_error=error is not None,
            error=error,
        )

    def _commit(self, messages: Sequence[BaseMessage], converted: list[session.Message]) -> None:
        """``message_end`` for the input messages (*converted*) not yet written: neither the
        object (changed in place since, perhaps) nor its conversion (a copy's); a model's own
        messages were written when its response came (``on_llm_end``)."""
        for message, sent in zip(messages, converted):
            if isinstance(message, AIMessage) or self._committed.get(id(message)) is message:
                continue
            if self._committed.get(id(sent)) is sent:
                continue
            self._committed.update({id(message): message, id(sent): sent})
            call_id = message.tool_call_id if isinstance(message, ToolMessage) else ""
            self._record("message_end", execution=self._finished.get(call_id), message=sent)

    def _end_turns(self, ended: list[int]) -> None:
        """``turn_end`` for the open turns *ended*, in their order."""
        for index in sorted(ended):
            del self._turns[index]
            self._record("turn_end", turn_index=index)

    def _summary(self, reason: str) -> session.RunSummary:
        return session.RunSummary(self._turn, self._tool_calls, self._tool_errors, reason)
