"""The run directory: ``config.json``, ``samples.jsonl`` appended and flushed per
example, ``results.json`` written atomically with provenance, and ``--resume``.

Claiming the folder (one run at a time) is :mod:`ctxleak.run.claim`; writing files whole and
turning OS errors into one-line errors is :mod:`ctxleak.run.atomic`; the manifest of what was
written (the SHA-256 of each file and sample line, checked on resume and load) is
:mod:`ctxleak.run.manifest`; reading sample files back is :mod:`ctxleak.run.samples`.

Files that may hold PII (samples, results, reports) are created with mode 0600 when the run says
so. A run interrupted by Ctrl-C leaves every file valid: samples are whole lines, results and
reports are replaced atomically.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ctxleak.engine.model_files import fingerprint_changes
from ctxleak.errors import ConfigError, CtxleakError, EditedRunError, InputError
from ctxleak.run.atomic import (
    append_whole,
    os_advice,
    os_errors,
    output_error,
    uninterrupted,
    write_atomic,
)
from ctxleak.run.claim import (
    CONFIG_FILE,
    LOCK_FILE,
    OWNER_FILE,
    RESULTS_FILE,
    RUN_MARKERS,
    SAMPLES_FILE,
    is_run_folder,
    lock_folder,
    refuse_foreign_output,
    refuse_if_running,
    release_claim,
    write_owner,
)
from ctxleak.run.distributed import World, barrier
from ctxleak.run.inputs import non_finite, to_jsonable
from ctxleak.run.manifest import (
    MANIFEST_FILE,
    append_digest,
    check_file,
    file_sha256,
    open_digests,
    read_manifest,
    start_manifest,
    write_lines_whole,
    write_recorded,
)
from ctxleak.run.records import parse_json
from ctxleak.run.samples import (
    RowCheck,
    Scrub,
    has_manifest,
    read_sample_file,
    read_samples,
)
from ctxleak.run.stored import KEY_FIELD, Convert, StoredRows, row_key

# The run folder's names, importable from here as from the modules that define them.
__all__ = ["CONFIG_FILE", "IDENTITY_KEY", "INPUTS_KEY", "KEY_FIELD", "LOCK_FILE",
           "MANIFEST_FILE", "DRAW_KEY", "MODEL_KEY", "OWNER_FILE", "RESOLVED_KEYS", "RESULTS_FILE",
           "RESUME_NEUTRAL_KEYS",
           "RUN_MARKERS", "SAMPLES_FILE", "TARGET_KEY", "RunDir", "config_differences",
           "file_sha256",
           "input_hashes", "is_run_folder", "os_advice", "os_errors", "output_error",
           "read_json_file", "read_samples", "refuse_foreign_output", "row_key", "write_atomic",
           "write_recorded"]

INPUTS_KEY = "input_sha256"  # config key: {input file: SHA-256 of its bytes}
MODEL_KEY = "model_sha256"  # config key: {model file: SHA-256}, engine.models.model_fingerprint
IDENTITY_KEY = "model_identity"  # config key: what a server says of its model (RunDir.pin_model)
TARGET_KEY = "target_fingerprint"  # config key: the attacked target's identity (Target.fingerprint)
DRAW_KEY = "draw"  # config key: the seeded draw of sampled tokens (ctxleak.kernels.draw.DRAW)

# Keys that may change between a run and its resume without changing any number of a sample
# (``redact`` and the budgets change only what the summary and the report say of them).
RESUME_NEUTRAL_KEYS = frozenset({"limit", "resume", "output", "batch_size", "debug", "redact",
                                 "exposure_budget", "class_field", "class_budgets",
                                 "document_budgets", "device", "device_map", "quiet",
                                 "threads", "server_url", "request_timeout", "retries"})


# Config keys a method resolves from what it was given at the first run (influence's number of
# controls per example, from the number of examples): a resume keeps the stored value whatever
# it would resolve to now (another --limit), so its rows are measured as the first ones were.
RESOLVED_KEYS = frozenset({"resolved_controls"})


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


def input_hashes(inputs: Mapping[str, str | Path | None]) -> dict[str, str]:
    """``{parameter: sha256}`` of each input that is a file (``{"data": path}``; callers
    resolve names like ``demo`` to their file; hub dataset names are left out)."""
    return {name: file_sha256(p) for name, p in inputs.items()
            if p is not None and Path(p).is_file()}


def config_differences(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    keys = (set(old) | set(new)) - RESUME_NEUTRAL_KEYS - RESOLVED_KEYS - {INPUTS_KEY, MODEL_KEY,
                                                                          IDENTITY_KEY}
    return sorted(k for k in keys if to_jsonable(old.get(k)) != to_jsonable(new.get(k)))


def _refuse_other_command(config_path: Path, old: dict[str, Any], new: dict[str, Any]) -> None:
    if "command" in old and "command" in new and old["command"] != new["command"]:
        raise ConfigError(f"cannot resume {config_path.parent}: it holds a "
                          f"'{old['command']}' run, not '{new['command']}' "
                          f"(stored in {config_path})")


def _refuse_other_target(config_path: Path, old: dict[str, Any], new: dict[str, Any]) -> None:
    """Resume refuses another target than the one a black-box attack's answers came from (a
    function of the same name in another module or with other code, another endpoint or model,
    a RAG app over other documents): its journaled answers are not this target's."""
    before, now = old.get(TARGET_KEY), new.get(TARGET_KEY)
    if before is None or now is None or before == now:
        return
    a, b = str(before).split(":"), str(now).split(":")
    parts = [f"{x!r} then, {y!r} now" for x, y in zip(a, b) if x != y] or \
        [f"{before!r} then, {now!r} now"]
    raise ConfigError(f"cannot resume {config_path.parent}: its answers came from another "
                      f"target than {new.get('target') or now} (the target's identity differs: "
                      f"{'; '.join(parts)}; stored in {config_path}); give the same target, or "
                      "start a new output=...", also=("output",))


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


