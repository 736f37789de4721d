"""jupyter_pause.serialize.openfiles: buffers by value, files reopened where they were, never truncated."""

from __future__ import annotations

import io
import os
import tarfile
import tempfile
from pathlib import Path

import pytest

from tests.support.dumping import dump, restore_elsewhere, resume_elsewhere, roundtrip


def test_buffers_come_back_by_value_at_their_position(tmp_path: Path) -> None:
    raw, text = io.BytesIO(b"hello world"), io.StringIO("line one\nline two\n")
    raw.seek(6)
    text.readline()
    closed = io.BytesIO(b"x")
    closed.close()
    out = resume_elsewhere(
        {"raw": raw, "text": text, "closed": closed},
        "out = [type(raw).__name__, raw.read().decode(), text.readline(), closed.closed]",
        tmp_path,
    )
    assert out == ["BytesIO", "world", "line two\n", True]


def test_write_handle_continues_at_its_position_and_keeps_the_content(tmp_path: Path) -> None:
    path = tmp_path / "log.txt"
    handle = open(path, "w")
    handle.write("first\n")  # not flushed yet: the checkpoint flushes it
    binary = open(tmp_path / "data.bin", "wb")
    binary.write(b"\x00\x01")
    out = resume_elsewhere(
        {"handle": handle, "binary": binary},
        f"""
        handle.write("second\\n"); handle.close(); binary.write(b"\\x02"); binary.close()
        out = [type(handle).__name__, handle.mode, type(binary).__name__, open({str(path)!r}).read(),
               list(open({str(tmp_path / "data.bin")!r}, "rb").read())]
        """,
        tmp_path,
    )
    handle.close()
    binary.close()
    assert out == ["TextIOWrapper", "w", "BufferedWriter", "first\nsecond\n", [0, 1, 2]]


def test_reopening_never_truncates_what_was_written_after_the_checkpoint(tmp_path: Path) -> None:
    path = tmp_path / "log.txt"
    with open(path, "w") as handle:
        handle.write("a\n")
        handle.flush()
        _, segments, records, blobs = dump({"handle": handle})
        handle.write("b\n")  # after the checkpoint, before the kill
    from jupyter_pause.serialize.arrays import ArrayLoader
    from jupyter_pause.serialize.pickler import load_variables

    loaded, failed = load_variables(segments, ArrayLoader(records, blobs), {})
    assert failed == {} and path.read_text() == "a\nb\n"  # reopening wrote nothing
    restored = loaded["handle"]
    assert restored.tell() == 2
    restored.write("B\n")
    restored.close()
    assert path.read_text() == "a\nB\n"  # the next write lands where the saved handle stood


def test_append_and_read_handles_keep_their_mode_and_position(tmp_path: Path) -> None:
    (tmp_path / "in.txt").write_text("one\ntwo\nthree\n")
    (tmp_path / "out.txt").write_text("old\n")
    reader = open(tmp_path / "in.txt")
    reader.readline()
    appender = open(tmp_path / "out.txt", "a")
    binary = open(tmp_path / "in.txt", "rb")
    binary.seek(4)
    out = resume_elsewhere(
        {"reader": reader, "appender": appender, "binary": binary},
        f"""
        appender.write("new\\n"); appender.close()
        out = [reader.readline(), binary.read(3).decode(), appender.mode, open({str(tmp_path / "out.txt")!r}).read()]
        """,
        tmp_path,
    )
    for f in (reader, appender, binary):
        f.close()
    assert out == ["two\n", "two", "a", "old\nnew\n"]


def test_a_file_gone_or_shorter_is_named_on_resume(tmp_path: Path) -> None:
    gone, short = tmp_path / "gone.txt", tmp_path / "short.txt"
    gone.write_text("abc")
    short.write_text("abcdef")
    f1, f2 = open(gone), open(short)
    f1.read()
    f2.read()

    def damage(_: list) -> None:
        gone.unlink()
        short.write_text("ab")

    report = restore_elsewhere({"f1": f1, "f2": f2, "kept": 1}, "out = kept", tmp_path, damage)
    f1.close()
    f2.close()
    assert report["out"] == 1
    assert f"file {gone} is gone" in report["failed"]["f1"]
    assert "shorter than the position 6" in report["failed"]["f2"]


def test_text_file_read_by_a_for_loop_is_named_with_the_reason(tmp_path: Path) -> None:
    (tmp_path / "in.txt").write_text("one\ntwo\n")
    with open(tmp_path / "in.txt") as reader:
        next(reader)
        result, _, _ = roundtrip({"reader": reader})
    assert "its position cannot be read" in result.failed["reader"]


