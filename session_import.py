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
"""Sessions other tools recorded, brought in as session files: Claude Code transcripts, Codex
CLI rollouts, Gemini CLI session files and claude-trace logs.

    import session_import

    report = session_import.import_session("~/.claude/projects/p/5f0c….jsonl", "copy.jsonl")
    print(report.lines, report.not_understood)

``python -m session import`` runs what is here when this file lies beside ``session.py``.
docs/import.md has each format's mapping and what it cannot know.  Standard library only.
"""

from __future__ import annotations

import bisect
import codecs
import collections
import contextlib
import hashlib
import json
import os
import re
import sys
import urllib.parse
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Callable, Dict, Iterator, List, NamedTuple, Optional, Set, Tuple, Union

import session
from session import CallConfig, Event, Execution, Message, ModelRequest, RunSummary

# isort: split
# The command line and the writer's ways, as session_export takes them:
from session import (
    _IMPORT_COMMANDS,
    _MAX_LINE_BYTES,
    _CodecFault,
    _Command,
    _new_id,
    _parse_rfc3339,
    _print_error,
    _print_text,
    _sync_directory,
)

__all__ = ["FORMATS", "ImportReport", "Problem", "UnknownFormatError", "import_session"]

__version__ = "0.1.0"

FORMATS = ("claude-code", "codex", "gemini-cli", "claude-trace")
"""The formats ``import_session`` reads."""

# the records an import adds of its own: its provenance, and what it could not map
for _kind in ("import", "import_note"):
    session.register_event_type(_kind)

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)  # the time of a source that gives none
_UNKNOWN = ["system prompt", "tool definitions", "parameters"]  # what a transcript never holds
_AGENT_TOOLS = ("Task", "Agent")  # Claude Code's tools that run a sub-agent


# ---------------------------------------------------------------------------- errors and results


class UnknownFormatError(session.SessionError, ValueError):
    """A source that is none of the formats this module reads (or holds no session)."""


class Problem(NamedTuple):
    """A source line that was not understood: its *file* (``""`` for the source itself, else
    the sub-agent file's name), 1-based *line* number and the *reason*."""

    file: str
    line: int
    reason: str

    def text(self) -> str:
        return f"{self.file} line {self.line}" if self.file else f"line {self.line}"


@dataclass(frozen=True)
class ImportReport:
    """What ``import_session`` did: the *source* and its *format*, the *output* written, the
    source *lines* read (sub-agent files included), the *not_understood* lines (each a
    ``Problem``), the lines deliberately *unmapped* per type, and *tail_bytes*, the length of
    an unfinished last line that was left out."""

    source: str
    format: str
    output: str
    lines: int
    not_understood: Tuple[Problem, ...]
    unmapped: Dict[str, int]
    tail_bytes: int

    def text(self) -> str:
        """The report line: ``imported 1,204 lines, 3 not understood: line 77, …``."""
        out = (
            f"{self.source}: imported {self.lines:,} {'line' if self.lines == 1 else 'lines'} ({self.format})"
        )
        if self.not_understood:
            named = ", ".join(problem.text() for problem in self.not_understood[:10])
            more = " …" if len(self.not_understood) > 10 else ""
            out += f", {len(self.not_understood)} not understood: {named}{more}"
        if self.tail_bytes:
            out += f", ignored {self.tail_bytes}-byte unfinished last line"
        return f"{out} -> {self.output}"


# ---------------------------------------------------------------------------- reading sources


class _Entry(NamedTuple):
    """One understood source line: its file's label, number, object and time."""

    file: str
    number: int
    obj: Dict[str, Any]
    time: datetime


@dataclass
class _Lines:
    """A source file read whole: its understood lines, and what was not."""

    path: str
    label: str
    size: int = 0
    entries: List[_Entry] = field(default_factory=list)
    problems: List[Problem] = field(default_factory=list)
    tail_bytes: int = 0
    blank: int = 0


class _Tally:
    """What an import read: lines, the unmapped ones per type, the ones not understood."""

    def __init__(self) -> None:
        self.lines = 0
        self.unmapped: Dict[str, int] = {}
        self.problems: List[Problem] = []
        self.files: Dict[str, int] = {}

    def add(self, lines: _Lines) -> None:
        self.lines += len(lines.entries) + len(lines.problems) + lines.blank
        self.problems += lines.problems
        self.files[lines.label or os.path.basename(lines.path)] = lines.size
        if lines.blank:
            self.skip("(blank)", lines.blank)

    def skip(self, kind: str, count: int = 1) -> None:
        self.unmapped[kind] = self.unmapped.get(kind, 0) + count


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not strict JSON")


def _finite(text: str) -> float:
    number = float(text)
    if number in (float("inf"), float("-inf")):
        raise ValueError(f"{text[:20]} is beyond a double")
    return number


_DECODER = json.JSONDecoder(parse_constant=_refuse_constant, parse_float=_finite)  # built once


_MAX_DEPTH = 200  # levels of arrays and objects a line may nest: the writer encodes that on any stack


def _deeper_than(value: Any, limit: int) -> bool:
    """Whether *value* nests arrays and objects more than *limit* levels deep (not recursing)."""
    stack = [(value, 1)] if type(value) in (dict, list) else []
    while stack:
        item, depth = stack.pop()
        if depth > limit:
            return True
        children = item.values() if type(item) is dict else item
        stack += [(child, depth + 1) for child in children if type(child) in (dict, list)]
    return False


def _brackets_over(raw: bytes, limit: int) -> bool:
    """Whether *raw* holds more than *limit* opening brackets (``[`` and ``{``): counted with
    ``find``, which skips the text between them at memory speed, and only up to *limit* + 1
    (``count`` reads every byte, a quarter of what parsing a line of long strings costs)."""
    found = 0
    for bracket in (b"[", b"{"):
        at = raw.find(bracket)
        while at >= 0:
            found += 1
            if found > limit:
                return True
            at = raw.find(bracket, at + 1)
    return False


def _parsed(raw: bytes) -> Any:
    """The JSON value of *raw* (UTF-8, a byte order mark at its start skipped); ``ValueError``
    when it is none, or nests deeper than the writer can write."""
    try:
        value = _DECODER.decode((raw[3:] if raw.startswith(codecs.BOM_UTF8) else raw).decode())
    except RecursionError:
        raise ValueError("nested too deeply") from None
    if _brackets_over(raw, _MAX_DEPTH) and _deeper_than(value, _MAX_DEPTH):
        raise ValueError("nested too deeply")
    return value


def _time(text: str) -> Optional[datetime]:
    """The RFC 3339 time *text*, ``None`` when it is none (or beyond years 1 to 9999 in UTC)."""
    try:
        time = _parse_rfc3339(text)
        time.astimezone(timezone.utc)  # the writer's
    except (_CodecFault, ValueError, OverflowError):
        return None
    return time


def _timestamp(obj: Dict[str, Any], key: str) -> Optional[datetime]:
    text = obj.get(key)
    return _time(text) if type(text) is str else None


def _read_lines(path: str, label: str, max_line_bytes: int, time_key: str) -> _Lines:
    """*path* read line by line: each line an object, its time from *time_key* (else the
    previous line's).  A last line with no newline that does not parse is the torn tail."""
    lines = _Lines(path, label)
    previous: Optional[datetime] = None
    with open(path, "rb") as file:
        for number, raw in enumerate(_raw_lines(file, max_line_bytes), 1):
            if raw is _TOO_LONG:
                lines.problems.append(Problem(label, number, "longer than --max-line-bytes"))
                continue
            if raw.isspace():  # not strip(), which would copy the line
                lines.blank += 1
                continue
            try:
                obj = _parsed(raw)
            except ValueError as exc:
                if not raw.endswith(b"\n"):
                    lines.tail_bytes = len(raw)
                    break
                reason = (
                    f"{exc.msg} (column {exc.colno})" if isinstance(exc, json.JSONDecodeError) else str(exc)
                )
                lines.problems.append(Problem(label, number, f"not JSON: {reason}"[:200]))
                continue
            if type(obj) is not dict:
                lines.problems.append(Problem(label, number, "not a JSON object"))
                continue
            previous = _timestamp(obj, time_key) or previous
            lines.entries.append(_Entry(label, number, obj, previous or _EPOCH))
        lines.size = file.tell()  # the bytes read, a line over the limit whole
    first = next((entry.time for entry in lines.entries if entry.time is not _EPOCH), None)
    if first is not None:  # lines before the first timestamp take it
        lines.entries = [e._replace(time=first) if e.time is _EPOCH else e for e in lines.entries]
    return lines


# stands for a line over the limit (identity-compared): never a line readline returns, which ends
# at its first newline (b"\n" would be: CPython keeps one object for each one-byte bytes)
_TOO_LONG = b"\n\n"


def _raw_lines(file: Any, limit: int) -> Iterator[bytes]:
    while True:
        raw = file.readline(limit + 1)
        if not raw:
            return
        if len(raw) > limit and not raw.endswith(b"\n"):
            while raw and not raw.endswith(b"\n"):  # the rest of the long line
                raw = file.readline(1 << 20)
            yield _TOO_LONG
        else:
            yield raw


_CODEX_LINES = ("session_meta", "response_item", "event_msg", "turn_context", "compacted")
_CODEX_LEGACY_META = {"id", "timestamp", "instructions", "git"}  # the first line, mid-2025


def _is_codex(obj: Dict[str, Any]) -> bool:
    """Whether *obj* is a Codex rollout line: ``{timestamp, type, payload}``, or the first line
    of a rollout written before that envelope (``{id, timestamp, instructions, git}``)."""
    if obj.get("type") in _CODEX_LINES and type(obj.get("payload")) is dict:
        return True
    return type(obj.get("id")) is str and "timestamp" in obj and set(obj) <= _CODEX_LEGACY_META


def _is_gemini(obj: Dict[str, Any]) -> bool:
    """Whether *obj* is a line of a Gemini CLI session file: its metadata (``sessionId`` and
    ``projectHash``), a ``$set`` or ``$rewindTo``, or a message record (an ``id``, a type)."""
    return (
        ("sessionId" in obj and "projectHash" in obj)
        or "$set" in obj
        or "$rewindTo" in obj
        or (
            "id" in obj
            and obj.get("type") in ("user", "gemini", "info", "warning", "error")
            and "uuid" not in obj
        )
    )


def _detect(path: str) -> Optional[str]:
    """The format of *path*, from its first lines that parse: ``None`` when none fits."""
    with open(path, "rb") as file:
        lines = _raw_lines(file, _MAX_LINE_BYTES)
        for raw in lines:
            if raw.strip() == b"{":  # one JSON document: an older Gemini CLI's session-*.json
                return "gemini-cli" if re.match(rb'\s*"sessionId"', next(lines, b"")) else None
            try:
                obj = _parsed(raw)
            except ValueError:
                continue
            if type(obj) is not dict:
                return None
            if "request" in obj and "logged_at" in obj:
                return "claude-trace"
            if _is_gemini(obj):
                return "gemini-cli"
            if "sessionId" in obj or ("uuid" in obj and "parentUuid" in obj):
                return "claude-code"
            if _is_codex(obj):
                return "codex"
            if obj.get("type") not in ("summary", "file-history-snapshot", "queue-operation", "ai-title"):
                return None
    return None


# ---------------------------------------------------------------------------- writing


def _hex_id(*parts: str) -> str:
    """A session or run id derived from the source's own ids: the same source, the same id."""
    return hashlib.sha256("\x00".join(parts).encode("utf-8", "surrogatepass")).hexdigest()[:32]


def _session_id(source_id: str) -> str:
    try:
        return uuid.UUID(source_id).hex  # a Claude Code session's id, as this format spells ids
    except ValueError:
        return _hex_id("session", source_id)


class _Writer:
    """The runs an import writes, one at a time, with the current one's turn and tool counts."""

    def __init__(self, out: session.Session, source_id: str) -> None:
        self.out = out
        self.source_id = source_id
        self.runs = 0
        self.run: Optional[session.Run] = None
        # the current run's: its turns, its tool calls and their ids, its latest record's time
        self.turn = 0
        self.turn_open = False
        self.tool_calls = 0
        self.tool_errors = 0
        self.tool_ids: Set[str] = set()
        self.latest = _EPOCH

    def begin(self, time: datetime) -> None:
        """The next run, its ``agent_start`` at *time*, its counts from zero."""
        self.runs += 1
        self.run = self.out.begin_run(run_id=_hex_id("run", self.source_id, str(self.runs)), time=time)
        self.turn = 0
        self.turn_open = False
        self.tool_calls = 0
        self.tool_errors = 0
        self.tool_ids = set()
        self.latest = time
        self.record("agent_start", time)

    def record(self, kind: str, time: datetime, **fields: Any) -> None:
        assert self.run is not None
        self.latest = max(self.latest, time)
        self.run.record(Event(kind, timestamp=time, **fields))

    def new_tool(self, execution_id: str, tally: _Tally, entry: _Entry) -> bool:
        """Whether *execution_id* is no tool call's of this run yet (then it is one, counted);
        else the call of *entry* that uses it again is not understood."""
        if execution_id in self.tool_ids:
            problem = f"a tool call id used before ({execution_id[:60]})"
            tally.problems.append(Problem(entry.file, entry.number, problem))
            return False
        self.tool_ids.add(execution_id)
        self.tool_calls += 1
        return True

    def tool_start(self, time: datetime, execution: Execution, tool_id: str, name: str, args: Any) -> None:
        """The start of the tool call *execution*."""
        self.record("tool_exec_start", time, execution=execution, tool_id=tool_id, tool=name, args=args)

    def tool_end(
        self, time: datetime, execution: Execution, tool_id: str, name: str, result: Any, **more: Any
    ) -> None:
        """The end of the tool call *execution*, its failures counted (*more*: ``is_error``,
        ``details``)."""
        self.tool_errors += bool(more.get("is_error"))
        self.record(
            "tool_exec_end", time, execution=execution, tool_id=tool_id, tool=name, result=result, **more
        )

    def next_turn(self, time: datetime) -> None:
        self.end_turn(time)
        self.turn += 1
        self.turn_open = True
        self.record("turn_start", time, turn_index=self.turn)

    def end_turn(self, time: datetime) -> None:
        if self.turn_open:
            self.record("turn_end", time, turn_index=self.turn)
            self.turn_open = False

    def finish(self, time: datetime, end_reason: str = "") -> None:
        """The current run ended at *time*, or at its latest record if that is later (a
        sub-agent's file can end after its session's); *end_reason*: why, where the source says."""
        assert self.run is not None
        time = max(time, self.latest)
        self.end_turn(time)
        summary = RunSummary(self.turn, self.tool_calls, self.tool_errors, end_reason)
        self.record("agent_end", time, summary=summary)
        self.run.close(time=time)


