"""Tests for session_export.py, in its order: export, then the html page (in a real browser
too).  The helpers that make and read sessions are test_session.py's."""

from __future__ import annotations

import base64
import contextlib
import datetime as dt
import errno
import html
import html.parser
import io
import json
import os
import random
import re
import shlex
import shutil
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

import pytest

import session
import session_export
from session import Event, Execution, Message, ModelRequest
from test_session import (
    HERE,
    MODEL,
    MODULE,
    T0,
    TOOL,
    Terminal,
    busy_file,
    dump,
    envelope_lines,
    gappy_file,
    impossible_file,
    need,
    offsets,
    records,
    run_cli,
    sample_file,
)

# ---------------------------------------------------------------------------- export


def damaged_corpus(folder: Path) -> Dict[str, bool]:
    """Session files with every kind of damage a crash or a careless copy leaves, built with
    the library; file name -> whether ``validate`` calls it valid."""
    (folder / "sub").mkdir(parents=True)
    valid = dict.fromkeys(("clean-0.jsonl", "clean-1.jsonl", "sub/clean-2.jsonl", "gappy.jsonl"), True)
    for n, name in enumerate(valid):  # the third in version 1
        busy_file(folder / name, 6 + n, seed=n, version=2 - n // 2) if n < 3 else gappy_file(folder / name)
    seeds = iter(range(10, 100))

    def lines() -> List[bytes]:  # a new session's
        made = busy_file(folder / "new.jsonl", 5, seed=next(seeds))
        blob = made.read_bytes()
        made.unlink()
        return blob.splitlines(keepends=True)

    def cut_after_usage(x: List[bytes]) -> bytes:  # a record with usage, missing its newline
        last = max(i for i, line in enumerate(x) if b'"usage"' in line and b'"model_exec_end"' in line)
        return b"".join(x[:last]) + x[last][:-1]

    def damaged(how: Callable[[List[bytes]], bytes]) -> bytes:
        return how(lines())

    files = {
        "tail.jsonl": (damaged(lambda x: b"".join(x) + b'{"session_id":"'), True),
        "no-newline.jsonl": (damaged(cut_after_usage), True),
        "nul-tail.jsonl": (damaged(lambda x: b"".join(x) + b"\x00" * 1000), True),
        "cr.jsonl": (
            damaged(
                lambda x: b"".join(x).replace(b',"type":"model_exec_end"', b',\r"type":"model_exec_end"', 1)
            ),
            True,
        ),
        "copy.jsonl": ((folder / "clean-1.jsonl").read_bytes(), True),
        "nul.jsonl": (damaged(lambda x: b"".join([*x[:5], b"\x00" * 400 + x[5], *x[6:]])), False),
        "garbage.jsonl": (damaged(lambda x: b"".join([*x[:7], b"<<garbage>>\n", *x[7:]])), False),
        "duplicated.jsonl": (damaged(lambda x: b"".join([*x[:6], *x[5:]])), False),
        "glued.jsonl": (damaged(lambda x: b"".join(x + lines())), False),
        "glued-copy.jsonl": ((folder / "clean-0.jsonl").read_bytes() + b"".join(lines()), False),
        "empty.jsonl": (b"", False),
    }
    for name, (blob, ok) in files.items():
        (folder / name).write_bytes(blob)
        valid[name] = ok
    (folder / "notes.txt").write_text("not a session")
    if hasattr(os, "mkfifo"):
        os.mkfifo(folder / "sub" / "pipe.jsonl")  # opening it would wait for a writer forever
    return valid


def manifest_of(path: Path) -> Dict[str, Dict[str, Any]]:
    """The manifest's objects by file name relative to the corpus folder."""
    entries = [json.loads(line) for line in path.read_text().splitlines()]
    return {Path(entry["file"]).relative_to("sessions").as_posix(): entry for entry in entries}


def exported_slice(entry: Dict[str, Any], cwd: Path) -> bytes:
    blob: bytes = (cwd / entry["out"]).read_bytes()
    return blob[entry["out_start"] : entry["out_end"]]


def test_export_copies_exactly_what_read_validated(tmp_path: Path) -> None:
    valid = damaged_corpus(tmp_path / "sessions")
    done = run_cli("export", "sessions", "-o", "export.jsonl", cwd=tmp_path)
    exported = [name for name, ok in valid.items() if ok and name != "copy.jsonl"]
    total = sum(len(records(tmp_path / "sessions" / name)) for name in exported)
    assert done.returncode == 1 and done.stdout == f"export.jsonl: {total} records of 8 files (7 left out)\n"
    assert "sessions/garbage.jsonl:8: invalid JSON" in done.stderr
    assert (
        "sessions/copy.jsonl: left out: its session was exported from sessions/clean-1.jsonl" in done.stderr
    )
    manifest = manifest_of(tmp_path / "export.jsonl.manifest.jsonl")
    assert sorted(manifest) == sorted(valid)
    checked = run_cli("validate", "--json", *(f"sessions/{name}" for name in sorted(valid)), cwd=tmp_path)
    for fields in map(json.loads, checked.stdout.splitlines()):
        entry = manifest[Path(fields["file"]).relative_to("sessions").as_posix()]
        assert {key: entry[key] for key in fields} == fields
    output = (tmp_path / "export.jsonl").read_bytes()
    first_line = 1
    for name, entry in sorted(manifest.items(), key=lambda item: item[1]["out_start"] or -1):
        path = tmp_path / "sessions" / name
        if not entry["ok"] or name == "copy.jsonl":
            assert entry["out"] is None and entry["out_records"] == 0 and entry["longest_line"] == 0
            assert entry["duplicate_of"] == ("sessions/clean-1.jsonl" if name == "copy.jsonl" else None)
            continue
        blob = exported_slice(entry, tmp_path)
        assert blob == path.read_bytes()[: entry["complete_bytes"]]
        assert list(session.iter_records(io.BytesIO(blob))) == records(path)
        assert (entry["out_first_line"], entry["out_last_line"]) == (
            first_line,
            first_line + entry["records"] - 1,
        )
        assert entry["longest_line"] == max(map(len, blob.splitlines(keepends=True)))
        first_line += entry["records"]
    assert output.endswith(b"\n") and output.count(b"\n") == first_line - 1 == total
    assert manifest["no-newline.jsonl"]["tail_bytes"] > 0 and manifest["tail.jsonl"]["tail_bytes"] > 0


def test_export_prefix_keeps_what_repair_would(tmp_path: Path) -> None:
    valid = damaged_corpus(tmp_path / "sessions")
    before = {name: (tmp_path / "sessions" / name).read_bytes() for name in valid}
    done = run_cli("export", "sessions", "-o", "export.jsonl", "--prefix", cwd=tmp_path)
    assert done.returncode == 1
    glued = (tmp_path / "sessions" / "glued.jsonl").read_bytes().splitlines()
    second = next(n for n, line in enumerate(glued) if n and b'"type":"session_start"' in line)
    assert f"sessions/glued.jsonl: exported the {second} records before line {second + 1}" in done.stderr
    manifest = manifest_of(tmp_path / "export.jsonl.manifest.jsonl")
    invalid = sorted(name for name, ok in valid.items() if not ok)
    in_output = sorted((entry for entry in manifest.values() if entry["out"]), key=lambda e: e["out_start"])
    assert [entry["file"] for entry in in_output][-4:] == [
        f"sessions/{name}" for name in ("duplicated.jsonl", "garbage.jsonl", "glued.jsonl", "nul.jsonl")
    ]  # after every valid file, in order
    for name in invalid:
        entry = manifest[name]
        copy = tmp_path / "copy" / name
        copy.parent.mkdir(exist_ok=True)
        copy.write_bytes(before[name])
        if name == "empty.jsonl":
            assert entry["out"] is None and entry["line"] == 1
            continue
        kept = session.repair(copy).kept_records
        if name == "glued-copy.jsonl":  # its first session is clean-0's, exported already
            assert entry["out"] is None and entry["duplicate_of"] == "sessions/clean-0.jsonl"
            continue
        assert exported_slice(entry, tmp_path) == copy.read_bytes() and entry["out_records"] == kept
    assert {name: (tmp_path / "sessions" / name).read_bytes() for name in valid} == before


def test_export_split_writes_a_part_per_file(tmp_path: Path) -> None:
    valid = damaged_corpus(tmp_path / "sessions")
    assert run_cli("export", "--split", "sessions", "-o", "parts", cwd=tmp_path).returncode == 1
    manifest = manifest_of(tmp_path / "parts" / "manifest.jsonl")
    names = sorted(f"sessions/{name}" for name in valid)
    parts = {
        f"parts/part-{names.index(entry['file']):05d}.jsonl" for entry in manifest.values() if entry["out"]
    }
    assert {entry["out"] for entry in manifest.values()} - {None} == parts
    assert {f"parts/{p.name}" for p in (tmp_path / "parts").iterdir()} == parts | {"parts/manifest.jsonl"}
    for name, entry in manifest.items():
        if entry["out"]:
            blob = (tmp_path / entry["out"]).read_bytes()
            assert entry["out_start"] == 0 and entry["out_end"] == len(blob) == entry["complete_bytes"]
            assert blob == (tmp_path / "sessions" / name).read_bytes()[: len(blob)]
    again = run_cli("export", "--split", "sessions", "-o", "parts", cwd=tmp_path)
    assert again.returncode == 2 and "parts is not empty" in again.stderr
    for out in ("sessions/clean-0.jsonl", "sessions/sub/all.jsonl"):
        before = (tmp_path / "sessions" / "clean-0.jsonl").read_bytes()
        inside = run_cli("export", "sessions", "-o", out, cwd=tmp_path)
        assert (
            inside.returncode == 2
            and f"sessions holds the export's own output {tmp_path / out}" in inside.stderr
        )
        assert (tmp_path / "sessions" / "clean-0.jsonl").read_bytes() == before
    itself = run_cli("export", "sessions/clean-0.jsonl", "-o", "sessions/clean-0.jsonl", cwd=tmp_path)
    assert itself.returncode == 2 and "sessions/clean-0.jsonl is the export's own output" in itself.stderr


def test_export_of_valid_files_exits_0_and_shows_progress_on_a_terminal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    paths = [str(busy_file(tmp_path / f"{n}.jsonl", 3, seed=n)) for n in range(2)]
    out = str(tmp_path / "all.jsonl")
    for stderr, shown in ((Terminal(), True), (io.StringIO(), False)):
        monkeypatch.setattr(sys, "stderr", stderr)
        with contextlib.redirect_stdout(io.StringIO()) as stdout:
            assert session.main(["export", *paths, paths[0], "-o", out]) == 0  # a file named twice: once
        total = sum(len(records(Path(path))) for path in paths)
        assert stdout.getvalue() == f"{out}: {total} records of 2 files (0 left out)\n"
        progress = stderr.getvalue()
        sizes = [os.path.getsize(path) for path in paths]
        steps = "".join(f"\rexport: {done * 100 // sum(sizes)}% of 0.0 MB" for done in (0, sizes[0]))
        assert progress == (steps + "\r\033[K" if shown else "")
    assert run_cli("export", *paths).returncode == 2  # no -o


def test_export_and_otlp_of_folders_without_a_session_file_say_so_and_exit_1(tmp_path: Path) -> None:
    empty, plain = tmp_path / "empty", tmp_path / "plain"
    empty.mkdir()
    plain.mkdir()
    (plain / "config.json").write_text("{}")
    out = tmp_path / "all.jsonl"
    for command in (["export", "-o", str(out)], ["otlp", "--endpoint", "http://127.0.0.1:9/v1/traces"]):
        done = run_cli(*command, str(empty), str(plain))
        said = f"python -m session {command[0]}: no session file in {empty} {plain} "
        said += "(a folder's *.jsonl files are read)\n"
        assert (done.returncode, done.stdout, done.stderr) == (1, "", said)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty", "plain"]  # nothing written


def test_export_replaces_only_a_regular_file(tmp_path: Path) -> None:
    if not hasattr(os, "mkfifo"):
        pytest.skip("no named pipes on this system")
    source = str(busy_file(tmp_path / "one.jsonl", 2, seed=1))
    (tmp_path / "target").write_text("x", encoding="utf-8")
    os.mkfifo(tmp_path / "pipe")
    os.symlink("target", tmp_path / "link")
    os.mkfifo(tmp_path / "piped.jsonl.manifest.jsonl")
    for out in ("pipe", "link", "piped.jsonl"):
        done = run_cli("export", source, "-o", out, cwd=tmp_path)
        named = out if out != "piped.jsonl" else "piped.jsonl.manifest.jsonl"
        assert done.returncode == 2 and f"{named} is not a regular file" in done.stderr, done.stderr
    assert os.path.islink(tmp_path / "link") and (tmp_path / "target").read_text(encoding="utf-8") == "x"
    assert not os.path.isfile(tmp_path / "pipe") and not (tmp_path / "piped.jsonl").exists()
    done = run_cli("export", source, "-o", "target", cwd=tmp_path)  # a regular file: replaced
    assert (
        done.returncode == 0
        and done.stdout == f"target: {len(records(Path(source)))} records of 1 file (0 left out)\n"
    )


def test_export_never_leaves_a_half_export(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "in").mkdir()
    busy_file(tmp_path / "in" / "s.jsonl", 3, seed=1)
    out = tmp_path / "out"
    out.mkdir()
    session_export.export([tmp_path / "in"], out / "e.jsonl")
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    busy_file(tmp_path / "in" / "t.jsonl", 3, seed=2)

    def failing_fsync(fd: int) -> None:
        raise OSError(errno.EIO, "injected")

    monkeypatch.setattr(os, "fsync", failing_fsync)
    for split in (False, True):
        with pytest.raises(OSError, match="injected"):
            session_export.export([tmp_path / "in"], out / ("parts" if split else "e.jsonl"), split=split)
        assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert sorted(before) == ["e.jsonl", "e.jsonl.manifest.jsonl"]


@pytest.mark.skipif(sys.platform == "win32", reason="a file size limit (RLIMIT_FSIZE) stands for a full disk")
@pytest.mark.parametrize("out", [["e.jsonl"], ["parts", "--split"]])
def test_export_stops_when_its_output_cannot_be_written(tmp_path: Path, out: List[str]) -> None:
    (tmp_path / "in").mkdir()
    for n in range(2):
        busy_file(tmp_path / "in" / f"{n}.jsonl", 500, seed=n)  # more than the write buffer

    def small_disk() -> None:
        if sys.platform != "win32":  # (skipped there: this tells mypy)
            import resource

            resource.setrlimit(resource.RLIMIT_FSIZE, (20000, 20000))

    done = subprocess.run(
        [sys.executable, str(MODULE), "export", "in", "-o", *out],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        preexec_fn=small_disk,
    )
    assert (done.returncode, done.stdout) == (74, "")
    assert done.stderr == f"python -m session export: cannot write the output: {os.strerror(errno.EFBIG)}\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in"]


