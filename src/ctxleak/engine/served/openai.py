"""The plain OpenAI-compatible completions dialect (``api="openai-echo"``): any server that
echoes a prompt's log-probs (``echo: true`` + ``logprobs``) with token ids
(``return_tokens_as_token_ids``). Candidates are appended to the prompt and scored; a sampling
request carries only the OpenAI fields, and sampled ids are read from the returned tokens."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

from ctxleak.engine.served.answers import token_id
from ctxleak.engine.served.base import ServedLM
from ctxleak.engine.served_client import ServerError


@dataclass
class OpenAIServedLM(ServedLM):
    """A model behind a plain OpenAI-compatible completions server."""

    api: ClassVar[str] = "openai-echo"

    def _score_body(self, seqs: list[list[int]]) -> dict[str, Any]:
        return {"model": self.info.served_model, "prompt": seqs, "max_tokens": 1,
                "temperature": 0.0, "echo": True, "logprobs": 0,
                "return_tokens_as_token_ids": True}

    def _read_scores(self, choice: dict[str, Any], seq: list[int]) -> list[float]:
        """Per position p of ``seq``, log p(seq[p] | seq[:p]) (position 0: nan)."""
        logprobs = choice.get("logprobs") or {}
        tokens, values = logprobs.get("tokens"), logprobs.get("token_logprobs")
        if not tokens or values is None or len(tokens) < len(seq):
            raise ServerError(f"the server at {self.info.base_url} did not echo the prompt's "
                              "log-probs (echo + logprobs)")
        ids = [token_id(t) for t in tokens[:len(seq)]]
        if ids != seq:
            raise ServerError(f"the server at {self.info.base_url} echoed other tokens than "
                              "it was sent (return_tokens_as_token_ids)")
        return [math.nan] + [float(v) for v in values[1:len(seq)]]


    def _sample_body(self, body: dict[str, Any]) -> dict[str, Any]:
        """Only the OpenAI fields (no ``min_tokens``, ``stop_token_ids``, ``return_token_ids``,
        ``skip_special_tokens``); sampled ids come back as the tokens' ids."""
        body = {k: v for k, v in body.items()
                if k not in ("min_tokens", "stop_token_ids", "return_token_ids",
                             "skip_special_tokens")}
        body["logprobs"] = 0
        body["return_tokens_as_token_ids"] = True
        return body
