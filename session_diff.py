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
"""Compare two recorded sessions: ``python -m session diff A B``.

Two recordings are the *same* when they hold the same conversation: the same requests, replies,
tool calls and results, in the same order.  What always differs between two recordings is
ignored: session and run ids, times, durations, seq numbers, message timestamps, token usage and
cost, retry delays, the order in which the parallel tool calls of a turn ended, the format
version, checkpoints and turn bookkeeping.

Runs are aligned by position; their turns in order, by their calls (kinds, tools and
arguments); calls within a turn, model calls and compactions by their order, tool calls by
name and order.  A retry is an extra attempt of its call, and a call, a turn or a run on one
side only is one difference, not a shift of everything after it.  ``--ignore-*`` ignores
more; ``--html`` writes a page with ``session_export``'s safety rules.

Both files are read as they stream, one run of each at a time: what is held is that run's
calls and a digest of each distinct message text, shared by both files (a text is read again
from its file where a difference shows it); a version-2 request is held as its references to
message records (see docs/cli.md).  ``python -m session diff`` runs
what is here when this file lies beside ``session.py`` (the wheel installs both).  Standard library only.
"""

from __future__ import annotations

import bisect
import dataclasses
import difflib
import functools
import hashlib
import json
import os
import sys
from array import array
from typing import Any, Callable, Dict, FrozenSet, Iterator, List, Optional, Sequence, Set, Tuple

import session
from session import CallRef, EventData, Record, _Command

_SHORT_ID = 8  # characters of a run id in the report
_SHORT_TEXT = 100  # a text at most this long, on one line, is shown whole on each side
_IGNORABLE = {  # --ignore-NAME: what else is ignored
    "config": "the requests' config (max tokens, thinking, tool choice, response format, extra)",
    "tools": "the tool declarations the requests offer",
    "system": "the system prompt (the requests' messages of role system)",
    "model": "the model and provider named in the replies' usage",
}


# ---------------------------------------------------------------------------- what is compared


@dataclasses.dataclass
class _Attempt:
    """One attempt of one call: its reference and its compared parts, by name, in the order
    they are compared (a part's value is canonical JSON text, or a tuple of them)."""

    ref: CallRef
    parts: Dict[str, Any] = dataclasses.field(default_factory=dict)
    error: str = ""  # the message of the error that ended it, if one did


@dataclasses.dataclass
class _Call:
    """A model call, a tool call or a compaction, with its attempts in order."""

    kind: str
    name: str
    turn: int
    attempts: List[_Attempt]


@dataclasses.dataclass
class _Run:
    """One run of one file, read whole: its calls in the order they started, and its figures."""

    position: int
    run_id: str
    calls: List[_Call] = dataclasses.field(default_factory=list)
    by_id: Dict[str, _Call] = dataclasses.field(default_factory=dict, repr=False)
    outcome: Dict[str, Any] = dataclasses.field(default_factory=dict)  # its end, its errors
    tokens: int = 0
    cost: float = 0.0
    first_time: str = ""
    last_time: str = ""

    def seconds(self) -> Optional[float]:
        """From its first record to its last (None if a time is not RFC 3339 with an offset:
        the reader takes any string)."""
        try:
            start, end = (session._parse_rfc3339(t) for t in (self.first_time, self.last_time))
        except session._CodecFault:
            return None
        return (end - start).total_seconds()


# Where a message text was first read: its digest, the file, the offset of the record that
# holds it, and the keys to the message in that record's data.
_Place = Tuple[bytes, str, int, Tuple[Any, ...]]


class _Texts:
    """Each distinct message text known by its number, shared by both files: a request's
    messages are an array of numbers, so two equal requests compare at the speed of memory;
    and which of them are system messages.  A text is held as its digest and its place, and
    read again from there when a difference shows it, so that memory does not grow with the
    texts of the runs already compared.  It also keeps what ``--ignore-*`` ignores."""

    def __init__(self, ignored: FrozenSet[str], max_line_bytes: int) -> None:
        self.ignored = ignored
        self.max_line_bytes = max_line_bytes
        self.numbers: Dict[bytes, int] = {}
        self.places: List[_Place] = []
        self.system: Set[int] = set()
        self._line: Tuple[Tuple[str, int], Any] = (("", -1), None)  # the last record read again

    def number(self, message: Any, path: str, offset: int, keys: Tuple[Any, ...]) -> int:
        """*message*'s number; it is at *keys* in the data of the record at *offset* of *path*."""
        digest = self._digest(message)
        number = self.numbers.setdefault(digest, len(self.places))
        if number == len(self.places):
            self.places.append((digest, path, offset, keys))
            if _role(message) == "system":
                self.system.add(number)
        return number

    def _digest(self, message: Any) -> bytes:
        text = _canonical(_without_times(message, "model" not in self.ignored))
        return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=32).digest()

    def split(self, numbers: Sequence[int]) -> Tuple[List[int], List[int]]:
        """*numbers* as the system messages and the others."""
        return [n for n in numbers if n in self.system], [n for n in numbers if n not in self.system]

    def readable(self, value: Any) -> str:
        """A reply or a message (its number) as ``_readable`` shows it; other values as they are."""
        if not isinstance(value, int):
            return value  # type: ignore[no-any-return]
        digest, path, offset, keys = self.places[value]
        message = self._read_again(path, offset, keys)
        if message is None or self._digest(message) != digest:
            return f"(the message is no longer at offset {offset} of {path}: the file changed)"
        return _readable(_canonical(_without_times(message, "model" not in self.ignored)))

    def _read_again(self, path: str, offset: int, keys: Tuple[Any, ...]) -> Any:
        if self._line[0] != (path, offset):
            try:
                with open(path, "rb") as f:
                    f.seek(offset)
                    self._line = ((path, offset), json.loads(f.readline(self.max_line_bytes + 1))["data"])
            except (OSError, ValueError, LookupError, TypeError):
                return None
        value = self._line[1]
        for key in keys:
            try:
                value = value[key]
            except (LookupError, TypeError):
                return None
        return value


