"""Writing a run's files safely: a file replaced whole or not at all, a line appended whole or
not at all, and an operating-system error while writing as one line that names the path, the
system's reason and what to do.
"""

from __future__ import annotations

import errno
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ctxleak.errors import CtxleakError, OutputError


def write_atomic(path: Path, data: str | bytes, mode: int = 0o644) -> None:
    """Write a file whole or not at all: temp file in the same folder, fsync, ``os.replace``."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix="." + path.name + ".", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode("utf-8") if isinstance(data, str) else data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


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
        try:
            os.ftruncate(fd, start)
        except OSError:
            pass  # the next load drops the cut line (read_samples)
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
