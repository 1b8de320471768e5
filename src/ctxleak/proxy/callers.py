"""Who is asking the privacy proxy, and how often: a caller's identity from its API key (and,
optionally, the end user the operator's own app names in a header), and a token bucket per caller
(requests per minute, checked before anything is reserved or decoded).

A caller is a key's name (``caller_keys``; the single ``api_key`` is ``default``; a keyless
proxy's one caller is ``anonymous``), or ``<key's name>/<header value>`` where the operator's
app passes its end user in ``caller_header``. Budget shares are kept per caller
(:mod:`ctxleak.proxy.budget`); metrics count under the key's name only, so their labels stay
as few as the operator's keys. This module imports neither torch nor the rest of the proxy."""

from __future__ import annotations

import hmac
import math
import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from ctxleak.errors import ConfigError, InputError
from ctxleak.proxy.config import ANONYMOUS, DEFAULT, MAX_USER_CHARS, check_caller_keys
from ctxleak.proxy.request import ProxyError


@dataclass(frozen=True)
class Caller:
    """One request's caller: ``name`` (what budget shares and rates are kept under) and
    ``label`` (its key's name: what ``/metrics`` counts it under)."""

    name: str
    label: str


def read_caller_keys(path: str | Path,
                     environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The callers' keys (``ctxleak serve --caller-keys FILE``): a JSONL or CSV file of rows
    with ``caller`` and either ``key_env`` (the environment variable holding the key: the file
    then holds no secret) or ``key`` (the key itself). API key → caller name. A row without
    either, with both, naming an unset variable, or giving a key already given, is an error
    naming the file, line and field."""
    from ctxleak.run.records import iter_rows

    env = os.environ if environ is None else environ
    out: dict[str, str] = {}
    for row in iter_rows(Path(path), required=("caller",)):
        caller = row.text("caller")
        try:
            check_caller_keys({"k": caller})
        except ConfigError as exc:
            raise InputError(str(exc).removeprefix("caller_keys: "), file=row.file,
                             line=row.line, field="caller") from None
        given = [f for f in ("key_env", "key") if row.get(f) not in (None, "")]
        if len(given) != 1:
            raise InputError("give exactly one of key_env (an environment variable's name) "
                             "and key", file=row.file, line=row.line, field="key_env")
        if given == ["key_env"]:
            key = env.get(row.text("key_env"), "")
            if not key:
                raise InputError(f"the environment variable {row.text('key_env')!r} is not "
                                 f"set", file=row.file, line=row.line, field="key_env")
        else:
            key = row.text("key")
        if key in out:
            raise InputError(f"this key is already caller {out[key]!r}'s", file=row.file,
                             line=row.line, field=given[0])
        out[key] = caller
    return out


def identify(authorization: str, api_key: str | None, caller_keys: Mapping[str, str],
             header: str | None, user: str | None) -> Caller | None:
    """The caller of a request whose ``Authorization`` header is ``authorization``; None when
    the proxy has keys and this is none of them. ``user``: the value of the operator's
    ``header`` (None: absent); a bad one is HTTP 400 naming the header."""
    label = ANONYMOUS if api_key is None and not caller_keys else \
        _key_caller(authorization, api_key, caller_keys)
    if label is None:
        return None
    if header is None or user is None:
        return Caller(label, label)
    if not (0 < len(user) <= MAX_USER_CHARS and user.isprintable() and user.strip() == user):
        raise ProxyError(400, f"{header}: the end user's name must be 1 to {MAX_USER_CHARS} "
                              f"printable characters without surrounding spaces",
                         param=header, code="invalid_caller")
    return Caller(f"{label}/{user}", label)


def _key_caller(authorization: str, api_key: str | None,
                caller_keys: Mapping[str, str]) -> str | None:
    """The caller whose key the ``Authorization`` header carries (None: no key of ours), every
    key compared in constant time."""
    given = authorization[7:].encode() if authorization.startswith("Bearer ") else b""
    found = None
    for key, name in caller_keys.items():
        if hmac.compare_digest(given, key.encode()) and found is None:
            found = name
    if found is None and api_key is not None and hmac.compare_digest(given, api_key.encode()):
        found = DEFAULT
    return found


class RateLimited(ProxyError):
    """HTTP 429 ``rate_limited``, with the seconds to wait in its ``Retry-After`` header."""

    def __init__(self, caller: str, rate: float, wait: float) -> None:
        super().__init__(429, f"caller {caller!r} has sent more than {rate:g} requests in a "
                              f"minute, its limit; try again in {math.ceil(wait)} s",
                         kind="rate_limit_error", code="rate_limited")
        self.headers = {"retry-after": str(max(1, math.ceil(wait)))}


class RateLimiter:
    """A token bucket per caller: ``per_minute`` requests a minute, a burst of ``per_minute``
    (each caller's bucket starts full and refills at per_minute / 60 a second). Kept in this
    process: replicas each keep their own. ``clock``: seconds (monotonic; tests give their
    own). Callers idle long enough to be full again are forgotten, so the map stays small."""

    def __init__(self, per_minute: float, clock: Callable[[], float] = time.monotonic) -> None:
        if not (math.isfinite(per_minute) and per_minute > 0):
            raise ConfigError(f"caller_rate must be a number > 0 (requests per minute), not "
                              f"{per_minute}", param="caller_rate")
        self.per_minute, self.clock = float(per_minute), clock
        self._buckets: dict[str, tuple[float, float]] = {}  # caller → (tokens, at)
        self._lock = threading.Lock()

    def wait(self, caller: str) -> float:
        """Take one request from ``caller``'s bucket: 0 when it had one, else the seconds
        until it will (nothing taken)."""
        rate = self.per_minute / 60.0
        with self._lock:
            now = self.clock()
            tokens, at = self._buckets.get(caller, (self.per_minute, now))
            tokens = min(self.per_minute, tokens + (now - at) * rate)
            if tokens >= 1.0:
                self._buckets[caller] = (tokens - 1.0, now)
                if len(self._buckets) > 4096:
                    self._forget(now, rate)
                return 0.0
            self._buckets[caller] = (tokens, now)
            return (1.0 - tokens) / rate

    def _forget(self, now: float, rate: float) -> None:
        full = [c for c, (t, at) in self._buckets.items()
                if t + (now - at) * rate >= self.per_minute]
        for caller in full:
            del self._buckets[caller]

    def check(self, caller: str) -> None:
        """:class:`RateLimited` when ``caller`` has no request left this minute."""
        wait = self.wait(caller)
        if wait > 0:
            raise RateLimited(caller, self.per_minute, wait)
