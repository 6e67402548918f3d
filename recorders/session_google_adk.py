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
"""Record a Google ADK (Agent Development Kit) agent's runs into a ``session.py`` file.

    from session_google_adk import recording

    async with recording("chat.jsonl", checkpoint=True) as recorder:
        runner = Runner(app=App(name="app", root_agent=agent, plugins=[recorder]), session_service=service)
        async for event in runner.run_async(user_id="u", session_id=sid, new_message=message): ...

``recording`` creates the file (or opens it to continue the conversation), begins a run and
yields a ``SessionRecorder``: an ADK plugin (``BasePlugin``) that writes the run's events, from
``agent_start`` to ``agent_end``, every model call with its usage and every tool call, and, with
*checkpoint*, the ADK session's events at each turn's end.  ``recorder.history()`` is those
events as ADK ``Event`` objects, to append to a new session (empty for a new file).  A
sub-agent run by an ``AgentTool`` (which hands its runner the parent's plugins) is recorded
nested in that tool call; branches run at once (a ``ParallelAgent``'s, a workflow's nodes)
each have their calls recorded apart.  A model call is written when the model answers: an
answer a callback gives in the model's place is no model call, but a message naming that
callback; a failed call a callback answers for ends once, failed.  Copy this file next to
``session.py``; it needs only google-adk.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import functools
import hashlib
import json
import logging
import os
import re
import threading
import uuid
from collections import deque
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from types import TracebackType
from typing import Any, NamedTuple, TypeVar

import pydantic
import pydantic_core
from google.adk import version as adk_version
from google.adk.agents.callback_context import CallbackContext
from google.adk.agents.invocation_context import InvocationContext
from google.adk.events.event import Event as AdkEvent
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.plugins.base_plugin import BasePlugin
from google.adk.tools.base_tool import BaseTool
from google.adk.tools.tool_context import ToolContext
from google.genai import types

import session

__all__ = ["SessionRecorder", "recording", "to_json", "to_messages"]

_NEEDED = (2, 11)  # the oldest google-adk the recorder is tested with
if tuple(int(number) for number in re.findall(r"\d+", adk_version.__version__)[:2]) < _NEEDED:
    raise ImportError(f"session_google_adk needs google-adk 2.11 or later, not {adk_version.__version__}")


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


def _events_json(events: Sequence[AdkEvent]) -> list[Any]:
    """A checkpoint's snapshot: the ADK session's *events*, each in JSON."""
    return [to_json(event) for event in events]


def _unknown(value: Any) -> Any:
    try:
        text = repr(value)
    except Exception as exc:  # noqa: BLE001 - a repr that raises, or nests past the recursion limit
        text = f"(its repr failed: {type(exc).__name__})"
    return {"type": f"{type(value).__module__}.{type(value).__qualname__}", "repr": text}


# a run that stops because it was cancelled, interrupted or (a stream) closed early: aborted
_ABORTS = (asyncio.CancelledError, KeyboardInterrupt, GeneratorExit)


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


_CODEC = session.JSONCodec()


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


# ---------------------------------------------------------------------------- messages


def to_messages(content: types.Content) -> list[session.Message]:
    """One ADK (google-genai) content as agentgo-shaped messages: a model's content is one
    assistant message; a user's is one user message, or one tool result per function response."""
    return [_unit_message(unit) for unit in _units(content)]


def _units(content: types.Content) -> list[Any]:
    """What ``to_messages`` makes one message of: each part of a content that holds function
    responses, the content whole otherwise."""
    parts = content.parts or []
    return list(parts) if any(part.function_response for part in parts) else [content]


def _unit_message(unit: Any) -> session.Message:
    """A content, one of its parts, or a system instruction (text) as a message."""
    if isinstance(unit, types.Content):
        return _content_message(unit, None)
    if isinstance(unit, types.Part) and unit.function_response is not None:
        response = unit.function_response
        return session.tool_result(response.id or "", _json_text(response.response).decode())
    if isinstance(unit, types.Part):
        return session.Message("user", [_block(unit)])
    return session.Message("system", [session.text_block(unit if isinstance(unit, str) else _text(unit))])


def _text(value: Any) -> str:
    """The text of a system instruction given as a content or parts; its JSON otherwise."""
    parts = value.parts if isinstance(value, types.Content) else value
    texts = [part.text for part in parts if isinstance(part, types.Part)] if isinstance(parts, list) else []
    whole = isinstance(parts, list) and len(texts) == len(parts) and None not in texts
    return "\n".join(text or "" for text in texts) if whole else _json_text(value).decode()


