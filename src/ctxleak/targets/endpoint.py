"""An OpenAI-compatible chat endpoint as a target: a closed API (OpenAI, Azure, any gateway), a
vLLM server, or ``ctxleak serve`` in front of one.

Requests go through the real ``openai`` client (its own retries off) with at most
``concurrency`` in flight and at most ``rate_per_s`` started per second. HTTP 429 and 5xx, a
dropped connection and no answer within ``timeout_s`` are retried ``retries`` times: the
wait is the server's ``Retry-After`` (``retry-after-ms`` first, seconds or an HTTP date, at
most :data:`MAX_WAIT_S`), or else ``backoff_s · 2^attempt`` (at most :data:`MAX_WAIT_S`). A
429 that says a quota or a privacy budget is spent (:data:`SPENT`), another HTTP error, a body
that is not a chat completion and a refusal (``refusal`` set, or finish reason
``content_filter``) are not retried: each raises :class:`~.base.TargetError` naming the
question, with the answers already received. The API key is read from the environment variable
``api_key_env`` names, when the target is made; it is in no description, fingerprint or error
(whatever a server echoes is masked, :func:`~ctxleak.engine.served_client.mask_key`), nor in
any answer: an answer that echoes it (verbatim or reversed, with spaces, line breaks,
punctuation or zero-width characters between its characters, ``\\u``-escaped, in hex, base64
or base64url, or 8 of its characters in a row) has it replaced by
:data:`KEY_MASK` before anything journals or stores it (:class:`KeyMask`). An answer of
``ctxleak serve`` carries the claim it was released under, read from its ``ctxleak`` field
(:func:`served_claim`), so that an attack sets its bound beside the deployed defence's claim.
"""

from __future__ import annotations

import base64
import email.utils
import math
import os
import threading
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from typing import Any

from ctxleak.domains import real, whole
from ctxleak.engine.key_mask import key_forms, key_pattern, mask_key, mask_spelled
from ctxleak.errors import ConfigError
from ctxleak.mitigations.mechanisms import Claim
from ctxleak.targets.base import OnAnswer, TargetAnswer, TargetError
from ctxleak.targets.rag import fingerprint_of

#: The longest wait between two tries, in seconds (a longer Retry-After is cut to it).
MAX_WAIT_S = 60.0

#: What an answer shows where it echoed the endpoint's API key.
KEY_MASK = "[API KEY]"

_BASE64 = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/_-")
_BASE64_END = _BASE64 | {"="}


def _base64_cores(key: bytes) -> set[str]:
    """The base64 and base64url text of ``key`` wherever it starts in what is encoded (at each
    of the three offsets), without the groups it shares with what is around it."""
    out = set()
    for offset in range(3):
        head = 4 if offset else 0  # the group that holds bytes before the key
        tail = (offset + len(key)) // 3 * 4  # the last group made of the key's bytes only
        text = base64.b64encode(b"\0" * offset + key).decode()[head:tail]
        if len(text) >= 8:
            out |= {text, text.replace("+", "-").replace("/", "_")}
    return out


class KeyMask:
    """Replaces every form of an API key an answer may echo by :data:`KEY_MASK` (see the
    module docstring): a pattern of its letters and digits with up to 8 spaces or punctuation
    marks between each two (the key verbatim included), its other forms
    (:func:`~ctxleak.engine.served_client.key_forms`), and each base64 or base64url token that
    holds it, whole. Linear in the answer's length (the base64 tokens are widened by hand, not
    by a pattern that could backtrack)."""

    def __init__(self, key: str) -> None:
        self.pattern = key_pattern(key)
        self.cores = sorted(_base64_cores(key.encode()), key=len, reverse=True)

    def __call__(self, text: str) -> str:
        for core in self.cores:
            at = text.find(core)
            while at >= 0:
                start, end = at, at + len(core)
                while start > 0 and text[start - 1] in _BASE64:
                    start -= 1
                while end < len(text) and text[end] in _BASE64_END:
                    end += 1
                text = text[:start] + KEY_MASK + text[end:]
                at = text.find(core, start + len(KEY_MASK))
        # in the text and in its view with \u escapes read and invisible characters left out
        return mask_spelled(text, self.pattern, KEY_MASK)


@dataclass(frozen=True)
class ChatRequest:
    """One chat completion to ask for: the messages, what to add to the body (``extra_body``,
    merged over the target's), the seed, and how an error names it (``label``)."""

    messages: tuple[Mapping[str, str], ...]
    extra_body: Mapping[str, Any] | None = None
    seed: int | None = None
    label: str = ""