_Messages = Callable[[], "array[int]"]  # a request's messages, listed when compared


class _Trouble(Exception):
    """A file that cannot be compared at all: missing, unreadable, or not a session."""


# The records read: those that start a call (it exists even if it never ends), and those that
# hold what is compared.  The others repeat them (message_end) or are bookkeeping.
_COMPARED = frozenset(
    (
        "model_exec_start",
        "model_request",
        "model_exec_end",
        "tool_exec_start",
        "tool_exec_end",
        "context_prepare_start",
        "context_compacted",
        "context_prepare_end",
        "agent_end",
        "error",
    )
)


class _Source:
    """One side of the comparison: a file read run by run, and the damage that stopped it."""

    def __init__(self, path: str, max_line_bytes: int, run: Optional[str], texts: _Texts) -> None:
        self.path = path
        self.max_line_bytes = max_line_bytes
        self.selector = run
        self.damage: Optional[session.FormatError] = None
        self.texts = texts
        self._message_seqs = array("q")  # of the file's version-2 message records, and ...
        self._message_numbers = array("q")  # ... their texts' numbers
        self._tool_lists: Dict[int, str] = {}  # seq of a tools record -> its canonical text

    def runs(self) -> Iterator[_Run]:
        """The file's runs (only the selected one with ``--run``), each once it has ended."""
        runs = self._all_runs()
        if self.selector is None:
            yield from runs
            return
        chosen, matched = None, 0  # the first run that matches is held, the others counted
        for run in runs:
            if _selected(run, self.selector):
                chosen, matched = chosen or run, matched + 1
        if chosen is None or matched > 1:
            found = "no run" if chosen is None else f"{matched} runs"
            raise _Trouble(f"{self.path}: {found} matches --run {self.selector}")
        yield chosen

    def _all_runs(self) -> Iterator[_Run]:
        current: Optional[_Run] = None
        for record in self._records():
            if record.type in ("message", "tools"):
                self._pool(record)
                continue
            if record.type == "run_start":
                if current is not None:
                    yield current
                current = _Run(current.position + 1 if current else 0, record.run_id or "")
            if current is None:
                continue
            try:
                self._take(current, record)
            except session.FormatError as exc:  # a value of the wrong type: damage, as the reader's
                self.damage = session.FormatError(exc.reason, self.path, exc.line, exc.offset)
                break
        if current is not None:
            yield current

    def _records(self) -> Iterator[Record]:
        records = session.iter_records(self.path, max_line_bytes=self.max_line_bytes, resolve=False)
        try:
            first = next(records)
        except OSError as exc:
            raise _Trouble(f"{self.path}: {session._os_reason(exc)}") from None
        except session.FormatError as exc:
            raise _Trouble(f"{self.path}: not a session: {exc.reason}") from None
        yield first
        try:
            yield from records
        except session.FormatError as exc:
            self.damage = exc

    def _take(self, run: _Run, record: Record) -> None:
        """Add *record* to *run*: its call's parts, the run's outcome and figures."""
        run.first_time = run.first_time or record.time
        run.last_time = record.time
        if record.type not in _COMPARED:
            return
        key = session._execution_key(record)
        if key is not None and record.run_id is not None:
            self._take_call(run, record, _checked(record), key)
            return
        data = EventData.from_record(record)
        if record.type == "agent_end":
            run.outcome["end"] = (data.summary.end_reason if data.summary else "") or ""
            if data.error:
                run.outcome["error"] = _canonical(data.error)
        elif record.type == "error" and data.error:
            run.outcome.setdefault("errors", []).append(data.error)  # each, in order

    def _take_call(self, run: _Run, record: Record, data: Dict[str, Any], key: Tuple[str, int]) -> None:
        execution_id, number = key
        call = run.by_id.get(execution_id)
        if call is None:
            execution = data["execution"]  # its kind and turn checked with its key
            call = _Call(execution["kind"], "", execution.get("turn_index", 0), [])
            run.calls.append(call)
            run.by_id[execution_id] = call
        attempt = next((a for a in call.attempts if a.ref.attempt == number), None)
        if attempt is None:
            attempt = _Attempt(CallRef(record.session_id, record.run_id or "", execution_id, number))
            call.attempts.append(attempt)
        call.name = call.name or data.get("tool", "")
        if record.type == "model_request" and "request" in data:
            attempt.parts.update(self._request_parts(data, record.offset))
        elif record.type == "model_exec_end":
            self._take_reply(run, attempt, data, record.offset)
        elif record.type == "tool_exec_start":
            attempt.parts["arguments"] = _canonical(data.get("args"))
        elif record.type == "tool_exec_end":
            outcome = {
                k: data.get(k, False if k == "is_error" else None) for k in ("result", "is_error", "error")
            }
            attempt.parts["result"] = _canonical(outcome)
        elif record.type == "context_compacted":
            attempt.parts["compaction"] = _canonical(data.get("compaction"))
        elif record.type.startswith("context_prepare") and data.get("error") is not None:
            attempt.parts["error"] = _canonical(data["error"])  # a compaction that failed

    def _take_reply(self, run: _Run, attempt: _Attempt, data: Dict[str, Any], offset: int) -> None:
        """A model call's end: its reply (as the message is in the requests that follow, so a
        message's number), or its error; and its usage, into the run's figures."""
        error, message = data.get("error"), data.get("message")
        if error is None:
            attempt.parts["reply"] = self.texts.number(message, self.path, offset, ("message",))
        else:
            partial = _without_times(data.get("partial_message"), "model" not in self.texts.ignored)
            attempt.parts["reply"] = _canonical({"error": error, "partial_message": partial})
            attempt.error = str(error.get("message", ""))
        usage = _usage(message)
        run.tokens += sum(v for k, v in usage.items() if k in ("input", "output") and type(v) is int)
        cost = usage.get("cost")
        total = cost.get("total", 0.0) if isinstance(cost, dict) else 0.0
        run.cost += total if type(total) in (int, float) else 0.0

    def _pool(self, record: Record) -> None:
        """Keep a version-2 message or tool list record, which later requests refer to."""
        if record.type == "message":
            self._message_seqs.append(record.seq)
            number = self.texts.number(record.data.get("message"), self.path, record.offset, ("message",))
            self._message_numbers.append(number)
        else:
            self._tool_lists[record.seq] = _canonical(record.data.get("tools") or [])

    def _request_parts(self, data: Dict[str, Any], offset: int) -> Dict[str, Any]:
        """A request's parts: version 1 holds its messages and tools, version 2 refers to
        earlier records (its messages are kept as those references, and listed when compared)."""
        request = data["request"]
        messages: _Messages
        if "messages" in data:
            ranges = [(first, last) for first, last in data["messages"]]
            messages = functools.partial(self._referred, ranges)
            tools = self._tool_lists.get(data.get("tools", -1), _canonical([]))
        else:
            listed, at = request.get("messages", []), ("request", "messages")  # not a list: one message
            places = [(m, (*at, i)) for i, m in enumerate(listed)] if type(listed) is list else [(listed, at)]
            numbers = array("q", [self.texts.number(m, self.path, offset, keys) for m, keys in places])
            messages = functools.partial(array, "q", numbers)
            tools = _canonical(request.get("tools") or [])
        return {
            "messages": messages,
            "tools": tools,
            "config": _canonical(_without_ids(request.get("config"))),
        }

    def _referred(self, ranges: Sequence[Tuple[int, int]]) -> array[int]:
        """The numbers of the message records in the seq *ranges* (checked by the reader)."""
        seqs, numbers = self._message_seqs, self._message_numbers
        listed = array("q")
        for first, last in ranges:
            listed += numbers[bisect.bisect_left(seqs, first) : bisect.bisect_right(seqs, last)]
        return listed