def _content_message(content: types.Content, usage: session.Usage | None) -> session.Message:
    blocks = [_block(part) for part in content.parts or []]
    if content.role != "model":
        return session.Message("user", blocks)
    calls = any(part.function_call for part in content.parts or [])
    return session.Message("assistant", blocks, stop_reason="toolUse" if calls else "stop", usage=usage)


def _block(part: types.Part) -> session.ContentBlock:
    if part.text is not None and part.thought:
        return session.thinking_block(part.text)
    if part.text is not None:
        return session.text_block(part.text)
    if part.function_call is not None:
        call = part.function_call
        return session.tool_call_block(call.id or "", call.name or "", to_json(call.args or {}))
    data = part.inline_data
    if data is not None and data.data is not None and (data.mime_type or "").startswith("image/"):
        return session.image_block(data=data.data, mime_type=data.mime_type or "")
    return session.text_block(_json_text(part).decode())  # files, code, audio: kept as their JSON


def _reply_error(response: LlmResponse) -> dict[str, str] | None:
    """What went wrong in a model's reply that is an error (blocked, say: ADK's
    ``error_code`` and ``error_message``), as an event's error, or None."""
    code = response.error_code
    if not code:
        return None
    kind = str(getattr(code, "value", code))  # a FinishReason or BlockedReason, or a string
    return {"type": kind, "message": response.error_message or kind}


def _response_message(response: LlmResponse) -> session.Message:
    """A model's reply (its content, possibly none) with its usage and stop reason."""
    message = _content_message(response.content or types.Content(role="model", parts=[]), _usage(response))
    if response.error_code:
        message.stop_reason = "error"
    return message


def _usage(response: LlmResponse) -> session.Usage:
    used = response.usage_metadata or types.GenerateContentResponseUsageMetadata()
    given, made = used.prompt_token_count or 0, used.candidates_token_count or 0
    usage: session.Usage = {
        "input": given,
        "output": made,
        "cache_read": used.cached_content_token_count or 0,
        "cache_write": 0,
        "total_tokens": used.total_token_count or given + made,
    }
    if response.model_version:
        usage["model"] = response.model_version
    return usage


# the settings a request's record holds apart from the others: its tools, its first message
# and its max_tokens (google-genai's JSON names them in camelCase; both spellings, to be sure)
_SENT_APART = {"tools", "systemInstruction", "system_instruction", "maxOutputTokens", "max_output_tokens"}


def _request(messages: list[session.Message], request: LlmRequest) -> session.ModelRequest:
    config = request.config or types.GenerateContentConfig()
    tools = [
        {
            "name": declaration.name,
            "description": declaration.description,
            "parameters": to_json(declaration.parameters_json_schema or declaration.parameters),
        }
        for tool in config.tools or []
        if isinstance(tool, types.Tool)
        for declaration in tool.function_declarations or []
    ]
    settings = to_json(config)
    extra = {
        key: value
        for key, value in (settings if isinstance(settings, dict) else {}).items()
        if value is not None and key not in _SENT_APART
    }
    limit = config.max_output_tokens
    options = session.CallConfig(max_tokens=limit or 0, extra={"model": request.model or "", **extra})
    return session.ModelRequest(messages, tools, options)


def _sent(request: LlmRequest) -> list[Any]:
    """The units of the messages *request* sends: its system instruction, then its contents."""
    instruction = request.config.system_instruction if request.config else None
    units = [instruction] if instruction else []
    return units + [unit for content in request.contents for unit in _units(content)]


# ---------------------------------------------------------------------------- the plugin


@dataclass
class _Invocation:
    """An ADK invocation the recorder knows: the run it records, or a sub-agent's run inside
    one of its tool calls (*caller*), whose calls are nested in that call."""

    caller: session.Execution | None
    calls: int = 0  # the sub-agent's model calls, in all its branches


class _Asked(NamedTuple):
    """A model call asked for (``before_model_callback``), not yet begun: *request* is sent,
    as the callbacks after the recorder leave it, when the model is called (at *when*)."""

    execution: session.Execution
    request: LlmRequest
    when: datetime


@dataclass
class _Scope:
    """What the recorder knows of one branch of one invocation (a ``ParallelAgent``'s
    branches, or a workflow's nodes run at once, share their invocation: each is a scope),
    whose calls run one at a time."""

    invocation: _Invocation
    turn: int = 0  # the turn of its latest model call
    asked: _Asked | None = None  # a model call asked for, not begun
    model: session.Execution | None = None  # the latest model call attempt: its reply is committed in it
    request: session.ModelRequest | None = None  # and what it sent
    tools: dict[str, session.Execution] = field(default_factory=dict)


