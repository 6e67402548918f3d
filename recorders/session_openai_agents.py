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
"""Record an OpenAI Agents SDK run into a ``session.py`` file.

    from session_openai_agents import recording

    async with recording("chat.jsonl", checkpoint=True) as recorder:
        result = await recorder.run(agent, recorder.history() + [{"role": "user", "content": "Hi"}])

``recording`` creates the file (or opens it to continue the conversation), begins a run and
yields a ``SessionRecorder``.  ``recorder.run`` is ``Runner.run`` with the recorder wired in:
its ``RunHooks`` for turns, tools and committed messages, a model wrapper for every attempt the
runner's retry machinery makes (the agents it hands off to, and those its agent tools run,
copied with their models wrapped), and a ``tool_error_formatter`` and copies of the agent's function
tools that mark failed tool calls (an exception, bad arguments, a timeout, a cancellation).
``recorder.run_streamed`` is ``Runner.run_streamed`` recorded alike: the run's end is recorded
when the result's ``stream_events()`` ends.
With *checkpoint*, the conversation's input list (``RunResult.to_input_list()``, the SDK's own
way to continue a conversation) is saved at every turn's end; ``recorder.history()`` returns it.
Copy this file next to ``session.py``; it needs only the ``openai-agents`` package.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import copy
import dataclasses
import functools
import hashlib
import json
import os
import threading
import time
import types
import uuid
import warnings
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from datetime import datetime, timezone
from types import TracebackType
from typing import Any, Generic, NamedTuple, TypeVar

import pydantic
import pydantic_core
from agents import (
    Agent,
    Model,
    ModelProvider,
    ModelResponse,
    ModelSettings,
    RunConfig,
    RunHooks,
    Runner,
    ToolTimeoutError,
)
from agents.agent_output import AgentOutputSchemaBase
from agents.handoffs import Handoff
from agents.items import TResponseInputItem, TResponseStreamEvent
from agents.models.interface import ModelTracing
from agents.result import RunResult, RunResultBase, RunResultStreaming
from agents.retry import ModelRetryAdvice, ModelRetryAdviceRequest
from agents.run_config import ToolErrorFormatterArgs
from agents.run_context import AgentHookContext, RunContextWrapper
from agents.stream_events import StreamEvent
from agents.tool import (
    FunctionTool,
    Tool,
    default_tool_error_function,
    resolve_function_tool_failure_error_function,
    set_function_tool_failure_error_function,
)
from agents.tool_context import ToolContext
from openai.types.responses import Response, ResponseCompletedEvent
from openai.types.responses.response_prompt_param import ResponsePromptParam

import session

__all__ = ["SessionRecorder", "recording", "to_json", "to_messages"]


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


# ---------------------------------------------------------------------------- messages


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


class _ConvertedByContent(Generic[_T]):
    """The conversation's messages as this recorder converted them the first time it saw
    them (one per recorder), by their content (*key*): a framework message sent again (the
    SDK sends a copy made anew for every call) comes back as the same converted object,
    timestamp and all: it is neither converted again nor, in a version-2 file, written or
    encoded again (the writer knows a ``session.Message`` of the request before by the
    object).  Of equal messages in one request, the n-th is the n-th seen: two alike stay
    two.  A model's reply is noted (``add``) as what its items convert to when sent back.
    Nothing is looked up by an object's ``id()``: an edited message is one of new content."""

    def __init__(self, key: Callable[[Any], str], convert: Callable[[Any], _T]) -> None:
        self._key = key
        self._convert = convert
        self._contents: dict[str, list[_T]] = {}  # key -> converted, in the order first seen
        self._lock = threading.Lock()  # the recorder's writer converts, the event loop adds

    def all(self, sources: Sequence[Any]) -> list[_T]:
        """Each of *sources*, one request's messages in order, as first converted."""
        with self._lock:
            counts: dict[str, int] = {}
            out: list[_T] = []
            for source in sources:
                key = self._key(source)
                nth = counts.get(key, 0)
                counts[key] = nth + 1
                seen = self._contents.setdefault(key, [])
                if nth >= len(seen):
                    seen.append(self._convert(source))
                out.append(seen[nth])
            return out

    def add(self, key: str, converted: _T) -> None:
        """Note *converted* as what a message of content *key* converts to (a model's reply,
        as recorded, before it is sent back)."""
        with self._lock:
            self._contents.setdefault(key, []).append(converted)


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


_MODEL_ITEMS = {"function_call", "reasoning", "computer_call", "web_search_call", "file_search_call"}


def _is_model_item(item: dict[str, Any]) -> bool:
    """Whether *item* (an input item as JSON) is something a model produced."""
    return item.get("type") in _MODEL_ITEMS or item.get("role") == "assistant"


def to_messages(items: Sequence[Any], usage: session.Usage | None = None) -> list[session.Message]:
    """Input or output items (Responses API form) as agentgo-shaped messages: each run of
    model-produced items is one assistant message (with *usage*, if given); user, system and
    developer messages and tool outputs are one message each."""
    now = datetime.now(timezone.utc)
    return [_unit_message(unit, usage, now) for _, unit in _units(items)]