# The data keys compared, and the JSON types the format gives them (EventData.from_record's).
_CHECKED = {
    key: session._EVENT_DATA_KINDS[key]
    for key in ("request", "message", "error", "partial_message", "tool", "is_error")
}


def _checked(record: Record) -> Dict[str, Any]:
    """*record*'s data, the keys compared being of their types (else ``EventData.from_record``
    raises the ``FormatError`` that names the first that is not)."""
    data = record.data
    for key in _CHECKED.keys() & data.keys():
        kind = _CHECKED[key]
        if kind is not None and type(data[key]) is not kind:
            EventData.from_record(record)
    return data


def _selected(run: _Run, selector: str) -> bool:
    """``--run``: a position counted from 1 (one to four ASCII digits), or else a run id or
    a unique start of one (a start of only digits then takes five or more)."""
    if len(selector) <= 4 and selector.isascii() and selector.isdigit():
        return run.position + 1 == int(selector)
    return run.run_id.startswith(selector)


_CONFIG_IDS = ("session_id", "prompt_cache_key")  # a config's ids, which differ between recordings


def _without_ids(config: Any) -> Any:
    """A request's *config* without the ids a provider keys its session or cache by."""
    if type(config) is not dict:
        return config
    return {key: value for key, value in config.items() if key not in _CONFIG_IDS}


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def _message_value(message: Any) -> Optional[Dict[str, Any]]:
    if isinstance(message, dict) and message.get("$type") == "agentgo.message.v1":
        value = message.get("value")
        return value if isinstance(value, dict) else None
    return None


def _role(message: Any) -> str:
    value = _message_value(message)
    return str(value.get("role", "")) if value else ""


def _usage(message: Any) -> Dict[str, Any]:
    value = _message_value(message)
    usage = value.get("usage") if value else None
    return usage if isinstance(usage, dict) else {}


def _without_times(message: Any, keep_model: bool) -> Any:
    """*message* without what differs between recordings: its time and its usage (but the
    model and provider named in the usage are kept if *keep_model*: another model is a difference)."""
    value = _message_value(message)
    if value is None:
        return message
    kept = {k: v for k, v in value.items() if k not in ("timestamp", "usage")}
    model = {k: v for k, v in _usage(message).items() if keep_model and k in ("model", "provider")}
    if model:
        kept["model"] = model
    return {**message, "value": kept}


def _readable(text: str) -> str:
    """A message's canonical JSON as a person reads it: its role, then each text block's text
    as written and any other block as JSON."""
    message = json.loads(text)
    value = _message_value(message)
    if value is None:
        return text
    lines = [f"[{value.get('role', '')}]"]
    for block in value.get("content") or ():
        is_text = isinstance(block, dict) and block.get("type") == "text"
        lines.append(str(block.get("text", "")) if is_text else _canonical(block))
    return "\n".join(lines)


# ---------------------------------------------------------------------------- alignment


@dataclasses.dataclass
class Difference:
    """One difference: where it is, what differs, and the text of each side (None: absent)."""

    what: str
    where: str
    a: Optional[CallRef]
    b: Optional[CallRef]
    a_text: Optional[str]
    b_text: Optional[str]
    pair: int = 0  # the index of its pair of runs (set by compare)

    def to_json(self) -> Dict[str, Any]:
        return {
            "a": self.a.to_json() if self.a else None,
            "b": self.b.to_json() if self.b else None,
            "what": self.what,
            "where": self.where,
            "a_text": self.a_text,
            "b_text": self.b_text,
        }


@dataclasses.dataclass
class _Said:
    """What the comparison of a pair of runs carries: the texts of both files, and the
    message differences it has shown (later requests of the run carry them again)."""

    texts: _Texts
    seen: Set[Tuple[Tuple[Any, ...], Tuple[Any, ...]]] = dataclasses.field(default_factory=set)
    last: Dict[str, Tuple[Sequence[int], Sequence[int]]] = dataclasses.field(default_factory=dict)


def _short(run: Optional[_Run]) -> str:
    return run.run_id[:_SHORT_ID] if run else "-"


def _position(a: Optional[_Run], b: Optional[_Run]) -> int:
    """The position of a pair of runs, from 1."""
    run = a or b
    assert run is not None
    return run.position + 1


def _first_ref(calls: Sequence[_Call]) -> Optional[CallRef]:
    return calls[0].attempts[0].ref if calls else None