def _write(
    temporary: str,
    source_id: str,
    start: datetime,
    end: datetime,
    provenance: Dict[str, Any],
    body: Callable[[_Writer], None],
) -> None:
    """A whole session at *temporary*: a run with its provenance, what *body* records (which
    may end it and begin others), the last run ended at *end*."""
    with session.create(temporary, session_id=_session_id(source_id), time=start) as out:
        writer = _Writer(out, source_id)
        writer.begin(start)
        writer.record("import", start, details=provenance)
        body(writer)
        writer.finish(end)


def _publish(temporary: str, output: str, replace: bool) -> None:
    """*temporary*, complete and synced, given the name *output*: replacing a file there
    only when *replace* (a grown source's archive), else ``FileExistsError``."""
    if replace:
        os.replace(temporary, output)
    elif os.name == "nt":
        os.rename(temporary, output)  # Windows' rename never replaces a file
    else:
        os.link(temporary, output)
        os.unlink(temporary)
    _sync_directory(output)


# ---------------------------------------------------------------------------- Anthropic content


_STOP_REASONS = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "max_tokens": "length",
    "tool_use": "toolUse",
    "refusal": "safety",
}
_TOKENS = (  # agentgo's usage key <- the Anthropic API's
    ("input", "input_tokens"),
    ("output", "output_tokens"),
    ("cache_read", "cache_read_input_tokens"),
    ("cache_write", "cache_creation_input_tokens"),
)


def _usage(raw: Any, model: str) -> Optional[Dict[str, Any]]:
    """The Anthropic usage *raw* as agentgo's usage, its counts as reported; ``total_tokens``
    is their sum (the input counts exclude the cached ones, as the API reports them)."""
    if type(raw) is not dict:
        return None
    usage: Dict[str, Any] = {}
    for key, source in _TOKENS:
        value = raw.get(source)
        if type(value) is int and 0 <= value < 1 << 62:
            usage[key] = value
    if not usage:
        return None
    usage["total_tokens"] = sum(usage.values())
    usage["provider"] = "anthropic"
    if model:
        usage["model"] = model
    return usage


def _block(raw: Any) -> Optional[Dict[str, Any]]:
    """The Anthropic content block *raw* as an agentgo block; ``None`` when it has none."""
    if type(raw) is not dict:
        return None
    kind = raw.get("type")
    try:
        if kind == "text" and type(raw.get("text")) is str:
            return dict(session.text_block(raw["text"]))
        if kind == "thinking" and type(raw.get("thinking")) is str:
            return dict(session.thinking_block(raw["thinking"]))
        if kind == "tool_use":
            return dict(session.tool_call_block(raw.get("id"), raw.get("name"), raw.get("input")))  # type: ignore[arg-type]
        if kind == "image" and type(raw.get("source")) is dict:
            source = raw["source"]
            if source.get("type") == "url":
                return dict(session.image_block(url=source.get("url")))
            return dict(session.image_block(data=source.get("data"), mime_type=source.get("media_type")))
    except (TypeError, ValueError, RecursionError):
        return None
    return None


def _blocks(content: Any) -> Tuple[List[Any], List[Any]]:
    """The agentgo blocks of an Anthropic *content* (a string or a list of blocks), and the
    blocks agentgo has no form for (documents, redacted thinking, server tools…), as they were."""
    if type(content) is str:
        return [session.text_block(content)], []
    blocks: List[Any] = []
    kept: List[Any] = []
    for raw in content if type(content) is list else []:
        block = _block(raw)
        if block is not None:
            blocks.append(block)
        else:
            kept.append(raw)
    return blocks, kept


def _metadata(kept: List[Any], **more: Any) -> Optional[Dict[str, Any]]:
    metadata = {key: value for key, value in more.items() if value}
    if kept:
        metadata["unmapped_blocks"] = kept
    return metadata or None


def _assistant(raw: Dict[str, Any], content: List[Any], time: datetime) -> Message:
    """The assistant message of the Anthropic response *raw*, holding *content*."""
    model = raw.get("model") if type(raw.get("model")) is str else ""
    blocks, kept = _blocks(content)
    stop = raw.get("stop_reason")
    stop_reason = _STOP_REASONS.get(stop, "") if type(stop) is str else ""
    other_stop = stop if type(stop) is str and not stop_reason else ""
    metadata = _metadata(kept, id=raw.get("id") if type(raw.get("id")) is str else "", stop_reason=other_stop)
    return Message("assistant", blocks, stop_reason, _usage(raw.get("usage"), model or ""), metadata, time)  # type: ignore[arg-type]


def _tool_message(raw: Dict[str, Any], time: datetime) -> Message:
    """The tool-role message of the Anthropic ``tool_result`` block *raw*."""
    blocks, kept = _blocks(raw.get("content", ""))
    message = session.tool_result(
        raw["tool_use_id"], blocks, is_error=raw.get("is_error") is True, timestamp=time
    )
    if kept:
        message.metadata = {**(message.metadata or {}), "unmapped_blocks": kept}
    return message


def _is_tool_result(raw: Any) -> bool:
    return (
        type(raw) is dict
        and raw.get("type") == "tool_result"
        and type(raw.get("tool_use_id")) is str
        and bool(raw["tool_use_id"])
    )


# ---------------------------------------------------------------------------- Claude Code


_CC_MAPPED = ("user", "assistant")  # the line types that are the conversation


def _cc_kind(obj: Dict[str, Any]) -> str:
    """A Claude Code line's type, with a system line's subtype: how lines are counted."""
    kind = obj.get("type")
    text = kind if type(kind) is str else "(no type)"
    subtype = obj.get("subtype")
    return f"{text}:{subtype}" if text == "system" and type(subtype) is str else text


def _cc_problem(obj: Dict[str, Any]) -> str:
    """Why a conversation line cannot be read, or ``""``."""
    message = obj.get("message")
    if type(message) is not dict:
        return f"a {obj.get('type')} line without a message object"
    content = message.get("content")
    if type(content) is not str and type(content) is not list:
        return "a message whose content is neither text nor a list of blocks"
    return ""


def _parent(entry: _Entry) -> Any:
    """The line *entry* follows: its ``parentUuid``, across a compaction its
    ``logicalParentUuid``."""
    parent = entry.obj.get("parentUuid")
    if parent is None and entry.obj.get("subtype") == "compact_boundary":
        parent = entry.obj.get("logicalParentUuid")
    return parent if type(parent) is str else None


def _is_prompt(obj: Dict[str, Any]) -> bool:
    """Whether *obj* is a line the user typed: a user line that holds no tool result (one
    that does answers calls, with a note such as an interrupt's), nor a compaction's summary."""
    message = obj.get("message")
    content = message.get("content") if type(message) is dict else None
    if obj.get("type") != "user" or obj.get("isCompactSummary") is True:
        return False
    return type(content) is str or (type(content) is list and not any(map(_is_tool_result, content)))


def _is_replay(entry: _Entry, followed: Dict[str, datetime]) -> bool:
    """Whether *entry* is a typed prompt with the time of the line that first followed the
    line it follows."""
    parent = _parent(entry)
    return parent in followed and followed[parent] == entry.time and _is_prompt(entry.obj)


class _Branch(NamedTuple):
    """The lines of one branch of a conversation, in file order, and the line the user went
    back to for it (``None`` for the first branch)."""

    fork: Optional[_Entry]
    lines: List[_Entry]


def _branches(entries: List[_Entry], rewinds: bool) -> Tuple[List[_Branch], int]:
    """*entries* by branch, and the number of replayed lines left out.

    A line is on the branch of the line it follows (``parentUuid``, across a compaction
    ``logicalParentUuid``; a line that follows none, on the latest).  Where *rewinds*, a typed
    prompt that follows a line another conversation line already followed starts a branch (a
    rewind), unless it has that line's time: then it is a replay Claude Code wrote around a
    compaction, left out with the lines that follow it.  Claude Code writes other forks too,
    as artifacts of parallel tool calls (a tool result and the response's next block both
    following one line): they stay on one branch, in file order."""
    branches = [_Branch(None, [])]
    by_uuid: Dict[str, Tuple[_Entry, int]] = {}
    followed: Dict[str, datetime] = {}  # a line a conversation line follows: that line's time
    replays: Set[str] = set()  # the uuids of the replayed lines
    replayed = 0
    for entry in entries:
        parent, key = _parent(entry), entry.obj.get("uuid")
        known = by_uuid.get(parent) if type(parent) is str else None
        if parent in replays or (rewinds and known is not None and _is_replay(entry, followed)):
            replays.update([key] if type(key) is str else [])
            replayed += 1
            continue
        index = known[1] if known is not None else len(branches) - 1
        if rewinds and known is not None and parent in followed and _is_prompt(entry.obj):
            branches.append(_Branch(known[0], []))
            index = len(branches) - 1
        branches[index].lines.append(entry)
        if type(key) is str:
            by_uuid[key] = (entry, index)
        if known is not None and entry.obj.get("type") in _CC_MAPPED:
            followed.setdefault(parent, entry.time)
    return [branch for branch in branches if branch.lines], replayed


def _message_id(entry: _Entry) -> str:
    message = entry.obj.get("message")
    key = message.get("id") if type(message) is dict else None
    return key if type(key) is str and key else f"line {entry.number}"


def _steps(chain: List[_Entry]) -> List[List[_Entry]]:
    """*chain* with the lines of one API response (one per content block, sharing
    ``message.id``) grouped at the first one's place; every other line a step alone."""
    steps: List[List[_Entry]] = []
    responses: Dict[str, List[_Entry]] = {}
    for entry in chain:
        obj = entry.obj
        if (
            obj.get("type") == "assistant"
            and obj.get("isApiErrorMessage") is not True
            and not _cc_problem(obj)
        ):
            key = _message_id(entry)
            if key in responses:
                responses[key].append(entry)
                continue
            responses[key] = [entry]
            steps.append(responses[key])
        else:
            steps.append([entry])
    return steps


def _prompt(obj: Dict[str, Any]) -> Optional[str]:
    """The text of a user line (``None`` for another line)."""
    message = obj.get("message")
    content = message.get("content") if type(message) is dict and obj.get("type") == "user" else None
    if type(content) is list:
        return "".join(b["text"] for b in content if type(b) is dict and type(b.get("text")) is str)
    return content if type(content) is str else None


_NO_LINE = sys.maxsize  # after every line: the end of a chain taken


class _Begun:
    """Chains of lines that began with one prompt (their *indices* in *chains*), in the order
    they began, each taken once: the first not taken that begins after a line and ends
    before another, found in time logarithmic in their number by a tree of the least last
    line under each node (a chain taken ends at ``_NO_LINE``), its leaves the chains."""

    def __init__(self, indices: List[int], chains: List[List[_Entry]]) -> None:
        self.indices = indices
        self.starts = [chains[index][0].number for index in indices]
        self.size = 1 << (len(indices) - 1).bit_length()
        ends = [chains[index][-1].number for index in indices]
        self.least = [_NO_LINE] * self.size + ends + [_NO_LINE] * (self.size - len(ends))
        for node in reversed(range(1, self.size)):
            self.least[node] = min(self.least[2 * node], self.least[2 * node + 1])

    def take(self, after: int, before: int) -> Optional[int]:
        """The index of the first chain not taken that begins after line *after* and ends
        before line *before*, now taken (``None``: there is none)."""
        leaf = self.first(1, 0, self.size, bisect.bisect_right(self.starts, after), before)
        if leaf is None:
            return None
        node = self.size + leaf
        self.least[node] = _NO_LINE
        while node > 1:
            node //= 2
            self.least[node] = min(self.least[2 * node], self.least[2 * node + 1])
        return self.indices[leaf]

    def first(self, node: int, low: int, high: int, start: int, before: int) -> Optional[int]:
        """The first leaf from *start* on under *node* (the leaves *low* to *high*) whose
        chain ends before line *before*: down the first subtree that has one."""
        if high <= start or self.least[node] >= before:
            return None
        if high - low == 1:
            return low
        middle = (low + high) // 2
        found = self.first(2 * node, low, middle, start, before)
        return found if found is not None else self.first(2 * node + 1, middle, high, start, before)


