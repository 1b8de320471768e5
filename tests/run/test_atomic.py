"""``ctxleak.run.atomic`` on the file system, no model: a file written whole and never replacing
one it was not asked to (also where the file system has no hard links), the folders and files an
output is refused for, an append the system cuts short taken back, and each OS error turned into
one line that says what to do."""

from __future__ import annotations

import errno
import os

import pytest

from ctxleak.errors import ConfigError, OutputError
from ctxleak.run import atomic
from ctxleak.run.atomic import (
    append_whole,
    blocking_part,
    os_advice,
    os_errors,
    output_error,
    refuse_foreign_folder,
    refuse_replacing,
    write_atomic,
)


def test_a_new_file_never_replaces_one_and_leaves_no_temp_file(tmp_path):
    path = tmp_path / "out.json"
    write_atomic(path, "first", mode=0o600, replace=False)
    assert path.read_text() == "first" and oct(path.stat().st_mode & 0o777) == "0o600"
    with pytest.raises(OutputError, match=f"output {path} already exists: ctxleak does not "
                                          "replace a file") as error:
        write_atomic(path, b"second", replace=False)
    assert error.value.param == "output"
    assert path.read_text() == "first" and os.listdir(tmp_path) == ["out.json"]
    write_atomic(path, b"third")  # replace=True: replaced
    assert path.read_bytes() == b"third" and os.listdir(tmp_path) == ["out.json"]


@pytest.mark.parametrize("code", [errno.EPERM, errno.EXDEV])
def test_without_hard_links_a_new_file_is_checked_then_moved(tmp_path, monkeypatch, code):
    def no_links(src, dst):
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(atomic.os, "link", no_links)
    path = tmp_path / "out.json"
    write_atomic(path, "first", replace=False)
    assert path.read_text() == "first" and os.listdir(tmp_path) == ["out.json"]
    with pytest.raises(OutputError, match="already exists"):
        write_atomic(path, "second", replace=False)
    assert path.read_text() == "first" and os.listdir(tmp_path) == ["out.json"]


def test_another_link_failure_is_raised_and_the_temp_file_removed(tmp_path, monkeypatch):
    def broken(src, dst):
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(atomic.os, "link", broken)
    with pytest.raises(OSError, match="Input/output error"):
        write_atomic(tmp_path / "out.json", "data", replace=False)
    assert os.listdir(tmp_path) == []


def test_a_folder_to_save_into_must_be_new_or_empty(tmp_path):
    refuse_foreign_folder(tmp_path / "new")
    (tmp_path / "empty").mkdir()
    refuse_foreign_folder(tmp_path / "empty")
    (tmp_path / "file").write_text("x")
    with pytest.raises(OutputError, match="is a file, not a folder") as error:
        refuse_foreign_folder(tmp_path / "file", name="save_dir")
    assert error.value.param == "save_dir"
    (tmp_path / "empty" / "kept.txt").write_text("x")
    with pytest.raises(OutputError, match="is not empty"):
        refuse_foreign_folder(tmp_path / "empty")


def test_an_output_file_is_refused_for_its_input_a_folder_or_an_existing_file(tmp_path):
    data = tmp_path / "data.jsonl"
    data.write_text("{}\n")
    os.symlink(data, tmp_path / "link.jsonl")
    with pytest.raises(OutputError, match=f"output {tmp_path / 'link.jsonl'} is the input"):
        refuse_replacing(tmp_path / "link.jsonl", overwrite=True, inputs=[data])
    refuse_replacing(tmp_path / "new.json", inputs=[tmp_path / "missing.jsonl", data])
    with pytest.raises(OutputError, match="is a folder: name the file to write"):
        refuse_replacing(tmp_path, overwrite=True)
    with pytest.raises(OutputError, match="already exists"):
        refuse_replacing(data)
    refuse_replacing(data, overwrite=True)


def test_an_append_the_system_cuts_short_is_taken_back(tmp_path, monkeypatch):
    path = tmp_path / "samples.jsonl"
    path.write_bytes(b'{"id": 1}\n')
    real_write = os.write

    def half_then_full(fd, data):  # 4 bytes a call while more than 4 are left, then a full disk
        if len(data) > 4:
            return real_write(fd, bytes(data[:4]))
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(atomic.os, "write", half_then_full)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND)
    try:
        with pytest.raises(OSError, match="No space left"):
            append_whole(fd, b'{"id": 2}\n')
        assert path.read_bytes() == b'{"id": 1}\n'
        def no_truncate(fd, size):
            raise OSError(errno.EIO, "cannot truncate")

        monkeypatch.setattr(atomic.os, "ftruncate", no_truncate)
        with pytest.raises(OSError, match="No space left"):  # the first error, not the second
            append_whole(fd, b'{"id": 3}\n')
        assert path.read_bytes() == b'{"id": 1}\n{"id": 3'  # cut: the next load drops it
    finally:
        os.close(fd)


@pytest.mark.parametrize("code, words", [
    (errno.ENOSPC, "the disk (or quota) is full"), (errno.EROFS, "read-only or not writable"),
    (errno.EACCES, "read-only or not writable"), (errno.EISDIR, "is a file, not a folder"),
    (errno.EIO, "fix the cause or choose another output"), (None, "fix the cause")])
def test_what_to_do_about_each_os_error(code, words):
    assert words in os_advice(code)


def test_the_part_of_a_path_that_blocks_a_folder_is_named(tmp_path):
    assert blocking_part(tmp_path / "a" / "b") is None
    (tmp_path / "file").write_text("x")
    assert blocking_part(tmp_path / "file" / "run") == \
        f"a part of that path is a file, not a folder ({tmp_path / 'file'}): choose a folder " \
        "for output=..."
    os.symlink(tmp_path / "gone", tmp_path / "dangling")
    assert blocking_part(tmp_path / "dangling" / "run").startswith(
        f"{tmp_path / 'dangling'} is a symbolic link to {tmp_path / 'gone'}, which does not exist")


def test_an_os_error_is_one_line_with_what_to_do(tmp_path):
    full = OSError(errno.ENOSPC, "No space left on device")
    error = output_error(full, tmp_path / "run", "write")
    assert str(error).startswith(f"cannot write {tmp_path / 'run'}: No space left on device; the "
                                 "disk (or quota) is full: free some space and run the command "
                                 "again")
    kept = output_error(full, tmp_path / "run", "write", kept="3 rows are saved")
    assert "run the command again" not in str(kept) and str(kept).endswith("3 rows are saved")
    (tmp_path / "file").write_text("x")
    blocked = output_error(OSError(errno.ENOTDIR, "Not a directory"), tmp_path / "file" / "run",
                           "create", kept="nothing is lost")
    assert "Not a directory" not in str(blocked) and "is a file, not a folder" in str(blocked)
    missing = output_error(OSError(errno.ENOENT, "No such file"), tmp_path / "new" / "run",
                           "create")
    assert "No such file; fix the cause" in str(missing) and missing.errno == errno.ENOENT
    with pytest.raises(OutputError, match="cannot save .*Permission denied; the folder is "
                                          "read-only") as raised, os_errors(tmp_path, "save"):
        raise PermissionError(errno.EACCES, "Permission denied")
    assert isinstance(raised.value.__cause__, PermissionError)
    with pytest.raises(ConfigError, match="ours"), os_errors(tmp_path, "save"):
        raise ConfigError("ours")  # ctxleak's own errors pass through