def diff_runs(a: Optional[_Run], b: Optional[_Run], texts: _Texts) -> Iterator[Difference]:
    """The differences of two runs in the order of the conversation."""
    where = f"run {_position(a, b)} ({_short(a)} / {_short(b)})"
    if a is None or b is None:
        side = "A" if b is None else "B"
        first_a, first_b = (_first_ref(run.calls if run else ()) for run in (a, b))
        yield Difference("run", f"{where}: only in {side}", first_a, first_b, None, None)
        return
    turns_a, turns_b = _by_turn(a.calls), _by_turn(b.calls)
    said = _Said(texts)
    for turn_a, turn_b in _paired_turns(turns_a, turns_b):
        at = f"{where}, turn {turn_a if turn_a == turn_b else f'{_turn(turn_a)} / {_turn(turn_b)}'}"
        if turn_a is None or turn_b is None:
            side, calls = ("A", turns_a[turn_a]) if turn_a is not None else ("B", turns_b[turn_b or 0])
            first_a, first_b = (_first_ref(calls if side == s else ()) for s in "AB")
            listed = ", ".join(_label(call) for call in calls)
            yield Difference("turn", f"{at}: only in {side} ({listed})", first_a, first_b, None, None)
            continue
        yield from _diff_turn(at, turns_a[turn_a], turns_b[turn_b], said)
    if a.outcome != b.outcome:
        text_a, text_b = _canonical(a.outcome), _canonical(b.outcome)
        yield Difference("run outcome", f"{where}: its end (outside any call)", None, None, text_a, text_b)


def _by_turn(calls: Sequence[_Call]) -> Dict[int, List[_Call]]:
    turns: Dict[int, List[_Call]] = {}
    for call in calls:
        turns.setdefault(call.turn, []).append(call)
    return turns


def _turn(number: Optional[int]) -> str:
    return "-" if number is None else str(number)


def _paired_turns(
    turns_a: Dict[int, List[_Call]], turns_b: Dict[int, List[_Call]]
) -> Iterator[Tuple[Optional[int], Optional[int]]]:
    """The turns of two runs paired in order: by their calls (kinds, tools and arguments)
    where those are alike, else by position within a stretch that differs; a turn left over
    there is on one side only (and the turns after it still pair)."""
    numbers_a, numbers_b = sorted(turns_a), sorted(turns_b)
    keys_a = [_turn_key(turns_a[n]) for n in numbers_a]
    keys_b = [_turn_key(turns_b[n]) for n in numbers_b]
    same = 0  # the turns alike at the start need no matching (two equal runs: all of them)
    while same < min(len(keys_a), len(keys_b)) and keys_a[same] == keys_b[same]:
        yield numbers_a[same], numbers_b[same]
        same += 1
    matcher = difflib.SequenceMatcher(None, keys_a[same:], keys_b[same:], autojunk=False)
    for _, a1, a2, b1, b2 in matcher.get_opcodes():
        for i in range(max(a2 - a1, b2 - b1)):
            turn_a = numbers_a[same + a1 + i] if a1 + i < a2 else None
            yield turn_a, numbers_b[same + b1 + i] if b1 + i < b2 else None


def _turn_key(calls: Sequence[_Call]) -> Tuple[Tuple[str, str, str], ...]:
    return tuple((c.kind, c.name, c.attempts[-1].parts.get("arguments", "")) for c in calls)


def _keys(calls: Sequence[_Call]) -> List[Tuple[str, str, int]]:
    """Each call's alignment key: its kind, its tool's name, and how many came before it."""
    seen: Dict[Tuple[str, str], int] = {}
    keys = []
    for call in calls:
        seen[call.kind, call.name] = seen.get((call.kind, call.name), -1) + 1
        keys.append((call.kind, call.name, seen[call.kind, call.name]))
    return keys


def _paired_calls(
    calls_a: List[_Call], calls_b: List[_Call]
) -> Iterator[Tuple[Optional[_Call], Optional[_Call]]]:
    """The calls of two paired turns, paired by kind, tool and order; a call left over is on
    one side only (and the calls after it still pair)."""
    matcher = difflib.SequenceMatcher(None, _keys(calls_a), _keys(calls_b), autojunk=False)
    for op, a1, a2, b1, b2 in matcher.get_opcodes():
        if op == "equal":
            yield from zip(calls_a[a1:a2], calls_b[b1:b2])
            continue
        yield from ((call, None) for call in calls_a[a1:a2])
        yield from ((None, call) for call in calls_b[b1:b2])


def _diff_turn(at: str, calls_a: List[_Call], calls_b: List[_Call], said: _Said) -> Iterator[Difference]:
    for call_a, call_b in _paired_calls(calls_a, calls_b):
        if call_a is not None and call_b is not None:
            yield from _diff_call(at, call_a, call_b, said)
            continue
        call, side = (call_a, "A") if call_a is not None else (call_b, "B")
        assert call is not None
        ref = call.attempts[0].ref
        ref_a, ref_b = (ref, None) if side == "A" else (None, ref)
        yield Difference("missing call", f"{at}: {_label(call)} only in {side}", ref_a, ref_b, None, None)


def _label(call: _Call) -> str:
    name = f" {call.name}" if call.name else ""
    return f"{call.kind} call{name} {call.attempts[0].ref.execution_id}"