def test_export_never_copies_a_partial_record_of_a_growing_file(tmp_path: Path) -> None:
    source = busy_file(tmp_path / "source.jsonl", 40, seed=3).read_bytes()
    ends = set(offsets(source))
    target = tmp_path / "growing.jsonl"
    torn, resume = threading.Event(), threading.Event()

    def write() -> None:  # appends the source in pieces that end anywhere, mid-line mostly
        rng = random.Random(4)
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        done = offsets(source)[3] + 20
        os.write(fd, source[:done])
        torn.set()
        resume.wait()
        while done < len(source):
            piece = source[done : done + rng.randrange(1, 700)]
            os.write(fd, piece)
            done += len(piece)
            time.sleep(0.0005)
        os.close(fd)

    writer = threading.Thread(target=write)
    writer.start()
    torn.wait()
    exports = [session_export.export([target], tmp_path / "first.jsonl")[0]]
    assert exports[0]["records"] == 3 and exports[0]["tail_bytes"] == 20
    resume.set()
    while writer.is_alive() or len(exports) < 3:
        exports.append(session_export.export([target], tmp_path / "e.jsonl")[0])
        blob = (tmp_path / "e.jsonl").read_bytes()
        assert exports[-1]["ok"] and len(blob) == exports[-1]["complete_bytes"] in ends
        assert blob == source[: len(blob)]
    writer.join()
    last = session_export.export([target], tmp_path / "e.jsonl")[0]
    assert (tmp_path / "e.jsonl").read_bytes() == source and last["tail_bytes"] == 0


def documented_blocks(language: str) -> List[str]:
    """The code blocks in *language* of docs/many-sessions.md, "Many sessions at once"."""
    page = (HERE / "docs" / "many-sessions.md").read_text(encoding="utf-8")
    return re.findall(rf"```{language}\n(.*?)```", page, re.S)


def requests_in_export(folder: Path) -> List[Tuple[List[Any], List[Any]]]:
    """Every model call of the sessions *folder*'s export holds, of version 1 and 2 files: its
    CallRef's fields, and the messages ``read`` gives its request."""
    calls = []
    for line in (folder / "export.jsonl.manifest.jsonl").read_text().splitlines():
        entry = json.loads(line)
        if entry["out"]:
            for r in session.iter_records(folder / entry["file"]):
                if r.type == "model_request":
                    ref = [r.session_id, r.run_id, r.data["execution"]["id"], r.data["execution"]["attempt"]]
                    calls.append((ref, r.data["request"]["messages"]))
    versions = {
        json.loads(line)["data"]["version"]
        for line in (folder / "export.jsonl").read_text().splitlines()
        if '"session_start"' in line
    }
    assert versions == {1, 2} and len(calls) > 20
    return calls


def exported_corpus(folder: Path) -> Tuple[Dict[str, Dict[str, int]], List[Tuple[Any, ...]]]:
    """Export a damaged corpus in *folder* with the documented command; what ``summarize`` and
    ``read`` say of each exported session: usage by session, the failed tool calls."""
    damaged_corpus(folder / "sessions")
    (command,) = documented_blocks("sh")
    argv = shlex.split(command)
    assert argv[:3] == ["python", "-m", "session"]
    env = dict(os.environ, PYTHONPATH=str(HERE))
    done = subprocess.run([sys.executable, *argv[1:]], cwd=folder, env=env, capture_output=True, timeout=120)
    assert done.returncode == 1  # the corpus has invalid files
    usage: Dict[str, Dict[str, int]] = {}
    failed: List[Tuple[Any, ...]] = []
    for line in (folder / "export.jsonl.manifest.jsonl").read_text().splitlines():
        entry = json.loads(line)
        if entry["out"]:
            summary = session.summarize(folder / entry["file"])
            usage[summary.session_id] = summary.usage
            failed += [
                (
                    r.session_id,
                    r.run_id,
                    r.data["execution"]["id"],
                    r.data["tool"],
                    r.data["error"]["message"],
                )
                for r in session.iter_records(folder / entry["file"])
                if r.type == "tool_exec_end" and r.data.get("is_error") is True
            ]
    assert len(usage) == 8 and len(failed) > 5
    return usage, sorted(failed)


@pytest.mark.skipif(os.name != "posix", reason="symlinks are POSIX")
@pytest.mark.parametrize("link", ["symlink", "hard link"])
def test_export_refuses_its_output_reached_through_a_link_in_an_input_folder(
    tmp_path: Path, link: str
) -> None:
    sessions = tmp_path / "sessions"
    sessions.mkdir()
    sample_file(sessions / "a.jsonl")
    out = tmp_path / "all.jsonl"
    session_export.export([sessions], out)
    before = out.read_bytes()
    alias = sessions / "b.jsonl"
    if link == "symlink":
        alias.symlink_to(out)
    else:
        os.link(out, alias)
    with pytest.raises(ValueError, match=r"b\.jsonl is the export's own output .*all\.jsonl"):
        session_export.export([sessions], out)
    done = run_cli("export", str(sessions), "-o", str(out))
    assert done.returncode == 2 and "b.jsonl is the export's own output" in done.stderr
    assert out.read_bytes() == before


def test_an_export_that_publishes_while_another_does_waits_for_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A second export whose commit falls between the first's data and manifest (the input
    grew in between): it waits for the first to finish, so each manifest lands with its data."""
    source = sample_file(tmp_path / "s.jsonl")
    out = tmp_path / "all.jsonl"
    real_replace, second_done = os.replace, threading.Event()
    started: List[threading.Thread] = []

    def second() -> None:
        with session.open(source) as s, s.begin_run() as run:  # the input grows
            run.record(Event("turn_start"))
        session_export.export([source], out)
        second_done.set()

    def replace(src: Any, dst: Any) -> None:
        real_replace(src, dst)
        if Path(dst) == out and not started:
            started.append(threading.Thread(target=second))
            started[0].start()
            second_done.wait(2)  # with the folder locked, it cannot finish meanwhile

    monkeypatch.setattr(os, "replace", replace)
    session_export.export([source], out)
    assert second_done.wait(60)
    [entry] = [json.loads(line) for line in Path(f"{out}.manifest.jsonl").read_text().splitlines()]
    assert entry["out_end"] == len(out.read_bytes()) == len(source.read_bytes())


RACING_EXPORT = """
import sys, time
sys.path.insert(0, {here!r})
import session_export
source, out, start = sys.argv[1], sys.argv[2], float(sys.argv[3])
while time.time() < start:
    pass
for _ in range(5):
    session_export.export([source], out)
"""


def test_exports_racing_to_one_output_leave_data_and_manifest_that_agree(tmp_path: Path) -> None:
    """Two processes export a growing session to one output, again and again: at rest, the
    manifest always describes the data beside it, byte for byte."""
    script = tmp_path / "export.py"
    script.write_text(RACING_EXPORT.format(here=str(HERE)))
    source = tmp_path / "in" / "s.jsonl"
    source.parent.mkdir()
    out = tmp_path / "all.jsonl"
    with session.create(source) as s, s.begin_run() as run:
        for round_ in range(6):
            start = str(time.time() + 0.3)
            racers = [
                subprocess.Popen([sys.executable, "-S", str(script), str(source), str(out), start])
                for _ in range(2)
            ]
            i = 0
            while any(racer.poll() is None for racer in racers):  # the input grows as they read it
                i += 1
                run.record(Event("tool_exec_end", execution=TOOL, result={"i": i, "pad": "x" * 90}))
                time.sleep(0.0005)
            assert [racer.wait(timeout=120) for racer in racers] == [0, 0]
            [entry] = [json.loads(line) for line in Path(f"{out}.manifest.jsonl").read_text().splitlines()]
            data = out.read_bytes()
            assert entry["out_end"] == len(data) == entry["complete_bytes"], round_
            assert data == source.read_bytes()[: len(data)], round_


def test_the_documented_duckdb_queries_over_the_export_agree_with_summarize(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    need("duckdb", "the documented queries run on DuckDB")
    import duckdb

    usage, failed = exported_corpus(tmp_path)
    view, tokens, failures, full_input, parquet = documented_blocks("sql")
    monkeypatch.chdir(tmp_path)
    con = duckdb.connect()
    con.execute(view)
    found: Dict[str, Dict[str, int]] = {}
    for session_id, kind, total in con.execute(tokens).fetchall():
        found.setdefault(session_id, {})[kind] = total
    assert found == {sid: counts for sid, counts in usage.items() if counts}
    assert sorted(con.execute(failures).fetchall()) == failed
    set_call, query = full_input.split(";\n", 1)
    assert con.execute(set_call).fetchall() is not None and not con.execute(query).fetchall()  # no such call
    for call, messages in requests_in_export(tmp_path):
        con.execute("SET VARIABLE call = {session_id: $1, run_id: $2, execution: $3, attempt: $4}", call)
        assert [json.loads(message) for _, _, message in con.execute(query).fetchall()] == messages
    con.execute(parquet)
    groups = con.execute("SELECT max(row_group_num_rows) FROM parquet_metadata('export.parquet')").fetchone()
    assert groups is not None and groups[0] <= 4096
    lines = (tmp_path / "export.jsonl").read_bytes().count(b"\n")
    assert con.execute("SELECT count(*) FROM 'export.parquet'").fetchone() == (lines,)


@pytest.mark.spark
def test_the_documented_spark_queries_over_the_export_and_its_parquet_agree_with_summarize(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    need("java", "Spark runs on the JVM (Debian: openjdk-17-jre-headless)")
    need("pyspark", "the Spark test runs in tox -e spark")
    import duckdb
    from pyspark.sql import SparkSession

    usage, failed = exported_corpus(tmp_path)
    view, _, _, _, parquet = documented_blocks("sql")
    monkeypatch.chdir(tmp_path)
    con = duckdb.connect()
    con.execute(view)
    con.execute(parquet)
    from_json, from_parquet, queries = documented_blocks("python")
    spark = (
        SparkSession.builder.master("local[1]")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "1")
        .getOrCreate()
    )
    try:
        scope: Dict[str, Any] = {}
        for source in (from_json, from_parquet):  # the second redefines the first's view
            exec(source + queries, scope)  # the page's code, as written there
            found: Dict[str, Dict[str, int]] = {}
            for row in scope["tokens"].collect():
                found.setdefault(row.session_id, {})[row.kind] = row.tokens
            assert found == {sid: counts for sid, counts in usage.items() if counts}
            assert sorted(tuple(row) for row in scope["failed"].collect()) == failed
            for call, messages in requests_in_export(tmp_path)[:: 4 if source is from_json else 9]:
                fields = dict(zip(("session_id", "run_id", "execution", "attempt"), call))
                found_messages = [json.loads(row.message) for row in scope["full_input"](fields).collect()]
                assert found_messages == messages, call
    finally:
        spark.stop()


# ---------------------------------------------------------------------------- html page

PWN = "document.documentElement.dataset.pwned"
PAYLOADS = [
    f"<script>{PWN}='script'</script>",
    f'"><img src=x onerror="{PWN}=\'img\'">',
    f"'><svg onload={PWN}='svg'>",
    f"</script><script>{PWN}='close'</script>",
    f"javascript:{PWN}='url'",
    f"</pre></details></code><iframe srcdoc=\"<script>parent.{PWN}='frame'</script>\"></iframe>",
    "\u202egnp.exe\u200b \x1b[31mred\x1b[0m \u2028\u2029 <!-- \udc80 \U000e0041",
]
HOSTILE_NAME = f"x'\"><svg onload={PWN}='name'>.jsonl"  # a file name cannot hold a slash


def hostile_session(directory: Path) -> Path:
    """A valid session whose every string is an attack: ids, roles, tool names, argument keys,
    errors, record types, times, usage keys; ANSI, bidi and zero-width characters."""
    p = PAYLOADS
    sid, rid = p[3], p[1]
    objs: List[Dict[str, Any]] = []

    def add(kind: str, data: Dict[str, Any], time: str = "") -> None:
        moment = time or f"2026-12-02T09:27:{36 + len(objs):02d}.123456Z"
        run = {} if kind == "session_start" else {"run_id": rid}
        objs.append(
            {"session_id": sid, "seq": len(objs) + 1, "type": kind, "time": moment, **run, "data": data}
        )

    def message(role: str, *blocks: Dict[str, Any], **fields: Any) -> Dict[str, Any]:
        return {"$type": "agentgo.message.v1", "value": {"role": role, "content": list(blocks), **fields}}

    blocks: List[Dict[str, Any]] = [
        {"type": "text", "text": p[0]},
        {"type": "thinking", "thinking": p[2]},
        {
            "type": "toolCall",
            "tool_call": {"id": p[1], "name": p[0], "args": {p[3]: p[5]}, "args_raw_text": p[6]},
        },
        {"type": "image", "image": {"url": p[4], "mime_type": p[1]}},
        {"type": "image", "image": {"data": "aGk=", "mime_type": p[0]}},
        {"type": "tool_reference", "tool_name": p[5]},
        {"type": "toolCall", "tool_call": {"id": "c2", "name": "x\ny", "args": {}}},
        {"type": p[0], p[1]: p[2]},
    ]
    model = {"id": p[2], "kind": "model", "turn_index": 1, "attempt": 1}
    tool = {"id": p[1], "kind": "tool", "parent_id": p[2], "turn_index": 1, "attempt": 1}
    add("session_start", {"version": 1})
    add("run_start", {})
    add("agent_start", {})
    add("turn_start", {"turn_index": 1})
    add("model_exec_start", {"execution": model})
    request = {"messages": [message(p[0], *blocks, metadata={"tool_call_id": p[1], p[4]: p[5]})]}
    add(
        "model_request",
        {"execution": model, "request": dict(request, tools=[{"name": p[5]}], config={p[0]: p[1]})},
    )
    add("model_exec_end", {"execution": model, "error": {"message": p[6], "type": p[0]}})
    model = dict(model, attempt=2)
    add("model_exec_start", {"execution": model}, time=p[4])
    add("model_request", {"execution": model, "request": request})
    reply = message("assistant", *blocks, stop_reason=p[3], usage={"input": 7, p[0]: 3})
    add("model_exec_end", {"execution": model, "message": reply})
    add("message_end", {"execution": model, "message": reply})
    add(
        "tool_exec_start",
        {"execution": tool, "tool_id": p[1], "tool": p[0], "tool_label": p[6], "args": {p[2]: p[3]}},
    )
    add(
        "tool_exec_end",
        {
            "execution": tool,
            "tool": p[5],
            "result": {p[0]: p[6]},
            "is_error": True,
            "error": {"message": p[5]},
        },
    )
    add(
        "message_end",
        {"execution": tool, "message": message("tool", blocks[0], metadata={"tool_call_id": p[1]})},
    )
    add(p[0], {p[1]: p[2], "error": {"message": p[3]}})
    add("context_compacted", {"execution": {"id": p[6], "kind": p[5]}, "compaction": {p[4]: p[0]}})
    add("tool_exec_start", {"execution": dict(tool, id=p[6]), "tool": p[2]})
    add("agent_end", {"summary": {"end_reason": p[0]}, "error": {"message": p[2], "type": p[4]}})
    path = directory / HOSTILE_NAME
    path.write_bytes(b"".join(json.dumps(o, separators=(",", ":")).encode() + b"\n" for o in objs))
    return path


def html_page(path: Path, *options: str) -> str:
    """The page of *path*, made the way a user makes it (a lone module, -I -S); every link on
    it leads somewhere."""
    done = subprocess.run(
        [sys.executable, "-I", "-S", str(MODULE), "html", str(path), *options],
        capture_output=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    page = done.stdout.decode()
    assert_links_lead_somewhere(page)
    return page


def assert_links_lead_somewhere(page: str) -> None:
    """Every ``href="#…"`` on *page* names an element's id (a cut page leaves no dead link)."""
    parts = PageParts()
    parts.feed(page)
    ids = {attrs["id"] for _, attrs in parts.elements if attrs.get("id")}
    links = {attrs["href"] for _, attrs in parts.elements if attrs.get("href")}
    assert all(link and link.startswith("#") for link in links)
    assert {link[1:] for link in links if link} <= ids, sorted(
        {link for link in links if link} - {f"#{i}" for i in ids}
    )[:5]


