"""The run directory: ``config.json``, ``samples.jsonl`` appended and flushed per
example, ``results.json`` written atomically with provenance, and ``--resume``.

Files that may hold PII (samples, results, reports) are created with mode 0600 when the run says
so. A run interrupted by Ctrl-C leaves every file valid: samples are whole lines, results and
reports are replaced atomically.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import socket
import tempfile
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ctxleak.engine.model_files import fingerprint_changes
from ctxleak.errors import ConfigError, CtxleakError, InputError, OutputError
from ctxleak.run.distributed import World, barrier
from ctxleak.run.inputs import to_jsonable
from ctxleak.run.records import parse_json

CONFIG_FILE, SAMPLES_FILE, RESULTS_FILE = "config.json", "samples.jsonl", "results.json"
OWNER_FILE = ".ctxleak-owner.json"  # host and pid of the process running the folder
LOCK_FILE = ".ctxleak.lock"  # fcntl-locked by the process running the folder
INPUTS_KEY = "input_sha256"  # config key: {input file: SHA-256 of its bytes}
MODEL_KEY = "model_sha256"  # config key: {model file: SHA-256}, engine.models.model_fingerprint

# Files that mark a folder as holding a ctxleak run (never written over by anything else).
RUN_MARKERS = (RESULTS_FILE, SAMPLES_FILE, CONFIG_FILE)

# Keys that may change between a run and its resume without changing any number.
RESUME_NEUTRAL_KEYS = frozenset({"limit", "resume", "output", "batch_size", "debug", "redact",
                                 "device", "device_map", "quiet",
                                 "threads", "server_url", "request_timeout", "retries"})


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


def _owner_alive(owner: dict[str, Any]) -> bool:
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


def _refuse_if_running(path: Path) -> None:
    """Two runs must not write one folder at once: refuse while the process that last claimed
    it is alive (whether or not it has written samples yet)."""
    owner_path = path / OWNER_FILE
    owner = _read_owner(path)
    if owner is None:
        return
    if _owner_alive(owner):
        raise ConfigError(f"{path} is in use by another ctxleak run (pid {owner.get('pid')} on "
                          f"{owner.get('host')}); wait for it, or remove {owner_path} if that "
                          "run is gone")


# the lock file of each folder this process has claimed, kept open (and so locked) for the
# process's life: POSIX record locks belong to the process and end when it does, kill -9 included
_LOCKS: dict[str, int] = {}


def _lock(path: Path) -> None:
    """Claim ``path`` atomically: an exclusive ``fcntl`` lock on its lock file, held until this
    process exits. A second process (even one started at the same instant) fails here."""
    key = str(path.resolve())
    if key in _LOCKS:
        return
    try:
        import fcntl
    except ImportError:  # not POSIX: only the owner-file check below
        return
    fd = os.open(path / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise _in_use(path) from None
    _LOCKS[key] = fd


def _in_use(path: Path) -> ConfigError:
    owner = _read_owner(path)
    who = f" (pid {owner.get('pid')} on {owner.get('host')})" if owner else ""
    return ConfigError(f"{path} is in use by another ctxleak run{who}; wait for it or choose "
                       "another output=...", also=("output",))


def _locked_elsewhere(path: Path) -> bool:
    """Whether another process holds ``path``'s lock now: tried without blocking and let go at
    once (closing the descriptor ends this process's record lock on the file)."""
    if str(path.resolve()) in _LOCKS:
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


def _read_owner(path: Path) -> dict[str, Any] | None:
    try:
        owner = json.loads((path / OWNER_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return owner if isinstance(owner, dict) else None


def _claim(path: Path, mode: int) -> None:
    write_atomic(path / OWNER_FILE, json.dumps({"host": socket.gethostname(),
                                                "pid": os.getpid()}) + "\n", mode)


def read_json_file(path: Path) -> Any:
    """A run folder's JSON file (``config.json``, ``results.json``), every problem an
    :class:`InputError` naming the file and line."""
    try:
        text = Path(path).read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"not UTF-8 text ({exc.reason})", file=str(path)) from None
    except OSError as exc:
        raise InputError(f"cannot be read ({exc.strerror})", file=str(path)) from None
    return parse_json(text, file=str(path), allow_nan=True)


def file_sha256(path: str | Path) -> str:
    """Hex SHA-256 of a file's bytes (input files are hashed into config.json for resume)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def input_hashes(inputs: Mapping[str, str | Path | None]) -> dict[str, str]:
    """``{parameter: sha256}`` of each input that is a file (``{"data": path}``; callers
    resolve names like ``demo`` to their file; hub dataset names are left out)."""
    return {name: file_sha256(p) for name, p in inputs.items()
            if p is not None and Path(p).is_file()}


def config_differences(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    keys = (set(old) | set(new)) - RESUME_NEUTRAL_KEYS - {INPUTS_KEY, MODEL_KEY}
    return sorted(k for k in keys if to_jsonable(old.get(k)) != to_jsonable(new.get(k)))


def _refuse_other_command(config_path: Path, old: dict[str, Any], new: dict[str, Any]) -> None:
    if "command" in old and "command" in new and old["command"] != new["command"]:
        raise ConfigError(f"cannot resume {config_path.parent}: it holds a "
                          f"'{old['command']}' run, not '{new['command']}' "
                          f"(stored in {config_path})")


def _refuse_changed_inputs(config_path: Path, old: dict[str, Any], new: dict[str, Any]) -> None:
    """Resume refuses an input whose content changed since the run started (a file's bytes,
    rows in memory by :func:`ctxleak.run.inputs.rows_sha256`): finished rows were computed
    from the old content, so keeping them would mix two data sets."""
    if INPUTS_KEY not in old:  # a run folder written before inputs were hashed
        return
    before, now = old.get(INPUTS_KEY) or {}, new.get(INPUTS_KEY) or {}
    changed = sorted(k for k in set(before) | set(now) if before.get(k) != now.get(k))
    if changed:
        raise ConfigError(f"cannot resume {config_path.parent}: the content of the "
                          f"{', '.join(changed)} input changed since the run started (SHA-256 "
                          f"in {config_path}); restore it, or start a new output=...",
                          also=("output",))


KEY_FIELD = "key"


def row_key(row: Mapping[str, Any]) -> Any:
    """The name a sample row is stored under in its run folder, what resume, shard merging and
    ``sample_ids`` go by: its ``key`` where the method names the item apart from the user's
    ``id`` (one example measured under several settings: ``hr|lambda=1,T=0.8,context=all``),
    else its ``id`` (rows of older run folders, whose ``id`` was that name)."""
    return row[KEY_FIELD] if KEY_FIELD in row else row.get("id")


def read_samples(path: Path, *, repair: bool = False) -> list[dict[str, Any]]:
    """The rows of a run folder's ``samples.jsonl`` (or a shard), checked the same way for
    ``resume`` and :func:`ctxleak.load_result`: every line a JSON object with an ``id``, no id
    twice (two different results under one id, one of which would be silently kept). A last
    line without its line end was cut by an interrupted write: it is dropped, and with
    ``repair`` cut from the file (resume rewrites it); any other bad line is an error naming
    the file and line, and nothing is cut."""
    rows: list[dict[str, Any]] = []
    first: dict[Any, int] = {}
    good_bytes = 0
    with open(path, "rb") as f:
        for number, raw in enumerate(f, start=1):
            if not raw.endswith(b"\n"):
                break  # a line cut by an interrupted write: dropped and rewritten
            good_bytes += len(raw)
            if not raw.strip():
                continue
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError:
                raise InputError("not UTF-8 text", file=str(path), line=number) from None
            row = parse_json(text, file=str(path), line=number, allow_nan=True)
            if not isinstance(row, dict) or "id" not in row:
                raise InputError("not a sample row (a JSON object with an id)", file=str(path),
                                 line=number)
            for name in ("id", KEY_FIELD) if KEY_FIELD in row else ("id",):
                value = row[name]
                if not isinstance(value, (str, int)) or isinstance(value, bool):
                    raise InputError(f"must be a string or an integer, got "
                                     f"{type(value).__name__}", file=str(path), line=number,
                                     field=name)
            key = row_key(row)
            if key in first:  # never silently keep one of two different results
                raise InputError(f"two rows with {KEY_FIELD if KEY_FIELD in row else 'id'} "
                                 f"{key!r} (first on line {first[key]}); start a new run folder",
                                 file=str(path), line=number,
                                 field=KEY_FIELD if KEY_FIELD in row else "id")
            first[key] = number
            rows.append(row)
    if repair and good_bytes != path.stat().st_size:
        with open(path, "r+b") as f:
            f.truncate(good_bytes)
    return rows


def _refuse_changed_model(config_path: Path, old: dict[str, Any], new: dict[str, Any]) -> None:
    """Resume refuses a model whose files changed since the run started (weights replaced
    between a kill and the resume): the finished rows came from the old weights."""
    if not old.get(MODEL_KEY):  # a run folder written before models were fingerprinted
        return
    changes = fingerprint_changes(old[MODEL_KEY], new.get(MODEL_KEY) or {})
    if changes:
        raise ConfigError(f"cannot resume {config_path.parent}: the files of model "
                          f"'{old.get('model')}' changed since the run started "
                          f"({'; '.join(changes)}; SHA-256 in {config_path}); restore them, "
                          "or start a new output=...", also=("output",))


def os_advice(code: int | None) -> str:
    """What to do about an OS error while writing a run, by its ``errno``."""
    if code in (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)):
        return "the disk (or quota) is full: free some space"
    if code in (errno.EROFS, errno.EACCES, errno.EPERM):
        return "the folder is read-only or not writable here: choose a writable output=..."
    if code in (errno.ENOTDIR, errno.EEXIST, errno.EISDIR):
        return "a part of that path is a file, not a folder: choose a folder for output=..."
    return "fix the cause or choose another output=..."


def output_error(exc: OSError, path: Path | str, what: str, *, kept: str = "") -> OutputError:
    """``exc`` as a one-line :class:`OutputError`: the path, the system's reason, what to do
    and (``kept``) what is saved and how to go on."""
    reason = exc.strerror or str(exc)
    advice = os_advice(exc.errno)
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
    if main and LOCK_FILE in names and _locked_elsewhere(path):
        # a run that claimed the folder a moment ago may still be writing its first files
        raise _in_use(path)
    ours = {CONFIG_FILE, OWNER_FILE, LOCK_FILE}
    if names - ours and not names & set(RUN_MARKERS):
        raise ConfigError(f"{path} is not empty and holds no ctxleak run (no "
                          f"{', '.join(RUN_MARKERS)}): choose a new or empty folder for "
                          "output=...", param="output")
    if main:
        _refuse_if_running(path)
    if names - ours and not resume:
        raise ConfigError(f"{path} already holds a run: pass resume=True to continue it or "
                          "choose another output=...", also=("resume", "output"))


def _append_whole(fd: int, data: bytes) -> None:
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


class RunDir:
    """One run's output folder.

    ``RunDir(path, config, resume=False, private=False)`` creates the folder, refuses to mix a
    new run into a folder that already holds samples unless ``resume`` is set, and on resume
    refuses a config that differs (other than ``RESUME_NEUTRAL_KEYS``).
    """

    def __init__(self, path: str | Path, config: dict[str, Any], *, resume: bool = False,
                 private: bool = False, world: World | None = None) -> None:
        self.path = Path(path)
        self.config = to_jsonable(config)
        self.private = private
        self.file_mode = 0o600 if private else 0o644
        self.started = time.time()
        self.world = world or World()
        # each process of a data-parallel run appends to its own shard file
        self.samples_name = (SAMPLES_FILE if not self.world.distributed
                             else f"samples.rank{self.world.rank}.jsonl")
        refuse_foreign_output(self.path, resume, self.world.is_main)  # before anything is touched
        with os_errors(self.path, "create the run folder"):
            self.path.mkdir(parents=True, exist_ok=True)
        config_path = self.path / CONFIG_FILE
        if self.world.is_main:  # rank 0 claims the folder for a whole data-parallel run
            with os_errors(self.path, "claim the run folder"):
                _lock(self.path)
            _refuse_if_running(self.path)
        # a folder holding only the config of a run that stopped before computing anything (a
        # mistyped model name, say) is taken over by a new run; anything else needs --resume
        started = any(p.name not in (CONFIG_FILE, OWNER_FILE, LOCK_FILE)
                      for p in self.path.iterdir())
        if started or (resume and config_path.exists()):
            if not resume:
                raise ConfigError(f"{self.path} already holds a run: pass resume=True to "
                                  "continue it or choose another output=...",
                                  also=("resume", "output"))
            if config_path.exists():
                old = read_json_file(config_path)
                _refuse_other_command(config_path, old, self.config)
                _refuse_changed_inputs(config_path, old, self.config)
                _refuse_changed_model(config_path, old, self.config)
                diff = config_differences(old, self.config)
                if diff:
                    raise ConfigError(f"cannot resume {self.path}: the config differs in "
                                      f"{', '.join(diff)} (stored in {config_path})")
        barrier()  # every process has checked the folder before anything is written
        with os_errors(self.path, "write the run folder"):
            if private:  # the folder too, whatever the umask (file names and sizes are private)
                os.chmod(self.path, 0o700)
            if self.world.is_main:
                _claim(self.path, self.file_mode)
                write_atomic(config_path, json.dumps(self.config, indent=2, sort_keys=True)
                             + "\n", self.file_mode)
        self._handle: int | None = None
        with os_errors(self.path, "read the run folder"):
            self.reload()

    # samples.jsonl ---------------------------------------------------------------------------
    def reload(self) -> None:
        """Re-read the samples of every shard (after the other processes have finished)."""
        rows: dict[Any, dict[str, Any]] = {}
        for path in sorted(self.path.glob("samples*.jsonl")):
            for row in self._read_samples(path, repair=path.name == self.samples_name):
                rows.setdefault(row_key(row), row)  # the merged samples.jsonl repeats shards
        self._samples = list(rows.values())
        self._ids = set(rows)

    def has_shards(self) -> bool:
        """Whether a data-parallel run left per-process sample files here."""
        return any(self.path.glob("samples.rank*.jsonl"))

    def merge_shards(self, order: list[Any] | None = None) -> None:
        """Write every shard's samples as ``samples.jsonl`` (rank 0 of a data-parallel run, or one
        process resuming one), in ``order`` first."""
        rows = {row_key(row): row for row in self._samples}
        keys = [k for k in (order or []) if k in rows]
        # rows outside ``order`` (a resume with a smaller --limit) are kept, after the others
        seen = set(keys)
        keys += [k for k in rows if k not in seen]
        text = "".join(json.dumps(rows[k], ensure_ascii=False) + "\n" for k in keys)
        self.write_file(SAMPLES_FILE, text)

    @staticmethod
    def _read_samples(path: Path, repair: bool) -> list[dict[str, Any]]:
        return read_samples(path, repair=repair)

    @property
    def samples(self) -> list[dict[str, Any]]:
        """Samples written so far (those of earlier runs included, when resuming)."""
        return list(self._samples)

    def done_keys(self, key: str | None = None) -> set[Any]:
        """The stored rows' names (:func:`row_key`: what resume matches ``Method.key`` to), or
        their values of the field ``key``."""
        if key is None:
            return {row_key(row) for row in self._samples}
        return {row.get(key) for row in self._samples}

    def kept(self) -> str:
        """What a failed write leaves and how to go on (for :func:`output_error`)."""
        return (f"{len(self._samples)} finished example(s) are kept in {self.path}: rerun the "
                f"same command with resume=True output={self.path} to continue")

    def append_sample(self, record: dict[str, Any]) -> None:
        """Append one example's record as a JSON line and flush it to disk. A write the system
        refuses (a full disk) is cut back to the last whole line and raised as an
        :class:`~ctxleak.errors.OutputError` that says how to resume."""
        path = self.path / self.samples_name
        row = to_jsonable(record)
        if row_key(row) in self._ids:
            raise ConfigError(f"{path}: a row named {row_key(row)!r} is already stored; ids "
                              "must be unique")
        data = (json.dumps(row, ensure_ascii=False) + "\n").encode("utf-8")
        with os_errors(path, "write", kept=self.kept()):
            if self._handle is None:
                self._handle = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT,
                                       self.file_mode)
            _append_whole(self._handle, data)
        self._samples.append(row)
        self._ids.add(row_key(row))

    def close(self) -> None:
        if self._handle is not None:
            os.close(self._handle)
            self._handle = None

    def release(self) -> None:
        """Give up the claim on the folder before this process exits (a library caller that
        goes on after the run; the CLI's claim simply ends with its process)."""
        self.close()
        owner = _read_owner(self.path)
        if owner and owner.get("pid") == os.getpid() and owner.get("host") == socket.gethostname():
            (self.path / OWNER_FILE).unlink(missing_ok=True)
        fd = _LOCKS.pop(str(self.path.resolve()), None)
        if fd is not None:
            os.close(fd)

    # results and other files -----------------------------------------------------------------
    def write_results(self, result: Any) -> Path:
        """``results.json`` of ``result`` (a :class:`ctxleak.results.Result`), written by its
        one writer, ``result.save_results``, with this folder's file mode; OS errors as in
        :meth:`append_sample`."""
        path = self.path / RESULTS_FILE
        with os_errors(path, "write", kept=self.kept()):
            return Path(result.save_results(self.path, self.file_mode))

    def write_file(self, name: str, data: str | bytes) -> Path:
        """Write ``name`` in the run folder atomically (OS errors as in :meth:`append_sample`)."""
        path = self.path / name
        with os_errors(path, "write", kept=self.kept()):
            write_atomic(path, data, self.file_mode)
        return path

    def __enter__(self) -> RunDir:
        return self

    def __exit__(self, kind: object, exc: BaseException | None, tb: object) -> None:
        if isinstance(exc, KeyboardInterrupt) and getattr(exc, "run", None) is None:
            exc.run = self  # type: ignore[attr-defined]  # Ctrl-C names the folder it left
        self.close()