def _diff_call(at: str, a: _Call, b: _Call, said: _Said) -> Iterator[Difference]:
    here = f"{at}, {_label(a)} / {b.attempts[0].ref.execution_id}"
    if len(a.attempts) != len(b.attempts):
        fewer, more = (a, b) if len(a.attempts) < len(b.attempts) else (b, a)
        extra = more.attempts[len(fewer.attempts)]
        refs = (fewer.attempts[-1].ref, extra.ref) if fewer is a else (extra.ref, fewer.attempts[-1].ref)
        texts = [_attempts_text(call) for call in (a, b)]
        side = "B" if more is b else "A"
        yield Difference("retry", f"{here}: an extra attempt in {side}", refs[0], refs[1], texts[0], texts[1])
    for earlier_a, earlier_b in zip(a.attempts[:-1], b.attempts[:-1]):
        yield from _diff_ends(here, earlier_a, earlier_b, said.texts)
    last_a, last_b = a.attempts[-1], b.attempts[-1]
    for part in list(last_a.parts) + [p for p in last_b.parts if p not in last_a.parts]:
        value_a, value_b = last_a.parts.get(part), last_b.parts.get(part)
        if part == "messages":
            yield from _diff_request_messages(here, (last_a.ref, last_b.ref), (value_a, value_b), said)
            continue
        if value_a == value_b or part in said.texts.ignored:
            continue
        if part == "reply" and value_a is not None and value_b is not None:
            said.seen.add(((value_a,), (value_b,)))  # the requests that follow carry it again
            value_a, value_b = said.texts.readable(value_a), said.texts.readable(value_b)
        yield Difference(part, here, last_a.ref, last_b.ref, value_a, value_b)


def _diff_ends(here: str, a: _Attempt, b: _Attempt, texts: _Texts) -> Iterator[Difference]:
    """Two paired attempts before their calls' last: how each ended (a retried attempt's
    error, its type and message), which the last attempts do not repeat."""
    for part in ("reply", "result"):
        value_a, value_b = a.parts.get(part), b.parts.get(part)
        if value_a != value_b:
            at = f"{here}: attempt {a.ref.attempt} / {b.ref.attempt}"
            yield Difference(part, at, a.ref, b.ref, texts.readable(value_a), texts.readable(value_b))


def _diff_request_messages(
    here: str,
    refs: Tuple[CallRef, CallRef],
    messages: Tuple[Optional[_Messages], Optional[_Messages]],
    said: _Said,
) -> Iterator[Difference]:
    """A request's system messages, then its others (each message a number: two equal
    requests compare at the speed of memory)."""
    a, b = (listed() if listed else array("q") for listed in messages)
    if a == b:
        return
    (system_a, others_a), (system_b, others_b) = said.texts.split(a), said.texts.split(b)
    if "system" not in said.texts.ignored:
        yield from _diff_messages(here, "system prompt", refs, (system_a, system_b), said)
    yield from _diff_messages(here, "messages", refs, (others_a, others_b), said)


def _attempts_text(call: _Call) -> str:
    """A call's attempts, and the error that ended each one that failed."""
    ends = [f"{n}: error {a.error}" if a.error else f"{n}: done" for n, a in enumerate(call.attempts, 1)]
    return f"{len(call.attempts)} attempt(s); " + "; ".join(ends)


def _diff_messages(
    here: str,
    part: str,
    refs: Tuple[CallRef, CallRef],
    texts: Tuple[Sequence[int], Sequence[int]],
    said: _Said,
) -> Iterator[Difference]:
    """A request's messages: each run of added, removed or changed messages is one difference,
    said once in a run (the requests that follow carry it again).  Where both requests extend
    the last ones compared (a context that grows), only what they add is matched: matching
    whole requests would be quadratic in each, as runs that differ all along have them."""
    a, b = texts
    last_a, last_b = said.last.get(part, ((), ()))
    said.last[part] = (a, b)
    if a == b:
        return
    grown = a[: len(last_a)] == last_a and b[: len(last_b)] == last_b
    skip_a, skip_b = (len(last_a), len(last_b)) if grown else (0, 0)
    matcher = difflib.SequenceMatcher(None, a[skip_a:], b[skip_b:], autojunk=False)
    name = "system prompt" if part == "system prompt" else "message"
    for op, a1, a2, b1, b2 in matcher.get_opcodes():
        if op == "equal":
            continue
        a1, a2, b1, b2 = a1 + skip_a, a2 + skip_a, b1 + skip_b, b2 + skip_b
        if (tuple(a[a1:a2]), tuple(b[b1:b2])) in said.seen:
            continue
        said.seen.add((tuple(a[a1:a2]), tuple(b[b1:b2])))
        what = {"insert": "added", "delete": "removed", "replace": "changed"}[op]
        place = f"request {part} {a1 + 1}" if a2 > a1 else f"request {part} {b1 + 1} in B"
        text_a = "\n".join(said.texts.readable(m) for m in a[a1:a2]) if a2 > a1 else None
        text_b = "\n".join(said.texts.readable(m) for m in b[b1:b2]) if b2 > b1 else None
        yield Difference(f"{name} {what}", f"{here}: {place}", *refs, text_a, text_b)


# ---------------------------------------------------------------------------- comparison


@dataclasses.dataclass
class Comparison:
    """What ``diff`` found: the differences, each run pair's figures, and the files' damage."""

    differences: List[Difference]
    runs: List[Tuple[Optional[_Run], Optional[_Run]]]
    damage: List[Tuple[str, session.FormatError]]
    rows: List[List[Tuple[Optional[int], Optional[int]]]]  # per pair of runs, if asked: see _aligned


def _summary_only(run: Optional[_Run]) -> Optional[_Run]:
    """*run*'s figures, without its calls' parts (what the report keeps after comparing it)."""
    if run is None:
        return None
    calls = [_Call(c.kind, c.name, c.turn, [_Attempt(a.ref) for a in c.attempts]) for c in run.calls]
    return dataclasses.replace(run, calls=calls)


def _aligned(a: Optional[_Run], b: Optional[_Run]) -> List[Tuple[Optional[int], Optional[int]]]:
    """The calls of two runs side by side, as they are compared: pairs of indexes into each
    run's calls (None: no call on that side)."""
    index = {id(call): i for run in (a, b) if run for i, call in enumerate(run.calls)}
    turns_a, turns_b = (_by_turn(run.calls) if run else {} for run in (a, b))
    rows = []
    for turn_a, turn_b in _paired_turns(turns_a, turns_b):
        calls_a = turns_a[turn_a] if turn_a is not None else []
        calls_b = turns_b[turn_b] if turn_b is not None else []
        for call_a, call_b in _paired_calls(calls_a, calls_b):
            rows.append((index[id(call_a)] if call_a else None, index[id(call_b)] if call_b else None))
    return rows