def retry_delay(attempt: int, headers: Mapping[str, str] | None, backoff_s: float) -> float:
    """Seconds to wait before try ``attempt + 2``: the server's ``retry-after-ms`` or
    ``Retry-After`` (seconds or an HTTP date) where it sent one, else ``backoff_s · 2^attempt``;
    never below 0 nor above :data:`MAX_WAIT_S`."""
    got = None
    lower = {k.lower(): v for k, v in (headers or {}).items()}
    for name, scale in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
        try:
            got = float(lower[name]) / scale
            break
        except (KeyError, ValueError):
            continue
    if got is None and "retry-after" in lower:
        when = email.utils.parsedate_tz(lower["retry-after"])
        got = None if when is None else email.utils.mktime_tz(when) - time.time()
    if got is None or math.isnan(got):
        got = backoff_s * 2.0 ** attempt
    return min(max(got, 0.0), MAX_WAIT_S)


class _Pace:
    """At most ``rate`` starts per second, across threads (None: no limit)."""

    def __init__(self, rate: float | None) -> None:
        self.gap = 0.0 if rate is None else 1.0 / rate
        self.next = 0.0
        self.lock = threading.Lock()

    def wait(self) -> None:
        if not self.gap:
            return
        with self.lock:
            now = time.monotonic()
            start = max(now, self.next)
            self.next = start + self.gap
        if start > now:
            time.sleep(start - now)