@dataclass
class _SubAgents:
    """A session's sub-agent files (``<session>/subagents/agent-<id>.jsonl``), by the id of the
    tool call that ran each (its ``.meta.json``'s ``toolUseId``) and by agent id; and the
    sidechains older versions wrote in the session's file instead, each a chain of lines."""

    folder: str
    by_tool: Dict[str, str] = field(default_factory=dict)
    used: List[str] = field(default_factory=list)
    chains: List[List[_Entry]] = field(default_factory=list)
    chained: Set[int] = field(default_factory=set)  # the chains a tool call ran
    begun: Dict[Tuple[str, str], _Begun] = field(default_factory=dict)  # by file and first prompt

    @classmethod
    def of(cls, source: str) -> _SubAgents:
        folder = os.path.join(os.path.splitext(source)[0], "subagents")
        found = cls(folder)
        with contextlib.suppress(OSError):
            for name in sorted(os.listdir(folder)):
                if name.startswith("agent-") and name.endswith(".meta.json"):
                    found._meta(name)
        return found

    def _meta(self, name: str) -> None:
        try:
            with open(os.path.join(self.folder, name), "rb") as file:
                meta = _parsed(file.read())
        except (OSError, ValueError):
            return
        tool = meta.get("toolUseId") if type(meta) is dict else None
        if type(tool) is str:
            self.by_tool[tool] = name[: -len(".meta.json")] + ".jsonl"

    def file(self, tool_id: str, agent_id: Any) -> Optional[str]:
        name = self.by_tool.get(tool_id)
        if name is None and type(agent_id) is str and re.fullmatch(r"[A-Za-z0-9_-]+", agent_id):
            name = f"agent-{agent_id}.jsonl"
        if name is None or name in self.used or not os.path.isfile(os.path.join(self.folder, name)):
            return None
        self.used.append(name)
        return name

    def files(self) -> List[str]:
        with contextlib.suppress(OSError):
            return sorted(
                n for n in os.listdir(self.folder) if n.startswith("agent-") and n.endswith(".jsonl")
            )
        return []

    def hold(self, entries: List[_Entry]) -> List[_Entry]:
        """*entries* but their sidechain lines (``isSidechain``), kept as chains: a line on the
        chain of the line it follows, a line that follows none of them beginning a chain."""
        rest: List[_Entry] = []
        by_uuid: Dict[str, List[_Entry]] = {}
        for entry in entries:
            if entry.obj.get("isSidechain") is not True:
                rest.append(entry)
                continue
            parent = _parent(entry)
            chain = by_uuid.get(parent) if parent is not None else None
            if chain is None:
                chain = []
                self.chains.append(chain)
            chain.append(entry)
            key = entry.obj.get("uuid")
            if type(key) is str:
                by_uuid[key] = chain
        self.index()
        return rest

    def index(self) -> None:
        """The chains that begin with a prompt (a user line's text), by their file and prompt."""
        begun: Dict[Tuple[str, str], List[int]] = {}
        for index, chain in enumerate(self.chains):
            prompt = _prompt(chain[0].obj)
            if prompt is not None:
                begun.setdefault((chain[0].file, prompt), []).append(index)
        self.begun = {key: _Begun(indices, self.chains) for key, indices in begun.items()}

    def sidechain(self, prompt: Any, called: _Entry, ended: _Entry) -> List[_Entry]:
        """The first chain no call ran yet that began with *prompt* (an agent tool call's),
        after the first line *called* of the response that made the call, and ended before
        the line *ended* of its result (a chain that goes on is another call's)."""
        begun = self.begun.get((called.file, prompt)) if type(prompt) is str else None
        index = begun.take(called.number, ended.number) if begun is not None else None
        if index is None:
            return []
        self.chained.add(index)
        return self.chains[index]

    def unran(self) -> Iterator[Tuple[str, List[_Entry]]]:
        """The chains no tool call ran, each with the name its calls take: its first line's uuid."""
        for index, chain in enumerate(self.chains):
            if index not in self.chained:
                key = chain[0].obj.get("uuid")
                yield (key if type(key) is str else f"line-{chain[0].number}"), chain


class _Conversation:
    """One Claude Code conversation (the session's, or a sub-agent's nested under the tool call
    that ran it, or under no call, its ids beginning with *prefix*) written as model calls, tool
    calls and messages."""

    def __init__(
        self,
        writer: _Writer,
        tally: _Tally,
        agents: _SubAgents,
        parent: Optional[Execution],
        limit: int,
        prefix: str = "",
    ) -> None:
        self.writer = writer
        self.tally = tally
        self.agents = agents
        self.parent = parent
        self.prefix = f"{parent.id}/" if parent is not None else prefix
        self.nested = bool(self.prefix)  # a sub-agent's: no turns, no messages of the conversation
        self.history: List[Message] = []
        self.calls = 0
        self.compactions = 0
        self.failures: List[_Entry] = []  # API errors before the call they were retries of
        self.tools: Dict[str, Tuple[Execution, str]] = {}
        self.tasks: Dict[str, Tuple[Any, _Entry]] = {}  # the agent tool calls' input and line
        self.boundary: Optional[_Entry] = None  # the compact_boundary its summary follows
        self.limit = limit  # the longest line of a sub-agent file
        self.marks: Dict[int, Tuple[List[Message], int]] = {}  # the context after each line

    def execution(self, kind: str, name: str, attempt: int = 1) -> Execution:
        parent_id = self.parent.id if self.parent is not None else ""
        turn = self.writer.turn if self.parent is None else self.parent.turn_index
        return Execution(self.prefix + name, kind, parent_id, turn, attempt)

    def write(self, lines: List[_Entry]) -> None:
        """The conversation of *lines*: each branch the user rewound from a run of its own
        (in the session's file, not a sub-agent's), then the branch it ended on.  The
        session's sidechains are kept for the tool calls that ran them."""
        entries = self.unique(lines)
        if not self.nested:
            entries = self.agents.hold(entries)
        ended = _EPOCH
        branches, replays = _branches(entries, not self.nested)
        if replays:
            self.tally.skip("replayed line (a prompt again at its time, and what follows it)", replays)
        for number, branch in enumerate(branches):
            if number:
                self.rewind(branch.fork, ended, branch.lines[0].time)
            self.branch(branch.lines)
            ended = branch.lines[-1].time

    def unique(self, entries: List[_Entry]) -> List[_Entry]:
        """*entries* but those with the ``uuid`` of a line before them: a copy of that line is
        counted, another line named (neither is read twice into the conversation)."""
        first: Dict[str, _Entry] = {}
        kept: List[_Entry] = []
        for entry in entries:
            key = entry.obj.get("uuid")
            earlier = first.get(key) if type(key) is str else None
            if earlier is None:
                kept.append(entry)
                if type(key) is str:
                    first[key] = entry
            elif earlier.obj == entry.obj:
                self.tally.skip("copy of an earlier line")
            else:
                problem = f"the uuid of line {earlier.number} again"
                self.tally.problems.append(Problem(entry.file, entry.number, problem))
        return kept

    def branch(self, lines: List[_Entry]) -> None:
        """The *lines* of a branch, step by step, each API error (a retry) before the call
        that followed it."""
        for step in _steps(lines):
            self.step(step)
            for entry in step:
                self.marks[entry.number] = (self.history, len(self.history))
        if self.failures:  # retries no response followed: the last one ended the call
            self.failed_call(self.failures.pop())

    def rewind(self, fork: Optional[_Entry], ended: datetime, time: datetime) -> None:
        """A branch the user went back to *fork* for (``None``: the start) at *time*: the
        run so far ended, rewound, at *ended*, and a new one begun whose context is the
        conversation up to *fork*."""
        self.writer.finish(ended, "rewound")
        self.writer.begin(time)
        history, length = self.marks.get(fork.number, ([], 0)) if fork is not None else ([], 0)
        self.history = history[:length]
        self.tools = {}
        self.boundary = None

    def step(self, step: List[_Entry]) -> None:
        obj = step[0].obj
        kind = _cc_kind(obj)
        problem = _cc_problem(obj) if kind in _CC_MAPPED else ""
        if problem:
            self.tally.problems.append(Problem(step[0].file, step[0].number, problem))
        elif kind == "assistant" and obj.get("isApiErrorMessage") is True:
            self.failed_call(step[0])
        elif kind == "assistant":
            self.model_call(step)
        elif kind == "user":
            self.user(step[0])
        elif kind == "system:api_error":
            self.failures.append(step[0])
        elif kind == "system:compact_boundary":
            self.compaction(step[0])
        else:
            self.tally.skip(kind)

    def request(self, model: str) -> ModelRequest:
        extra = {"model": model, "rebuilt": "from the Claude Code transcript", "unknown": _UNKNOWN}
        return ModelRequest(list(self.history), (), CallConfig(extra=extra))

    def attempts(self, name: str, model: str) -> int:
        """The failed attempts (API errors Claude Code retried) of the call *name*; their number."""
        for attempt, entry in enumerate(self.failures, 1):
            execution = self.execution("model", name, attempt)
            self.writer.record("model_exec_start", entry.time, execution=execution)
            self.writer.record("model_request", entry.time, execution=execution, request=self.request(model))
            self.writer.record("model_exec_end", entry.time, execution=execution, error=_api_error(entry.obj))
        count = len(self.failures)
        self.failures = []
        return count

    def model_call(self, lines: List[_Entry]) -> None:
        """One API response, written one line per content block: one call, the last line's
        usage and stop reason (they grow as the response streams)."""
        first, last = lines[0], lines[-1]
        raw = last.obj["message"]
        model = raw.get("model") if type(raw.get("model")) is str else ""
        content: List[Any] = []
        for entry in lines:
            blocks = entry.obj["message"].get("content")
            content += (
                [session.text_block(blocks)]
                if type(blocks) is str
                else blocks
                if type(blocks) is list
                else []
            )
        message = _assistant(raw, content, last.time)
        self.calls += 1
        name = f"model-{self.calls}"
        execution = self.execution("model", name, self.attempts(name, model or "") + 1)
        self.writer.record("model_exec_start", first.time, execution=execution)
        self.writer.record(
            "model_request", first.time, execution=execution, request=self.request(model or "")
        )
        self.writer.record("model_exec_end", last.time, execution=execution, message=message)
        if not self.nested:
            self.writer.record("message_end", last.time, execution=execution, message=message)
        self.history.append(message)
        for block in message.content or []:
            if block["type"] == "toolCall":
                self.tool_start(block["tool_call"], last, first)

    def failed_call(self, entry: _Entry) -> None:
        """The API error *entry* that ended a call (Claude Code's synthetic error message, or
        the last of retries no response followed): the call's last, failed attempt."""
        self.calls += 1
        name = f"model-{self.calls}"
        execution = self.execution("model", name, self.attempts(name, "") + 1)
        self.writer.record("model_exec_start", entry.time, execution=execution)
        self.writer.record("model_request", entry.time, execution=execution, request=self.request(""))
        self.writer.record("model_exec_end", entry.time, execution=execution, error=_api_error(entry.obj))

    def tool_start(self, call: session.ToolCall, entry: _Entry, asked: _Entry) -> None:
        tool_id, name = call["id"], call["name"]
        execution = self.execution("tool", tool_id or f"tool-{self.writer.tool_calls + 1}")
        if not self.writer.new_tool(execution.id, self.tally, entry):
            return
        self.tools[tool_id] = (execution, name)
        if name in _AGENT_TOOLS:  # its sub-agent's lines follow the response's first line
            self.tasks[tool_id] = (call["args"], asked)
        self.writer.tool_start(entry.time, execution, tool_id, name, call["args"])

    def user(self, entry: _Entry) -> None:
        obj = entry.obj
        content = obj["message"]["content"]
        if obj.get("isCompactSummary") is True:
            self.compacted(entry)
            return
        results = [raw for raw in content if _is_tool_result(raw)] if type(content) is list else []
        for raw in results:
            self.tool_end(raw, entry)
        rest = [raw for raw in content if not _is_tool_result(raw)] if type(content) is list else content
        if rest or not results:
            blocks, kept = _blocks(rest)
            meta = obj.get("isMeta") is True
            if not self.nested and not meta:
                self.writer.next_turn(entry.time)
            message = Message("user", blocks, metadata=_metadata(kept, meta=meta), timestamp=entry.time)
            if not self.nested:
                self.writer.record("message_end", entry.time, message=message)
            self.history.append(message)

    def tool_end(self, raw: Dict[str, Any], entry: _Entry) -> None:
        """The result *raw* of a tool call of this branch; a result of no call open before it
        (its call on another branch, or ended already) is not understood."""
        tool_id = raw["tool_use_id"]
        if tool_id not in self.tools:
            problem = f"result of no call open before it ({tool_id[:60]})"
            self.tally.problems.append(Problem(entry.file, entry.number, problem))
            return
        execution, name = self.tools.pop(tool_id)
        result = entry.obj.get("toolUseResult")
        if name in _AGENT_TOOLS:
            self.sub_agent(tool_id, result, execution, entry)
        details = {"tool_use_result": result} if result is not None else None
        is_error = raw.get("is_error") is True
        self.writer.tool_end(
            entry.time, execution, tool_id, name, raw.get("content", ""), details=details, is_error=is_error
        )
        message = _tool_message(raw, entry.time)
        if not self.nested:
            self.writer.record("message_end", entry.time, execution=execution, message=message)
        self.history.append(message)

    def sub_agent(self, tool_id: str, result: Any, execution: Execution, ended: _Entry) -> None:
        """The sub-agent the agent tool call *execution* ran, its calls nested under it: its
        file (by the call's id, else by its *result*'s ``agentId``), else the sidechain of the
        session's file that began with the call's prompt after the call, before its result."""
        name = self.agents.file(tool_id, result.get("agentId") if type(result) is dict else None)
        args, called = self.tasks.pop(tool_id, (None, ended))
        if name is not None:
            lines = self.agent_file(name)
        else:
            lines = self.agents.sidechain(args.get("prompt") if type(args) is dict else None, called, ended)
        if lines:
            _Conversation(self.writer, self.tally, self.agents, execution, self.limit).write(lines)

    def agent_file(self, name: str) -> List[_Entry]:
        """The lines of the sub-agent file *name*, counted."""
        lines = _read_lines(
            os.path.join(self.agents.folder, name), f"subagents/{name}", self.limit, "timestamp"
        )
        self.tally.add(lines)
        return lines.entries

    def unran(self) -> None:
        """The sub-agents no tool call ran (files, sidechains): their calls all the same, under
        no call, their ids beginning with the file's name or the sidechain's first uuid."""
        named = [
            (name[: -len(".jsonl")], self.agent_file(name))
            for name in self.agents.files()
            if name not in self.agents.used
        ]
        for prefix, lines in [*named, *self.agents.unran()]:
            _Conversation(self.writer, self.tally, self.agents, None, self.limit, f"{prefix}/").write(lines)

    def compaction(self, entry: _Entry) -> None:
        self.compactions += 1
        self.boundary = entry

    def compacted(self, entry: _Entry) -> None:
        """The summary that replaces the conversation after a ``compact_boundary``: a
        compaction, and the context of the calls after it."""
        blocks = _blocks(entry.obj["message"]["content"])[0]
        summary = Message("user", blocks, metadata={"compact_summary": True}, timestamp=entry.time)
        meta = self.boundary.obj.get("compactMetadata") if self.boundary is not None else None
        compaction = {"summary": summary, "metadata": meta if type(meta) is dict else {}}
        execution = self.execution("compact", f"compact-{max(self.compactions, 1)}")
        self.writer.record("context_compacted", entry.time, execution=execution, compaction=compaction)
        self.history = [summary]
        self.boundary = None


