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
  [0, 1]), T (> 0), the seed of the answer's own generator and greedy CID (0 or 1);
- ``ctxleak_eps``: bounded CID's ε per token (> 0), absent for plain CID;
- ``ctxleak_min``, ``ctxleak_stops``: the minimum number of new tokens (EOS masked before it)
  and the EOS ids, comma-separated.

**The records come back by** ``GET /v1/ctxleak/pairs/{pair}`` (:data:`PAIRS_PATH`, the route
:mod:`ctxleak.plugins.vllm_records` adds to the server): a JSON object with ``steps`` (one per
drawn token, the stopping EOS included: ``token``, ``lam`` λ_t, ``logp_mix``
log p̄_λ(y_t | D) and ``logp_empty`` log p(y_t | ∅) at T, in float64, ``eps_ex_post`` for
bounded CID), ``stopped`` (EOS ended it), ``error`` (None, or why the pair failed: the answer is
then void and is tried again) and ``server`` (the flags the plugin runs under). The route reads
the plugin's files (:func:`records_dir`), which each server process writes once per answer.
"""

from __future__ import annotations

import hashlib
import math
import os
import re
import tempfile
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
#: The plugin's version of this protocol, sent in every record.
PROTOCOL_VERSION = 1

PAIR_ID = re.compile(r"^[0-9a-f]{32}$")
KEYS = ("ctxleak_pair", "ctxleak_context", "ctxleak_lam", "ctxleak_temperature",
        "ctxleak_seed", "ctxleak_greedy", "ctxleak_eps", "ctxleak_min", "ctxleak_stops")


class PairSettingError(ValueError):
    """A plugin request's ``vllm_xargs`` outside their domain (vLLM answers HTTP 400 with the
    message)."""


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


def prompt_digest(ids: list[int]) -> str:
    """16 hex digits of SHA-256 over the token ids: which request of a pair holds the context."""
    return hashlib.sha256(",".join(str(int(i)) for i in ids).encode()).hexdigest()[:16]


def pair_xargs(*, pair: str, context_ids: list[int], lam: float, temperature: float, seed: int,
               greedy: bool, eps: float | None, min_new_tokens: int,
               stops: list[int]) -> dict[str, Any]:
    """The ``vllm_xargs`` of one answer (checked by :func:`read_settings` as the plugin will)."""
    xargs: dict[str, Any] = {
        "ctxleak_pair": pair, "ctxleak_context": prompt_digest(context_ids),
        "ctxleak_lam": float(lam), "ctxleak_temperature": float(temperature),
        "ctxleak_seed": str(int(seed)), "ctxleak_greedy": int(bool(greedy)),
        "ctxleak_min": int(min_new_tokens),
        "ctxleak_stops": ",".join(str(int(s)) for s in stops)}
    if eps is not None:
        xargs["ctxleak_eps"] = float(eps)
    read_settings(xargs)
    return xargs


def is_pair_request(xargs: dict[str, Any] | None) -> bool:
    """Whether a request's ``vllm_xargs`` address the plugin at all."""
    return bool(xargs) and any(str(k).startswith("ctxleak_") for k in xargs or {})


def _number(xargs: dict[str, Any], key: str, default: Any = None) -> float:
    value = xargs.get(key, default)
    if value is None:
        raise PairSettingError(f"vllm_xargs lacks '{key}'")
    try:
        out = float(value)
    except (TypeError, ValueError):
        raise PairSettingError(f"vllm_xargs '{key}' must be a number, not {value!r}") from None
    if not math.isfinite(out):
        raise PairSettingError(f"vllm_xargs '{key}' must be finite, not {value!r}")
    return out


def _integer(xargs: dict[str, Any], key: str, default: Any = None) -> int:
    value = xargs.get(key, default)
    try:
        return int(str(value))
    except (TypeError, ValueError):
        raise PairSettingError(f"vllm_xargs '{key}' must be an integer, not {value!r}") from None


def read_settings(xargs: dict[str, Any]) -> PairSettings:
    """The settings of a plugin request, each checked against its domain: an unknown
    ``ctxleak_`` key, a pair id that is not 32 hex digits, λ outside [0, 1], T ≤ 0, ε ≤ 0, a
    negative minimum or no EOS id raise :class:`PairSettingError` naming it."""
    unknown = sorted(str(k) for k in xargs if str(k).startswith("ctxleak_") and k not in KEYS)
    if unknown:
        raise PairSettingError(f"unknown vllm_xargs {unknown}: this plugin reads {list(KEYS)}")
    pair = str(xargs.get("ctxleak_pair", ""))
    if not PAIR_ID.match(pair):
        raise PairSettingError("vllm_xargs 'ctxleak_pair' must be 32 lowercase hex digits")
    digest = str(xargs.get("ctxleak_context", ""))
    if not re.match(r"^[0-9a-f]{16}$", digest):
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
    minimum = _integer(xargs, "ctxleak_min", 0)
    if minimum < 0:
        raise PairSettingError(f"vllm_xargs 'ctxleak_min' must be >= 0, not {minimum}")
    try:
        stops = tuple(int(s) for s in str(xargs.get("ctxleak_stops", "")).split(",") if s)
    except ValueError:
        raise PairSettingError("vllm_xargs 'ctxleak_stops' must be comma-separated token "
                               "ids") from None
    if not stops:
        raise PairSettingError("vllm_xargs 'ctxleak_stops' must name the EOS ids")
    return PairSettings(pair=pair, context_digest=digest, lam=lam, temperature=temperature,
                        seed=_integer(xargs, "ctxleak_seed"),
                        greedy=bool(_integer(xargs, "ctxleak_greedy", 0)), eps=eps,
                        min_new_tokens=minimum, stops=stops)


def records_dir() -> Path:
    """The folder the plugin writes an answer's records to and the route reads them from:
    ``$CTXLEAK_VLLM_RECORDS``, else ``ctxleak-vllm-records-<uid>`` in the temp folder (pair ids
    are random, so servers of one user may share it)."""
    named = os.environ.get(RECORDS_ENV)
    uid = os.getuid() if hasattr(os, "getuid") else 0
    return Path(named) if named else Path(tempfile.gettempdir()) / f"ctxleak-vllm-records-{uid}"


def record_path(pair: str) -> Path:
    """Where the records of ``pair`` (checked: 32 hex digits) are kept."""
    if not PAIR_ID.match(pair):
        raise PairSettingError("a pair id is 32 lowercase hex digits")
    return records_dir() / f"{pair}.json"