def _units(items: Sequence[Any]) -> list[tuple[int, Any]]:
    """*items* as JSON, one unit per message ``to_messages`` makes: a run of model-produced
    items as a tuple, any other item alone; each with the index of its first item."""
    out: list[tuple[int, Any]] = []
    run: list[Any] = []
    for at, item in enumerate(to_json(item) for item in items):
        if isinstance(item, dict) and _is_model_item(item):
            run.append(item)
            continue
        if run:
            out.append((at - len(run), tuple(run)))
            run = []
        out.append((at, item))
    if run:
        out.append((len(items) - len(run), tuple(run)))
    return out


def _unit_message(unit: Any, usage: session.Usage | None, now: datetime) -> session.Message:
    if isinstance(unit, tuple):
        return _assistant(_unit_blocks(unit), usage, now)
    return _input_message(unit, now)


def _unit_key(unit: Any) -> str:
    """The content of a unit of ``_units``: a run of model-produced items as the blocks of
    its message (a reply sent back, as the SDK's input items, leaves out the fields that
    the response's items hold unset), any other item as its JSON."""
    if isinstance(unit, tuple):
        return _reply_key(_unit_blocks(unit))
    return _content_key(["item", unit])


def _reply_key(blocks: list[session.ContentBlock]) -> str:
    """The content of an assistant message of *blocks*, its usage and time aside."""
    return _content_key(["reply", blocks])


def _unit_blocks(unit: tuple[Any, ...]) -> list[session.ContentBlock]:
    return [block for item in unit for block in _assistant_blocks(item)]


def _response_message(response: ModelResponse | Response) -> session.Message:
    """A model's response (or a streamed one's completed response) as one assistant message,
    with the response's usage."""
    blocks = _unit_blocks(tuple(to_json(item) for item in response.output))
    usage = None if response.usage is None else _usage(response.usage)
    return _assistant(blocks, usage, datetime.now(timezone.utc))


def _assistant(
    blocks: list[session.ContentBlock], usage: session.Usage | None, now: datetime
) -> session.Message:
    calls = any(block["type"] == "toolCall" for block in blocks)
    return session.Message("assistant", blocks, "toolUse" if calls else "stop", usage, timestamp=now)


def _assistant_blocks(item: dict[str, Any]) -> list[session.ContentBlock]:
    kind = item.get("type")
    if kind == "function_call":
        return [_tool_call_block(str(item.get("call_id")), str(item.get("name")), item.get("arguments"))]
    if kind == "reasoning":
        return [session.thinking_block(str(part.get("text", ""))) for part in item.get("summary") or []]
    if isinstance(item.get("content"), str):
        return [session.text_block(item["content"])]
    if kind == "message" or item.get("role") == "assistant":
        return [_content_block(part) for part in item.get("content") or []]
    return [session.text_block(json.dumps(item))]


def _tool_call_block(call_id: str, name: str, arguments: Any) -> session.ToolCallBlock:
    if isinstance(arguments, str):
        return _call_from_text(call_id, name, arguments)
    return session.tool_call_block(call_id, name, to_json(arguments or {}))


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


def _content_block(part: Any) -> session.ContentBlock:
    kind = part.get("type") if isinstance(part, dict) else None
    if kind in ("input_text", "output_text", "text"):
        return session.text_block(str(part.get("text", "")))
    if kind == "refusal":
        return session.text_block(str(part.get("refusal", "")))
    if kind == "input_image" and isinstance(part.get("image_url"), str):
        return session.image_block(url=part["image_url"])
    return session.text_block(json.dumps(part))  # files, audio: kept as their JSON


def _input_message(item: Any, now: datetime) -> session.Message:
    if not isinstance(item, dict):
        return session.Message("user", [session.text_block(json.dumps(item))], timestamp=now)
    if item.get("type") == "function_call_output":
        output = item.get("output")
        text = output if isinstance(output, str) else json.dumps(output)
        return session.tool_result(str(item.get("call_id")), text, timestamp=now)
    role = {"developer": "system", "system": "system"}.get(str(item.get("role")), "user")
    content = item.get("content")
    if isinstance(content, str):
        return session.Message(role, [session.text_block(content)], timestamp=now)
    if isinstance(content, list):
        return session.Message(role, [_content_block(part) for part in content], timestamp=now)
    return session.Message(role, [session.text_block(json.dumps(item))], timestamp=now)


def _usage(used: Any) -> session.Usage:
    """The SDK's ``Usage`` or the Responses API's, which name their fields alike."""
    return {
        "input": used.input_tokens,
        "output": used.output_tokens,
        "cache_read": used.input_tokens_details.cached_tokens,
        "cache_write": getattr(used.input_tokens_details, "cache_write_tokens", 0) or 0,
        "total_tokens": used.total_tokens,
    }


def _tool_json(tool: Tool) -> dict[str, Any]:
    if isinstance(tool, FunctionTool):
        return {
            "name": tool.name,
            "description": tool.description,
            "parameters": to_json(tool.params_json_schema),
        }
    return {"name": tool.name, "type": type(tool).__name__}


def _input_list(system: str | None, items: str | list[TResponseInputItem]) -> list[Any]:
    """What a model call sends, as input items: the system instructions first."""
    listed: list[Any] = [{"role": "user", "content": items}] if isinstance(items, str) else items
    return [{"role": "system", "content": system}, *listed] if system else listed