def _api_error(obj: Dict[str, Any]) -> Dict[str, Any]:
    """The error of an API error line: its text and, where given, its status."""
    error = obj.get("error")
    status = obj.get("apiErrorStatus")
    kind = error if type(error) is str else "api_error"
    text = ""
    if type(error) is dict:
        status = error.get("status", status)
        inner = error.get("error")
        text = _first_text(error.get("message"), inner.get("message") if type(inner) is dict else None)
        if type(inner) is dict and type(inner.get("type")) is str:
            kind = inner["type"]
    message = obj.get("message")
    blocks = message.get("content") if type(message) is dict else None
    if type(blocks) is list:
        blocks = _first_text(*(block.get("text") for block in blocks if type(block) is dict))
    text = _first_text(text, blocks, obj.get("content"))
    if type(status) is int:
        text = f"status {status}: {text}" if text else f"status {status}"
    return {"message": text or "API error", "type": kind}


def _first_text(*values: Any) -> str:
    return next((value for value in values if type(value) is str and value), "")


class _Plan(NamedTuple):
    """A source read, what its import records first, and the rest of its recording."""

    lines: _Lines
    provenance: Dict[str, Any]
    body: Callable[[_Writer, _Tally], None]


def _claude_code(source: str, limit: int) -> _Plan:
    """The plan of a Claude Code transcript's import: the session at its end, sub-agents
    nested under the tool calls that ran them."""
    lines = _read_lines(source, "", limit, "timestamp")
    agents = _SubAgents.of(source)
    files = {os.path.basename(source): lines.size}
    for name in agents.files():
        with contextlib.suppress(OSError):
            files[f"subagents/{name}"] = os.path.getsize(os.path.join(agents.folder, name))
    objs = [entry.obj for entry in lines.entries]
    provenance = {
        "format": "claude-code",
        "source": source,
        "source_session_id": os.path.splitext(os.path.basename(source))[0],
        "tool_versions": _distinct(obj.get("version") for obj in objs),
        "cwd": _first_text(*(obj.get("cwd") for obj in objs)),
        "git_branch": _first_text(*(obj.get("gitBranch") for obj in objs)),
        "files": files,
    }

    def body(writer: _Writer, tally: _Tally) -> None:
        tally.add(lines)
        conversation = _Conversation(writer, tally, agents, None, limit)
        conversation.write(lines.entries)
        conversation.unran()

    return _Plan(lines, provenance, body)


def _distinct(values: Iterator[Any]) -> List[str]:
    out: List[str] = []
    for value in values:
        if type(value) is str and value and value not in out:
            out.append(value)
    return out


# ---------------------------------------------------------------------------- claude-trace


def _seconds(value: Any, fallback: datetime) -> datetime:
    """A claude-trace time (seconds since the epoch, or RFC 3339), else *fallback*."""
    if type(value) in (int, float):
        with contextlib.suppress(OverflowError, OSError, ValueError):
            return datetime.fromtimestamp(value, timezone.utc)
    return (_time(value) if type(value) is str else None) or fallback


def _apply_delta(block: Dict[str, Any], delta: Dict[str, Any], partial: List[str]) -> None:
    kind = delta.get("type")
    if kind == "text_delta" and type(delta.get("text")) is str:
        block["text"] = block.get("text", "") + delta["text"]
    elif kind == "thinking_delta" and type(delta.get("thinking")) is str:
        block["thinking"] = block.get("thinking", "") + delta["thinking"]
    elif kind == "input_json_delta" and type(delta.get("partial_json")) is str:
        partial.append(delta["partial_json"])


def _sse_events(response: Dict[str, Any]) -> Iterator[Dict[str, Any]]:
    """The events of a streamed response: claude-trace's parsed ``events``, else those of the
    raw ``text/event-stream`` body."""
    events = response.get("events")
    if type(events) is list:
        yield from (
            event["data"] for event in events if type(event) is dict and type(event.get("data")) is dict
        )
        return
    raw = response.get("body_raw")
    for line in raw.splitlines() if type(raw) is str else []:
        if line.startswith("data:"):
            with contextlib.suppress(ValueError):
                event = _parsed(line[5:].strip().encode("utf-8", "surrogatepass"))
                if type(event) is dict:
                    yield event


def _streamed(response: Dict[str, Any]) -> Optional[Dict[str, Any]]:
    """The message a streamed response carried, put together from its events."""
    message: Optional[Dict[str, Any]] = None
    blocks: Dict[Any, Dict[str, Any]] = {}
    partial: Dict[Any, List[str]] = {}
    for event in _sse_events(response):
        kind = event.get("type")
        if kind == "message_start" and type(event.get("message")) is dict:
            message = dict(event["message"])
        elif kind == "content_block_start" and type(event.get("content_block")) is dict:
            blocks[event.get("index")] = dict(event["content_block"])
            partial[event.get("index")] = []
        elif (
            kind == "content_block_delta"
            and event.get("index") in blocks
            and type(event.get("delta")) is dict
        ):
            _apply_delta(blocks[event["index"]], event["delta"], partial[event["index"]])
        elif kind == "message_delta" and message is not None:
            given = event.get("delta")
            delta: Dict[str, Any] = given if type(given) is dict else {}
            message.update(
                {key: value for key, value in delta.items() if key in ("stop_reason", "stop_sequence")}
            )
            if type(event.get("usage")) is dict:
                message["usage"] = {**(message.get("usage") or {}), **event["usage"]}
    if message is None:
        return None
    for index, block in blocks.items():
        if partial[index]:
            with contextlib.suppress(ValueError):
                block["input"] = _parsed("".join(partial[index]).encode("utf-8", "surrogatepass"))
    message["content"] = [blocks[index] for index in sorted(blocks, key=str)]
    return message


def _response_message(response: Dict[str, Any]) -> Optional[Dict[str, Any]]:
    body = response.get("body")
    if type(body) is dict and body.get("type") == "message":
        return body
    return _streamed(response)


def _trace_request(body: Dict[str, Any]) -> ModelRequest:
    """The logged request *body* as it was sent: its ``system`` as the first message (role
    ``system``), its messages and tools verbatim, every other parameter in the config."""
    messages: List[Any] = [{"role": "system", "content": body["system"]}] if "system" in body else []
    messages += body["messages"]
    given = body.get("tools")
    tools: List[Any] = given if type(given) is list else []
    limit = body.get("max_tokens")
    rest = ("messages", "system", "tools", "max_tokens", "tool_choice")
    extra = {key: value for key, value in body.items() if key not in rest}
    config = CallConfig(
        max_tokens=limit if type(limit) is int and 0 < limit < 1 << 62 else 0,
        tool_choice=body.get("tool_choice"),
        extra=extra or None,
    )
    return ModelRequest(messages, tools, config)


def _trace_kind(obj: Dict[str, Any]) -> str:
    """Why a claude-trace pair is no model call (``""`` when it is one)."""
    request = obj.get("request")
    if type(request) is not dict or type(request.get("body")) is not dict:
        return "pair without a request body"
    url = request.get("url")
    path = urllib.parse.urlsplit(str(url) if type(url) is str else "").path
    if not path.endswith("/v1/messages") or type(request["body"].get("messages")) is not list:
        return f"request to {path or '(no url)'}"
    return ""


class _Trace:
    """A claude-trace log written as model calls, and the tool calls between them."""

    def __init__(self, writer: _Writer, tally: _Tally) -> None:
        self.writer = writer
        self.tally = tally
        self.calls = 0
        self.tools: Dict[str, Tuple[Execution, str]] = {}
        self.logged: Dict[str, List[Dict[str, Any]]] = {}  # the pairs read, by their logged_at

    def pair(self, entry: _Entry) -> None:
        kind = _trace_kind(entry.obj) or self.copy(entry)
        if kind:
            self.tally.skip(kind)
            return
        request = entry.obj["request"]
        body = request["body"]
        asked = _seconds(request.get("timestamp"), entry.time)
        self.tool_results(body["messages"], asked)
        self.calls += 1
        execution = Execution(f"model-{self.calls}", "model")
        self.writer.record("model_exec_start", asked, execution=execution)
        self.writer.record("model_request", asked, execution=execution, request=_trace_request(body))
        response = entry.obj.get("response")
        if type(response) is dict:  # no response: the call stays unfinished
            self.response(response, execution, entry)

    def copy(self, entry: _Entry) -> str:
        """``"copy of an earlier line"`` when *entry* is a pair read before (the same request
        logged at the same time, never two calls), else ``""``."""
        pairs = self.logged.setdefault(repr(entry.obj.get("logged_at")), [])
        if entry.obj in pairs:
            return "copy of an earlier line"
        pairs.append(entry.obj)
        return ""

    def response(self, response: Dict[str, Any], execution: Execution, entry: _Entry) -> None:
        time = _seconds(response.get("timestamp"), entry.time)
        status = response.get("status_code")
        message = _response_message(response) if status == 200 or status is None else None
        if message is None:
            self.writer.record("model_exec_end", time, execution=execution, error=_http_error(response))
            return
        content = message.get("content")
        answer = _assistant(message, content if type(content) is list else [], time)
        self.writer.record("model_exec_end", time, execution=execution, message=answer)
        for block in answer.content or []:
            if block["type"] == "toolCall":
                call = block["tool_call"]
                tool = Execution(call["id"] or f"tool-{self.writer.tool_calls + 1}", "tool")
                if not self.writer.new_tool(tool.id, self.tally, entry):
                    continue
                self.tools[call["id"]] = (tool, call["name"])
                self.writer.tool_start(time, tool, call["id"], call["name"], call["args"])

    def tool_results(self, messages: List[Any], time: datetime) -> None:
        """The results in the request's last message of tool calls earlier responses made."""
        last = messages[-1] if messages else None
        content = last.get("content") if type(last) is dict and last.get("role") == "user" else None
        for raw in content if type(content) is list else []:
            if _is_tool_result(raw) and raw["tool_use_id"] in self.tools:
                execution, name = self.tools.pop(raw["tool_use_id"])
                is_error = raw.get("is_error") is True
                self.writer.tool_end(
                    time, execution, raw["tool_use_id"], name, raw.get("content", ""), is_error=is_error
                )


def _http_error(response: Dict[str, Any]) -> Dict[str, Any]:
    status = response.get("status_code")
    body = response.get("body")
    error = body.get("error") if type(body) is dict else None
    text = _first_text(error.get("message") if type(error) is dict else None)
    kind = _first_text(error.get("type") if type(error) is dict else None) or "api_error"
    if type(status) is int:
        text = f"status {status}: {text}" if text else f"status {status}"
    return {"message": text or "no message in the response", "type": kind}


def _trace_id(source: str) -> str:
    """A claude-trace log's session id: its file's name (the second the log began, which two
    logs of two projects can share) and the digest of its first line, which a log keeps as it
    grows.  ``ValueError`` while that line is not whole (its digest would change)."""
    digest = hashlib.sha256()
    with open(source, "rb") as file:
        for chunk in iter(lambda: file.readline(1 << 20), b""):
            digest.update(chunk)
            if chunk.endswith(b"\n"):
                break
        else:
            raise ValueError(f"{source}: holds no whole line yet (its session id is its first line's)")
    return f"{os.path.splitext(os.path.basename(source))[0]}-{digest.hexdigest()[:12]}"


def _claude_trace(source: str, limit: int) -> _Plan:
    """The plan of a claude-trace log's import: each request/response pair one model call."""
    lines = _read_lines(source, "", limit, "logged_at")
    provenance = {
        "format": "claude-trace",
        "source": source,
        "source_session_id": _trace_id(source),
        "files": {os.path.basename(source): lines.size},
    }

    def body(writer: _Writer, tally: _Tally) -> None:
        tally.add(lines)
        trace = _Trace(writer, tally)
        for entry in lines.entries:
            trace.pair(entry)

    return _Plan(lines, provenance, body)


# ---------------------------------------------------------------------------- Codex CLI


