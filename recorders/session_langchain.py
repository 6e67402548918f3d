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
``agent_start`` to ``agent_end`` (the outermost chain: a graph, an agent, a chain), every chat
model attempt (retries from ``with_retry`` and fallbacks from ``with_fallbacks`` included) and
tool call, and, with *checkpoint*, the message list (``messages_to_dict``, LangChain's own
form) at every turn's end.  ``recorder.history()`` returns it as messages.  A synchronous host
passes ``SessionRecorder(run)`` for a ``session.Run`` it began itself.  Copy this file next
to ``session.py``; it needs only ``langchain-core``.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import os
import threading
from collections.abc import AsyncIterator, Callable, Sequence
from datetime import datetime, timezone
from typing import Any
from uuid import UUID

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
    fsyncs never block the event loop.  One recording records one conversation: run
    concurrent conversations each in its own ``recording`` of its own file.
    """
    target = os.fspath(path)
    limit: dict[str, Any] = {} if max_line_bytes is None else {"max_line_bytes": max_line_bytes}
    opened = await asyncio.to_thread(
        functools.partial(session.open, target, create=True, redact=redact, **limit)
    )
    try:
        run = await asyncio.to_thread(opened.begin_run)
        yield SessionRecorder(run, checkpoint=checkpoint, source=opened)
    finally:
        await asyncio.to_thread(opened.close)


def to_json(value: Any) -> Any:
    """*value* as plain JSON, through pydantic's own JSON form: models, dataclasses, enums and
    datetimes as pydantic writes them, bytes as base64, NaN and infinities as strings; a value
    pydantic cannot serialize (nor the python dump of a model) becomes ``{"type": ...,
    "repr": ...}`` rather than fail."""
    try:
        return _loads(value)
    except pydantic_core.PydanticSerializationError:  # a model's own config says bytes are text
        pass
    try:
        return _loads(value.model_dump() if isinstance(value, pydantic.BaseModel) else _unknown(value))
    except pydantic_core.PydanticSerializationError:
        return _unknown(value)


def _loads(value: Any) -> Any:
    text = pydantic_core.to_json(value, bytes_mode="base64", inf_nan_mode="strings", fallback=_unknown)
    return json.loads(text)


def _unknown(value: Any) -> Any:
    return {"type": f"{type(value).__module__}.{type(value).__qualname__}", "repr": repr(value)}


# a run that stops because it was cancelled, interrupted or (a stream) closed early: aborted
_ABORTS = (asyncio.CancelledError, KeyboardInterrupt, GeneratorExit)


# ---------------------------------------------------------------------------- messages

_STOP_REASONS = {"stop": "stop", "end_turn": "stop", "length": "length", "max_tokens": "length"}


def to_message(message: BaseMessage) -> session.Message:
    """A LangChain message as an agentgo-shaped one."""
    now = datetime.now(timezone.utc)
    if isinstance(message, ToolMessage):
        text = message.content if isinstance(message.content, str) else json.dumps(to_json(message.content))
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
        blocks = [session.text_block(json.dumps(to_json(messages_to_dict([message])[0])))]
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
    return session.text_block(json.dumps(to_json(part)))  # audio, files: kept as their JSON


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


def _request(messages: Sequence[BaseMessage], params: dict[str, Any]) -> session.ModelRequest:
    tools = [to_json(tool) for tool in params.get("tools") or []]
    rest = {key: value for key, value in params.items() if key not in ("tools", "tool_choice", "max_tokens")}
    config = session.CallConfig(
        max_tokens=limit if isinstance(limit := params.get("max_tokens"), int) else 0,
        tool_choice=to_json(params.get("tool_choice")),
        extra=to_json(rest),
    )
    return session.ModelRequest([to_message(message) for message in messages], tools, config)


# ---------------------------------------------------------------------------- the handler


class SessionRecorder(AsyncCallbackHandler):
    """A callback handler that records one invocation into *run* (a ``session.Run``).

    Pass it in the config of one top-level call: ``config={"callbacks": [recorder]}``.  With
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
        self._history = 0  # messages of the input that came from the checkpoint
        self._seen = -1  # input messages already written as message_end
        self._turn = 0
        self._model: session.Execution | None = None
        self._failed = False  # the last model attempt failed: the next one is its retry or fallback
        self._last_error: BaseException | None = None
        self._calls: dict[UUID, session.Execution] = {}  # model attempts and tool calls running
        self._tool_ids: dict[UUID, tuple[str, str]] = {}  # tool run -> (call id, tool name)
        self._finished: dict[str, session.Execution] = {}  # tool call id -> its execution
        self._tool_calls = 0
        self._tool_errors = 0

    def history(self) -> list[BaseMessage]:
        """The messages of the session's latest checkpoint; empty when it has none."""
        saved = self._source.load_checkpoint() if self._source is not None else None
        messages = [] if saved is None else messages_from_dict(saved.snapshot)
        self._history = len(messages)
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
        if parent_run_id is None:
            with self._lock:
                if self._root is not None:
                    raise RuntimeError("a SessionRecorder records one run: give each run its own recording()")
                self._root = run_id
                self._record("agent_start")

    async def on_chain_end(self, outputs: Any, *, run_id: UUID, **kwargs: Any) -> None:
        if run_id != self._root:
            return
        messages = outputs.get("messages") if isinstance(outputs, dict) else None
        with self._lock:
            if isinstance(messages, list):
                self._commit(messages)
            self._end_turn()
        if self.checkpoint and isinstance(messages, list):
            await asyncio.to_thread(self.run.save_checkpoint, to_json(messages_to_dict(messages)))
        with self._lock:
            self._record("agent_end", summary=self._summary("stop"))

    async def on_chain_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        if run_id != self._root:
            return
        with self._lock:
            for call_id in list(self._calls):
                self._end_call(call_id, None, error)
            self._end_turn()
            reason = "aborted" if isinstance(error, _ABORTS) else "error"
            self._record("agent_end", summary=self._summary(reason), error=error)

    # -- chat model attempts

    async def on_chat_model_start(
        self,
        serialized: dict[str, Any],
        messages: list[list[BaseMessage]],
        *,
        run_id: UUID,
        **kwargs: Any,
    ) -> None:
        sent = messages[0] if messages else []
        with self._lock:
            retry = self._failed and self._model is not None
            ended = not retry and self._close_turn(sent)
        if ended and self.checkpoint:
            await asyncio.to_thread(self.run.save_checkpoint, to_json(messages_to_dict(sent)))
        with self._lock:
            if retry and self._model is not None:
                attempt = self._model.attempt + 1
                execution = session.Execution(self._model.id, "model", turn_index=self._turn, attempt=attempt)
                info = session.RetryInfo(error=self._last_error)
                self._record("retry", execution=execution, retry=info, error=self._last_error)
            else:
                self._turn += 1
                self._record("turn_start", turn_index=self._turn)
                execution = session.Execution(f"model-{self._turn}", "model", turn_index=self._turn)
            self._model = execution
            self._calls[run_id] = execution
            self._record("model_exec_start", execution=execution)
            params = to_json(kwargs.get("invocation_params") or {})
            self._record("model_request", execution=execution, request=_request(sent, params))

    async def on_llm_end(self, response: LLMResult, *, run_id: UUID, **kwargs: Any) -> None:
        generation = response.generations[0][0] if response.generations and response.generations[0] else None
        message = generation.message if isinstance(generation, ChatGeneration) else None
        with self._lock:
            if run_id not in self._calls:
                return
            converted = to_message(message) if message is not None else session.Message("assistant", [])
            self._end_call(run_id, converted, None)
            self._record("message_end", execution=self._model, message=converted)

    async def on_llm_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        with self._lock:
            if run_id in self._calls:
                self._end_call(run_id, None, error)

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
        with self._lock:
            execution = session.Execution(
                f"tool-{self._turn}-{call_id}",
                "tool",
                parent_id=self._model.id if self._model else "",
                turn_index=self._turn,
            )
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

    async def on_tool_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        with self._lock:
            if run_id in self._calls:
                self._end_call(run_id, None, error)

    # -- writing (with self._lock held)

    def _record(self, kind: str, **fields: Any) -> None:
        self.run.record(session.Event(kind, **fields))

    def _close_turn(self, sent: Sequence[BaseMessage]) -> bool:
        """Commit what *sent* adds and end the turn before; whether there was one."""
        if self._seen < 0:  # the first call: what came from the checkpoint is history
            self._seen = self._history
            self._turn = sum(isinstance(message, AIMessage) for message in sent[: self._history])
        self._commit(sent)
        ended = self._model is not None
        self._end_turn()
        return ended

    def _end_call(self, run_id: UUID, result: Any, error: BaseException | None) -> None:
        execution = self._calls.pop(run_id)
        if execution.kind == "model":
            self._failed, self._last_error = error is not None, error
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
            result=None if result is None else to_json(content),
            details=to_json(result.artifact)
            if isinstance(result, ToolMessage) and result.artifact is not None
            else None,
            is_error=error is not None,
            error=error,
        )

    def _commit(self, messages: Sequence[BaseMessage]) -> None:
        """``message_end`` for the input messages not yet written; a model's own messages were
        written when its response came (``on_llm_end``)."""
        for message in messages[max(self._seen, 0) :]:
            if isinstance(message, AIMessage):
                continue
            call_id = message.tool_call_id if isinstance(message, ToolMessage) else ""
            self._record("message_end", execution=self._finished.get(call_id), message=to_message(message))
        self._seen = len(messages)

    def _end_turn(self) -> None:
        if self._turn and self._model is not None:
            self._record("turn_end", turn_index=self._turn)
            self._model, self._failed = None, False

    def _summary(self, reason: str) -> session.RunSummary:
        return session.RunSummary(self._turn, self._tool_calls, self._tool_errors, reason)