class ChatEndpointTarget:
    """Questions sent to ``base_url``'s ``/chat/completions`` as ``model``, one user message
    each (after ``system``, where given), ``max_tokens`` new tokens at ``temperature``; see the
    module docstring for concurrency, rate, retries and errors. ``extra_body``: fields added to
    every request (a vLLM option, ``ctxleak serve``'s ``ctxleak`` field)."""

    _sleep = staticmethod(time.sleep)  # how a retry waits (a test records the waits instead)

    def __init__(self, base_url: str, model: str, *, api_key_env: str | None = None,
                 system: str | None = None, max_tokens: int = 64, temperature: float = 0.0,
                 concurrency: int = 4, rate_per_s: float | None = None, timeout_s: float = 60,
                 retries: int = 4, extra_body: Mapping[str, Any] | None = None,
                 seed: int | None = None, backoff_s: float = 1.0) -> None:
        _check(base_url=base_url, max_tokens=max_tokens, temperature=temperature,
               concurrency=concurrency, rate_per_s=rate_per_s, timeout_s=timeout_s,
               retries=retries, backoff_s=backoff_s)
        self.base_url, self.model, self.system = base_url.rstrip("/"), model, system
        self.max_tokens, self.temperature, self.seed = max_tokens, temperature, seed
        self.concurrency, self.retries, self.backoff_s = concurrency, retries, backoff_s
        self.timeout_s, self.api_key_env = timeout_s, api_key_env
        self.extra_body = dict(extra_body or {})
        key = _read_key(api_key_env)
        self._forms = key_forms(key)
        self._answer_mask = KeyMask(key) if key else None
        self._pace = _Pace(rate_per_s)
        self._client = _openai().OpenAI(base_url=self.base_url, api_key=key or "EMPTY",
                                        max_retries=0, timeout=timeout_s)

    reports_answers = True

    def answer(self, questions: Sequence[str], *,
               on_answer: OnAnswer | None = None) -> list[TargetAnswer]:
        head = [{"role": "system", "content": self.system}] if self.system else []
        requests = []
        for k, q in enumerate(questions):
            if not isinstance(q, str):
                raise TargetError(f"question {k + 1} is a {type(q).__name__}, not a string",
                                  index=k)
            requests.append(ChatRequest((*head, {"role": "user", "content": q}),
                                        seed=self.seed, label=q))
        return self.answers(requests, on_answer)

    def answers(self, requests: Sequence[ChatRequest],
                on_answer: OnAnswer | None = None) -> list[TargetAnswer]:
        """One answer per request, in order, ``concurrency`` at a time, each given to
        ``on_answer`` (index, answer) on this thread as it arrives: its text and, from a
        ``ctxleak serve`` answer, the claim it was released under (:func:`served_claim`). A
        failure raises :class:`TargetError` for the question that failed, with every answer
        received."""
        results: dict[int, TargetAnswer] = {}
        failures: dict[int, TargetError] = {}

        def got(k: int, answer: TargetAnswer) -> None:
            results[k] = answer
            if on_answer is not None:
                on_answer(k, answer)

        with ThreadPoolExecutor(max_workers=self.concurrency) as pool:
            futures = {pool.submit(self._one, k, r): k for k, r in enumerate(requests)}
            for future in as_completed(futures):
                k = futures[future]
                try:
                    text = future.result()
                except TargetError as exc:
                    failures[k] = exc
                    pool.shutdown(wait=True, cancel_futures=True)
                    break
                got(k, text)
            for future, k in futures.items():  # what finished beside the failure
                if k not in results and k not in failures and future.done() \
                        and not future.cancelled() and future.exception() is None:
                    got(k, future.result())
        if failures:
            first = min(failures)
            raise TargetError(str(failures[first]), index=first, answered=dict(sorted(
                results.items())))
        return [results[k] for k in range(len(requests))]

    def _one(self, index: int, request: ChatRequest) -> TargetAnswer:
        """One request, retried as the module docstring says."""
        openai = _openai()
        body = {**self.extra_body, **(request.extra_body or {})}
        name = f"question {index + 1} ({_short(request.label)})"
        kwargs: dict[str, Any] = {"model": self.model, "messages": list(request.messages),
                                  "max_tokens": self.max_tokens,
                                  "temperature": self.temperature, "extra_body": body or None}
        if request.seed is not None:
            kwargs["seed"] = request.seed
        for attempt in range(self.retries + 1):
            self._pace.wait()
            try:
                got = self._client.chat.completions.create(**kwargs)
            except (openai.RateLimitError, openai.InternalServerError,
                    openai.APIConnectionError) as exc:  # APITimeoutError among them
                status = getattr(exc, "status_code", None)
                if isinstance(exc, openai.APITimeoutError):
                    if attempt == self.retries:
                        raise TargetError(f"{name}: no answer within {self.timeout_s:g} s from "
                                          f"{self.base_url} after {attempt + 1} tries "
                                          "(timeout_s)", index=index) from None
                    self._sleep(retry_delay(attempt, None, self.backoff_s))
                    continue
                why = f"HTTP {status}" if status else "connection failed"
                if _spent(exc):
                    raise TargetError(f"{name}: HTTP 429 from {self.base_url}, a quota or "
                                      f"privacy budget that waiting does not restore (not "
                                      f"retried): {self._masked(exc)}", index=index) from None
                if attempt == self.retries:
                    raise TargetError(f"{name}: {why} from {self.base_url} after "
                                      f"{attempt + 1} tries: {self._masked(exc)}",
                                      index=index) from None
                response = getattr(exc, "response", None)
                headers = dict(response.headers) if response is not None else None
                self._sleep(retry_delay(attempt, headers, self.backoff_s))
                continue
            except openai.APIStatusError as exc:
                raise TargetError(f"{name}: HTTP {exc.status_code} from {self.base_url}: "
                                  f"{self._masked(exc)}", index=index) from None
            except (openai.APIError, ValueError, TypeError) as exc:
                raise TargetError(f"{name}: {self.base_url} answered what is not a chat "
                                  f"completion ({self._masked(exc)})", index=index) from None
            return self._text(got, name, index)
        raise AssertionError("unreachable")  # the loop returns or raises

    def _text(self, got: Any, name: str, index: int) -> TargetAnswer:
        """The answer's text and claim, or a :class:`TargetError` for garbage or a refusal."""
        try:
            choice = got.choices[0]
            message, finish = choice.message, choice.finish_reason
        except (AttributeError, IndexError, TypeError, KeyError):
            raise TargetError(f"{name}: {self.base_url} answered what is not a chat completion:"
                              f" {self._masked(str(got)[:200])!r}", index=index) from None
        refusal = getattr(message, "refusal", None)
        if refusal or finish == "content_filter":
            why = f"refused: {refusal}" if refusal else "stopped by its content filter"
            raise TargetError(f"{name}: the model {why}", index=index)
        content = getattr(message, "content", None)
        if not isinstance(content, str):
            raise TargetError(f"{name}: the answer has no text (content "
                              f"{type(content).__name__})", index=index)
        if self._answer_mask is not None:  # an answer that echoes the key never stores it
            content = self._answer_mask(content)
        field = (getattr(got, "model_extra", None) or {}).get("ctxleak")
        try:
            return TargetAnswer(content, claim=served_claim(field))
        except ValueError as exc:
            raise TargetError(f"{name}: {self.base_url} answered a ctxleak field whose claim "
                              f"cannot be read: {exc}", index=index) from None

    def _masked(self, exc: Any) -> str:
        return mask_key(" ".join(str(exc).split())[:300], self._forms)

    def describe(self) -> str:
        return f"OpenAI-compatible chat endpoint {self.base_url}, model {self.model}"

    def fingerprint(self) -> str:
        return "endpoint:" + fingerprint_of(self.base_url, self.model, self.system,
                                            self.max_tokens, self.temperature, self.seed,
                                            self.extra_body)