_CODEX_OUTPUTS = ("reasoning", "function_call", "custom_tool_call", "local_shell_call")
_CODEX_KEPT = ("web_search_call", "image_generation_call", "tool_search_call")  # kept verbatim
_CODEX_RESULTS = ("function_call_output", "custom_tool_call_output")
_CODEX_UNMAPPED = ("ghost_snapshot", "tool_search_output", "compaction", "compaction_summary")
_CODEX_ROLES = {"developer": "system", "system": "system", "assistant": "assistant", "user": "user"}


def _codex_line(obj: Dict[str, Any]) -> Tuple[str, Any]:
    """A rollout line's type and payload, in the envelope Codex writes; the lines of the first
    Rust versions' rollouts (a bare first line of metadata, bare response items, ``record_type``
    state lines) as their enveloped equals."""
    if type(obj.get("type")) is str and "payload" in obj:
        return obj["type"], obj["payload"]
    if obj.get("record_type") == "state":
        return "state", None
    if type(obj.get("type")) is str:
        return "response_item", obj
    if type(obj.get("id")) is str and "timestamp" in obj:
        return "session_meta", obj
    return "", None


def _codex_is_output(kind: str, payload: Any) -> bool:
    """Whether a line is an item of a model response (the assistant's message, reasoning,
    a tool call)."""
    if kind != "response_item" or type(payload) is not dict:
        return False
    item = payload.get("type")
    return (
        item in _CODEX_OUTPUTS
        or item in _CODEX_KEPT
        or (item == "message" and payload.get("role") == "assistant")
    )


def _codex_usage(payload: Any, total: Any) -> Optional[Dict[str, Any]]:
    """The usage a ``token_count`` event reports for the call that just ended, when its
    ``total_token_usage`` differs from *total* (the previous one): ``last_token_usage``
    (or, in versions that wrote no ``info``, the event's own counts)."""
    if type(payload) is not dict:
        return None
    info = payload.get("info")
    if type(info) is dict and type(info.get("last_token_usage")) is dict:
        changed = info.get("total_token_usage") != total
        return info["last_token_usage"] if changed else None
    return payload if "input_tokens" in payload and payload != total else None


_CODEX_TOKENS = (  # agentgo's usage key <- Codex's
    ("input", "input_tokens"),
    ("cache_read", "cached_input_tokens"),
    ("output", "output_tokens"),
    ("total_tokens", "total_tokens"),
)


def _codex_tokens(raw: Dict[str, Any], model: str) -> Tuple[Optional[Dict[str, Any]], Dict[str, Any]]:
    """Codex's usage *raw* as agentgo's usage, its counts as reported (``input`` includes the
    cached input, as OpenAI counts it), and the counts agentgo has no key for."""
    usage: Dict[str, Any] = {}
    for key, source in _CODEX_TOKENS:
        value = raw.get(source)
        if type(value) is int and 0 <= value < 1 << 62:
            usage[key] = value
    mapped = dict(_CODEX_TOKENS).values()
    rest = {key: value for key, value in raw.items() if key not in mapped and type(value) is int}
    if not usage:
        return None, rest
    usage["provider"] = "openai"
    if model:
        usage["model"] = model
    return usage, rest


@dataclass
class _Unit:
    """A step of a rollout: one model call (the response items it wrote, and its usage), a
    usage no response items go with, a usage paired with a call, or any other line."""

    kind: str  # "call", "usage", "paired" or "line"
    entries: List[_Entry]
    usage: Optional[Dict[str, Any]] = None


def _codex_units(entries: List[_Entry]) -> List[_Unit]:
    """The rollout's lines as units: the response items of one model call together (an input
    item or a change of the usage total ends the call; events and turn contexts between
    its items do not), each usage change paired with its call by ``_pair_usage``."""
    units: List[_Unit] = []
    total: Any = None
    call: Optional[_Unit] = None  # the call response items go to
    for entry in entries:
        kind, payload = _codex_line(entry.obj)
        counts = (
            payload.get("type") == "token_count" if kind == "event_msg" and type(payload) is dict else False
        )
        usage = _codex_usage(payload, total) if counts else None
        if usage is not None:
            info = payload.get("info")
            total = info.get("total_token_usage") if type(info) is dict else payload
            units.append(_Unit("usage", [entry], usage))
            call = None
        elif _codex_is_output(kind, payload) and call is not None:
            call.entries.append(entry)
        elif _codex_is_output(kind, payload):
            call = _Unit("call", [entry])
            units.append(call)
        else:
            units.append(_Unit("line", [entry]))
            call = call if kind in ("event_msg", "turn_context") else None
    return _pair_usage(units)


def _pair_usage(units: List[_Unit]) -> List[_Unit]:
    """Each usage change given to its call: the call before it when that has none (Codex
    writes response items as they complete, the usage when the response does), else the
    call after it (versions that wrote the usage first, the items after the turn).  A
    usage no call takes stays a call whose response items were not written."""
    waiting: Optional[_Unit] = None
    previous: Optional[_Unit] = None
    for unit in units:
        if unit.kind == "call" and waiting is not None:
            unit.usage, waiting.kind, waiting = waiting.usage, "paired", None
        elif (
            unit.kind == "usage"
            and previous is not None
            and previous.kind == "call"
            and previous.usage is None
        ):
            previous.usage, unit.kind = unit.usage, "paired"
        elif unit.kind == "usage":
            waiting = unit
        if unit.kind in ("call", "usage"):
            previous = unit
    return units


def _codex_content(parts: Any) -> Tuple[List[Any], List[Any]]:
    """The agentgo blocks of a Codex message's content items (text and images), and the items
    agentgo has no form for, as they were."""
    blocks: List[Any] = []
    kept: List[Any] = []
    for part in parts if type(parts) is list else []:
        kind = part.get("type") if type(part) is dict else None
        if kind in ("input_text", "output_text", "text") and type(part.get("text")) is str:
            blocks.append(session.text_block(part["text"]))
        elif kind == "input_image" and type(part.get("image_url")) is str and part["image_url"]:
            blocks.append(session.image_block(url=part["image_url"]))
        else:
            kept.append(part)
    return blocks, kept


def _codex_call(item: Dict[str, Any]) -> Optional[Dict[str, Any]]:
    """The tool call block of a function, custom tool or local shell call (``None`` when it
    names no call or tool): a function's argument text exactly as sent, a custom tool's
    input as a JSON string, a local shell call's action."""
    kind = item.get("type")
    call_id = item.get("call_id") or item.get("id")
    name = "local_shell" if kind == "local_shell_call" else item.get("name")
    if type(call_id) is not str or type(name) is not str or not name:
        return None
    try:
        if kind == "custom_tool_call" and type(item.get("input")) is str:
            return dict(session.tool_call_block(call_id, name, json.dumps(item["input"])))
        if kind == "local_shell_call":
            return dict(session.tool_call_block(call_id, name, item.get("action")))
        text = item.get("arguments")
        if type(text) is not str:
            return None
        try:
            _parsed(text.encode("utf-8", "surrogatepass"))
        except ValueError as exc:
            return dict(
                session.tool_call_block(
                    call_id, name, {}, args_invalid=True, args_raw_text=text, args_parse_error=str(exc)
                )
            )
        return dict(session.tool_call_block(call_id, name, text))
    except (TypeError, ValueError, RecursionError):
        return None


def _codex_blocks(item: Dict[str, Any]) -> Tuple[List[Any], List[Any]]:
    """The blocks of one response item of the model, and what of it has no agentgo form."""
    kind = item.get("type")
    if kind == "message":
        return _codex_content(item.get("content"))
    if kind == "reasoning":
        parts = [part for key in ("summary", "content") if type(item.get(key)) is list for part in item[key]]
        texts = [part.get("text") for part in parts if type(part) is dict]
        return [session.thinking_block(text) for text in texts if type(text) is str], []
    call = _codex_call(item) if kind in _CODEX_OUTPUTS else None
    return ([call], []) if call is not None else ([], [item])


def _codex_result(output: Any) -> Tuple[Union[str, List[Any]], bool]:
    """A tool output's content (text, or blocks) and whether it failed: Codex writes a string,
    a list of content items, or (older versions) ``{content, success}``."""
    if type(output) is dict:
        content, _ = _codex_result(output.get("content", ""))
        return content, output.get("success") is False
    if type(output) is list:
        blocks, kept = _codex_content(output)
        return blocks + [session.text_block(json.dumps(part)) for part in kept], False
    return (output if type(output) is str else json.dumps(output)), False


def _codex_message(item: Dict[str, Any], time: datetime) -> Message:
    """One history item as a message: developer and system items ``system``, a tool output a
    ``tool`` message, the model's items ``assistant``; what has no form kept verbatim."""
    kind = item.get("type")
    if kind in _CODEX_RESULTS and type(item.get("call_id")) is str:
        content, is_error = _codex_result(item.get("output"))
        return session.tool_result(item["call_id"], content, is_error=is_error, timestamp=time)
    if kind == "message" and type(item.get("role")) is str:
        role = _CODEX_ROLES.get(item["role"], "user")
        blocks, kept = _codex_content(item.get("content"))
        other = item["role"] if item["role"] not in _CODEX_ROLES else ""
        return Message(role, blocks, metadata=_metadata(kept, role=other), timestamp=time)
    if kind in _CODEX_OUTPUTS or kind in _CODEX_KEPT:
        blocks, kept = _codex_blocks(item)
        return Message("assistant", blocks, metadata=_metadata([], unmapped_items=kept), timestamp=time)
    return Message("user", [], metadata={"unmapped_items": [item]}, timestamp=time)


def _codex_problem(kind: str, payload: Any) -> str:
    """Why a rollout line cannot be read, or ``""``."""
    if not kind:
        return "not a Codex rollout line"
    if kind not in _CODEX_LINES and kind != "state":
        return f"unknown line type {kind[:60]!r}"
    if kind != "state" and type(payload) is not dict:
        return f"a {kind} line without a payload object"
    item = payload.get("type") if kind == "response_item" else "message"
    known = (*_CODEX_OUTPUTS, *_CODEX_KEPT, *_CODEX_RESULTS, *_CODEX_UNMAPPED, "message")
    if item not in known:
        return f"unknown response item type {str(item)[:60]!r}"
    if item == "message" and kind == "response_item" and type(payload.get("content")) is not list:
        return "a message whose content is not a list"
    if kind == "compacted" and type(payload.get("message")) is not str:
        return "a compaction without its message"
    return ""


