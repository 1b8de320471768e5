"""The privacy proxy's settings (``ctxleak serve``'s flags, :func:`ctxleak.proxy.create_app`'s
keyword)."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from ctxleak.errors import ConfigError
from ctxleak.proxy.budget import Budgets
from ctxleak.proxy.composition import Composition, best_order
from ctxleak.proxy.config_inputs import prompt_messages_of
from ctxleak.proxy.datastore_file import datastore_option
from ctxleak.run.classes import classes_of

if TYPE_CHECKING:  # (imported when asked: the budget module stays light)
    from ctxleak.mitigations.mechanisms import Decoding

ON_EXHAUSTED = ("drop", "refuse")
ON_UNFITTABLE = ("refuse", "drop")
#: What an answer without a DP guarantee that is not charged (plain CID's fixed λ without
#: ``charge_ex_post``, scrubbing) may do with a document that has a budget: ``refuse`` the
#: request (HTTP 403), ``drop`` the document (answer without it, said in the response), or
#: ``use`` it uncharged (plain CID's ex-post ε recorded only).
UNGUARANTEED = ("refuse", "drop", "use")

#: The caller of the single ``api_key``, and of a proxy without keys
#: (:mod:`ctxleak.proxy.callers`); the longest caller or end-user name.
DEFAULT, ANONYMOUS = "default", "anonymous"
MAX_USER_CHARS = 64


def check_caller_keys(keys: Mapping[str, str]) -> None:
    """``caller_keys`` as the proxy takes them: non-empty keys, each to a caller name that is
    non-empty, printable and without ``/`` (which separates a key's caller from an end user)."""
    for key, caller in keys.items():
        if not (isinstance(key, str) and key):
            raise ConfigError("caller_keys: a key must be a non-empty string", param="caller_keys")
        if not (isinstance(caller, str) and caller and caller.isprintable() and "/" not in caller
                and len(caller) <= MAX_USER_CHARS):
            raise ConfigError(f"caller_keys: caller name {caller!r} must be 1 to "
                              f"{MAX_USER_CHARS} printable characters without '/'",
                              param="caller_keys")


def _whole(name: str, value: Any, least: int) -> None:
    """A setting that must be an integer (not true or false) of at least ``least``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise ConfigError(f"{name} must be an integer >= {least}, not {value!r}", param=name)


#: The smallest temperature > 0 a request may give: below it the logits divided by T are so
#: large that the mixture's divergence is no longer a finite number and CID would silently
#: decode at another λ (0 asks for greedy decoding).
MIN_TEMPERATURE = 1e-6


def check_upstream(url: str) -> None:
    """Refuse an upstream URL the proxy cannot or must not use: a scheme other than http or
    https (named), no host, or credentials written into it (``user:pass@host``), which would
    reach every client in the proxy's error messages: give the key with ``upstream_api_key``
    (``--upstream-key-env``) instead."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        raise ConfigError(f"the upstream must be an http:// or https:// URL, not a "
                          f"{parts.scheme + '://' if parts.scheme else 'scheme-less'} one",
                          param="upstream")
    if "@" in parts.netloc:
        raise ConfigError("the upstream URL must not carry credentials (user:password@host): "
                          "give its API key with --upstream-key-env", param="upstream")
    if not parts.hostname:
        raise ConfigError("the upstream URL names no host", param="upstream")
    try:
        _ = parts.port
    except ValueError as exc:
        raise ConfigError(f"the upstream URL's port is not a port: {exc}",
                          param="upstream") from None


