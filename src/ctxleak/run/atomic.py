"""Writing a run's files safely: a file replaced whole or not at all, a line appended whole or
not at all, and an operating-system error while writing as one line that names the path, the
system's reason and what to do.
"""

from __future__ import annotations

import errno
import os
import signal
import tempfile
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from ctxleak.errors import CtxleakError, OutputError

#: The signals a run stops on (Ctrl-C; the CLI turns SIGTERM into an exception too).
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


@contextmanager
def uninterrupted() -> Iterator[None]:
    """Ctrl-C or SIGTERM arriving inside the block takes effect when it ends: a row, its digest
    and the count of rows kept are written together, so what an interrupt reports is what the
    files hold. Python runs signal handlers on the main thread only; elsewhere the block runs
    as it is."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []
    previous = {sig: signal.getsignal(sig) for sig in STOP_SIGNALS}
    for sig in STOP_SIGNALS:
        signal.signal(sig, lambda signum, frame: caught.append(signum))
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        for got in caught[:1]:  # the first one, as it would have been handled
            handler = previous[signal.Signals(got)]
            if callable(handler):
                handler(got, None)
            elif handler == signal.SIG_DFL:
                os.kill(os.getpid(), got)


def write_atomic(path: Path | str, data: str | bytes, mode: int = 0o644, *,
                 replace: bool = True) -> None:
    """Write a file whole or not at all: temp file in the same folder, fsync, then moved into
    place. ``replace=False``: the move never replaces a file (a hard link, which fails when the
    name exists, even one made a moment ago by another process): the file ctxleak did not create
    is refused by :func:`refuse_replacing`'s error."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix="." + path.name + ".", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode("utf-8") if isinstance(data, str) else data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        if replace:
            os.replace(tmp, path)
        else:
            _place_new(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _place_new(tmp: str, path: Path) -> None:
    """Move ``tmp`` to ``path`` only if no file has that name."""
    try:
        os.link(tmp, path)
    except FileExistsError:
        raise _exists(path, "output") from None
    except OSError as exc:
        # a file system without hard links: check, then replace (a race is possible there)
        if exc.errno not in (errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EXDEV):
            raise
        if os.path.lexists(path):
            raise _exists(path, "output") from None
        os.replace(tmp, path)
        return
    os.unlink(tmp)


def _exists(path: Path, name: str) -> OutputError:
    return OutputError(f"{name} {path} already exists: ctxleak does not replace a file it was "
                       f"not asked to; choose a new name, or pass --overwrite "
                       f"(overwrite=True in Python) to replace it", path=str(path), param=name)


def refuse_foreign_folder(folder: Path | str, name: str = "directory") -> None:
    """Refuse a folder to save into that holds anything (a file, or anything at all in it): a
    result is saved into a new or empty folder, or with ``overwrite``."""
    folder = Path(folder)
    if not os.path.lexists(folder):
        return
    if not folder.is_dir():
        raise OutputError(f"{name} {folder} is a file, not a folder", path=str(folder),
                          param=name)
    if any(folder.iterdir()):
        raise OutputError(f"{name} {folder} is not empty: ctxleak does not replace files it was "
                          f"not asked to; choose a new or empty folder, or pass overwrite=True",
                          path=str(folder), param=name)


def refuse_replacing(path: Path | str, *, overwrite: bool = False,
                     inputs: Iterable[Path | str] = (), name: str = "output") -> None:
    """Refuse, before any work, an output file that would replace one of the ``inputs`` (always:
    the command reads it) or, without ``overwrite``, any existing file or link. A folder is
    refused too: a file is needed. Files inside a run folder are the run's own and are not
    checked here (:mod:`ctxleak.run.claim` guards the folder)."""
    path = Path(path)
    for source in inputs:
        try:
            same = os.path.samefile(path, source)
        except OSError:
            continue
        if same:
            raise OutputError(f"{name} {path} is the input {source}: write to another file "
                              f"(the input is read, never replaced)", path=str(path),
                              param=name)
    if path.is_dir():
        raise OutputError(f"{name} {path} is a folder: name the file to write", path=str(path),
                          param=name)
    if not overwrite and os.path.lexists(path):
        raise _exists(path, name)


def append_whole(fd: int, data: bytes) -> None:
    """Append ``data`` to the open file ``fd`` and fsync it; if the system refuses part of it,
    truncate the file back to its size before, so it ends with a whole line, and re-raise."""
    start = os.lseek(fd, 0, os.SEEK_END)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    except OSError:
        with suppress(OSError):  # the next load drops the cut line (read_samples)
            os.ftruncate(fd, start)
        raise


def os_advice(code: int | None) -> str:
    """What to do about an OS error while writing a run, by its ``errno``."""
    if code in (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)):
        return "the disk (or quota) is full: free some space"
    if code in (errno.EROFS, errno.EACCES, errno.EPERM):
        return "the folder is read-only or not writable here: choose a writable output=..."
    if code in (errno.ENOTDIR, errno.EEXIST, errno.EISDIR):
        return "a part of that path is a file, not a folder: choose a folder for output=..."
    return "fix the cause or choose another output=..."


def blocking_part(path: Path | str) -> str | None:
    """What in ``path`` (itself or a folder above it) keeps a folder from being made there: a
    symbolic link to nothing, or a file; None when neither is found."""
    for part in (Path(path), *Path(path).parents):
        if part.is_symlink() and not part.exists():
            return (f"{part} is a symbolic link to {os.readlink(part)}, which does not exist: "
                    "create that folder, or choose another output=...")
        if part.exists():
            if not part.is_dir():
                return (f"a part of that path is a file, not a folder ({part}): choose a "
                        "folder for output=...")
            return None
    return None


def output_error(exc: OSError, path: Path | str, what: str, *, kept: str = "") -> OutputError:
    """``exc`` as a one-line :class:`OutputError`: the path, the system's reason, what to do
    and (``kept``) what is saved and how to go on. A path blocked by a file or a link to
    nothing names that part instead of the system's reason ("File exists")."""
    reason = exc.strerror or str(exc)
    advice = os_advice(exc.errno)
    if exc.errno in (errno.ENOTDIR, errno.EEXIST, errno.ENOENT):
        blocked = blocking_part(path)
        if blocked:
            return OutputError(f"cannot {what} {path}: {blocked}" + (f"; {kept}" if kept else ""),
                               path=str(path), errno=exc.errno, also=("output", "resume"))
    if not kept and exc.errno in (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)):
        advice += " and run the command again"
    message = f"cannot {what} {path}: {reason}; {advice}"
    return OutputError(message + (f"; {kept}" if kept else ""), path=str(path),
                       errno=exc.errno, also=("output", "resume"))


@contextmanager
def os_errors(path: Path | str, what: str, kept: str = "") -> Iterator[None]:
    """Turn an :class:`OSError` raised inside into :func:`output_error` (ctxleak's own errors
    pass through)."""
    try:
        yield
    except CtxleakError:
        raise
    except OSError as exc:
        raise output_error(exc, path, what, kept=kept) from exc