class _Rollout:
    """A Codex rollout written as model calls, tool calls and messages.  Codex sends the whole
    history with each call: the history kept here is each request's context."""

    def __init__(
        self, writer: _Writer, tally: _Tally, system: List[Message], prompts: Dict[str, int]
    ) -> None:
        self.writer = writer
        self.tally = tally
        self.system = system  # the base instructions, when the rollout has them
        self.prompts = prompts  # what the user typed (event_msg user_message), by text
        self.history: List[Message] = []
        self.model = ""
        self.effort = ""
        self.summary = ""
        self.calls = 0
        self.compactions = 0
        self.meta_seen = False
        self.tools: Dict[str, Tuple[Execution, str]] = {}
        self.unknown = ["tool definitions", "parameters other than the model and reasoning effort"]
        if not system:
            self.unknown.insert(0, "system prompt")

    def unit(self, unit: _Unit) -> None:
        if unit.kind == "call":
            self.model_call(unit.entries, unit.usage, unit.entries[0], unit.entries[-1])
        elif unit.kind == "usage":
            self.model_call([], unit.usage, unit.entries[0], unit.entries[0])
        elif unit.kind == "line":
            self.line(unit.entries[0])

    def request(self) -> ModelRequest:
        extra: Dict[str, Any] = {"model": self.model} if self.model else {}
        extra.update(rebuilt="from the Codex rollout", unknown=self.unknown)
        if self.summary:
            extra["reasoning_summary"] = self.summary
        return ModelRequest(
            self.system + self.history, (), CallConfig(thinking_level=self.effort, extra=extra)
        )

    def response(self, entries: List[_Entry], usage: Optional[Dict[str, Any]], time: datetime) -> Message:
        """The assistant message of one call's response items, with its usage."""
        blocks: List[Any] = []
        kept: List[Any] = []
        for entry in entries:
            kind, payload = _codex_line(entry.obj)
            problem = _codex_problem(kind, payload)
            if problem:
                self.tally.problems.append(Problem(entry.file, entry.number, problem))
                continue
            more, other = _codex_blocks(payload)
            blocks += more
            kept += other
        tokens, rest = _codex_tokens(usage, self.model) if usage is not None else (None, {})
        calls = any(block["type"] == "toolCall" for block in blocks)
        metadata = _metadata([], unmapped_items=kept, token_counts=rest, response_not_written=not entries)
        return Message("assistant", blocks, "toolUse" if calls else "stop", tokens, metadata, time)  # type: ignore[arg-type]

    def model_call(
        self, entries: List[_Entry], usage: Optional[Dict[str, Any]], first: _Entry, last: _Entry
    ) -> None:
        """One model call from *first* to *last*: its request the history so far, its response
        the items it wrote (none for a usage whose items were not written)."""
        message = self.response(entries, usage, last.time)
        self.calls += 1
        execution = Execution(f"model-{self.calls}", "model", "", self.writer.turn)
        self.writer.record("model_exec_start", first.time, execution=execution)
        self.writer.record("model_request", first.time, execution=execution, request=self.request())
        self.writer.record("model_exec_end", last.time, execution=execution, message=message)
        self.writer.record("message_end", last.time, execution=execution, message=message)
        self.history.append(message)
        for block in message.content or []:
            if block["type"] == "toolCall":
                self.tool_start(block["tool_call"], last)

    def tool_start(self, call: session.ToolCall, entry: _Entry) -> None:
        execution = Execution(call["id"], "tool", "", self.writer.turn)
        if not self.writer.new_tool(execution.id, self.tally, entry):
            return
        self.tools[call["id"]] = (execution, call["name"])
        self.writer.tool_start(entry.time, execution, call["id"], call["name"], call["args"])

    def line(self, entry: _Entry) -> None:
        kind, payload = _codex_line(entry.obj)
        problem = _codex_problem(kind, payload)
        item = payload.get("type") if type(payload) is dict else None
        if problem:
            self.tally.problems.append(Problem(entry.file, entry.number, problem))
        elif kind == "session_meta" and not self.meta_seen:
            self.meta_seen = True  # the provenance and the system prompt
        elif kind == "turn_context":
            self.turn_context(payload)
        elif kind == "compacted":
            self.compaction(payload, entry.time)
        elif kind == "response_item" and item in _CODEX_RESULTS:
            self.tool_end(payload, entry)
        elif kind == "response_item" and item == "message":
            self.input_message(payload, entry.time)
        elif kind == "state":
            self.tally.skip("record_type:state")
        else:
            self.tally.skip(f"{kind}:{item}" if kind in ("event_msg", "response_item") else kind)

    def turn_context(self, payload: Dict[str, Any]) -> None:
        """The model and reasoning settings of the calls that follow."""
        self.model = _first_text(payload.get("model"), self.model)
        self.effort = payload["effort"] if type(payload.get("effort")) is str else self.effort
        self.summary = payload["summary"] if type(payload.get("summary")) is str else self.summary

    def input_message(self, payload: Dict[str, Any], time: datetime) -> None:
        """A user, developer or system item of the history; what the user typed starts a turn."""
        message = _codex_message(payload, time)
        text = "".join(str(block.get("text", "")) for block in message.content or [])
        typed = message.role == "user" and (self.prompts.get(text, 0) > 0 or not self.prompts)
        if typed and self.prompts:
            self.prompts[text] -= 1
        if typed:
            self.writer.next_turn(time)
        elif message.role == "user":
            message.metadata = {**(message.metadata or {}), "meta": True}
        self.writer.record("message_end", time, message=message)
        self.history.append(message)

    def tool_end(self, payload: Dict[str, Any], entry: _Entry) -> None:
        call_id = payload.get("call_id")
        if type(call_id) is not str or call_id not in self.tools:
            problem = f"output of no call before it ({str(call_id)[:60]})"
            self.tally.problems.append(Problem(entry.file, entry.number, problem))
            return
        execution, name = self.tools.pop(call_id)
        message = _codex_message(payload, entry.time)
        is_error = bool(message.metadata and message.metadata.get("is_error"))
        self.writer.tool_end(
            entry.time, execution, call_id, name, payload.get("output", ""), is_error=is_error
        )
        self.writer.record("message_end", entry.time, execution=execution, message=message)
        self.history.append(message)

    def compaction(self, payload: Dict[str, Any], time: datetime) -> None:
        """A compaction: its summary, and its ``replacement_history`` the context of the calls
        after it (without one, older versions, the summary alone, marked as such)."""
        self.compactions += 1
        summary = Message(
            "user",
            [session.text_block(payload["message"])],
            metadata={"compact_summary": True},
            timestamp=time,
        )
        replaced = payload.get("replacement_history")
        items = [item for item in replaced if type(item) is dict] if type(replaced) is list else None
        execution = Execution(f"compact-{self.compactions}", "compact", "", self.writer.turn)
        metadata = {"replacement_history": items is not None}
        self.writer.record(
            "context_compacted",
            time,
            execution=execution,
            compaction={"summary": summary, "metadata": metadata},
        )
        if items is None:
            self.history = [summary]
            note = "the context after a compaction (the rollout kept only its summary)"
            self.unknown = [*self.unknown, note] if note not in self.unknown else self.unknown
        else:
            self.history = [_codex_message(item, time) for item in items]


def _codex_meta(entries: List[_Entry]) -> Dict[str, Any]:
    """The payload of the rollout's first ``session_meta`` line (``{}`` when there is none)."""
    for entry in entries:
        kind, payload = _codex_line(entry.obj)
        if kind == "session_meta" and type(payload) is dict:
            return payload
    return {}


def _codex_prompts(entries: List[_Entry]) -> Dict[str, int]:
    """What the user typed, by text: Codex writes an ``event_msg`` ``user_message`` for each
    prompt (and none for the context it adds as user items)."""
    prompts: Dict[str, int] = {}
    for entry in entries:
        kind, payload = _codex_line(entry.obj)
        if kind == "event_msg" and type(payload) is dict and payload.get("type") == "user_message":
            text = payload.get("message")
            if type(text) is str:
                prompts[text] = prompts.get(text, 0) + 1
    return prompts


_AS_WRITTEN = json.JSONEncoder(check_circular=False)  # a parsed line's JSON, its keys in their order


def _codex_copies(entries: List[_Entry], tally: _Tally) -> List[_Entry]:
    """*entries* but the lines written again verbatim: Codex stamps each line with the time it
    writes it, to the millisecond, so a line with the time and item of one before it is that
    line again (the file written twice), counted.  Lines without that stamp (the first Rust
    versions' bare items) are never copies: a prompt typed again is the same line.  Lines
    are told apart by a digest of each one's JSON, its time in it (``1``, ``1.0`` and
    ``true``, equal values, are three lines): one set look-up a line, however many share a
    time.  A line alone at its time is no copy: only lines that share theirs are encoded
    for it (encoding a line costs about what parsing it did, and most have a time of their own)."""
    stamps = [entry.obj.get("timestamp") if "payload" in entry.obj else None for entry in entries]
    lines_at = collections.Counter(stamp for stamp in stamps if type(stamp) is str)
    written: Set[bytes] = set()
    kept: List[_Entry] = []
    for entry, stamp in zip(entries, stamps):
        if type(stamp) is str and lines_at[stamp] > 1:
            digest = hashlib.sha256(_AS_WRITTEN.encode(entry.obj).encode()).digest()
            if digest in written:
                tally.skip("copy of an earlier line")
                continue
            written.add(digest)
        kept.append(entry)
    return kept


def _codex(source: str, limit: int) -> _Plan:
    """The plan of a Codex rollout's import: each model call with its request rebuilt from
    the history Codex resends."""
    lines = _read_lines(source, "", limit, "timestamp")
    meta = _codex_meta(lines.entries)
    given = meta.get("base_instructions")
    system = _first_text(given.get("text") if type(given) is dict else given)
    git = meta.get("git")
    provenance = {
        "format": "codex",
        "source": source,
        "source_session_id": _first_text(meta.get("id")) or os.path.splitext(os.path.basename(source))[0],
        "tool_versions": _distinct(iter([meta.get("cli_version")])),
        "cwd": _first_text(meta.get("cwd")),
        "git_branch": _first_text(git.get("branch") if type(git) is dict else None),
        "originator": _first_text(meta.get("originator")),
        "files": {os.path.basename(source): lines.size},
    }
    if type(meta.get("instructions")) is str:  # older versions: the user's instructions
        provenance["instructions"] = meta["instructions"]
    if type(meta.get("forked_from_id")) is str:
        provenance["forked_from_id"] = meta["forked_from_id"]

    def body(writer: _Writer, tally: _Tally) -> None:
        tally.add(lines)
        first = lines.entries[0].time if lines.entries else _EPOCH
        instructions = [Message("system", [session.text_block(system)], timestamp=first)] if system else []
        entries = _codex_copies(lines.entries, tally)
        rollout = _Rollout(writer, tally, instructions, _codex_prompts(entries))
        for unit in _codex_units(entries):
            rollout.unit(unit)

    return _Plan(lines, provenance, body)


# ---------------------------------------------------------------------------- Gemini CLI


# a rewind (or a $set of messages) taking messages out of the conversation; the UI's notices
for _kind in ("rewind", "ui_message"):
    session.register_event_type(_kind)

_GEMINI_UI = ("info", "warning", "error")  # Gemini CLI's messages shown, never sent to the model
_GEMINI_FAILED = ("error", "cancelled")  # a tool call's status that is a failure


class _Node(NamedTuple):
    """The conversation as a list shared by its versions: its last message and the rest."""

    life: _Life
    rest: Optional[_Node]


@dataclass
class _Life:
    """One message of a Gemini CLI session, from the record that put it in the conversation
    until a rewind (or a ``$set`` of messages) took it out: its time and line, its last
    version, the conversation before it then, and what it was written as."""

    time: datetime
    line: int
    obj: Dict[str, Any]
    below: Optional[_Node]
    rewound: int = 0  # the line that took it out (0: in the conversation at the end)
    messages: List[Message] = field(default_factory=list)
    node: Optional[_Node] = None  # the conversation it ended when it was put in
    listed: bool = False  # put in by a list of messages (a $set, the metadata), not a record


class _Rewind(NamedTuple):
    """A ``$rewindTo`` (*by*, to the message *to*) or a ``$set`` of messages at *time*, line
    *line*: the ids it took out."""

    time: datetime
    line: int
    by: str
    to: str
    taken: List[str]


class _Replay:
    """A Gemini CLI session file read as Gemini CLI reads it: message records by ``id`` (the
    last version wins), ``$rewindTo`` taking the conversation back to before a message,
    ``$set`` updating the metadata (and with ``messages``, replacing the conversation); what
    was taken out is kept, marked."""

    def __init__(self) -> None:
        self.steps: List[Union[_Life, _Rewind]] = []
        self.live: Dict[str, _Life] = {}
        self.top: Optional[_Node] = None
        self.metadata: Dict[str, Any] = {}
        self.problems: List[Problem] = []

    def entry(self, entry: _Entry) -> None:
        obj = entry.obj
        if type(obj.get("$rewindTo")) is str:
            self.rewind(entry, obj["$rewindTo"])
        elif type(obj.get("id")) is str:
            self.message(entry, obj)
        elif type(obj.get("$set")) is dict:
            self.update(entry, obj["$set"], replace=True)
        elif type(obj.get("sessionId")) is str and type(obj.get("projectHash")) is str:
            self.update(entry, obj, replace=False)
        else:
            reason = "not a Gemini CLI record (no id, $rewindTo, $set or sessionId)"
            self.problems.append(Problem(entry.file, entry.number, reason))

    def message(self, entry: _Entry, obj: Dict[str, Any], listed: bool = False) -> None:
        life = self.live.get(obj["id"])
        if life is not None:
            life.obj = obj
            return
        life = _Life(_timestamp(obj, "timestamp") or entry.time, entry.number, obj, self.top, listed=listed)
        self.steps.append(life)
        self.live[obj["id"]] = life
        self.top = life.node = _Node(life, self.top)

    def take_out(self, entry: _Entry, lives: List[_Life], by: str, to: str) -> None:
        for life in lives:
            life.rewound = entry.number
            del self.live[life.obj["id"]]
        self.steps.append(_Rewind(entry.time, entry.number, by, to, [life.obj["id"] for life in lives]))

    def rewind(self, entry: _Entry, to: str) -> None:
        """Gemini CLI's ``$rewindTo``: the message *to* and every one after it out; an id no
        message has takes out the whole conversation, as Gemini CLI reads it."""
        if to not in self.live:
            reason = f"$rewindTo {to[:60]!r}: no message has that id; the whole conversation is taken out"
            self.problems.append(Problem(entry.file, entry.number, reason))
        taken: List[_Life] = []
        while self.top is not None and (not taken or taken[-1].obj["id"] != to):
            taken.append(self.top.life)
            self.top = self.top.rest
        self.take_out(entry, taken[::-1], "$rewindTo", to)

    def update(self, entry: _Entry, values: Dict[str, Any], replace: bool) -> None:
        """Metadata (the first line, or a ``$set``); its ``messages`` are the conversation
        (a ``$set`` replaces it: those it leaves out are taken out)."""
        self.metadata.update({key: value for key, value in values.items() if key != "messages"})
        messages = values.get("messages")
        if type(messages) is not list:
            return
        before = self.live
        if replace:
            self.live, self.top = {}, None
        for obj in messages:
            if type(obj) is not dict or type(obj.get("id")) is not str:
                self.problems.append(Problem(entry.file, entry.number, "a message without an id in messages"))
                continue
            kept = before.pop(obj["id"], None) if replace else None
            if kept is not None:
                self.live[obj["id"]] = kept
                self.top = _Node(kept, self.top)
            self.message(entry, obj, listed=True)
        if replace and before:
            self.live.update(before)  # take_out deletes them from live
            self.take_out(entry, list(before.values()), "$set", "")


def _gemini_parts(content: Any) -> List[Any]:
    """Gemini's ``PartListUnion``: a string, a part, or a list of both, as a list of parts."""
    if type(content) is str:
        return [{"text": content}] if content else []
    if type(content) is dict:
        return [content]
    return (
        [{"text": part} if type(part) is str else part for part in content] if type(content) is list else []
    )


def _gemini_block(part: Any) -> Optional[Dict[str, Any]]:
    """The Gemini part *part* as an agentgo block; ``None`` when it has none."""
    if type(part) is not dict:
        return None
    try:
        if type(part.get("text")) is str:
            text = part["text"]
            return dict(
                session.thinking_block(text) if part.get("thought") is True else session.text_block(text)
            )
        call = part.get("functionCall")
        if type(call) is dict and type(call.get("name")) is str:
            ident, args, signature = call.get("id"), call.get("args"), part.get("thoughtSignature")
            return dict(
                session.tool_call_block(
                    ident if type(ident) is str else "",
                    call["name"],
                    args if args is not None else {},
                    thought_signature=signature if type(signature) is str else "",
                )
            )
        data = part.get("inlineData") or part.get("fileData")
        if type(data) is dict and str(data.get("mimeType")).startswith("image/"):
            if "fileUri" in data:
                return dict(session.image_block(url=data["fileUri"], mime_type=data["mimeType"]))
            return dict(session.image_block(data=data.get("data"), mime_type=data["mimeType"]))
    except (TypeError, ValueError, RecursionError):
        return None
    return None