def compare(a: _Source, b: _Source, every: bool, aligned: bool = False) -> Comparison:
    """Compare *a* and *b* run by run, holding one run of each at a time; stop at the first
    difference unless *every*; with *aligned*, keep each pair's calls side by side."""
    found: List[Difference] = []
    runs: List[Tuple[Optional[_Run], Optional[_Run]]] = []
    rows = []
    runs_a, runs_b = a.runs(), b.runs()
    while True:
        run_a, run_b = next(runs_a, None), next(runs_b, None)
        if run_a is None and run_b is None:
            break
        for difference in diff_runs(run_a, run_b, a.texts) if every or not found else ():
            difference.pair = len(runs)
            found.append(difference)
            if not every:
                break  # the differences after the first are not looked for (their texts cost)
        runs.append((_summary_only(run_a), _summary_only(run_b)))
        if aligned:
            rows.append(_aligned(run_a, run_b))
    damage = [(s.path, s.damage) for s in (a, b) if s.damage is not None]
    return Comparison(found, runs, damage, rows)


# ---------------------------------------------------------------------------- report


def _lines(text: Optional[str]) -> List[str]:
    """*text*'s lines, split at line feeds only (other separators are shown, escaped)."""
    return text.split("\n") if text else []


def _text_lines(difference: Difference) -> List[str]:
    """The differing texts of both sides: each on one line when short, else a line diff."""
    a, b = difference.a_text, difference.b_text
    if a is None and b is None:
        return []
    if max(len(a or ""), len(b or "")) <= _SHORT_TEXT and "\n" not in (a or "") + (b or ""):
        return [f"  A: {a if a is not None else '(nothing)'}", f"  B: {b if b is not None else '(nothing)'}"]
    return ["  " + line for line in _unified(_lines(a), _lines(b))]


_DIFF_LINES = 2000  # lines of a side past which texts are not line-diffed (difflib is quadratic)


def _middle(a: Sequence[str], b: Sequence[str]) -> Tuple[int, int]:
    """How many lines two texts share at their start, and then at their end."""
    start = 0
    while start < min(len(a), len(b)) and a[start] == b[start]:
        start += 1
    end = 0
    while end < min(len(a), len(b)) - start and a[-1 - end] == b[-1 - end]:
        end += 1
    return start, end


def _unified(a: List[str], b: List[str]) -> List[str]:
    """A unified line diff with one line of context; past ``_DIFF_LINES`` lines on a side,
    one hunk from the first line that differs to the last, each side cut at that many lines."""
    if max(len(a), len(b)) <= _DIFF_LINES:
        return list(difflib.unified_diff(a, b, "A", "B", n=1, lineterm=""))
    start, end = _middle(a, b)
    before, after = a[max(start - 1, 0) : start], a[len(a) - end :][:1]
    ranges = [
        f"{start - len(before) + 1},{len(before) + len(side) - start - end + len(after)}" for side in (a, b)
    ]
    body = [" " + line for line in before]
    for sign, side in (("-", a), ("+", b)):
        middle = side[start : len(side) - end]
        body += [sign + line for line in middle[:_DIFF_LINES]]
        left = len(middle) - _DIFF_LINES
        body += [f"\\ {left} more lines not shown"] if left > 0 else []
    return ["--- A", "+++ B", f"@@ -{ranges[0]} +{ranges[1]} @@", *body, *(" " + line for line in after)]


def _ref_text(ref: Optional[CallRef]) -> str:
    return f"{ref.execution_id} attempt {ref.attempt}" if ref else "-"


def _report_lines(comparison: Comparison, every: bool) -> List[str]:
    lines = []
    differences = comparison.differences if every else comparison.differences[:1]
    for number, difference in enumerate(differences, 1):
        title = f"difference {number}" if every else "first difference"
        lines.append(f"{title}: {difference.what} at {difference.where}")
        lines.append(f"  calls: A {_ref_text(difference.a)}, B {_ref_text(difference.b)}")
        lines.extend(_text_lines(difference))
    for run_a, run_b in comparison.runs:
        lines.extend(_run_lines(run_a, run_b))
    return lines


def _figure(name: str, a: Optional[float], b: Optional[float], unit: str = "") -> str:
    """A figure of both runs of a pair, and B's minus A's."""
    shown = [f"{v:g}{unit}" if v is not None else "-" for v in (a, b)]
    delta = f" ({b - a:+g}{unit})" if a is not None and b is not None else ""
    return f"  {name:7} {shown[0]} / {shown[1]}{delta}"


def _tools(run: Optional[_Run]) -> str:
    if run is None:
        return "-"
    return " ".join(c.name for c in run.calls if c.kind == "tool") or "(none)"


def _rounded(value: Optional[float], digits: int) -> Optional[float]:
    return None if value is None else round(value, digits)


def _run_lines(a: Optional[_Run], b: Optional[_Run]) -> List[str]:
    def each(figure: Callable[[_Run], Optional[float]]) -> Tuple[Optional[float], Optional[float]]:
        return (figure(a) if a else None, figure(b) if b else None)

    return [
        f"run {_position(a, b)}: A {_short(a)} / B {_short(b)}",
        _figure("calls", *each(lambda run: sum(len(c.attempts) for c in run.calls))),
        f"  tools   A: {_tools(a)}",
        f"          B: {_tools(b)}",
        _figure("tokens", *each(lambda run: run.tokens)),
        _figure("cost", *each(lambda run: round(run.cost, 6)), " USD"),
        _figure("time", *each(lambda run: _rounded(run.seconds(), 3)), " s"),
    ]


_SAID = ("same", "different", "same up to the damage")  # by status


def _damage_text(path: str, error: session.FormatError) -> str:
    return f"{path}:{error.line}: {error.reason} (offset {error.offset}); compared up to this line"


def _status(comparison: Comparison) -> int:
    """0 the same; 1 different; 2 the same as far as a damaged file goes."""
    if comparison.differences:
        return 1
    return 2 if comparison.damage else 0