def _request(
    messages: list[session.Message],
    settings: ModelSettings,
    tools: list[Tool],
    output: AgentOutputSchemaBase | None,
    model: str,
) -> session.ModelRequest:
    config = session.CallConfig(
        max_tokens=settings.max_tokens if isinstance(settings.max_tokens, int) else 0,
        tool_choice=to_json(settings.tool_choice),
        response_format=None if output is None or output.is_plain_text() else to_json(output.json_schema()),
        extra={"model": model, "settings": to_json(settings)},
    )
    return session.ModelRequest(messages, [_tool_json(tool) for tool in tools], config)


# ---------------------------------------------------------------------------- the recorder


@dataclasses.dataclass
class _Nested:
    """The work of agents run in one tool call (agents as tools)."""

    calls: int = 0  # their model calls
    model: session.Execution | None = None  # the latest model call attempt
    error: BaseException | None = None  # and why it failed
    asked: int = 0  # the function tool calls their model calls asked for
    started: int = 0  # and those that started (hooks=recorder handed on to their run)


# the agents a recorder copied for a run: by the original's id, the original (kept alive, so
# that its id is no other agent's) and its copy
_Done = dict[int, tuple[Agent[Any], Agent[Any]]]


class SessionRecorder(RunHooks[Any]):
    """Run hooks that record one ``Runner.run`` into *run* (a ``session.Run``).

    Use ``await recorder.run(agent, input)`` (or ``recorder.run_streamed``); it wires the
    hooks, wraps the ``Model`` object of the agent, of every agent it hands off to and of the
    run config, and every model the run's provider gives by name, copies their function tools,
    and ends the run's record, also when it raises.  An agent tool (``as_tool``) runs a copy
    of its agent made alike.  A model call made inside a tool call (an agent run as a tool) is
    an execution nested in that call, and so are the tool calls of that agent when its
    ``as_tool(..., hooks=recorder)`` hands the recorder on; what the recorder cannot reach (an
    agent tool whose invoker is not ``as_tool``'s and whose agent holds a ``Model`` object, or
    whose tool calls it did not see start) is a warning and a ``recording_gap`` event in the
    call.  A model's reply is one message wherever it is recorded and sent back.  With
    *checkpoint*, the input list is saved at each turn's end.  *source* is the session that
    ``history`` reads the latest checkpoint from.
    """

    def __init__(
        self, run: session.Run, *, checkpoint: bool = False, source: session.Session | None = None
    ) -> None:
        self.run_record = run
        self.checkpoint = checkpoint
        self._source = source
        self._started = False
        self._open = False  # agent_start recorded, agent_end not yet
        self._history = 0  # items of the input that came from the checkpoint
        self._seen = -1  # input items already written as message_end
        self._turn = 0
        self._in_turn = False
        self._attempt = 0
        self._model: session.Execution | None = None
        self._reply: session.Message | None = None  # its reply, as recorded: on_llm_end commits it
        self._last_error: BaseException | None = None
        self._tools: dict[str, tuple[session.Execution, str]] = {}  # tool calls running, by call id
        self._finished: dict[str, session.Execution] = {}  # and those that ended
        self._failed: set[str] = set()  # the ids of those that failed
        self._failures: dict[str, BaseException] = {}  # why a tool call failed, by call id
        self._begun: dict[str, float] = {}  # when a tool call started (on_tool_start), by call id
        self._nested: dict[str, _Nested] = {}  # the work of agents run in a tool call, by its id
        # the input of a model call about to be made in an agent run in a tool call (by its id),
        # and that tool call: the run's context names it, which the model call is not given
        self._within: dict[int, tuple[Any, session.Execution]] = {}
        self._tool_calls = 0
        self._tool_errors = 0
        # every message converted once: the same object whenever it is sent again
        self._converted = _ConvertedByContent(_unit_key, self._first_seen)
        self._recalled = _Recalled()  # when the history's messages were recorded
        self._recall = 0  # the seq of the checkpoint the history came from, until recalled
        self._writer = _Writer(run, threaded=False)  # recording() gives it one with a thread of its own

    def history(self) -> list[TResponseInputItem]:
        """The input list of the session's latest checkpoint; empty when it has none."""
        saved = self._source.load_checkpoint() if self._source is not None else None
        items: list[TResponseInputItem] = [] if saved is None else list(saved.snapshot)
        self._history = len(items)
        self._recall = 0 if saved is None else saved.seq
        return items

    def ref(self, execution: session.Execution) -> session.CallRef:
        """The ``CallRef`` of *execution* in this run, for the host's timeline."""
        return self.run_record.ref(execution)

    async def run(
        self,
        agent: Agent[Any],
        input: str | list[TResponseInputItem],  # noqa: A002 - Runner.run's name
        *,
        run_config: RunConfig | None = None,
        **options: Any,
    ) -> RunResult:
        """``Runner.run(agent, input, ...)``, recorded; *options* go to ``Runner.run``."""
        agent, config = self._wired(agent, run_config)
        try:
            result = await Runner.run(agent, input, hooks=self, run_config=config, **options)
        except BaseException as exc:
            self._end(exc)
            raise
        await self._finish(result)
        return result

    def run_streamed(
        self,
        agent: Agent[Any],
        input: str | list[TResponseInputItem],  # noqa: A002 - Runner.run_streamed's name
        *,
        run_config: RunConfig | None = None,
        **options: Any,
    ) -> RunResultStreaming:
        """``Runner.run_streamed(agent, input, ...)``, recorded as ``run`` records: every model
        attempt, its streamed response as one message.  The run's end is recorded when the
        result's ``stream_events()`` ends: at the run's end, with the error it raises, or
        ``aborted`` when the stream is closed early or cancelled."""
        agent, config = self._wired(agent, run_config)
        result = Runner.run_streamed(agent, input, hooks=self, run_config=config, **options)
        events = result.stream_events
        result.stream_events = functools.partial(self._stream, result, events)  # type: ignore[method-assign]
        return result

    def _wired(self, agent: Agent[Any], run_config: RunConfig | None) -> tuple[Agent[Any], RunConfig]:
        """*agent* and the run's config with the recorder wired in (once: one run each)."""
        if self._started:
            raise RuntimeError("a SessionRecorder records one run: give each run its own recording()")
        self._started = True
        return self._wrapped(agent, {}), self._configured(run_config or RunConfig())

    def _configured(self, config: RunConfig) -> RunConfig:
        """A copy of a run's *config* with the recorder wired in: its ``Model`` object (the
        model of all the run's agents) and every model its provider gives wrapped, and the
        failed tool calls noted."""
        model = _RecordingModel(config.model, self) if isinstance(config.model, Model) else config.model
        return dataclasses.replace(
            config,
            model=model,
            model_provider=_RecordingProvider(config.model_provider, self),
            tool_error_formatter=_ErrorMarker(config.tool_error_formatter, self._failures),
        )

    def _wrapped(self, agent: Agent[Any], done: _Done) -> Agent[Any]:
        """A copy of *agent*, its ``Model`` object wrapped, its function tools watched (an
        agent tool made to run a copy of its agent made alike), and the agents it hands off
        to copied alike (each once, in *done*)."""
        wrapped = done.get(id(agent))
        if wrapped is not None:
            return wrapped[1]
        model = _RecordingModel(agent.model, self) if isinstance(agent.model, Model) else agent.model
        copied = agent.clone(model=model)
        done[id(agent)] = (agent, copied)
        copied.tools = [_watched(tool, self, done) for tool in agent.tools]
        copied.handoffs = [self._handed_to(to, done) for to in agent.handoffs]
        return copied

    def _handed_to(self, to: Agent[Any] | Handoff[Any, Any], done: _Done) -> Any:
        """A handoff of an agent being wrapped: an agent wrapped alike, a ``Handoff`` (of
        ``handoff(...)``) copied to hand on to the agent it gives, wrapped alike."""
        if isinstance(to, Agent):
            return self._wrapped(to, done)
        copied = copy.copy(to)  # its target's weak reference kept
        copied.on_invoke_handoff = _HandingOn(to.on_invoke_handoff, self, done)
        return copied

    async def _stream(
        self, result: RunResultStreaming, events: Callable[[], AsyncIterator[StreamEvent]]
    ) -> AsyncIterator[StreamEvent]:
        """A streamed run's events, its end recorded when they end."""
        try:
            async with _closing(events()) as stream:
                async for event in stream:
                    yield event
        except BaseException as exc:
            self._end(exc)
            raise
        await self._finish(result)

    async def _finish(self, result: RunResultBase) -> None:
        """The run ended: its last messages, its turn's end, a checkpoint and ``agent_end``."""
        history = result.to_input_list()
        await self._commit(history)
        self._end_turn()
        if self.checkpoint:
            await self._writer.checkpoint(_Later(to_json, list(history)))
        self._record("agent_end", summary=self._summary("stop"))

    # -- hooks

    async def on_agent_start(self, context: AgentHookContext[Any], agent: Agent[Any]) -> None:
        if self._seen < 0:
            self._seen = 0
            self._record("agent_start")
            if not self._started:  # passed as hooks= to Runner itself: no model call is seen
                why = (
                    "the recorder was given to Runner as hooks: model calls and the run's end are"
                    " not recorded (use recorder.run or recorder.run_streamed)"
                )
                warnings.warn(f"session_openai_agents: {why}", RuntimeWarning, stacklevel=2)
                self._record("recording_gap", details={"unrecorded": why})

    async def on_llm_start(
        self,
        context: RunContextWrapper[Any],
        agent: Agent[Any],
        system_prompt: str | None,
        input_items: list[TResponseInputItem],
    ) -> None:
        running = self._tools.get(context.tool_call_id) if isinstance(context, ToolContext) else None
        if running is not None:  # an agent run in a tool call, given the recorder as hooks
            self._within[id(input_items)] = (input_items, running[0])
            return
        if self._caller() is not None:
            return
        if self._recall and self._source is not None:
            before, self._recall = self._recall, 0
            await asyncio.to_thread(self._recalled.load, self._source.path, before)
        if self._turn == 0:  # the first call: what came from the checkpoint is history
            self._seen = self._history
            earlier = to_messages(input_items[: self._history])
            self._turn = sum(message.role == "assistant" for message in earlier)
        await self._commit(input_items, system_prompt)
        if self._in_turn:
            self._end_turn()
            if self.checkpoint:
                await self._writer.checkpoint(_Later(to_json, list(input_items)))
        self._turn += 1
        self._in_turn = True
        self._attempt = 0
        self._record("turn_start", turn_index=self._turn)
        await self._writer.flush()

    async def on_llm_end(
        self, context: RunContextWrapper[Any], agent: Agent[Any], response: ModelResponse
    ) -> None:
        if self._caller() is None:
            message, self._reply = self._reply or _response_message(response), None
            self._record("message_end", execution=self._model, message=message)

    async def on_tool_start(self, context: RunContextWrapper[Any], agent: Agent[Any], tool: Tool) -> None:
        if not isinstance(context, ToolContext):
            return  # hosted and computer tools: no call id to pair start and end
        caller = self._caller()
        if caller is None:
            name, model = f"tool-{self._turn}-{context.tool_call_id}", self._model
        else:  # a tool call of an agent run in the tool call *caller*: nested in it
            nested = self._nested.setdefault(caller.id, _Nested())
            nested.started += 1
            name, model = f"{caller.id}/tool-{context.tool_call_id}", nested.model
        parent = model.id if model is not None else ""
        execution = session.Execution(name, "tool", parent_id=parent, turn_index=self._turn)
        self._tools[context.tool_call_id] = (execution, tool.name)
        self._begun[context.tool_call_id] = time.monotonic()
        self._tool_calls += 1
        args = _tool_call_block(context.tool_call_id, context.tool_name, context.tool_arguments)["tool_call"]
        self._record(
            "tool_exec_start",
            execution=execution,
            tool_id=context.tool_call_id,
            tool=tool.name,
            args=args["args"],
        )

    async def on_tool_end(
        self, context: RunContextWrapper[Any], agent: Agent[Any], tool: Tool, result: object
    ) -> None:
        if not isinstance(context, ToolContext) or context.tool_call_id not in self._tools:
            return
        begun = self._begun.get(context.tool_call_id, time.monotonic())
        error = self._failures.pop(context.tool_call_id, None) or _timed_out(tool, begun)
        self._tool_end(context.tool_call_id, result, error)
        await self._writer.flush()

    def _caller(self) -> session.Execution | None:
        """The tool call of this run whose work runs now (an agent run as a tool), if any."""
        caller = _CALLER.get()
        return caller[1] if caller is not None and caller[0] is self else None

    def _enter(self, input_items: Any) -> None:
        """A model call with *input_items* is about to be made: when ``on_llm_start`` saw it
        made in an agent run in a tool call (an agent tool of an agent run as a tool, which
        the recorder does not watch), that call is the caller from here on, in this task and
        in the tasks it starts (the run's tool calls)."""
        within = self._within.pop(id(input_items), None)
        if within is not None and within[0] is input_items:
            _CALLER.set((self, within[1]))

    # -- writing

    def _record(self, kind: str, **fields: Any) -> None:
        self._writer.record(kind, fields)
        self._open = kind == "agent_start" or (self._open and kind != "agent_end")

    def _left(self, error: BaseException | None) -> None:
        """The block recording the run was left, by *error* or not: a run begun and not
        ended ends now, ``aborted`` (or ``error`` when *error* is not a cancellation or an
        interruption), the tool calls under way failed with it."""
        if self._open and self._started:  # a run of recorder.run or run_streamed: its end is known
            self._end(error or asyncio.CancelledError("the run was left before it ended"))

    def _tool_end(self, call_id: str, result: Any, error: BaseException | None) -> None:
        execution, name = self._tools.pop(call_id)
        self._begun.pop(call_id, None)
        self._finished[call_id] = execution
        self._tool_errors += error is not None
        if error is not None:
            self._failed.add(call_id)
        self._record(
            "tool_exec_end",
            execution=execution,
            tool_id=call_id,
            tool=name,
            result=_Later(to_json, result),
            is_error=error is not None,
            error=error,
        )

    async def _commit(self, items: list[Any], system: str | None = None) -> None:
        """``message_end`` for the input items not yet written; a model's own items were
        written when its response came (``on_llm_end``).  The items of a model call are
        converted here (in the writer), in the order sent (its *system* instructions first)."""
        units = await self._writer.call(_units, _input_list(system, items))
        converted = await self._writer.call(self._converted.all, [unit for _, unit in units])
        first = max(self._seen, 0) + (1 if system else 0)
        for (at, unit), message in zip(units, converted):
            if at < first or isinstance(unit, tuple):
                continue
            call_id = str((message.metadata or {}).get("tool_call_id"))
            if call_id in self._failed:  # the SDK's output item does not say the call failed
                metadata = {**(message.metadata or {}), "is_error": True}
                message = dataclasses.replace(message, metadata=metadata)
            self._record("message_end", execution=self._finished.get(call_id), message=message)
        self._seen = len(items)

    def _first_seen(self, unit: Any) -> session.Message:
        """The message of *unit* (of ``_units``), the first time it is seen: one of the history
        takes the time it was recorded with."""
        return self._recalled.stamp(_unit_message(unit, None, datetime.now(timezone.utc)))

    def _sent(self, system: str | None, items: str | list[TResponseInputItem]) -> list[session.Message]:
        """The messages of a model call, each as first converted."""
        return self._converted.all([unit for _, unit in _units(_input_list(system, items))])

    def _end_turn(self) -> None:
        if self._in_turn:
            self._record("turn_end", turn_index=self._turn)
        self._in_turn, self._model = False, None

    def _end(self, error: BaseException) -> None:
        """The run raised: close what it left open, then ``agent_end`` with the error (once:
        not when its ``recording()`` block was left before)."""
        if self._seen >= 0 and not self._open:
            return
        for call_id in list(self._tools):
            self._tool_end(call_id, None, error)
        if self._seen < 0:
            self._record("agent_start")
        self._end_turn()
        reason = "aborted" if isinstance(error, _ABORTS) else "error"
        self._record("agent_end", summary=self._summary(reason), error=error)

    def _summary(self, reason: str) -> session.RunSummary:
        return session.RunSummary(self._turn, self._tool_calls, self._tool_errors, reason)

    def _gap(self, caller: session.Execution, why: str) -> None:
        """Say loudly, at run time and in the file (a ``recording_gap`` event in *caller*, with
        *why*), that work done in *caller* goes unrecorded; nothing when *why* is empty."""
        if why:
            warnings.warn(f"session_openai_agents: {why}", RuntimeWarning, stacklevel=2)
            self._record("recording_gap", execution=caller, details={"unrecorded": why})

    # -- model attempts (called by _RecordingModel)

    def _attempt_start(self, request: session.ModelRequest) -> session.Execution:
        caller = self._caller()
        if caller is not None:  # made in a tool call: nested in it
            return self._nested_start(caller, request)
        self._attempt += 1
        execution = session.Execution(
            f"model-{self._turn}", "model", turn_index=self._turn, attempt=self._attempt
        )
        if self._attempt > 1:
            info = session.RetryInfo(error=self._last_error)
            self._record("retry", execution=execution, retry=info, error=self._last_error)
        self._model = execution
        self._record("model_exec_start", execution=execution)
        self._record("model_request", execution=execution, request=request)
        return execution

    def _nested_start(self, caller: session.Execution, request: session.ModelRequest) -> session.Execution:
        """An attempt of a model call of an agent run in the tool call *caller*, nested in it:
        the attempt after a failed one is its retry (the runner raises a failure it does not
        retry), numbered as the run's are."""
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
        self._record("model_exec_start", execution=execution)
        self._record("model_request", execution=execution, request=request)
        return execution

    def _attempt_end(
        self,
        execution: session.Execution,
        response: ModelResponse | Response | None,
        error: BaseException | None,
        asked: int = 0,
    ) -> None:
        """The end of a model call attempt: *response*, or *error*; *asked* is how many calls
        of function tools the response asks for."""
        nested = self._nested.get(execution.parent_id) if execution.parent_id else None
        if nested is None:
            self._last_error = error
        else:
            nested.error, nested.asked = error, nested.asked + asked
        if response is None:
            self._record("model_exec_end", execution=execution, error=error)
            return
        message = _response_message(response)  # one message, wherever it is recorded or sent
        self._converted.add(_reply_key(message.content or []), message)
        if nested is None:
            self._reply = message
        self._record("model_exec_end", execution=execution, message=message)


