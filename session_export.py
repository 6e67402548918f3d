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
"""Exports of sessions recorded by ``session.py``: JSON Lines for query engines, a page, and
OpenTelemetry spans.

    import session_export

    session_export.export(["sessions/"], "all.jsonl")   # plus all.jsonl.manifest.jsonl
    session_export.send_otlp(session_export.otlp_requests(["sessions/"]), "http://localhost:4318/v1/traces")

``python -m session export|html|otlp`` run what is here when this file lies beside ``session.py``
(the wheel installs both; a vendored copy needs both files).  Standard library only.
"""

from __future__ import annotations

import array
import bisect
import builtins
import contextlib
import datetime
import errno
import functools
import hashlib
import heapq
import io
import itertools
import json
import math
import os
import re
import stat
import struct
import sys
from typing import (
    Any,
    BinaryIO,
    Callable,
    Dict,
    Generator,
    Generic,
    Iterable,
    Iterator,
    List,
    NamedTuple,
    Optional,
    Protocol,
    Sequence,
    Set,
    Tuple,
    TypeVar,
    Union,
    cast,
)

from session import CallRef, Execution, FormatError, ReadResult, Record, Summary, iter_records, read

# isort: split
# The core's private helpers this module shares, so that an export reads, writes and reports
# as the core's commands do.  Private to the two modules (nothing else should use them), and
# kept to these three groups.
# Reading and checking a session file:
from session import (
    _MAX_LINE_BYTES,
    _POOLED,
    _READ_BUFFER,
    _RESERVED,
    _Attempts,
    _CodecFault,
    _execution_from_json,
    _Index,
    _LineTooLong,
    _parse_line,
    _parse_rfc3339,
    _read,
    _Summarizer,
    _usage_counts,
)

# isort: split
# Writing files as the writer does (exclusive, synced, in place by rename):
from session import _O_BINARY, _name, _new_id, _sync, _sync_directory

# isort: split
# The command line: a command's table entry and options, and the core's reports and texts:
from session import (
    _EX_IOERR,
    _EXPORT_COMMANDS,
    _Command,
    _count,
    _duration,
    _error_text,
    _failure_fields,
    _failure_text,
    _OutputError,
    _print_error,
    _print_failure,
    _print_text,
    _read_file,
    _shell_word,
    _valid_fields,
)

# isort: split
# The credential rule, applied again to what an export sends:
from session import _without_credentials

__all__ = ["export", "otlp_requests", "send_otlp", "OtlpError"]

__version__ = "1.0.0"


# ---------------------------------------------------------------------------- export


def export(
    sources: Iterable[Union[str, os.PathLike[str]]],
    out: Union[str, os.PathLike[str]],
    *,
    split: bool = False,
    prefix: bool = False,
    max_line_bytes: int = _MAX_LINE_BYTES,
    progress: Optional[Callable[[int, int], object]] = None,
) -> List[Dict[str, Any]]:
    """Copy the complete records of session files to JSON Lines for a query engine.

    Each of *sources* is a session file or a directory, whose ``*.jsonl`` files at any depth
    are taken in sorted order (a file named twice is taken once).  Each file is validated as
    it streams and the lines of its complete records are copied byte for byte, up to the
    size the file had when it was opened: an unfinished tail, and whatever a writer appends
    meanwhile, are never copied.  An invalid or unreadable file is left out; with *prefix*, an
    invalid one contributes the records before its first bad line (what ``repair`` would keep;
    the file is not changed), after every valid file.  A file whose session was already
    exported (from an earlier valid file, or from a valid file when it is invalid) is left out.

    The lines go to the file *out*, or with *split* to one ``part-NNNNN.jsonl`` per input
    (NNNNN its position among the inputs) in the new directory *out*; then comes the manifest,
    ``OUT.manifest.jsonl`` (or ``OUT/manifest.jsonl``), one JSON object per input, which is
    also returned: ``validate --json``'s fields, and where the file's records are in the
    output (``out``, bytes ``out_start`` to ``out_end``, lines ``out_first_line`` to
    ``out_last_line``, ``out_records``; ``out`` is ``None`` when nothing was copied), the
    ``longest_line`` copied (in bytes, newline included) and ``duplicate_of`` (the file that
    holds the same session, or ``None``).  Everything is written under temporary names,
    synced and renamed into place, the manifest last: an export without its manifest is
    unfinished.  *progress*, if given, is called with the bytes read so far and in all.
    ``ValueError`` when *out* is an input or in an input directory, when it or its manifest is
    there and is no regular file (a device, a pipe, a symlink), or with *split* a directory
    that is not empty.
    """
    out_name = _name(out)
    manifest = os.path.join(out_name, "manifest.jsonl") if split else out_name + ".manifest.jsonl"
    names = _session_files(sources, {os.path.realpath(out_name), os.path.realpath(manifest)})
    for name in () if split else (out_name, manifest):
        _check_replaceable(name)
    target = _SplitOutput(out_name) if split else _JoinedOutput(out_name)
    try:
        entries = _export_files(names, target, prefix, max_line_bytes, progress)
        target.commit(manifest, b"".join(_manifest_line(entry) for entry in entries))
    except BaseException as exc:
        target.abandon()
        if isinstance(exc, _OutputError):  # the input was read well: the output is at fault
            raise exc.error from None
        raise
    return entries


def _replaceable(name: str) -> bool:
    """Whether *name* is new or a regular file (not a symlink): what a rename may replace."""
    try:
        return stat.S_ISREG(os.lstat(name).st_mode)
    except FileNotFoundError:
        return True


def _check_replaceable(name: str) -> None:
    """``ValueError`` unless *name* is free or a regular file, which an export replaces by
    rename: never a device, a pipe, a symlink or a directory."""
    if not _replaceable(name):
        raise ValueError(f"{name} is not a regular file: an export replaces only a regular file")


def _export_files(
    names: List[str],
    target: _Output,
    prefix: bool,
    max_line_bytes: int,
    progress: Optional[Callable[[int, int], object]],
) -> List[Dict[str, Any]]:
    """The manifest entries of *names*, whose lines go to *target*: every valid file's in
    order, then with *prefix* the invalid files' prefixes."""
    sizes = [_size_or_zero(name) for name in names]
    read_before = 0
    entries: List[Dict[str, Any]] = []
    exported: Dict[str, str] = {}  # session_id -> the file it was copied from
    for index, name in enumerate(names):
        if progress is not None:
            progress(read_before, sum(sizes))
        entries.append(_export_file(name, target.part(index), False, max_line_bytes, exported))
        read_before += sizes[index]
    for index, entry in enumerate(entries):  # the valid copy of a session wins over a prefix
        if prefix and not entry["ok"]:
            entries[index] = _export_file(names[index], target.part(index), True, max_line_bytes, exported)
    if progress is not None:
        progress(read_before, sum(sizes))
    return entries


def _session_files(sources: Iterable[Union[str, os.PathLike[str]]], outputs: Set[str]) -> List[str]:
    """The files *sources* name, directories expanded to their ``*.jsonl`` files (sorted, at
    any depth); each file once.  ``ValueError`` if one of *outputs* is, or would be, among them:
    by name, or as the same file reached by a symlink or a hard link."""
    names, seen = [], set()
    same = {_file_id(output): output for output in outputs} if outputs else {}
    same.pop(None, None)
    for source in sources:
        name = _name(source)
        if os.path.isdir(name):
            inside = [
                output for output in outputs if output.startswith(os.path.join(os.path.realpath(name), ""))
            ]
            if inside:
                raise ValueError(f"{name} holds the export's own output {min(inside)}: write it elsewhere")
            found = sorted(
                os.path.join(folder, file)
                for folder, _, files in os.walk(name)
                for file in files
                if file.endswith(".jsonl") and os.path.isfile(os.path.join(folder, file))  # no FIFO
            )
        elif os.path.realpath(name) in outputs:
            raise ValueError(f"{name} is the export's own output")
        else:
            found = [name]
        for file in found:
            key = os.path.realpath(file)
            output = key if key in outputs else same.get(_file_id(file))
            if output is not None:
                raise ValueError(f"{file} is the export's own output {output}: write it elsewhere")
            if key not in seen:
                seen.add(key)
                names.append(file)
    return names


def _file_id(name: str) -> Optional[Tuple[int, int]]:
    """The device and inode of the file at *name*, which links and symlinks share."""
    try:
        info = os.stat(name)
    except OSError:
        return None
    return info.st_dev, info.st_ino


def _size_or_zero(name: str) -> int:
    try:
        return os.stat(name).st_size
    except OSError:
        return 0  # reported when it is read


def _export_file(
    name: str, part: _Part, prefix: bool, max_line_bytes: int, exported: Dict[str, str]
) -> Dict[str, Any]:
    """Copy one file's records to *part*; its manifest entry."""
    lines = _CopiedLines(part.write)
    entry = _copied(name, lines, max_line_bytes)
    session_id = lines.session_id() if entry["ok"] or prefix else None
    return _placed(entry, session_id, part, lines.copied, lines.longest, exported)


def _copied(name: str, lines: _CopiedLines, max_line_bytes: int) -> Dict[str, Any]:
    """Read *name* through *lines*, which copy each record that passes; ``validate --json``'s
    fields for it."""
    tally = _Summarizer()
    try:
        with builtins.open(name, "rb", _READ_BUFFER) as f:
            result = lines.read(f, name, max_line_bytes, tally)
    except _OutputError:
        raise
    except (FormatError, OSError) as exc:
        return _failure_fields(name, exc)
    return _valid_fields(name, result, tally)


_NOT_COPIED = {
    "out": None,
    "out_start": None,
    "out_end": None,
    "out_first_line": None,
    "out_last_line": None,
    "out_records": 0,
    "longest_line": 0,
}


def _placed(
    entry: Dict[str, Any],
    session_id: Optional[str],
    part: _Part,
    records: int,
    longest: int,
    exported: Dict[str, str],
) -> Dict[str, Any]:
    """*entry* with where the lines of *session_id* went in *part*: kept unless none were
    copied (``None``) or that session was exported from another file already."""
    duplicate_of = exported.get(session_id or "")
    if session_id is not None and duplicate_of is None:
        exported[session_id] = entry["file"]
        entry.update(part.keep(records), longest_line=longest, duplicate_of=None)
    else:
        part.drop()
        entry.update(_NOT_COPIED, duplicate_of=duplicate_of)
    return entry


def _manifest_line(entry: Dict[str, Any]) -> bytes:
    return json.dumps(entry, allow_nan=False).encode() + b"\n"  # ASCII: any file name fits


class _CopiedLines:
    """The lines of a binary file, read no further than its size when opened (what a writer
    appends meanwhile is left for the next export), each written out by *write* once the
    reader has accepted it: that is when the reader asks for the next line, as it does only
    after the one before passed every rule and was visited."""

    def __init__(self, write: Callable[[bytes], object]) -> None:
        self._write = write
        self._f: BinaryIO = io.BytesIO()
        self._left = 0
        self._last = self._first = b""
        self.copied = 0
        self.longest = 0

    def read(
        self, f: BinaryIO, name: str, max_line_bytes: int, visit: Callable[[Record], object]
    ) -> ReadResult:
        """``read`` of *f* up to its present size, copying each record that passes."""
        self._f = f
        self._left = os.fstat(f.fileno()).st_size
        return _read(self, name, max_line_bytes, visit)

    def tell(self) -> int:
        return self._f.tell()

    def readline(self, size: int = -1, /) -> bytes:
        line = self._last
        if line:
            try:
                self._write(line)
            except OSError as exc:
                raise _OutputError(exc) from exc
            if not self.copied:
                self._first = line
            self.copied += 1
            if len(line) > self.longest:
                self.longest = len(line)
        self._last = self._f.readline(self._left if size < 0 else min(size, self._left))
        self._left -= len(self._last)
        return self._last

    def session_id(self) -> Optional[str]:
        """The session of the lines copied (``None`` when none were)."""
        return json.loads(self._first)["session_id"] if self.copied else None


class _Part(Protocol):
    """Where one input file's records go: *write* is the open file's."""

    write: Callable[[bytes], object]

    def keep(self, records: int) -> Dict[str, Any]: ...

    def drop(self) -> None: ...