def _gemini_mapped(parts: List[Any]) -> Tuple[List[Any], List[Any]]:
    """The blocks of *parts*, and the parts agentgo has no form for, as they were."""
    blocks: List[Any] = []
    kept: List[Any] = []
    for part in parts:
        block = _gemini_block(part)
        if block is not None:
            blocks.append(block)
        else:
            kept.append(part)
    return blocks, kept


def _gemini_blocks(obj: Dict[str, Any]) -> Tuple[List[Any], List[Any]]:
    """A Gemini CLI message's blocks: its ``thoughts`` (unless its content holds them), its
    content, and the calls of its ``toolCalls`` its content does not hold; and the parts
    agentgo has no form for, as they were."""
    parts = _gemini_parts(obj.get("content"))
    blocks: List[Any] = []
    thoughts = obj.get("thoughts")
    if not any(type(part) is dict and part.get("thought") is True for part in parts):
        for thought in thoughts if type(thoughts) is list else []:
            if type(thought) is dict and type(thought.get("description")) is str:
                subject = thought.get("subject")
                text = f"**{subject}** {thought['description']}" if type(subject) is str and subject else ""
                blocks.append(session.thinking_block(text or thought["description"]))
    mapped, kept = _gemini_mapped(parts)
    blocks += mapped
    called = {block["tool_call"]["id"] for block in blocks if block["type"] == "toolCall"}
    for record in _gemini_tool_calls(obj):
        block = _gemini_block({"functionCall": record}) if record["id"] not in called else None
        if block is not None:
            blocks.append(block)
    return blocks, kept


def _gemini_tool_calls(obj: Dict[str, Any]) -> List[Dict[str, Any]]:
    """The ``toolCalls`` records of a message that name their call and tool."""
    calls = obj.get("toolCalls")
    return [
        call
        for call in (calls if type(calls) is list else [])
        if type(call) is dict
        and type(call.get("id")) is str
        and call["id"]
        and type(call.get("name")) is str
        and call["name"]
    ]


def _gemini_usage(tokens: Any, model: str) -> Optional[Dict[str, Any]]:
    """Gemini's token counts as agentgo's usage, as Gemini reports them: ``input`` is the
    prompt's (cached tokens included), ``cache_read`` the cached ones, ``output`` the
    candidates', ``total_tokens`` Gemini's total (thoughts and tool-use prompt included)."""
    if type(tokens) is not dict:
        return None
    usage: Dict[str, Any] = {}
    for key, source in (
        ("input", "input"),
        ("output", "output"),
        ("cache_read", "cached"),
        ("total_tokens", "total"),
    ):
        value = tokens.get(source)
        if type(value) is int and 0 <= value < 1 << 62:
            usage[key] = value
    if not usage:
        return None
    usage["provider"] = "gcp.gen_ai"
    if model:
        usage["model"] = model
    return usage


def _gemini_response(part: Any) -> Tuple[str, Any, bool]:
    """A ``functionResponse`` part's call id, its result (the ``output`` or ``error`` text
    where it is one, else the response) and whether it is an error."""
    answer = part.get("functionResponse") if type(part) is dict else None
    if type(answer) is not dict or type(answer.get("id")) is not str or not answer["id"]:
        return "", None, False
    response = answer.get("response")
    if type(response) is dict and type(response.get("output")) is str:
        return answer["id"], response["output"], False
    if type(response) is dict and type(response.get("error")) is str:
        return answer["id"], response["error"], True
    return answer["id"], response, False


def _gemini_tool_message(part: Any, time: datetime, failed: bool = False) -> Optional[Message]:
    """The tool-role message of a ``functionResponse`` part (``None`` when it is none)."""
    call_id, result, is_error = _gemini_response(part)
    if not call_id:
        return None
    text = result if type(result) is str else json.dumps(result, ensure_ascii=False)
    return session.tool_result(call_id, text, is_error=is_error or failed, timestamp=time)


@dataclass
class _GeminiAgents:
    """A Gemini CLI session's sub-agent files, in the folder named by its session id beside
    it (``<agent id>.jsonl``, older ones ``.json``), and those a tool call ran."""

    folder: str
    limit: int  # the longest line read
    names: List[str] = field(default_factory=list)
    used: List[str] = field(default_factory=list)

    @classmethod
    def of(cls, source: str, session_id: str, limit: int) -> _GeminiAgents:
        if re.fullmatch(r"[A-Za-z0-9_-]+", session_id) is None:
            return cls("", limit)
        found = cls(os.path.join(os.path.dirname(source), session_id), limit)
        with contextlib.suppress(OSError):
            names = set(os.listdir(found.folder))
            older = {name for name in names if name.endswith(".json") and f"{name}l" not in names}
            found.names = sorted(name for name in names if name.endswith(".jsonl") or name in older)
        return found

    def file(self, agent_id: Any) -> Optional[str]:
        """The file of the sub-agent *agent_id*, unless none or already written."""
        for name in (f"{agent_id}.jsonl", f"{agent_id}.json"):
            if name in self.names and name not in self.used:
                self.used.append(name)
                return name
        return None


class _GeminiConversation:
    """A replayed Gemini CLI session written in its order: prompts as turns, each ``gemini``
    message with a model as a model call whose request is the conversation before it then,
    tool calls, the UI's notices, and rewinds.  A sub-agent's conversation is written nested:
    its ids begin with *prefix*, its calls are children of *parent* (the tool call that ran
    it, if known), and it has no turns or ``message_end`` of its own."""

    def __init__(
        self,
        writer: _Writer,
        tally: _Tally,
        answered: Set[str],
        agents: _GeminiAgents,
        parent: Optional[Execution] = None,
        prefix: str = "",
    ) -> None:
        self.writer = writer
        self.tally = tally
        self.answered = answered  # the calls whose results a user record holds
        self.written: Set[str] = set()  # the calls whose results were written as messages
        self.agents = agents
        self.parent = parent
        self.prefix = prefix
        self.calls = 0
        self.tool_ids: Dict[str, int] = {}  # how many tool calls of each id were written
        self.clock = _EPOCH  # the time of the last thing written
        self.node: Optional[_Node] = None  # the conversation written last,
        self.history: List[Message] = []  # and its messages

    def execution(self, name: str, kind: str) -> Execution:
        parent_id = self.parent.id if self.parent is not None else ""
        turn = self.parent.turn_index if self.parent is not None else self.writer.turn
        return Execution(self.prefix + name, kind, parent_id, turn)

    def follow(self, life: _Life) -> None:
        """The conversation *life* ends made the one written: the messages before it are those
        written last, unless a rewind or ``$set`` came between (then they are walked again)."""
        if life.below is not self.node:
            self.history = _context(life.below)
        self.node = life.node

    def step(self, step: Union[_Life, _Rewind]) -> None:
        if isinstance(step, _Rewind):
            details = {"by": step.by, "to": step.to, "taken_out": step.taken, "source_line": step.line}
            self.writer.record("rewind", step.time, details=details)
            return
        self.follow(step)
        kind = step.obj.get("type")
        if kind in ("user", "gemini") and type(step.obj.get("content")) not in (str, list, dict, type(None)):
            reason = "a message whose content is neither text, a part nor a list of parts"
            self.tally.problems.append(Problem("", step.line, reason))
        elif kind == "user":
            self.user(step)
        elif kind == "gemini":
            self.gemini(step)
        elif kind in _GEMINI_UI:
            details = {"type": kind, "id": step.obj["id"], "content": step.obj.get("content")}
            details.update({"rewound": True} if step.rewound else {})
            self.writer.record("ui_message", step.time, details=details)
        else:
            self.tally.problems.append(
                Problem("", step.line, f"a message of unknown type {str(kind)[:40]!r}")
            )
        self.clock = max(self.clock, step.time)

    def message(self, life: _Life, message: Message, execution: Optional[Execution] = None) -> None:
        if life.rewound:
            message.metadata = {**(message.metadata or {}), "rewound": True}
        if not self.prefix:
            self.writer.record(
                "message_end", message.timestamp or life.time, execution=execution, message=message
            )
        life.messages.append(message)
        self.history.append(message)

    def user(self, life: _Life) -> None:
        parts = _gemini_parts(life.obj.get("content"))
        rest = [part for part in parts if not _gemini_response(part)[0]]
        for part in parts:
            self.result(life, part, life.time)
        if rest or not parts:  # a prompt, unless the record holds tool results only
            blocks, kept = _gemini_mapped(rest)
            if len(rest) == len(parts) and not self.prefix:
                self.writer.next_turn(life.time)
            metadata = _metadata(kept, id=life.obj["id"])
            self.message(life, Message("user", blocks, metadata=metadata, timestamp=life.time))

    def gemini(self, life: _Life) -> None:
        obj = life.obj
        model = obj.get("model") if type(obj.get("model")) is str else ""
        blocks, kept = _gemini_blocks(obj)
        calls = _gemini_tool_calls(obj)
        stop = "toolUse" if calls else "stop" if model else ""
        tokens = obj.get("tokens") if type(obj.get("tokens")) is dict else None
        metadata = _metadata(kept, id=obj["id"], tokens=tokens, synthetic=not model)
        usage = _gemini_usage(tokens, model or "")
        message = Message("assistant", blocks, stop, usage, metadata, life.time)  # type: ignore[arg-type]
        execution = None
        if model:
            self.calls += 1
            execution = self.execution(f"model-{self.calls}", "model")
            extra = {"model": model, "rebuilt": "from the Gemini CLI session file", "unknown": _UNKNOWN}
            request = ModelRequest(list(self.history), (), CallConfig(extra=extra))
            asked = min(self.clock, life.time) if self.clock is not _EPOCH else life.time
            self.writer.record("model_exec_start", asked, execution=execution)
            self.writer.record("model_request", asked, execution=execution, request=request)
            self.writer.record("model_exec_end", life.time, execution=execution, message=message)
        self.message(life, message, execution)
        for call in calls:
            self.tool(life, call)

    def tool(self, life: _Life, call: Dict[str, Any]) -> None:
        """A ``toolCalls`` record: the tool call, ended when its status is final; its result
        a tool message unless a user record holds it."""
        self.tool_ids[call["id"]] = self.tool_ids.get(call["id"], 0) + 1
        again = self.tool_ids[call["id"]]  # a record written again after a rewind took it out
        execution = self.execution(call["id"] + (f"#{again}" if again > 1 else ""), "tool")
        self.writer.tool_calls += 1
        args = call.get("args") if call.get("args") is not None else {}
        self.writer.tool_start(life.time, execution, call["id"], call["name"], args)
        status = call.get("status")
        if status not in ("success", *_GEMINI_FAILED):
            return  # still running when the file was last written
        agent = self.agents.file(call.get("agentId")) if type(call.get("agentId")) is str else None
        if agent is not None:
            self.sub_agent(agent, execution, f"{execution.id}/")
        failed = status in _GEMINI_FAILED
        found, result = _gemini_result(call)
        details = {key: value for key, value in call.items() if key not in ("id", "name", "args", "result")}
        ended = _timestamp(call, "timestamp") or life.time
        self.clock = max(self.clock, ended)
        self.writer.tool_end(
            ended, execution, call["id"], call["name"], result, details=details, is_error=failed
        )
        if call["id"] not in self.answered:
            self.result(life, found, ended, failed, execution)

    def result(
        self,
        life: _Life,
        part: Any,
        time: datetime,
        failed: bool = False,
        execution: Optional[Execution] = None,
    ) -> None:
        """The tool message of the ``functionResponse`` *part*, unless its call's result was
        written (a resumed older session lists the results its calls' records hold)."""
        message = _gemini_tool_message(part, time, failed)
        if message is not None and (message.metadata or {})["tool_call_id"] not in self.written:
            self.written.add((message.metadata or {})["tool_call_id"])
            self.message(life, message, execution)

    def sub_agent(self, name: str, parent: Optional[Execution], prefix: str) -> None:
        """The sub-agent file *name*: its calls nested under *parent*, their ids after *prefix*."""
        label = f"{os.path.basename(self.agents.folder)}/{name}"
        try:
            lines = _gemini_lines(os.path.join(self.agents.folder, name), label, self.agents.limit)
        except (OSError, UnknownFormatError) as exc:
            self.tally.problems.append(Problem(label, 1, str(exc)[:200]))
            return
        self.tally.add(lines)
        replay = _replay(lines)
        self.tally.problems += replay.problems
        nested = _GeminiConversation(
            self.writer, self.tally, _answered(replay.steps), self.agents, parent, prefix
        )
        for step in replay.steps:
            nested.step(step)


def _gemini_result(call: Dict[str, Any]) -> Tuple[Any, Any]:
    """A ``toolCalls`` record's ``functionResponse`` part for its call (``None`` when its
    result holds none) and its result: the response's output or error, else as recorded."""
    given = call.get("result")
    if type(given) is str:  # older versions: the output alone
        given = {"functionResponse": {"id": call["id"], "name": call["name"], "response": {"output": given}}}
    parts = _gemini_parts(given)
    found = next((part for part in parts if _gemini_response(part)[0] == call["id"]), None)
    return found, _gemini_response(found)[1] if found is not None else call.get("result")


def _context(node: Optional[_Node]) -> List[Message]:
    """The messages of the conversation *node* ends, first to last."""
    lives: List[_Life] = []
    while node is not None:
        lives.append(node.life)
        node = node.rest
    return [message for life in reversed(lives) for message in life.messages]


