"""The privacy proxy's settings (``ctxleak serve``'s flags, :func:`ctxleak.proxy.create_app`'s
keyword)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ctxleak.errors import ConfigError
from ctxleak.proxy.budget import Budgets

ON_EXHAUSTED = ("drop", "refuse")


@dataclass(frozen=True)
class ProxyConfig:
    """How the proxy decodes, what it charges and what it accepts.

    - ``upstream``: the OpenAI-compatible server a request without marked context is passed to
      unchanged (``…/v1/chat/completions``, with ``upstream_api_key`` as its Bearer key where
      given); None: such requests are refused.
    - ``budgets``: ε per document (a default and per-id overrides); ``on_exhausted``: ``drop``
      answers without a document whose budget is spent (said in the response), ``refuse``
      answers HTTP 429.
    - ``charge_ex_post``: plain CID (a fixed λ) also charges its ex-post ε (a data-dependent
      figure, not a guarantee) against the budgets; by default budgets hold guaranteed ε only.
    - ``temperature``, ``max_tokens``, ``min_tokens``: the defaults of a request that does not
      give them; ``max_tokens_limit`` the most a request may ask for.
    - ``api_key``: the Bearer key clients must send (None: none needed).
    - ``max_body_bytes`` (HTTP 413 above it), ``max_concurrent`` requests at once (HTTP 429
      above it), ``upstream_timeout`` seconds (HTTP 504 after it).
    """

    upstream: str | None = None
    upstream_api_key: str | None = None
    budgets: Budgets = field(default_factory=Budgets)
    on_exhausted: str = "drop"
    charge_ex_post: bool = False
    temperature: float = 1.0
    max_tokens: int = 64
    min_tokens: int = 0
    max_tokens_limit: int = 512
    api_key: str | None = None
    max_body_bytes: int = 1 << 20
    max_concurrent: int = 8
    upstream_timeout: float = 60.0
    served_name: str = "ctxleak-cid"

    def __post_init__(self) -> None:
        if self.on_exhausted not in ON_EXHAUSTED:
            raise ConfigError(f"on_exhausted must be one of {', '.join(ON_EXHAUSTED)}, not "
                              f"{self.on_exhausted!r}", param="on_exhausted")
        if not math.isfinite(self.temperature) or self.temperature <= 0:
            raise ConfigError(f"temperature must be > 0, not {self.temperature}",
                              param="temperature")
        if not 1 <= self.max_tokens <= self.max_tokens_limit:
            raise ConfigError(f"max_tokens must be between 1 and max_tokens_limit "
                              f"({self.max_tokens_limit}), not {self.max_tokens}",
                              param="max_tokens")
        if not 0 <= self.min_tokens <= self.max_tokens:
            raise ConfigError(f"min_tokens must be between 0 and max_tokens, not "
                              f"{self.min_tokens}", param="min_tokens")
        for name in ("max_body_bytes", "max_concurrent"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be >= 1, not {getattr(self, name)}", param=name)
        if not self.upstream_timeout > 0:
            raise ConfigError(f"upstream_timeout must be > 0, not {self.upstream_timeout}",
                              param="upstream_timeout")