# ---------------------------------------------------------------------------- page

_PAGE_LINE = 2000  # characters of a line of a differing text shown, at most
_PAGE_LINES = 400  # lines of one side's differing text shown, at most

# The page's only style; it has no script (its Content-Security-Policy, session_export's, allows none).
_PAGE_STYLE = """
body{font:14px/1.4 system-ui,sans-serif;margin:1em auto;max-width:1400px;padding:0 1em}
table{border-collapse:collapse;width:100%;table-layout:fixed;margin:.3em 0 1em}
th,td{border:1px solid #ccc;padding:.2em .4em;vertical-align:top;text-align:left;overflow-wrap:anywhere}
th.n,td.n{width:4em}
pre{white-space:pre-wrap;overflow-wrap:anywhere;margin:0;font:12px/1.35 ui-monospace,monospace}
.only{background:#ffd6a5}
.none{color:#777;font-style:italic}
tr.differs td{background:#fff3cd}
tr.differs td .only{background:#ffd6a5}
.mark{background:#fdd;color:#900;font-size:85%}
"""


def _page_lines(text: Optional[str], marked: List[bool], h: Callable[[str], str]) -> str:
    """One side's differing text in a ``<pre>``, each line on that side only marked."""
    if text is None:
        return '<span class="none">(nothing)</span>'
    shown = []
    for line, only in list(zip(_lines(text), marked))[:_PAGE_LINES]:
        more = len(line) - _PAGE_LINE
        body = h(line[:_PAGE_LINE]) + (f" … ({more} more characters)" if more > 0 else "")
        shown.append(f'<span class="only">{body}</span>' if only else body)
    left = len(marked) - _PAGE_LINES
    shown += [f'<span class="none">… {left} more lines</span>'] if left > 0 else []
    return "<pre>" + "\n".join(shown) + "</pre>"


def _marks(a: Optional[str], b: Optional[str]) -> Tuple[List[bool], List[bool]]:
    """Which lines of each side are on that side only: those the report's line diff marks
    (a short text, shown whole in the report, is one line)."""
    lines_a, lines_b = _lines(a), _lines(b)
    marks_a, marks_b = [True] * len(lines_a), [True] * len(lines_b)
    if max(len(lines_a), len(lines_b)) > _DIFF_LINES:  # as _unified: the start and end shared
        start, end = _middle(lines_a, lines_b)
        for marks in (marks_a, marks_b):
            marks[:start] = [False] * start
            marks[len(marks) - end :] = [False] * end
        return marks_a, marks_b
    for op, a1, a2, b1, b2 in difflib.SequenceMatcher(None, lines_a, lines_b).get_opcodes():
        if op == "equal":
            marks_a[a1:a2] = [False] * (a2 - a1)
            marks_b[b1:b2] = [False] * (b2 - b1)
    return marks_a, marks_b


def _page_difference(number: int, difference: Difference, h: Callable[[str], str]) -> str:
    marks_a, marks_b = _marks(difference.a_text, difference.b_text)
    return (
        f'<section class="difference" id="difference-{number}"><h3>{number}. {h(difference.what)}'
        f" at {h(difference.where)}</h3>\n<table><tr><th>A: {h(_ref_text(difference.a))}</th>"
        f"<th>B: {h(_ref_text(difference.b))}</th></tr>\n"
        f"<tr><td>{_page_lines(difference.a_text, marks_a, h)}</td>"
        f"<td>{_page_lines(difference.b_text, marks_b, h)}</td></tr></table></section>\n"
    )


def _page_call(call: Optional[_Call], h: Callable[[str], str]) -> str:
    if call is None:
        return '<td><span class="none">(none)</span></td>'
    attempts = f" · {len(call.attempts)} attempts" if len(call.attempts) > 1 else ""
    return f"<td>turn {call.turn} · {h(_label(call))}{attempts}</td>"


def _page_rows(comparison: Comparison, pair: int, start: int, h: Callable[[str], str]) -> str:
    """The calls of one pair of runs side by side from row *start*, each row that a
    difference names marked and linked to it."""
    run_a, run_b = comparison.runs[pair]
    named: Dict[Tuple[str, str], List[int]] = {}
    for number, difference in enumerate(comparison.differences, 1):
        for side, ref in (("a", difference.a), ("b", difference.b)):
            if difference.pair == pair and ref is not None:
                named.setdefault((side, ref.execution_id), []).append(number)
    rows = ['<table><tr><th class="n">#</th><th>A</th><th>B</th></tr>']
    for index_a, index_b in comparison.rows[pair][start:]:
        call_a = run_a.calls[index_a] if run_a and index_a is not None else None
        call_b = run_b.calls[index_b] if run_b and index_b is not None else None
        numbers = sorted(
            set(named.get(("a", call_a.attempts[0].ref.execution_id), []) if call_a else [])
            | set(named.get(("b", call_b.attempts[0].ref.execution_id), []) if call_b else [])
        )
        links = " ".join(f'<a href="#difference-{n}">{n}</a>' for n in numbers)
        mark = ' class="differs"' if numbers or call_a is None or call_b is None else ""
        cells = _page_call(call_a, h) + _page_call(call_b, h)
        rows.append(f'<tr{mark}><td class="n">{links}</td>{cells}</tr>')
    return "\n".join(rows) + "</table>\n"


def _first_row(comparison: Comparison) -> Tuple[int, int]:
    """The pair of runs and the row of its calls where the first difference is (a difference
    outside any call: after the pair's last row)."""
    first = comparison.differences[0]
    refs = {(side, ref.execution_id) for side, ref in (("a", first.a), ("b", first.b)) if ref is not None}
    run_a, run_b = comparison.runs[first.pair]
    for row, (index_a, index_b) in enumerate(comparison.rows[first.pair]):
        here = [("a", run_a, index_a), ("b", run_b, index_b)]
        ids = {
            (side, run.calls[i].attempts[0].ref.execution_id)
            for side, run, i in here
            if run and i is not None
        }
        if ids & refs:
            return first.pair, row
    return first.pair, len(comparison.rows[first.pair])