class _JoinedOutput:
    """Every input's records in one file, written as ``OUT.<random>.tmp`` until committed."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._temp = f"{name}.{_new_id()[:12]}.tmp"
        self._file = _new_file(self._temp)
        self.write: Callable[[bytes], object] = self._file.write
        self._start = 0
        self._lines = 0

    def part(self, index: int) -> _Part:
        self._start = self._file.tell()
        return self

    def keep(self, records: int) -> Dict[str, Any]:
        first = self._lines + 1
        self._lines += records
        span = {"out": self._name, "out_start": self._start, "out_end": self._file.tell()}
        return dict(span, out_first_line=first, out_last_line=self._lines, out_records=records)

    def drop(self) -> None:
        self._file.seek(self._start)
        self._file.truncate()

    def commit(self, manifest: str, entries: bytes) -> None:
        _finish(self._file)
        with _publishing(self._name):
            _replace_with(manifest, entries, lambda: os.replace(self._temp, self._name))

    def abandon(self) -> None:
        with contextlib.suppress(OSError):  # what a failed write left in the buffer fails again
            self._file.close()
        with contextlib.suppress(OSError):
            os.unlink(self._temp)


class _SplitOutput:
    """One part file per input in the directory *name*, built as ``NAME.<random>.tmp``."""

    def __init__(self, name: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            if os.listdir(name):
                raise ValueError(f"{name} is not empty: export --split makes a new directory")
        self._name = name
        self._temp = f"{name}.{_new_id()[:12]}.tmp"
        os.mkdir(self._temp, 0o700)
        self._file: Optional[BinaryIO] = None
        self._part = ""

    def part(self, index: int) -> _Part:
        self._part = f"part-{index:05d}.jsonl"
        self._file = _new_file(os.path.join(self._temp, self._part))
        self.write: Callable[[bytes], object] = self._file.write
        return self

    def keep(self, records: int) -> Dict[str, Any]:
        assert self._file is not None
        end = self._file.tell()
        _finish(self._file)
        span = {"out": os.path.join(self._name, self._part), "out_start": 0, "out_end": end}
        return dict(span, out_first_line=1, out_last_line=records, out_records=records)

    def drop(self) -> None:
        assert self._file is not None
        self._file.close()
        os.unlink(os.path.join(self._temp, self._part))

    def commit(self, manifest: str, entries: bytes) -> None:
        manifest_file = _new_file(os.path.join(self._temp, os.path.basename(manifest)))
        manifest_file.write(entries)
        _finish(manifest_file)
        _sync_directory(os.path.join(self._temp, "manifest.jsonl"))  # the folder itself
        with _publishing(self._name):
            with contextlib.suppress(FileNotFoundError):
                os.rmdir(self._name)  # empty, as checked: Windows renames onto no directory
            os.replace(self._temp, self._name)
        _sync_directory(self._name)

    def abandon(self) -> None:
        if self._file is not None:
            with contextlib.suppress(OSError):  # as in _JoinedOutput
                self._file.close()
        for file in os.listdir(self._temp):
            os.unlink(os.path.join(self._temp, file))
        os.rmdir(self._temp)


_Output = Union[_JoinedOutput, _SplitOutput]


if sys.platform == "win32":

    def _publishing(name: str) -> Any:
        """Nothing to hold: Windows cannot open a folder to lock it."""
        return contextlib.nullcontext()

else:
    import fcntl

    @contextlib.contextmanager
    def _publishing(name: str) -> Iterator[None]:
        """Hold the folder of *name* locked: two exports that publish there at once put
        their outputs and manifests in place one after the other, never one's data with the
        other's manifest.  Held only while publishing, a moment: an export elsewhere in the
        same folder waits that long."""
        fd = os.open(os.path.dirname(os.path.abspath(name)), os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)


def _new_file(name: str, mode: int = 0o600) -> BinaryIO:
    fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _O_BINARY, mode)
    return builtins.open(fd, "wb", _READ_BUFFER)


def _finish(f: BinaryIO) -> None:
    """Flush, sync and close *f*."""
    with f:
        f.flush()
        _sync(f.fileno())


def _replace_with(manifest: str, entries: bytes, rename: Callable[[], None]) -> None:
    """Put the joined output in place with *rename*, then the new *manifest*; a stale
    manifest is removed first, so a crash in between leaves an output without one."""
    temp = f"{manifest}.{_new_id()[:12]}.tmp"
    f = _new_file(temp)
    try:
        f.write(entries)
        _finish(f)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(manifest)
        _sync_directory(manifest)
        rename()
        os.replace(temp, manifest)
    except BaseException:
        f.close()
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise
    _sync_directory(manifest)


def _no_session_file(args: Any) -> bool:
    """Whether *args.files* name no file to read (folders without a ``*.jsonl`` file), said
    on stderr: a command that did nothing must not look done."""
    if _session_files(args.files, set()):
        return False
    named = " ".join(_shell_word(name) for name in args.files)
    _print_error(
        f"{args.prog} {args.command}: no session file in {named} (a folder's *.jsonl files are read)"
    )
    return True


def _export_command(args: Any) -> int:
    if _no_session_file(args):
        return 1
    try:
        entries = export(
            args.files,
            args.out,
            split=args.split,
            prefix=args.prefix,
            max_line_bytes=args.max_line_bytes,
            progress=_show_progress if sys.stderr.isatty() else None,
        )
    except ValueError as exc:
        _print_error(f"{args.prog} export: error: {exc}")
        return 2
    for entry in entries:
        if not entry["ok"]:
            _print_error(_failure_text(entry))
        if entry["duplicate_of"] is not None:
            _print_error(f"{entry['file']}: left out: its session was exported from {entry['duplicate_of']}")
        elif entry["out_records"] and not entry["ok"]:
            records = _count(entry["out_records"], "record")
            _print_error(f"{entry['file']}: exported the {records} before line {entry['line']}")
    copied = [entry for entry in entries if entry["out_records"]]
    _print_text(
        f"{args.out}: {_count(sum(entry['out_records'] for entry in copied), 'record')} of "
        f"{_count(len(copied), 'file')} ({len(entries) - len(copied)} left out)"
    )
    return 0 if all(entry["ok"] and entry["duplicate_of"] is None for entry in entries) else 1


def _show_progress(done: int, total: int) -> None:
    if done < total:
        print(
            f"\rexport: {done * 100 // total}% of {total / 1e6:.1f} MB", end="", file=sys.stderr, flush=True
        )
    else:
        print("\r\033[K", end="", file=sys.stderr, flush=True)  # erase the line


# ---------------------------------------------------------------------------- html page: what is read
# ``python -m session html FILE``: one static page, nothing fetched.  Two streaming passes:
# the first (_Facts, in this section) keeps a few numbers per call (for the header, waterfall
# and chart) and compares each model request with the previous one by hashes of its messages;
# the second (_Page, below) reads the records again at their offsets, call by call, and draws
# them.  Between them, what the page decides from the facts: which failures recovered, where
# cards are left out, which compactions share a mark.  Markup comes only from the literals of
# the drawing section and integers; every value from the file goes through _h.  The modules
# only the page needs are imported where they are used: every other command's start up would pay.

_PAGE_FIELD = 2000  # characters of one value shown inline, by default
_PAGE_BUDGET = 16 << 20  # bytes of page, by default
_PAGE_FOLD = 400  # a value longer than this, or of more lines than _PAGE_FOLD_LINES, is folded
_PAGE_FOLD_LINES = 8
_PAGE_NAME = 200  # characters of a name, id or key shown
_PAGE_LIST = 100  # failed attempts and gaps listed in the header, at most
_PAGE_BARS = 1000  # bars of the token chart, at most (more calls share a bar)
_PAGE_TALK = 300  # characters of a text shown in the conversation
_PAGE_SAID = 5  # new user and system messages of a request shown in the conversation
_PAGE_RUN = 200  # attempts of a run whose waterfall starts unfolded, at most
_PAGE_TURNS = 50  # turns of a run listed unfolded in the navigation, at most
_PAGE_IMAGE = 4 << 20  # characters of an image's base64 shown, at most
_PAGE_SAYS = 2000  # characters of a run's question and answer shown on the first screen
_PAGE_ID = 12  # characters of a long id shown (the whole id a click away)
_ENDS = {"model_exec_end", "tool_exec_end", "context_compacted", "context_prepare_end"}  # end a call
_V = TypeVar("_V")
_FAILED, _ENDED = 1, 2  # the flags of a call (_Calls.flags)


def _id_key(text: str) -> bytes:
    """An id as the page keeps it, as UTF-8 (a lone surrogate, which JSON can hold, as well)."""
    return text.encode("utf-8", "surrogatepass")


class _Calls:
    """Every call attempt the page meets, by number in the order met, column by column: one
    array a field (an object an attempt, with its number and id, took some 250 bytes; its
    records' seqs and offsets as lists, 40 bytes an int).  Names, kinds, turns and attempt
    numbers, which repeat, are kept once each, in *pool*: their columns hold places there.
    A call's records are chained: each one's *following* is the index of its call's next
    record, -1 for its last."""

    def __init__(self) -> None:
        self.seqs = array.array("q")  # of each record of a call, in the order read
        self.offsets = array.array("q")
        self.following = array.array("q")
        self.first = array.array("q")  # of each call: the index of its first record, ...
        self.last = array.array("q")  # ... and of its last
        self.start = array.array("d")  # POSIX seconds of its earliest record, NaN for none
        self.end = array.array("d")
        self.pool: List[Any] = [""]  # each name, kind, turn and attempt number met, once
        self._places: Dict[Any, int] = {"": 0}  # where each is in the pool
        self.run_id = array.array("i")  # places in the pool
        self.turn = array.array("i")
        self.kind = array.array("i")
        self.attempt = array.array("i")
        self.name = array.array("i")  # a tool call's tool
        self.model = array.array("i")  # provider and model, as a model call's usage says
        self.error_type = array.array("i")  # as its error names it
        self.flags = bytearray()  # _FAILED, _ENDED (a record ended it: its process may have ended during it)
        self.cost = array.array("d")  # in USD, as its usage says; NaN for none
        self.model_call = array.array("q")  # the latest model call of its run and id met up to it, -1 none
        self.asker = array.array("q")  # the latest call its parent id named when it began, -1 for none
        self.parents: Dict[int, str] = {}  # the parent ids that named no call
        self.reasons: Dict[int, str] = {}  # why each failed call failed: its error, shortened
        self.tool_ids: Dict[int, str] = {}  # of the tool calls whose tool_id is not their id
        self._ids = bytearray()  # each call's id, as _id_key makes it, ...
        self._id_at = array.array("q", [0])  # ... from here to the next

    def __len__(self) -> int:
        return len(self.first)

    def pooled(self, value: Any) -> int:
        """The place of *value* in the pool, added if it is new."""
        place = self._places.get(value)
        if place is None:
            place = self._places[value] = len(self.pool)
            self.pool.append(value)
        return place

    def place(self, value: Any) -> Optional[int]:
        """The place of *value* in the pool, if the page met it."""
        return self._places.get(value)

    def add(self, run: int, turn: Any, execution: Execution) -> int:
        """A new call's number."""
        self.run_id.append(run)
        self.turn.append(self.pooled(turn))
        self.kind.append(self.pooled(execution.kind))
        self.attempt.append(self.pooled(execution.attempt))
        for unnamed in (self.name, self.model, self.error_type):
            unnamed.append(0)  # the place of ""
        for numbers in (self.first, self.last, self.model_call, self.asker):
            numbers.append(-1)
        for moments in (self.start, self.end, self.cost):
            moments.append(math.nan)
        self.flags.append(0)
        self._ids += _id_key(execution.id)
        self._id_at.append(len(self._ids))
        return len(self.first) - 1

    def record(self, number: int, seq: int, offset: int, moment: Optional[float]) -> None:
        """A record of the call *number*, at *moment* if its time is one."""
        at = len(self.seqs)
        self.seqs.append(seq)
        self.offsets.append(offset)
        self.following.append(-1)
        if self.last[number] < 0:
            self.first[number] = at
        else:
            self.following[self.last[number]] = at
        self.last[number] = at
        if moment is not None:
            start, end = self.start[number], self.end[number]
            self.start[number] = moment if math.isnan(start) else min(start, moment)
            self.end[number] = moment if math.isnan(end) else max(end, moment)

    def records(self, number: int) -> Iterator[int]:
        """The indexes of the records of the call *number*, in order."""
        at = self.first[number]
        while at >= 0:
            yield at
            at = self.following[at]

    def id(self, number: int) -> bytes:
        return bytes(self._ids[self._id_at[number] : self._id_at[number + 1]])

    def key(self, number: int) -> Tuple[int, bytes]:
        """What finds the call *number*: its run's place and its id."""
        return self.run_id[number], self.id(number)

    def tool_key(self, number: int) -> Tuple[int, bytes]:
        """What finds the tool call *number* by the tool call id its model sent."""
        tool_id = self.tool_ids.get(number)
        return self.run_id[number], self.id(number) if tool_id is None else _id_key(tool_id)


class _Table:
    """Call numbers by what *key* makes of them (a run and an id), the latest of each: an
    open-addressing table at most half full, 8 bytes a slot (a dictionary took some 100 bytes
    an entry, its key's string beside).  The key asked for last is kept apart with its number:
    a call's records often come in a row."""

    def __init__(self, key: Callable[[int], Tuple[int, bytes]]) -> None:
        self.key = key
        self._slots = array.array("q", [-1]) * 8  # a number, at its key's hash or after; -1: free
        self._count = 0
        self._last: Tuple[Tuple[int, bytes], int] = ((-1, b""), -1)

    def _at(self, key: Tuple[int, bytes]) -> int:
        """The slot of *key*, or the free slot where it goes."""
        slots = self._slots
        mask = len(slots) - 1
        at = hash(key) & mask
        while slots[at] >= 0 and self.key(slots[at]) != key:
            at = (at + 1) & mask
        return at

    def _free(self, key_hash: int) -> int:
        """The first free slot at or after the slot of *key_hash* (the keys moved to a larger
        table differ from each other: none need comparing)."""
        slots = self._slots
        mask = len(slots) - 1
        at = key_hash & mask
        while slots[at] >= 0:
            at = (at + 1) & mask
        return at

    def get(self, key: Tuple[int, bytes]) -> int:
        """The latest number of *key*, -1 for none."""
        last, number = self._last
        if key != last:
            number = self._slots[self._at(key)]
            self._last = key, number
        return number

    def put(self, number: int) -> None:
        """*number* as the latest of its key."""
        key = self.key(number)
        at = self._at(key)
        if self._slots[at] < 0:
            self._count += 1
        self._slots[at], self._last = number, (key, number)
        if 2 * self._count > len(self._slots):
            old, self._slots = self._slots, array.array("q", [-1]) * (2 * len(self._slots))
            for kept in old:
                if kept >= 0:
                    self._slots[self._free(hash(self.key(kept)))] = kept


class _Pooled(Generic[_V]):
    """A field of _Attempt: its call's entry in the _Calls column of the field's name, a place
    in the pool."""

    def __set_name__(self, owner: Any, name: str) -> None:
        self.column = name

    def __get__(self, attempt: _Attempt, owner: Any) -> _V:
        calls = attempt.calls
        return calls.pool[getattr(calls, self.column)[attempt.number]]  # type: ignore[no-any-return]


class _Flag:
    """A flag of _Attempt: a bit of its call's entry in _Calls.flags."""

    def __init__(self, bit: int) -> None:
        self.bit = bit

    def __get__(self, attempt: _Attempt, owner: Any) -> bool:
        return bool(attempt.calls.flags[attempt.number] & self.bit)


def _unless_nan(number: float) -> Optional[float]:
    """A number of _Calls' float columns, None for NaN (what they hold for none)."""
    return None if math.isnan(number) else number


class _Attempt:
    """One call attempt the page met, as the drawing asks of it: its entries in the columns
    of *calls*, under its *number* (made when asked for: one object an attempt took 160 bytes)."""

    __slots__ = ("calls", "number")
    run_id = _Pooled[str]()
    turn = _Pooled[int]()
    kind = _Pooled[str]()
    attempt = _Pooled[int]()
    name = _Pooled[str]()
    model = _Pooled[str]()
    error_type = _Pooled[str]()
    failed = _Flag(_FAILED)
    ended = _Flag(_ENDED)

    def __init__(self, calls: _Calls, number: int) -> None:
        self.calls = calls
        self.number = number

    @property
    def id(self) -> str:
        return self.calls.id(self.number).decode("utf-8", "surrogatepass")

    @property
    def reason(self) -> str:
        return self.calls.reasons.get(self.number, "")

    @property
    def cost(self) -> Optional[float]:
        return _unless_nan(self.calls.cost[self.number])

    @property
    def parent(self) -> str:
        """The id of the call that asked for it, as its execution names it; "" for none."""
        asker = self.calls.asker[self.number]
        return _Attempt(self.calls, asker).id if asker >= 0 else self.calls.parents.get(self.number, "")

    @property
    def start(self) -> Optional[float]:
        return _unless_nan(self.calls.start[self.number])

    @property
    def end(self) -> Optional[float]:
        return _unless_nan(self.calls.end[self.number])

    @property
    def seconds(self) -> float:
        return (self.end or 0.0) - (self.start or 0.0)

    @property
    def seqs(self) -> array.array[int]:
        return array.array("q", [self.calls.seqs[at] for at in self.calls.records(self.number)])

    @property
    def offsets(self) -> array.array[int]:
        return array.array("q", [self.calls.offsets[at] for at in self.calls.records(self.number)])


class _Items:
    """The items of the page in the order read, each a call attempt or a record of no call,
    in one array: a call as its number, a record as ``~seq`` (an object an item took 8 bytes
    and more)."""

    def __init__(self, calls: _Calls) -> None:
        self.calls = calls
        self.codes = array.array("q")

    def __len__(self) -> int:
        return len(self.codes)

    def __getitem__(self, n: int) -> Union[int, _Attempt]:
        """The *n*-th item: a call attempt, or the seq of a record of no call."""
        code = self.codes[n]
        return _Attempt(self.calls, code) if code >= 0 else ~code

    def __iter__(self) -> Iterator[Union[int, _Attempt]]:
        return (self[n] for n in range(len(self.codes)))

    def between(self, start: int, end: int) -> Iterator[Union[int, _Attempt]]:
        return (self[n] for n in range(start, end))


class _Input(NamedTuple):
    """Where the page shows each message of a model request, in order, without repeating the
    previous request's: *parts* are ``(start, end)`` slices of the previous request's input
    and message places (the id of the element that shows one: ``msg-`` and the record's seq,
    and for a message shown in a request's card, ``-`` and its index).  Kept as the JSON of
    ``[parts, previous, settings]`` that the page's data block lists (_Facts.requests)."""

    parts: Tuple[Union[Tuple[int, int], str], ...]
    previous: int  # seq of the previous request, 0 for the first
    settings: int  # seq of the request whose card shows its tools and config
    total: int  # messages

    @classmethod
    def unpacked(cls, text: str, total: int) -> _Input:
        parts, previous, settings = json.loads(text)
        parts = tuple(tuple(part) if type(part) is list else part for part in parts)
        return cls(parts, previous, settings, total)


class _Change(NamedTuple):
    """How a model request's messages differ from the previous request's."""

    new: Tuple[Tuple[int, int], ...]  # (index, seq of the record that holds it already, or 0)
    unchanged: int
    dropped: int
    previous: int  # seq of the previous request, 0 for the first
    compacted: bool  # a compaction was recorded since the previous request
    resumed: bool  # the previous request belongs to an earlier run
    same_settings: bool  # tools and config (all but the messages) as in the previous request

    def packed(self) -> array.array[int]:
        """As kept for each request: its numbers in one array (a tuple of tuples of ints
        takes five times the room)."""
        flags = self.compacted | self.resumed << 1 | self.same_settings << 2
        numbers = (self.unchanged, self.dropped, self.previous, flags)
        return array.array("q", [*numbers, *itertools.chain(*self.new)])  # from a list: no room to spare

    @classmethod
    def unpacked(cls, packed: array.array[int]) -> _Change:
        unchanged, dropped, previous, flags = packed[:4]
        new = tuple(zip(packed[4::2], packed[5::2]))
        return cls(new, unchanged, dropped, previous, bool(flags & 1), bool(flags & 2), bool(flags & 4))


class _Requests:
    """What the page keeps of each model request, column by column (an array and a string
    of each took 350 bytes a request): its seq, in the order read, its _Change packed and its
    _Input's JSON."""

    def __init__(self) -> None:
        self.seqs = array.array("q")
        self._changes = array.array("q")  # the changes packed, one after the other, ...
        self._change_at = array.array("q", [0])  # ... each from here to the next
        self._inputs = bytearray()  # the inputs' JSON, likewise
        self._input_at = array.array("q", [0])

    def add(self, seq: int, change: _Change, text: str) -> None:
        self.seqs.append(seq)
        self._changes.extend(change.packed())
        self._change_at.append(len(self._changes))
        self._inputs += text.encode()
        self._input_at.append(len(self._inputs))

    def __contains__(self, seq: int) -> bool:
        return self._index(seq) is not None

    def _index(self, seq: int) -> Optional[int]:
        at = bisect.bisect_left(self.seqs, seq)
        return at if at < len(self.seqs) and self.seqs[at] == seq else None

    def change(self, seq: int) -> Optional[_Change]:
        at = self._index(seq)
        if at is None:
            return None
        return _Change.unpacked(self._changes[self._change_at[at] : self._change_at[at + 1]])

    def input_text(self, index: int) -> str:
        """The JSON of the input of the *index*-th request."""
        return self._inputs[self._input_at[index] : self._input_at[index + 1]].decode()

    def input(self, seq: int) -> Optional[str]:
        at = self._index(seq)
        return None if at is None else self.input_text(at)


_DIGEST = 16  # bytes of a message's digest: lists of them are kept joined, _DIGEST bytes each


def _digest(value: Any) -> bytes:
    """A stand-in for a message's JSON, to compare messages without keeping them.  (Keys in
    the order written: a writer encodes one message the same way each time.)"""
    try:
        text = _DIGEST_JSON.encode(value)
    except (ValueError, RecursionError):  # too deep to compare: counts as new
        return os.urandom(_DIGEST)
    return hashlib.sha256(text.encode()).digest()[:_DIGEST]


_DIGEST_JSON = json.JSONEncoder(check_circular=False)  # one encoder: dumps() makes one per call


def _split(digests: bytearray, first: int = 0) -> List[bytes]:
    """The digests joined in *digests*, from the *first*, each apart."""
    return [bytes(digests[at : at + _DIGEST]) for at in range(first * _DIGEST, len(digests), _DIGEST)]


def _beyond(before: List[List[int]], ranges: List[List[int]]) -> Optional[List[List[int]]]:
    """The message ranges a version-2 request refers to beyond all those of the request
    *before* it, its last one carried on (as a writer carries on a context that grew), as
    ranges; None when it does not refer to all of those."""
    last = len(before) - 1
    if last < 0 or len(ranges) <= last or ranges[:last] != before[:last]:
        return None
    (first, end), (start, stop) = before[last], ranges[last]
    if start != first or stop < end:
        return None
    return [[end + 1, stop], *ranges[last + 1 :]]  # the first empty when only later ranges are new


def _amount(value: Any) -> Optional[float]:
    """*value*, an amount from a file, as a finite float; ``None`` for anything else (a
    string, or a number beyond a double, which a hostile file may hold)."""
    if type(value) is not int and type(value) is not float:
        return None
    try:
        amount = float(value)
    except OverflowError:
        return None
    return amount if math.isfinite(amount) else None


def _seconds(time: str) -> Optional[float]:
    try:
        return _parse_rfc3339(time).timestamp()
    except _CodecFault:
        return None


def _message_value(message: Any) -> Optional[Dict[str, Any]]:
    """The fields of a codec-encoded message (tagged or plain) with a content list, else None."""
    value = message.get("value") if type(message) is dict and "$type" in message else message
    if type(value) is dict and type(value.get("content")) is list:
        return value
    return None


def _role(message: Any) -> Any:
    value = _message_value(message)
    return value.get("role") if value is not None else None


def _text_of(message: Any) -> str:
    """The text blocks of a codec-encoded message, a blank line between two."""
    value = _message_value(message)
    blocks = value["content"] if value is not None else []
    texts = [block.get("text") for block in blocks if type(block) is dict and block.get("type") == "text"]
    return "\n\n".join(text for text in texts if type(text) is str and text)


class _Said(NamedTuple):
    """A text the first screen shows: the record that holds it, its first _PAGE_SAYS
    characters, and how many it has in all."""

    seq: int
    text: str
    length: int


class _RunFacts:
    """What the first screen says of one run: its first user message, its last answer (the
    text of its last successful model reply that has some), and its token counts."""

    __slots__ = ("answered", "asked", "tokens")

    def __init__(self) -> None:
        self.asked: Optional[_Said] = None
        self.answered: Optional[_Said] = None
        self.tokens: Dict[str, int] = {}  # input and output tokens of its model calls


class _Facts:
    """The first pass: everything the page shows before the records, in O(calls) memory."""

    def __init__(self, index: _Index) -> None:
        self.index = index  # of a version-2 file's messages: the requests come with theirs
        self._summarizer = _Summarizer()
        self.calls = _Calls()  # each call: what its records say of it, where they are, its span
        self.items = _Items(self.calls)  # a call or a record of no call, in order
        self._lone_seqs = array.array("q")  # the records of no call: their seqs and offsets
        self._lone_offsets = array.array("q")
        self._latest = _Table(self.calls.key)  # (run, execution id) -> its latest attempt
        self._tools = _Table(self.calls.tool_key)  # (run, tool call id) -> its latest attempt
        self.replaced: Dict[Tuple[int, str, int], int] = {}  # (run, id, attempt) -> number: not the latest
        self.requests = _Requests()  # what changed in each model request, where its messages are shown
        # of each turn_start: its run's and its turn's places in the pool, and its seq
        self._turn_starts = array.array("q")
        self._same = array.array("q")  # message records holding a message an earlier one has, ...
        self._same_as = array.array("q")  # ... and that earlier one
        self.token_seqs = array.array("q")  # of each model call that reports its input tokens, ...
        self.tokens = array.array("q")  # ... and those tokens (a count beyond 64 bits not: as the summary)
        self.compactions: List[int] = []  # number of model calls before each compaction
        self.turn = 0
        self.runs: Dict[str, _RunFacts] = {}
        self.run_numbers: Dict[str, int] = {}  # run -> 1 for the first run started, and so on
        self.cost = 0.0  # in USD, of the model calls that report it
        self.costed = 0
        self.session_id = ""  # of the records read
        self.records = 0
        self._previous = bytearray()  # the previous request's message digests, joined
        self._written = bytearray()  # those of a version-2 file's message records, joined, ...
        self._written_seqs = array.array("q")  # ... and the records' seqs
        self._ranges: List[List[int]] = []  # the message ranges the previous request refers to
        self._previous_seq = 0
        self._previous_run = ""
        self._settings = b""
        self._compacted = False
        self._recent: Dict[bytes, int] = {}  # digests of messages recorded since that request
        self._places: List[str] = []  # where the page shows each message of that request
        self._settings_seq = 0  # the latest request whose tools or config changed

    def __call__(self, record: Record) -> None:
        self._summarizer(record)
        self.session_id = record.session_id
        self.records += 1
        if record.type in _POOLED and self.index.version > 1:
            if record.type == "message":  # each message once, for the requests that refer to it
                self._written_seqs.append(record.seq)
                self._written += _digest(record.data["message"])
                self._asked(record, record.data["message"], 0)  # its place: the request sending it
            return  # shown in the requests that send them
        if record.type == "turn_start" and type(record.data.get("turn_index")) is int:
            self.turn = record.data["turn_index"]  # kept once, in the calls' pool
            calls = self.calls
            self._turn_starts.extend((calls.pooled(record.run_id or ""), calls.pooled(self.turn), record.seq))
        elif record.type == "run_start":
            self.turn = 0
            self.run_numbers.setdefault(record.run_id or "", len(self.run_numbers) + 1)
        execution = record.data.get("execution")
        if record.run_id is None or execution is None or record.type in _RESERVED:
            self._lone(record)
            return
        try:
            call = _execution_from_json(execution, record)
        except FormatError:  # not a call this page can place: shown as it is
            self._lone(record)
            return
        number = self._attempt(record, call)
        calls, data = self.calls, record.data
        if record.type in _ENDS:
            calls.flags[number] |= _ENDED
        if "error" in data or data.get("is_error") is True:
            self._failed(number, data.get("error", "its result is marked as an error"))
        if calls.pool[calls.kind[number]] == "tool" and type(data.get("tool")) is str:
            calls.name[number] = calls.pooled(data["tool"])
        if record.type == "model_request":
            self._request(record)
        elif record.type == "context_compacted":
            self._compacted = True
            self.compactions.append(len(self.tokens))
        elif "message" in data:
            self._message(record, data["message"], number)

    def _failed(self, number: int, error: Any) -> None:
        """The call *number* failed with *error*: its first reason that says something, and
        its first error type."""
        calls = self.calls
        calls.flags[number] |= _FAILED
        reason = (error if type(error) is str else _error_text(error))[:_PAGE_NAME]
        if reason:
            calls.reasons.setdefault(number, reason)
        kind = error.get("type") if type(error) is dict else None
        if type(kind) is str and kind and not calls.error_type[number]:
            calls.error_type[number] = calls.pooled(kind[:_PAGE_NAME])

    def _lone(self, record: Record) -> None:
        """*record*, of no call, as an item: its seq (a tuple of it and its offset took 88 bytes more)."""
        self.items.codes.append(~record.seq)
        self._lone_seqs.append(record.seq)
        self._lone_offsets.append(record.offset)

    def _attempt(self, record: Record, execution: Execution) -> int:
        """The number of the call attempt *record* is of, made when it is new, with *record*
        placed in it."""
        calls = self.calls
        run = calls.pooled(record.run_id or "")
        latest = self._latest.get((run, _id_key(execution.id)))
        if latest >= 0 and calls.pool[calls.attempt[latest]] == execution.attempt:
            number = latest
        else:
            number = self.replaced.get((run, execution.id, execution.attempt), -1)
        if number < 0:
            number = self._new_attempt(record, execution, run, latest)
        calls.record(number, record.seq, record.offset, _seconds(record.time))
        return number

    def _new_attempt(self, record: Record, execution: Execution, run: int, before: int) -> int:
        """A call attempt met first in *record*, of the run *run*, after the attempt *before*
        of its call (-1 for none): its number."""
        calls = self.calls
        number = calls.add(run, execution.turn_index or self.turn, execution)
        if before >= 0:
            self.replaced[run, execution.id, calls.pool[calls.attempt[before]]] = before
            calls.model_call[number] = calls.model_call[before]
        if execution.kind == "model":
            calls.model_call[number] = number
        self._latest.put(number)
        asker = self._latest.get((run, _id_key(execution.parent_id))) if execution.parent_id else -1
        if asker >= 0:
            calls.asker[number] = asker
        elif execution.parent_id:
            calls.parents[number] = execution.parent_id
        self.items.codes.append(number)
        if execution.kind == "tool":
            tool_id = record.data.get("tool_id")
            if type(tool_id) is str and tool_id and tool_id != execution.id:
                calls.tool_ids[number] = tool_id
            self._tools.put(number)
        return number

    def _run(self, record: Record) -> _RunFacts:
        run = self.runs.get(record.run_id or "")
        if run is None:
            run = self.runs[record.run_id or ""] = _RunFacts()
        return run

    def _asked(self, record: Record, message: Any, seq: int) -> None:
        """*message*, new in *record*: the run's question if it is the run's first from the
        user, shown in the record *seq* (0: the next request, which sends it)."""
        run = self._run(record)
        text = _text_of(message) if run.asked is None and _role(message) == "user" else ""
        if text:
            run.asked = _Said(seq, text[:_PAGE_SAYS], len(text))

    def _message(self, record: Record, message: Any, number: int) -> None:
        digest = _digest(message)
        earlier = self._recent.setdefault(digest, record.seq)
        if earlier != record.seq:
            self._same.append(record.seq)
            self._same_as.append(earlier)
        value = _message_value(message)
        usage = value.get("usage") if value is not None else None
        tokens = usage.get("input") if type(usage) is dict else None
        if record.type == "model_exec_end" and type(tokens) is int and 0 <= tokens < 1 << 63:
            self.token_seqs.append(record.seq)
            self.tokens.append(tokens)
        if record.type == "model_exec_end" and type(usage) is dict:
            self._usage(usage, number, self._run(record))
        failed = self.calls.flags[number] & _FAILED
        text = _text_of(message) if record.type == "model_exec_end" and not failed else ""
        if text and _role(message) == "assistant":
            self._run(record).answered = _Said(record.seq, text[:_PAGE_SAYS], len(text))

    def _usage(self, usage: Dict[str, Any], number: int, run: _RunFacts) -> None:
        """The model and cost of a model call, from its usage, and its tokens if it succeeded
        (as the summary counts them)."""
        try:
            counts = _usage_counts(usage) if not self.calls.flags[number] & _FAILED else {}
        except FormatError:  # a count beyond 64 bits: the summary leaves the whole usage out
            counts = {}
        for key in ("input", "output"):
            if key in counts:
                run.tokens[key] = run.tokens.get(key, 0) + counts[key]
        names = [usage.get("model"), usage.get("provider")]
        model = " ".join(name for name in names if type(name) is str and name)
        self.calls.model[number] = self.calls.pooled(model)
        cost = usage.get("cost")
        amounts: Dict[str, Any] = cost if type(cost) is dict else {}
        total = _amount(amounts.get("total"))
        if total is None:
            keys = ("input", "output", "cache_read", "cache_write")
            numbers = [n for n in (_amount(amounts.get(key)) for key in keys) if n is not None]
            total = _amount(sum(numbers)) if numbers else None  # inf: beyond a double too
        if total is not None:
            self.calls.cost[number] = total
            self.cost += total
            self.costed += 1

    def _request(self, record: Record) -> None:
        previous = len(self._previous) // _DIGEST
        digests, grew = self._digests(record)
        total = len(digests) // _DIGEST
        if grew:  # the context grew: the rest is new
            added = _split(digests, previous)
            new = [(index, self._recent.get(digest, 0)) for index, digest in enumerate(added, previous)]
            dropped = 0
        else:
            new, dropped = self._compared(digests)
        self._new_asked(record, new)
        resumed = bool(self._previous_run) and self._previous_run != record.run_id
        request = record.data.get("request")
        settings = _digest(
            {
                **{key: item for key, item in request.items() if key != "messages"},
                "": record.data.get("tools"),
            }
            if type(request) is dict
            else 0
        )
        change = _Change(
            tuple(new),
            total - len(new),
            dropped,
            self._previous_seq,
            self._compacted,
            resumed,
            settings == self._settings,
        )
        if settings != self._settings:
            self._settings_seq = record.seq
        self.requests.add(
            record.seq, change, self._input(record.seq, digests, new, previous if grew else None)
        )
        self._previous, self._previous_seq, self._previous_run = digests, record.seq, record.run_id or ""
        self._settings = settings
        self._compacted = False
        self._recent = {}

    def _new_asked(self, record: Record, new: List[Tuple[int, int]]) -> None:
        """The run's question, from the new messages of a request written whole (a version-2
        file's come from its message records)."""
        run = self._run(record)
        if run.asked is not None and not run.asked.seq:  # a version-2 file's, in its message record
            run.asked = run.asked._replace(seq=record.seq)
        request = record.data.get("request")
        messages = request.get("messages") if type(request) is dict else None
        if type(messages) is not list or run.asked is not None:
            return
        for index, _ in new:
            if index < len(messages):
                self._asked(record, messages[index], record.seq)

    def _input(self, seq: int, digests: bytearray, new: List[Tuple[int, int]], kept: Optional[int]) -> str:
        """Where the page shows each message of the request *seq*, as JSON: a message the previous
        request sent where that one's is, a new one where its card or an earlier record
        shows it (as _CardDrawing.new_messages does).  A context that grew (it starts with all
        *kept* messages of the previous request) costs only its new messages."""
        fresh = {index: f"{earlier}" if earlier else f"{seq}-{index}" for index, earlier in new}
        parts: List[Union[Tuple[int, int], str]] = []
        if kept is not None:
            parts = [(0, kept)] if kept else []
            parts += fresh.values()
            self._places.extend(fresh.values())
        else:
            parts, self._places = self._rearranged(digests, fresh)
        return json.dumps([parts, self._previous_seq, self._settings_seq])

    def _rearranged(
        self, digests: bytearray, fresh: Dict[int, str]
    ) -> Tuple[List[Union[Tuple[int, int], str]], List[str]]:
        """The parts and places of a request that does not send all the previous request
        sent: each message it kept taken from where the previous request had it (the first
        of its copies first), in slices."""
        kept: Dict[bytes, List[int]] = {}  # digest -> the previous request's indexes, latest first
        previous = _split(self._previous)
        for index in range(len(previous) - 1, -1, -1):
            kept.setdefault(previous[index], []).append(index)
        parts: List[Union[Tuple[int, int], str]] = []
        places = []
        for index, digest in enumerate(_split(digests)):
            if index in fresh:
                parts.append(fresh[index])
                places.append(fresh[index])
                continue
            source = kept[digest].pop()
            places.append(self._places[source])
            last = parts[-1] if parts else ""
            if isinstance(last, tuple) and last[1] == source:
                parts[-1] = (last[0], source + 1)
            else:
                parts.append((source, source + 1))
        return parts, places

    def _digests(self, record: Record) -> Tuple[bytearray, bool]:
        """The digests of the messages the request *record* sends, joined, and whether it
        sends all the previous request sent, then more.  A version-2 file's are read once from
        each message record (the request as written refers to them), and a request that refers
        to the previous one's ranges and more costs only its new messages: the previous
        request's digests, extended.  Else each message's own digest."""
        ranges = record.data.get("messages")
        if self.index.version > 1 and type(ranges) is list:
            more, self._ranges = _beyond(self._ranges, ranges), ranges
            if more is not None:
                self._previous += b"".join(map(self._written_digest, self.index.message_seqs(more)))
                return self._previous, True
            digests = bytearray(b"".join(map(self._written_digest, self.index.message_seqs(ranges))))
        else:  # written whole (a redact hook may reshape a request): the next starts over
            self._ranges = []
            request = record.data.get("request")
            messages = request.get("messages") if type(request) is dict else None
            digests = bytearray(b"".join(map(_digest, messages)) if type(messages) is list else b"")
        return digests, digests[: len(self._previous)] == self._previous

    def _written_digest(self, seq: int) -> bytes:
        """The digest of the message record *seq* of a version-2 file."""
        at = bisect.bisect_left(self._written_seqs, seq) * _DIGEST
        return bytes(self._written[at : at + _DIGEST])

    def _compared(self, digests: bytearray) -> Tuple[List[Tuple[int, int]], int]:
        """The messages of *digests* that the previous request did not send (each as many
        times as it sent it), with the record that holds one already; and how many of the
        previous request's it does not send."""
        remaining: Dict[bytes, int] = {}
        for digest in _split(self._previous):
            remaining[digest] = remaining.get(digest, 0) + 1
        new = []
        for index, digest in enumerate(_split(digests)):
            if remaining.get(digest, 0) > 0:
                remaining[digest] -= 1
            else:
                new.append((index, self._recent.get(digest, 0)))
        return new, sum(remaining.values())

    def summary(self, result: ReadResult) -> Summary:
        """The summary of the records read, once they are all read: what only reading them
        needs is let go, for the drawing to have the room."""
        summary = self._summarizer.summary(result)
        self._summarizer = _Summarizer()
        self._previous, self._written, self._written_seqs = bytearray(), bytearray(), array.array("q")
        self._places, self._recent = [], {}
        return summary

    # -- what the drawing asks

    def _found(self, table: _Table, run_id: str, call_id: str) -> int:
        """The latest call of the run *run_id* that *table* finds by *call_id*, -1 for none."""
        run = self.calls.place(run_id)
        return -1 if run is None else table.get((run, _id_key(call_id)))

    def attempt(self, run_id: str, call_id: str, number: int) -> Optional[_Attempt]:
        """The attempt *number* of the call *call_id* of the run *run_id*, if the page met it."""
        calls = self.calls
        latest = self._found(self._latest, run_id, call_id)
        if latest >= 0 and calls.pool[calls.attempt[latest]] != number:
            latest = self.replaced.get((calls.run_id[latest], call_id, number), -1)
        return _Attempt(calls, latest) if latest >= 0 else None

    def model_call(self, run_id: str, call_id: str) -> Optional[_Attempt]:
        """The attempt of the model call *call_id* of the run *run_id* met last."""
        latest = self._found(self._latest, run_id, call_id)
        found = self.calls.model_call[latest] if latest >= 0 else -1
        return _Attempt(self.calls, found) if found >= 0 else None

    def tool_call(self, run_id: str, tool_id: str) -> Optional[_Attempt]:
        """The latest attempt of the tool call that the tool call id *tool_id* of the run
        *run_id* names."""
        found = self._found(self._tools, run_id, tool_id)
        return _Attempt(self.calls, found) if found >= 0 else None

    def places(self, item: Union[int, _Attempt]) -> Iterable[Tuple[int, int]]:
        """The seqs and offsets of the records of one of the items."""
        if isinstance(item, _Attempt):
            return zip(item.seqs, item.offsets)
        return [(item, self._lone_offsets[bisect.bisect_left(self._lone_seqs, item)])]

    def calls_met(self) -> Iterator[_Attempt]:
        """Every call attempt, in the order the page met them."""
        return (_Attempt(self.calls, number) for number in range(len(self.calls)))

    def turn_seqs(self) -> Dict[str, Dict[int, int]]:
        """Run -> turn -> the seq of its first turn_start (a dictionary entry a turn while the
        header is written, where the first pass keeps three numbers)."""
        starts, pool = self._turn_starts, self.calls.pool
        seqs: Dict[str, Dict[int, int]] = {}
        for at in range(0, len(starts), 3):
            seqs.setdefault(pool[starts[at]], {}).setdefault(pool[starts[at + 1]], starts[at + 2])
        return seqs

    def same(self, seq: int) -> Optional[int]:
        """The earlier record that holds the message the record *seq* holds, if one does."""
        at = bisect.bisect_left(self._same, seq)
        return self._same_as[at] if at < len(self._same) and self._same[at] == seq else None

    def change(self, seq: int) -> Optional[_Change]:
        """How the model request *seq* differs from the previous one."""
        return self.requests.change(seq)

    def whole_input(self, seq: int) -> Optional[_Input]:
        """Where the page shows each message of the model request *seq*."""
        text, change = self.requests.input(seq), self.change(seq)
        if text is None or change is None:
            return None
        return _Input.unpacked(text, change.unchanged + len(change.new))


def _item_seqs(item: Union[int, _Attempt]) -> Sequence[int]:
    """The seqs of the records of one of _Facts.items."""
    return item.seqs if isinstance(item, _Attempt) else [item]


def _first_seq(item: Union[int, _Attempt]) -> int:
    return item.seqs[0] if isinstance(item, _Attempt) else item


# ---------------------------------------------------------------------------- html page: what is decided
# From the facts alone: _Plan (the failure triage, the calls of each run and turn, the order in
# which items get their cards); then the runs of cards the budget left out, and how the chart
# groups compactions into marks and labels.


def _recovered(facts: _Facts) -> Set[int]:
    """The failed attempts (their numbers) after which a later attempt of their call succeeded."""
    failed: Dict[Tuple[int, bytes], List[_Attempt]] = {}  # (run, call) -> its failed attempts
    for attempt in facts.calls_met():
        if attempt.failed:
            failed.setdefault(facts.calls.key(attempt.number), []).append(attempt)
    succeeded: Dict[Tuple[int, bytes], int] = {}  # (run, call) -> its last successful attempt
    for attempt in facts.calls_met():
        key = facts.calls.key(attempt.number) if attempt.ended and not attempt.failed else None
        if key in failed:
            succeeded[key] = max(attempt.attempt, succeeded.get(key, attempt.attempt))
    return {
        attempt.number
        for key, attempts in failed.items()
        for attempt in attempts
        if key in succeeded and succeeded[key] > attempt.attempt
    }


def _turn_counts(facts: _Facts) -> Dict[str, Dict[int, Tuple[int, int]]]:
    """The calls and failed calls of each turn of each run (only the header needs them: it
    lets them go before the cards are drawn)."""
    counts: Dict[str, Dict[int, Tuple[int, int]]] = {}
    calls, pool = facts.calls, facts.calls.pool
    for number in range(len(calls)):
        turns, turn = counts.setdefault(pool[calls.run_id[number]], {}), pool[calls.turn[number]]
        count, failed = turns.get(turn, (0, 0))
        failed += calls.flags[number] & _FAILED
        turns[turn] = (count + 1, failed)  # a tuple: a list takes 16 bytes more
    return counts


class _Plan:
    """What the page decides from the facts before it draws: the failure triage (the failed
    attempts by error type, most first, and those a retry recovered), the calls of each
    model, the cost of each run, and the order in which the items get their cards: the first
    and the last, then every failed call, then the others from both ends inwards (the end is
    where failures usually are)."""

    def __init__(self, facts: _Facts) -> None:
        self.recovered = _recovered(facts)
        failures: Dict[str, array.array[int]] = {}  # error type -> the failed attempts' numbers
        self.models: Dict[str, int] = {}  # model -> calls
        self.run_costs: Dict[str, float] = {}  # of the runs whose calls report one
        for attempt in facts.calls_met():
            if attempt.failed:
                failures.setdefault(attempt.error_type, array.array("q")).append(attempt.number)
            if attempt.model:
                self.models[attempt.model] = self.models.get(attempt.model, 0) + 1
            if attempt.cost is not None:
                self.run_costs[attempt.run_id] = self.run_costs.get(attempt.run_id, 0.0) + attempt.cost
        self.failures = sorted(failures.items(), key=lambda group: -len(group[1]))
        self.failed = sum(len(failed) for _, failed in self.failures)
        self.calls = facts.calls
        self.items = facts.items

    def order(self) -> Iterator[int]:
        """The indexes of the items, in the order in which they get their cards (one may come
        twice), made as they are taken: a list of them would take 80 bytes an item."""
        items = self.items
        ends = (n for pair in zip(range(len(items)), range(len(items) - 1, -1, -1)) for n in pair)
        flags = self.calls.flags
        failed = (n for n, code in enumerate(items.codes) if code >= 0 and flags[code] & _FAILED)
        return itertools.chain(itertools.islice(ends, 2), failed, ends)


def _left_out(cards: List[Optional[bytes]]) -> List[Tuple[int, int]]:
    """The runs of cards left out (None), as (start, end) indexes."""
    gaps: List[Tuple[int, int]] = []
    for n, card in enumerate(cards):
        if card is not None:
            continue
        if gaps and gaps[-1][1] == n:
            gaps[-1] = (gaps[-1][0], n + 1)
        else:
            gaps.append((n, n + 1))
    return gaps


def _many(number: int, noun: str) -> str:
    """*number* *noun*s, with thousands separators: "23,283,204 tokens"."""
    return f"{number:,} {noun}" if number == 1 else f"{number:,} {noun}s"


_MARK_GAP = 8  # compactions less than this far apart in the chart share one mark
_CHAR_WIDTH = 7  # of a label's monospace character, its font 11 units high (0.6 em, rounded up)


class _Mark(NamedTuple):
    """One mark above the chart's bars: *compactions* of them, from the one at *x* to the one
    at *last*, after *first_call* to *last_call* model calls."""

    x: float
    last: float
    first_call: int
    last_call: int
    compactions: int


def _marks(compactions: List[Tuple[float, int]]) -> List[_Mark]:
    """The compactions' marks: each (x, calls before it) joins the mark it lies within
    _MARK_GAP of, so no two marks touch however many compactions a pixel holds."""
    marks: List[_Mark] = []
    for x, calls in compactions:
        if marks and x < marks[-1].x + _MARK_GAP:
            mark = marks[-1]
            marks[-1] = mark._replace(last=x, last_call=calls, compactions=mark.compactions + 1)
        else:
            marks.append(_Mark(x, x, calls, calls, 1))
    return marks


def _labels(marks: List[_Mark]) -> List[Tuple[float, float, float, int]]:
    """Where the chart labels its *marks*: (the label's x, the first and last mark's x it
    counts, their compactions).  Every label is as wide as the widest can be, starts at its
    first mark (or where it still fits in the chart) and counts the marks up to the next; a
    mark under a label joins it, so no label runs over another or off the chart."""
    total = sum(mark.compactions for mark in marks)
    room = len(_many(total, "compaction")) * _CHAR_WIDTH + _MARK_GAP
    labels: List[Tuple[float, float, float, int]] = []
    for mark in marks:
        at = max(0.0, min(mark.x - 3, 1000 - room))
        if labels and at < labels[-1][0] + room:
            x, first, _, count = labels[-1]
            labels[-1] = (x, first, mark.last, count + mark.compactions)
        else:
            labels.append((at, mark.x, mark.last, mark.compactions))
    return labels


# ---------------------------------------------------------------------------- html page: what is drawn
# Escaping, the page's output, then its parts in page order: the conversation, the timeline
# (chart and waterfall), the header, and _Page, which draws each record's card within the budget.

# Characters that hide or reorder text: controls (but tab and newline), bidi overrides and
# isolates, zero-width and invisible characters, line separators, lone surrogates, tags.
_HIDDEN = (  # patterns: compiled (and cached) by re when a page is first made
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u00ad\u061c\u115f\u1160\u180e\u200b-\u200f\u202a-\u202e"
    "\u2028\u2029\u2060-\u206f\u3164\ufeff\ufff9-\ufffb\ud800-\udfff\U000e0000-\U000e007f]"
)
_INLINE_HIDDEN = f"[\t\n]|{_HIDDEN}"


def _mark(match: re.Match[str]) -> str:
    return f'<span class="mark">[U+{ord(match.group()):04X}]</span>'


def _h(text: str, inline: bool = False) -> str:
    """*text* escaped for HTML text and attribute values; hidden characters made visible, and
    tabs and line breaks too when *inline* (where HTML would show them as spaces)."""
    import html

    escaped = html.escape(text, quote=True)
    hidden = re.compile(_INLINE_HIDDEN if inline else _HIDDEN)
    return hidden.sub(_mark, escaped) if hidden.search(escaped) else escaped


# iterencode (lazy, unlike dumps) stops after the characters shown: a huge value costs no more
_ONE_LINE = json.JSONEncoder(ensure_ascii=False)
_INDENTED = json.JSONEncoder(ensure_ascii=False, indent=1)


def _json_head(value: Any, encoder: json.JSONEncoder, limit: int) -> Tuple[str, int]:
    """Up to *limit* characters of *value* as *encoder* writes it, encoding no more than
    that; and 0 if that is all of it, else -1."""
    chunks, size = [], 0
    try:
        for chunk in encoder.iterencode(value):
            chunks.append(chunk)
            size += len(chunk)
            if size > limit:
                return "".join(chunks)[:limit], -1
    except (ValueError, RecursionError) as exc:
        return f"(cannot be shown here: {exc})", -1
    return "".join(chunks), 0


def _hs(value: Any) -> str:
    """A name, id, key or role as _h shows it, cut with a visible mark after _PAGE_NAME
    characters (commands and CallRefs keep it whole)."""
    if type(value) is str:
        text, cut = value[:_PAGE_NAME], int(len(value) > _PAGE_NAME)
    else:
        text, cut = _json_head(value, _ONE_LINE, _PAGE_NAME)
    return _h(text, inline=True) + ('<span class="cut">…</span>' if cut else "")


def _content_policy(style: str, script: str = "") -> str:
    """The Content-Security-Policy of a page whose only style is *style* and only script
    *script* (none if empty): nothing else runs, loads or submits, but pictures in data: URLs."""
    import base64
    import hashlib

    def digest(text: str) -> str:
        return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"

    scripts = f"script-src {digest(script)}; " if script else ""
    return (
        f"default-src 'none'; {scripts}style-src {digest(style)}; img-src data:; "
        "base-uri 'none'; form-action 'none'"
    )


def _script_json(value: Any) -> str:
    """JSON that cannot end or confuse the ``<script>`` element holding it."""
    text = json.dumps(value, ensure_ascii=True, sort_keys=True)  # also escapes U+2028, U+2029
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _positions(first: int, count: int) -> str:
    """The places *first* + 1 to *first* + *count* of a list, as a person counts them."""
    return f"{first + 1}" if count == 1 else f"{first + 1} to {first + count}"


def _span(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms" if seconds < 1 else f"{seconds:.3f} s"


# The pictures a page shows, by the bytes they start with: formats browsers decode without
# running anything (not SVG), each checked against its type, so a mislabelled blob is not shown.
_PICTURES = {
    "image/png": (b"\x89PNG\r\n\x1a\n",),
    "image/jpeg": (b"\xff\xd8\xff",),
    "image/gif": (b"GIF87a", b"GIF89a"),
    "image/webp": (b"RIFF",),
}
_BASE64 = "[A-Za-z0-9+/]*={0,2}"


def _picture(mime: Any, data: str) -> bool:
    """Whether *data* is base64 text of a picture of the type *mime* that the page shows."""
    import base64

    starts = _PICTURES.get(mime) if type(mime) is str else None
    if not starts or not data or not re.fullmatch(_BASE64, data) or len(data) % 4:
        return False
    head = base64.b64decode(data[:16])
    if mime == "image/webp" and head[8:12] != b"WEBP":
        return False
    return head.startswith(starts)


def _money(usd: float) -> str:
    return f"${usd:.4f}" if abs(usd) < 1 else f"${usd:,.2f}"


_T = TypeVar("_T")


def _output_step(step: Callable[[], _T]) -> _T:
    """*step*, which opens, writes or places the output: an OSError of it is the output's."""
    try:
        return step()
    except OSError as exc:
        raise _OutputError(exc) from exc


def _link(seq: int, inner: str, target: str = "") -> str:
    """A link to the record *seq* (or to the element *target* in its card) around the markup
    *inner*: a mark that becomes the link when the page is written, or *inner* alone if the
    page leaves that out (_Page.resolve).  (The mark's characters never come from a value: _h
    shows them as [U+0000] and so on.)"""
    return f"\x00{seq}\x03{target}\x01{inner}\x02"


_LINKS = re.compile(b"\x00([0-9]+)\x03([-a-z0-9]*)\x01([^\x02]*)\x02")


class _PageOut:
    """The page as it is made: UTF-8 bytes, counted against the budget and held until it is
    written whole (which records it shows, and so which links lead somewhere, is known only
    at the end; it holds no more than the budget and one card)."""

    def __init__(self, out: BinaryIO, budget: int) -> None:
        self._out = out
        self.budget = budget
        self.size = 0
        self._parts: List[bytes] = []
        self._end = b""

    def write(self, *parts: str) -> None:
        self.put("".join(parts).encode())

    def put(self, data: bytes) -> None:
        """*data*, already encoded: a card is held once, as the bytes it is written as."""
        self._parts.append(data)
        self.size += len(data)

    def later(self) -> int:
        """A place for what is written there later, with fill."""
        self._parts.append(b"")
        return len(self._parts) - 1

    def fill(self, place: int, *parts: bytes) -> None:
        self._parts[place] = b"".join(parts)
        self.size += len(self._parts[place])

    def ending(self, text: str) -> None:
        """*text* to end the page with, counted against the budget from now on."""
        self._end = text.encode()
        self.size += len(self._end)

    def release(self, link: Callable[[re.Match[bytes]], bytes]) -> None:
        """Write the page, each link mark made what *link* returns for it, and its ending."""
        self._parts.append(self._end)
        self._parts.reverse()  # each part let go once written: the page is held once, not twice
        while self._parts:
            data = self._parts.pop()
            resolved = _LINKS.sub(link, data) if b"\x00" in data else data
            _output_step(lambda: self._out.write(resolved))  # noqa: B023 (called at once)


def _kind(attempt: _Attempt) -> str:
    return attempt.kind if attempt.kind in ("model", "tool", "compact") else "other"


def _short(text: str) -> str:
    """*text* for the conversation: its first _PAGE_TALK characters, and a mark if cut."""
    cut = '<span class="cut">…</span>' if len(text) > _PAGE_TALK else ""
    return _h(text[:_PAGE_TALK]) + cut


def _output(value: Any) -> str:
    """A tool's result for the conversation, as text: a string as it is, an object of strings
    as its keys and texts, anything else as indented JSON; cut after _PAGE_SAYS characters
    (the card has it whole) and folded after its first _PAGE_FOLD_LINES lines."""
    if type(value) is dict and value and all(type(text) is str for text in value.values()):
        value = "\n".join(f"{key}: {text}" for key, text in value.items())
    if type(value) is str:
        text, cut = value[:_PAGE_SAYS], len(value) > _PAGE_SAYS
    else:
        text, more = _json_head(value, _INDENTED, _PAGE_SAYS)
        cut = more != 0
    mark = '<span class="cut">… shortened: its card has it whole</span>' if cut else ""
    head = "\n".join(text.split("\n", _PAGE_FOLD_LINES)[:_PAGE_FOLD_LINES])[:_PAGE_FOLD]
    rest = text[len(head) :]
    if not rest:
        return _h(text) + mark
    whole_lines = rest.startswith("\n")  # the head ends with a whole line
    lines = _many(rest.count("\n") + (not whole_lines), "more line")
    rest = rest[whole_lines:]
    return f'{_h(head)}<details class="more"><summary>{lines}</summary>{_h(rest)}{mark}</details>'


def _short_id(value: Any) -> str:
    """An id as a link shows it: a long one cut to its first _PAGE_ID characters (the link
    leads to where it is whole)."""
    if type(value) is str and len(value) > _PAGE_ID + 1:
        return f'<code>{_h(value[:_PAGE_ID], inline=True)}<span class="cut">…</span></code>'
    return f"<code>{_hs(value)}</code>"


def _id(value: Any) -> str:
    """An id shortened as _short_id does, unfolding to the whole id when clicked."""
    short = _short_id(value)
    if short.endswith("</span></code>"):
        return f'<details class="id"><summary>{short}</summary><code>{_hs(value)}</code></details>'
    return short


def _attempt_link(attempt: _Attempt) -> str:
    name = f" {_hs(attempt.name)}" if attempt.name else ""
    return _link(
        attempt.seqs[0],
        f"{_hs(attempt.kind)} {_short_id(attempt.id)}{name} attempt {attempt.attempt}",
    )


class _Conversation:
    """The conversation view: each call or record as one step of what happened, read top to
    bottom (user, assistant with thinking folded, a tool call beside its result, errors in red,
    retries and compactions marked), each linked to its card; texts shortened, the card has
    them whole."""

    _ROLES = ("user", "assistant", "tool", "system")

    def __init__(
        self, facts: _Facts, plan: _Plan, ids: Set[bytes], image: Callable[[Dict[str, Any]], str]
    ) -> None:
        self.facts = facts
        self.ids = ids  # of the page's elements that links may lead to: adds its runs and turns
        self.image = image  # an image block's image, shown as its card shows it
        self.recovered = plan.recovered

    def step(self, item: Union[int, _Attempt], records: List[Record]) -> str:
        if not isinstance(item, _Attempt):
            return self.lone(records[0])
        link = _link(item.seqs[0], f"#{item.seqs[0]}")
        fail = " fail" if item.failed else ""
        retry = self.retry(item)
        if item.kind == "compact":
            return f'<div class="step flow">{link} context compacted</div>\n'
        if item.kind == "tool":
            body = self.tool(item, records)
        else:
            body = "".join(self.said(record) for record in records)
        reason = f'<div class="error">{_hs(item.reason)}</div>' if item.failed else ""
        inputs = [seq for seq in item.seqs if seq in self.facts.requests]
        whole = "".join(f" {_link(seq, 'whole input', f'input-{seq}')}" for seq in inputs[:1])
        head = f'<div class="step {_kind(item)}{fail}"><span class="seq">{link}{whole}</span> {retry}'
        return f"{head}{body}{reason}</div>\n"

    def retry(self, attempt: _Attempt) -> str:
        """A retry's mark, saying whether it succeeded; a failed attempt's, whether a retry did."""
        if attempt.failed and attempt.number in self.recovered:
            again = '<span class="change">recovered by a retry</span> '
        else:
            again = ""
        if attempt.attempt < 2:
            return again
        if attempt.failed:
            return f'<span class="error">retry {attempt.attempt}, failed too</span> {again}'
        if not attempt.ended:
            return f'<span class="error">retry {attempt.attempt}, unfinished</span> '
        return f'<span class="change">retry {attempt.attempt}, succeeded</span> '

    def lone(self, record: Record) -> str:
        link = _link(record.seq, f"#{record.seq}")
        target = f"talk-{record.seq}"
        if record.type == "run_start":
            self.ids.add(target.encode())
            number = self.facts.run_numbers.get(record.run_id or "", 0)
            return f'<h3 class="flow" id="{target}">{link} run {number} {_id(record.run_id)}</h3>\n'
        if record.type == "turn_start" and "turn_index" in record.data:
            self.ids.add(target.encode())
            turn = _hs(record.data["turn_index"])
            return f'<div class="step flow" id="{target}">{link} turn {turn}</div>\n'
        if "error" in record.data:
            error = record.data["error"]
            text = error if type(error) is str else _error_text(error)
            error = f'<span class="error">{_hs(text)}</span>'
            return f'<div class="step fail">{link} {_hs(record.type)}: {error}</div>\n'
        return ""

    def said(self, record: Record) -> str:
        """What a model call's record adds to the conversation: the new user messages of its
        request, the messages it answered with (each once)."""
        if record.type == "model_request":
            change = self.facts.change(record.seq)
            request = record.data.get("request")
            messages = request.get("messages") if type(request) is dict else None
            if change is None or type(messages) is not list:
                return ""
            new = [messages[index] for index, _ in change.new if index < len(messages)]
            said = [message for message in new if _role(message) in ("user", "system")]
            more = len(said) - _PAGE_SAID
            note = (
                f'<div class="cut">and {_count(more, "more new message")} in the card</div>'
                if more > 0
                else ""
            )
            return "".join(self.message(message) for message in said[:_PAGE_SAID]) + note
        if "message" in record.data and self.facts.same(record.seq) is None:
            return self.message(record.data["message"])
        return ""

    def message(self, message: Any) -> str:
        value = _message_value(message)
        if value is None:
            return ""
        role = _role(message)
        parts = []
        for block in value["content"]:
            kind = block.get("type") if type(block) is dict else None
            if kind == "text" and type(block.get("text")) is str:
                parts.append(f"<div>{_short(block['text'])}</div>")
            elif kind == "thinking" and type(block.get("thinking")) is str:
                thinking = _short(block["thinking"])
                parts.append(f'<details class="thinking"><summary>thinking</summary>{thinking}</details>')
            elif kind == "toolCall" and type(block.get("tool_call")) is dict:
                parts.append(self.call(block["tool_call"]))
            elif kind == "image" and type(block.get("image")) is dict:
                parts.append(self.image(block["image"]))
            elif kind == "image":
                parts.append('<div class="image">[image]</div>')
        css = role if role in self._ROLES else "other"
        return f'<div class="say {css}"><span class="role">{_hs(role)}</span>{"".join(parts)}</div>'

    @staticmethod
    def call(call: Dict[str, Any]) -> str:
        """A tool call a model asked for: its arguments on one line, or the text it sent for
        them, flagged, when they did not parse."""
        raw = call.get("args_raw_text")
        if call.get("args_invalid") is True:
            flag = ' <span class="error">(its arguments did not parse)</span>'
            args = raw[:_PAGE_TALK] if type(raw) is str else ""
        else:
            flag, args = "", _json_head(call.get("args"), _ONE_LINE, _PAGE_TALK)[0]
        name = _hs(call.get("name"))
        return f'<div class="call">calls <b>{name}</b>{flag} <code>{_h(args, inline=True)}</code></div>'

    @staticmethod
    def tool(attempt: _Attempt, records: List[Record]) -> str:
        """A tool call beside its result."""
        args, result = None, None
        for record in records:
            args = record.data.get("args", args)
            result = record.data.get("result", result)
        shown = (
            "" if args is None else args if type(args) is str else _json_head(args, _ONE_LINE, _PAGE_TALK)[0]
        )
        name = _hs(attempt.name or attempt.id)
        return (
            f'<div class="pair"><div>tool <b>{name}</b> <code>{_short(shown)}</code></div>'
            f"<div>→ {'' if result is None else _output(result)}</div></div>"
        )


_CHART_FLOOR = 130  # the chart's height in its units (of 1000 wide): labels, marks, bars
_CHART_BARS = 100  # the tallest bar, below the labels (0 to 14), their spans (15) and marks (17 to 27)


def _mark_drawing(mark: _Mark) -> str:
    """A mark: a triangle pointing down at its first compaction (inside the chart), its
    count and calls in its title."""
    after = f"call {mark.first_call:,}"
    if mark.last_call != mark.first_call:
        after = f"calls {mark.first_call:,} to {mark.last_call:,}"
    x = min(max(mark.x, 3), 997)  # the whole triangle in the chart
    return (
        f'<path class="compaction" d="M{x - 3:.1f} 17h6l-3 10z">'
        f"<title>{_many(mark.compactions, 'compaction')} after model {after}</title></path>"
    )


class _Timeline:
    """The charts: input tokens per model call, and each turn's calls to time scale."""

    def __init__(self, facts: _Facts, out: _PageOut) -> None:
        self.facts = facts
        self.out = out

    def chart(self) -> None:
        """Input tokens per successful model call; above the bars, the compactions as marks
        (those too close to tell apart as one mark with their count) and labels where there
        is room."""
        seqs, tokens = self.facts.token_seqs, self.facts.tokens
        write = self.out.write
        write('<section id="chart"><h2>input tokens per model call</h2>\n')
        if not tokens:
            write("<p>no model call reported its input tokens</p></section>\n")
            return
        per_bar = -(-len(tokens) // _PAGE_BARS)
        bars = range(0, len(tokens), per_bar)  # each from its first call
        top = max(tokens) or 1
        width = 1000 / len(bars)
        note = f"; each bar the largest of {per_bar:,} calls" if per_bar > 1 else ""
        compacted = f"; {_many(len(self.facts.compactions), 'compaction')}" if self.facts.compactions else ""
        write(f"<p>{_many(len(tokens), 'call')}, at most {top:,} input tokens{note}{compacted}</p>\n")
        write(f'<svg class="chart" viewBox="0 0 1000 {_CHART_FLOOR}" role="img">')
        for n, start in enumerate(bars):
            most = max(range(start, min(start + per_bar, len(tokens))), key=tokens.__getitem__)
            seq, count = seqs[most], tokens[most]
            height = count * _CHART_BARS // top
            rect = (
                f'<rect class="bar" x="{n * width:.1f}" y="{_CHART_FLOOR - height}" '
                f'width="{max(width - 1, 1):.1f}" height="{height}">'
                f"<title>#{seq}: {count:,} input tokens</title></rect>"
            )
            write(_link(seq, rect))
        marks = _marks([(calls // per_bar * width, calls) for calls in self.facts.compactions])
        for mark in marks:
            write(_mark_drawing(mark))
        for x, first, last, count in _labels(marks):
            write(f'<text x="{x:.1f}" y="11">{_many(count, "compaction")}</text>')
            if last > first:
                write(f'<line class="span" x1="{first:.1f}" y1="15" x2="{last:.1f}" y2="15"/>')
        write("</svg></section>\n")

    def waterfall(self) -> None:
        """Per run and turn, one bar per attempt on the turn's time scale, failures marked,
        retries tied to the attempt they repeat; and the slowest calls."""
        write = self.out.write
        calls = self.facts.calls
        start, end, pool = calls.start, calls.end, calls.pool
        timed = (number for number in range(len(calls)) if not math.isnan(start[number]))
        write('<section id="timeline"><h2>calls over time</h2>\n<p>slowest calls:</p><ol>')
        for number in heapq.nlargest(10, timed, key=lambda n: end[n] - start[n]):
            attempt = _Attempt(calls, number)
            write(f"<li>{_span(attempt.seconds)} {_attempt_link(attempt)}</li>\n")
        write("</ol>\n")
        runs: Dict[str, Dict[int, array.array[int]]] = {}  # run -> turn -> its calls' numbers
        for number in range(len(calls)):
            turns = runs.setdefault(pool[calls.run_id[number]], {})
            turns.setdefault(pool[calls.turn[number]], array.array("q")).append(number)
        limit = self.out.size + self.out.budget // 4  # the rest is for the records
        flags = self.facts.calls.flags
        for run, turns in runs.items():
            count = sum(len(group) for group in turns.values())
            failed = sum(flags[number] & _FAILED for group in turns.values() for number in group)
            write(
                f"<details{' open' if count <= _PAGE_RUN else ''}><summary>run <code>{_hs(run)}</code>: "
                f"{_count(len(turns), 'turn')}, {_count(count, 'attempt')}, {failed} failed</summary>\n"
            )
            full = not all(self.turn(turn, group, limit) for turn, group in turns.items())
            write("</details>\n")
            if full:
                write('<p class="cut">The waterfall stops here, at a quarter of the page budget.</p>')
                break
        write("</section>\n")

    def turn(self, turn: int, numbers: array.array[int], limit: int) -> bool:
        """One turn's waterfall, as many rows as fit below *limit*; False if not all did."""
        group = [_Attempt(self.facts.calls, number) for number in numbers]
        timed = [attempt for attempt in group if attempt.start is not None]
        start = min((a.start or 0.0 for a in timed), default=0.0)
        span = max((a.end or 0.0 for a in timed), default=0.0) - start or 1e-6
        rows: List[str] = []
        size = self.out.size
        ends: Dict[str, Tuple[float, int]] = {}  # execution id -> end x, row of its latest attempt
        for row, attempt in enumerate(group):
            if size >= limit:
                break
            rows.append(self.bar(row, attempt, start, span, ends))
            size += len(rows[-1])
        failed = sum(attempt.failed for attempt in group)
        shown = f", {len(rows)} drawn" if len(rows) < len(group) else ""
        bottom = len(rows) * 18 + 16
        self.out.write(
            f"<details{' open' if len(group) <= 40 else ''}>"
            f"<summary>turn {turn}: {_count(len(group), 'attempt')}"
            f"{shown}, {_span(span)}, {failed} failed</summary>\n"
            f'<svg class="waterfall" viewBox="0 0 1000 {bottom + 4}">',
            *rows,
            f'<text x="300" y="{bottom}">0 s</text><text class="end" x="990" y="{bottom}">'
            f"{_span(span)}</text></svg></details>\n",
        )
        return len(rows) == len(group)

    @staticmethod
    def bar(
        row: int, attempt: _Attempt, start: float, span: float, ends: Dict[str, Tuple[float, int]]
    ) -> str:
        """One attempt's row: its label, and its bar tied to the attempt it retries."""
        y = row * 18 + 2
        call, call_id, number, begun = attempt.kind, attempt.id, attempt.attempt, attempt.start
        kind = call if call in ("model", "tool", "compact") else "other"
        fail = " fail" if attempt.failed else ""
        label = f"{call} {attempt.name or call_id} #{number}{' ✗' if fail else ''}"[:48]
        parts = [f'<text x="0" y="{y + 12}">{_hs(label)}</text>']
        if begun is not None:
            seconds = attempt.seconds
            x = 300 + (begun - start) / span * 690
            width = max(seconds / span * 690, 2)
            parts.append(
                f'<rect class="{kind}{fail}" x="{x:.1f}" y="{y}" width="{width:.1f}" height="14">'
                f"<title>{_hs(call)} {_hs(call_id)} attempt {number}: {_span(seconds)}</title></rect>"
            )
            tied = ends.get(call_id)
            if tied is not None and number > 1:
                parts.append(
                    f'<path class="tie" d="M{tied[0]:.1f} {tied[1] * 18 + 9}L{x:.1f} {y + 7}">'
                    f"<title>retry of attempt {number - 1}</title></path>"
                )
            ends[call_id] = (x + width, row)
        return _link(attempt.seqs[0], "".join(parts))


class _Commands:
    """The commands and CallRefs a page shows to look records up, for the file *name*."""

    def __init__(self, name: str, session_id: str) -> None:
        self.name = name
        self.session_id = session_id

    def command(self, run_id: Optional[str], execution: str = "", attempt: int = 0, kind: str = "") -> str:
        """The ``python -m session show`` command for these records, shell-quoted, as HTML."""
        words = ["python", "-m", "session", "show", self.name]
        if run_id is not None:
            words += ["--run", run_id]
        if execution:
            words += ["--execution", execution, "--attempt", str(attempt)]
        if kind:
            words += ["--type", kind]
        return f"<code>{_h(' '.join(map(_shell_word, words)), inline=True)}</code>"

    def ref(self, run_id: str, execution: str, attempt: int) -> str:
        ref = CallRef(self.session_id, run_id, execution, attempt)
        return f'<code class="ref">{_h(json.dumps(ref.to_json(), ensure_ascii=False))}</code>'

    def summary_command(self) -> str:
        return f"<code>python -m session summary {_h(_shell_word(self.name))}</code>"

    def attempt_ref(self, attempt: _Attempt) -> str:
        """An attempt's CallRef and the command that prints its records."""
        return (
            f'<div class="how">{self.ref(attempt.run_id, attempt.id, attempt.attempt)}<br>'
            f"{self.command(attempt.run_id, attempt.id, attempt.attempt)}</div>"
        )


def _said(said: Optional[_Said]) -> str:
    """A question or answer for the first screen, whole up to _PAGE_SAYS characters, with a
    link to the record that holds it."""
    if said is None:
        return '<span class="cut">not recorded</span>'
    more = said.length - len(said.text)
    cut = f'<span class="cut">… {more:,} more characters in the record</span>' if more else ""
    where = f" {_link(said.seq, f'#{said.seq}')}" if said.seq else ""  # 0: sent by no request
    return f'<div class="said">{_h(said.text)}{cut}{where}</div>'


def _failed(count: int) -> str:
    return f', <span class="error">{count} ✗</span>' if count else ""


# The parts of the page below its header, a link away from its top.
_PAGE_PLACES = (
    "<p>go to: "
    + " · ".join(
        f'<a href="#{target}">{place}</a>'
        for target, place in (
            ("conversation", "the conversation"),
            ("nav", "runs and turns"),
            ("chart", "input tokens per call"),
            ("timeline", "calls over time"),
            ("records", "the records"),
        )
    )
    + "</p>\n"
)


# The search and filters, first on the page (a few Tab presses from its top) and kept in view.
_PAGE_FILTERS = (
    '<div class="filters"><form><input type="search" id="search" placeholder="search" hidden> '
    '<span class="how" id="matches" hidden></span> '
    '<label><input type="checkbox" id="only-errors"> errors only</label> '
    '<label><input type="checkbox" id="show-model" checked> model calls</label> '
    '<label><input type="checkbox" id="show-tool" checked> tool calls</label> '
    '<label><input type="checkbox" id="show-other" checked> other records</label></form>\n'
    '<p class="how" id="keys" hidden>keys: <kbd>j</kbd> / <kbd>k</kbd> next / previous call, '
    "<kbd>e</kbd> / <kbd>E</kbd> next / previous error, <kbd>i</kbd> the whole input of that call, "
    "<kbd>/</kbd> search, <kbd>Enter</kbd> "
    "(<kbd>Shift</kbd>+<kbd>Enter</kbd>) or <kbd>n</kbd> / <kbd>N</kbd> next / previous match, "
    "<kbd>Esc</kbd> leaves the search</p></div>\n"
)


class _Header:
    """The page's header: the session, its runs, costs, failures and gaps."""

    def __init__(
        self,
        commands: _Commands,
        facts: _Facts,
        plan: _Plan,
        summary: Summary,
        out: _PageOut,
        damage: Optional[FormatError],
    ) -> None:
        self.commands = commands
        self.facts = facts
        self.plan = plan
        self.summary = summary
        self.out = out
        self.name = commands.name
        self.damage = damage
        self.turns = _turn_counts(facts)  # run -> turn -> (calls, failed)
        self.turn_seqs = facts.turn_seqs()

    def header(self) -> int:
        """Write the header; returns the place for what the page leaves out (_PageOut.fill)."""
        summary = self.summary
        write = self.out.write
        write('<a class="skip" href="#records">skip to the records</a>\n', _PAGE_FILTERS)
        write(f"<header><h1>session {_short_id(summary.session_id)}</h1>\n")
        write(self.banner())
        cut_place = self.out.later()  # what the page leaves out, once the cards are chosen
        tail = (
            f", an unfinished last line of {summary.tail_bytes:,} bytes ignored" if summary.tail_bytes else ""
        )
        counts = f"{_many(summary.records, 'record')}, {_many(len(summary.runs), 'run')}"
        write(f"<div>{_h(self.name)}: {counts}{tail}; session id {_id(summary.session_id)}</div>\n")
        self.glance()
        self.runs()
        self.failures()
        self.gaps()
        write("<p>records by type: ")
        write(", ".join(f"{_hs(kind)} {count:,}" for kind, count in sorted(summary.counts.items())))
        write("</p>\n</header>\n")
        self.navigation()
        return cut_place

    def glance(self) -> None:
        """What the session was asked and answered, how it ended, on which models, at what
        cost, in how long and how many tokens: the first screen."""
        runs = self.summary.runs
        first = self.facts.runs.get(runs[0].run_id) if runs else None
        last = self.facts.runs.get(runs[-1].run_id) if runs else None
        of = f" of {len(runs)})" if len(runs) > 1 else ""
        usage = ", ".join(f"{_hs(key)} {count:,}" for key, count in self.summary.usage.items())
        duration = _h(_duration(runs[0].start_time, runs[-1].end_time)) if runs else "no run"
        rows = (
            (f"asked{' (run 1' + of if of else ''}", _said(first.asked if first else None)),
            (f"answered{f' (run {len(runs)}' + of if of else ''}", _said(last.answered if last else None)),
            ("outcome", self.outcome()),
            ("model", self.models()),
            ("cost", self.costs()),
            ("time and tokens", f"{duration}; tokens (successful model calls): {usage or 'none reported'}"),
        )
        items = "".join(f"<dt>{name}</dt><dd>{text}</dd>" for name, text in rows)
        self.out.write(f'<dl class="glance">{items}</dl>\n{_PAGE_PLACES}')

    def outcome(self) -> str:
        """How the runs ended, and how many calls failed."""
        ends: Dict[str, int] = {}
        for run in self.summary.runs:
            end = run.end_reason or ("no end reason" if run.closed else "not closed")
            ends[end] = ends.get(end, 0) + 1
        parts = [f"{_hs(end)} \u00d7{count:,}" if count > 1 else _hs(end) for end, count in ends.items()]
        errors = [run for run in self.summary.runs if run.error is not None]
        if errors:
            error = _hs(_error_text(errors[0].error))
            parts.append(f'<span class="error">{_many(len(errors), "run")} ended in error: {error}</span>')
        recovered = len(self.plan.recovered)
        retried = f" ({recovered:,} recovered by a retry)" if recovered else ""
        parts.append(f'<a href="#failures">{_many(self.plan.failed, "failed call attempt")}</a>{retried}')
        if self.summary.gaps:
            parts.append(f'<span class="error">{_many(len(self.summary.gaps), "gap")} in the evidence</span>')
        return "; ".join(parts)

    def models(self) -> str:
        """The models and providers the model calls' usage names, with their calls."""
        named = [f"<b>{_hs(model)}</b> ({_many(count, 'call')})" for model, count in self.plan.models.items()]
        return ", ".join(named) or "not reported (no model reply's usage names one)"

    def navigation(self) -> None:
        """Each run and its turns with their calls and failures, each linked to where the
        conversation gets there; a run of over _PAGE_TURNS turns folded."""
        write = self.out.write
        write('<nav id="nav"><h2>runs and turns</h2>\n')
        for n, run in enumerate(self.summary.runs, 1):
            group = self.turns.get(run.run_id, {})
            calls, failed = sum(c for c, _ in group.values()), sum(f for _, f in group.values())
            name = _link(run.first_seq, f"{n} {_short_id(run.run_id)}", f"talk-{run.first_seq}")
            write(
                f"<details{' open' if len(group) <= _PAGE_TURNS else ''}><summary>run {name}: "
                f"{_count(len(group), 'turn')}, {_count(calls, 'call')}{_failed(failed)}</summary>"
                '<ol class="turns">'
            )
            for turn, (count, bad) in sorted(group.items()):
                seq = self.turn_seqs.get(run.run_id, {}).get(turn, 0)
                label = f"turn {turn}: {_count(count, 'call')}{_failed(bad)}"
                write(f"<li>{_link(seq, label, f'talk-{seq}') if seq else label}</li>")
            write("</ol></details>\n")
        write("</nav>\n")

    def runs(self) -> None:
        """The runs: where each starts, its calls and failures, times, end and error."""
        write = self.out.write
        write('<div class="wide"><table><tr><th>run</th><th>asked</th><th>records</th><th>calls</th>')
        write("<th>failed</th><th>cost</th><th>tokens in / out</th><th>start</th><th>duration</th>")
        write("<th>closed</th>")
        write("<th>end reason</th><th>error</th></tr>\n")
        for n, run in enumerate(self.summary.runs, 1):
            error = _hs(_error_text(run.error)) if run.error is not None else ""
            turns = self.turns.get(run.run_id, {}).values()
            calls, failed = sum(c for c, _ in turns), sum(f for _, f in turns)
            marked = f'<td class="error">{failed:,} ✗</td>' if failed else "<td>0</td>"
            cost = self.plan.run_costs.get(run.run_id)
            facts = self.facts.runs.get(run.run_id) or _RunFacts()
            asked = _hs(facts.asked.text[: _PAGE_TALK // 3]) if facts.asked else ""
            tokens = " / ".join(f"{facts.tokens.get(key, 0):,}" for key in ("input", "output"))
            write(
                f"<tr><td>{_link(run.first_seq, f'run {n}')} {_id(run.run_id)}</td><td>{asked}</td>"
                f"<td>{run.records:,}</td><td>{calls:,}</td>{marked}"
                f"<td>{_money(cost) if cost is not None else ''}</td>"
                f"<td>{tokens if facts.tokens else ''}</td><td>{_hs(run.start_time)}</td>"
                f"<td>{_h(_duration(run.start_time, run.end_time))}</td>"
                f"<td>{'yes' if run.closed else 'no'}</td>"
                f'<td>{_hs(run.end_reason)}</td><td class="error">{error}</td></tr>\n'
            )
        write("</table></div>\n")

    def failures(self) -> None:
        """The failed attempts by error type, most first, with how many a retry recovered;
        each attempt with its turn and reason (a type of over ten folded)."""
        write = self.out.write
        write(f'<section id="failures"><h2>{_many(self.plan.failed, "failed attempt")}</h2>\n<ul>')
        calls = self.facts.calls
        for kind, failed in self.plan.failures:
            again = sum(number in self.plan.recovered for number in failed)
            name = _hs(kind) if kind else "errors of no type"
            write(f"<li><details{' open' if len(failed) <= 10 else ''}><summary>")
            write(f'<b class="error">{name}</b> \u00d7{len(failed):,}, ')
            write(f"{again:,} recovered by a retry</summary><ul>")
            for attempt in (_Attempt(calls, number) for number in failed[:_PAGE_LIST]):
                reason = f'<span class="error">{_hs(attempt.reason)}</span>'
                write(f"<li>turn {attempt.turn}: {_attempt_link(attempt)}: {reason}</li>\n")
            self.more(len(failed), "tick “errors only” below to see them all")
            write("</ul></details></li>\n")
        write("</ul></section>\n")

    def gaps(self) -> None:
        write = self.out.write
        summary = self.summary
        write(f"<h2>{_count(len(summary.gaps), 'gap')}</h2>\n<ul>")
        for gap in summary.gaps[:_PAGE_LIST]:
            write(f"<li>{_link(gap.seq, f'#{gap.seq}')} {_hs(gap.kind)} ")
            if gap.ref is None:
                write(f"run <code>{_hs(gap.run_id)}</code>: {self.commands.command(gap.run_id)}</li>\n")
            else:
                ref = gap.ref
                write(f"{self.commands.ref(ref.run_id, ref.execution_id, ref.attempt)} ")
                write(f"{self.commands.command(ref.run_id, ref.execution_id, ref.attempt)}</li>\n")
        self.more(len(summary.gaps), f"see {self.commands.summary_command()}")
        write("</ul>\n")

    def banner(self) -> str:
        """For a damaged file, where it breaks, why, and the command that mends it."""
        damage = self.damage
        if damage is None:
            return ""
        where = f"line {damage.line}" if damage.line is not None else "a line"
        if damage.offset is not None:
            where += f" (offset {damage.offset})"
        reason = _h(damage.reason, inline=True)
        if damage.line in (None, 1) or damage.offset is None:  # what repair refuses
            return (
                f'<p class="damage" id="damage">This is no session file: {where}: {reason}. There is '
                "nothing to show or repair: a session file starts with a session_start line.</p>\n"
            )
        said = f'<p class="damage" id="damage">This file is damaged at {where}: {reason}. '
        said += f"The page shows the {self.summary.records} records before it; "
        if isinstance(damage, _LineTooLong):  # maybe a record: repair does not cut it
            return (
                f"{said}a larger <code>--max-line-bytes</code> reads that line, here or, if it is "
                "no record, in <code>repair</code>.</p>\n"
            )
        repair = f"<code>python -m session repair {_h(_shell_word(self.name), inline=True)}</code>"
        return (
            f"{said}{repair} keeps them and drops the rest, having copied the whole file aside first.</p>\n"
        )

    def costs(self) -> str:
        """The cost of the model calls, as far as they report it, in all and per run."""
        facts = self.facts
        if not facts.costed:
            return "not reported (no model reply's usage has a cost)"
        runs = self.plan.run_costs
        each = [
            f"run {n} {_money(runs[run.run_id])}"
            for n, run in enumerate(self.summary.runs, 1)
            if run.run_id in runs
        ]
        per_run = f" ({', '.join(each)})" if len(self.summary.runs) > 1 and each else ""
        return f"{_money(facts.cost)} in all{per_run}, {_many(facts.costed, 'model call')} reporting it"

    def more(self, count: int, where: str) -> None:
        if count > _PAGE_LIST:
            self.out.write(f'<li class="cut">and {count - _PAGE_LIST} more: {where}</li>')


def _usage_line(usage: Dict[str, Any]) -> str:
    """A message's usage on one line: token counts, provider, model and cost."""
    parts = []
    for key, item in usage.items():
        if key == "cost" and type(item) is dict:
            parts += [
                f"cost {_hs(name)} {_hs(amount) if _amount(amount) is None else _money(amount)}"
                for name, amount in item.items()
            ]
        else:
            parts.append(f"{_hs(key)} {_hs(item)}")
    return f'<div><span class="key">usage</span> {", ".join(parts)}</div>'


# The page's only style and script: the Content-Security-Policy allows exactly these, by hash.
_PAGE_STYLE = """
html{scroll-padding-top:5em}
body{font:14px/1.4 system-ui,sans-serif;margin:1em auto;max-width:1100px;padding:0 1em}
body{color:#1b1b1b;background:#fff}
h1{font-size:1.3em}h2{font-size:1.1em;margin-top:1.5em}h3{font-size:1em;margin:.2em 0}
code,pre{font:12px/1.35 ui-monospace,monospace;overflow-wrap:anywhere}.wide{overflow-x:auto}
pre{white-space:pre-wrap;overflow-wrap:anywhere;margin:.2em 0;background:#f6f6f4;padding:.3em .5em}
table{border-collapse:collapse}td,th{border:1px solid #ddd;padding:2px 6px;text-align:left;vertical-align:top}
.mark{background:#ffe08a;color:#5a3b00;border-radius:3px;font:11px ui-monospace,monospace}
.cut{color:#7a4a00;font-style:italic}.error,.fail>h3{color:#b00020}
.damage{border:2px solid #b00020;background:#fff0f0;padding:.4em .6em;font-weight:600}
.key,.role{font-weight:600;color:#35557a}.thinking{opacity:.75}.change{color:#2d6a2d;font-weight:600}
.card{border:1px solid #ccd;border-left:5px solid #6b8fc7;border-radius:4px;margin:.6em 0;padding:.3em .6em}
.card.tool{border-left-color:#6bb38a}.card.compact{border-left-color:#b39a6b}.card.fail{border-left-color:#d33}
.part{border-top:1px dotted #ccd;padding:.2em 0}.rec{padding:.15em .6em;color:#444}
.rec.heading{font-weight:600;margin-top:.6em}
.rec.fail{color:#b00020}.seq{color:#666;text-decoration:none}.type{font-weight:600}.time{color:#666;font-size:12px}
.how{font-size:11px;color:#555}.how code{font-size:11px}
.msg{margin:.2em 0}.call{margin:.2em 0}.image{color:#666}
.shot{display:block;max-width:100%;max-height:480px;border:1px solid #ccd}
svg{width:100%;height:auto;display:block;font:11px ui-monospace,monospace}
.waterfall text.end{text-anchor:end}
rect.model{fill:#6b8fc7}rect.tool{fill:#6bb38a}rect.compact{fill:#b39a6b}rect.other{fill:#999}rect.fail{fill:#d33}
rect.bar{fill:#6b8fc7}.compaction{fill:#c05000}.span{stroke:#c05000}
.tie{stroke:#d33;fill:none;stroke-dasharray:3 2}
.filters{position:sticky;top:0;background:#fff;padding:.4em 0;border-bottom:1px solid #ddd;z-index:1}
.filters p{margin:.2em 0}
.turns{display:flex;flex-wrap:wrap;gap:.1em 1em;list-style:none;padding:0;margin:.2em 0}
body:has(#only-errors:checked) :is(.card,.rec,.step):not(.fail){display:none}
body:has(#show-model:not(:checked)) :is(.card,.step).model{display:none}
body:has(#show-tool:not(:checked)) :is(.card,.step).tool{display:none}
body:has(#show-other:not(:checked)) :is(.rec,.card.compact,.step.flow,.step.other){display:none}
.miss{display:none}.card,.step{content-visibility:auto;contain-intrinsic-size:auto 5em}
html[data-js] #search[hidden],html[data-js] #matches[hidden]{display:inline}
html[data-js] #keys[hidden]{display:block}
.whole>summary{color:#35557a;cursor:pointer}.input{border-left:3px solid #35557a;padding-left:.6em}
.input>ol{padding-left:2em;margin:.2em 0}.input>div{border-top:1px dotted #ccd}
.step{margin:.25em 0;padding:.15em .5em;border-left:3px solid #ccd}.step.tool{border-left-color:#6bb38a}
.step.fail{border-left-color:#d33;background:#fff5f5}.flow{color:#555;font-style:italic}
.say{margin:.15em 0;white-space:pre-wrap;overflow-wrap:anywhere}.say.user{background:#f2f6fc}
.say .role{margin-right:.5em}summary>h2{display:inline}
.pair{display:grid;grid-template-columns:1fr 1fr;gap:.8em}
.pair>div{white-space:pre-wrap;overflow-wrap:anywhere}.more>summary{color:#35557a;cursor:pointer}::highlight(search){background:#ffd54a;color:#000}
.glance{display:grid;grid-template-columns:max-content 1fr;gap:.3em 1em;margin:.8em 0}
.glance dt{font-weight:600;color:#35557a}.glance dd{margin:0}
.said{white-space:pre-wrap;overflow-wrap:anywhere}
details.id{display:inline-block;vertical-align:top}details.id>summary{cursor:pointer;white-space:nowrap}
details.id>summary code{overflow-wrap:normal}
.skip{position:absolute;left:-999px}.skip:focus{left:1em;top:.5em;background:#fff;padding:.3em;z-index:2}
kbd{font:11px ui-monospace,monospace;border:1px solid #bbb;border-radius:3px;padding:0 .3em}
:focus{outline:2px solid #35557a}
@media (max-width:700px){#keys,html[data-js] #keys[hidden]{display:none}
.pair,.glance{grid-template-columns:1fr}body{padding:0 .5em}}
:root{color-scheme:light dark}
@media (prefers-color-scheme:dark){body,.filters,.skip:focus{color:#e6e6e6;background:#121212}
a{color:#8ab4f8}a:visited{color:#c58af9}pre{background:#1e1e1e}svg text{fill:#e6e6e6}
.error,.fail>h3,.rec.fail{color:#ff8a80}.cut{color:#e0b060}.change{color:#81c995}.damage{background:#3a1010}
.key,.role,.glance dt,.whole>summary,.more>summary{color:#9cc3ff}.seq,.time,.image{color:#b0b0b0}
.how,.flow,.rec{color:#c8c8c8}.say.user{background:#1b2433}.step.fail{background:#2a1515}
.mark{background:#5a4500;color:#ffe08a}td,th,.card,.filters{border-color:#444}}
@page{margin:1cm}
@media print{.filters,#keys,.skip{display:none}body{max-width:none;margin:0;padding:0;font-size:10px}
h2{margin-top:.6em;break-after:avoid}h3{break-after:avoid}.card{margin:.25em 0;padding:.1em .4em}
#records,#timeline>ol{columns:2;column-gap:1.2em}#records h2{column-span:all}
code,pre,.how,.how code{font-size:9px;line-height:1.2}pre{margin:.1em 0;padding:.1em .3em}
.part,.rec{padding:.05em 0}table{font-size:9px}
a{color:inherit;text-decoration:none}}
"""
_PAGE_SCRIPT = """
"use strict";
document.documentElement.setAttribute("data-js", "on");
(function () {
  // This script runs from the page's head, before the body is parsed: each handler is the
  // document's and looks up what it acts on when it acts, so that search, filters and keys
  // work on what is parsed so far while a long page loads, and on the rest as it comes.
  var ITEMS = "#conversation .step, .card, .rec";
  var texts = new WeakMap(), hits = [], done = 0, query = null, timer = 0, current = null, data = null;
  var marks = null, marked = 0, left = 0;  // the matches highlighted: of hits[0:marked], at most 2000
  function loading() {
    return document.readyState === "loading";
  }
  // -- search: each step, card and record that misses the query is hidden (.miss)
  function filter() {
    clearTimeout(timer);
    var box = document.getElementById("search"), count = document.getElementById("matches");
    if (box.value.toLowerCase() !== query) {
      query = box.value.toLowerCase();
      hits = [];
      done = marked = 0;
      left = query === "" ? 0 : 2000;
      if (window.CSS && CSS.highlights && typeof Highlight !== "undefined") {
        marks = new Highlight();
        CSS.highlights.set("search", marks);
      }
    }
    var items = document.querySelectorAll(ITEMS);
    var whole = loading() ? items.length - 1 : items.length;  // the last may not be whole yet
    for (var j = done; j < items.length; j++) {
      var text = texts.get(items[j]);
      if (text === undefined) {
        text = items[j].textContent.toLowerCase();
        if (j < whole) texts.set(items[j], text);
      }
      var miss = query !== "" && text.indexOf(query) < 0;
      items[j].classList.toggle("miss", miss);
      if (query !== "" && !miss && j < whole) hits.push(items[j]);
    }
    done = Math.max(whole, done);
    count.textContent = query === "" ? "" : hits.length + (hits.length === 1 ? " match" : " matches");
    highlight();
    if (loading() && query !== "") timer = setTimeout(filter, 500);  // what is parsed meanwhile
  }
  function highlight() {
    // The matches of the hits found since the last call (as a page loads), while any are left.
    for (; marks && marked < hits.length && left > 0; marked++) {
      var walker = document.createTreeWalker(hits[marked], NodeFilter.SHOW_TEXT);
      for (var node = walker.nextNode(); node && left > 0; node = walker.nextNode()) {
        var text = node.data.toLowerCase(), from = text.length === node.length ? null : origins(node.data);
        for (var at = text.indexOf(query); at >= 0 && left > 0; at = text.indexOf(query, at + 1)) {
          var start = from ? from[at] : at, end = from ? from[at + query.length] : at + query.length;
          if (start === end) continue;
          var range = new Range();
          range.setStart(node, start);
          range.setEnd(node, end);
          marks.add(range);
          left--;
        }
      }
    }
  }
  function origins(text) {
    // Where each character of text's lower case comes from in text: "\u0130" has two.
    var from = [];
    for (var i = 0; i < text.length; i++) {
      for (var k = text[i].toLowerCase().length; k > 0; k--) from.push(i);
    }
    from.push(text.length);
    return from;
  }
  // -- moving: to the next or previous of a list, of those shown
  function go(list, step) {
    var shown = Array.prototype.filter.call(list, function (e) { return e.offsetParent !== null; });
    if (shown.length === 0) return -1;
    var n = shown.indexOf(current);
    if (n < 0) {
      n = 0;
      while (n < shown.length && shown[n].getBoundingClientRect().top < 1) n++;
      if (step < 0) n--;
    } else {
      n += step;
    }
    n = (n + shown.length) % shown.length;
    current = shown[n];
    current.setAttribute("tabindex", "-1");
    current.focus();
    return n;
  }
  function unfold(element, query) {
    var walker = document.createTreeWalker(element, NodeFilter.SHOW_TEXT);
    for (var node = walker.nextNode(); node; node = walker.nextNode()) {
      if (node.data.toLowerCase().indexOf(query) < 0) continue;
      for (var up = node.parentElement; up !== element; up = up.parentElement) {
        if (up.tagName === "DETAILS") up.open = true;
      }
    }
  }
  function match(step) {
    var n = go(hits, step);
    var noun = hits.length === 1 ? " match" : " matches";
    if (n < 0) return;
    unfold(current, query);
    document.getElementById("matches").textContent = (n + 1) + " of " + hits.length + noun;
  }
  function searched(event) {
    if (event.key === "Enter") {
      event.preventDefault();
      filter();
      match(event.shiftKey ? -1 : 1);
    } else if (event.key === "Escape") {
      event.target.blur();
    }
  }
  function moved(event) {
    var calls = "#conversation .step:not(.flow)", errors = "#conversation .step.fail";
    var moves = {j: [calls, 1], k: [calls, -1], e: [errors, 1], E: [errors, -1]};
    if (moves[event.key]) go(document.querySelectorAll(moves[event.key][0]), moves[event.key][1]);
    else if (event.key === "n" || event.key === "N") match(event.key === "n" ? 1 : -1);
    else if (event.key === "/") document.getElementById("search").focus();
    else if (event.key === "i") whole();
    else return;
    event.preventDefault();
  }
  document.addEventListener("input", function (event) {
    if (event.target.id !== "search") return;
    clearTimeout(timer);
    timer = setTimeout(filter, 120);
  });
  document.addEventListener("change", function (event) {
    if (event.target.id === "search") filter();
  });
  document.addEventListener("keydown", function (event) {
    if (event.ctrlKey || event.metaKey || event.altKey) return;
    if (event.target.id === "search") searched(event);
    else if (event.target.tagName !== "INPUT") moved(event);
  });
  // -- a call's whole input: copies of the messages its card and earlier ones show
  function inputs() {
    if (data === null) data = JSON.parse(document.getElementById("session-data").textContent).inputs;
    return data;
  }
  function places(seq) {
    var out = [], tasks = [[seq, 0, Infinity]];
    while (tasks.length) {
      var task = tasks.pop();
      if (typeof task === "string") {
        out.push(task);
        continue;
      }
      var parts = inputs()[task[0]][0], previous = inputs()[task[0]][1], at = 0, todo = [];
      for (var i = 0; i < parts.length && at < task[2]; i++) {
        var part = parts[i], size = typeof part === "string" ? 1 : part[1] - part[0];
        var from = Math.max(task[1], at), to = Math.min(task[2], at + size);
        if (from < to) {
          todo.push(typeof part === "string" ? part : [previous, part[0] + from - at, part[0] + to - at]);
        }
        at += size;
      }
      while (todo.length) tasks.push(todo.pop());
    }
    return out;
  }
  function copy(id, what, tag) {
    var item = document.createElement(tag), shown = document.getElementById(id);
    if (shown) {
      var clone = shown.cloneNode(true);
      clone.removeAttribute("id");
      item.appendChild(clone);
    } else {
      item.className = "cut";
      item.textContent = what + " left out of this page, to keep to its budget";
    }
    return item;
  }
  function fill(whole) {
    if (whole.querySelector(".input")) return;
    if (loading()) {  // its messages and their places come later in the page
      document.addEventListener("DOMContentLoaded", function () { fill(whole); });
      return;
    }
    var seq = whole.id.slice(6), list = document.createElement("ol"), box = document.createElement("div");
    var shown = places(seq);
    for (var i = 0; i < shown.length; i++) list.appendChild(copy("msg-" + shown[i], "this message", "li"));
    box.className = "input";
    box.appendChild(list);
    box.appendChild(copy("set-" + inputs()[seq][2], "the tools and config", "div"));
    whole.querySelector(".places").hidden = true;
    whole.appendChild(box);
  }
  document.addEventListener("toggle", function (event) {
    var target = event.target;
    if (target.classList && target.classList.contains("whole") && target.open) fill(target);
  }, true);
  function whole() {
    var link = current && current.querySelector('a[href^="#input-"]');
    var input = link && document.getElementById(link.getAttribute("href").slice(1));
    if (!input) return;
    input.open = true;
    input.scrollIntoView();
  }
  // -- the fragment's folded target opened, and everything folded opened to print
  function reveal() {
    var id = location.hash.slice(1);
    try {
      id = decodeURIComponent(id);
    } catch (malformed) {
      // "#%" names nothing: the fragment is looked up as it is
    }
    var target = document.getElementById(id);
    if (target && target.tagName === "DETAILS") target.open = true;
  }
  window.addEventListener("hashchange", reveal);
  document.addEventListener("DOMContentLoaded", reveal);
})();
"""


class _CardDrawing:
    """Draws the card of an attempt (its records) or of a record alone, and the values,
    messages and requests they hold, within *room*, the bytes of page left for the card
    being drawn; adds the ids of what it draws to *ids*."""

    def __init__(self, facts: _Facts, commands: _Commands, ids: Set[bytes], field: int, room: int) -> None:
        self.facts = facts
        self.commands = commands
        self.ids = ids
        self.field = field
        self.room = room

    # -- values

    def value(self, value: Any, more: str, label: str = "") -> str:
        """One value (a string as it is, anything else as indented JSON), cut after the field
        limit with a visible mark naming *more* (the command that prints it whole), and folded
        when long."""
        if type(value) is str:
            shown, cut = value[: self.field], max(len(value) - self.field, 0)
        else:
            shown, cut = self.json_head(value)
        text = _h(shown)
        if cut:
            how = f"{cut} more characters" if cut > 0 else "the rest"
            text += f'<span class="cut">shortened — {how}: see {more}</span>'
        label = f'<span class="key">{_hs(label)}</span> ' if label else ""
        if label and not cut and len(shown) < 80 and "\n" not in shown:
            return f"<div>{label}<code>{_h(shown, inline=True)}</code></div>"
        if len(shown) > _PAGE_FOLD or shown.count("\n") > _PAGE_FOLD_LINES:
            head = shown.lstrip().split("\n", 1)[0][:100]
            return (
                f"<details><summary>{label}{_h(head)} … ({len(shown)} characters)</summary>"
                f"<pre>{text}</pre></details>"
            )
        return f"<div>{label}<pre>{text}</pre></div>"

    def json_head(self, value: Any) -> Tuple[str, int]:
        """The first field-limit characters of *value* as JSON: on one line if it fits in a
        hundred, else indented; the count cut off is 0 when nothing was, -1 when some was."""
        line = _json_head(value, _ONE_LINE, min(self.field, 100))
        return line if line[1] == 0 else _json_head(value, _INDENTED, self.field)

    def message(self, message: Any, run_id: str, more: str, place: str = "") -> str:
        """A codec-encoded message: role, its blocks, stop reason and usage; with the id
        ``msg-`` *place* when a request's whole input refers to it there (_Input)."""
        ident = f' id="msg-{place}"' if place else ""
        if place:
            self.ids.add(f"msg-{place}".encode())
        value = _message_value(message)
        if value is None:
            return f'<div class="msg"{ident}>{self.value(message, more, "message")}</div>'
        role = value.get("role")
        parts = [f'<div class="msg"{ident}><span class="role">{_hs(role)}</span>']
        metadata = value.get("metadata")
        call_id = metadata.get("tool_call_id") if type(metadata) is dict else None
        if type(call_id) is str:
            parts.append(f" result of {self.tool_link(run_id, call_id)}")
        for block in value["content"]:
            parts.append(self.block(block, run_id, more))
        if value.get("stop_reason"):
            parts.append(self.value(value["stop_reason"], more, "stop_reason"))
        if value.get("usage"):
            usage = value["usage"]
            parts.append(_usage_line(usage) if type(usage) is dict else self.value(usage, more, "usage"))
        if type(metadata) is dict and set(metadata) - {"tool_call_id"}:
            parts.append(self.value(metadata, more, "metadata"))
        return "".join(parts) + "</div>"

    def block(self, block: Any, run_id: str, more: str) -> str:
        kind = block.get("type") if type(block) is dict else None
        if kind == "text" and type(block.get("text")) is str:
            return self.value(block["text"], more)
        if kind == "thinking" and type(block.get("thinking")) is str:
            return f'<div class="thinking">{self.value(block["thinking"], more, "thinking")}</div>'
        if kind == "toolCall" and type(block.get("tool_call")) is dict:
            call = block["tool_call"]
            call_id, name = call.get("id"), call.get("name")
            head = f'<div class="call">calls <b>{_hs(name)}</b>'
            if call.get("args_invalid") is True:
                head += ' <span class="error">(its arguments did not parse: see args_raw_text)</span>'
            if type(call_id) is str:
                head += f" id {self.tool_link(run_id, call_id)}"
            rest = {key: item for key, item in call.items() if key not in ("id", "name", "args")}
            args = self.value(call.get("args"), more, "args")
            return head + args + (self.value(rest, more) if rest else "") + "</div>"
        if kind == "image" and type(block.get("image")) is dict:
            return self.image(block["image"], more)
        if kind == "tool_reference" and type(block.get("tool_name")) is str:
            return f'<div class="call">tool reference <b>{_hs(block["tool_name"])}</b></div>'
        return self.value(block, more, "block")

    def image(self, image: Dict[str, Any], more: str) -> str:
        """An image block: its inline data shown, if a picture of a kind browsers decode safely
        and the page has room for it; else what it is, and a URL only as text (a page never
        fetches)."""
        data, url, mime = image.get("data"), image.get("url"), image.get("mime_type")
        size = f"{len(data) * 3 // 4} bytes" if type(data) is str else ""
        where = f"at {_hs(url)}" if url else ""
        about = ", ".join(part for part in (_hs(mime) if mime else "", size, where) if part)
        data = data if type(data) is str else ""
        picture = _picture(mime, data)
        if picture and len(data) <= min(_PAGE_IMAGE, self.room):  # mime: one of _PICTURES
            self.room -= len(data)  # the next picture of its card or step has what is left
            source = f"data:{mime};base64,{_h(data)}"
            return f'<div class="image"><img class="shot" alt="{mime} image, {size}" src="{source}"></div>'
        more = f": too large for this page, see {more}" if picture else ""
        return f'<div class="image">[image: {about}{more}]</div>'

    def tool_link(self, run_id: str, call_id: str) -> str:
        call = self.facts.tool_call(run_id, call_id)
        if call is None:
            return f"<code>{_hs(call_id)}</code>"
        return _link(call.seqs[0], f"<code>{_hs(call_id)}</code>")

    # -- records

    def record_head(self, record: Record) -> str:
        return (
            f'<a class="seq" href="#seq-{record.seq}">#{record.seq}</a> '
            f'<span class="type">{_hs(record.type)}</span> <span class="time">{_hs(record.time)}</span>'
        )

    def record_body(self, record: Record, more: str) -> str:
        """*record*'s data, the keys this page understands first-class, the rest as values."""
        run_id = record.run_id or ""
        parts = []
        same = self.facts.same(record.seq)
        for key, item in record.data.items():
            if key == "execution":
                continue
            if key in ("message", "partial_message"):
                if same is not None and key == "message":
                    parts.append(f"<div>the same message as {_link(same, f'#{same}')}</div>")
                else:
                    parts.append(
                        self.message(item, run_id, more, str(record.seq) if key == "message" else "")
                    )
            elif key == "request" and type(item) is dict:
                parts.append(self.request(record, item, more))
            elif key == "error":
                parts.append(f'<div class="error">{self.value(item, more, "error")}</div>')
            else:
                parts.append(self.value(item, more, key))
        return "".join(parts)

    def request(self, record: Record, request: Dict[str, Any], more: str) -> str:
        """What changed in the context since the previous request, and the new messages."""
        change = self.facts.change(record.seq)
        messages = request.get("messages")
        parts = []
        if change is not None and type(messages) is list:
            parts.append(f'<div class="change">{self.change_text(change, len(messages))}</div>')
            parts += self.new_messages(record, messages, change.new, more)
        if change is not None and change.same_settings:
            seq = change.previous
            parts.append(f"<div>tools and config as in {_link(seq, f'#{seq}')}</div>")
        else:
            parts.append(self.settings(record.seq, request, more, change is not None))
        whole = self.facts.whole_input(record.seq)
        if whole is not None and type(messages) is list:
            parts.append(self.whole_input(record.seq, whole, messages, more))
        return "".join(parts)

    def settings(self, seq: int, request: Dict[str, Any], more: str, placed: bool) -> str:
        """A request's tools and config (all but its messages); *placed*: with the id that the
        whole input of this and later requests refers to."""
        parts = []
        for key, item in request.items():
            if key == "tools" and type(item) is list:
                names = [_hs(tool.get("name")) for tool in item if type(tool) is dict and "name" in tool]
                parts.append(f'<div><span class="key">tools</span> {", ".join(names)}</div>')
                parts.append(self.value(item, more, "tool definitions"))
            elif key != "messages":
                parts.append(self.value(item, more, key))
        if not placed:
            return "".join(parts)
        self.ids.add(b"set-%d" % seq)
        return f'<div id="set-{seq}">{"".join(parts) or "<div>no tools, no config</div>"}</div>'

    def whole_input(self, seq: int, whole: _Input, messages: List[Any], more: str) -> str:
        """The request's whole input, folded: without JavaScript, the places of its messages in
        order (the previous request's input in slices, each new message by its link, those
        its card has no room for as one line); the page's script puts copies of the messages
        themselves in their place when it opens."""
        items: List[str] = []
        at, left = 0, 0  # left: the new messages just before *at* that the card has no room for
        for part in [*whole.parts, ""]:  # "": the end, where those left are said too
            if part == f"{seq}-{at}" and f"msg-{part}".encode() not in self.ids:
                at, left = at + 1, left + 1
                continue
            if left:
                items.append(f"<li>{_positions(at - left, left)}: new messages not shown: see {more}</li>")
                left = 0
            if isinstance(part, tuple):
                start, end = part
                inner = f"the input of request #{whole.previous}"
                link = _link(whole.previous, inner, f"input-{whole.previous}")
                taken = _positions(start, end - start)
                items.append(f"<li>{_positions(at, end - start)}: message {taken} of {link}</li>")
                at += end - start
            elif part:
                message = messages[at] if at < len(messages) else None
                role = _hs(_role(message)) if message is not None else "a"
                link = _link(int(part.split("-")[0]), f"{role} message", f"msg-{part}")
                items.append(f"<li>{at + 1}: {link}</li>")
                at += 1
        settings = _link(whole.settings, f"as in request #{whole.settings}", f"set-{whole.settings}")
        self.ids.add(b"input-%d" % seq)
        return (
            f'<details class="whole" id="input-{seq}"><summary>the whole input: '
            f"{_count(whole.total, 'message')}, tools and config</summary>"
            f'<ul class="places">{"".join(items)}<li>tools and config: {settings}</li></ul></details>'
        )

    def new_messages(
        self, record: Record, messages: List[Any], new: Tuple[Tuple[int, int], ...], more: str
    ) -> List[str]:
        """The new messages of a request: a link to a record that showed one already, else the
        message; none past the page budget."""
        parts: List[str] = []
        size = 0
        for n, (index, earlier) in enumerate(new):
            if size >= self.room or index >= len(messages):
                parts.append(
                    f'<div class="cut">{_count(len(new) - n, "more new message")} not shown: see {more}</div>'
                )
                break
            if earlier:
                value = _message_value(messages[index])
                role = _hs(value.get("role")) if value is not None else "a"
                parts.append(
                    f'<div class="msg">new: <span class="role">{role}</span> message as recorded '
                    f"in {_link(earlier, f'#{earlier}')}</div>"
                )
            else:
                parts.append(
                    self.message(messages[index], record.run_id or "", more, f"{record.seq}-{index}")
                )
            size += len(parts[-1])
        return parts

    @staticmethod
    def change_text(change: _Change, total: int) -> str:
        text = f"context: {_count(total, 'message')}; {len(change.new)} new"
        if change.previous:
            kept = "carried over from the previous run" if change.resumed else "unchanged"
            link = _link(change.previous, f"#{change.previous}")
            text += f", {change.unchanged} {kept} since request {link}"
        if change.dropped:
            why = "by a compaction" if change.compacted else "with no compaction recorded"
            text += f", {change.dropped} dropped {why}"
        return text

    # -- cards

    def lone(self, record: Record) -> str:
        fail = " fail" if "error" in record.data else ""
        heading = record.type in ("run_start", "turn_start", "session_start")
        more = self.commands.command(record.run_id, kind=record.type)
        return (
            f'<div class="rec{fail}{" heading" if heading else ""}" id="seq-{record.seq}">'
            f"{self.record_head(record)}{self.record_body(record, more)}</div>\n"
        )

    def card(self, attempt: _Attempt, records: List[Record]) -> str:
        kind = attempt.kind if attempt.kind in ("model", "tool", "compact") else "other"
        fail = " fail" if attempt.failed else ""
        parts = [f'<article class="card {kind}{fail}"><h3>{_attempt_link(attempt)}</h3>\n<p>']
        parts.append(f"turn {attempt.turn}, {_span(attempt.seconds)}{', failed' if attempt.failed else ''}")
        if attempt.model:
            parts.append(f", model <b>{_hs(attempt.model)}</b>")
        if attempt.cost is not None:
            parts.append(f", cost {_money(attempt.cost)}")
        if attempt.attempt > 1:
            earlier = self.facts.attempt(attempt.run_id, attempt.id, attempt.attempt - 1)
            if earlier is not None:
                parts.append(f", retry of {_link(earlier.seqs[0], f'attempt {earlier.attempt}')}")
        parts.append(f"{self.parent(attempt)}</p>{self.commands.attempt_ref(attempt)}\n")
        more = self.commands.command(attempt.run_id, attempt.id, attempt.attempt)
        for record in records:
            body = self.record_body(record, more)
            parts.append(f'<div class="part" id="seq-{record.seq}">{self.record_head(record)}{body}</div>\n')
        return "".join(parts) + "</article>\n"

    def parent(self, attempt: _Attempt) -> str:
        """For a tool call, a link to the model call that asked for it."""
        if not attempt.parent:
            return ""
        call = self.facts.model_call(attempt.run_id, attempt.parent)
        if call is None:
            missing = '<span class="error">not in this run</span>'
            return f", asked for by model call <code>{_hs(attempt.parent)}</code>, {missing}"
        return f", asked for by {_link(call.seqs[0], f'model call <code>{_hs(attempt.parent)}</code>')}"


class _Page:
    """The second pass: renders *facts* of the session file *name* to *out*, as *plan* says:
    the header, the timeline, then each item's card and conversation step as far as the
    budget goes, the rest named where it is left out."""

    def __init__(
        self,
        name: str,
        facts: _Facts,
        plan: _Plan,
        summary: Summary,
        out: _PageOut,
        field: int,
        damage: Optional[FormatError] = None,
    ) -> None:
        self.name = name
        self.damage = damage  # the bad line the file's records stop before
        self.commands = _Commands(name, summary.session_id)
        self.facts = facts
        self.plan = plan
        self.summary = summary
        self.out = out
        self.anchors: Set[int] = set()  # the seqs of the records the page shows
        self.ids: Set[bytes] = set()  # the ids of the messages, inputs, settings and steps it shows
        self.drawing = _CardDrawing(facts, self.commands, self.ids, field, out.budget)
        self.talk = _Conversation(facts, plan, self.ids, lambda image: self.drawing.image(image, "its card"))

    def render(self, source: BinaryIO, max_line_bytes: int) -> None:
        style, script = _PAGE_STYLE, _PAGE_SCRIPT
        policy = _content_policy(style, script)
        summary = self.summary
        self.out.write(
            '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">\n'
            f'<meta http-equiv="Content-Security-Policy" content="{policy}">\n'
            '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
            f"<title>session {_hs(summary.session_id)}</title>\n<style>{style}</style>\n"
            f"<script>{script}</script></head>\n<body>\n"  # early: it acts on what is parsed so far
        )
        requests = self.facts.requests
        inputs = ", ".join(f'"{seq}": {requests.input_text(n)}' for n, seq in enumerate(requests.seqs))
        data = (  # as _script_json writes it, its keys sorted; the inputs are JSON already
            f'{{"file": {_script_json(self.name)}, "inputs": {{{inputs}}}, '
            f'"records": {summary.records}, "session_id": {_script_json(summary.session_id)}}}'
        )
        self.out.ending(
            f'<script type="application/json" id="session-data">{data}</script>\n</body></html>\n'
        )
        self.cut_place = _Header(
            self.commands, self.facts, self.plan, summary, self.out, self.damage
        ).header()
        self.talk_place = self.out.later()  # the conversation, once the cards are chosen
        timeline = _Timeline(self.facts, self.out)
        timeline.chart()
        timeline.waterfall()
        self.cards(source, max_line_bytes)
        self.out.release(self.resolve)

    def resolve(self, mark: re.Match[bytes]) -> bytes:
        """A link mark (_link) as the link, or as its text alone if the page leaves out its
        record: no link on the page leads nowhere."""
        seq, target, inner = int(mark.group(1)), mark.group(2), mark.group(3)
        if target:
            return b'<a href="#%s">%s</a>' % (target, inner) if target in self.ids else inner
        return b'<a href="#seq-%d">%s</a>' % (seq, inner) if seq in self.anchors else inner

    def cards(self, source: BinaryIO, max_line_bytes: int) -> None:
        write = self.out.write
        write('<section id="records"><h2>records</h2>\n')
        cards, steps = self.choose(source, max_line_bytes)
        items = self.facts.items
        gaps = _left_out(cards)
        for n, (start, end) in enumerate(gaps, 1):
            cards[start] = self.cut_note(n, items.between(start, end)).encode()
            left = _count(end - start, "step")
            steps[start] = (
                f'<p class="cut">{left} left out here: see <a href="#cut-{n}">below</a></p>\n'.encode()
            )
        self.out.fill(self.cut_place, self.cut_summary(gaps).encode())
        talk = b'<section id="conversation"><h2>conversation</h2>\n'
        drawn = (step for step in steps if step)  # bytes.join takes 80 bytes for each part, even empty
        self.out.fill(self.talk_place, talk, *drawn, b"</section>\n")
        del steps
        for card in cards:
            if card is not None:
                self.out.put(card)
        write("</section>\n")

    def choose(self, source: BinaryIO, max_line_bytes: int) -> Tuple[List[Optional[bytes]], List[bytes]]:
        """Each item's card, or None where the page leaves it out, and its conversation step:
        in the plan's order, as long as the page is within its budget."""
        items = self.facts.items
        cards: List[Optional[bytes]] = [None] * len(items)
        steps = [b""] * len(items)
        used = self.out.size
        for n in self.plan.order():
            if used >= self.out.budget:
                break
            if cards[n] is None:
                self.drawing.room = self.out.budget - used
                item = items[n]
                places = self.facts.places(item)
                records = [self.read(source, max_line_bytes, seq, offset) for seq, offset in places]
                card = (
                    self.drawing.card(item, records)
                    if isinstance(item, _Attempt)
                    else self.drawing.lone(records[0])
                )
                cards[n], steps[n] = card.encode(), self.talk.step(item, records).encode()
                used += len(cards[n] or b"") + len(steps[n])
                self.anchors.update(_item_seqs(item))
        return cards, steps

    def cut_note(self, number: int, items: Iterator[Union[int, _Attempt]]) -> str:
        """Where the page leaves records out: how many, which, and the command that prints them."""
        records, first, last, calls, failed = 0, -1, 0, 0, 0  # counted item by item: a list of all
        for item in items:  # their seqs would take 40 bytes a record
            seqs = _item_seqs(item)
            records, first, last = (
                records + len(seqs),
                min(first, *seqs) if first >= 0 else min(seqs),
                max(last, *seqs),
            )
            calls += isinstance(item, _Attempt)
            failed += isinstance(item, _Attempt) and item.failed
        command = " ".join(map(_shell_word, ["python", "-m", "session", "show", self.name]))
        return (
            f'<p class="cut" id="cut-{number}">Left out here: {_count(records, "record")} between #{first} '
            f"and #{last} ({_count(calls, 'call')}, {failed} failed), which "
            f"<code>{_h(command, inline=True)} | sed -n {first},{last}p</code> prints.</p>\n"
        )

    def cut_summary(self, gaps: List[Tuple[int, int]]) -> str:
        """For the header: what the page leaves out, and where."""
        if not gaps:
            return ""
        items = self.facts.items
        left = sum(len(_item_seqs(item)) for start, end in gaps for item in items.between(start, end))
        places = ", ".join(
            f'<a href="#cut-{n}">#{_first_seq(items[start])}</a>'
            for n, (start, end) in enumerate(gaps[:_PAGE_LIST], 1)
        )
        more = f" and {len(gaps) - _PAGE_LIST:,} more" if len(gaps) > _PAGE_LIST else ""
        budget = self.out.budget
        size = f"{budget / (1 << 20):.3g} MiB" if budget >= 1 << 20 else f"{budget:,} bytes"
        return (
            f'<details class="cut"><summary>cut to {size}: {_many(left, "record")} left out '
            f"in {_many(len(gaps), 'place')} — list</summary>from {places}{more}: the page keeps the "
            "start, the end and every failed call it has room for; each place names the records "
            "it leaves out and the command that prints them.</details>\n"
        )

    def read(self, source: BinaryIO, max_line_bytes: int, seq: int, offset: int) -> Record:
        """The record *seq* again, at the *offset* the first pass found it."""
        source.seek(offset)
        raw = source.readline(max_line_bytes + 1)
        obj = _parse_line(raw, self.name, seq, offset, None, -1) if raw.endswith(b"\n") else {}
        if obj.get("seq") != seq or obj.get("session_id") != self.summary.session_id:
            raise FormatError(f"record {seq} changed while the page was made", self.name, seq, offset)
        data = obj["data"]
        index = self.facts.index
        if obj["type"] == "model_request" and index.version > 1 and "messages" in data:
            change = self.facts.change(seq)  # what a card shows of a request: its new messages
            data = index.resolved(data, self.name, None if change is None else {at for at, _ in change.new})
        return Record(obj["session_id"], seq, obj["type"], obj["time"], obj.get("run_id"), data, offset)


# ---------------------------------------------------------------------------- html page: the command


def _html_options(sub: Any) -> None:
    """The ``html`` command's own options."""
    sub.add_argument("-o", "--output", metavar="OUT", help="write the page to OUT (default: stdout)")
    sub.add_argument(
        "--max-bytes",
        type=int,
        default=_PAGE_BUDGET,
        metavar="N",
        help="page size budget (records past it are named, not shown; default: %(default)s, 16 MiB)",
    )
    sub.add_argument(
        "--max-field",
        type=int,
        default=_PAGE_FIELD,
        metavar="N",
        help="characters of one value shown inline (default: %(default)s)",
    )


def _html_command(args: Any) -> int:
    if args.max_bytes < 1 or args.max_field < 1:
        print("python -m session html: --max-bytes and --max-field take a positive number", file=sys.stderr)
        return 2
    try:
        with builtins.open(args.file, "rb", _READ_BUFFER) as source:
            facts = _Facts(_Index(source))  # its cards read the messages they show again
            damage = None
            try:
                result = _read_file(args.file, args.max_line_bytes, facts, source, None, facts.index)
            except FormatError as exc:  # the records before the bad line still get their page
                damage = exc
                result = ReadResult(facts.session_id, facts.records, exc.offset or 0, 0)
            summary = facts.summary(result)
            _publish_page(args, functools.partial(_write_page, args, facts, summary, damage, source))
    except (FormatError, OSError) as exc:
        _print_failure(args.file, exc, False)
        return 1
    if damage is not None:
        _print_failure(args.file, damage, False)
        return 1
    return 0


def _publish_page(args: Any, write: Callable[[BinaryIO], None]) -> None:
    """The page to stdout, or to ``--output`` as ``_publish`` writes it (never over the session)."""
    if args.output is None:
        write(sys.stdout.buffer)
        return
    if os.path.exists(args.output) and os.path.samefile(args.output, args.file):
        raise OSError(errno.EEXIST, f"will not write the page over the session itself ({args.output})")
    _publish(args.output, write)


def _publish(output: str, write: Callable[[BinaryIO], _T]) -> _T:
    """What *write* writes, into the file *output*: a new path or a regular file gets it whole
    or not at all (written under a temporary name, then renamed over it); anything else, such
    as a symlink, a device or a pipe, is written through and never replaced.  Opening, closing
    and placing the output raise ``_OutputError``; *write* raises it for its own writes."""
    through = not _output_step(lambda: _replaceable(output))
    target = output if through else f"{output}.{_new_id()[:12]}.tmp"
    out = _output_step(lambda: _opened_output(target, through))
    try:
        done = write(out)
        _output_step(out.close if through else lambda: _finish(out))
        if not through:
            _output_step(lambda: os.replace(target, output))
    finally:
        with contextlib.suppress(OSError):  # what a failed write left in the buffer fails again
            out.close()
        if not through:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(target)
    return done


def _opened_output(name: str, through: bool) -> BinaryIO:
    """*name* opened to write the page through it, or else created as a new file."""
    return builtins.open(name, "wb") if through else _new_file(name, 0o666)


def _write_page(
    args: Any, facts: _Facts, summary: Summary, damage: Optional[FormatError], source: BinaryIO, out: BinaryIO
) -> None:
    page = _Page(
        args.file, facts, _Plan(facts), summary, _PageOut(out, args.max_bytes), args.max_field, damage
    )
    page.render(source, args.max_line_bytes)


# ---------------------------------------------------------------------------- command line


def _export_options(sub: Any) -> None:
    sub.add_argument(
        "-o", dest="out", required=True, metavar="OUT", help="the output file (or folder); required"
    )
    sub.add_argument(
        "--split",
        action="store_true",
        help="one part file per input, in the new folder OUT (default: one file)",
    )
    sub.add_argument(
        "--prefix",
        action="store_true",
        help="from an invalid file, the records before the bad line (default: nothing of it)",
    )


COMMANDS = [  # what python -m session takes from this module
    _Command(
        "export",
        _EXPORT_COMMANDS["export"],
        "0 every file valid and exported; 1 any left out (invalid, unreadable, or a session twice) "
        "or none found",
        True,
        _export_options,
        _export_command,
    ),
    _Command(
        "html",
        _EXPORT_COMMANDS["html"],
        "0 written; 1 the file damaged (its page shows what comes before), unreadable, or named by -o",
        False,
        _html_options,
        _html_command,
    ),
]


# ---------------------------------------------------------------------------- OpenTelemetry
# ``python -m session otlp FILE... --endpoint URL``: each run becomes a trace of spans named
# and described by the OpenTelemetry GenAI semantic conventions (docs/otlp.md has the mapping
# and the version followed), encoded here as OTLP's ExportTraceServiceRequest, in protobuf or
# in OTLP/JSON, and sent over HTTP.  A file is read twice: first to check it (only the complete
# records of a valid file are exported, as ``export`` does), then to send each call's span as the
# call ends, so that what is held grows with the calls of the longest run, not the file's length.

_OTLP_PROTOCOLS = {"http/protobuf": "application/x-protobuf", "http/json": "application/json"}
_OTLP_REQUEST_BYTES = 4 << 20  # spans per request, encoded, at most (a bigger span goes alone)
_OTLP_CONTENT_CAP = 16384  # characters of one content attribute; the rest is cut
_OTLP_KEPT = 2 << 20  # characters of the latest messages converted kept, with --content
_OTLP_TRIES = 5  # of one request answered 429, 502, 503 or 504
_OTLP_LONGEST_WAIT = 60.0  # seconds: a longer Retry-After is waited this long
_OTLP_LONGEST_TIMEOUT = 86400  # seconds a request may be given, at most: a day
_RETRYABLE = (429, 502, 503, 504)  # the OTLP specification's transient answers
_INTERNAL, _CLIENT = 1, 3  # Span.SpanKind
_STATUS_OK, _STATUS_ERROR = 1, 2  # Status.StatusCode (0, unset: a call of a kind not known to end)
_INT64 = 1 << 63
# A call's span ends at the latest of these records; without one, it is unfinished.
_CALL_ENDS = {
    "model": ("model_exec_end",),
    "tool": ("tool_exec_end",),
    "compact": ("context_compacted", "context_prepare_end"),
}
# The records whose data a call's span reads (a model request's is read as it comes).
_CALL_DATA = frozenset(
    (
        "model_exec_end",
        "tool_exec_start",
        "tool_invoke_start",
        "tool_exec_end",
        "context_compacted",
        "context_prepare_end",
    )
)
_FINISH_REASONS = {"toolUse": "tool_call", "safety": "content_filter"}  # agentgo's -> the conventions'


_Attributes = List[Tuple[str, Any]]  # values: str, int (int64), float, bool, or a list of str
_Common = Callable[[str, str], _Attributes]
_CallSpan = Tuple[str, int, _Attributes, Optional[str]]  # name, kind, attributes, error


class OtlpError(Exception):
    """Sending to an OTLP endpoint failed: the message names the endpoint and the answer."""


class _OtlpSpan(NamedTuple):
    """One span, every string already one protobuf can carry (see ``_safe``)."""

    trace_id: bytes
    span_id: bytes
    parent_id: bytes  # b"" for a run's span, the root of its trace
    name: str
    kind: int
    start: int  # Unix time in nanoseconds
    end: int
    attributes: _Attributes
    links: List[Tuple[bytes, bytes]]  # (trace id, span id)
    error: Optional[str]  # the status message of a span that failed, else None
    ended: bool  # whether it is known to have ended as it should (status OK), when not failed


def otlp_requests(
    sources: Iterable[Union[str, os.PathLike[str]]],
    *,
    protocol: str = "http/protobuf",
    content: bool = False,
    salt: str = "",
    service_name: str = "session.py",
    resource: Optional[Dict[str, str]] = None,
    max_request_bytes: int = _OTLP_REQUEST_BYTES,
    max_line_bytes: int = _MAX_LINE_BYTES,
    entries: Optional[List[Dict[str, Any]]] = None,
) -> Iterator[bytes]:
    """Yield OTLP ``ExportTraceServiceRequest`` bodies holding the spans of session files.

    *sources* are taken as ``export`` takes them (files, and directories' ``*.jsonl`` files).
    Each run is a trace; its calls are spans (docs/otlp.md).  A body is protobuf, or with
    *protocol* ``"http/json"`` OTLP/JSON; its spans take at most *max_request_bytes* (one
    bigger span goes alone).  Ids are derived from the session, run, execution id and attempt
    (and *salt*, which the session's id then ends with too, after a colon): the same file gives
    the same ids.  The resource holds *service_name* and
    the attributes *resource* names (Phoenix's project: ``openinference.project.name``).
    With *content*, the messages, system instructions, tool definitions, arguments and
    results go along too, without credentials, each attribute at most 16,384 characters (the
    latest input messages that fit; a longer value cut).  An invalid or unreadable file is
    left out; each file's ``validate --json`` fields, with ``spans``, are appended to
    *entries* if given.
    """
    if protocol not in _OTLP_PROTOCOLS:
        raise ValueError(f"protocol must be one of {', '.join(_OTLP_PROTOCOLS)}, not {protocol!r}")
    encode, wrap = (_span_json, _request_json) if protocol == "http/json" else (_span_proto, _request_proto)
    extra = {key: value for key, value in (resource or {}).items() if key != "service.name"}
    resource_attributes = [
        (_safe(key), _safe(value)) for key, value in {"service.name": service_name, **extra}.items()
    ]
    batch: List[bytes] = []
    size = 0
    for name in _session_files(sources, set()):
        entry: Dict[str, Any] = {}
        if entries is not None:
            entries.append(entry)
        for span in _file_spans(name, content, salt, max_line_bytes, entry):
            encoded = encode(span)
            if batch and size + len(encoded) > max_request_bytes:
                body, batch, size = wrap(resource_attributes, batch), [], 0  # the batch let go
                yield body
            batch.append(encoded)
            size += len(encoded) + 1  # and a comma, in JSON
    if batch:
        yield wrap(resource_attributes, batch)


def _checked(name: str, max_line_bytes: int, entry: Dict[str, Any]) -> Optional[ReadResult]:
    """The first read of the file *name*: its result, or ``None`` when it is not valid, and
    its manifest fields in *entry*.  What the check kept of the calls goes with it, before the
    second read keeps its own."""
    tally = _Summarizer()
    try:
        result = read(name, tally, max_line_bytes=max_line_bytes, resolve=False)
    except (FormatError, OSError) as exc:
        entry.update(_failure_fields(name, exc), spans=0)
        return None
    entry.update(_valid_fields(name, result, tally), spans=0)
    return result


def _file_spans(
    name: str, content: bool, salt: str, max_line_bytes: int, entry: Dict[str, Any]
) -> Iterator[_OtlpSpan]:
    """The spans of the file *name*, each as its call ends, once a first read found the file
    valid (none when it is not); *entry* becomes the file's manifest entry, its spans counted
    as they go.  A file that changes between the two reads (cut, or replaced) is then reported
    invalid: the spans before the change are not taken back."""
    result = _checked(name, max_line_bytes, entry)
    if result is None:
        return
    traces = _Traces(name, content, salt, max_line_bytes)
    try:
        records = iter_records(name, max_line_bytes=max_line_bytes, resolve=False)
        with contextlib.closing(cast(Generator[Record, None, None], records)):  # the file, once read
            for record in itertools.islice(records, result.records):
                if record.session_id != result.session_id:
                    raise FormatError("the file changed while it was read", name, record.seq, record.offset)
                for span in traces.add(record):
                    entry["spans"] += 1
                    yield span
        for span in traces.rest():
            entry["spans"] += 1
            yield span
    except (FormatError, OSError) as exc:
        sent = entry["spans"]
        entry.clear()
        entry.update(_failure_fields(name, exc), spans=sent)


class _OtlpCall:
    """What one attempt of a call left in the file, as far as its span needs it."""

    def __init__(self, execution: Execution, span_id: bytes, parent: bytes, start: int) -> None:
        self.execution = execution
        self.span_id = span_id
        self.parent = parent
        self.start = self.last = start
        self.end: Optional[int] = None  # the time of its end record, if one was read
        self.data: Dict[str, Dict[str, Any]] = {}  # by record type: those _CALL_DATA names
        self.request: Dict[str, _Attributes] = {}  # "config", and "content" when asked
        self.links: List[bytes] = []
        self.compacted = False  # whether a compaction before it made its context


class _OtlpRun:
    def __init__(self, run_id: str, start: int) -> None:
        self.run_id = run_id
        self.start = self.last = start
        self.closed = False
        self.agent_end: Dict[str, Any] = {}
        self.asked = False  # whether its first model request was read
        self.input: Optional[_OtlpMessage] = None  # the newest user message of that request
        self.answer: Dict[str, Any] = {}  # the message of its latest model call that answered
        # what is kept of its calls once their spans are out (execution ids are run-local, and
        # no record of a run comes after its run_close): each attempt that started (ended, or
        # under way), let go with the run
        self.calls = _Attempts()


class _Traces:
    """The spans of one session file, each made as its call (or run) ends: only the calls and
    runs under way are held, and the span ids of the current run's calls."""

    def __init__(self, name: str, content: bool, salt: str, max_line_bytes: int) -> None:
        self._content = _Contents(name, max_line_bytes) if content else None
        self._salt = salt
        self._session = ""
        self._time = 0  # of the latest record whose time could be read
        self._runs: Dict[str, _OtlpRun] = {}
        self._calls: Dict[Tuple[str, str, int], _OtlpCall] = {}  # under way
        self._compacted = False  # whether the session's context was compacted yet

    def add(self, record: Record) -> List[_OtlpSpan]:
        """Take in *record*: the spans of the call or run it ends."""
        self._time = _unix_nanos(record.time, self._time)
        if record.run_id is None:
            self._session = record.session_id
            return []
        if self._content is not None:
            self._content.add(record)
        if record.type == "run_start":
            for before in self._runs.values():  # left open: the reader lets none of its records come
                before.calls = _Attempts()
            self._runs[record.run_id] = _OtlpRun(record.run_id, self._time)
        run = self._runs.get(record.run_id)  # the reader checks that the run was started
        if run is None:
            return []  # a record of a run closed: the reader refuses it
        run.last = self._time
        if record.type == "run_close":
            run.closed = True
            return [self._run_span(self._runs.pop(record.run_id))]
        if record.type == "agent_end":
            run.agent_end = record.data
        elif "execution" in record.data:
            return self._add_to_call(record)
        return []

    def rest(self) -> Iterator[_OtlpSpan]:
        """The spans of the calls and runs the file left under way, once it is read."""
        for (run_id, _, _), call in self._calls.items():
            yield self._call_span(run_id, call)
        for run in self._runs.values():
            yield self._run_span(run)

    def _add_to_call(self, record: Record) -> List[_OtlpSpan]:
        try:
            execution = _execution_from_json(record.data["execution"], record)
        except (FormatError, TypeError, ValueError):
            return []  # a shape the format does not write: no call to show it in
        assert record.run_id is not None
        key = (record.run_id, execution.id, execution.attempt)
        call = self._calls.get(key)
        if call is None:
            if self._runs[record.run_id].calls.started(execution.id, execution.attempt):
                return []  # a record after its end: nothing its span shows
            call = self._calls[key] = self._new_call(record.run_id, execution)
        call.last = self._time
        ends = _CALL_ENDS.get(execution.kind, ())
        if record.type in ends:
            call.end = self._time
        self._take(record, call)
        if not ends or record.type != ends[-1]:
            return []  # under way still (or of a kind not known to end: at the file's end)
        return [self._call_span(record.run_id, self._calls.pop(key))]

    def _take(self, record: Record, call: _OtlpCall) -> None:
        """What of *record* the span of *call*, or of its run, shows."""
        assert record.run_id is not None
        if record.type == "context_compacted":
            self._compacted = True
        if record.type in _CALL_DATA:
            call.data[record.type] = record.data
        elif record.type == "model_request" and type(record.data.get("request")) is dict:
            call.request["config"] = []
            config = _object(record.data["request"].get("config"))
            _put_count(call.request["config"], "gen_ai.request.max_tokens", config.get("max_tokens"))
            if self._content is not None:
                call.request["content"] = self._content.of_request(record.data)
                self._asked(self._runs[record.run_id], record.data)
        if record.type == "model_exec_end" and _message_value(record.data.get("message")):
            self._runs[record.run_id].answer = record.data["message"]

    def _asked(self, run: _OtlpRun, data: Dict[str, Any]) -> None:
        """The run's input, from its first model request: the newest user message there (a
        resumed run's context still holds the questions of the runs before it)."""
        if not run.asked and self._content is not None:
            run.asked = True
            _, latest, _ = self._content.context(data)
            run.input = next((m for m in latest if m.role == "user"), None)

    def _new_call(self, run_id: str, execution: Execution) -> _OtlpCall:
        """The call's span, under its parent's latest attempt (or the run), linked to the
        attempt before it."""
        calls = self._runs[run_id].calls
        parent = self._span_id(run_id)
        parent_attempt = calls.latest(execution.parent_id)
        if execution.parent_id and parent_attempt is not None:
            parent = self._span_id(run_id, execution.parent_id, parent_attempt)
        span_id = self._span_id(run_id, execution.id, execution.attempt)
        call = _OtlpCall(execution, span_id, parent, self._time)
        call.compacted = self._compacted
        if calls.started(execution.id, execution.attempt - 1):
            call.links.append(self._span_id(run_id, execution.id, execution.attempt - 1))
        calls.add(execution.id, execution.attempt)
        return call

    def _span_id(self, run_id: str, *call: Any) -> bytes:
        return _otlp_id(8, self._salt, self._session, run_id, *call)

    def _run_span(self, run: _OtlpRun) -> _OtlpSpan:
        attributes = self._common("invoke_agent", "AGENT")
        summary = run.agent_end.get("summary")
        if type(summary) is dict and type(summary.get("end_reason")) is str:
            attributes.append(("session_jsonl.end_reason", _safe(summary["end_reason"])))
        if self._content is not None:
            attributes += _run_content(run)
        error = _error_status(run.agent_end.get("error"), attributes)
        if error is None and not run.closed:
            error = _unfinished("run_close", attributes)
        return _OtlpSpan(
            _otlp_id(16, self._salt, self._session, run.run_id),
            self._span_id(run.run_id),
            b"",
            "invoke_agent",
            _INTERNAL,
            run.start,
            run.last,
            attributes,
            [],
            error,
            error is None,
        )

    def _call_span(self, run_id: str, call: _OtlpCall) -> _OtlpSpan:
        execution = call.execution
        make = _CALL_SPANS.get(execution.kind, _other_call)
        name, kind, attributes, error = make(call, self._common, self._content is not None)
        attributes.append(("session_jsonl.execution.id", _safe(execution.id)))
        _put_count(attributes, "session_jsonl.execution.attempt", execution.attempt)
        if execution.turn_index:
            _put_count(attributes, "session_jsonl.turn_index", execution.turn_index)
        ends = _CALL_ENDS.get(execution.kind)
        if call.end is None and ends is not None and error is None:
            error = _unfinished(ends[0], attributes)
        trace_id = _otlp_id(16, self._salt, self._session, run_id)
        links = [(trace_id, span_id) for span_id in call.links]
        end = call.last if call.end is None else call.end
        ended = error is None and ends is not None  # a host's own kind of call: not known
        return _OtlpSpan(
            trace_id, call.span_id, call.parent, name, kind, call.start, end, attributes, links, error, ended
        )

    def _common(self, operation: str, openinference_kind: str) -> _Attributes:
        """The attributes every span has: the operation, the session (with the salt after it:
        a backend that keys sessions by id across projects keeps a salted copy apart),
        Phoenix's span kind."""
        session = _safe(f"{self._session}:{self._salt}") if self._salt else self._session
        return [
            ("gen_ai.operation.name", operation),
            ("gen_ai.conversation.id", session),
            ("session.id", session),
            ("openinference.span.kind", openinference_kind),
        ]


_USAGE_ATTRIBUTES = (
    ("output", ("gen_ai.usage.output_tokens", "llm.token_count.completion")),
    ("cache_read", ("gen_ai.usage.cache_read.input_tokens", "llm.token_count.prompt_details.cache_read")),
    (
        "cache_write",
        (
            "gen_ai.usage.cache_write.input_tokens",
            "gen_ai.usage.cache_creation.input_tokens",  # its name before: backends still read it
            "llm.token_count.prompt_details.cache_write",
        ),
    ),
    ("total_tokens", ("llm.token_count.total",)),
)


def _run_content(run: _OtlpRun) -> _Attributes:
    """A run's input and final answer, as the conventions' messages and as OpenInference's
    ``input.value`` and ``output.value`` (their text), which backends show for the run."""
    out: _Attributes = []
    if run.input is not None:
        out += [
            ("gen_ai.input.messages", _cut(f"[{run.input.text}]", run.input.length + 2)),
            ("input.value", run.input.plain),
            ("input.mime_type", "text/plain"),
        ]
    answer = _message_value(run.answer)
    if answer:
        stop = answer.get("stop_reason")
        reason = _FINISH_REASONS.get(stop, stop) if type(stop) is str and stop else "stop"
        out.append(("gen_ai.output.messages", _content([dict(_otel_message(answer), finish_reason=reason)])))
        out += _reply_value(answer)
    return out


def _reply_value(message: Dict[str, Any]) -> _Attributes:
    """A model's reply as OpenInference's ``output.value``, which backends show as what the
    call (or run) answered: its text, or for a reply that calls tools a JSON object of its
    text (``content``) and its ``tool_calls`` (each the conventions' part, without its type)."""
    text = _plain_text(message)
    parts = _otel_message(message)["parts"]
    calls = [
        {key: part[key] for key in ("id", "name", "arguments")}
        for part in parts
        if part["type"] == "tool_call"
    ]
    if not calls:
        return [("output.value", _cut(_safe(text))), ("output.mime_type", "text/plain")]
    value = _content(dict({"content": text} if text else {}, tool_calls=calls))
    return [("output.value", value), ("output.mime_type", _json_type(value))]


def _json_type(value: str) -> str:
    """The MIME type of a JSON content attribute: JSON, or plain text once it was cut."""
    return "application/json" if len(value) <= _OTLP_CONTENT_CAP else "text/plain"


def _chat_span(call: _OtlpCall, common: _Common, content: bool) -> _CallSpan:
    """A model call's attempt: a ``chat`` span with its model, usage and finish reason."""
    attributes = common("chat", "LLM")
    end = call.data.get("model_exec_end", {})
    message = _message_value(end.get("message")) or _message_value(end.get("partial_message")) or {}
    usage = _object(message.get("usage"))
    model = usage.get("model") if type(usage.get("model")) is str else ""
    if type(usage.get("provider")) is str:
        attributes += [
            ("gen_ai.provider.name", _safe(usage["provider"])),
            ("llm.provider", _safe(usage["provider"])),
        ]
    if model:
        model = _safe(model)
        attributes += [
            ("gen_ai.request.model", model),
            ("gen_ai.response.model", model),
            ("llm.model_name", model),
        ]
    attributes += call.request.get("config", [])
    if call.compacted:
        attributes.append(("gen_ai.conversation.compacted", True))
    input_tokens = _input_tokens(usage)
    _put_count(attributes, "gen_ai.usage.input_tokens", input_tokens)
    _put_count(attributes, "llm.token_count.prompt", input_tokens)
    for key, names in _USAGE_ATTRIBUTES:
        for name in names:
            _put_count(attributes, name, usage.get(key))
    attributes += _cost_attributes(_object(usage.get("cost")))
    stop = message.get("stop_reason")
    reason = _safe(_FINISH_REASONS.get(stop, stop)) if type(stop) is str and stop else ""
    if reason:
        attributes.append(("gen_ai.response.finish_reasons", [reason]))
    if content:
        attributes += call.request.get("content", [])
        if message:
            output = [
                dict(_otel_message(message), finish_reason=reason or ("error" if "error" in end else "stop"))
            ]
            attributes.append(("gen_ai.output.messages", _content(output)))
        if "error" not in end and _message_value(end.get("message")):  # a failed call answered nothing
            attributes += _reply_value(message)
    error = _error_status(end.get("error"), attributes)
    return f"chat {model}" if model else "chat", _CLIENT, attributes, error


def _input_tokens(usage: Dict[str, Any]) -> Any:
    """The input tokens cached ones included, as the conventions count them.  A usage whose
    ``total_tokens`` is its input, output, cache read and cache write tokens together was
    counted the Anthropic way, its input without the cached tokens: they are added to it.
    Any other usage (its total the input and output, or no total) is taken as recorded."""
    counts = [usage.get(key) for key in ("input", "output", "cache_read", "cache_write", "total_tokens")]
    given, made, read, written, total = [value if type(value) is int else 0 for value in counts]
    if type(counts[0]) is int and read + written and total == given + made + read + written:
        return given + read + written
    return usage.get("input")


def _cost_attributes(cost: Dict[str, Any]) -> _Attributes:
    """What the usage's ``cost`` records (USD), as OpenInference's ``llm.cost.*`` (the
    prompt's the sum of its input, cache read and cache write costs) and, its total, as
    ``gen_ai.usage.cost``; nothing for a cost not recorded (or not a finite number)."""
    amounts = {key: _amount(cost.get(key)) for key in ("input", "output", "cache_read", "cache_write")}
    prompt = [a for a in (amounts["input"], amounts["cache_read"], amounts["cache_write"]) if a is not None]
    out: _Attributes = []
    if prompt:
        out.append(("llm.cost.prompt", _amount(sum(prompt))))  # inf: beyond a double
    out.append(("llm.cost.completion", amounts["output"]))
    out.append(("llm.cost.prompt_details.cache_read", amounts["cache_read"]))
    out.append(("llm.cost.prompt_details.cache_write", amounts["cache_write"]))
    parts = [amount for amount in amounts.values() if amount is not None]
    total = _amount(cost.get("total"))
    if total is None and parts:
        total = _amount(sum(parts))
    out += [("llm.cost.total", total), ("gen_ai.usage.cost", total)]
    return [(key, amount) for key, amount in out if amount is not None]


def _tool_span(call: _OtlpCall, common: _Common, content: bool) -> _CallSpan:
    """A tool call's attempt: an ``execute_tool`` span with the tool's name and call id."""
    attributes = common("execute_tool", "TOOL")
    start = call.data.get("tool_exec_start", {})
    invoked = call.data.get("tool_invoke_start", start)
    end = call.data.get("tool_exec_end", {})
    tool = _safe(next((d["tool"] for d in (end, start, invoked) if type(d.get("tool")) is str), ""))
    tool_id = _safe(next((d["tool_id"] for d in (end, start, invoked) if type(d.get("tool_id")) is str), ""))
    attributes += [
        ("gen_ai.tool.type", "function"),
        ("gen_ai.tool.name", tool),
        ("tool.name", tool),
    ]
    if tool_id:
        attributes.append(("gen_ai.tool.call.id", tool_id))
    if content and "args" in invoked:
        attributes.append(("gen_ai.tool.call.arguments", _text_or_json(invoked["args"])))
    if content and "result" in end:
        attributes.append(("gen_ai.tool.call.result", _text_or_json(end["result"])))
    error = _error_status(end.get("error"), attributes)
    if error is None and end.get("is_error") is True:
        error = _error_status({"message": "the tool reported an error", "type": "tool_error"}, attributes)
    return f"execute_tool {tool}" if tool else "execute_tool", _INTERNAL, attributes, error


def _compact_span(call: _OtlpCall, common: _Common, content: bool) -> _CallSpan:
    """A compaction: a span of its own, with what the compaction recorded if *content* (it
    may hold a summary of the conversation)."""
    attributes = common("compact", "CHAIN")
    compaction = call.data.get("context_compacted", {}).get("compaction")
    if content and compaction is not None:
        attributes.append(("session_jsonl.compaction", _content(compaction)))
    error = _error_status(call.data.get("context_prepare_end", {}).get("error"), attributes)
    return "compact", _INTERNAL, attributes, error


def _other_call(call: _OtlpCall, common: _Common, content: bool) -> _CallSpan:
    """A call of a kind the format does not name: a span by its kind, from its records."""
    kind = _safe(call.execution.kind)
    return kind or "call", _INTERNAL, common(kind, "UNKNOWN"), None


_CALL_SPANS = {"model": _chat_span, "tool": _tool_span, "compact": _compact_span}


def _error_status(error: Any, attributes: _Attributes) -> Optional[str]:
    """The status message of a recorded error (``None`` without one); its ``error.type``
    goes to *attributes*."""
    if type(error) is not dict:
        return None
    kind = error.get("type")
    attributes.append(("error.type", _safe(kind) if type(kind) is str and kind else "_OTHER"))
    message = error.get("message")
    return _safe(message) if type(message) is str and message else "error"


def _unfinished(end_type: str, attributes: _Attributes) -> str:
    attributes.append(("error.type", "unfinished"))
    return f"unfinished: the file holds no {end_type} for it"


class _OtlpMessage(NamedTuple):
    """A message as the content attributes need it, made once per ``message`` record."""

    role: Any
    text: str  # the conventions' JSON of the message, at most the cap of it (a system message's
    # parts, without the brackets around them: they are joined into one list)
    length: int  # of that JSON whole
    plain: str  # a user message's text, at most the cap of it (a run's input.value)


def _otlp_message(value: Any) -> _OtlpMessage:
    message = _message_value(value) or {}
    role = message.get("role")
    converted = _otel_message(message)
    text = _json_content(converted["parts"] if role == "system" else converted)
    kept = text[1:-1] if role == "system" else text
    plain = _cut(_safe(_plain_text(message))) if role == "user" else ""
    return _OtlpMessage(role, kept[:_OTLP_CONTENT_CAP], len(text), plain)


def _plain_text(message: Dict[str, Any]) -> str:
    """The text blocks of *message*, one after another."""
    blocks = message.get("content") or ()
    return "\n".join(b["text"] for b in blocks if type(b) is dict and type(b.get("text")) is str)


class _Contents:
    """The content attributes of a file's model requests.  The file is read without resolving
    its references: each ``message`` record is turned into the conventions' JSON as it is
    read, and a request takes the latest of its messages that fit, so the cost grows with the
    file, not with each request's context again.  The latest messages converted are kept, up
    to ``_OTLP_KEPT`` characters; an older one a request shows is read again at its offset."""

    def __init__(self, name: str, max_line_bytes: int) -> None:
        self._name = name
        self._max_line_bytes = max_line_bytes
        self._seqs = array.array("q")  # of the message records, in order (8 bytes each)
        self._offsets = array.array("q")  # of the same records
        self._system: List[int] = []  # where the system messages are among them
        self._kept: Dict[int, _OtlpMessage] = {}  # by seq, the latest used last
        self._kept_size = 0
        self._tools: Dict[int, str] = {}

    def add(self, record: Record) -> None:
        if record.type == "message":
            message = _otlp_message(record.data.get("message"))
            if message.role == "system":
                self._system.append(len(self._seqs))
            self._seqs.append(record.seq)
            self._offsets.append(record.offset)
            self._keep(record.seq, message)
        elif record.type == "tools":
            self._tools[record.seq] = _tool_definitions(record.data.get("tools"))

    def _message(self, at: int) -> _OtlpMessage:
        """The message of the *at*th message record: kept, or read again."""
        seq = self._seqs[at]
        message = self._kept.pop(seq, None)
        if message is None:
            message = _otlp_message(self._read_again(seq, self._offsets[at]))
        else:
            self._kept_size -= len(message.text) + len(message.plain)
        self._keep(seq, message)
        return message

    def _keep(self, seq: int, message: _OtlpMessage) -> None:
        self._kept[seq] = message
        self._kept_size += len(message.text) + len(message.plain)
        while self._kept_size > _OTLP_KEPT:
            oldest = self._kept.pop(next(iter(self._kept)))
            self._kept_size -= len(oldest.text) + len(oldest.plain)

    def _read_again(self, seq: int, offset: int) -> Any:
        """The ``message`` of record *seq*, at *offset* (where the read found it)."""
        with builtins.open(self._name, "rb") as f:
            f.seek(offset)
            raw = f.readline(self._max_line_bytes + 1)
        obj = _parse_line(raw, self._name, seq, offset, None, -1) if raw.endswith(b"\n") else {}
        if obj.get("seq") != seq or type(obj.get("data")) is not dict:
            raise FormatError(f"record {seq} changed while the file was read", self._name, seq, offset)
        return obj["data"].get("message")

    def of_request(self, data: Dict[str, Any]) -> _Attributes:
        """A ``model_request``'s messages, system instructions and tool definitions."""
        request = data["request"]
        instructions, latest, count = self.context(data)
        if "messages" in request or "messages" not in data:  # version 1, or written whole
            tools = _tool_definitions(request.get("tools"))
        else:
            tools = self._tools.get(data["tools"], "") if type(data.get("tools")) is int else ""
        system = [m for m in instructions if m.length > 2]
        chat_messages = (m for m in latest if m.role != "system")
        chat, left_out = _latest_messages(chat_messages, count - len(instructions))
        out: _Attributes = [
            ("gen_ai.input.messages", chat),
            ("input.value", chat),  # what OpenInference's LLM spans hold: the call's raw input
            ("input.mime_type", _json_type(chat)),
        ]
        if left_out:
            out.append(("session_jsonl.input_messages_left_out", left_out))
        if system:
            whole = sum(m.length for m in system)  # each one's brackets make way for ", " or the list's
            out.append(("gen_ai.system_instructions", _cut(f"[{', '.join(m.text for m in system)}]", whole)))
        if tools:
            out.append(("gen_ai.tool.definitions", tools))
        return out

    def context(self, data: Dict[str, Any]) -> Tuple[List[_OtlpMessage], Iterator[_OtlpMessage], int]:
        """A ``model_request``'s system messages, all its messages latest first, and how many."""
        request = data["request"]
        if "messages" in request or "messages" not in data:  # version 1, or written whole
            written = request.get("messages")
            messages = [_otlp_message(m) for m in written] if type(written) is list else []
            instructions = [m for m in messages if m.role == "system"]
            return instructions, reversed(messages), len(messages)
        return self._referred(data["messages"])  # version 2: [first, last] ranges, checked by the reader

    def _referred(self, ranges: List[List[int]]) -> Tuple[List[_OtlpMessage], Iterator[_OtlpMessage], int]:
        """The system messages of the message records in *ranges*, all of them latest first
        (as they are taken), and how many there are: a request whose context is long costs
        what it shows, not its length."""
        seqs, system, message = self._seqs, self._system, self._message
        spans = [(bisect.bisect_left(seqs, first), bisect.bisect_right(seqs, last)) for first, last in ranges]
        instructions = [
            message(at)
            for start, end in spans
            for at in system[bisect.bisect_left(system, start) : bisect.bisect_left(system, end)]
        ]
        latest = (message(at) for start, end in reversed(spans) for at in range(end - 1, start - 1, -1))
        return instructions, latest, sum(end - start for start, end in spans)


def _tool_definitions(tools: Any) -> str:
    """A request's tools as the conventions' definitions (JSON), or ``""`` without any."""
    if type(tools) is not list or not tools:
        return ""
    return _content([dict({"type": "function"}, **tool) if type(tool) is dict else tool for tool in tools])


def _otel_message(message: Dict[str, Any]) -> Dict[str, Any]:
    """A message as the conventions' input and output messages hold it: a role and parts."""
    role = message.get("role")
    blocks = [block for block in message.get("content") or () if type(block) is dict]
    metadata = _object(message.get("metadata"))
    if role == "tool":
        text = "".join(b["text"] for b in blocks if type(b.get("text")) is str)
        return {
            "role": role,
            "parts": [{"type": "tool_call_response", "id": metadata.get("tool_call_id"), "response": text}],
        }
    return {"role": role, "parts": [_otel_part(block) for block in blocks]}


def _otel_part(block: Dict[str, Any]) -> Dict[str, Any]:
    kind = block.get("type")
    if kind == "text":
        return {"type": "text", "content": block.get("text")}
    if kind == "thinking":
        return {"type": "reasoning", "content": block.get("thinking")}
    call = block.get("tool_call")
    if kind == "toolCall" and type(call) is dict:
        return {
            "type": "tool_call",
            "id": call.get("id"),
            "name": call.get("name"),
            "arguments": call.get("args"),
        }
    return {"type": kind}  # an image or a tool reference: named, its data left out


def _latest_messages(latest: Iterable[_OtlpMessage], count: int) -> Tuple[str, int]:
    """The JSON array of the latest messages (*latest* gives the *count* of them, latest
    first) that fit in the cap together (the latest one alone is cut to fit), and how many
    older ones were left out: each request's whole context would cost its length again and
    again."""
    kept: List[str] = []
    size = 2
    for message in latest:
        if kept and size + message.length + 2 > _OTLP_CONTENT_CAP:
            break
        kept.append(message.text)
        size += message.length + 2
    whole = size - 2 if kept else size  # n messages, n - 1 separators
    return _cut(f"[{', '.join(reversed(kept))}]", whole), count - len(kept)


def _content(value: Any) -> str:
    """*value* as JSON text for a content attribute, cut at the cap."""
    return _cut(_json_content(value))


def _text_or_json(value: Any) -> str:
    """A string as its text (a tool's output, arguments a model wrote as JSON text), any other
    value as JSON, cut at the cap: a backend shows a string's lines, not a JSON string's."""
    return _cut(_safe(value)) if type(value) is str else _content(value)


def _json_content(value: Any) -> str:
    """*value* as JSON text, credentials dropped (the rule the writer applies to a request's
    config) and escaped for protobuf."""
    return _safe(json.dumps(_without_credentials(value, "", []), ensure_ascii=False))


def _cut(text: str, length: Optional[int] = None) -> str:
    """*text* cut at the cap, saying how much of its *length* (its own, by default) is left."""
    length = len(text) if length is None else length
    if length > _OTLP_CONTENT_CAP:
        return f"{text[:_OTLP_CONTENT_CAP]}... [{length - _OTLP_CONTENT_CAP} more characters cut]"
    return text


def _safe(text: str) -> str:
    """*text* as protobuf can carry it (valid UTF-8): a lone surrogate, which a JSON file
    can hold as ``\\udXXX``, becomes that escape, as text."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


def _object(value: Any) -> Dict[str, Any]:
    return value if type(value) is dict else {}


def _put_count(attributes: _Attributes, key: str, value: Any) -> None:
    """Add the attribute *key* when *value* is an integer protobuf's int64 holds."""
    count = _int64(value)
    if count is not None:
        attributes.append((key, count))


def _int64(value: Any) -> Optional[int]:
    return value if type(value) is int and -_INT64 <= value < _INT64 else None


def _otlp_id(size: int, *parts: Any) -> bytes:
    """A trace (16 bytes) or span (8 bytes) id: a hash of *parts*, the same on every export."""
    key = json.dumps(parts, ensure_ascii=True).encode()  # ASCII: any string hashes
    return hashlib.blake2b(key, digest_size=size, person=b"session.py otlp").digest()


def _unix_nanos(time: str, otherwise: int) -> int:
    """The RFC 3339 *time* in nanoseconds since 1970, or *otherwise* when it cannot be read or
    OTLP cannot hold it (its times are unsigned 64 bits: from 1970 to 2554)."""
    try:
        moment = _parse_rfc3339(time)
    except _CodecFault:
        return otherwise
    delta = moment - _EPOCH
    nanos = (delta.days * 86400 + delta.seconds) * 1_000_000_000 + delta.microseconds * 1000
    return nanos if 0 <= nanos < 1 << 64 else otherwise


_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)


# Protobuf, by hand: OTLP's trace.proto and common.proto, fields in number order as protobuf's
# own serializer writes them (the tests compare bytes with opentelemetry-proto's).


def _varint(n: int) -> bytes:
    n &= 0xFFFFFFFFFFFFFFFF  # a negative int64 as its two's complement, ten bytes
    out = bytearray()
    while n > 0x7F:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited field: bytes, a string or a message."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _any_proto(value: Any) -> bytes:
    """An AnyValue: string_value 1, bool_value 2, int_value 3, double_value 4, array_value 5
    (a oneof: written even when empty or zero)."""
    if isinstance(value, bool):
        return b"\x10\x01" if value else b"\x10\x00"
    if isinstance(value, int):
        return b"\x18" + _varint(value)
    if isinstance(value, float):
        return b"\x21" + struct.pack("<d", value)  # fixed64
    if isinstance(value, str):
        return _field(1, value.encode())
    return _field(5, b"".join(_field(1, _any_proto(item)) for item in value))


def _attributes_proto(number: int, attributes: _Attributes) -> bytes:
    """Repeated KeyValue field *number*: key 1, value 2."""
    return b"".join(
        _field(number, _field(1, key.encode()) + _field(2, _any_proto(value))) for key, value in attributes
    )


def _span_proto(span: _OtlpSpan) -> bytes:
    """A Span, framed as field 2 of ScopeSpans."""
    parts = [_field(1, span.trace_id), _field(2, span.span_id)]
    if span.parent_id:
        parts.append(_field(4, span.parent_id))
    parts += [_field(5, span.name.encode()), b"\x30" + _varint(span.kind)]  # name 5, kind 6
    if span.start:
        parts.append(b"\x39" + struct.pack("<Q", span.start))  # fixed64 7
    if span.end:
        parts.append(b"\x41" + struct.pack("<Q", span.end))  # fixed64 8
    parts.append(_attributes_proto(9, span.attributes))
    parts += [_field(13, _field(1, trace) + _field(2, linked)) for trace, linked in span.links]
    if span.error is not None:  # Status: message 2, code 3
        parts.append(_field(15, (_field(2, span.error.encode()) if span.error else b"") + b"\x18\x02"))
    elif span.ended:
        parts.append(_field(15, b"\x18\x01"))
    return _field(2, b"".join(parts))


def _request_proto(resource: _Attributes, spans: List[bytes]) -> bytes:
    """ExportTraceServiceRequest: resource_spans 1 (resource 1, scope_spans 2 (scope 1,
    spans 2)), the spans copied once (the request is what they weigh, not a few times that)."""
    scope = _field(1, _field(1, b"session.py") + _field(2, __version__.encode()))
    scope_spans = len(scope) + sum(len(span) for span in spans)
    head = _field(1, _attributes_proto(1, resource)) + b"\x12" + _varint(scope_spans) + scope  # field 2
    return b"".join([b"\x0a", _varint(len(head) + scope_spans - len(scope)), head, *spans])  # field 1


# OTLP/JSON: protobuf's JSON mapping, but ids in hex and enums as integers (the OTLP spec).


def _any_json(value: Any) -> Dict[str, Any]:
    if isinstance(value, bool):
        return {"boolValue": value}
    if isinstance(value, int):
        return {"intValue": str(value)}
    if isinstance(value, float):
        return {"doubleValue": value}
    if isinstance(value, str):
        return {"stringValue": value}
    return {"arrayValue": {"values": [_any_json(item) for item in value]}}


def _attributes_json(attributes: _Attributes) -> List[Dict[str, Any]]:
    return [{"key": key, "value": _any_json(value)} for key, value in attributes]


def _span_json(span: _OtlpSpan) -> bytes:
    out: Dict[str, Any] = {"traceId": span.trace_id.hex(), "spanId": span.span_id.hex()}
    if span.parent_id:
        out["parentSpanId"] = span.parent_id.hex()
    out.update(
        name=span.name, kind=span.kind, startTimeUnixNano=str(span.start), endTimeUnixNano=str(span.end)
    )
    out["attributes"] = _attributes_json(span.attributes)
    if span.links:
        out["links"] = [{"traceId": trace.hex(), "spanId": linked.hex()} for trace, linked in span.links]
    if span.error is not None:
        out["status"] = {"message": span.error, "code": _STATUS_ERROR}
    elif span.ended:
        out["status"] = {"code": _STATUS_OK}
    return json.dumps(out, ensure_ascii=False, separators=(",", ":")).encode()


def _request_json(resource: _Attributes, spans: List[bytes]) -> bytes:
    attributes = json.dumps(
        {"attributes": _attributes_json(resource)}, ensure_ascii=False, separators=(",", ":")
    )
    scope = json.dumps({"name": "session.py", "version": __version__}, separators=(",", ":"))
    head = f'{{"resourceSpans":[{{"resource":{attributes},"scopeSpans":[{{"scope":{scope},"spans":['
    parts = [b","] * (2 * len(spans) - 1)  # the spans copied once, with a comma between two
    parts[::2] = spans
    return b"".join([head.encode(), *parts, b"]}]}]}"])


# ---------------------------------------------------------------------------- OTLP/HTTP


def send_otlp(
    requests: Iterable[bytes],
    endpoint: str,
    *,
    protocol: str = "http/protobuf",
    headers: Optional[Dict[str, str]] = None,
    timeout: float = 10.0,
    tries: int = _OTLP_TRIES,
    rejected: Optional[List[str]] = None,
) -> int:
    """POST each of *requests* (from ``otlp_requests``, in the same *protocol*) to the OTLP/HTTP
    *endpoint* (a URL ending in ``/v1/traces``), gzipped, with *headers*; return how many were
    sent.  Each request, from connecting to the answer's last byte, takes at most *timeout*
    seconds.  An answer 429, 502, 503 or 504 is tried again, up to *tries* times in all, after
    its ``Retry-After`` (at most a minute) or else 1, 2, 4, ... seconds.  ``OtlpError`` naming
    the endpoint and the answer (or the reason there was none, or why it cannot be read) when
    one cannot be sent; the requests before it were.  An answer that accepted a request but
    rejected some of its spans (OTLP's partial success) is not tried again: what it says goes
    to *rejected*.  No message holds a header's value, even where a backend echoes it.
    ``ValueError`` for an *endpoint* that is not an http or https URL or holds a password,
    and for a header HTTP cannot carry (it names the header, never its value)."""
    import gzip

    _check_endpoint(endpoint)
    fields = {"Content-Type": _OTLP_PROTOCOLS[protocol], "Content-Encoding": "gzip"}
    fields.update(headers or {})
    for name, value in fields.items():
        _check_header(name, value)
    secrets = [value for value in (headers or {}).values() if value.strip()]
    sent = 0
    try:
        for body in requests:
            refused = _post(endpoint, gzip.compress(body, 6), fields, timeout, tries, secrets)
            if refused and rejected is not None:
                rejected.append(_unechoed(refused, secrets))
            sent += 1
    except OtlpError as exc:
        raise OtlpError(_unechoed(str(exc), secrets)) from None
    return sent


def _check_endpoint(endpoint: str) -> None:
    """``ValueError`` for an endpoint ``send_otlp`` cannot send to, without echoing a password
    in it (urllib would take ``user:password@host`` for a host and port, and print them)."""
    import urllib.parse

    parts = urllib.parse.urlsplit(endpoint)
    if parts.username is not None or parts.password is not None:
        raise ValueError(
            "the endpoint holds a user name or password: give them as a header instead "
            "(Authorization=Basic%20<base64 of user:password> in OTEL_EXPORTER_OTLP_HEADERS)"
        )
    if parts.scheme not in ("http", "https"):
        raise ValueError(f"the endpoint must be an http:// or https:// URL, not {endpoint!r}")


_HEADER_NAME = r"[-!#$%&'*+.^_`|~0-9A-Za-z]+"  # RFC 9110's token


def _check_header(name: str, value: str) -> None:
    """``ValueError`` naming a header HTTP cannot carry; never its value, which is often a
    credential (http.client's own message would print it whole)."""
    valid = re.match(_HEADER_NAME, name)
    if not valid or valid.end() < len(name):  # named up to the fault: what follows may be a value
        named = f"the header {valid.group()}" if valid else "a header"
        raise ValueError(f"the name of {named} holds a character HTTP cannot carry in a name (K=V, not K: V)")
    if re.search("[\r\n]", value):
        raise ValueError(
            f"the value of the header {name} holds a line break, which HTTP cannot carry "
            "(base64 wraps long values: join its lines, as base64 -w0 or tr -d '\\n' does)"
        )
    if re.search("[^\t\x20-\x7e\x80-\xff]", value):
        raise ValueError(f"the value of the header {name} holds a character HTTP cannot carry")


def _unechoed(text: str, secrets: List[str]) -> str:
    """*text* (a backend's words) with the headers' values sent to it blanked out."""
    for secret in secrets:
        text = text.replace(secret, "[a header's value]")
    return text


def _post(
    endpoint: str, body: bytes, headers: Dict[str, str], timeout: float, tries: int, secrets: List[str]
) -> str:
    """Send one request; what the answer says of spans it rejected (``""``: none).  An error
    answer's text is told with the *secrets* (the headers' values) blanked out."""
    import time

    attempt = 1
    while True:
        status, reason, told, text = _exchange(endpoint, body, headers, timeout)
        if 200 <= status < 300:
            try:
                return _partial_success(text, told.get("Content-Type", ""))
            except ValueError as exc:
                raise OtlpError(f"{endpoint}: HTTP {status}, but not an answer OTLP gives: {exc}") from None
        if status not in _RETRYABLE or attempt >= tries:
            raise OtlpError(f"{endpoint}: HTTP {status} {reason}{_answer_text(told, text, secrets)}")
        time.sleep(_retry_wait(told.get("Retry-After"), attempt))
        attempt += 1


def _exchange(
    endpoint: str, body: bytes, headers: Dict[str, str], timeout: float
) -> Tuple[int, str, Any, bytes]:
    """POST *body* once, within *timeout* seconds: the answer's status, reason, headers and
    first MiB of text.  ``OtlpError`` when there is no answer, or none HTTP can read."""
    import http.client
    import urllib.error
    import urllib.request

    request = urllib.request.Request(endpoint, body, headers, method="POST")
    try:
        try:
            answer = _opener(timeout).open(request)
        except urllib.error.HTTPError as exc:
            answer = exc  # an answer all the same: its status says what became of the request
        with answer:
            status = answer.getcode()
            try:
                text = answer.read(1 << 20)
            except (OSError, http.client.HTTPException):
                if 200 <= status < 300:  # what it says of the spans is lost
                    raise
                text = b""  # its status says what became of the request
            return status, answer.reason, answer.headers, text
    except (urllib.error.URLError, OSError, ValueError) as exc:  # refused, TLS, timeout, bad URL
        reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
        raise OtlpError(f"{endpoint}: {reason or type(reason).__name__}") from None
    except http.client.HTTPException as exc:  # no status line, too many or long headers, ...
        raise OtlpError(f"{endpoint}: the answer is not HTTP: {exc or type(exc).__name__}") from None


def _opener(timeout: float) -> Any:
    """A urllib opener whose request ends, answered or not, within *timeout* seconds (a
    socket's timeout bounds each read: a backend answering a byte at a time would hold it for
    ever), and whose redirects are errors (urllib would follow them with a GET, dropping the
    spans)."""
    import http.client
    import socket
    import time
    import urllib.request

    deadline = time.monotonic() + timeout

    def left() -> float:
        seconds = deadline - time.monotonic()
        if seconds <= 0:
            raise socket.timeout("timed out")
        return seconds

    plain, secure = _bounded_connections(left)

    class Bounded(urllib.request.HTTPHandler, urllib.request.HTTPSHandler):
        def do_open(self, http_class: Any, req: Any, **http_conn_args: Any) -> Any:
            bounded = secure if issubclass(http_class, http.client.HTTPSConnection) else plain
            return super().do_open(bounded, req, **http_conn_args)

    class Unredirected(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args: Any) -> None:
            return None

    return urllib.request.build_opener(Bounded, Unredirected)


def _bounded_connections(left: Callable[[], float]) -> Tuple[Any, Any]:
    """http.client's HTTP and HTTPS connections, each step of whose request (connecting, the
    TLS handshake, sending, each read of the answer) may take only the seconds *left*."""
    import http.client

    class Reads(io.RawIOBase):
        def __init__(self, raw: io.RawIOBase, sock: Any) -> None:
            self._raw, self._sock = raw, sock

        def readable(self) -> bool:
            return True

        def readinto(self, buffer: Any) -> Optional[int]:
            self._sock.settimeout(left())
            return self._raw.readinto(buffer)

        def close(self) -> None:
            self._raw.close()
            super().close()

    class Answer(http.client.HTTPResponse):
        def __init__(self, sock: Any, *args: Any, **kwargs: Any) -> None:
            super().__init__(sock, *args, **kwargs)
            self.fp = io.BufferedReader(Reads(self.fp.detach(), sock))

    class Plain(http.client.HTTPConnection):
        response_class = Answer

        def connect(self) -> None:
            self.timeout = left()
            super().connect()
            self.sock.settimeout(left())  # what the TLS handshake, next for HTTPS, may take

        def send(self, data: Any) -> None:
            if self.sock is not None:
                self.sock.settimeout(left())
            super().send(data)

    class Secure(http.client.HTTPSConnection, Plain):  # HTTPS's connect calls Plain's
        pass

    return Plain, Secure


def _partial_success(body: bytes, content_type: str) -> str:
    """What an ExportTraceServiceResponse says of the spans it rejected (its partial_success:
    rejected_spans 1, error_message 2), ``""`` when none; ``ValueError`` saying why when it
    is not one (a body of another type is not read)."""
    count: Any = 0
    message: Any = ""
    try:
        if content_type.startswith("application/json"):
            partial = json.loads(body or b"{}").get("partialSuccess") or {}
            count, message = int(partial.get("rejectedSpans", 0)), str(partial.get("errorMessage", ""))
        elif content_type.startswith("application/x-protobuf"):
            for number, value in _proto_fields(body):
                if number == 1 and isinstance(value, bytes):  # partial_success
                    fields = dict(_proto_fields(value))
                    count, text = fields.get(1, 0), fields.get(2, b"")
                    message = text.decode("utf-8", "replace") if isinstance(text, bytes) else ""
    except (TypeError, AttributeError, OverflowError) as exc:  # not an object; an infinite count
        raise ValueError(exc) from None
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None
    if not count and not message:
        return ""
    return f"the backend rejected {count} spans" + (f": {message}" if message else "")


def _proto_fields(data: bytes) -> Iterator[Tuple[int, Union[int, bytes]]]:
    """The fields of a protobuf message: (number, int or bytes); ``ValueError`` when it is
    not one."""
    at = 0
    while at < len(data):
        key, at = _read_varint(data, at)
        wire = key & 7
        value: Union[int, bytes]
        if wire == 0:
            value, at = _read_varint(data, at)
        elif wire in (1, 2, 5):  # fixed64, length-delimited, fixed32
            size, at = (8, at) if wire == 1 else (4, at) if wire == 5 else _read_varint(data, at)
            if at + size > len(data):
                raise ValueError("protobuf cut short")
            value, at = data[at : at + size], at + size
        else:
            raise ValueError(f"protobuf wire type {wire}")
        yield key >> 3, value


_VARINT_BYTES = 10  # the most a protobuf varint takes (a 64-bit one)


def _read_varint(data: bytes, at: int) -> Tuple[int, int]:
    value = 0
    for shift in range(0, 7 * _VARINT_BYTES, 7):
        if at >= len(data):
            raise ValueError("protobuf cut short")
        byte = data[at]
        value |= (byte & 0x7F) << shift
        at += 1
        if byte < 0x80:
            return value, at
    raise ValueError(f"a protobuf varint longer than {_VARINT_BYTES} bytes")


def _answer_text(told: Any, text: bytes, secrets: List[str]) -> str:
    """What an error answer says, for its message: where it redirects to, or its first 200
    characters, the *secrets* it echoes blanked out before the cut (which would leave a part)."""
    if told.get("Location"):
        return f" (to {told['Location']})"
    said = _unechoed(text.decode("utf-8", "replace"), secrets)[:200].strip()
    return f": {said}" if said else ""


def _retry_wait(retry_after: Optional[str], attempt: int) -> float:
    """Seconds to wait before trying again: the answer's ``Retry-After`` (seconds or an HTTP
    date), else 2 ** (attempt - 1); never more than a minute."""
    import email.utils
    import time

    wait = float(2 ** (attempt - 1))
    if retry_after:
        try:
            told = float(retry_after)
            wait = wait if math.isnan(told) else told  # time.sleep refuses a NaN
        except ValueError:
            with contextlib.suppress(TypeError, ValueError):
                wait = email.utils.parsedate_to_datetime(retry_after).timestamp() - time.time()
    return min(max(wait, 0.0), _OTLP_LONGEST_WAIT)


def _otlp_options(sub: Any) -> None:
    sub.add_argument(
        "--endpoint",
        metavar="URL",
        help="the OTLP/HTTP traces URL (default: OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, "
        "or OTEL_EXPORTER_OTLP_ENDPOINT + /v1/traces)",
    )
    sub.add_argument(
        "--protocol",
        choices=list(_OTLP_PROTOCOLS),
        help="the encoding (default: OTEL_EXPORTER_OTLP_TRACES_PROTOCOL or OTEL_EXPORTER_OTLP_PROTOCOL, "
        "else http/protobuf)",
    )
    sub.add_argument(
        "--header",
        action="append",
        default=[],
        type=_header_argument,
        metavar="K=V",
        help="an HTTP header, repeatable (also from OTEL_EXPORTER_OTLP_HEADERS)",
    )
    sub.add_argument(
        "--content", action="store_true", help="send messages, tool definitions, arguments and results too"
    )
    sub.add_argument("--salt", default="", help="mixed into every id: the same session again as new spans")
    sub.add_argument(
        "--service-name",
        metavar="NAME",
        help="the resource's service.name (default: OTEL_SERVICE_NAME, else session.py)",
    )
    sub.add_argument("--output", metavar="FILE", help="write the requests to FILE instead of sending them")
    sub.add_argument(
        "--timeout",
        type=_timeout_argument,
        default=10.0,
        metavar="S",
        help="seconds a request may take, from connecting to its answer's last byte (default: %(default)s)",
    )


def _timeout_argument(text: str) -> float:
    """--timeout's seconds: above 0 and at most a day (a socket takes no infinite timeout,
    nor a NaN, and a larger one overflows its clock)."""
    import argparse

    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    if not 0 < seconds <= _OTLP_LONGEST_TIMEOUT:  # NaN too
        raise argparse.ArgumentTypeError(f"a number of seconds above 0, at most {_OTLP_LONGEST_TIMEOUT:,}")
    return seconds


def _header_argument(text: str) -> Tuple[str, str]:
    import argparse

    name, equals, value = text.partition("=")
    if not equals or not name.strip():  # not echoed: it may be a credential
        raise argparse.ArgumentTypeError("a header is given as NAME=VALUE")
    return name.strip(), value.strip()


def _otlp_endpoint(args: Any) -> Optional[str]:
    """--endpoint, else the traces endpoint the environment names (OTLP's variables)."""
    if args.endpoint:
        return str(args.endpoint)
    traces = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "").strip()
    base = os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip()
    return traces or (base.rstrip("/") + "/v1/traces" if base else None)


def _otlp_protocol(args: Any) -> str:
    """--protocol, else the one the environment names (OTLP's variables), else protobuf."""
    for variable in ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"):
        named = os.environ.get(variable, "").strip()
        if named and not args.protocol:
            if named not in _OTLP_PROTOCOLS:
                args.usage_error(f"{variable}={named}: this command sends {' or '.join(_OTLP_PROTOCOLS)}")
            return named
    return str(args.protocol or "http/protobuf")


def _environment_pairs(variable: str) -> Dict[str, str]:
    """The pairs of an OpenTelemetry environment *variable*: ``k=v,k2=v2``, values
    percent-encoded (OTEL_EXPORTER_OTLP_HEADERS, OTEL_RESOURCE_ATTRIBUTES)."""
    import urllib.parse

    pairs = {}
    for pair in os.environ.get(variable, "").split(","):
        name, equals, value = pair.partition("=")
        if equals and name.strip():
            pairs[name.strip()] = urllib.parse.unquote(value.strip())
    return pairs


def _otlp_command(args: Any) -> int:
    endpoint = _otlp_endpoint(args)
    if endpoint is None and args.output is None:
        args.usage_error("give --endpoint URL (or set OTEL_EXPORTER_OTLP_ENDPOINT), or --output FILE")
    args.protocol = _otlp_protocol(args)
    if _no_session_file(args):
        return 1
    entries: List[Dict[str, Any]] = []
    rejected: List[str] = []
    try:
        if args.output is not None:  # not among the inputs, as export checks its own
            _session_files(args.files, {os.path.realpath(args.output)})
        requests = otlp_requests(
            args.files,
            protocol=args.protocol,
            content=args.content,
            salt=args.salt,
            service_name=args.service_name or os.environ.get("OTEL_SERVICE_NAME") or "session.py",
            resource=_environment_pairs("OTEL_RESOURCE_ATTRIBUTES"),
            max_line_bytes=args.max_line_bytes,
            entries=entries,
        )
        if args.output is None:
            assert endpoint is not None
            headers = dict(_environment_pairs("OTEL_EXPORTER_OTLP_HEADERS"), **dict(args.header))
            options = {"protocol": args.protocol, "headers": headers, "timeout": args.timeout}
            count = send_otlp(requests, endpoint, rejected=rejected, **options)
        else:
            count, endpoint = _write_requests(requests, args.output, args.protocol), args.output
    except ValueError as exc:
        _print_error(f"{args.prog} otlp: error: {exc}")
        return 2
    except OtlpError as exc:
        _print_error(f"{args.prog} otlp: not sent: {exc}")
        return _EX_IOERR
    return _otlp_report(args, endpoint, count, entries, rejected)


def _otlp_report(
    args: Any, where: str, count: int, entries: List[Dict[str, Any]], rejected: List[str]
) -> int:
    """Say what was left out, what the backend rejected and what was sent; the exit status."""
    for entry in entries:
        if not entry["ok"]:
            _print_error(f"{_failure_text(entry)} (left out)")
    for said in rejected:
        _print_error(f"{args.prog} otlp: {where}: {said}")
    spans = sum(entry["spans"] for entry in entries)
    kept = sum(1 for entry in entries if entry["ok"])
    _print_text(
        f"{where}: {spans} spans of {kept} files in {count} requests ({len(entries) - kept} left out)"
    )
    return 0 if kept == len(entries) and not rejected else 1


def _write_requests(requests: Iterable[bytes], name: str, protocol: str) -> int:
    """Write *requests* to the file *name* as ``_publish`` writes a file (a device or a pipe,
    such as /dev/stdout, is written straight into, never replaced): protobuf requests one
    after another (which protobuf reads as one request), JSON ones a line each."""
    return _publish(name, functools.partial(_write_each, requests, protocol=protocol))


def _write_each(requests: Iterable[bytes], f: BinaryIO, protocol: str) -> int:
    count = 0
    for body in requests:
        _output_step(functools.partial(f.write, body + b"\n" if protocol == "http/json" else body))
        count += 1
    return count


COMMANDS.append(
    _Command(
        "otlp",
        _EXPORT_COMMANDS["otlp"],
        "0 every file valid and sent (or written); 1 any left out (invalid or unreadable), none found "
        "or spans rejected",
        True,
        _otlp_options,
        _otlp_command,
    )
)