@contextlib.asynccontextmanager
async def _closing(stream: AsyncIterator[_T]) -> AsyncIterator[AsyncIterator[_T]]:
    """*stream*, closed when done with (an iterator that cannot be closed is left as it is)."""
    try:
        yield stream
    finally:
        close = getattr(stream, "aclose", None)
        if close is not None:
            await close()


def _asked(output: Sequence[Any], tools: list[Tool]) -> int:
    """How many calls of the function *tools* a response's *output* asks for."""
    names = {tool.name for tool in tools if isinstance(tool, FunctionTool)}
    return sum(getattr(item, "type", "") == "function_call" and item.name in names for item in output)


class _RecordingModel(Model):
    """The agent's model, recording every call the runner makes: one call per attempt."""

    def __init__(self, wrapped: Model, recorder: SessionRecorder) -> None:
        self._wrapped = wrapped
        self._recorder = recorder
        self._name = str(getattr(wrapped, "model", "") or type(wrapped).__name__)

    def get_retry_advice(self, request: ModelRetryAdviceRequest) -> ModelRetryAdvice | None:
        return self._wrapped.get_retry_advice(request)

    async def get_response(
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],  # noqa: A002 - the interface's name
        model_settings: ModelSettings,
        tools: list[Tool],
        output_schema: AgentOutputSchemaBase | None,
        handoffs: list[Handoff],
        tracing: ModelTracing,
        *,
        previous_response_id: str | None,
        conversation_id: str | None,
        prompt: ResponsePromptParam | None,
    ) -> ModelResponse:
        recorder = self._recorder
        messages = await recorder._writer.call(recorder._sent, system_instructions, input)
        request = _request(messages, model_settings, tools, output_schema, self._name)
        recorder._enter(input)
        execution = recorder._attempt_start(request)
        try:
            await recorder._writer.flush()
            response = await self._wrapped.get_response(
                system_instructions,
                input,
                model_settings,
                tools,
                output_schema,
                handoffs,
                tracing,
                previous_response_id=previous_response_id,
                conversation_id=conversation_id,
                prompt=prompt,
            )
        except BaseException as exc:
            recorder._attempt_end(execution, None, exc)
            raise
        recorder._attempt_end(execution, response, None, _asked(response.output, tools))
        return response

    async def stream_response(
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],  # noqa: A002 - the interface's name
        model_settings: ModelSettings,
        tools: list[Tool],
        output_schema: AgentOutputSchemaBase | None,
        handoffs: list[Handoff],
        tracing: ModelTracing,
        *,
        previous_response_id: str | None,
        conversation_id: str | None,
        prompt: ResponsePromptParam | None,
    ) -> AsyncIterator[TResponseStreamEvent]:
        recorder = self._recorder
        messages = await recorder._writer.call(recorder._sent, system_instructions, input)
        request = _request(messages, model_settings, tools, output_schema, self._name)
        recorder._enter(input)
        execution = recorder._attempt_start(request)
        completed: Response | None = None
        try:
            await recorder._writer.flush()
            stream = self._wrapped.stream_response(
                system_instructions,
                input,
                model_settings,
                tools,
                output_schema,
                handoffs,
                tracing,
                previous_response_id=previous_response_id,
                conversation_id=conversation_id,
                prompt=prompt,
            )
            async with _closing(stream) as events:
                async for event in events:
                    if isinstance(event, ResponseCompletedEvent):
                        completed = event.response
                    yield event
        except BaseException as exc:
            recorder._attempt_end(execution, None, exc)
            raise
        if completed is None:
            recorder._attempt_end(
                execution, None, RuntimeError("the stream ended without a completed response")
            )
            return
        recorder._attempt_end(execution, completed, None, _asked(completed.output, tools))