# the recorder and the scope whose model call runs now: a FallbackModel's attempts are its
_CALLING: contextvars.ContextVar[tuple[SessionRecorder, _Scope] | None] = contextvars.ContextVar(
    "session_google_adk_calling", default=None
)


class _FallbackNoter(logging.Handler):
    """Notes each model a ``FallbackModel`` falls back from (which it says in its log, as it
    happens: the one sign a plugin gets of those attempts) as a failed attempt of the model
    call under way."""

    def emit(self, record: logging.LogRecord) -> None:
        calling = _CALLING.get()
        args = record.args if isinstance(record.args, tuple) else ()
        if calling is not None and "falling back" in str(record.msg) and len(args) == 2:
            calling[0]._fell_back(calling[1], f"model {args[0]} failed with status {args[1]}")


logging.getLogger("google_adk.google.adk.models._fallback_model").addHandler(_FallbackNoter())


# the recorder and the tool call running now: a sub-agent's run in it is nested in it
_CALLER: contextvars.ContextVar[tuple[SessionRecorder, session.Execution] | None] = contextvars.ContextVar(
    "session_google_adk_caller", default=None
)

# what a message a callback made instead of the model or a tool says of itself
_BEFORE_MODEL = {"source": "before_model_callback"}
_MODEL_RESCUE = {"source": "on_model_error_callback"}
_TOOL_RESCUE = {"is_error": True, "source": "on_tool_error_callback"}


