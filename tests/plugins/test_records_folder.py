"""The plugin's records folder, without vLLM: it is made with mode 0700; one that is open to
other users, a symbolic link, not a folder or another user's is refused naming it; a record is
written whole with mode 0600 and read once; records nobody read are swept after their bound;
the route answers 500 on an unsafe folder and 404 on a missing one, reading nothing, and adds
the number of data-parallel ranks the API server routes to."""

from __future__ import annotations

import os
import stat
import time

import pytest
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.base import BaseHTTPMiddleware
from starlette.testclient import TestClient

from ctxleak.plugins.protocol import (
    PAIRS_PATH,
    RECORD_MAX_AGE_SECONDS,
    RECORDS_ENV,
    UNKNOWN_PAIR,
    RecordsFolder,
    RecordsFolderError,
    records_dir,
)
from ctxleak.plugins.vllm_records import records_route

PAIR = "0123456789abcdef" * 2
RECORD = {"protocol": 1, "pair": PAIR, "steps": [], "stopped": True, "error": None}


def _mode(path):
    return stat.S_IMODE(os.lstat(path).st_mode)


def test_the_folder_is_made_for_this_user_alone_and_records_are_read_once(tmp_path):
    folder = RecordsFolder(tmp_path / "deep" / "records")
    assert _mode(folder.path) == 0o700
    folder.write(PAIR, RECORD)
    assert [p.name for p in folder.path.iterdir()] == [f"{PAIR}.json"]  # no temporary left
    assert _mode(folder.path / f"{PAIR}.json") == 0o600
    assert folder.read(PAIR) == RECORD
    assert folder.read(PAIR) is None and list(folder.path.iterdir()) == []


@pytest.mark.parametrize("mode", [0o777, 0o750, 0o701])
def test_a_folder_open_to_other_users_is_refused(tmp_path, mode):
    path = tmp_path / "records"
    path.mkdir()
    path.chmod(mode)
    with pytest.raises(RecordsFolderError, match=f"{path}.*open to other users \\(mode "
                                                 f"{mode:o}\\): chmod 700 it"):
        RecordsFolder(path)
    with pytest.raises(RecordsFolderError):
        RecordsFolder(path, create=False).read(PAIR)


def test_a_symbolic_link_or_a_file_is_refused(tmp_path):
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    link = tmp_path / "records"
    link.symlink_to(real)
    with pytest.raises(RecordsFolderError, match="is a symbolic link"):
        RecordsFolder(link)
    plain = tmp_path / "plain"
    plain.write_text("")
    with pytest.raises(RecordsFolderError, match="is not a folder"):
        RecordsFolder(plain)


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0,
                    reason="handing a folder to another user needs root")
def test_another_users_folder_is_refused(tmp_path):
    path = tmp_path / "records"
    path.mkdir(mode=0o700)
    os.chown(path, 65534, -1)
    with pytest.raises(RecordsFolderError, match="belongs to user id 65534"):
        RecordsFolder(path)


def test_records_nobody_read_are_swept_after_their_bound(tmp_path):
    folder = RecordsFolder(tmp_path / "records")
    other = "f" * 32
    folder.write(PAIR, RECORD)
    folder.write(other, RECORD)
    leftover = folder.path / f".{other}.0123.tmp"
    leftover.write_text("{")
    old = time.time() - RECORD_MAX_AGE_SECONDS - 60
    for path in (folder.path / f"{PAIR}.json", leftover):
        os.utime(path, (old, old))
    assert folder.sweep() == 2
    assert [p.name for p in folder.path.iterdir()] == [f"{other}.json"]
    assert folder.read(other) == RECORD
    # the plugin sweeps as it loads, too
    folder.write(PAIR, RECORD)
    os.utime(folder.path / f"{PAIR}.json", (old, old))
    RecordsFolder(folder.path)
    assert list(folder.path.iterdir()) == []


def test_the_route_reads_a_safe_folder_only(tmp_path, monkeypatch):
    path = tmp_path / "records"
    monkeypatch.setenv(RECORDS_ENV, str(path))
    assert records_dir() == path
    app = Starlette(middleware=[Middleware(BaseHTTPMiddleware, dispatch=records_route)])
    client = TestClient(app)
    missing = client.get(PAIRS_PATH + PAIR)  # no folder yet: nothing to read, none made
    assert missing.status_code == 404 and missing.json()["error"]["type"] == UNKNOWN_PAIR
    assert not path.exists()
    RecordsFolder().write(PAIR, RECORD)
    assert client.get(PAIRS_PATH + PAIR).json() == RECORD
    assert client.get(PAIRS_PATH + PAIR).status_code == 404  # read once
    RecordsFolder().write(PAIR, RECORD)
    path.chmod(0o777)
    unsafe = client.get(PAIRS_PATH + PAIR)
    assert unsafe.status_code == 500 and "open to other users" in unsafe.json()["error"]["message"]
    assert (path / f"{PAIR}.json").exists()


@pytest.mark.parametrize("parallel, ranks", [
    ({"data_parallel_size": 4, "data_parallel_size_local": 2, "local_engines_only": False}, 4),
    ({"data_parallel_size": 4, "data_parallel_size_local": 2, "local_engines_only": True}, 2),
    (None, None)])
def test_the_route_tells_the_number_of_data_parallel_ranks(tmp_path, monkeypatch, parallel,
                                                           ranks):
    """As vLLM's API server counts the ranks an ``X-data-parallel-rank`` header may name: all of
    them, or this node's where each node balances its own; nothing where the app has no vLLM
    config."""
    from types import SimpleNamespace

    monkeypatch.setenv(RECORDS_ENV, str(tmp_path / "records"))
    app = Starlette(middleware=[Middleware(BaseHTTPMiddleware, dispatch=records_route)])
    if parallel is not None:
        app.state.vllm_config = SimpleNamespace(parallel_config=SimpleNamespace(**parallel))
    RecordsFolder().write(PAIR, {**RECORD, "server": {"plugin": "ctxleak-cid",
                                                      "data_parallel_rank": 1}})
    got = TestClient(app).get(PAIRS_PATH + PAIR).json()
    assert got["server"].get("data_parallel_size") == ranks
    assert got["server"]["data_parallel_rank"] == 1