def _page_calls(comparison: Comparison, h: Callable[[str], str]) -> str:
    """Each pair of runs from the first difference on: its figures and its calls side by side."""
    if not comparison.differences:
        return ""
    first_pair, first_row = _first_row(comparison)
    parts = ['<section id="calls"><h2>The runs side by side, from the first difference on</h2>\n']
    if first_pair or first_row:
        parts.append(
            f"<p>{first_pair} pairs of runs and {first_row} pairs of calls alike before it, not shown.</p>\n"
        )
    for pair in range(first_pair, len(comparison.runs)):
        figures = "\n".join(_run_lines(*comparison.runs[pair]))
        start = first_row if pair == first_pair else 0
        parts.append(
            f"<h3>run {pair + 1}</h3>\n<pre>{h(figures)}</pre>\n{_page_rows(comparison, pair, start, h)}"
        )
    return "".join(parts) + "</section>\n"


def _page(comparison: Comparison, paths: Tuple[str, str], export: Any) -> str:
    """The page: the files, what was found, every difference with each side's text (the lines
    on one side only marked), and the runs side by side from the first difference on."""
    h = export._h
    said = _SAID[_status(comparison)]
    damage = "".join(f"<p>{h(_damage_text(path, error))}</p>\n" for path, error in comparison.damage)
    found = len(comparison.differences)
    differences = "".join(_page_difference(n, d, h) for n, d in enumerate(comparison.differences, 1))
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">\n'
        f'<meta http-equiv="Content-Security-Policy" content="{export._content_policy(_PAGE_STYLE)}">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>diff: {said}</title>\n<style>{_PAGE_STYLE}</style></head>\n<body>\n"
        f"<header><h1>{said}</h1>\n<p>A: <code>{h(paths[0])}</code><br>B: <code>{h(paths[1])}</code></p>\n"
        f'{damage}</header>\n<section id="differences"><h2>{session._count(found, "difference")}</h2>\n'
        f"{differences}</section>\n{_page_calls(comparison, h)}</body></html>\n"
    )


def _diff_command(args: Any) -> int:
    selectors = list(args.run or [])
    if len(selectors) > 2:
        args.usage_error("--run is given at most twice (A's run, then B's)")
    select_a = selectors[0] if selectors else None
    select_b = selectors[-1] if selectors else None
    if args.output is not None and not args.html:
        args.usage_error("-o/--output is the page's, with --html")
    if args.html and args.json:
        args.usage_error("--html and --json are one or the other")
    texts = _Texts(frozenset(n for n in _IGNORABLE if getattr(args, f"ignore_{n}")), args.max_line_bytes)
    a = _Source(args.file, args.max_line_bytes, select_a, texts)
    b = _Source(args.b, args.max_line_bytes, select_b, texts)
    try:
        export = _page_module(args)
        comparison = compare(a, b, args.all or args.html, aligned=args.html)
        for path, error in comparison.damage:
            session._print_error(_damage_text(path, error))
        if export is not None:
            _publish_page(args, comparison, export)
    except _Trouble as exc:
        session._print_error(f"{args.prog} diff: {exc}")
        return 2
    status = _status(comparison)
    if args.json:
        _print_json_report(comparison, args.all)
    elif not args.html:
        _print_report(comparison, args.all)
    return status


def _print_json_report(comparison: Comparison, every: bool) -> None:
    first = comparison.differences[0].to_json() if comparison.differences else None
    report: Dict[str, Any] = {"same": _status(comparison) == 0, "first": first}
    if every:
        report["differences"] = [d.to_json() for d in comparison.differences]
    report["damaged"] = [{"file": path, "line": e.line, "offset": e.offset} for path, e in comparison.damage]
    session._print_json(report)


def _print_report(comparison: Comparison, every: bool) -> None:
    session._print_text(_SAID[_status(comparison)])
    for line in _report_lines(comparison, every):
        session._print_text(line)


def _page_module(args: Any) -> Any:
    """``session_export``, whose safety rules the page follows, with ``--html`` (else None)."""
    if not args.html:
        return None
    export = session._companion("session_export")
    if export is None:
        raise _Trouble("--html needs session_export.py beside session.py (the wheel installs both)")
    return export


def _publish_page(args: Any, comparison: Comparison, export: Any) -> None:
    """The page to stdout, or to ``-o`` as the ``html`` command writes its page (whole or not
    at all, never over either session)."""
    page = _page(comparison, (args.file, args.b), export).encode("utf-8")
    if args.output is None:
        sys.stdout.flush()
        export._output_step(lambda: sys.stdout.buffer.write(page))
        return
    for path in (args.file, args.b):
        if os.path.exists(args.output) and os.path.samefile(args.output, path):
            raise _Trouble(f"will not write the page over the session {path}")
    export._publish(args.output, lambda out: export._output_step(lambda: out.write(page)))


def _diff_options(sub: Any) -> None:
    sub.add_argument("b", metavar="B", help="the session compared with FILE")
    sub.add_argument(
        "--run",
        action="append",
        metavar="RUN",
        help="compare only this run: a position from 1 (up to four digits), or a run id or the start of one; "
        "given twice, the first is A's and the second B's (default: every run, by position)",
    )
    sub.add_argument("--all", action="store_true", help="list every difference (default: the first)")
    sub.add_argument("--json", action="store_true", help="print one JSON object (default: text)")
    sub.add_argument(
        "--html",
        action="store_true",
        help="write a page: every difference, the two sessions side by side from the first on",
    )
    sub.add_argument("-o", "--output", metavar="PAGE", help="with --html: the page's file (default: stdout)")
    for name, what in _IGNORABLE.items():
        sub.add_argument(f"--ignore-{name}", action="store_true", help=f"ignore {what}")


COMMANDS = [  # what python -m session takes from this module
    _Command(
        "diff",
        session._COMPANIONS["session_diff"]["diff"],
        "0 the same; 1 different; 2 a file missing or not a session, or the same up to a damaged line",
        False,
        _diff_options,
        _diff_command,
    ),
]