class SessionRecorder(BasePlugin):
    """An ADK plugin that records one run of a ``Runner`` into *run* (a ``session.Run``).

    Give it to the app of one run, first among its plugins: ``App(..., plugins=[recorder])``.
    With *checkpoint*, the ADK session's events (their JSON) are saved at the end of every
    turn; resume by appending ``recorder.history()`` to a new session.  *source* is the
    session the history is read from.  A sub-agent an ``AgentTool`` runs (with the parent's
    plugins, its default) has its model and tool calls recorded nested in that tool call;
    branches run at once (a ``ParallelAgent``'s, a workflow's nodes) each have their calls
    recorded apart.
    """

    def __init__(
        self, run: session.Run, *, checkpoint: bool = False, source: session.Session | None = None
    ) -> None:
        super().__init__(name="session_recorder")
        self.run = run
        self.checkpoint = checkpoint
        self.source = source
        self._main = ""  # the invocation id of the run recorded
        self._invocations: dict[str, _Invocation] = {}
        self._scopes: dict[tuple[str, str], _Scope] = {}  # by invocation id and branch
        self._turn = 0
        self._in_turn = False
        self._ended = False
        self._answered = False  # whether the run's latest event is a final response
        self._refused: dict[str, str] | None = None  # the error of that event, a model's reply
        self._tool_calls = 0
        self._tool_errors = 0
        self._running: dict[str, tuple[session.Execution, str, str]] = {}  # calls under way: tool, call id
        self._rescued: set[str] = set()  # the tool calls an on_tool_error_callback answered for
        self._failed: set[str] = set()  # and those that failed
        self._recalled = _Recalled()  # when the history's messages were recorded
        self._recall = 0  # the seq of the checkpoint the history came from, until recalled
        # every message converted once: the same object whenever it is sent again
        self._converted = _Converted(_unit_message, self._first_seen)
        self._writer = _Writer(run, threaded=False)  # recording() gives it one with a thread of its own

    def history(self) -> list[AdkEvent]:
        """The ADK session events of the session's latest checkpoint; empty when it has none."""
        saved = self.source.load_checkpoint() if self.source is not None else None
        self._recall = 0 if saved is None else saved.seq
        return [] if saved is None else [AdkEvent.model_validate(event) for event in saved.snapshot]

    def ref(self, execution: session.Execution) -> session.CallRef:
        """The ``CallRef`` of *execution* in this run, for the host's timeline."""
        return self.run.ref(execution)

    def _scope(self, invocation_id: str, branch: str | None) -> _Scope:
        """The scope of the branch *branch* of the invocation *invocation_id*."""
        key = (invocation_id, branch or "")
        scope = self._scopes.get(key)
        if scope is None:
            scope = self._scopes[key] = _Scope(self._invocation(invocation_id))
        return scope

    def _invocation(self, invocation_id: str) -> _Invocation:
        """The invocation *invocation_id*; a new one begins the run, or, inside one of its
        tool calls, a sub-agent's run nested in the call."""
        known = self._invocations.get(invocation_id)
        if known is not None:
            return known
        caller = _CALLER.get()
        if caller is not None and caller[0] is self:
            invocation = self._invocations[invocation_id] = _Invocation(caller[1])
            return invocation
        if self._main:
            raise RuntimeError("a SessionRecorder records one run: give each run its own recording()")
        self._main = invocation_id
        self._record("agent_start")
        invocation = self._invocations[invocation_id] = _Invocation(None)
        return invocation

    # -- the run

    async def on_user_message_callback(
        self, *, invocation_context: InvocationContext, user_message: types.Content
    ) -> types.Content | None:
        if self._invocation(invocation_context.invocation_id).caller is None:
            await self._commit(user_message, None)
        return None

    async def after_run_callback(self, *, invocation_context: InvocationContext) -> None:
        if invocation_context.invocation_id == self._main and not self._ended:
            self._end_open(asyncio.CancelledError("the run ended before the call did"))
            await self._end_turn(invocation_context.session.events)
            # ADK ends a run closed early (its events no longer read) as it ends a whole one
            reason = "error" if self._refused else "stop" if self._answered else "aborted"
            self._end(reason, self._refused)

    async def on_run_error_callback(self, *, invocation_context: InvocationContext, error: Exception) -> None:
        if invocation_context.invocation_id == self._main and not self._ended:
            self._end_open(asyncio.CancelledError("the run failed before the call ended"))
            await self._end_turn(None)
            self._end("error", error)

    async def on_event_callback(
        self, *, invocation_context: InvocationContext, event: AdkEvent
    ) -> AdkEvent | None:
        scope = self._scope(invocation_context.invocation_id, event.branch)
        if event.partial:
            return None
        if scope.asked is not None:  # a callback answered before the model was called
            scope.asked = None
            self._made_by_callback(scope, event.content, _BEFORE_MODEL)
        if scope.invocation.caller is None:
            self._answered = event.is_final_response()
            self._refused = _reply_error(event)
            if event.content is not None:
                await self._commit(event.content, scope)
        return None

    # -- model calls

    async def before_model_callback(
        self, *, callback_context: CallbackContext, llm_request: LlmRequest
    ) -> LlmResponse | None:
        scope = self._scope(callback_context.invocation_id, callback_context.branch)
        caller = scope.invocation.caller
        if caller is None:
            await self._next_turn(callback_context)
            scope.turn = self._turn
            execution = session.Execution(f"model-{self._turn}", "model", turn_index=self._turn)
        else:
            scope.invocation.calls += 1
            name = f"{caller.id}/model-{scope.invocation.calls}"
            execution = session.Execution(name, "model", parent_id=caller.id, turn_index=caller.turn_index)
        scope.asked = _Asked(execution, llm_request, datetime.now(timezone.utc))
        scope.model = None
        _CALLING.set((self, scope))
        return None

    async def after_model_callback(
        self, *, callback_context: CallbackContext, llm_response: LlmResponse
    ) -> LlmResponse | None:
        scope = self._scope(callback_context.invocation_id, callback_context.branch)
        await self._begun(scope)
        if llm_response.partial:  # a streamed chunk: the whole reply comes last
            return None
        execution = scope.model
        if execution is None or execution.id not in self._running:  # the failed call's rescue
            self._made_by_callback(scope, llm_response.content, _MODEL_RESCUE)
            return None
        message = _response_message(llm_response)
        if llm_response.content is not None:
            self._converted.add(llm_response.content, message)
        self._model_end(execution, message, _reply_error(llm_response))
        _CALLING.set(None)
        await self._writer.flush()
        return None

    async def on_model_error_callback(
        self, *, callback_context: CallbackContext, llm_request: LlmRequest, error: Exception
    ) -> LlmResponse | None:
        scope = self._scope(callback_context.invocation_id, callback_context.branch)
        await self._begun(scope)
        self._model_end(scope.model, None, error)
        _CALLING.set(None)
        return None

    # -- tool calls

    async def before_tool_callback(
        self, *, tool: BaseTool, tool_args: dict[str, Any], tool_context: ToolContext
    ) -> dict[str, Any] | None:
        scope = self._scope(tool_context.invocation_id, tool_context.branch)
        caller = scope.invocation.caller
        call_id = tool_context.function_call_id or ""
        name = f"tool-{scope.turn}-{call_id}" if caller is None else f"{caller.id}/tool-{call_id}"
        parent = scope.model.id if scope.model is not None else ""
        turn = scope.turn if caller is None else caller.turn_index
        execution = session.Execution(name, "tool", parent_id=parent, turn_index=turn)
        scope.tools[call_id] = execution
        self._running[execution.id] = (execution, tool.name, call_id)
        self._tool_calls += 1
        args = to_json(tool_args)
        self._record("tool_exec_start", execution=execution, tool_id=call_id, tool=tool.name, args=args)
        self._record("tool_invoke_start", execution=execution, tool_id=call_id, tool=tool.name, args=args)
        _CALLER.set((self, execution))
        return None

    async def after_tool_callback(
        self, *, tool: BaseTool, tool_args: dict[str, Any], tool_context: ToolContext, result: Any
    ) -> dict[str, Any] | None:
        self._tool_end(tool, tool_context, result, None)
        await self._writer.flush()
        return None

    async def on_tool_error_callback(
        self, *, tool: BaseTool, tool_args: dict[str, Any], tool_context: ToolContext, error: Exception
    ) -> dict[str, Any] | None:
        self._tool_end(tool, tool_context, None, error)
        return None

    # -- writing

    def _first_seen(self, message: session.Message) -> session.Message:
        """*message*, converted for the first time: one of the history takes the time it was
        recorded with; the result an ``on_tool_error_callback`` gave for a failed tool call
        says so, as does one ADK made for a call that failed (2.15 tells the model that a
        cancelled run aborted its tool call)."""
        message = self._recalled.stamp(message)
        call_id = (message.metadata or {}).get("tool_call_id") if message.role == "tool" else None
        if call_id in self._rescued:
            message.metadata = {**(message.metadata or {}), **_TOOL_RESCUE}
        elif call_id in self._failed:
            message.metadata = {**(message.metadata or {}), "is_error": True}
        return message

    def _record(self, kind: str, when: datetime | None = None, **fields: Any) -> None:
        self._writer.record(kind, fields, when)

    async def _begun(self, scope: _Scope) -> None:
        """Begin the model call *scope* asked for, if it has not begun: the model answered or
        failed (its request converted in the writer)."""
        if scope.asked is not None:
            self._begin(scope, await self._writer.call(self._converted.all, _sent(scope.asked.request)))

    def _begin(self, scope: _Scope, sent: list[session.Message]) -> None:
        """Begin the model call *scope* asked for, which sent the messages *sent*, as of when
        it was asked for."""
        asked = scope.asked
        if asked is not None:
            scope.asked = None
            scope.request = _request(sent, asked.request)
            self._attempt_start(scope, asked.execution, asked.when)

    def _attempt_start(self, scope: _Scope, execution: session.Execution, when: datetime | None) -> None:
        scope.model = execution
        self._running[execution.id] = (execution, "", "")
        self._record("model_exec_start", when, execution=execution)
        self._record("model_request", when, execution=execution, request=scope.request)

    def _fell_back(self, scope: _Scope, why: str) -> None:
        """A ``FallbackModel`` said (*why*) that its model failed and it tries the next: the
        attempt under way failed, the next one starts, sending the same request."""
        if scope.asked is not None:  # the first model failed at once (a rare case: converted here)
            self._begin(scope, self._converted.all(_sent(scope.asked.request)))
        failed = scope.model
        if failed is None:
            return
        self._model_end(failed, None, why)
        retry = replace(failed, attempt=failed.attempt + 1)
        self._record("retry", execution=retry, retry=session.RetryInfo(error=why), error=why)
        self._attempt_start(scope, retry, None)

    def _model_end(
        self,
        execution: session.Execution | None,
        message: session.Message | None,
        error: BaseException | dict[str, str] | str | None,
    ) -> None:
        """The attempt *execution* answered *message*, or failed with *error* (with what it
        answered, if anything: a reply that is an error)."""
        if execution is not None:
            self._running.pop(execution.id, None)
        if error is None:
            self._record("model_exec_end", execution=execution, message=message)
        else:
            self._record("model_exec_end", execution=execution, partial_message=message, error=error)

    def _made_by_callback(self, scope: _Scope, content: types.Content | None, source: dict[str, Any]) -> None:
        """A callback answered for the model (*source* says which): no model call made this
        answer, *content*, which is committed as a message of its own saying so."""
        scope.model = None
        _CALLING.set(None)
        if content is not None:
            message = _content_message(content, None)
            message.metadata = dict(source)
            self._converted.add(content, message)

    def _tool_end(
        self, tool: BaseTool, tool_context: ToolContext, result: Any, error: BaseException | None
    ) -> None:
        """The tool call of *tool_context* returned *result* or failed with *error*.  One that
        failed and now returns is answered for by an ``on_tool_error_callback`` (or
        ``ReflectAndRetryToolPlugin``): it stays failed, and what the model is told says so."""
        scope = self._scope(tool_context.invocation_id, tool_context.branch)
        call_id = tool_context.function_call_id or ""
        _CALLER.set(None if scope.invocation.caller is None else (self, scope.invocation.caller))
        execution = scope.tools.get(call_id)
        if execution is not None and execution.id not in self._running:
            self._rescued.add(call_id)
            return
        self._tool_result(execution, tool.name, call_id, result, error)

    def _tool_result(
        self,
        execution: session.Execution | None,
        name: str,
        call_id: str,
        result: Any,
        error: BaseException | None,
    ) -> None:
        if execution is not None:
            self._running.pop(execution.id, None)
        self._tool_errors += error is not None
        if error is not None:
            self._failed.add(call_id)
        self._record(
            "tool_exec_end",
            execution=execution,
            tool_id=call_id,
            tool=name,
            result=None if error is not None else _Later(to_json, result),
            is_error=error is not None,
            error=error,
        )

    async def _commit(self, content: types.Content, scope: _Scope | None) -> None:
        """``message_end`` for each message of *content* (converted in the writer), in the
        call that made it."""
        for message in await self._writer.call(self._converted.all, _units(content)):
            call_id = (message.metadata or {}).get("tool_call_id")
            execution = scope.model if scope is not None and message.role == "assistant" else None
            if scope is not None and isinstance(call_id, str):
                execution = scope.tools.get(call_id)
            self._record("message_end", execution=execution, message=message)

    async def _next_turn(self, context: CallbackContext) -> None:
        """End the turn under way (its checkpoint saved) and begin the next; the first turn of
        a resumed conversation counts the model replies before it."""
        events = context.session.events
        if self._recall and self.source is not None:
            before, self._recall = self._recall, 0
            await asyncio.to_thread(self._recalled.load, self.source.path, before)
        if self._turn == 0:
            earlier = [e for e in events if e.invocation_id != context.invocation_id]
            self._turn = sum(e.content is not None and e.content.role == "model" for e in earlier)
        await self._end_turn(events)
        self._turn += 1
        self._in_turn = True
        self._record("turn_start", turn_index=self._turn)

    async def _end_turn(self, events: Sequence[AdkEvent] | None) -> None:
        """``turn_end`` of the turn under way, and with *checkpoint* the session's *events*."""
        if not self._in_turn:
            return
        self._turn_end()
        if self.checkpoint and events is not None:
            await self._writer.checkpoint(_Later(_events_json, list(events)))

    def _turn_end(self) -> None:
        if self._in_turn:
            self._record("turn_end", turn_index=self._turn)
        self._in_turn = False

    def _end_open(self, failure: BaseException) -> None:
        """The run ends: every call still under way ends, failed with *failure* (a model call
        asked for and not begun began: the model was being called).  ADK tells a plugin
        nothing of a run cancelled, of a stream its consumer stopped, nor (2.11) of a tool
        call cancelled when its sibling failed."""
        for scope in self._scopes.values():
            if scope.asked is not None:
                self._begin(scope, self._converted.all(_sent(scope.asked.request)))
        for execution, name, call_id in list(self._running.values()):
            if execution.kind == "model":
                self._model_end(execution, None, failure)
            else:
                self._tool_result(execution, name, call_id, None, failure)

    def _left(self, error: BaseException | None) -> None:
        """The block recording the run was left, by *error* or not: a run begun and not
        ended (ADK tells a plugin nothing of a cancelled run) ends now, ``aborted`` (or
        ``error`` when *error* is not a cancellation or interruption), its calls under way
        failed with *error*."""
        if not self._main or self._ended:
            return
        self._end_open(error or asyncio.CancelledError("the run was left before it ended"))
        self._turn_end()
        self._end("error" if error is not None and not isinstance(error, _ABORTS) else "aborted", error)

    def _end(self, reason: str, error: BaseException | dict[str, str] | None) -> None:
        self._ended = True
        summary = session.RunSummary(self._turn, self._tool_calls, self._tool_errors, reason)
        self._record("agent_end", summary=summary, error=error)