@contextmanager
def _refusing_resume() -> Iterator[None]:
    """An edited file met on resume, as the error that says what to do."""
    try:
        yield
    except EditedRunError as exc:
        raise EditedRunError(f"{exc.reason}; not resumed: restore the file, or start a new "
                             "output=...", file=exc.file, line=exc.line, field=exc.field,
                             also=("output",)) from None


class RunDir:
    """One run's output folder.

    ``RunDir(path, config, resume=False, private=False)`` creates the folder, refuses to mix a
    new run into a folder that already holds samples unless ``resume`` is set, and on resume
    refuses a config that differs (other than ``RESUME_NEUTRAL_KEYS``).

    A new folder gets a manifest (:mod:`ctxleak.run.manifest`): every file written whole and
    every sample line is recorded with its SHA-256, and a resume refuses a ``config.json`` or a
    sample line changed since (``check_row``, the method's :data:`RowCheck`, also runs on every
    stored row). A folder written by a ctxleak that kept no manifest is resumed without one.
    """

    def __init__(self, path: str | Path, config: dict[str, Any], *, resume: bool = False,
                 private: bool = False, world: World | None = None,
                 check_row: RowCheck | None = None,
                 scrub: Scrub | None = None) -> None:
        self.path = Path(path)
        self.check_row = check_row
        self.scrub = scrub  # a record before it is written (report.forwarding's masking)
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
                lock_folder(self.path)
            refuse_if_running(self.path)
        # a folder holding only the config of a run that stopped before computing anything (a
        # mistyped model name, say) is taken over by a new run; anything else needs --resume
        started = any(p.name not in (CONFIG_FILE, OWNER_FILE, LOCK_FILE, MANIFEST_FILE)
                      for p in self.path.iterdir())
        # recorded in a manifest: a new folder, or one that has one (not an older ctxleak's)
        self.recorded = not started or has_manifest(self.path)
        if started or (resume and config_path.exists()):
            if not resume:
                raise ConfigError(f"{self.path} already holds a run: pass resume=True to "
                                  "continue it or choose another output=...",
                                  also=("resume", "output"))
            if config_path.exists():
                manifest = read_manifest(self.path) if self.recorded else None
                if manifest is not None:
                    with _refusing_resume():
                        check_file(self.path, manifest, CONFIG_FILE, required=True)
                old = read_json_file(config_path)
                _refuse_other_command(config_path, old, self.config)
                _refuse_other_target(config_path, old, self.config)
                _refuse_changed_inputs(config_path, old, self.config)
                _refuse_changed_model(config_path, old, self.config)
                diff = config_differences(old, self.config)
                why = (" (the seeded draw: this ctxleak samples other tokens for the same seed "
                       "than the one that started the run)") if DRAW_KEY in diff else ""
                if diff:
                    raise ConfigError(f"cannot resume {self.path}: the config differs in "
                                      f"{', '.join(diff)}{why} (stored in {config_path})")
                if IDENTITY_KEY in old:  # compared once the model is loaded (pin_model)
                    self.config[IDENTITY_KEY] = old[IDENTITY_KEY]
                for key in RESOLVED_KEYS & set(old):  # as the first rows were measured
                    self.config[key] = old[key]
        barrier()  # every process has checked the folder before anything is written
        with os_errors(self.path, "write the run folder"):
            if private:  # the folder too, whatever the umask (file names and sizes are private)
                os.chmod(self.path, 0o700)
            if self.world.is_main:
                write_owner(self.path, self.file_mode)
                if self.recorded:
                    start_manifest(self.path, self.file_mode)
                write_recorded(self.path, CONFIG_FILE, json.dumps(
                    self.config, indent=2, sort_keys=True) + "\n", self.file_mode)
        self._handle: int | None = None
        self._digests: int | None = None
        with os_errors(self.path, "read the run folder"), _refusing_resume():
            self.reload()

    # samples.jsonl ---------------------------------------------------------------------------
    def reload(self) -> None:
        """Re-read the samples of every shard (after the other processes have finished): each
        row is checked, and its name and the byte span of its line kept (not the row: rows are
        read back on demand, :meth:`rows`)."""
        self._files: list[Path] = []
        self._where: dict[Any, tuple[int, int, int]] = {}  # key -> (file, offset, size)
        for path in sorted(self.path.glob("samples*.jsonl")):
            # a last row whose digest was not written yet is measured again
            stored = read_sample_file(path, repair=path.name == self.samples_name,
                                      verify=self.recorded, check_row=self.check_row,
                                      keep_rows=False)
            number = self._file_number(path)
            for key, offset, size in zip(stored.keys[:stored.recorded],
                                         stored.offsets, stored.sizes):
                # the merged samples.jsonl repeats shards
                self._where.setdefault(key, (number, offset, size))

    def _file_number(self, path: Path) -> int:
        if path not in self._files:
            self._files.append(path)
        return self._files.index(path)

    def has_shards(self) -> bool:
        """Whether a data-parallel run left per-process sample files here."""
        return any(self.path.glob("samples.rank*.jsonl"))

    def merge_shards(self, order: list[Any] | None = None) -> None:
        """Write every shard's samples as ``samples.jsonl`` (rank 0 of a data-parallel run, or one
        process resuming one), in ``order`` first."""
        keys = [k for k in (order or []) if k in self._where]
        # rows outside ``order`` (a resume with a smaller --limit) are kept, after the others
        seen = set(keys)
        keys += [k for k in self._where if k not in seen]
        lines = [json.dumps(row, ensure_ascii=False) + "\n" for row in self.rows(keys)]
        text = "".join(lines)
        path = self.path / SAMPLES_FILE
        with os_errors(path, "write", kept=self.kept()):
            if self.recorded:
                write_lines_whole(path, text, self.file_mode)
            else:
                write_atomic(path, text, self.file_mode)
        number, at = self._file_number(path), 0
        for key, line in zip(keys, lines):  # the rows are read from the merged file from now on
            size = len(line.encode("utf-8"))
            self._where[key] = (number, at, size)
            at += size

    def rows(self, keys: Sequence[Any] | None = None, *, tags: Sequence[Any] | None = None,
             convert: Convert | None = None) -> StoredRows:
        """The stored rows named ``keys`` (default: all, in the order they were stored), read
        from the sample files on demand (:class:`~ctxleak.run.stored.StoredRows`); ``tags`` and
        ``convert`` as there."""
        names = list(self._where) if keys is None else keys
        where = [self._where[k] for k in names]
        return StoredRows(self._files, names, (w[0] for w in where), (w[1] for w in where),
                          (w[2] for w in where), tags=tags, convert=convert)

    @property
    def samples(self) -> list[dict[str, Any]]:
        """Samples written so far (those of earlier runs included, when resuming), read back
        from the sample files."""
        return list(self.rows())

    @property
    def count(self) -> int:
        """How many samples are stored (those of earlier runs included)."""
        return len(self._where)

    def done_keys(self, key: str | None = None) -> set[Any]:
        """The stored rows' names (:func:`row_key`: what resume matches ``Method.key`` to), or
        their values of the field ``key``."""
        if key is None:
            return set(self._where)
        return {row.get(key) for row in self.rows()}

    def kept(self) -> str:
        """What a failed write leaves and how to go on (for :func:`output_error`)."""
        return (f"{len(self._where)} finished example(s) are kept in {self.path}: rerun the "
                f"same command with resume=True output={self.path} to continue")

    def append_sample(self, record: dict[str, Any]) -> None:
        """Append one example's record as a JSON line and flush it to disk. A write the system
        refuses (a full disk) is cut back to the last whole line and raised as an
        :class:`~ctxleak.errors.OutputError` that says how to resume."""
        path = self.path / self.samples_name
        bad = non_finite(record)
        if bad is not None:  # NaN would be stored as null and kept by resume forever
            raise CtxleakError(f"{path}: the record of {record.get('id')!r} holds a number "
                               f"that is not finite at '{bad}': not written. A model or server "
                               "that answers NaN or infinite log-probs made it; rerun with "
                               "resume=True once that is fixed")
        row = to_jsonable(self.scrub.record(record) if self.scrub is not None else record)
        if row_key(row) in self._where:
            raise ConfigError(f"{path}: a row named {row_key(row)!r} is already stored; ids "
                              "must be unique")
        data = (json.dumps(row, ensure_ascii=False) + "\n").encode("utf-8")
        with uninterrupted(), os_errors(path, "write", kept=self.kept()):
            if self._handle is None:
                self._handle = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT,
                                       self.file_mode)
                if self.recorded:
                    self._digests = open_digests(path, self.file_mode)
            start = os.lseek(self._handle, 0, os.SEEK_END)
            append_whole(self._handle, data)
            if self._digests is not None:
                try:
                    append_digest(self._digests, data)
                except OSError:  # a line without its digest would look edited: cut it too
                    os.ftruncate(self._handle, start)
                    raise
            self._where[row_key(row)] = (self._file_number(path), start, len(data))

    def close(self) -> None:
        for fd in (self._handle, self._digests):
            if fd is not None:
                os.close(fd)
        self._handle = self._digests = None

    def release(self) -> None:
        """Give up the claim on the folder before this process exits (a library caller that
        goes on after the run; the CLI's claim simply ends with its process)."""
        self.close()
        release_claim(self.path)

    def pin_model(self, identity: dict[str, Any]) -> None:
        """Store the loaded model's identity (:meth:`LanguageModel.identity
        <ctxleak.engine.lm.LanguageModel.identity>`: what a server says of the model behind a
        name) when the run starts, and refuse a resume whose model says otherwise: the kept rows
        came from the first one."""
        identity = to_jsonable(identity)
        config_path = self.path / CONFIG_FILE
        stored = self.config.get(IDENTITY_KEY)
        if stored is not None:
            changed = sorted(k for k in set(stored) | set(identity)
                             if stored.get(k) != identity.get(k))
            if changed:
                said = "; ".join(f"{k} {stored.get(k)!r} then, {identity.get(k)!r} now"
                                 for k in changed)
                raise ConfigError(f"cannot resume {self.path}: the model '"
                                  f"{self.config.get('served_model') or self.config.get('model')}"
                                  f"' is not the one the run started with ({said}; stored in "
                                  f"{config_path}); serve that model again, or start a new "
                                  "output=...", also=("output",))
            return
        if not identity:
            return
        self.config[IDENTITY_KEY] = identity
        if self.world.is_main:
            self.write_file(CONFIG_FILE, json.dumps(self.config, indent=2, sort_keys=True)
                            + "\n")

    # results and other files -----------------------------------------------------------------
    def write_results(self, result: Any) -> Path:
        """``results.json`` of ``result`` (a :class:`ctxleak.results.Result`), written by its
        one writer, ``result.save_results``, with this folder's file mode; OS errors as in
        :meth:`append_sample`."""
        path = self.path / RESULTS_FILE
        with os_errors(path, "write", kept=self.kept()):
            return Path(result.save_results(self.path, self.file_mode))

    def write_file(self, name: str, data: str | bytes) -> Path:
        """Write ``name`` in the run folder atomically, recorded in its manifest by the main
        process (OS errors as in :meth:`append_sample`)."""
        path = self.path / name
        with os_errors(path, "write", kept=self.kept()):
            if self.world.is_main:
                write_recorded(self.path, name, data, self.file_mode)
            else:
                write_atomic(path, data, self.file_mode)
        return path

    def __enter__(self) -> RunDir:
        return self

    def __exit__(self, kind: object, exc: BaseException | None, tb: object) -> None:
        if isinstance(exc, KeyboardInterrupt) and getattr(exc, "run", None) is None:
            exc.run = self  # type: ignore[attr-defined]  # Ctrl-C names the folder it left
        self.close()