def _answered(steps: List[Union[_Life, _Rewind]]) -> Set[str]:
    """The tool calls whose results a user record of its own holds (Gemini CLI records them so
    since May 2026; a resumed older session's list of messages holds results its calls'
    records hold too)."""
    return {
        _gemini_response(part)[0]
        for step in steps
        if isinstance(step, _Life) and step.obj.get("type") == "user" and not step.listed
        for part in _gemini_parts(step.obj.get("content"))
    } - {""}


_DECODER = json.JSONDecoder(parse_constant=_refuse_constant, parse_float=_finite)


def _skip_space(text: str, at: int) -> int:
    while at < len(text) and text[at] in " \t\r\n":
        at += 1
    return at


def _whole_file(path: str, label: str) -> _Lines:
    """An older Gemini CLI session file, one JSON document (``session-*.json``): its metadata
    as the first entry, then each message as an entry numbered by the line it begins on.
    ``ValueError`` when the document is not whole."""
    with open(path, "rb") as file:
        raw = file.read()
    lines = _Lines(path, label, size=len(raw))
    text = raw.decode("utf-8")
    at = _skip_space(text, 0)
    if text[at : at + 1] != "{":
        raise ValueError(f"{path}: not a JSON object")
    metadata: Dict[str, Any] = {}
    messages: List[Tuple[int, Any]] = []
    at = _skip_space(text, at + 1)
    while text[at : at + 1] != "}":
        key, at = _DECODER.raw_decode(text, _skip_space(text, at))
        at = _skip_space(text, at)
        if text[at : at + 1] != ":":
            raise ValueError(f"line {text.count(chr(10), 0, at) + 1}: expected ':'")
        at = _skip_space(text, at + 1)
        if key == "messages" and text[at : at + 1] == "[":
            at = _skip_space(text, at + 1)
            while text[at : at + 1] != "]":
                value, end = _DECODER.raw_decode(text, at)
                messages.append((at, value))
                at = _skip_space(text, end)
                at = _skip_space(text, at + 1) if text[at : at + 1] == "," else at
            at += 1
        else:
            metadata[key], at = _DECODER.raw_decode(text, at)
        at = _skip_space(text, at)
        at = _skip_space(text, at + 1) if text[at : at + 1] == "," else at
    start = _timestamp(metadata, "startTime") or _EPOCH
    lines.entries.append(_Entry(label, 1, metadata, start))
    line, counted = 1, 0
    for offset, value in messages:
        line += text.count("\n", counted, offset)
        counted = offset
        if type(value) is not dict:
            lines.problems.append(Problem(label, line, "not a JSON object"))
            continue
        lines.entries.append(_Entry(label, line, value, _timestamp(value, "timestamp") or start))
    return lines


def _gemini_lines(source: str, label: str, limit: int) -> _Lines:
    """A Gemini CLI session file read: JSON Lines, or an older version's one JSON document."""
    with open(source, "rb") as file:
        first = next((raw for raw in _raw_lines(file, limit) if raw.strip()), b"")
    if first.strip() == b"{":
        try:
            return _whole_file(source, label)
        except (ValueError, RecursionError) as exc:
            raise UnknownFormatError(
                f"{source}: a Gemini CLI session file that is not whole JSON: {exc}"
            ) from None
    lines = _read_lines(source, label, limit, "timestamp")
    start = _timestamp(lines.entries[0].obj, "startTime") if lines.entries else None
    if start is not None and start < lines.entries[0].time:  # the session began before its first message
        lines.entries[0] = lines.entries[0]._replace(time=start)
    return lines


def _replay(lines: _Lines) -> _Replay:
    replay = _Replay()
    for entry in lines.entries:
        replay.entry(entry)
    return replay


def _gemini_cli(source: str, limit: int) -> _Plan:
    """The plan of a Gemini CLI session file's import: the session as it stood at the end,
    what rewinds took out kept, marked, and out of later requests."""
    lines = _gemini_lines(source, "", limit)
    replay = _replay(lines)
    meta = replay.metadata
    given = meta.get("sessionId")
    agents = _GeminiAgents.of(source, given if type(given) is str else "", limit)
    files = {os.path.basename(source): lines.size}
    for name in agents.names:
        with contextlib.suppress(OSError):
            files[f"{given}/{name}"] = os.path.getsize(os.path.join(agents.folder, name))
    provenance = {
        "format": "gemini-cli",
        "source": source,
        "source_session_id": given
        if type(given) is str and given
        else os.path.splitext(os.path.basename(source))[0],
        "project_hash": _first_text(meta.get("projectHash")),
        "kind": _first_text(meta.get("kind")),
        "summary": _first_text(meta.get("summary")),
        "directories": _distinct(iter(meta["directories"])) if type(meta.get("directories")) is list else [],
        "files": files,
    }

    def body(writer: _Writer, tally: _Tally) -> None:
        tally.add(lines)
        tally.problems += replay.problems
        conversation = _GeminiConversation(writer, tally, _answered(replay.steps), agents)
        for step in replay.steps:
            conversation.step(step)
        for name in agents.names:  # sub-agents no tool call names: calls of their own
            if name not in agents.used:
                conversation.sub_agent(name, None, f"{os.path.splitext(name)[0]}/")

    return _Plan(lines, provenance, body)


# ---------------------------------------------------------------------------- importing


_IMPORTERS: Dict[str, Callable[[str, int], _Plan]] = {
    "claude-code": _claude_code,
    "codex": _codex,
    "gemini-cli": _gemini_cli,
    "claude-trace": _claude_trace,
}


def import_session(
    source: Union[str, os.PathLike[str]],
    output: Union[str, os.PathLike[str]],
    *,
    format: Optional[str] = None,  # noqa: A002 - the command line's word
    replace: bool = False,
    max_line_bytes: int = _MAX_LINE_BYTES,
) -> ImportReport:
    """Import the session file *source* into a new session file *output*.

    *format* is one of ``FORMATS``; by default it is detected from the content
    (``UnknownFormatError`` when it is none of them).  The output appears whole or not at all:
    it is written under a temporary name beside *output*, then given that name, never
    replacing a file there (``FileExistsError``) unless *replace*.  The same source gives the
    same bytes: ids are derived from the source's, times are its timestamps.  Lines longer
    than *max_line_bytes* are not understood.
    """
    source, output = os.fspath(source), os.fspath(output)
    kind = format or _detect(source)
    if kind not in _IMPORTERS:
        empty = " (empty)" if os.path.getsize(source) == 0 else ""
        raise UnknownFormatError(f"{source}: of no known format ({', '.join(FORMATS)}){empty}")
    plan = _IMPORTERS[kind](source, max_line_bytes)
    if not replace and os.path.lexists(output):
        raise FileExistsError(f"{output}: exists")
    tally = _Tally()
    provenance = {**plan.provenance, "importer": f"session_import {__version__}"}
    times = [entry.time for entry in plan.lines.entries] or [_EPOCH]
    folder, name = os.path.split(output)
    temporary = os.path.join(folder, f".{name[:200]}.{_new_id()[:16]}.tmp")

    def body(writer: _Writer) -> None:
        plan.body(writer, tally)
        writer.end_turn(max(times))
        writer.record("import_note", max(times), details=_note(tally, plan.lines.tail_bytes))

    try:
        _write(temporary, provenance["source_session_id"], times[0], max(times), provenance, body)
        _publish(temporary, output, replace)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
    problems = tuple(sorted(tally.problems, key=lambda problem: (problem.file, problem.line)))
    return ImportReport(
        source, kind, output, tally.lines, problems, dict(tally.unmapped), plan.lines.tail_bytes
    )


def _note(tally: _Tally, tail_bytes: int) -> Dict[str, Any]:
    """What the import read and what it left out, for the session's ``import_note``."""
    problems = sorted(tally.problems, key=lambda problem: (problem.file, problem.line))
    note: Dict[str, Any] = {
        "lines": tally.lines,
        "unmapped": dict(sorted(tally.unmapped.items())),
        "not_understood": [{"file": p.file, "line": p.line, "reason": p.reason} for p in problems],
    }
    if tail_bytes:
        note["unfinished_tail_bytes"] = tail_bytes
    return note


# ---------------------------------------------------------------------------- command line


def _sources(paths: List[str]) -> Iterator[str]:
    """Each session file of *paths*: a file as given, a folder's ``.jsonl`` files (sub-agent
    files aside, which their session brings in: Claude Code's ``subagents/``, the folders in
    Gemini CLI's ``chats/``) and older Gemini CLI ``session-*.json`` files (unless Gemini CLI
    made the ``.jsonl`` of one, which holds it all), in name order."""
    for path in paths:
        if not os.path.isdir(path):
            yield path
            continue
        for folder, folders, names in os.walk(path):
            inner = os.path.basename(folder) == "chats"  # Gemini CLI's: its sub-agents' folders
            folders[:] = sorted(name for name in folders if name != "subagents" and not inner)
            for name in sorted(names):
                older = name.startswith("session-") and name.endswith(".json") and f"{name}l" not in names
                if (name.endswith(".jsonl") or older) and not name.startswith("."):
                    yield os.path.join(folder, name)


def _archive_name(source: str, kind: Optional[str]) -> str:
    """The file name ``--into`` gives *source*'s import (of the format *kind*, else the one
    detected): its file's name, a claude-trace log's session id, where that is a plain name."""
    stem = os.path.splitext(os.path.basename(source))[0]
    with contextlib.suppress(OSError, ValueError):  # reported where the source is read
        stem = _trace_id(source) if (kind or _detect(source)) == "claude-trace" else stem
    plain = re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,200}", stem) is not None
    return f"{stem if plain else _hex_id('name', stem)}.jsonl"


def _imported_files(output: str) -> Optional[Dict[str, Any]]:
    """The provenance of the import at *output* (``None`` when it is no import)."""
    for record in session.iter_records(output):
        if record.type == "import":
            details = record.data.get("details")
            return details if type(details) is dict else None
        if record.seq > 8:  # the provenance is among the first records
            return None
    return None


def _unchanged(source: str, output: str, kind: Optional[str], limit: int) -> bool:
    """Whether the import at *output* is of *source* as it is now: the same files, the same
    sizes.  ``ValueError`` when *output* is something else."""
    if not os.path.lexists(output):
        return False
    provenance = _imported_files(output)
    found = kind or _detect(source)
    if provenance is None or provenance.get("format") != found:
        raise ValueError(f"{output}: exists and is not an import of {source}")
    if found not in _IMPORTERS:
        return False
    now = _IMPORTERS[found](source, limit).provenance
    if provenance.get("source_session_id") != now["source_session_id"]:
        raise ValueError(f"{output}: exists and is the import of another session")
    return _as_before(output, provenance.get("files"), now["files"], os.path.basename(source))


def _as_before(output: str, before: Any, now: Dict[str, int], name_now: str) -> bool:
    """Whether the files of a source are as *before* (their sizes then), else grown or in a
    file named otherwise (*name_now*: Gemini CLI's ``.jsonl`` of an older ``.json``);
    ``ValueError`` when one is smaller or gone (a source cut short, or another source of
    that name), whose import at *output* would then hold less than the one there."""
    if type(before) is dict and name_now not in before:
        return False
    for name, size in before.items() if type(before) is dict else ():
        if type(size) is int and now.get(name, -1) < size:
            raise ValueError(f"{output}: holds {name} as {size} bytes, more than the source has now")
    return bool(before == now)


def _import_one(args: Any, source: str, output: str, replace: bool) -> bool:
    try:
        report = import_session(
            source, output, format=args.source_format, replace=replace, max_line_bytes=args.max_line_bytes
        )
    except (OSError, ValueError, session.SessionError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        _print_error(reason if reason.startswith(source) else f"{source}: {reason}")
        return False
    _print_text(report.text())
    return True


def _import_into(args: Any) -> int:
    os.makedirs(args.into, exist_ok=True)
    status = 0
    taken: Dict[str, str] = {}
    for source in _sources(args.files):
        output = os.path.join(args.into, _archive_name(source, args.source_format))
        if output in taken:
            _print_error(f"{source}: has the session id of {taken[output]}; not imported")
            status = 1
            continue
        taken[output] = source
        try:
            if _unchanged(source, output, args.source_format, args.max_line_bytes):
                _print_text(f"{source}: unchanged -> {output}")
                continue
        except (OSError, ValueError, session.SessionError) as exc:
            _print_error(f"{source}: {exc}")
            status = 1
            continue
        status |= not _import_one(args, source, output, os.path.lexists(output))
    return status


def _import_command(args: Any) -> int:
    if (args.output is None) == (args.into is None):
        args.usage_error("give one of -o OUT.jsonl and --into DIR")
    if args.output is not None:
        if len(args.files) != 1 or os.path.isdir(args.files[0]):
            args.usage_error("-o takes one source file (--into DIR takes several, and folders)")
        return 0 if _import_one(args, args.files[0], args.output, False) else 1
    return _import_into(args)


def _import_options(sub: Any) -> None:
    sub.add_argument("-o", "--output", metavar="OUT.jsonl", help="the session file to write (one source)")
    sub.add_argument(
        "--into",
        metavar="DIR",
        help="write each session found into DIR, named by its session id; again, only new or grown ones",
    )
    sub.add_argument(
        "--from",
        dest="source_format",
        choices=FORMATS,
        help="the sources' format (default: detected from each one's content)",
    )


COMMANDS = [  # what python -m session takes from this module
    _Command(
        "import",
        _IMPORT_COMMANDS["import"],
        "0 every source imported (or unchanged); 1 any of no known format, unreadable or not written",
        True,
        _import_options,
        _import_command,
    )
]