def test_temporary_file_comes_back_by_value(tmp_path: Path) -> None:
    temp = tempfile.TemporaryFile("w+")
    temp.write("scratch data")
    temp.seek(3)
    out = resume_elsewhere({"temp": temp}, "out = [type(temp).__name__, temp.read()]", tmp_path)
    temp.close()
    assert out == ["TextIOWrapper", "atch data"]


def test_process_streams_are_this_processes_streams(tmp_path: Path) -> None:
    import pprint
    import sys

    printer = pprint.PrettyPrinter(width=20, stream=sys.stdout)
    out = resume_elsewhere(
        {"printer": printer, "err": sys.stderr},
        "import sys\nout = [printer._stream is sys.stdout, err is sys.stderr, printer._width]",
        tmp_path,
    )
    assert out == [True, True, 20]


def test_tar_archive_open_for_reading_is_reopened_and_one_being_written_is_named(tmp_path: Path) -> None:
    member = tmp_path / "member.txt"
    member.write_text("inside")
    with tarfile.open(tmp_path / "a.tar", "w") as archive:
        archive.add(member, arcname="member.txt")
    reading = tarfile.open(tmp_path / "a.tar")
    writing = tarfile.open(tmp_path / "b.tar", "w")
    result, _, _ = roundtrip({"writing": writing})
    assert "is not saved: an archive being written" in result.failed["writing"]
    out = resume_elsewhere(
        {"reading": reading},
        "out = [type(reading).__name__, reading.extractfile('member.txt').read().decode()]",
        tmp_path,
    )
    reading.close()
    writing.close()
    assert out == ["TarFile", "inside"]


@pytest.mark.parametrize("mode", ["w", "x"])
def test_exclusive_and_truncating_modes_reopen_without_error(tmp_path: Path, mode: str) -> None:
    path = tmp_path / f"{mode}.txt"
    handle = open(path, mode)
    handle.write("kept")
    out = resume_elsewhere({"handle": handle}, "handle.write('!'); handle.close(); out = handle.mode", tmp_path)
    handle.close()
    assert out == mode and path.read_text() == "kept!"
    assert os.path.getsize(path) == 5


def test_closed_archives_come_back_closed_with_their_members(tmp_path: Path) -> None:
    import zipfile

    member = tmp_path / "member.txt"
    member.write_text("inside")
    with tarfile.open(tmp_path / "a.tar", "w") as tar:
        tar.add(member, arcname="member.txt")
    with zipfile.ZipFile(tmp_path / "a.zip", "w") as archive:
        archive.write(member, arcname="member.txt")
    (tmp_path / "a.tar").unlink()  # a closed archive needs nothing on disk
    out = resume_elsewhere(
        {"tar": tar, "archive": archive},
        "out = [tar.closed, tar.mode, [m.name for m in tar.members], archive.fp is None, archive.namelist()]",
        tmp_path,
    )
    assert out == [True, "w", ["member.txt"], True, ["member.txt"]]


def test_a_file_under_a_moved_working_directory_is_found_there(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from jupyter_pause.serialize.arrays import ArrayLoader
    from jupyter_pause.serialize.pickler import load_variables
    from tests.support.dumping import dump

    (tmp_path / "old" / "data").mkdir(parents=True)
    (tmp_path / "old" / "data" / "log.txt").write_text("one\n")
    monkeypatch.chdir(tmp_path / "old")
    with open("data/log.txt", "a") as handle:
        _, segments, records, blobs = dump({"handle": handle})
    (tmp_path / "old").rename(tmp_path / "new")
    monkeypatch.chdir(tmp_path / "new")
    loaded, failed = load_variables(segments, ArrayLoader(records, blobs), {})
    assert failed == {}
    loaded["handle"].write("two\n")
    loaded["handle"].close()
    assert (tmp_path / "new" / "data" / "log.txt").read_text() == "one\ntwo\n"


def test_wrappers_around_in_memory_streams_come_back_by_value(tmp_path: Path) -> None:
    text = io.TextIOWrapper(io.BytesIO("é first\nsecond\n".encode()), encoding="utf-8")
    text.readline()
    buffered = io.BufferedReader(io.BytesIO(b"xyz"))
    buffered.read(1)
    out = resume_elsewhere(
        {"text": text, "buffered": buffered},
        "out = [type(text).__name__, text.readline(), type(buffered).__name__, buffered.read().decode()]",
        tmp_path,
    )
    assert out == ["TextIOWrapper", "second\n", "BufferedReader", "yz"]