class _RecordingProvider(ModelProvider):
    """The run's model provider, its models wrapped: agents that name their model are recorded."""

    def __init__(self, wrapped: ModelProvider, recorder: SessionRecorder) -> None:
        self._wrapped = wrapped
        self._recorder = recorder

    def get_model(self, model_name: str | None) -> Model:
        return _RecordingModel(self._wrapped.get_model(model_name), self._recorder)


@dataclasses.dataclass
class _ErrorMarker:
    """A ``tool_error_formatter`` that notes which tool calls failed, then lets the host's
    formatter (or the SDK's default message) speak to the model."""

    host: Any
    failures: dict[str, BaseException]

    async def __call__(self, args: ToolErrorFormatterArgs[Any]) -> str | None:
        if args.kind == "tool_exception" and isinstance(args.error, Exception):
            self.failures[args.call_id] = args.error
        message = self.host(args) if self.host is not None else None
        return await message if asyncio.iscoroutine(message) else message


def _watched(tool: Tool, recorder: SessionRecorder, done: _Done) -> Tool:
    """A copy of a function *tool* that notes in *failures* each call that fails in a way the
    SDK turns into a message for the model rather than an error: a timeout or cancellation
    (the invoker is cancelled), and an exception its own ``failure_error_function`` formats
    (the SDK's default one tells the ``tool_error_formatter``).  What the tool does and what
    the model is told are unchanged.  Model calls made while it runs (an agent run as a tool)
    are recorded as nested in its call; an agent tool runs its agent's copy (``_wrapped``,
    *done*: the agents copied already), so that a ``Model`` object of the agent records."""
    if not isinstance(tool, FunctionTool):
        return tool
    watched = copy.copy(tool)  # the SDK's own copy: the invoker is bound to the copy
    rebound = _rebound(watched.on_invoke_tool, tool, recorder, done)
    invoker = watched.on_invoke_tool if rebound is None else rebound
    why = _unreachable(tool) if rebound is None else ""
    watched.on_invoke_tool = _Invoker(invoker, tool, recorder, why)
    formatter = resolve_function_tool_failure_error_function(tool)
    if formatter is not None and formatter is not default_tool_error_function:
        set_function_tool_failure_error_function(watched, _FailureNoter(formatter, recorder._failures))
    return watched


