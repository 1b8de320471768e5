"""Claiming a run folder: which folders hold a ctxleak run, and one process at a time in each.

A process claims a folder with an exclusive ``fcntl`` lock on its lock file, held until the
process exits (kill -9 included), and names itself (host and pid) in its owner file. Another run
is refused while the owner is alive, and an ``output`` that is a file, a folder of something
else, or (without ``resume``) a run that has started is refused before anything is touched.
"""

from __future__ import annotations

import errno
import json
import os
import socket
from pathlib import Path
from typing import Any

from ctxleak.errors import ConfigError, OutputError
from ctxleak.run.atomic import os_errors, write_atomic
from ctxleak.run.manifest import MANIFEST_FILE

CONFIG_FILE, SAMPLES_FILE, RESULTS_FILE = "config.json", "samples.jsonl", "results.json"
OWNER_FILE = ".ctxleak-owner.json"  # host and pid of the process running the folder
LOCK_FILE = ".ctxleak.lock"  # fcntl-locked by the process running the folder

# Files that mark a folder as holding a ctxleak run (never written over by anything else).
RUN_MARKERS = (RESULTS_FILE, SAMPLES_FILE, CONFIG_FILE)


def owner_alive(owner: dict[str, Any]) -> bool:
    """Whether the process that claimed a run folder may still be running (same host only:
    another host's process cannot be checked, so it counts as running)."""
    if owner.get("host") != socket.gethostname():
        return True
    pid = int(owner.get("pid", 0))
    if pid <= 0 or pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def refuse_if_running(path: Path) -> None:
    """Two runs must not write one folder at once: refuse while the process that last claimed
    it is alive (whether or not it has written samples yet)."""
    owner_path = path / OWNER_FILE
    owner = read_owner(path)
    if owner is None:
        return
    if owner_alive(owner):
        raise ConfigError(f"{path} is in use by another ctxleak run (pid {owner.get('pid')} on "
                          f"{owner.get('host')}); wait for it, or remove {owner_path} if that "
                          "run is gone")


# the lock file of each folder this process has claimed, kept open (and so locked) for the
# process's life: POSIX record locks belong to the process and end when it does, kill -9 included
LOCKS: dict[str, int] = {}


def lock_folder(path: Path) -> None:
    """Claim ``path`` atomically: an exclusive ``fcntl`` lock on its lock file, held until this
    process exits. A second process (even one started at the same instant) fails here."""
    key = str(path.resolve())
    if key in LOCKS:
        return
    try:
        import fcntl
    except ImportError:  # not POSIX: only the owner-file check (refuse_if_running)
        return
    fd = os.open(path / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise in_use(path) from None
    LOCKS[key] = fd


def in_use(path: Path) -> ConfigError:
    """The error for a folder another run holds, naming that run where its owner file says."""
    owner = read_owner(path)
    who = f" (pid {owner.get('pid')} on {owner.get('host')})" if owner else ""
    return ConfigError(f"{path} is in use by another ctxleak run{who}; wait for it or choose "
                       "another output=...", also=("output",))


def locked_elsewhere(path: Path) -> bool:
    """Whether another process holds ``path``'s lock now: tried without blocking and let go at
    once (closing the descriptor ends this process's record lock on the file)."""
    if str(path.resolve()) in LOCKS:
        return False
    try:
        import fcntl
    except ImportError:
        return False
    try:
        fd = os.open(path / LOCK_FILE, os.O_RDWR)
    except OSError:
        return False
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return True
    finally:
        os.close(fd)
    return False


def read_owner(path: Path) -> dict[str, Any] | None:
    """The owner file's host and pid, or None where there is none or it cannot be read."""
    try:
        owner = json.loads((path / OWNER_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return owner if isinstance(owner, dict) else None


def write_owner(path: Path, mode: int) -> None:
    """Name this process (host and pid) as the folder's owner."""
    write_atomic(path / OWNER_FILE, json.dumps({"host": socket.gethostname(),
                                                "pid": os.getpid()}) + "\n", mode)


def release_claim(path: Path) -> None:
    """Give up this process's claim on ``path``: its owner file (when it names this process)
    and its lock."""
    owner = read_owner(path)
    if owner and owner.get("pid") == os.getpid() and owner.get("host") == socket.gethostname():
        (path / OWNER_FILE).unlink(missing_ok=True)
    fd = LOCKS.pop(str(path.resolve()), None)
    if fd is not None:
        os.close(fd)


def is_run_folder(path: Path) -> bool:
    """Whether ``path`` holds a ctxleak run (any of ``RUN_MARKERS``)."""
    return any((path / name).exists() for name in RUN_MARKERS)


def refuse_foreign_output(path: Path, resume: bool, main: bool = True) -> None:
    """Refuse, before anything is created, changed or locked, an ``output`` that names a file,
    a non-empty folder that holds no ctxleak run, or (without ``resume``) a run that has
    started; a folder whose owner is still running is refused too."""
    if not path.exists():
        return
    if not path.is_dir():
        raise OutputError(f"output {path} is a file, not a folder: choose a new or empty folder "
                          "for output=...", path=str(path), errno=errno.ENOTDIR)
    with os_errors(path, "read the folder"):
        names = {p.name for p in path.iterdir()}
    if main and LOCK_FILE in names and locked_elsewhere(path):
        # a run that claimed the folder a moment ago may still be writing its first files
        raise in_use(path)
    ours = {CONFIG_FILE, OWNER_FILE, LOCK_FILE, MANIFEST_FILE}
    if names - ours and not names & set(RUN_MARKERS):
        raise ConfigError(f"{path} is not empty and holds no ctxleak run (no "
                          f"{', '.join(RUN_MARKERS)}): choose a new or empty folder for "
                          "output=...", param="output")
    if main:
        refuse_if_running(path)
    if names - ours and not resume:
        raise ConfigError(f"{path} already holds a run: pass resume=True to continue it or "
                          "choose another output=...", also=("resume", "output"))