def served_claim(field: Any) -> Claim | None:
    """The claim a ``ctxleak serve`` answer was released under, from its ``ctxleak`` field
    (docs/deploy-cid.md): another mechanism's claim per response (``epsilon``, ``delta``,
    ``relation``: the most the answer may spend, reserved and charged); bounded Context
    Influence Decoding's ε per token over the tokens it released ("Estimating Privacy Leakage
    of Augmented Contextual Knowledge in Language Models", Thm B.1), any replacement of the
    context; plain CID's none (ε = 0 at λ = 0). None where the answer has no such field (not
    a ``ctxleak serve`` answer, or one passed through to its upstream). A field that is not
    one of these raises :class:`ValueError` in one line naming the field: its numbers are read
    by :mod:`ctxleak.domains` (``true`` is not an ε, ``7.5`` not a count of tokens)."""
    if field is None:
        return None
    if not isinstance(field, Mapping):
        raise ValueError(f"a {type(field).__name__}, not an object")
    mode = field.get("mode")
    try:
        if mode == "mechanism":
            relation = field.get("relation")
            if not isinstance(relation, str):
                raise ConfigError(f"relation must be text, got {type(relation).__name__}")
            delta = real(field.get("delta"), "delta", minimum=0.0, maximum=1.0, allow_none=True)
            return Claim(real(field.get("epsilon"), "epsilon", minimum=0.0, allow_none=True),
                         delta or 0.0, relation)
        if mode == "bounded":
            return Claim(real(field.get("epsilon"), "epsilon", minimum=0.0)
                         * whole(field.get("tokens"), "tokens", minimum=0), 0.0, "context")
        if mode == "lambda":
            return Claim(0.0, 0.0, "context") if real(field.get("lambda"), "lambda") == 0 \
                else Claim(None)
    except (ConfigError, KeyError, TypeError, OverflowError) as exc:
        raise ValueError(f"{mode} answer: {exc}") from None
    raise ValueError(f"mode {mode!r} is none of mechanism, bounded, lambda")


#: The error codes and types of a 429 that no wait undoes: OpenAI's spent quota, ``ctxleak
#: serve``'s spent privacy budget.
SPENT = frozenset({"insufficient_quota", "budget_exhausted"})


def _spent(exc: Any) -> bool:
    """Whether ``exc`` is a 429 that says a quota or budget is spent (:data:`SPENT`)."""
    return bool({getattr(exc, "code", None), getattr(exc, "type", None)} & SPENT)


def _short(text: str, n: int = 60) -> str:
    flat = " ".join(text.split())
    return repr(flat if len(flat) <= n else flat[:n] + "…")


def _read_key(env: str | None) -> str | None:
    """The API key from the environment variable ``env`` names (None: no key)."""
    if env is None:
        return None
    key = os.environ.get(env)
    if not key:
        raise ConfigError(f"api_key_env: the environment variable {env} is not set (or empty)",
                          param="api_key_env")
    return key


def _check(*, base_url: str, max_tokens: int, temperature: float, concurrency: int,
           rate_per_s: float | None, timeout_s: float, retries: int, backoff_s: float) -> None:
    """One :class:`ConfigError` naming the first bad setting (numbers read by
    :mod:`ctxleak.domains`: counts are integers, not ``True``; quantities finite)."""
    if not base_url.startswith(("http://", "https://")):
        raise ConfigError(f"base_url must be an http(s) address, not {base_url!r}",
                          param="base_url")
    whole(max_tokens, "max_tokens", minimum=1)
    real(temperature, "temperature", minimum=0)
    whole(concurrency, "concurrency", minimum=1)
    real(rate_per_s, "rate_per_s", minimum=0, strict_min=True, allow_none=True)
    real(timeout_s, "timeout_s", minimum=0, strict_min=True)
    whole(retries, "retries", minimum=0)
    real(backoff_s, "backoff_s", minimum=0)


def _openai() -> Any:
    """The ``openai`` package (optional: only a chat endpoint target needs it)."""
    try:
        import openai
    except ImportError:
        raise ConfigError("a chat endpoint target needs the openai package: pip install openai",
                          param="base_url") from None
    return openai


__all__ = ["KEY_MASK", "MAX_WAIT_S", "SPENT", "ChatEndpointTarget", "ChatRequest", "KeyMask",
           "retry_delay", "served_claim"]