def _timed_out(tool: Tool, begun: float) -> ToolTimeoutError | None:
    """The timeout of a call of *tool* begun at *begun* (``time.monotonic``) that ended after
    its ``timeout`` had passed (a sub-agent's tool the recorder does not watch, of an agent
    tool it could not make run its copy of the agent: the SDK gives the model a message in
    place of the timeout); None when it did not."""
    limit = tool.timeout_seconds if isinstance(tool, FunctionTool) else None
    return (
        ToolTimeoutError(tool.name, limit)
        if limit is not None and time.monotonic() - begun >= limit
        else None
    )


def _rebound(invoker: Any, tool: FunctionTool, recorder: SessionRecorder, done: _Done) -> Any:
    """*invoker*, the invoker of an agent tool (of ``Agent.as_tool``), made to run the copy of
    its agent that *recorder* makes (``_wrapped``) in place of the agent, with the run config
    given to ``as_tool``, if any, wired alike (``_configured``): the SDK's invoker runs the
    agent its function's closure holds (as ``self``), in a run the recorder does not start.
    None when *tool* runs no agent, or its invoker is not the SDK's as this recorder knows it."""
    agent = getattr(tool, "_agent_instance", None)
    run = getattr(invoker, "_invoke_tool_impl", None)
    if not isinstance(agent, Agent) or not isinstance(run, types.FunctionType):
        return None
    names, cells = run.__code__.co_freevars, run.__closure__ or ()
    held: dict[str, Any] = {
        name: cell.cell_contents for name, cell in zip(names, cells) if name in ("self", "run_config")
    }
    if "self" not in held or held["self"] is not agent:
        return None
    held["self"] = recorder._wrapped(agent, done)
    config = held.get("run_config")
    if isinstance(config, RunConfig):
        held["run_config"] = recorder._configured(config)
    cells = tuple(types.CellType(held[name]) if name in held else cell for name, cell in zip(names, cells))
    runs = types.FunctionType(run.__code__, run.__globals__, run.__name__, run.__defaults__, cells)
    runs.__kwdefaults__ = run.__kwdefaults__
    runs.__dict__.update(run.__dict__)
    rebound = copy.copy(invoker)
    rebound._invoke_tool_impl = runs
    return rebound