class PageParts(html.parser.HTMLParser):
    """Every element of a page, with its attributes and the text of its style and scripts."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.elements: List[Tuple[str, Dict[str, Optional[str]]]] = []
        self.texts: Dict[str, List[str]] = {"style": [], "script": []}
        self._open: Optional[str] = None

    def handle_starttag(self, tag: str, attrs: List[Tuple[str, Optional[str]]]) -> None:
        self.elements.append((tag, dict(attrs)))
        self._open = tag if tag in self.texts else None
        if self._open:
            self.texts[tag].append("")

    def handle_endtag(self, tag: str) -> None:
        self._open = None

    def handle_data(self, data: str) -> None:
        if self._open:
            self.texts[self._open][-1] += data


PAGE_IDS = re.compile(
    r"seq-\d+|cut-\d+|input-\d+|set-\d+|msg-\d+(-\d+)?|talk-\d+|nav|damage|conversation|records|failures|chart|timeline|matches|keys|only-errors|show-model|show-tool|show-other|search|session-data"
)
PAGE_CLASSES = re.compile(
    "mark|cut|damage|error|key|role|thinking|change|card|model|tool|compact|other|fail|part|rec|heading|seq|type"
    "|time|how|msg|call|image|shot|ref|skip|step|flow|say|user|assistant|system|pair|chart|bar|compaction|span|waterfall|end|tie|filters|whole|places|turns|glance|said|id|more|wide"
)
PAGE_TAGS = re.compile(
    "html|head|meta|title|style|body|header|h1|h2|h3|p|table|tr|th|td|code|a|ul|ol|li|section|svg|rect|line"
    "|text|path|details|summary|pre|div|span|article|form|label|input|b|br|script|img|kbd|nav|dl|dt|dd"
)


PICTURE = r"img data:image/(png|jpeg|gif|webp);base64,[A-Za-z0-9+/]+={0,2}"


def csp_hash(text: str) -> str:
    import base64
    import hashlib

    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


def test_html_page_structure_is_safe_by_construction(tmp_path: Path) -> None:
    page = html_page(hostile_session(tmp_path))
    parts = PageParts()
    parts.feed(page)
    tags = [tag for tag, _ in parts.elements]
    assert tags[:4] == ["html", "head", "meta", "meta"]
    assert parts.elements[2][1] == {"charset": "utf-8"}
    assert parts.elements[3][1]["http-equiv"] == "Content-Security-Policy"
    policy = parts.elements[3][1]["content"] or ""
    (style,) = parts.texts["style"]
    script, data = parts.texts["script"]  # the script in the head, the data at the end
    assert policy == (
        f"default-src 'none'; script-src {csp_hash(script)}; style-src {csp_hash(style)}; img-src data:; "
        "base-uri 'none'; form-action 'none'"
    )
    assert all(PAGE_TAGS.fullmatch(tag) for tag in tags)
    for tag, attrs in parts.elements:
        assert not [name for name in attrs if name.startswith("on")], (tag, attrs)
        assert "style" not in attrs and "action" not in attrs
        assert "src" not in attrs or re.fullmatch(PICTURE, f"{tag} {attrs['src']}"), (tag, attrs)
        assert re.fullmatch(
            r"#(seq-\d+|cut-\d+|records|failures|conversation|nav|chart|timeline|input-\d+|set-\d+|msg-\d+(-\d+)?|talk-\d+)",
            attrs.get("href") or "#seq-1",
        ), attrs
        assert PAGE_IDS.fullmatch(attrs.get("id") or "search"), attrs
        assert all(PAGE_CLASSES.fullmatch(name) for name in (attrs.get("class") or "").split()), attrs
    assert json.loads(data) == {
        "file": str(tmp_path / HOSTILE_NAME),
        "records": 18,
        "session_id": PAYLOADS[3],
        "inputs": {"6": [["6-0"], 0, 6], "9": [[[0, 1]], 6, 9]},  # the retry: the same messages, no tools
    }
    assert 'calls <b>x<span class="mark">[U+000A]</span>y</b>' in page  # a name shows its line break
    for char in "\u202e\u200b\x1b\u2028\u2029\U000e0041":
        assert char not in page
        assert f"[U+{ord(char):04X}]" in page
    assert "[U+DC80]" in page  # a lone surrogate from the file, shown, not a crash


def test_html_page_shows_hostile_values_as_text(tmp_path: Path) -> None:
    page = html_page(hostile_session(tmp_path))
    text = html.unescape(re.sub(r"<[^>]+>", "", page))
    for payload in PAYLOADS[:6]:
        assert payload in text  # every attack shown as the text it is
    assert html.escape(PAYLOADS[0]) in page and PAYLOADS[0] not in page


def test_html_page_is_reproducible(tmp_path: Path) -> None:
    path = sample_file(tmp_path / "s.jsonl")
    assert html_page(path) == html_page(path)


def browser_dom(page: Path, profile: Path, *flags: str, fragment: str = "") -> str:
    """The DOM of *page* (at its *fragment*) after headless Chromium loaded it and ran its script."""
    need("chromium", "the HTML page is checked in a real browser")
    done = subprocess.run(
        [
            "chromium", "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            f"--user-data-dir={profile}", "--virtual-time-budget=3000", *flags,
            "--dump-dom", page.as_uri() + fragment,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_html_page_in_chromium_runs_its_script_and_no_payload(tmp_path: Path) -> None:
    page = html_page(hostile_session(tmp_path))
    path = tmp_path / "page.html"
    path.write_text(page, encoding="utf-8")
    unprotected = tmp_path / "no-csp.html"
    unprotected.write_text(
        re.sub(r'<meta http-equiv="Content-Security-Policy"[^>]*>', "", page), encoding="utf-8"
    )
    assert "Content-Security-Policy" not in unprotected.read_text(encoding="utf-8")
    for copy in (path, unprotected):
        dom = browser_dom(copy, tmp_path / "profile", fragment="#input-6")  # opens that whole input
        assert '<html lang="en" data-js="on">' in dom  # the page's own script ran
        assert "data-pwned" not in dom  # and not one payload: by escaping alone without the CSP
        assert dom.count('class="card ') == 4
        whole = dom.split('id="input-6"', 1)[1].split("</details>", 1)[0]
        assert '<div class="input"><ol><li><div class="msg">' in whole  # a copy of the message
        assert html.escape(PAYLOADS[0], quote=False) in whole  # shown as text


def test_html_page_csp_blocks_a_script_that_escaping_let_through(tmp_path: Path) -> None:
    page = html_page(sample_file(tmp_path / "s.jsonl"))
    injected = page.replace(
        "</header>", f"<script>{PWN}='csp'</script><img src=x onerror=\"{PWN}='img'\"></header>"
    )
    path = tmp_path / "page.html"
    path.write_text(injected, encoding="utf-8")
    dom = browser_dom(path, tmp_path / "profile")
    assert 'data-js="on"' in dom and "data-pwned" not in dom


def test_html_page_reads_with_javascript_off(tmp_path: Path) -> None:
    path = tmp_path / "page.html"
    page = html_page(sample_file(tmp_path / "s.jsonl"))
    path.write_text(re.sub(r"<script>.*?</script>", "", page, flags=re.S), encoding="utf-8")
    dom = browser_dom(path, tmp_path / "profile")
    assert 'data-js="on"' not in dom and not re.search(r'class="[^"]*\bmiss\b', dom)
    assert dom.count('class="card ') == 4 and "héllo 1" in dom
    assert '<input type="search" id="search" placeholder="search" hidden="">' in dom  # needs the script


class WebDriver:
    """Headless Chromium driven through chromedriver's W3C WebDriver protocol (plain HTTP)."""

    ELEMENT = "element-6066-11e4-a52e-4f735466cecf"

    def __init__(self, profile: Path, load: str = "normal") -> None:
        """*load*: the WebDriver page load strategy, "none" to act on a page while it loads."""
        need("chromedriver", "the page's filters and search are tried in a real browser")
        import socket

        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.process = subprocess.Popen(
            ["chromedriver", f"--port={self.port}"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        for _ in range(100):
            with contextlib.suppress(OSError):
                if self.call("GET", "/status")["ready"]:
                    break
            time.sleep(0.1)
        flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run"]
        flags += ["--disable-background-networking", "--disable-component-update", "--disable-sync"]
        options = {"binary": shutil.which("chromium"), "args": [*flags, f"--user-data-dir={profile}"]}
        capabilities = {
            "alwaysMatch": {"browserName": "chrome", "goog:chromeOptions": options, "pageLoadStrategy": load}
        }
        self.id = self.call("POST", "/session", {"capabilities": capabilities})["sessionId"]

    def call(self, method: str, path: str, body: Optional[Dict[str, Any]] = None) -> Any:
        import http.client

        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        try:
            connection.request(method, path, json.dumps(body) if body is not None else None)
            answer = json.loads(connection.getresponse().read())
        finally:
            connection.close()
        return answer["value"]

    def page(self, method: str, path: str, body: Optional[Dict[str, Any]] = None) -> Any:
        return self.call(method, f"/session/{self.id}{path}", body)

    def element(self, css: str) -> str:
        return self.page("POST", "/element", {"using": "css selector", "value": css})[self.ELEMENT]  # type: ignore[no-any-return]

    def visible(self, css: str) -> int:
        script = (
            f"return [...document.querySelectorAll({json.dumps(css)})].filter(e => e.offsetParent).length"
        )
        return self.page("POST", "/execute/sync", {"script": script, "args": []})  # type: ignore[no-any-return]

    def run(self, script: str) -> Any:
        return self.page("POST", "/execute/sync", {"script": script, "args": []})

    def until(self, check: Callable[[], bool]) -> bool:
        """Whether *check* comes true within ten seconds (the page's search waits for a pause)."""
        for _ in range(100):
            if check():
                return True
            time.sleep(0.1)
        return False

    def keys(self, text: str) -> None:
        presses = [{"type": kind, "value": char} for char in text for kind in ("keyDown", "keyUp")]
        self.page("POST", "/actions", {"actions": [{"type": "key", "id": "k", "actions": presses}]})

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.call("DELETE", f"/session/{self.id}")
        self.process.terminate()
        self.process.wait(timeout=30)


def test_html_page_filters_and_search_in_chromium(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    with session.create(path) as s, s.begin_run() as run:
        model_call(run, "m1", [say("alpha")])
        tool = Execution("t1", "tool")
        run.record(Event("tool_exec_end", execution=tool, tool="grep", result="beta", error="exit 2"))
    page = tmp_path / "page.html"
    page.write_text(html_page(path), encoding="utf-8")
    browser = WebDriver(tmp_path / "profile")
    try:
        browser.page("POST", "/url", {"url": page.as_uri()})
        assert browser.visible(".card") == 2 and browser.visible(".rec") == 3
        assert browser.visible("#conversation .step") == 2
        browser.page("POST", f"/element/{browser.element('#only-errors')}/click", {})
        assert (
            browser.visible(".card") == 1
            and browser.visible(".card.tool") == 1
            and browser.visible(".rec") == 0
            and browser.visible("#conversation .step")
            == browser.visible("#conversation .step.tool.fail")
            == 1
        )
        browser.page("POST", f"/element/{browser.element('#only-errors')}/click", {})
        browser.page("POST", f"/element/{browser.element('#show-tool')}/click", {})
        assert browser.visible(".card") == 1 and browser.visible(".card.model") == 1
        assert browser.visible("#conversation .step") == browser.visible("#conversation .step.model") == 1
        browser.page("POST", f"/element/{browser.element('#show-tool')}/click", {})
        search = browser.element("#search")
        browser.page("POST", f"/element/{search}/value", {"text": "BETA"})
        assert browser.until(lambda: browser.visible(".card") == 1) and browser.visible(".card.tool") == 1
        assert browser.visible("#conversation .step") == 1  # the conversation's step that has it
        assert browser.run("return document.getElementById('matches').textContent") == "2 matches"
        assert browser.run("return CSS.highlights.get('search').size") == 2  # "beta" in the result
        browser.page("POST", f"/element/{search}/value", {"text": "\ue007"})  # Enter: the next match
        assert browser.run("return document.getElementById('matches').textContent") == "1 of 2 matches"
        assert browser.run("return document.activeElement.className") == "step tool fail"
        browser.page("POST", f"/element/{search}/value", {"text": "\ue003" * 4})  # backspace
        assert browser.until(lambda: browser.visible(".card") == 2)
        browser.page("POST", f"/element/{search}/value", {"text": "\ue00c"})  # Escape
        browser.keys("j")  # the first call, in the conversation
        assert browser.run("return document.activeElement.className") == "step model"
        browser.keys("j")
        assert browser.run("return document.activeElement.className") == "step tool fail"
        browser.keys("k")
        assert browser.run("return document.activeElement.className") == "step model"
        browser.keys("e")  # the next error
        assert browser.run("return document.activeElement.className") == "step tool fail"
        browser.keys("/")
        assert browser.run("return document.activeElement.id") == "search"
        assert browser.visible("#keys") == 1 and "next / previous call" in browser.run(
            "return document.getElementById('keys').textContent"
        )
    finally:
        browser.close()


def test_html_page_survives_a_malformed_fragment_and_marks_what_search_found(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    with session.create(path) as s, s.begin_run() as run:
        model_call(run, "m1", [say("alpha " + "long " * 200)])
        tool = Execution("t1", "tool")
        run.record(Event("tool_exec_end", execution=tool, tool="grep", result="\u0130\u0130 abc needle x"))
    page = tmp_path / "page.html"
    page.write_text(html_page(path), encoding="utf-8")
    browser = WebDriver(tmp_path / "profile")
    try:
        for fragment in ("#%", "#%E0%A4%A"):  # decodeURIComponent throws on both
            browser.page("POST", "/url", {"url": "about:blank"})  # a load, not a move in the page
            browser.page("POST", "/url", {"url": page.as_uri() + fragment})
            assert browser.run("return document.querySelectorAll('details:not([open])').length") > 0
        search = browser.element("#search")
        browser.page("POST", f"/element/{search}/value", {"text": "needle"})
        marked = "return [...(CSS.highlights.get('search') || [])].map(String)"
        assert browser.until(lambda: browser.run(marked) != [])
        assert set(browser.run(marked)) == {"needle"}
    finally:
        browser.close()


def model_call(run: session.Run, name: str, messages: List[Message], attempt: int = 1) -> None:
    execution = Execution(name, "model", attempt=attempt)
    run.record(Event("model_exec_start", execution=execution, timestamp=T0))
    run.record(Event("model_request", execution=execution, request=ModelRequest(messages), timestamp=T0))
    reply = Message("assistant", [session.text_block(f"reply of {name}")], "stop", {"input": len(messages)})
    run.record(
        Event("model_exec_end", execution=execution, message=reply, timestamp=T0 + dt.timedelta(seconds=1))
    )


def say(text: str) -> Message:
    return Message("user", [session.text_block(text)], timestamp=T0)


def test_html_page_context_changes_across_compaction_and_resume(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    u1, a1, u2, u3 = say("u1"), say("a1"), say("u2"), say("u3")
    with session.create(path) as s:
        with s.begin_run() as run:
            model_call(run, "m1", [u1])
            model_call(run, "m1", [u1], attempt=2)  # a retry: the same context
            model_call(run, "m2", [u1, a1, u2])
            compact = Execution("c1", "compact")
            run.record(Event("context_compacted", execution=compact, compaction={"dropped": 1}, timestamp=T0))
            model_call(run, "m3", [u1, u2, u3])
        with s.begin_run() as run:
            model_call(run, "m1", [u1, u2, u3, say("u4")])
            model_call(run, "m2", [u3])
    facts = session_export._Facts(session._Index(None))
    session.read(path, facts)
    each = [facts.change(seq) for seq in facts.requests.seqs]
    changes = [(len(c.new), c.unchanged, c.dropped, c.compacted, c.resumed) for c in each if c]
    assert changes == [
        (1, 0, 0, False, False),
        (0, 1, 0, False, False),
        (2, 1, 0, False, False),
        (1, 2, 1, True, False),
        (1, 3, 0, False, True),
        (0, 1, 3, False, False),
    ]
    assert facts.compactions == [3]  # after the third successful call
    page = html_page(path)
    assert "context: 3 messages; 1 new, 2 unchanged since request" in page
    assert "1 dropped by a compaction" in page
    assert "3 carried over from the previous run since request" in page
    assert "3 dropped with no compaction recorded" in page
    assert page.count("tools and config as in") == 5


def test_html_page_data_block_is_the_escaped_json_of_the_file_and_every_whole_input(tmp_path: Path) -> None:
    # the page lists each request's whole input as kept, JSON already: the block around them
    # must be what _script_json makes of it all, its keys sorted, <, > and & escaped
    folder = tmp_path / 'a "inputs": {}, <b> & é\u2028'
    folder.mkdir()
    path = folder / "s.jsonl"
    u1, u2 = say("u1"), say("u2")
    with session.create(path) as s, s.begin_run() as run:
        model_call(run, "m1", [u1])
        model_call(run, "m2", [u1, say("a1"), u2])
        model_call(run, "m3", [u2, u1])  # rearranged: taken in slices of the previous input
    page = html_page(path)
    block = re.search('<script type="application/json" id="session-data">(.*?)</script>', page, re.S)
    assert block is not None
    data = json.loads(block.group(1))
    data["inputs"] = {int(seq): value for seq, value in data["inputs"].items()}  # in the order of their seqs
    assert block.group(1) == session_export._script_json(data)
    assert data["file"] == str(path) and data["records"] == 15
    assert {seq: value[1:] for seq, value in data["inputs"].items()} == {5: [0, 5], 10: [5, 5], 13: [10, 5]}
    assert data["inputs"][13][0] == [[2, 3], [0, 1]]


@pytest.mark.parametrize("version", [1, 2])
def test_html_page_shows_new_input_once_and_links_earlier_records(tmp_path: Path, version: int) -> None:
    path = tmp_path / "s.jsonl"
    with session.create(path, version=version) as s, s.begin_run() as run:
        model = Execution("m1", "model")
        reply = Message("assistant", [session.tool_call_block("call-1", "ls", {"d": "/"})], "toolUse")
        run.record(Event("model_request", execution=model, request=ModelRequest([say("question")])))
        run.record(Event("model_exec_end", execution=model, message=reply))
        run.record(Event("message_end", execution=model, message=reply))
        tool = Execution("call-1", "tool", parent_id="m1")
        run.record(Event("tool_exec_start", execution=tool, tool_id="call-1", tool="ls", args={"d": "/"}))
        result = session.tool_result("call-1", "a b")
        run.record(Event("message_end", execution=tool, message=result))
        run.record(
            Event(
                "model_request",
                execution=Execution("m2", "model"),
                request=ModelRequest([say("question"), reply, result]),
            )
        )
    page = html_page(path)
    seqs = [(r.type, r.seq) for r in records(path)]
    request, end, _, tool_start, answer = [seq for kind, seq in seqs if kind not in ("message", "tools")][2:7]
    talk, cards = page.split('<section id="conversation">')[1].split('<section id="records">')
    assert talk.count("question") == 1 and cards.count("question") == 1  # in the conversation and a card
    assert f'the same message as <a href="#seq-{end}">#{end}</a>' in page  # message_end = the response
    new = 'new: <span class="role">{}</span> message as recorded in <a href="#seq-{}">#{}</a>'
    assert new.format("assistant", end, end) in page and new.format("tool", answer, answer) in page
    assert f'id <a href="#seq-{tool_start}"><code>call-1</code></a>' in page  # links to the tool
    assert f'asked for by <a href="#seq-{request}">model call <code>m1</code></a>' in page


def test_html_page_shortens_long_values_with_a_visible_mark(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    long_text = "".join(f"line {n}\n" for n in range(2000))
    with session.create(path) as s, s.begin_run() as run:
        tool = Execution("t1", "tool")
        run.record(Event("tool_exec_end", execution=tool, tool="cat", result={"text": long_text}))
        run.record(Event("tool_exec_end", execution=Execution("t2", "tool"), tool="n" * 1000))
        run.record(Event("message_end", execution=tool, message=say(long_text)))
    page = html_page(path, "--max-field", "300")
    assert "line 1999" not in page and "line 10\n" in page
    run_id = records(path)[1].run_id
    command = f"python -m session show {path} --run {run_id} --execution t1 --attempt 1"
    assert f"shortened — {len(long_text) - 300} more characters: see <code>{command}</code>" in page
    assert "shortened — the rest: see" in page  # the JSON result, not encoded beyond the limit
    assert "<details><summary>" in page  # long values folded
    assert "n" * 200 + '<span class="cut">…</span>' in page and "n" * 301 not in page  # names too


def test_html_page_cut_keeps_start_end_and_failures_and_names_what_it_left_out(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    with session.create(path, version=1) as s, s.begin_run() as run:
        context = [say(f"{n} {'z' * 500}") for n in range(300)]
        run.record(Event("model_request", execution=MODEL, request=ModelRequest(context)))
        for n in range(300):
            error = f"failure {n}" if n in (150, 299) else None
            tool = Execution(f"t{n}", "tool")
            run.record(Event("tool_exec_start", execution=tool, tool="x"))
            run.record(Event("tool_exec_end", execution=tool, tool="x", result="y" * 500, error=error))
    whole = html_page(path)
    page = html_page(path, "--max-bytes", "40000")
    assert len(page.encode()) < 50000 < len(whole.encode())
    shown = sorted(map(int, re.findall(r'id="seq-(\d+)"', page)))
    seqs = [record.seq for record in records(path)]
    failed = [record.seq for record in records(path) if "error" in record.data]
    assert shown[:3] == seqs[:3] and shown[-2:] == seqs[-2:]  # the start and the end
    assert set(failed) <= set(shown) and len(failed) == 2  # every failed call
    places = re.findall(r'id="cut-(\d+)">Left out here: (\d+) records between #(\d+) and #(\d+)', page)
    assert [int(place[0]) for place in places] == list(range(1, len(places) + 1)) and len(places) >= 2
    left = sum(int(place[1]) for place in places)
    assert left + len(shown) == len(seqs)
    summary = f"cut to 40,000 bytes: {left:,} records left out in {len(places)} places — list"
    assert f'<details class="cut"><summary>{summary}</summary>from <a href="#cut-1">' in page  # one line
    for _, count, first, last in places:
        command = html.unescape(re.search(rf"<code>([^<]*sed -n {first},{last}p)</code>", page).group(1))  # type: ignore[union-attr]
        printed = subprocess.run(
            command.replace("python -m session", f"{shlex.quote(sys.executable)} {shlex.quote(str(MODULE))}"),
            shell=True, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert [json.loads(line)["seq"] for line in printed.stdout.splitlines()] == list(
            range(int(first), int(last) + 1)
        )
        assert (
            not set(range(int(first), int(last) + 1)) & set(shown)
            and int(count) == int(last) - int(first) + 1
        )
    talk, cards = page.split('<section id="records">')
    new = cards.count('<span class="role">user</span>')
    assert 0 < new < 300 and f"{300 - new} more new messages not shown: see" in cards
    assert (
        talk.count('<span class="role">user</span>') == 5 and "and 295 more new messages in the card" in talk
    )


def test_html_page_lists_gaps_with_refs_and_commands_that_work(tmp_path: Path) -> None:
    path = tmp_path / "it's a session.jsonl"
    s = session.create(path)
    run = s.begin_run()
    run.record(Event("agent_start"))
    run.record(Event("model_exec_start", execution=Execution("m 1", "model", attempt=2)))
    run.record(Event("turn_start", turn_index=1))
    s.sync()
    page = html_page(path)
    gap = records(path)[3].ref
    assert gap is not None
    assert html.escape(json.dumps(gap.to_json())) in page
    commands = re.findall(r"<code>(python -m session show [^<]*--attempt 2)</code>", page)
    assert commands
    for command in commands:
        argv = shlex.split(html.unescape(command))
        shown = subprocess.run([sys.executable, str(MODULE), *argv[3:]], capture_output=True, timeout=60)
        assert shown.stdout.splitlines() == path.read_bytes().splitlines()[3:4]
    assert "run_not_closed" in page and "no_agent_end" in page and "model_call_unfinished" in page
    s.close()


def test_html_page_lists_the_gaps_of_an_impossible_history(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    impossible_file(path)
    page = html_page(path)
    assert "<h2>3 gaps</h2>" in page
    for seq, kind in ((5, "call_ended_twice"), (6, "call_end_without_start"), (7, "unknown_parent")):
        assert f'<li><a href="#seq-{seq}">#{seq}</a> {kind} ' in page


def test_html_page_draws_the_waterfall_and_chart_to_scale(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    with session.create(path) as s, s.begin_run() as run:
        run.record(Event("turn_start", turn_index=1))
        model_call(run, "m1", [say("a")])  # 0 s to 1 s
        tool = Execution("t1", "tool", turn_index=1)
        for seconds in (1, 3):
            run.record(
                Event(
                    "tool_exec_start", execution=tool, tool="x", timestamp=T0 + dt.timedelta(seconds=seconds)
                )
            )
        run.record(
            Event(
                "tool_exec_end",
                execution=tool,
                tool="x",
                error="boom",
                timestamp=T0 + dt.timedelta(seconds=3),
            )
        )
    page = html_page(path)
    assert '<rect class="model" x="300.0" y="2" width="230.0" height="14">' in page
    assert '<rect class="tool fail" x="530.0" y="20" width="460.0" height="14">' in page
    assert "turn 1: 2 attempts, 3.000 s, 1 failed" in page
    assert '<rect class="bar" x="0.0" y="30" width="999.0" height="100">' in page
    assert "1 failed attempt<" in page
    assert re.search(
        r'<h2>1 failed attempt</h2>\n<ul><li><details open><summary><b class="error">errors of no type</b> '
        r'\u00d71, 0 recovered by a retry</summary><ul><li>turn 1: <a href="#seq-\d+">'
        r'tool <code>t1</code> x attempt 1</a>: <span class="error">boom</span></li>',
        page,
    )
    assert '<td>2</td><td class="error">1 ✗</td>' in page  # the run's calls and failures
    assert "run <code>" in page and ": 1 turn, 2 attempts, 1 failed</summary>" in page  # its waterfall


def test_html_page_gives_a_failure_the_first_reason_that_says_something(tmp_path: Path) -> None:
    """An attempt whose first error is empty, and a later one's is not, fails for the later."""
    path = tmp_path / "s.jsonl"
    with session.create(path) as s, s.begin_run() as run:
        tool = Execution("t1", "tool")
        run.record(Event("tool_exec_start", execution=tool, tool="x", timestamp=T0))
        run.record(Event("retry", execution=tool, error={"message": ""}, timestamp=T0))  # says nothing
        run.record(Event("tool_exec_end", execution=tool, tool="x", error="boom", timestamp=T0))
    page = html_page(path)
    assert 'tool <code>t1</code> x attempt 1</a>: <span class="error">boom</span></li>' in page


def test_html_page_counts_no_recovery_for_a_call_no_retry_of_succeeded(tmp_path: Path) -> None:
    """A failed attempt numbered below 1 is recovered only by a later attempt that succeeded."""
    path = tmp_path / "s.jsonl"
    with session.create(path) as s, s.begin_run() as run:
        for number in (-3, -1):  # each fails
            tool = Execution("t1", "tool", attempt=number)
            run.record(Event("tool_exec_start", execution=tool, tool="x", timestamp=T0))
            run.record(Event("tool_exec_end", execution=tool, tool="x", error="boom", timestamp=T0))
    page = html_page(path)
    assert "errors of no type</b> \u00d72, 0 recovered by a retry" in page
    assert "recovered by a retry</span>" not in page


def test_html_page_folds_a_long_list_of_failures(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    with session.create(path) as s, s.begin_run() as run:
        for n in range(11):
            error = {"type": "RateLimit", "message": f"slow down {n}"}
            run.record(Event("tool_exec_end", execution=Execution(f"t{n}", "tool"), tool="x", error=error))
    page = html_page(path)
    assert (
        '<h2>11 failed attempts</h2>\n<ul><li><details><summary><b class="error">RateLimit</b> \u00d711'
        in page
    )
    assert '<span class="error">RateLimit: slow down 10</span>' in page


def test_html_page_triages_failures_by_type_and_marks_whether_a_retry_succeeded(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    error = {"type": "RateLimitError", "message": "429"}
    with session.create(path) as s, s.begin_run() as run:
        for n in range(41):
            run.record(Event("turn_start", turn_index=n + 1))
            failing = Execution(f"m{n}", "model")
            run.record(Event("model_exec_end", execution=failing, error=error))
            if n < 40:
                model_call(run, f"m{n}", [say(f"u{n}")], attempt=2)
            else:
                run.record(
                    Event("model_exec_end", execution=Execution(f"m{n}", "model", attempt=2), error=error)
                )
        run.record(Event("tool_exec_end", execution=Execution("t", "tool"), tool="x", error="exit 2"))
    page = html_page(path)
    failures = page.split('<section id="failures">', 1)[1].split("</section>", 1)[0]
    assert failures.startswith("<h2>43 failed attempts</h2>")
    assert (
        '<li><details><summary><b class="error">RateLimitError</b> \u00d742, 40 recovered by a retry'
        in failures
    )
    assert (
        '<li><details open><summary><b class="error">errors of no type</b> \u00d71, 0 recovered' in failures
    )
    assert re.search(r"<li>turn 41: <a [^>]*>model <code>m40</code> attempt 2</a>: ", failures)
    assert '<a href="#failures">43 failed call attempts</a> (40 recovered by a retry)' in page  # outcome
    talk = page.split('<section id="conversation">')[1].split('<section id="records">')[0]
    assert talk.count("retry 2, succeeded") == 40 and talk.count("retry 2, failed too") == 1
    assert talk.count("recovered by a retry") == 40


def test_html_page_does_not_count_a_retry_that_never_ended_as_recovering(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    error = {"type": "RateLimitError", "message": "429"}
    with session.create(path) as s, s.begin_run() as run:
        run.record(Event("model_exec_end", execution=Execution("m1", "model"), error=error))
        retry = Execution("m1", "model", attempt=2)
        run.record(Event("model_request", execution=retry, request=ModelRequest([say("hi")])))
    page = html_page(path)  # the process ended during the retry: it neither succeeded nor failed
    assert '<a href="#failures">1 failed call attempt</a>; ' in page, page  # none recovered
    assert "RateLimitError</b> \u00d71, 0 recovered by a retry" in page
    talk = page.split('<section id="conversation">')[1].split('<section id="records">')[0]
    assert "succeeded" not in talk and "recovered" not in talk
    assert "retry 2, unfinished" in talk


def test_html_page_shows_values_as_deep_as_the_reader_takes(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    objs = envelope_lines(3)
    execution = {"id": "m", "kind": "model"}
    objs[2] = dict(objs[2], type="model_request", data={"execution": execution, "request": {"messages": [0]}})
    deep = b"[" * 980 + b"0" + b"]" * 980  # too deep for json.dumps under pytest's stack
    path.write_bytes(dump(objs).replace(b'"messages":[0]', b'"messages":[' + deep + b"]"))
    page = html_page(path, "--max-field", str(10**6))  # everything, as far as the stack allows
    assert "context: 1 message; 1 new" in page
    whole = "[" * 980 + "0" + "]" * 980 in re.sub(r"\s", "", page)
    assert whole or "cannot be shown here: maximum recursion depth exceeded" in page  # never a crash


def test_html_page_of_a_damaged_file_shows_the_records_before_the_bad_line(tmp_path: Path) -> None:
    path = tmp_path / "it's damaged.jsonl"
    sample_file(path)
    lines = path.read_bytes().splitlines(keepends=True)
    bad = len(b"".join(lines[:5]))
    path.write_bytes(b"".join(lines[:5]) + b'{"seq": 6, <script>\n' + b"".join(lines[6:]))
    out = tmp_path / "page.html"
    done = run_cli("html", str(path), "-o", str(out))
    assert done.returncode == 1
    assert done.stderr.startswith(f"{path}:6: invalid JSON") and done.stderr.endswith(f" (offset {bad})\n")
    page = out.read_text(encoding="utf-8")
    repair = html.escape(f"python -m session repair {shlex.quote(str(path))}")
    assert (
        f'<p class="damage" id="damage">This file is damaged at line 6 (offset {bad}): invalid JSON' in page
    )
    assert f"The page shows the 5 records before it; <code>{repair}</code> keeps them" in page
    assert sorted(map(int, re.findall(r'id="seq-(\d+)"', page))) == [1, 2, 3, 4, 5]
    assert "&lt;script&gt;" not in page  # the bad line itself is not shown
    long = f'{{"seq": 6, "x": "{"x" * 2000}"}}\n'.encode()
    path.write_bytes(b"".join(lines[:5]) + long + b"".join(lines[6:]))
    done = run_cli("html", str(path), "-o", str(out), "--max-line-bytes", "1000")
    assert done.returncode == 1 and "longer than" in done.stderr, done.stderr
    page = out.read_text(encoding="utf-8")
    assert "records before it; a larger <code>--max-line-bytes</code> reads that line" in page
    assert "python -m session repair" not in page  # which would refuse to cut it
    garbage = tmp_path / "garbage.jsonl"
    for written in (b"<b>garbage\n", b"", b'{"a": 1}\n', bytes(range(256))):  # none a session: no repair
        garbage.write_bytes(written)
        done = run_cli("html", str(garbage))
        assert done.returncode == 1 and done.stdout.startswith("<!DOCTYPE html>")
        assert "This is no session file: line 1 (offset 0): " in done.stdout
        assert "nothing to show or repair" in done.stdout and "session repair" not in done.stdout
        assert "not repaired" in run_cli("repair", str(garbage)).stderr  # as the page says
    assert sorted(p.name for p in tmp_path.iterdir()) == ["garbage.jsonl", "it's damaged.jsonl", "page.html"]


def test_html_page_refuses_to_overwrite_its_session(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    out = tmp_path / "page.html"
    good = str(sample_file(path.with_name("ok.jsonl")))
    before = Path(good).read_bytes()
    done = run_cli("html", good, "-o", str(tmp_path / "." / "ok.jsonl"))
    assert done.returncode == 1 and "will not write the page over the session itself" in done.stderr
    assert Path(good).read_bytes() == before
    done = run_cli("html", good, "--max-field", "0", "-o", str(out))
    assert done.returncode == 2 and "positive" in done.stderr and not out.exists()
    done = run_cli("html", good, "-o", str(out))
    assert done.returncode == 0 and out.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")


def test_html_page_into_a_closed_pipe_is_not_an_error(tmp_path: Path) -> None:
    path = busy_file(tmp_path / "s.jsonl", 60, seed=1)  # a page larger than a pipe holds
    reader = subprocess.Popen(
        [sys.executable, str(MODULE), "html", str(path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert reader.stdout is not None and reader.stderr is not None
    assert reader.stdout.read(15) == b"<!DOCTYPE html>"
    reader.stdout.close()  # as `| head -c 15` does
    assert (reader.wait(timeout=120), reader.stderr.read()) == (0, b"")
    reader.stderr.close()


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="/dev/full stands for a full disk")
def test_html_page_on_a_full_disk_blames_the_output_and_never_replaces_a_device(tmp_path: Path) -> None:
    path = busy_file(tmp_path / "s.jsonl", 60, seed=1)
    full = f"python -m session html: cannot write the output: {os.strerror(errno.ENOSPC)}\n"
    with open("/dev/full", "wb") as out:
        done = subprocess.run(
            [sys.executable, str(MODULE), "html", str(path)], stdout=out, stderr=subprocess.PIPE, text=True
        )
    assert (done.returncode, done.stderr) == (74, full)
    done = run_cli("html", str(path), "-o", "/dev/full")
    assert (done.returncode, done.stderr) == (74, full)
    assert stat.S_ISCHR(os.stat("/dev/full").st_mode)  # still the device
    assert sorted(p.name for p in Path("/dev").glob("full*")) == ["full"]  # no temporary left


@pytest.mark.skipif(sys.platform == "win32", reason="a file size limit (RLIMIT_FSIZE) stands for a full disk")
def test_html_page_that_cannot_be_written_leaves_the_old_page(tmp_path: Path) -> None:
    path = busy_file(tmp_path / "s.jsonl", 60, seed=1)
    out = tmp_path / "page.html"
    out.write_text("the old page", encoding="utf-8")

    def small_disk() -> None:
        if sys.platform != "win32":  # (skipped there: this tells mypy)
            import resource

            resource.setrlimit(resource.RLIMIT_FSIZE, (20000, 20000))

    done = subprocess.run(
        [sys.executable, str(MODULE), "html", str(path), "-o", str(out)],
        capture_output=True,
        text=True,
        preexec_fn=small_disk,
    )
    assert done.returncode == 74
    assert done.stderr == f"python -m session html: cannot write the output: {os.strerror(errno.EFBIG)}\n"
    assert out.read_text(encoding="utf-8") == "the old page"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["page.html", "s.jsonl"]


def test_html_page_is_written_through_a_symlink_and_into_a_fifo(tmp_path: Path) -> None:
    if not hasattr(os, "mkfifo"):
        pytest.skip("symlinks and FIFOs are POSIX")
    path = sample_file(tmp_path / "s.jsonl")
    page = html_page(path)
    target = tmp_path / "target.html"
    target.write_text("old", encoding="utf-8")
    link = tmp_path / "link.html"
    link.symlink_to(target)
    assert run_cli("html", str(path), "-o", str(link)).returncode == 0
    assert link.is_symlink() and target.read_text(encoding="utf-8") == page  # the link kept
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    got: List[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()))
    reader.start()
    done = run_cli("html", str(path), "-o", str(fifo))
    reader.join(timeout=60)
    assert done.returncode == 0 and got == [page.encode()]
    assert fifo.is_fifo()  # written through, not replaced by a file
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fifo", "link.html", "s.jsonl", "target.html"]
    done = run_cli("html", str(path), "-o", str(tmp_path))  # a directory: the output's fault
    assert done.returncode == 74 and "cannot write the output: Is a directory" in done.stderr


def test_html_page_shows_a_cost_beyond_a_double_as_written(tmp_path: Path) -> None:
    """Costs no float holds (the codec refuses to write them; a file may hold them): shown
    as written, their calls not counted as reporting a cost."""
    path = tmp_path / "s.jsonl"
    costs: Dict[str, session.Cost] = {
        "big": {"total": 0.5},
        "sum": {"input": 0.25, "output": 0.125},
        "ok": {"total": 0.75},
    }
    with session.create(path) as s, s.begin_run() as run:
        for name, cost in costs.items():
            reply = Message("assistant", [], "stop", session.Usage(cost=cost))
            run.record(Event("model_exec_end", execution=Execution(name, "model"), message=reply))
    huge = "9" * 400
    for old, new in ((b'"total":0.5}', f'"total":{huge}}}'), (b"0.25", "1e308"), (b"0.125", "1e308")):
        path.write_bytes(path.read_bytes().replace(old, new.encode()))
    assert run_cli("validate", str(path)).returncode == 0
    page = html_page(path)
    assert f"cost total {huge[:100]}" in page and "cost input $100,000," in page  # long: shortened
    assert "<dt>cost</dt><dd>$0.7500 in all, 1 model call reporting it</dd>" in page


def test_html_page_shows_model_cost_invalid_arguments_and_unknown_parents(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    with session.create(path) as s, s.begin_run() as run:
        for n in range(31):  # compactions close together: their labels must not overlap
            model_call(run, f"m{n}", [say(f"u{n}")])
            compact = Execution(f"c{n}", "compact")
            run.record(Event("context_compacted", execution=compact, compaction={"dropped": 1}, timestamp=T0))
        usage = session.Usage(input=3, provider="acme", model="gpt-x", cost={"input": 0.25, "total": 0.5})
        call = session.tool_call_block("k1", "grep", {}, args_invalid=True, args_raw_text="{oops")
        reply = Message("assistant", [call], "toolUse", usage)
        run.record(Event("model_exec_end", execution=Execution("priced", "model"), message=reply))
        run.record(Event("tool_exec_end", execution=Execution("k1", "tool", parent_id="nobody"), tool="grep"))
    page = html_page(path)
    assert "gpt-x acme</b>, cost $0.5000" in page  # on the call's card
    assert "<dt>cost</dt><dd>$0.5000 in all, 1 model call reporting it</dd>" in page
    assert "usage</span> input 3, provider acme, model gpt-x, cost input $0.2500, cost total $0.5000" in page
    assert 'calls <b>grep</b> <span class="error">(its arguments did not parse' in page
    talk = page.split('<section id="conversation">')[1].split('<section id="records">')[0]
    assert (
        'calls <b>grep</b> <span class="error">(its arguments did not parse)</span> <code>{oops</code>'
        in talk
    )
    assert 'asked for by model call <code>nobody</code>, <span class="error">not in this run</span>' in page
    chart = page.split('<svg class="chart"', 1)[1].split("</svg>", 1)[0]
    assert chart.count('<path class="compaction"') == 31  # a mark each: 30 units apart
    labels = [
        (float(x), int(n))
        for x, n in re.findall(r'<text x="([\d.]+)" y="11">(\d+) compactions?</text>', chart)
    ]
    assert sum(n for _, n in labels) == 31 and len(labels) > 1
    starts = [x for x, _ in labels]
    wide = len("31 compactions") * 7  # in the chart's units of 1000, its font 11 high
    assert all(b - a > wide for a, b in zip(starts, starts[1:])) and starts[-1] + wide < 1000


def test_html_page_finds_each_call_by_its_run_and_id_among_many(tmp_path: Path) -> None:
    """The page finds a call's model call, its retry's first attempt and a model's tool call
    by run and id: the same ids in two runs, ids of any text (a lone surrogate too), a tool
    call id that is not the tool's execution id, and more calls than a small table holds."""
    path = tmp_path / "s.jsonl"
    ids = ["m\udc80", "é-1", "m" * 300]  # a lone surrogate, non-ASCII, long
    with session.create(path) as s:
        for _ in range(2):
            with s.begin_run() as run:
                for n in range(40):
                    name = f"{ids[n % 3]}-{n}"
                    model = Execution(name, "model")
                    block = session.tool_call_block(f"t-{n}", "grep", {})
                    reply = Message("assistant", [block], "toolUse", {"input": n})
                    run.record(Event("model_exec_start", execution=model, timestamp=T0))
                    run.record(Event("model_exec_end", execution=model, message=reply, timestamp=T0))
                    tool = Execution(f"x-{n}", "tool", parent_id=name)
                    start = Event("tool_exec_start", execution=tool, tool="grep", tool_id=f"t-{n}", args={})
                    run.record(start)
                    failed = n % 5 == 0
                    end = {"error": {"type": "Flaky", "message": "no"}} if failed else {"result": "ok"}
                    run.record(Event("tool_exec_end", execution=tool, tool="grep", tool_id=f"t-{n}", **end))
                    if failed:  # retried, and the retry succeeds
                        again = Execution(f"x-{n}", "tool", parent_id=name, attempt=2)
                        run.record(Event("tool_exec_start", execution=again, tool="grep", args={}))
                        run.record(Event("tool_exec_end", execution=again, tool="grep", result="ok"))
    records = list(session.iter_records(path))
    first: Dict[Tuple[Optional[str], str, int], int] = {}  # (run, execution id, attempt) -> its first seq
    for record in records:
        execution = record.data.get("execution")
        if execution is not None:
            key = (record.run_id, execution["id"], execution.get("attempt", 1))
            first.setdefault(key, record.seq)
    page = html_page(path, "--max-bytes", str(64 << 20))
    runs = list(dict.fromkeys(record.run_id for record in records if record.run_id))
    for run_id in runs:
        for n in range(40):
            name = f"{ids[n % 3]}-{n}"
            asker, answer = first[run_id, name, 1], first[run_id, f"x-{n}", 1]
            card = page.split(f'id="seq-{answer}"', 1)[0].rsplit("<article", 1)[1]
            assert f'asked for by <a href="#seq-{asker}">model call <code>' in card
            model_card = page.split(f'id="seq-{asker}"', 1)[1].split("</article>", 1)[0]
            assert f'<a href="#seq-{answer}"><code>t-{n}</code></a>' in model_card
            if n % 5 == 0:
                retry = first[run_id, f"x-{n}", 2]
                retry_card = page.split(f'id="seq-{retry}"', 1)[0].rsplit("<article", 1)[1]
                assert f'retry of <a href="#seq-{answer}">attempt 1</a>' in retry_card
    assert '<b class="error">Flaky</b> \u00d716, 16 recovered by a retry' in page


def test_html_page_shows_turns_and_attempts_beyond_64_bits_as_written(tmp_path: Path) -> None:
    """A turn index or attempt number of any size (the format allows any JSON integer there)
    is kept and shown as written, though the page keeps its calls in arrays of fixed-size
    numbers."""
    path, big = tmp_path / "s.jsonl", 2**70
    with session.create(path) as s, s.begin_run() as run:
        run.record(Event("turn_start", turn_index=big))
        model = Execution("m", "model", turn_index=big, attempt=big)
        run.record(Event("model_exec_start", execution=model, timestamp=T0))
        run.record(
            Event("model_exec_end", execution=model, error={"type": "Boom", "message": "x"}, timestamp=T0)
        )
        tool = Execution("t", "tool", parent_id="m", turn_index=-big, attempt=-big)
        run.record(Event("tool_exec_start", execution=tool, tool="grep", args={}, timestamp=T0))
        run.record(Event("tool_exec_end", execution=tool, tool="grep", result="ok", timestamp=T0))
    page = html_page(path)
    assert f"turn {big}: 1 call, " in page  # the navigation
    assert f"<summary>turn {-big}: 1 attempt, " in page  # the waterfall
    assert f"model <code>m</code> attempt {big}</a>" in page and f"turn {big}, 0.0 ms, failed" in page
    assert f"tool <code>t</code> grep attempt {-big}</a>" in page and f"turn {-big}, " in page
    assert '<b class="error">Boom</b> \u00d71, 0 recovered by a retry' in page


def compacting_session(path: Path, turns: int) -> int:
    """*turns* turns of a model call whose input grows until a compaction, after every ninth
    and after each of the twenty turns from the thousandth (as a loop that keeps compacting
    does); the number of compactions."""
    compactions = 0
    with session.create(path) as s, s.begin_run() as run:
        tokens = 1000
        for turn in range(1, turns + 1):
            model = Execution(f"m{turn}", "model", turn_index=turn)
            tokens += 900 + turn % 7 * 300
            reply = Message("assistant", [session.text_block(f"reply {turn}")], "stop", {"input": tokens})
            run.record(Event("model_exec_end", execution=model, message=reply, timestamp=T0))
            if turn % 9 == 0 or 1000 <= turn < 1020:
                compact = Execution(f"c{turn}", "compact")
                run.record(Event("context_compacted", execution=compact, compaction={}, timestamp=T0))
                tokens, compactions = 1000, compactions + 1
    return compactions


CHART_BOXES = """
var chart = document.querySelector("svg.chart");
function box(e) {
  var r = e.getBoundingClientRect();
  return {left: r.left, right: r.right, top: r.top, bottom: r.bottom, title: e.textContent};
}
function boxes(css) { return [...chart.querySelectorAll(css)].map(box); }
return {chart: box(chart), labels: boxes("text"), marks: boxes("path.compaction"), bars: boxes("rect.bar")};
"""


def overlapping(boxes: List[Dict[str, Any]]) -> List[Tuple[str, str]]:
    """The pairs of *boxes* (in the chart's order, left to right) that intersect."""
    return [
        (a["title"], b["title"])
        for a, b in zip(boxes, boxes[1:])
        if a["right"] > b["left"] and a["bottom"] > b["top"] and b["bottom"] > a["top"]
    ]


@pytest.mark.parametrize("turns", [300, 3000])
def test_html_page_chart_marks_many_compactions_without_a_label_over_another_in_chromium(
    tmp_path: Path, turns: int
) -> None:
    path = tmp_path / "s.jsonl"
    compactions = compacting_session(path, turns)
    made = html_page(path)
    assert f"{turns:,} calls, at most " in made and f"; {compactions} compactions</p>" in made
    page = tmp_path / "page.html"
    page.write_text(made, encoding="utf-8")
    browser = WebDriver(tmp_path / "profile")
    try:
        browser.page("POST", "/url", {"url": page.as_uri()})
        for width in (1280, 600):
            browser.page("POST", "/window/rect", {"width": width, "height": 900})
            drawn = browser.run(CHART_BOXES)
            chart, labels, marks, bars = drawn["chart"], drawn["labels"], drawn["marks"], drawn["bars"]
            assert len(bars) == min(turns, 1000) and 1 < len(labels) < len(marks)
            assert overlapping(labels) == [] and overlapping(marks) == []
            counted = [int(mark["title"].split(" compaction")[0]) for mark in marks]
            assert sum(counted) == compactions
            assert max(counted) > 1 if turns > 1000 else len(marks) == compactions  # close ones share
            assert sum(int(label["title"].split(" compaction")[0]) for label in labels) == compactions
            top = min(bar["top"] for bar in bars)
            for box in labels + marks:  # above the bars, inside the chart
                assert chart["left"] <= box["left"] and box["right"] <= chart["right"]
                assert chart["top"] <= box["top"] and box["bottom"] <= top
    finally:
        browser.close()


def png(width: int, height: int, seed: Optional[int] = None) -> bytes:
    """A valid PNG of *width* by *height* grey pixels, of random shades with a *seed*."""
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    rng = random.Random(seed)

    def shade() -> bytes:
        return b"\x80" * width if seed is None else bytes(rng.getrandbits(8) for _ in range(width))

    rows = b"".join(b"\x00" + shade() for _ in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(rows))
        + chunk(b"IEND", b"")
    )


def test_html_page_shows_inline_pictures_and_never_fetches_in_chromium(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    blocks: List[session.ContentBlock] = [
        session.image_block(data=png(3, 2), mime_type="image/png"),
        session.image_block(data=png(3, 2), mime_type="image/jpeg"),  # mislabelled: not shown
        session.image_block(data=b"<svg onload=alert(1)/>", mime_type="image/svg+xml"),  # never shown
        session.image_block(url="https://example.com/x.png", mime_type="image/png"),  # text, not fetched
    ]
    with session.create(path) as s, s.begin_run() as run:
        run.record(Event("message_end", execution=MODEL, message=Message("user", blocks)))
    page = html_page(path)
    talk = page.split('<section id="conversation">')[1].split('<section id="records">')[0]
    assert page.count("<img ") == 2 and talk.count("<img ") == 1  # in the conversation and the card
    assert talk.count("[image: ") == 3
    assert '<img class="shot" alt="image/png image, ' in page
    assert "[image: image/jpeg, " in page and "[image: image/svg+xml, " in page
    assert "[image: image/png, at https://example.com/x.png]" in page
    large = tmp_path / "large.jsonl"
    with session.create(large) as s, s.begin_run() as run:
        shot = session.image_block(data=png(200, 200, seed=1), mime_type="image/png")  # 53 kB of base64
        run.record(Event("message_end", execution=MODEL, message=Message("user", [shot])))
    assert html_page(large).count("<img ") == 2
    small = html_page(large, "--max-bytes", "30000")  # no room: named, with the command that prints it
    assert "<img " not in small and "too large for this page, see <code>python -m session show" in small
    copy = tmp_path / "page.html"
    copy.write_text(page, encoding="utf-8")
    browser = WebDriver(tmp_path / "profile")
    try:
        browser.page("POST", "/url", {"url": copy.as_uri()})
        script = "return [...document.images].map(i => [i.complete, i.naturalWidth, i.naturalHeight])"
        assert browser.page("POST", "/execute/sync", {"script": script, "args": []}) == [[True, 3, 2]] * 2
        script = "return performance.getEntriesByType('resource').map(e => e.name)"
        assert browser.page("POST", "/execute/sync", {"script": script, "args": []}) == []
    finally:
        browser.close()


def test_html_page_counts_each_picture_it_shows_against_its_budget(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    shots: List[session.ContentBlock] = [
        session.image_block(data=png(200, 200, seed=n), mime_type="image/png") for n in range(5)
    ]  # 53 kB of base64 each
    with session.create(path) as s, s.begin_run() as run:
        run.record(Event("message_end", execution=MODEL, message=Message("user", shots)))
    page = html_page(path, "--max-bytes", "200000")
    assert page.count("<img ") == 3, page.count("<img ")  # not 5 in the card and 5 in the conversation
    assert len(page.encode()) <= 200000
    assert page.count("too large for this page, see its card") == 5


SHOWN = """
var all = [...document.querySelectorAll(arguments[0])];
return [all.length, all.filter(function (e) { return e.checkVisibility(); }).length];
"""


def test_html_page_prints_the_demo_on_5_pages_its_folded_values_folded_in_chromium(tmp_path: Path) -> None:
    path = tmp_path / "demo.jsonl"
    made = subprocess.run(
        [sys.executable, str(HERE / "examples" / "agent_loop.py"), str(path)], capture_output=True
    )
    assert made.returncode == 0 and len(records(path)) == 74
    page = tmp_path / "demo.html"
    page.write_text(html_page(path), encoding="utf-8")
    browser = WebDriver(tmp_path / "profile")

    def shown(css: str) -> List[int]:
        """How many elements *css* selects, and how many of them are drawn."""
        return browser.page("POST", "/execute/sync", {"script": SHOWN, "args": [css]})  # type: ignore[no-any-return]

    try:
        browser.page("POST", "/url", {"url": page.as_uri()})
        folded = "details:not([open]) > :not(summary)"  # the snapshots' JSON among them
        before = shown(folded)
        assert before[0] > 0 and before[1] == 0
        for paper in ({}, {"page": {"width": 21.0, "height": 29.7}}):  # US Letter (the default), A4
            pdf = base64.b64decode(browser.page("POST", "/print", paper))
            assert 0 < len(re.findall(rb"/Type\s*/Page[^s]", pdf)) <= 5  # 8 when it unfolded all
        assert shown(folded) == before  # printing opened none
        media = {"cmd": "Emulation.setEmulatedMedia", "params": {"media": "print"}}
        browser.page("POST", "/goog/cdp/execute", media)
        assert browser.run("return matchMedia('print').matches") and shown(folded) == before
        whole = browser.element("details.whole > summary")  # the first call's whole input, opened
        browser.page("POST", f"/element/{whole}/click", {})
        assert browser.until(lambda: shown("details.whole[open] .input li .msg") == [1, 1])
    finally:
        browser.close()


CONTRAST = """
function rgb(c) { return c.match(/[\\d.]+/g).map(Number); }
function lum(c) {
  var a = c.slice(0, 3).map(function (v) {
    v /= 255;
    return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4);
  });
  return 0.2126 * a[0] + 0.7152 * a[1] + 0.0722 * a[2];
}
var bad = [];
document.querySelectorAll("body *").forEach(function (e) {
  var own = [].some.call(e.childNodes, function (n) { return n.nodeType === 3 && n.data.trim(); });
  if (!own || e.closest("svg") || !e.getClientRects().length) return;
  var fg = rgb(getComputedStyle(e).color), bg = null;
  for (var up = e; up && !bg; up = up.parentElement) {
    var b = rgb(getComputedStyle(up).backgroundColor);
    if (b.length < 4 || b[3] > 0) bg = b;
  }
  var l1 = lum(fg), l2 = lum(bg || [255, 255, 255]);
  var ratio = (Math.max(l1, l2) + 0.05) / (Math.min(l1, l2) + 0.05);
  if (ratio < 4.5) bad.push(e.tagName + "." + e.className + " " + ratio.toFixed(2));
});
return bad;
"""


def test_html_page_fits_600_pixels_and_reads_in_light_and_dark_in_chromium(tmp_path: Path) -> None:
    path = tmp_path / "demo.jsonl"
    made = subprocess.run(
        [sys.executable, str(HERE / "examples" / "agent_loop.py"), str(path)], capture_output=True
    )
    assert made.returncode == 0
    page = tmp_path / "demo.html"
    page.write_text(html_page(path), encoding="utf-8")
    browser = WebDriver(tmp_path / "profile")
    try:
        browser.page("POST", "/window/rect", {"width": 600, "height": 900})
        browser.page("POST", "/url", {"url": page.as_uri()})
        bar = "var f = document.querySelector('.filters'); return [f.offsetHeight, "
        bar += "parseFloat(getComputedStyle(f).fontSize)]"
        height, font = browser.run(bar)
        assert height < 4 * font * 1.4  # the sticky bar: two lines of text and its padding
        browser.run("document.querySelectorAll('details').forEach(d => d.open = true)")
        width = "return [document.documentElement.scrollWidth, document.documentElement.clientWidth]"
        wide, window = browser.run(width)
        assert wide <= window  # no sideways page scroll, every value unfolded
        assert browser.run(CONTRAST) == []
        scheme = {"features": [{"name": "prefers-color-scheme", "value": "dark"}]}
        browser.page("POST", "/goog/cdp/execute", {"cmd": "Emulation.setEmulatedMedia", "params": scheme})
        assert browser.run("return getComputedStyle(document.body).backgroundColor") == "rgb(18, 18, 18)"
        assert browser.run(CONTRAST) == []
    finally:
        browser.close()


def test_html_page_opens_on_the_conversation(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    with session.create(path) as s, s.begin_run() as run:
        run.record(Event("turn_start", turn_index=1))
        model = Execution("m1", "model")
        run.record(Event("model_request", execution=model, request=ModelRequest([say("list the files")])))
        call = session.tool_call_block("k1", "ls", {"d": "/"})
        thought = {"type": "thinking", "thinking": "I should look"}
        reply = Message("assistant", [thought, call], "toolUse")  # type: ignore[list-item]
        run.record(Event("model_exec_end", execution=model, message=reply))
        tool = Execution("k1", "tool", parent_id="m1")
        run.record(Event("tool_exec_start", execution=tool, tool="ls", args={"d": "/"}))
        run.record(Event("tool_exec_end", execution=tool, tool="ls", result="a.txt b.txt"))
        failing = Execution("k2", "tool", parent_id="m1")
        run.record(
            Event("tool_exec_end", execution=failing, tool="rm", error={"type": "Denied", "message": "no"})
        )
        compact = Execution("c1", "compact")
        run.record(Event("context_compacted", execution=compact, compaction={"dropped": 1}))
        model_call(run, "m2", [say("list the files"), say("now sum them")], attempt=2)
    page = html_page(path)
    talk = page.split('<section id="conversation"><h2>conversation</h2>\n', 1)[1].split("</section>", 1)[0]
    assert (
        page.index('id="conversation"')
        < page.index("input tokens per model call")
        < page.index('id="records"')
    )
    order = ["turn 1", "list the files", "thinking</summary>I should look", "calls <b>ls</b>",
             "tool <b>ls</b>", "a.txt b.txt", "tool <b>rm</b>", "Denied: no", "context compacted", "retry 2",
             "now sum them", "reply of m2"]  # fmt: skip
    places = [talk.find(text) for text in order]
    assert -1 not in places and places == sorted(places), list(zip(order, places))
    assert talk.count("list the files") == 1  # a message is said once, when it is new
    assert '<div class="step tool fail">' in talk  # errors in red
    assert '<div class="pair"><div>tool <b>ls</b> <code>{&quot;d&quot;: &quot;/&quot;}</code></div>' in talk
    for seq in re.findall(r'<span class="seq"><a href="#seq-(\d+)">', talk):  # each step links to its card
        assert f'id="seq-{seq}"' in page


ANSWER = "".join(f"answer line {n}\n" for n in range(200))  # 3,090 characters


def glance_file(path: Path, version: int) -> None:
    """Two runs: the first asks, fails a model call with a rate limit, retries it, calls a
    tool that fails, and answers at length; the second asks again and answers briefly."""
    usage = session.Usage(input=23283204, output=1000, provider="acme", model="gpt-x", cost={"total": 1.5})
    with session.create(path, version=version) as s:
        for question, answer, cost in (("What is 6 * 7?", ANSWER, 1.5), ("And 7 * 8?", "56", 0.25)):
            with s.begin_run() as run:
                run.record(Event("agent_start"))
                failing = Execution("m1", "model")
                run.record(Event("model_request", execution=failing, request=ModelRequest([say(question)])))
                error = {"type": "RateLimitError", "message": "429"}
                run.record(Event("model_exec_end", execution=failing, error=error))
                retry = Execution("m1", "model", attempt=2)
                run.record(Event("model_request", execution=retry, request=ModelRequest([say(question)])))
                reply = Message(
                    "assistant", [session.text_block(answer)], "stop", {**usage, "cost": {"total": cost}}
                )
                run.record(Event("model_exec_end", execution=retry, message=reply))
                tool = Execution("k1", "tool", parent_id="m1")
                run.record(Event("tool_exec_start", execution=tool, tool="calc"))
                run.record(Event("tool_exec_end", execution=tool, tool="calc", error="no such tool"))
                run.record(Event("agent_end", summary=session.RunSummary(end_reason="stop")))


@pytest.mark.parametrize("version", [1, 2])
def test_html_page_first_screen_answers_what_was_asked_answered_failed_and_cost(
    tmp_path: Path, version: int
) -> None:
    path = tmp_path / "s.jsonl"
    glance_file(path, version)
    page = html_page(path)
    glance = page.split('<dl class="glance">', 1)[1].split("</dl>", 1)[0]
    text = html.unescape(re.sub(r"<[^>]+>", "", glance))
    assert "asked (run 1 of 2)What is 6 * 7?" in text
    assert "answered (run 2 of 2)56 #" in text
    assert "stop \u00d72; 4 failed call attempts (2 recovered by a retry)" in text
    assert "gpt-x acme (2 calls)" in text
    assert "$1.75 in all (run 1 $1.50, run 2 $0.2500), 2 model calls reporting it" in text
    assert "input 46,566,408, output 2,000" in text  # with thousands separators
    assert page.index('<dl class="glance">') < page.index("records by type") < page.index('id="nav"')
    assert '<p>go to: <a href="#conversation">the conversation</a> · <a href="#nav">' in page
    run_id = records(path)[1].run_id
    assert run_id is not None and len(run_id) == 32
    assert re.findall(run_id, page.split("</header>", 1)[0]) == [run_id]  # whole only when unfolded
    assert (
        f'<summary><code>{run_id[:12]}<span class="cut">…</span></code></summary><code>{run_id}</code>'
        in page
    )
    assert "23,283,204 / 1,000" in page  # tokens of each run in the table
    long = tmp_path / "long.jsonl"
    with session.create(long, version=version) as s, s.begin_run() as run:
        model_call(run, "m1", [say("tell me all")])
        reply = Message("assistant", [session.text_block(ANSWER)], "stop")
        run.record(Event("model_exec_end", execution=Execution("m2", "model"), message=reply))
    glance = html_page(long).split('<dl class="glance">', 1)[1].split("</dl>", 1)[0]
    assert ANSWER[:2000] in glance and ANSWER[:2001] not in glance  # whole up to 2,000 characters
    assert f"… {len(ANSWER) - 2000:,} more characters in the record" in glance
    assert "answeredanswer line 0" in html.unescape(re.sub(r"<[^>]+>", "", glance))  # one run: no "of"


def test_html_page_runs_count_the_tokens_the_summary_counts(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    glance_file(path, 2)
    lines = path.read_bytes().splitlines(keepends=True)
    first, second = [n for n, line in enumerate(lines) if b'"output":1000,' in line]  # the two replies
    huge, negative = 10**40, -5  # of the first run's reply: beyond 64 bits; and of the second's
    lines[first] = lines[first].replace(b'"output":1000', b'"output":%d' % huge)
    lines[second] = lines[second].replace(b'"output":1000', b'"output":%d' % negative)
    path.write_bytes(b"".join(lines))
    usage = session.summarize(path).usage
    assert (usage["input"], usage["output"]) == (23283204, -5)  # the first reply's usage left out
    page = html_page(path)
    assert "input 23,283,204, output -5" in page
    rows = re.findall(r"<tr><td><a[^>]*>run \d</a>.*?</tr>", page)
    cells = [re.findall(r"<td>([^<]*)</td>", row)[-5] for row in rows]
    assert cells == ["", "23,283,204 / -5"]  # as the totals count them: each run's add up to those


def test_html_page_chart_leaves_out_an_input_count_beyond_64_bits_as_the_summary_does(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    with session.create(path) as s, s.begin_run() as run:
        model_call(run, "m1", [say("one")])
        model_call(run, "m2", [say("one"), say("two")])
    lines = path.read_bytes().splitlines(keepends=True)
    first = next(n for n, line in enumerate(lines) if b'"input":1' in line and b"model_exec_end" in line)
    lines[first] = lines[first].replace(b'"input":1', b'"input":%d' % 10**40)
    path.write_bytes(b"".join(lines))
    assert session.summarize(path).usage["input"] == 2  # the first reply's usage left out
    chart = html_page(path).split('<section id="chart">', 1)[1].split("</section>", 1)[0]
    assert "1 call, at most 2 input tokens" in chart and "10,000" not in chart


def test_html_page_first_screen_shows_hostile_texts_as_text_in_chromium(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    p = PAYLOADS
    usage = session.Usage(input=1, provider=p[1], model=p[0], cost={"total": 0.5})
    with session.create(path) as s, s.begin_run() as run:
        model = Execution(p[5], "model")
        run.record(Event("model_request", execution=model, request=ModelRequest([say(p[0] + p[6])])))
        run.record(Event("model_exec_end", execution=model, error={"type": p[2], "message": p[3]}))
        retry = Execution(p[5], "model", attempt=2)
        reply = Message("assistant", [session.text_block(p[1] + p[5])], "stop", usage)
        run.record(Event("model_exec_end", execution=retry, message=reply))
        run.record(Event("agent_end", summary=session.RunSummary(end_reason=p[4])))
    page = html_page(path)
    glance = page.split('<dl class="glance">', 1)[1].split("</dl>", 1)[0]
    text = html.unescape(re.sub(r"<[^>]+>", "", glance))
    for payload in (p[0], p[1], p[4], p[5]):
        assert payload in text  # the question, the answer, the model, provider and end reason as text
    assert "[U+202E]gnp.exe[U+200B]" in text and "\u202e" not in page
    failures = html.unescape(re.sub(r"<[^>]+>", "", page.split('<section id="failures">', 1)[1]))
    assert f"{p[2]} \u00d71, 1 recovered by a retry" in failures  # the error type as text
    copy = tmp_path / "page.html"
    copy.write_text(page, encoding="utf-8")
    dom = browser_dom(copy, tmp_path / "profile")
    assert 'data-js="on"' in dom and "data-pwned" not in dom


def test_html_page_first_screen_in_chromium(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    glance_file(path, 2)
    copy = tmp_path / "page.html"
    copy.write_text(html_page(path), encoding="utf-8")
    browser = WebDriver(tmp_path / "profile")
    try:
        browser.page("POST", "/window/rect", {"width": 1280, "height": 900})
        browser.page("POST", "/url", {"url": copy.as_uri()})
        bottom = "return document.querySelector('.glance').getBoundingClientRect().bottom"
        assert browser.run(bottom) < browser.run("return innerHeight")  # all of it on the first screen
        whole = "return [...document.querySelectorAll('details.id')].filter(d => d.open).length"
        assert browser.run(whole) == 0
        browser.page("POST", f"/element/{browser.element('table details.id summary')}/click", {})
        assert browser.run(whole) == 1
        assert browser.run("return document.querySelector('table details.id[open]').innerText").endswith(
            records(path)[1].run_id
        )
    finally:
        browser.close()


def test_html_page_conversation_shows_tool_output_as_text_folded_after_its_first_lines(
    tmp_path: Path,
) -> None:
    path = tmp_path / "s.jsonl"
    listing = "".join(f"    {n}  Record {n}\n" for n in range(20))
    with session.create(path) as s, s.begin_run() as run:
        for n, result in enumerate((listing, {"output": listing}, {"rows": [1, {"a": "b"}]}, "x" * 3000)):
            run.record(
                Event("tool_exec_end", execution=Execution(f"t{n}", "tool"), tool="cat", result=result)
            )
    page = html_page(path)
    talk = page.split('<section id="conversation">')[1].split('<section id="records">')[0]
    steps = talk.split('<div class="pair">')[1:]
    assert len(steps) == 4
    folded = "".join(f"    {n}  Record {n}\n" for n in range(7)) + "    7  Record 7"
    assert f'→ {folded}<details class="more"><summary>13 more lines</summary>    8  Record 8\n' in steps[0]
    assert "→ output:     0  Record 0\n    1  Record 1\n" in steps[1]  # its line breaks, not \\n
    assert (
        "→ {\n &quot;rows&quot;: [\n  1,\n  {\n   &quot;a&quot;: &quot;b&quot;\n  }\n ]\n}</div>" in steps[2]
    )
    assert steps[3].split("</div></div>")[0].count("x") == 2000  # of 3,000
    assert "… shortened: its card has it whole</span></details>" in steps[3]
    copy = tmp_path / "page.html"
    copy.write_text(page, encoding="utf-8")
    browser = WebDriver(tmp_path / "profile")
    try:
        browser.page("POST", "/url", {"url": copy.as_uri()})
        # as it reads in view (innerText is the drawn text; a step is drawn as it nears the view)
        shown = (
            "var e = document.querySelector('#conversation .pair'); e.scrollIntoView(); return e.innerText"
        )
        assert "7  Record 7" in browser.run(shown) and "19  Record 19" not in browser.run(shown)
        browser.page("POST", f"/element/{browser.element('#conversation .more summary')}/click", {})
        assert "    19  Record 19" in browser.run(shown)
        browser.page("POST", "/refresh", {})  # folded again; a search lands on the match and unfolds it
        assert "19  Record 19" not in browser.run(shown)
        browser.page("POST", f"/element/{browser.element('#search')}/value", {"text": "19  record 19\ue007"})
        assert browser.run("return document.activeElement.className") == "step tool"
        assert "    19  Record 19" in browser.run(shown)
    finally:
        browser.close()


def conversation_file(path: Path, version: int, turns: int = 3) -> List[List[List[str]]]:
    """A session of *turns* turns (each a model call and a tool call) and then a compaction
    that drops the first tool exchange; the texts of each message each model request sends."""
    system = Message("system", [session.text_block("You are terse.")])
    context = [system, say("count the files")]
    sent: List[List[List[str]]] = []
    tools = [{"name": "ls", "description": "list a folder"}]
    config = session.CallConfig(max_tokens=64, tool_choice="auto")
    with session.create(path, version=version) as s, s.begin_run() as run:
        for n in range(turns):
            model = Execution(f"m{n}", "model")
            run.record(
                Event("model_request", execution=model, request=ModelRequest(list(context), tools, config))
            )
            sent.append([message_texts(m) for m in context])
            call = session.tool_call_block(f"k{n}", "ls", {"folder": f"dir {n}"})
            reply = Message("assistant", [session.text_block(f"looking at dir {n}"), call], "toolUse")
            run.record(Event("model_exec_end", execution=model, message=reply))
            tool = Execution(f"k{n}", "tool", parent_id=f"m{n}")
            run.record(Event("tool_exec_end", execution=tool, tool="ls", result=f"{n} files"))
            result = session.tool_result(f"k{n}", f"result {n}: {n} files")
            run.record(Event("message_end", execution=tool, message=result))
            context += [reply, result]
        run.record(Event("context_compacted", execution=Execution("c", "compact"), compaction={}))
        del context[2:4]
        model = Execution("last", "model")
        run.record(
            Event("model_request", execution=model, request=ModelRequest(list(context), tools, config))
        )
        sent.append([message_texts(m) for m in context])
    return sent


def message_texts(message: Message) -> List[str]:
    """The texts and tool call arguments of *message*, as the page shows them."""
    blocks: List[Dict[str, Any]] = list(message.content or ())  # type: ignore[arg-type]
    return [
        block["text"] if block["type"] == "text" else json.dumps(block["tool_call"]["args"])
        for block in blocks
        if block["type"] in ("text", "toolCall")
    ]


def test_html_page_shows_each_calls_whole_input_in_chromium(tmp_path: Path) -> None:
    pages = []
    for version in (1, 2):
        sent = conversation_file(tmp_path / f"v{version}.jsonl", version)
        pages.append(tmp_path / f"v{version}.html")
        pages[-1].write_text(html_page(tmp_path / f"v{version}.jsonl"), encoding="utf-8")
    browser = WebDriver(tmp_path / "profile")
    seen = []
    try:
        for page in pages:
            browser.page("POST", "/url", {"url": page.as_uri()})
            wholes = browser.run("return [...document.querySelectorAll('details.whole')].map(e => e.id)")
            assert len(wholes) == len(sent)
            shown = []
            for n, whole in enumerate(wholes):
                if n % 2:  # from the call's card, or from its step in the conversation
                    browser.page("POST", f"/element/{browser.element(f'#{whole} > summary')}/click", {})
                else:
                    step = f'#conversation a[href="#{whole}"]'
                    browser.run(f"document.querySelector('{step}').scrollIntoView({{block: 'center'}})")
                    browser.page("POST", f"/element/{browser.element(step)}/click", {})
                opened = f"return !!document.querySelector('#{whole} .input')"
                assert browser.until(lambda: bool(browser.run(opened)))  # noqa: B023 (called at once)
                texts = browser.run(
                    f"return [...document.querySelectorAll('#{whole} .input li')].map(li => li.textContent)"
                )
                settings = browser.run(f"return document.querySelector('#{whole} .input > div').textContent")
                assert len(texts) == len(sent[n])
                assert all(all(t in text for t in want) for want, text in zip(sent[n], texts)), (
                    sent[n],
                    texts,
                )
                assert "ls" in settings and "max_tokens" in settings and "64" in settings
                shown.append((texts, settings))
            seen.append(shown)
        assert seen[0] == seen[1]  # version 1 and 2: the same whole inputs
        long = tmp_path / "long.jsonl"
        sent = conversation_file(long, 2, 40)
        cut = tmp_path / "cut.html"
        cut.write_text(html_page(long, "--max-bytes", "60000"), encoding="utf-8")
        browser.page("POST", "/url", {"url": cut.as_uri()})
        last = browser.run("return [...document.querySelectorAll('details.whole')].pop().id")
        browser.run(f"document.getElementById('{last}').scrollIntoView()")  # its card drawn: in view
        browser.page("POST", f"/element/{browser.element(f'#{last} > summary')}/click", {})
        assert browser.until(lambda: bool(browser.run(f"return !!document.querySelector('#{last} .input')")))
        pairs = "li => [li.className, li.textContent]"
        items = browser.run(f"return [...document.querySelectorAll('#{last} .input li')].map({pairs})")
        assert len(items) == len(sent[-1]) == 80
        left = [n for n, (kind, text) in enumerate(items) if kind == "cut"]
        assert 0 < len(left) < 80 and left == list(range(left[0], left[-1] + 1))  # the middle
        assert all(items[n][1] == "this message left out of this page, to keep to its budget" for n in left)
        shown = [(want, text) for n, (want, (_, text)) in enumerate(zip(sent[-1], items)) if n not in left]
        assert all(all(t in text for t in want) for want, text in shown)
    finally:
        browser.close()


@pytest.mark.parametrize("version", [1, 2])
def test_html_page_whole_inputs_without_javascript_and_in_linear_size(tmp_path: Path, version: int) -> None:
    path = tmp_path / "s.jsonl"
    conversation_file(path, version)
    page = html_page(path)  # every link of the places leads somewhere
    requests = [r.seq for r in records(path) if r.type == "model_request"]
    places = re.findall(r'<details class="whole" id="input-(\d+)">.*?<ul class="places">(.*?)</ul>', page)
    assert [int(seq) for seq, _ in places] == requests
    last = re.sub(r"<[^>]+>", "", places[-1][1])
    before = requests[-2]
    assert last == (
        f"1 to 2: message 1 to 2 of the input of request #{before}"  # the compaction dropped 3 and 4
        f"3 to 4: message 5 to 6 of the input of request #{before}"
        "5: assistant message6: tool message"  # the last turn's, in the records that show them
        f"tools and config: as in request #{requests[0]}"
    )
    sizes = []
    for turns in (50, 100):
        conversation_file(tmp_path / f"{turns}.jsonl", version, turns)
        sizes.append(len(html_page(tmp_path / f"{turns}.jsonl").encode()))
    assert sizes[1] < 2.05 * sizes[0]  # each message shown once: twice the turns, twice the page


def test_html_page_whole_input_after_a_request_a_redactor_wrote_whole(tmp_path: Path) -> None:
    """A request whose references a ``redact`` hook replaced (written whole, without ranges)
    between two that refer to ranges: the one after it still has all its messages."""
    path = tmp_path / "s.jsonl"
    requests = 0

    def redact(data: Dict[str, Any]) -> Dict[str, Any]:
        nonlocal requests
        if "request" in data:
            requests += 1
            if requests == 2:
                return {**data, "request": "withheld"}
        return data

    context = [say("count the files")]
    with session.create(path, redact=redact) as s, s.begin_run() as run:
        for n in range(3):
            model = Execution(f"m{n}", "model")
            run.record(Event("model_request", execution=model, request=ModelRequest(list(context))))
            reply = Message("assistant", [session.text_block(f"answer {n}")], "stop")
            run.record(Event("model_exec_end", execution=model, message=reply))
            context += [reply, say(f"and then {n}")]
    written = [r for r in records(path) if r.type == "model_request"]
    assert [type(r.data["request"]) for r in written] == [dict, str, dict]
    page = html_page(path)
    last = written[-1].seq
    assert f'id="input-{last}"><summary>the whole input: 5 messages,' in page


def test_html_page_of_a_version_2_file_looks_each_message_up_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A request whose context grew costs the page only its new messages: the message
    records looked up over a session are about as many as it has, not one per message of
    every request (quadratic in the turns: a 230 MB session took 55 times validate's time)."""
    looked_up: List[int] = []
    message_seqs = session._Index.message_seqs

    def counted(index: Any, ranges: List[List[int]]) -> List[int]:
        seqs = message_seqs(index, ranges)
        looked_up.append(len(seqs))
        return seqs

    monkeypatch.setattr(session._Index, "message_seqs", counted)
    path, out = tmp_path / "s.jsonl", tmp_path / "s.html"
    sent = conversation_file(path, 2, 60)
    assert session.main(["html", str(path), "-o", str(out)]) == 0
    messages = sum(1 for r in records(path) if r.type == "message")
    assert len(looked_up) == len(sent)  # each request's messages looked up once ...
    assert sum(looked_up) <= messages + len(sent[-1])  # ... the new ones, and all after the compaction
    assert sum(len(texts) for texts in sent) > 10 * messages  # every request's would be many more


def long_session(path: Path, turns: int) -> None:
    """*turns* turns of a model call and a tool call; every 50th tool call fails."""
    with session.create(path) as s, s.begin_run() as run:
        context = [say("start")]
        for turn in range(1, turns + 1):
            run.record(Event("turn_start", turn_index=turn, timestamp=T0))
            model_call(run, f"m{turn}", context)
            error = f"failure {turn}" if turn % 50 == 0 else None
            tool = Execution(f"t{turn}", "tool", turn_index=turn)
            run.record(
                Event("tool_exec_end", execution=tool, tool="grep", result=f"found {turn}", error=error)
            )


def test_html_page_of_300_turns_is_found_around_by_keyboard_in_chromium(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    long_session(path, 300)
    page = tmp_path / "page.html"
    page.write_text(html_page(path), encoding="utf-8")
    nav = page.read_text(encoding="utf-8").split('<nav id="nav">', 1)[1].split("</nav>", 1)[0]
    head = r'<details><summary>run <a href="#talk-\d+">1 <code>\w{12}<span class="cut">…</span></code></a>: '
    assert re.search(head + r'300 turns, 600 calls, <span class="error">6 ✗</span></summary>', nav)
    assert nav.count("<li>") == 300 and nav.count("✗") == 7  # folded: over 50 turns
    assert re.search(
        r'<li><a href="#talk-\d+">turn 50: 2 calls, <span class="error">1 ✗</span></a></li>', nav
    )
    browser = WebDriver(tmp_path / "profile")
    try:
        browser.page("POST", "/url", {"url": page.as_uri()})
        reached = {}
        for presses in range(1, 7):
            browser.keys("\ue004")  # Tab
            reached[browser.run("return document.activeElement.id || document.activeElement.className")] = (
                presses
            )
        assert reached == {
            "skip": 1,
            "search": 2,
            "only-errors": 3,
            "show-model": 4,
            "show-tool": 5,
            "show-other": 6,
        }
        browser.run("document.activeElement.blur()")
        browser.keys("e")  # the first failed call
        assert "failure 50" in browser.run("return document.activeElement.textContent")
        browser.keys("eE")  # the next, and back
        assert "failure 50" in browser.run("return document.activeElement.textContent")
        browser.keys("j")  # the call after it, in the conversation
        assert browser.run("return document.activeElement.className") == "step model"
        assert "reply of m51" in browser.run("return document.activeElement.textContent")
        browser.keys("i")  # its whole input
        opened = (
            "return [...document.querySelectorAll('details.whole[open] .input li')].map(e => e.textContent)"
        )
        assert browser.until(lambda: len(browser.run(opened)) == 1) and "start" in browser.run(opened)[0]
        browser.keys("k")
        assert "failure 50" in browser.run("return document.activeElement.textContent")
        browser.keys("/found 12")  # the search: found 12, 120 to 129, in the conversation and the cards
        assert browser.run("return document.activeElement.id") == "search"
        assert browser.until(
            lambda: browser.run("return document.getElementById('matches').textContent") == "22 matches"
        )
        browser.keys("\ue007")  # Enter: a match
        matches = "return document.getElementById('matches').textContent"
        first = int(browser.run(matches).split(" of 22 matches")[0])
        assert "found 12" in browser.run("return document.activeElement.textContent")
        browser.keys("nn")
        assert browser.run(matches) == f"{(first + 1) % 22 + 1} of 22 matches"
        browser.keys("N")
        assert browser.run(matches) == f"{first % 22 + 1} of 22 matches"
    finally:
        browser.close()


class HeldPage:
    """*page* served over HTTP from this process: its first *split* bytes at once, the rest
    once released, so that a browser holds it half parsed until then."""

    def __init__(self, page: bytes, split: int) -> None:
        import http.server

        gate = self.gate = threading.Event()

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path != "/page.html":
                    self.send_error(404)
                    return
                self.send_response(200)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(page)))
                self.end_headers()
                with contextlib.suppress(OSError):  # the browser may leave before the end
                    self.wfile.write(page[:split])
                    self.wfile.flush()
                    gate.wait(60)
                    self.wfile.write(page[split:])

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/page.html"

    def close(self) -> None:
        self.gate.set()
        self.server.shutdown()
        self.server.server_close()


def test_html_page_searches_and_moves_while_it_loads_in_chromium(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    long_session(path, 300)
    page = html_page(path).encode()
    held = HeldPage(page, page.index(b" turn 150</div>"))  # half the conversation, no card yet
    browser = WebDriver(tmp_path / "profile", load="none")
    loading = "return document.readyState === 'loading'"
    matches = "return document.getElementById('matches').textContent"
    try:
        browser.page("POST", "/url", {"url": held.url})
        ready = "var box = document.getElementById('search'); return !!box && !!box.offsetParent"
        assert browser.until(lambda: browser.run(ready)) and browser.run(loading)
        browser.keys("j")  # the first call, in the conversation parsed so far
        assert "reply of m1" in browser.run("return document.activeElement.textContent")
        browser.keys("e")  # the first failed call
        assert "failure 50" in browser.run("return document.activeElement.textContent")
        browser.keys("/found 12")  # found 12, 120 to 129: in the steps parsed so far
        assert browser.until(lambda: browser.run(matches) == "11 matches")
        assert browser.visible("#conversation .step") == 11 and browser.run(loading)
        browser.keys("\ue007")  # Enter: the next match, below the failed call
        assert re.fullmatch("[0-9]+ of 11 matches", browser.run(matches))
        assert "found 12" in browser.run("return document.activeElement.textContent")
        held.gate.set()  # the rest of the page: the filter takes it as it comes
        assert browser.until(lambda: browser.run(matches) == "22 matches")  # and the cards'
        assert not browser.run(loading) and browser.visible("#conversation .step") == 11
        assert browser.until(lambda: browser.visible(".card") == 11)  # its next pass takes the cards
    finally:
        browser.close()
        held.close()


def test_html_page_holds_the_page_not_the_messages_it_read(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    with session.create(path) as s, s.begin_run() as run:  # version 2: a record per message
        context = []
        for turn in range(24):  # 24 MB of messages, each sent by every later request
            context.append(say(f"{turn} " + "x" * (1 << 20)))
            model_call(run, f"m{turn}", context)
    measure = (
        "import sys, tracemalloc; sys.path.insert(0, sys.argv[1]); import session; tracemalloc.start()\n"
        "assert session.main(['html', sys.argv[2], '-o', sys.argv[3]]) == 0\n"
        "print(tracemalloc.get_traced_memory()[1])"
    )
    done = subprocess.run(
        [sys.executable, "-c", measure, str(MODULE.parent), str(path), str(tmp_path / "page.html")],
        capture_output=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert int(done.stdout) < 12 << 20  # a few copies of one 1 MB line, parsed, and the page
    assert (tmp_path / "page.html").stat().st_size < 1 << 20
