"""The vLLM dialect: token-id prompts scored with vLLM's ``prompt_logprobs`` extension.

- continuation log-probs: ``"prompt": [[ids], ...]`` with ``prompt_logprobs: 1`` and
  ``max_tokens: 1``; for every prompt position the log-prob of the actual token, keyed by its id
  (teacher forcing), and of the most likely token, so that each position is checked on its own
  (their probabilities sum to at most 1). Continuations of a few tokens go token by token through
  ``allowed_token_ids`` requests instead, which the server's prefix cache serves;
- candidate next-token log-probs: one token restricted to the candidate (``allowed_token_ids``),
  whose returned log-prob is the raw, unrestricted one, with the raw log-probs of the
  :data:`~ctxleak.engine.served.answers.TOP_CHECKED` most likely tokens, so that an answer of one
  value is checked on its own (a uniform or shifted distribution shows in them);
- sampling: ``n``, ``seed``, ``temperature``, ``min_tokens`` and the EOS ids as
  ``stop_token_ids``, so a response ends as the in-process one does;
- the whole next-token distribution: ``logprobs: -1`` with ``return_tokens_as_token_ids``
  (keys ``token_id:N``: the decoded strings of different ids collide otherwise), one request per
  prompt and step, which the server's prefix cache serves (a server started without
  ``--max-logprobs -1`` is refused at the first such request);
- the server's tokenizer is compared with the local one on a probe text (``/tokenize``);
- Context Influence Decoding inside the server, where ctxleak's plugin is loaded (probed when
  ctxleak connects, :mod:`ctxleak.engine.served.cid_plugin`): the model then declares
  :data:`~ctxleak.engine.capabilities.CID_DECODING` and every CID answer goes to the plugin;
  where the plugin takes teacher-forced answers (protocol 2) it declares
  :data:`~ctxleak.engine.capabilities.CID_SCORING` too, and responses are scored under CID
  there (``decode_pairs`` with forced jobs) instead of by whole distributions.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from ctxleak.engine.capabilities import (
    CID_DECODING,
    CID_SCORING,
    SERVED_DISTRIBUTION,
    check_capabilities,
)
from ctxleak.engine.pairs import PairAnswer, PairJob
from ctxleak.engine.served import cid_plugin
from ctxleak.engine.served.answers import TOP_CHECKED, token_id
from ctxleak.engine.served.base import PROBE_TEXT, SHORT_CONTINUATION, ServedLM, first_difference
from ctxleak.engine.served_client import ServerError
from ctxleak.errors import ConfigError


@dataclass
class VLLMServedLM(ServedLM):
    """A model served by vLLM (its OpenAI-compatible server with its extensions)."""

    api: ClassVar[str] = "vllm"
    capabilities: frozenset[str] = SERVED_DISTRIBUTION
    #: The flags of the server's CID plugin (None: no plugin, or not probed).
    plugin: dict[str, Any] | None = field(default=None, repr=False, compare=False)
    #: Answers the plugin decoded, by the data-parallel rank of the engine that decoded them
    #: (as its records say; one rank, 0, on a server without data parallelism).
    decoded_ranks: dict[int, int] = field(default_factory=dict, repr=False, compare=False)

    def check_server(self) -> None:
        """The checks of every served model, then the probe for ctxleak's CID plugin: where it
        answers, CID decodes inside the server (:data:`CID_DECODING`), and scores there where
        the plugin takes forced answers (:data:`CID_SCORING`)."""
        super().check_server()
        self.plugin = cid_plugin.probe_plugin(self)
        if self.plugin is not None:
            self.capabilities = self.capabilities | {CID_DECODING}
        if cid_plugin.scores_pairs(self.plugin):
            self.capabilities = self.capabilities | {CID_SCORING}

    def decode_pairs(self, jobs: Sequence[PairJob]) -> list[PairAnswer]:
        """CID answers decoded by the server's plugin (:func:`cid_plugin.decode_pairs`), jobs
        with ``forced`` tokens scored there (refused where the plugin does not take them), jobs
        with ``ex_post`` refused (a :class:`ServerError`: the caller decodes them by its own
        loop) where the plugin is older than protocol 3."""
        if self.plugin is None:
            return super().decode_pairs(jobs)
        if any(job.forced for job in jobs):
            check_capabilities(self, {CID_SCORING: "a forced answer needs ctxleak's plugin of "
                                      "protocol 2 or later in the server: install this "
                                      "ctxleak there and restart it"}, what="this scoring")
        if any(job.ex_post for job in jobs) and not cid_plugin.records_ex_post(self.plugin):
            raise ServerError(f"the CID plugin of the vLLM server at {self.info.base_url} does "
                              "not record plain CID's ex-post ε (protocol 3): install this "
                              "ctxleak there and restart it")
        return cid_plugin.decode_pairs(self, jobs, self.plugin, self.decoded_ranks)

    def _continuations(self, prompts: Sequence[Sequence[int]],
                       continuations: Sequence[Sequence[int]]) -> list[np.ndarray]:
        """Continuations of at most :data:`SHORT_CONTINUATION` tokens (labels, PII values)
        token by token through :meth:`_allowed`, which the server's prefix cache serves; longer
        ones with ``prompt_logprobs`` (the same numbers, one pass, no prefix cache)."""
        out: list[np.ndarray] = [np.zeros(0)] * len(prompts)
        short = [i for i, c in enumerate(continuations)
                 if 0 < len(c) <= SHORT_CONTINUATION]
        if short:
            pairs = [(list(prompts[i]) + list(continuations[i][:t]), int(continuations[i][t]))
                     for i in short for t in range(len(continuations[i]))]
            for i in short:
                if not prompts[i]:
                    raise ValueError(f"prompt {i} is empty: a continuation needs at least one "
                                     "prompt token")
            flat = self._allowed(pairs)
            at = 0
            for i in short:
                n = len(continuations[i])
                out[i] = np.asarray(flat[at:at + n], dtype=np.float64)
                at += n
        rest = [i for i in range(len(prompts)) if i not in set(short)]
        for i, row in zip(rest, self._appended_logprobs(prompts, continuations, rest)):
            out[i] = row
        return out

    def candidate_logprobs(self, prompts: Sequence[Sequence[int]],
                           token_ids: Sequence[int]) -> np.ndarray:
        """``log p(c | prompt)`` of each candidate ``c``: float64 ``[N, len(token_ids)]``.

        vLLM: one next token per prompt restricted to the candidate (``allowed_token_ids``),
        whose returned log-prob is the raw, unrestricted one (its default ``raw_logprobs``);
        such requests use the server's prefix cache, unlike ``prompt_logprobs``."""
        pairs = [(list(p), int(c)) for p in prompts for c in token_ids]
        return self._allowed(pairs).reshape(len(prompts), len(token_ids))

    def _allowed(self, pairs: Sequence[tuple[list[int], int]]) -> np.ndarray:
        """``log p(c | prefix)`` of each (prefix, c): one token per prefix restricted to ``c``
        (``allowed_token_ids``), its raw log-prob; prefixes of one candidate share requests."""
        per = max(1, self.client.options.prompts_per_request)
        by_cand: dict[int, list[int]] = {}
        for i, (_, c) in enumerate(pairs):
            by_cand.setdefault(int(c), []).append(i)
        jobs = [(c, rows[k:k + per]) for c, rows in by_cand.items()
                for k in range(0, len(rows), per)]
        bodies = [{"model": self.info.served_model, "prompt": [pairs[i][0] for i in rows],
                   "max_tokens": 1, "temperature": 0.0, "logprobs": TOP_CHECKED,
                   "allowed_token_ids": [c], "return_tokens_as_token_ids": True}
                  for c, rows in jobs]
        answers = self.client.post_many("/v1/completions", bodies)
        out = np.full(len(pairs), np.nan)
        for (c, rows), answer in zip(jobs, answers):
            for i, choice in zip(rows, self._choices(answer, len(rows))):
                logprobs = choice.get("logprobs") or {}
                tokens = logprobs.get("tokens") or []
                values = logprobs.get("token_logprobs") or []
                if len(tokens) != 1 or token_id(tokens[0]) != c or len(values) != 1:
                    raise ServerError(f"the server at {self.info.base_url} did not keep to the "
                                      f"allowed token {c} (allowed_token_ids)")
                value = self._checked([values[0]], f"candidate token {c}")[0]
                tops = logprobs.get("top_logprobs") or [None]
                top = dict(tops[0]) if isinstance(tops[0], dict) else tops[0]
                if isinstance(top, dict):  # the candidate with the most likely tokens
                    top.setdefault(f"token_id:{c}", value)
                self._checked_top(top, f"candidate token {c}")
                out[i] = value
        return out

    def _score_body(self, seqs: list[list[int]]) -> dict[str, Any]:
        return {"model": self.info.served_model, "prompt": seqs, "max_tokens": 1,
                "temperature": 0.0, "prompt_logprobs": 1, "return_token_ids": True}

    def _read_scores(self, choice: dict[str, Any], seq: list[int]) -> list[float]:
        """Per position p of ``seq``, log p(seq[p] | seq[:p]) (position 0: nan)."""
        rows = choice.get("prompt_logprobs")
        if not isinstance(rows, list) or len(rows) < len(seq):
            raise ServerError(f"the server at {self.info.base_url} returned no prompt "
                              "log-probs: not a vLLM server? (api='openai-echo' uses "
                              "echo + logprobs)")
        got = choice.get("prompt_token_ids")
        if got is not None and list(got) != seq:
            raise ServerError(f"the server at {self.info.base_url} scored other token "
                              "ids than it was sent")
        out = [math.nan]
        for p in range(1, len(seq)):
            entry = rows[p] or {}
            value = entry.get(str(seq[p])) if isinstance(entry, dict) else None
            if value is None:
                raise ServerError(f"the server's prompt log-probs at position {p} lack "
                                  f"token {seq[p]}")
            # the token and the most likely one (prompt_logprobs: 1), checked together
            by_id = self._checked_top(entry, f"position {p} of a prompt", tops=len(entry) > 1)
            out.append(by_id[seq[p]])
        return out
    def _check_tokenizer(self, probe: list[int]) -> None:
        try:
            answer = self.client.post("/tokenize", {"model": self.info.served_model,
                                                    "prompt": PROBE_TEXT,
                                                    "add_special_tokens": False})
        except ServerError as exc:
            if exc.status == 404:  # no /tokenize (not vLLM): the log-prob check still runs
                return
            raise
        theirs = [int(t) for t in answer.get("tokens", [])]
        if theirs != probe:
            raise ConfigError(
                f"the local tokenizer '{self.info.tokenizer}' does not match the server's "
                f"(model '{self.info.served_model}' at {self.info.base_url}): a probe text is "
                f"{len(probe)} tokens here and {len(theirs)} there, first difference at token "
                f"{first_difference(probe, theirs)}. Give the served model's tokenizer "
                "(tokenizer=HF id or folder)", param="tokenizer")