def _unreachable(tool: FunctionTool) -> str:
    """Why the model calls of the agent that *tool* runs (an agent as a tool) cannot be
    recorded, its invoker not made to run the agent's copy (``_rebound``); "" when they can
    (or it runs no agent)."""
    agent = getattr(tool, "_agent_instance", None)
    if isinstance(agent, Agent) and isinstance(agent.model, Model):
        return (
            f"the agent tool {tool.name!r} runs agent {agent.name!r}, whose model is a Model object"
            " the recorder cannot wrap (the tool's invoker is not Agent.as_tool's as the recorder"
            " knows it): its model calls are not recorded (give that agent a model name and the"
            " RunConfig a model_provider to have them recorded)"
        )
    return ""


def _unseen(tool: FunctionTool, nested: _Nested | None) -> str:
    """What of the work of the agent *tool* runs (an agent as a tool) the recorder did not
    see, *nested* being what it saw: tool calls its model asked for that did not start in
    view (its run not given the recorder as hooks); "" when nothing."""
    unseen = 0 if nested is None else nested.asked - nested.started
    if unseen <= 0:
        return ""
    agent = getattr(getattr(tool, "_agent_instance", None), "name", "?")
    return (
        f"the agent tool {tool.name!r} runs agent {agent!r}, whose model asked for {unseen} tool"
        " call(s) the recorder did not see: pass hooks=recorder to its as_tool() to have them recorded"
    )