@dataclass(frozen=True)
class ProxyConfig:
    """How the proxy decodes, what it charges and what it accepts.

    - ``upstream``: the OpenAI-compatible server a request without marked context is passed to
      unchanged (``…/v1/chat/completions``, with ``upstream_api_key`` as its Bearer key where
      given); None: such requests are refused.
    - ``budgets``: ε per document (a default and per-id overrides); ``on_exhausted``: ``drop``
      answers without a document whose budget is spent (said in the response), ``refuse``
      answers HTTP 429.
    - ``on_unfittable``: a request whose reservation (ε·(max_tokens + 1)) is more than a
      document's whole budget, so that it could never use it even unspent: ``refuse`` (HTTP 400
      naming the arithmetic, the default) or ``drop`` (answered without it, with a warning in
      the response's ``ctxleak.warnings``, its headers and the log). A budget of 0 keeps a
      document out of every answer: it is dropped as an exhausted one, without a warning.
    - ``charge_ex_post``: plain CID (a fixed λ) also charges its ex-post ε (a data-dependent
      figure, not a guarantee) against the budgets; by default budgets hold guaranteed ε only.
      Such an answer's spend is known only when it ends: it holds each document's whole
      remaining budget while it decodes (one answer per document at a time), or, with
      ``ex_post_reserve`` ε per token, reserves ε·(max_tokens + 1) like bounded CID (answers
      run side by side; one whose ex-post ε passes its reservation is charged all of it).
    - ``unguaranteed``: what an uncharged answer without a guarantee (plain CID without
      ``charge_ex_post``, scrubbing) may do with a private document that has a budget
      (:data:`UNGUARANTEED`): ``refuse`` (the default: HTTP 403, so no client reads a budgeted
      document without a charge), ``drop`` it, or ``use`` it (nothing is spent: a budget is then
      only as strong as the clients' choice of ``ctxleak.epsilon``).
    - ``classes``: the operator's class of each document id (``ctxleak serve --classes FILE``:
      a mapping, a JSONL or CSV file, or ``demo-datastore``, the bundled datastore's: its 240
      common documents ``public``, its 48 private ones ``restricted``); a class a client sends
      must be the operator's or the ledger's, never a new one. Class ``public`` documents are
      part of the prompt under every mechanism (never bounded, never charged, never in the
      ledger).
    - ``public_top_k``: over a datastore, the best this many of its public documents for the
      question (BM25 over the public documents alone) are put in every prompt, not private
      ones; the mechanism answers over the datastore's private documents only.
    - ``temperature``, ``max_tokens``, ``min_tokens``: the defaults of a request that does not
      give them; ``max_tokens_limit`` the most a request may ask for.
    - ``api_key``: the Bearer key clients must send (None: none needed), caller ``default``;
      ``caller_keys``: more keys, API key → caller name (:mod:`ctxleak.proxy.callers`,
      ``ctxleak serve --caller-keys FILE``); ``caller_header``: a header (e.g.
      ``x-ctxleak-user``) in which the operator's app names its end user, the caller then
      ``<key's caller>/<value>``.
    - ``caller_share``: the fraction in (0, 1] of each document's budget one caller may spend
      (1: no share limit); a caller past it is answered without the document, or HTTP 429
      ``caller_share_spent`` (``on_exhausted="refuse"``). ``caller_rate``: requests a minute
      per caller (None: no limit), a token bucket in this process (HTTP 429 ``rate_limited``
      with ``Retry-After``).
    - ``max_body_bytes`` (HTTP 413 above it), ``max_concurrent`` requests answered at once
      (counted once a request's body is read) and ``max_queued`` more waiting in arrival order
      for a slot (HTTP 429 past both), ``upstream_timeout`` seconds (HTTP 504
      after it; also each request of CID decoding through the upstream), ``body_timeout``
      seconds a client may take to send its request body (HTTP 408 after it).
    - ``mechanism``: the defence that answers a request naming none (neither
      ``ctxleak.lambda``/``ctxleak.epsilon`` nor ``ctxleak.mechanism``): a
      :class:`~ctxleak.mitigations.mechanisms.Mechanism` or its spec (``"dp-rag:eps=5"``,
      :func:`~ctxleak.mitigations.named.parse_mechanism`); None: such a request is refused, as
      before. A ``cid`` spec answers by CID exactly as ``ctxleak.lambda``/``ctxleak.epsilon``
      do; any other is charged its claim (:mod:`ctxleak.proxy.charging`).
    - ``datastore``: the documents a mechanism answers over, as its paper has it (a DP vote's
      voters each retrieve from their own shard, DP-RAG retrieves privately): a
      :class:`~ctxleak.mitigations.datastore.Datastore`, a JSONL file of ``{"id", "text"}``,
      or ``demo-datastore`` (the bundled one). Every chat request is then answered by the
      mechanism over it (none is passed through), and each answer is charged its claim's ε
      to every private document of the datastore: the claim is over the datastore.
    - ``prompt_messages``: the app's chat messages the mechanism's prompt is rendered from
      (``{context}`` and ``{query}`` slots, or a built-in name such as ``short-answer``);
      None: ctxleak's template.
    - ``accounting``: how a document's answers compose (:mod:`~ctxleak.proxy.composition`):
      ``basic`` (ε adds up) or ``renyi`` (Rényi DP at one order, ``renyi_order`` or the best
      for ``mechanism`` and the smallest budget; each budget ε holds at ``budget_delta``).
    - ``worker_threads``: the worker threads that run decoding and ledger calls (None: the
      server's default, 40); ``metrics_documents``: how many documents, those with the least budget
      left, ``/metrics`` reports one by one.
    - ``audit_seeds``: a client's ``seed`` is used for an answer under a DP guarantee, whose
      claim then says the seed is known and the guarantee void (an operator's audit); by
      default such a seed is HTTP 400 and the noise comes from a server secret.
    - ``operator_api_key``: the Bearer key of the documents API and of ``/metrics``'s
      per-document series; None: those are refused (HTTP 403) where clients need ``api_key``,
      and open to anyone on a keyless (development) proxy.
    - ``allowed_mechanisms``: the mechanisms a request's ``ctxleak.mechanism`` may name (specs
      or mechanisms, compared by key; the proxy's ``mechanism`` always is);
      ``allow_any_mechanism``: any (research), still within the bounds below.
    - ``max_documents``: the most documents one request may give; ``max_streams``: the most
      prompt streams one answer decodes at once (a vote's voters and its no-retrieval
      stream); a request past either is HTTP 400 ``over_limit``.
    - ``max_messages``: the most chat messages one request may send (HTTP 400 ``over_limit``);
      ``max_message_chars``: the most characters one message's text may have (HTTP 413
      ``message_too_long``); a prompt whose tokens and ``max_tokens`` do not fit the model's
      window is HTTP 413 ``prompt_too_long`` (:mod:`~ctxleak.proxy.bounds`), all before
      anything is reserved or decoded.
    """

    upstream: str | None = None
    upstream_api_key: str | None = None
    budgets: Budgets = field(default_factory=Budgets)
    on_exhausted: str = "drop"
    on_unfittable: str = "refuse"
    charge_ex_post: bool = False
    ex_post_reserve: float | None = None
    unguaranteed: str = "refuse"
    classes: Any = field(default_factory=dict)  # a Mapping after __post_init__ (a file is read)
    public_top_k: int = 2
    temperature: float = 1.0
    max_tokens: int = 64
    min_tokens: int = 0
    max_tokens_limit: int = 512
    api_key: str | None = None
    caller_keys: Mapping[str, str] = field(default_factory=dict)
    caller_header: str | None = None
    caller_share: float = 1.0
    caller_rate: float | None = None
    max_body_bytes: int = 1 << 20
    max_concurrent: int = 8
    max_queued: int = 32
    upstream_timeout: float = 60.0
    body_timeout: float = 30.0
    served_name: str = "ctxleak-cid"
    worker_threads: int | None = None
    metrics_documents: int = 20
    accounting: str = "basic"
    budget_delta: float = 1e-6
    renyi_order: float | None = None
    mechanism: Any = None  # a Mechanism after __post_init__ (a spec string is parsed)
    datastore: Any = None  # a Datastore after __post_init__ (a path or a name is read)
    prompt_messages: Any = None  # chat messages after __post_init__ (a name or path is read)
    audit_seeds: bool = False
    operator_api_key: str | None = None
    allowed_mechanisms: tuple[Any, ...] = ()  # Mechanisms after __post_init__
    allow_any_mechanism: bool = False
    max_documents: int = 64
    max_streams: int = 64
    max_messages: int = 256
    max_message_chars: int = 65536
    #: the ledger's composition (:mod:`~ctxleak.proxy.composition`), set from ``accounting``
    composition: Composition = field(default_factory=Composition, init=False, compare=False)

    def __post_init__(self) -> None:
        for name, allowed in (("on_exhausted", ON_EXHAUSTED), ("on_unfittable", ON_UNFITTABLE),
                              ("unguaranteed", UNGUARANTEED)):
            if getattr(self, name) not in allowed:
                raise ConfigError(f"{name} must be one of {', '.join(allowed)}, not "
                                  f"{getattr(self, name)!r}", param=name)
        if isinstance(self.classes, (str, Path)):
            object.__setattr__(self, "classes", classes_of(self.classes))
        _whole("public_top_k", self.public_top_k, 0)
        for doc, cls in self.classes.items():
            if not (isinstance(doc, str) and isinstance(cls, str) and doc and cls):
                raise ConfigError(f"classes: document {doc!r} must have a class name, not "
                                  f"{cls!r}", param="classes")
        self._check_callers()
        if self.ex_post_reserve is not None and not (
                math.isfinite(self.ex_post_reserve * (self.max_tokens_limit + 1))
                and self.ex_post_reserve > 0):
            raise ConfigError(f"ex_post_reserve must be a number > 0 (ε per token) whose "
                              f"reservation × (max_tokens_limit + 1) is finite, not "
                              f"{self.ex_post_reserve}", param="ex_post_reserve")
        if self.worker_threads is not None:
            _whole("worker_threads", self.worker_threads, 1)
        if not math.isfinite(self.temperature) or self.temperature < MIN_TEMPERATURE:
            raise ConfigError(f"temperature must be at least {MIN_TEMPERATURE:g}, not "
                              f"{self.temperature}", param="temperature")
        if not 1 <= self.max_tokens <= self.max_tokens_limit:
            raise ConfigError(f"max_tokens must be between 1 and max_tokens_limit "
                              f"({self.max_tokens_limit}), not {self.max_tokens}",
                              param="max_tokens")
        if not 0 <= self.min_tokens <= self.max_tokens:
            raise ConfigError(f"min_tokens must be between 0 and max_tokens, not "
                              f"{self.min_tokens}", param="min_tokens")
        for name, least in (("metrics_documents", 0), ("max_body_bytes", 1),
                            ("max_concurrent", 1), ("max_queued", 0),
                            ("max_documents", 1), ("max_streams", 2), ("max_messages", 1),
                            ("max_message_chars", 1)):
            if getattr(self, name) < least:
                raise ConfigError(f"{name} must be >= {least}, not {getattr(self, name)}",
                                  param=name)
        for name in ("upstream_timeout", "body_timeout"):
            if not getattr(self, name) > 0:
                raise ConfigError(f"{name} must be > 0, not {getattr(self, name)}", param=name)
        if self.upstream is not None:
            check_upstream(self.upstream)
        if self.mechanism is not None:
            self._check_mechanism()
        if self.prompt_messages is not None:
            object.__setattr__(self, "prompt_messages", prompt_messages_of(self.prompt_messages))
        if self.datastore is not None:
            object.__setattr__(self, "datastore", datastore_option(self.datastore,
                                                                   self.mechanism))
        self._check_allowed()
        self._compose()

    def _compose(self) -> None:
        """``composition`` from ``accounting``, ``budget_delta`` and ``renyi_order`` (None: the
        order at which the smallest budget holds the most answers of ``mechanism`` at
        ``max_tokens``, :func:`~ctxleak.proxy.composition.best_order`)."""
        order = self.renyi_order
        charge = None if self.mechanism is None else self.mechanism.charge(self.decoding())
        if self.accounting == "renyi":
            if self.charge_ex_post:
                raise ConfigError("charge_ex_post: plain CID's ex-post ε has no Rényi curve, so "
                                  "a ledger kept in Rényi DP cannot charge it", param="accounting")
            if charge is not None and charge.guaranteed and charge.events is None:
                raise ConfigError(f"accounting: {self.mechanism.key()}'s steps are (ε, δ)-DP "
                                  "with no Rényi curve: keep its ledger with basic composition",
                                  param="accounting")
            if order is None:
                events = None if charge is None else charge.events
                if charge is not None and events is not None and charge.per_token is not None:
                    events = tuple((e, n * (self.max_tokens + 1)) for e, n in events)
                b = self.budgets
                limits = [x for x in (b.default, *b.classes.values(), *b.overrides.values())
                          if x is not None and x > 0]
                order = best_order(events, min(limits, default=0.0), self.budget_delta)
        object.__setattr__(self, "composition", Composition(self.accounting, order,
                                                            self.budget_delta))

    def decoding(self) -> Decoding:
        """The :class:`~ctxleak.mitigations.mechanisms.Decoding` of a request that gives no
        settings of its own: ``temperature``, ``max_tokens``, ``min_tokens``."""
        from ctxleak.mitigations.mechanisms import Decoding

        return Decoding(temperature=self.temperature, max_new_tokens=self.max_tokens,
                        min_new_tokens=self.min_tokens)

    def _check_callers(self) -> None:
        """The callers' keys, header, share and rate (:mod:`ctxleak.proxy.callers`)."""
        check_caller_keys(self.caller_keys)
        if self.api_key is not None and self.caller_keys.get(self.api_key, DEFAULT) \
                != DEFAULT:
            raise ConfigError("caller_keys: the api_key is caller 'default', not "
                              f"{self.caller_keys[self.api_key]!r}", param="caller_keys")
        header = self.caller_header
        if header is not None:
            if not re.fullmatch(r"[A-Za-z0-9!#$%&'*+.^_`|~-]{1,64}", header) or \
                    header.lower() in ("authorization", "host", "content-length", "cookie"):
                raise ConfigError(f"caller_header must be an HTTP header name other than "
                                  f"authorization, host, cookie and content-length, not "
                                  f"{header!r}", param="caller_header")
            object.__setattr__(self, "caller_header", header.lower())
        if not (isinstance(self.caller_share, (int, float)) and 0 < self.caller_share <= 1):
            raise ConfigError(f"caller_share must be a fraction in (0, 1], not "
                              f"{self.caller_share!r}", param="caller_share")
        rate = self.caller_rate
        if rate is not None and not (isinstance(rate, (int, float)) and math.isfinite(rate)
                                     and rate > 0):
            raise ConfigError(f"caller_rate must be a number > 0 (requests per minute), not "
                              f"{rate!r}", param="caller_rate")

    def limits_text(self) -> str:
        """What a client meets at the proxy's limits, in words (``ctxleak serve``'s start
        line)."""
        policy = {"refuse": "refused (HTTP 403)", "drop": "left out of the answer",
                  "use": "used uncharged"}[self.unguaranteed]
        what = "scrubbing" if self.charge_ex_post else "plain CID, scrubbing"
        charged = "plain CID is charged its ex-post ε; " if self.charge_ex_post else ""
        return (f"{self.max_concurrent} requests answered at once, {self.max_queued} more wait "
                f"in arrival order, past that HTTP 429; {charged}a document with a budget "
                f"asked for without a guarantee ({what}) is {policy}; "
                f"{len(self.classes)} document class(es) set by the operator")

    def callers_text(self) -> str:
        """Who the callers are and what each may take, in words (``ctxleak serve``'s start
        line)."""
        keys = len(self.caller_keys) + (self.api_key is not None)
        who = f"{keys} caller key(s)" if keys else "no keys: one caller, anonymous"
        if self.caller_header is not None:
            who += f", end users named by the app in {self.caller_header}"
        share = "no share limit" if self.caller_share >= 1 else \
            f"each may spend {self.caller_share:g} of a document's budget"
        rate = "no rate limit" if self.caller_rate is None else \
            f"{self.caller_rate:g} requests a minute each (this replica's own count)"
        return f"callers: {who}; {share}; {rate}"

    def _check_mechanism(self) -> None:
        """Parse ``mechanism`` (a :class:`ConfigError` naming ``mechanisms``, the CLI's
        ``--mechanism``) and check that it can claim an answer of ``max_tokens``."""
        from ctxleak.mitigations.named import PARAM, parse_mechanism

        mechanism = parse_mechanism(self.mechanism)
        object.__setattr__(self, "mechanism", mechanism)
        try:
            mechanism.claim(self.decoding())
        except ConfigError as exc:
            raise ConfigError(f"{PARAM}: {mechanism.key()} cannot answer max_tokens "
                              f"{self.max_tokens}: {exc}", param=PARAM) from None

    def _check_allowed(self) -> None:
        """Parse ``allowed_mechanisms`` (a bad spec names ``allowed_mechanisms``, the CLI's
        ``--allow-mechanism``) and check the proxy's own mechanism against ``max_streams``: the
        fewest documents it reads, or the whole datastore it answers over."""
        from ctxleak.mitigations.named import parse_mechanism

        parsed = []
        for spec in self.allowed_mechanisms:
            try:
                parsed.append(parse_mechanism(spec))
            except ConfigError as exc:
                raise ConfigError(f"allowed_mechanisms: "
                                  f"{str(exc).removeprefix('mechanisms: ')}",
                                  param="allowed_mechanisms") from None
        object.__setattr__(self, "allowed_mechanisms", tuple(parsed))
        for mechanism in (self.mechanism, *parsed):
            if mechanism is None:
                continue
            store = self.datastore
            streams = mechanism.streams(len(store), True) if store is not None and \
                mechanism.over_datastore else mechanism.streams(mechanism.documents_needed(),
                                                                False)
            if streams > self.max_streams:
                raise ConfigError(f"max_streams: {mechanism.key()} decodes {streams} prompt "
                                  f"streams at once, more than max_streams "
                                  f"({self.max_streams}): raise --max-streams or deploy a "
                                  f"smaller mechanism", param="max_streams")

    def allowed_keys(self) -> tuple[str, ...]:
        """The keys of the mechanisms a request may name: the proxy's own first, then
        ``allowed_mechanisms``, each once."""
        own = () if self.mechanism is None else (self.mechanism.key(),)
        return tuple(dict.fromkeys((*own, *(m.key() for m in self.allowed_mechanisms))))
