"""The wire protocol between ctxleak and its vLLM plugin (standard library only, so that the
plugin inside the server and the client in ctxleak read one definition).

**One answer of Context Influence Decoding is one ``/v1/completions`` request with two prompts**
(Estimating Privacy Leakage of Augmented Contextual Knowledge in Language Models, Def. 3.4;
bounded CID: App. B, Alg. 1): the prompt with the context D and the prompt without it, as
token ids, ``temperature: 0`` (the plugin forces the token, vLLM's greedy pick keeps it),
``stop_token_ids`` the model's EOS ids and ``vllm_xargs`` (:func:`pair_xargs`):

- ``ctxleak_pair``: 32 hex digits, the answer's id, fresh for every try (a capability: whoever
  knows it can read the answer's records, so it is drawn from ``secrets``);
- ``ctxleak_context``: a digest of the prompt with the context (:func:`prompt_digest`), which
  tells the plugin which of the two requests is that stream;
- ``ctxleak_lam``, ``ctxleak_temperature``, ``ctxleak_seed``, ``ctxleak_greedy``: λ (in
  [0, 1]), T (finite, > 0), the seed of the answer's own generator (an integer in
  [0, 2^64 − 1], what ``torch.Generator.manual_seed`` takes; :func:`pair_xargs` sends a
  negative seed as torch reads it, + 2^64) and greedy CID (0 or 1);
- ``ctxleak_eps``: bounded CID's ε per token (finite, > 0), absent for plain CID;
- ``ctxleak_min``, ``ctxleak_stops``: the minimum number of new tokens (EOS masked before it;
  at most the request's ``max_tokens``) and the EOS ids, comma-separated (each in [0, 2^31));
- ``ctxleak_forced`` (optional): a teacher-forced answer, comma-separated token ids (each in
  [0, 2^31), at most the request's ``max_tokens`` of them, an EOS id only as the last: it ends
  the answer), which the plugin emits instead of drawing, recording the same numbers per step
  (the answer's CID log-probs: scoring a response costs its tokens' records, not the whole
  vocabulary per position); the plugin voids a pair whose forced ids fall outside the model's
  vocabulary. Protocol 2; a plugin of protocol 1 refuses the key;
- ``ctxleak_ex_post`` (optional, 0 or 1): plain CID also records each step's ex-post ε (what a
  deployment that charges it needs; bounded CID always records it). Protocol 3; a plugin of
  protocol 2 refuses the key.

Every value is checked at admission (:func:`read_settings`, the plugin's ``validate_params``):
a request outside these domains is HTTP 400 naming the field, and never reaches the engine.

**The records come back by** ``GET /v1/ctxleak/pairs/{pair}`` (:data:`PAIRS_PATH`, the route
:mod:`ctxleak.plugins.vllm_records` adds to the server): a JSON object with ``steps`` (one per
drawn token, the stopping EOS included: ``token``, ``lam`` λ_t, ``logp_mix``
log p̄_λ(y_t | D) and ``logp_empty`` log p(y_t | ∅) at T, in float64, ``eps_ex_post`` for
bounded CID and for plain CID with ``ctxleak_ex_post``), ``stopped`` (EOS ended it),
``error`` (None, or why the pair failed: the answer is then void and is tried again) and
``server`` (the flags the plugin runs under, with the data-parallel rank that decoded the
answer and the number of ranks the API server routes to).
A server with several data-parallel ranks gets both requests of an answer on one of them by the
``X-data-parallel-rank`` header (:func:`pair_rank`). The route reads
the plugin's files (:class:`RecordsFolder`), which each server process writes once per answer:
a folder of the server's user alone (mode 0700; one that is a link, another user's or open to
others is refused), each file written whole with mode 0600 and removed once read; the records
nobody read are removed after :data:`RECORD_MAX_AGE_SECONDS`.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import secrets
import stat
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: The route that hands an answer's records to the client (once; the file is then removed).
PAIRS_PATH = "/v1/ctxleak/pairs/"
#: The ``type`` of the route's error for a pair it holds no records of.
UNKNOWN_PAIR = "ctxleak_unknown_pair"
#: Environment variable naming the folder the plugin and the route share (both run in the
#: processes of one ``vllm serve``); default: a folder of this user's under the temp folder.
RECORDS_ENV = "CTXLEAK_VLLM_RECORDS"
#: The header by which vLLM's API server sends a request to one data-parallel rank (vLLM reads
#: it in ``GenerateBaseServing._get_data_parallel_rank``; without it, each prompt of a
#: completions request goes to the least loaded engine, so an answer's two requests may part).
RANK_HEADER = "X-data-parallel-rank"
#: The plugin's version of this protocol, sent in every record.
PROTOCOL_VERSION = 3

#: The seeds ``torch.Generator.manual_seed`` takes without wrapping: [0, 2^64 − 1] (it reads a
#: negative seed s ≥ −2^63 as s + 2^64 and raises beyond; the plugin takes the unwrapped form).
SEED_MAX = 2**64 - 1
#: Bound of token ids and of the minimum length: vLLM holds both in int32 buffers.
INT32_END = 2**31
#: Records older than this (seconds) are removed when the plugin sweeps its folder: a client
#: reads an answer's records right after the answer, so one left an hour was never going to be.
RECORD_MAX_AGE_SECONDS = 3600.0
#: Seconds between two sweeps of the records folder by one plugin process.
SWEEP_INTERVAL_SECONDS = 60.0

PAIR_ID = re.compile(r"[0-9a-f]{32}")
CONTEXT_DIGEST = re.compile(r"[0-9a-f]{16}")
KEYS = ("ctxleak_pair", "ctxleak_context", "ctxleak_lam", "ctxleak_temperature",
        "ctxleak_seed", "ctxleak_greedy", "ctxleak_eps", "ctxleak_min", "ctxleak_stops",
        "ctxleak_forced", "ctxleak_ex_post")


class PairSettingError(ValueError):
    """A plugin request's ``vllm_xargs`` outside their domain (vLLM answers HTTP 400 with the
    message)."""


class RecordsFolderError(RuntimeError):
    """The records folder is not safe to use (another user's, a link, open to others): the
    plugin refuses to load and the route to read, naming the folder and what to do."""


@dataclass(frozen=True)
class PairSettings:
    """One answer's settings as the plugin reads them from ``vllm_xargs``."""

    pair: str
    context_digest: str
    lam: float
    temperature: float
    seed: int
    greedy: bool
    eps: float | None
    min_new_tokens: int
    stops: tuple[int, ...]
    forced: tuple[int, ...] = ()  # a teacher-forced answer's tokens (empty: drawn)
    ex_post: bool = False  # plain CID records each step's ex-post ε too


def prompt_digest(ids: list[int]) -> str:
    """16 hex digits of SHA-256 over the token ids: which request of a pair holds the context."""
    return hashlib.sha256(",".join(str(int(i)) for i in ids).encode()).hexdigest()[:16]


def pair_xargs(*, pair: str, context_ids: list[int], lam: float, temperature: float, seed: int,
               greedy: bool, eps: float | None, min_new_tokens: int,
               stops: list[int], forced: Sequence[int] = (), ex_post: bool = False
               ) -> dict[str, Any]:
    """The ``vllm_xargs`` of one answer (checked by :func:`read_settings` as the plugin will);
    ``forced``: the tokens of a teacher-forced answer (empty: the plugin draws them);
    ``ex_post``: plain CID records each step's ex-post ε (sent only where set, so a plugin of
    protocol 2 takes every other request)."""
    seed = int(seed) + 2**64 if -2**63 <= int(seed) < 0 else int(seed)  # as torch reads it
    xargs: dict[str, Any] = {
        "ctxleak_pair": pair, "ctxleak_context": prompt_digest(context_ids),
        "ctxleak_lam": float(lam), "ctxleak_temperature": float(temperature),
        "ctxleak_seed": str(seed), "ctxleak_greedy": int(bool(greedy)),
        "ctxleak_min": int(min_new_tokens),
        "ctxleak_stops": _ids(stops)}
    if eps is not None:
        xargs["ctxleak_eps"] = float(eps)
    if forced:
        xargs["ctxleak_forced"] = _ids(forced)
    if ex_post:
        xargs["ctxleak_ex_post"] = 1
    read_settings(xargs)
    return xargs


def _ids(ids: Sequence[int]) -> str:
    return ",".join(str(int(i)) for i in ids)


def pair_rank(pair: str, ranks: int) -> int:
    """The data-parallel rank both requests of answer ``pair`` are sent to, among ``ranks``
    (``X-data-parallel-rank``, :data:`RANK_HEADER`): fixed by the answer's id, so the two land
    on one engine, and spread evenly over the ranks (the ids are random)."""
    return int(pair, 16) % max(1, int(ranks))


def is_pair_request(xargs: dict[str, Any] | None) -> bool:
    """Whether a request's ``vllm_xargs`` address the plugin at all."""
    return bool(xargs) and any(str(k).startswith("ctxleak_") for k in xargs or {})


def _shown(value: Any) -> str:
    """A value for an error message, cut to 60 characters (a request may send megabytes)."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _number(xargs: dict[str, Any], key: str, default: Any = None) -> float:
    value = xargs.get(key, default)
    if value is None:
        raise PairSettingError(f"vllm_xargs lacks '{key}'")
    try:
        if isinstance(value, bool):
            raise TypeError
        out = float(value)
    except (TypeError, ValueError, OverflowError):
        raise PairSettingError(f"vllm_xargs '{key}' must be a number, not "
                               f"{_shown(value)}") from None
    if not math.isfinite(out):
        raise PairSettingError(f"vllm_xargs '{key}' must be finite, not {_shown(value)}")
    return out


def _integer(xargs: dict[str, Any], key: str, low: int, high: int, default: Any = None) -> int:
    """``xargs[key]`` as an integer in [low, high] (an int or its decimal digits)."""
    value = xargs.get(key, default)
    if value is None:
        raise PairSettingError(f"vllm_xargs lacks '{key}'")
    try:
        if isinstance(value, bool | float):
            raise TypeError
        out = int(str(value).strip())
    except (TypeError, ValueError):
        raise PairSettingError(f"vllm_xargs '{key}' must be an integer, not "
                               f"{_shown(value)}") from None
    if not low <= out <= high:
        raise PairSettingError(f"vllm_xargs '{key}' must be an integer in [{low}, {high}], "
                               f"not {_shown(value)}")
    return out


def _token_ids(xargs: dict[str, Any], key: str) -> tuple[int, ...]:
    """``xargs[key]``: comma-separated token ids (a string, or one id), each in [0, 2^31)."""
    raw = xargs.get(key, "")
    if not isinstance(raw, str | int) or isinstance(raw, bool):
        raise PairSettingError(f"vllm_xargs '{key}' must be comma-separated token ids")
    try:
        ids = tuple(int(s) for s in str(raw).split(",") if s.strip())
    except ValueError:
        raise PairSettingError(f"vllm_xargs '{key}' must be comma-separated token "
                               "ids") from None
    if any(not 0 <= t < INT32_END for t in ids):
        raise PairSettingError(f"vllm_xargs '{key}' must be token ids in [0, 2^31), "
                               f"not {_shown(raw)}")
    return ids


def read_settings(xargs: dict[str, Any]) -> PairSettings:
    """The settings of a plugin request, each checked against its domain (the module
    docstring): an unknown ``ctxleak_`` key, a pair id that is not 32 hex digits, a number that
    is not finite, λ outside [0, 1], T ≤ 0, ε ≤ 0, a seed outside [0, 2^64 − 1], greedy other
    or ex-post other than 0 or 1, a minimum outside [0, 2^31), no EOS id or one outside [0, 2^31), a forced
    token outside [0, 2^31) or an EOS id forced before the last token raise
    :class:`PairSettingError` naming it. Nothing that passes can raise in the engine."""
    unknown = sorted(str(k) for k in xargs if str(k).startswith("ctxleak_") and k not in KEYS)
    if unknown:
        raise PairSettingError(f"unknown vllm_xargs {unknown}: this plugin reads {list(KEYS)}")
    pair = str(xargs.get("ctxleak_pair", ""))
    if not PAIR_ID.fullmatch(pair):
        raise PairSettingError("vllm_xargs 'ctxleak_pair' must be 32 lowercase hex digits")
    digest = str(xargs.get("ctxleak_context", ""))
    if not CONTEXT_DIGEST.fullmatch(digest):
        raise PairSettingError("vllm_xargs 'ctxleak_context' must be 16 hex digits")
    lam = _number(xargs, "ctxleak_lam")
    if not 0.0 <= lam <= 1.0:
        raise PairSettingError(f"vllm_xargs 'ctxleak_lam' (λ) must be in [0, 1], not {lam}")
    temperature = _number(xargs, "ctxleak_temperature")
    if temperature <= 0:
        raise PairSettingError(f"vllm_xargs 'ctxleak_temperature' must be > 0, not "
                               f"{temperature}")
    eps = None if xargs.get("ctxleak_eps") is None else _number(xargs, "ctxleak_eps")
    if eps is not None and eps <= 0:
        raise PairSettingError(f"vllm_xargs 'ctxleak_eps' (ε per token) must be > 0, not {eps}")
    minimum = _integer(xargs, "ctxleak_min", 0, INT32_END - 1, 0)
    stops = _token_ids(xargs, "ctxleak_stops")
    if not stops:
        raise PairSettingError("vllm_xargs 'ctxleak_stops' must name the EOS ids")
    forced = _token_ids(xargs, "ctxleak_forced")
    if any(t in stops for t in forced[:-1]):
        raise PairSettingError("vllm_xargs 'ctxleak_forced' may hold an EOS id "
                               "('ctxleak_stops') only as its last token, which ends the answer")
    return PairSettings(pair=pair, context_digest=digest, lam=lam, temperature=temperature,
                        seed=_integer(xargs, "ctxleak_seed", 0, SEED_MAX),
                        greedy=bool(_integer(xargs, "ctxleak_greedy", 0, 1, 0)), eps=eps,
                        min_new_tokens=minimum, stops=stops, forced=forced,
                        ex_post=bool(_integer(xargs, "ctxleak_ex_post", 0, 1, 0)))


def check_request(settings: PairSettings, *, max_tokens: int | None, n: int) -> None:
    """What the plugin checks of a request beyond its ``vllm_xargs`` (at admission): one answer
    per request (``n`` = 1), a minimum length and the forced tokens within ``max_tokens``
    (where it is set)."""
    if n != 1:
        raise PairSettingError("a CID plugin request must have n = 1")
    if max_tokens is not None and len(settings.forced) > max_tokens:
        raise PairSettingError(f"vllm_xargs 'ctxleak_forced' holds {len(settings.forced)} "
                               f"tokens, more than the request's max_tokens ({max_tokens})")
    if max_tokens is not None and settings.min_new_tokens > max_tokens:
        raise PairSettingError(f"vllm_xargs 'ctxleak_min' ({settings.min_new_tokens}) must be "
                               f"at most the request's max_tokens ({max_tokens})")


def records_dir() -> Path:
    """The folder the plugin writes an answer's records to and the route reads them from:
    ``$CTXLEAK_VLLM_RECORDS``, else ``ctxleak-vllm-records-<uid>`` in the temp folder (pair ids
    are random, so servers of one user may share it)."""
    named = os.environ.get(RECORDS_ENV)
    uid = os.getuid() if hasattr(os, "getuid") else 0
    return Path(named) if named else Path(tempfile.gettempdir()) / f"ctxleak-vllm-records-{uid}"


def record_path(pair: str, folder: Path | None = None) -> Path:
    """Where the records of ``pair`` (checked: 32 hex digits) are kept, in ``folder`` (default:
    :func:`records_dir`)."""
    if not PAIR_ID.fullmatch(pair):
        raise PairSettingError("a pair id is 32 lowercase hex digits")
    return (records_dir() if folder is None else folder) / f"{pair}.json"


class RecordsFolder:
    """The folder of answers' records (default :func:`records_dir`), shared by the plugin that
    writes them (in the engine's processes) and the route that reads them (in the API process).

    Whoever can write the folder can replace an answer's records, and whoever can read it reads
    them, so it must be the server's user's alone: it is created with mode 0700, and an existing
    one is used only where it is a real folder (not a symbolic link), owned by this user, with
    no permission for group or others; else :class:`RecordsFolderError` says which and what to
    do. A record is written to a fresh file (``O_EXCL``, mode 0600) in the folder and renamed
    into place, so a reader never sees half of one; it is read once (renamed away, read,
    removed). Files older than ``max_age`` seconds (records nobody read, leftovers of a killed
    writer or reader) are removed by :meth:`sweep`, which :meth:`write` runs at most every
    :data:`SWEEP_INTERVAL_SECONDS`. ``create``: make the folder now (the plugin, at load) or
    leave a missing one missing (the route: no folder, no records)."""

    def __init__(self, path: Path | None = None, *, create: bool = True,
                 max_age: float = RECORD_MAX_AGE_SECONDS) -> None:
        self.path = records_dir() if path is None else Path(path)
        self.max_age = float(max_age)
        self._swept = -math.inf
        if create:
            self.ensure()
            self._sweep_due()

    def check(self) -> bool:
        """Whether the folder exists (False: it does not); raises :class:`RecordsFolderError`
        where it exists and is not safe to use."""
        try:
            st = os.lstat(self.path)
        except FileNotFoundError:
            return False
        where = f"the records folder of ctxleak's vLLM plugin, {self.path},"
        fix = f"remove it, or name a folder of this user's in ${RECORDS_ENV}"
        if stat.S_ISLNK(st.st_mode):
            raise RecordsFolderError(f"{where} is a symbolic link: {fix}")
        if not stat.S_ISDIR(st.st_mode):
            raise RecordsFolderError(f"{where} is not a folder: {fix}")
        uid = os.getuid() if hasattr(os, "getuid") else None
        if uid is not None and st.st_uid != uid:
            raise RecordsFolderError(f"{where} belongs to user id {st.st_uid}, not to this "
                                     f"server's user ({uid}): {fix}")
        if st.st_mode & 0o077:
            raise RecordsFolderError(f"{where} is open to other users (mode "
                                     f"{stat.S_IMODE(st.st_mode):o}): chmod 700 it, or {fix}")
        return True

    def ensure(self) -> Path:
        """The folder, created with mode 0700 where it is missing, checked (:meth:`check`)."""
        if not self.check():
            self.path.parent.mkdir(parents=True, exist_ok=True)
            try:
                os.mkdir(self.path, 0o700)
            except FileExistsError:  # made meanwhile, by another process or another user
                pass
            if not self.check():
                raise RecordsFolderError(f"the records folder of ctxleak's vLLM plugin, "
                                         f"{self.path}, vanished as it was made")
        return self.path

    def write(self, pair: str, payload: dict[str, Any]) -> None:
        """The records of ``pair``, written whole with mode 0600."""
        target = record_path(pair, self.ensure())
        tmp = self.path / f".{pair}.{secrets.token_hex(8)}.tmp"
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
        fd = os.open(tmp, flags, 0o600)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                out.write(json.dumps(payload))
            os.replace(tmp, target)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        self._sweep_due()

    def read(self, pair: str) -> dict[str, Any] | None:
        """The records of ``pair``, removed as they are read (by one reader only), or None where
        there are none."""
        path = record_path(pair, self.path)
        if not self.check():
            return None
        claimed = self.path / f".{pair}.{secrets.token_hex(8)}.reading"
        try:
            os.replace(path, claimed)
        except FileNotFoundError:
            return None
        try:
            text = claimed.read_text(encoding="utf-8")
        finally:
            claimed.unlink(missing_ok=True)
        out: dict[str, Any] = json.loads(text)
        return out

    def sweep(self, now: float | None = None) -> int:
        """Remove the records, and the leftovers of writers and readers, last written more than
        ``max_age`` seconds before ``now`` (default: the clock); returns how many."""
        now = time.time() if now is None else now
        try:
            entries = list(os.scandir(self.path))
        except FileNotFoundError:
            return 0
        removed = 0
        for entry in entries:
            if not entry.name.endswith((".json", ".tmp", ".reading")):
                continue
            try:
                if now - entry.stat(follow_symlinks=False).st_mtime > self.max_age:
                    os.unlink(entry.path)
                    removed += 1
            except FileNotFoundError:  # read or swept meanwhile
                continue
        return removed

    def _sweep_due(self) -> None:
        if time.monotonic() - self._swept >= SWEEP_INTERVAL_SECONDS:
            self._swept = time.monotonic()
            self.sweep()