@dataclasses.dataclass
class _HandingOn:
    """The invoker of a ``Handoff`` object: the agent it hands on to, wrapped as the run's
    agents are (*done*: those wrapped already)."""

    invoke: Callable[[RunContextWrapper[Any], str], Awaitable[Agent[Any]]]
    recorder: SessionRecorder
    done: _Done

    async def __call__(self, context: RunContextWrapper[Any], arguments: str) -> Agent[Any]:
        return self.recorder._wrapped(await self.invoke(context, arguments), self.done)


# the recorder and the tool call whose work runs now (an agent run as a tool): model calls
# made in it are that call's nested executions
_CALLER: contextvars.ContextVar[tuple[SessionRecorder, session.Execution] | None] = contextvars.ContextVar(
    "session_openai_agents_caller", default=None
)


@dataclasses.dataclass
class _Invoker:
    """A function tool's invoker that notes a cancelled call: a timeout when the tool's
    ``timeout`` had passed since the call started (*begun*, noted before the SDK starts its
    clock), a cancellation otherwise; a call whose work the recorder cannot reach has a
    ``recording_gap`` saying why (*unreachable*, "" when none).  Anything else asked of it
    (argument preparation, markers) goes to the invoker."""

    invoke: Any
    tool: FunctionTool
    recorder: SessionRecorder
    unreachable: str

    async def __call__(self, context: ToolContext[Any], arguments: str) -> Any:
        recorder = self.recorder
        started = recorder._begun.get(context.tool_call_id, time.monotonic())
        running = recorder._tools.get(context.tool_call_id)
        if running is not None:
            recorder._gap(running[0], self.unreachable)
        token = _CALLER.set(None if running is None else (recorder, running[0]))
        try:
            return await self.invoke(context, arguments)
        except asyncio.CancelledError as exc:
            limit = self.tool.timeout_seconds
            if limit is not None and time.monotonic() - started >= limit:
                recorder._failures[context.tool_call_id] = ToolTimeoutError(self.tool.name, limit)
            else:
                recorder._failures[context.tool_call_id] = exc
            raise
        finally:
            _CALLER.reset(token)
            if running is not None:
                recorder._gap(running[0], _unseen(self.tool, recorder._nested.get(running[0].id)))

    def __getattr__(self, name: str) -> Any:
        if name == "invoke":  # not set yet (a copy being made): no such attribute
            raise AttributeError(name)
        return getattr(self.invoke, name)


@dataclasses.dataclass
class _FailureNoter:
    """A tool's own ``failure_error_function``, noting the call it formats as failed."""

    formatter: Any
    failures: dict[str, BaseException]

    def __call__(self, context: RunContextWrapper[Any], error: Exception) -> Any:
        if isinstance(context, ToolContext):
            self.failures[context.tool_call_id] = error
        return self.formatter(context, error)
