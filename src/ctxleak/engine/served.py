"""A model behind an OpenAI-compatible completions API (vLLM first): :class:`ServedLM`.

The server gives three of the engine's operations exactly (:mod:`ctxleak.engine.capabilities`):

- continuation log-probs: vLLM scores token-id prompts (``"prompt": [[ids], ...]``) with
  ``prompt_logprobs: 0`` and ``max_tokens: 1``, and returns for every prompt position the
  log-prob of the actual token, keyed by its id. The continuation is appended to each prompt, so
  its log-probs are those of teacher forcing. Other servers: the OpenAI ``echo: true`` +
  ``logprobs`` form, with ``return_tokens_as_token_ids``;
- candidate next-token log-probs: each candidate appended to the prompt and scored the same way
  (the server's prefix cache computes the shared prompt once); the whole vocabulary from the
  first generated token's ``logprobs`` (the server must allow that many: vLLM's
  ``--max-logprobs``);
- sampling: ``n``, ``seed``, ``temperature``, ``min_tokens`` and the EOS ids as
  ``stop_token_ids``, so a response ends as :func:`ctxleak.engine.generation.generate_many`'s.

Log-probs come back as the raw temperature-1 distribution (vLLM's default ``raw_logprobs``),
whatever the sampling temperature; sums are taken in float64. Measured on this machine (the
default 135M model, float32, one CPU core for the server): served log-probs agree with
in-process scoring to 6e-5 nats per token and are identical across repeats and batching.

The tokenizer stays local (a Hugging Face id or folder; for ``default`` the converted cache
folder the server is started on). Before a run, :meth:`ServedLM.check_server` asks the server
to tokenize a probe text and compares, and refuses log-probs that are impossible (positive,
not finite) or uniform (a model folder the server read wrongly).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
from transformers import AutoTokenizer, GenerationConfig

from ctxleak.engine.batching import BatchPolicy
from ctxleak.engine.capabilities import SERVED
from ctxleak.engine.models import (
    NAMED_MODELS,
    TokenizerText,
    _converted,
    _resolve_source,
    bos_convention,
)
from ctxleak.engine.served_client import (
    ClientOptions,
    ServedClient,
    ServerError,
    api_key_from_env,
    public_url,
)
from ctxleak.engine.served_options import check_request_timeout, check_retries
from ctxleak.errors import ConfigError

PROBE_TEXT = ("The quick brown fox jumps over the lazy dog. Privacy matters: a model should "
              "not repeat the documents it was given, 12345.")
# A served model whose mean log-prob on the probe text is within this many nats of the uniform
# distribution's -log V is refused as uniform (a trained model scores English far better).
UNIFORM_MARGIN_NATS = 1.0
LOGPROB_SLACK = 1e-4  # float noise above 0 that a log-prob may show
# Continuations this short are scored token by token through allowed_token_ids requests, which
# the server's prefix cache serves (prompt_logprobs requests recompute the whole prompt).
SHORT_CONTINUATION = 4


@dataclass(frozen=True)
class ServedInfo:
    """Provenance of a served model, written into every ``results.json`` (no credentials)."""

    name: str
    served_model: str
    base_url: str
    tokenizer: str
    api: str = "vllm"  # "vllm" (token-id prompts, prompt_logprobs) or "openai-echo"
    server: dict[str, Any] = field(default_factory=dict)  # /v1/models and /version
    source: str = "served"
    path: str = ""
    dtype: str = "server"
    device: str = "server"
    chat_template: bool = False

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class ServedLM(TokenizerText):
    """A served model with its local tokenizer and the conventions the engine needs (the same
    attributes as :class:`ctxleak.engine.models.LM` for prompts and text, no weights)."""

    client: ServedClient
    tokenizer: Any
    info: ServedInfo
    use_chat_template: bool = False
    bos_ids: list[int] = field(default_factory=list)
    eos_ids: list[int] = field(default_factory=list)
    batching: BatchPolicy = field(default_factory=BatchPolicy, repr=False, compare=False)
    max_model_len: int | None = None
    capabilities: frozenset[str] = SERVED

    @property
    def device(self) -> torch.device:
        """Where returned tensors live (the CPU): the batching policy's device kind."""
        return torch.device("cpu")

    @property
    def vocab_size(self) -> int:
        return int(len(self.tokenizer))

    @property
    def max_length(self) -> int | None:
        return self.max_model_len

    # ---- the three operations --------------------------------------------------------------
    def sequence_logprobs(self, seqs: Sequence[Sequence[int]], starts: Sequence[int]
                          ) -> list[np.ndarray]:
        """``log p(seq[p] | seq[:p])`` for ``p`` in ``starts[i] .. len(seq) - 1`` of each
        sequence (``starts[i] >= 1``), float64, temperature 1."""
        for i, (s, a) in enumerate(zip(seqs, starts)):
            if not 1 <= a <= len(s):
                raise ValueError(f"sequence {i}: scored positions from {a} in a sequence of "
                                 f"{len(s)} (need at least one prompt token)")
        todo = [i for i in range(len(seqs)) if starts[i] < len(seqs[i])]
        out = [np.zeros(0)] * len(seqs)
        per = max(1, self.client.options.prompts_per_request)
        chunks = [todo[k:k + per] for k in range(0, len(todo), per)]
        bodies = [self._score_body([list(seqs[i]) for i in chunk]) for chunk in chunks]
        answers = self.client.post_many("/v1/completions", bodies)
        for chunk, answer in zip(chunks, answers):
            choices = sorted(answer.get("choices", []), key=lambda c: int(c.get("index", 0)))
            if len(choices) != len(chunk):
                raise ServerError(f"the server at {self.info.base_url} answered {len(choices)} "
                                  f"choices for {len(chunk)} prompts")
            for i, choice in zip(chunk, choices):
                row = self._read_scores(choice, list(seqs[i]))
                out[i] = np.asarray(row[starts[i]:], dtype=np.float64)
        return out

    def continuation_logprobs(self, prompts: Sequence[Sequence[int]],
                              continuations: Sequence[Sequence[int]]) -> list[np.ndarray]:
        """Teacher-forced ``log p(y_t | prompt_i, y_<t)`` of each continuation (float64).

        vLLM: continuations of at most :data:`SHORT_CONTINUATION` tokens (labels, PII values)
        token by token through :meth:`_allowed`, which the server's prefix cache serves; longer
        ones with ``prompt_logprobs`` (the same numbers, one pass, no prefix cache)."""
        out: list[np.ndarray] = [np.zeros(0)] * len(prompts)
        short = [i for i, c in enumerate(continuations)
                 if self.info.api == "vllm" and 0 < len(c) <= SHORT_CONTINUATION]
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
        seqs = [list(prompts[i]) + list(continuations[i]) for i in rest]
        for i, row in zip(rest, self.sequence_logprobs(seqs, [len(prompts[i]) for i in rest])):
            out[i] = row
        return out

    def candidate_logprobs(self, prompts: Sequence[Sequence[int]],
                           token_ids: Sequence[int]) -> np.ndarray:
        """``log p(c | prompt)`` of each candidate ``c``: float64 ``[N, len(token_ids)]``.

        vLLM: one next token per prompt restricted to the candidate (``allowed_token_ids``),
        whose returned log-prob is the raw, unrestricted one (its default ``raw_logprobs``);
        such requests use the server's prefix cache, unlike ``prompt_logprobs``. Other
        servers: the candidate appended to the prompt and scored."""
        if self.info.api == "vllm":
            return self._allowed_logprobs(prompts, [int(c) for c in token_ids])
        seqs = [list(p) + [int(c)] for p in prompts for c in token_ids]
        rows = self.sequence_logprobs(seqs, [len(s) - 1 for s in seqs])
        return np.asarray([r[0] for r in rows], dtype=np.float64).reshape(len(prompts),
                                                                           len(token_ids))

    def _allowed_logprobs(self, prompts: Sequence[Sequence[int]], cands: list[int]
                          ) -> np.ndarray:
        pairs = [(list(p), c) for p in prompts for c in cands]
        return self._allowed(pairs).reshape(len(prompts), len(cands))

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
                   "max_tokens": 1, "temperature": 0.0, "logprobs": 0,
                   "allowed_token_ids": [c], "return_tokens_as_token_ids": True}
                  for c, rows in jobs]
        answers = self.client.post_many("/v1/completions", bodies)
        out = np.full(len(pairs), np.nan)
        for (c, rows), answer in zip(jobs, answers):
            for choice in answer.get("choices", []):
                i = rows[int(choice.get("index", 0))]
                logprobs = choice.get("logprobs") or {}
                tokens = logprobs.get("tokens") or []
                if len(tokens) != 1 or _token_id(tokens[0]) != c:
                    raise ServerError(f"the server at {self.info.base_url} did not keep to the "
                                      f"allowed token {c} (allowed_token_ids)")
                out[i] = float(logprobs["token_logprobs"][0])
        if np.isnan(out).any():
            raise ServerError(f"the server at {self.info.base_url} answered fewer choices than "
                              "prompts")
        return out

    def vocab_logprobs(self, prompts: Sequence[Sequence[int]]) -> np.ndarray:
        """The whole next-token distribution ``log p(· | prompt)``: float64 ``[N, V]``, from the
        first generated token's ``logprobs`` (the server must return V of them: vLLM's
        ``--max-logprobs -1``)."""
        k = self.vocab_size
        bodies = [{"model": self.info.served_model, "prompt": [list(p)], "max_tokens": 1,
                   "temperature": 1.0, "logprobs": k, "return_tokens_as_token_ids": True}
                  for p in prompts]
        try:
            answers = self.client.post_many("/v1/completions", bodies)
        except ServerError as exc:
            if exc.status == 400:
                raise ServerError(
                    f"the whole next-token distribution needs {k} log-probs per position, and "
                    f"the server refused ({exc}): start vLLM with --max-logprobs -1 (or "
                    f"{k}), or load the model in-process", status=400) from None
            raise
        out = np.full((len(prompts), k), -np.inf)
        for r, answer in enumerate(answers):
            top = answer["choices"][0]["logprobs"]["top_logprobs"][0]
            for key, value in top.items():
                tid = _token_id(key)
                if tid >= out.shape[1]:
                    out = np.pad(out, ((0, 0), (0, tid + 1 - out.shape[1])),
                                 constant_values=-np.inf)
                out[r, tid] = float(value)
            mass = float(np.exp(out[r][np.isfinite(out[r])]).sum())
            if mass < 1 - 1e-3:
                raise ServerError(
                    f"the server at {self.info.base_url} returned {len(top)} next-token "
                    f"log-probs covering {mass:.4f} of the probability: start vLLM with "
                    "--max-logprobs -1, or load the model in-process")
        return out

    def sample(self, prompts: Sequence[Sequence[int]], seeds: Sequence[int], *,
               temperature: float, max_new_tokens: int, min_new_tokens: int = 0, n: int = 1,
               stop_ids: Sequence[int] | None = None) -> list[list[tuple[list[int], bool]]]:
        """``n`` generations of each prompt, seeded by ``seeds[i]`` (vLLM draws choice j with
        seed + j, so seeds of different prompts must lie n or more apart): for each prompt a
        list of ``(new token ids without the stopping EOS, stopped on EOS)``. ``temperature``
        0 is greedy."""
        stops = [int(t) for t in (self.eos_ids if stop_ids is None else stop_ids)]
        bodies = []
        for p, seed in zip(prompts, seeds):
            body: dict[str, Any] = {
                "model": self.info.served_model, "prompt": [list(p)],
                "max_tokens": int(max_new_tokens), "min_tokens": int(min_new_tokens),
                "temperature": float(temperature), "n": int(n), "seed": int(seed),
                "stop_token_ids": stops, "return_token_ids": True, "skip_special_tokens": False}
            if self.info.api != "vllm":
                body = {k: v for k, v in body.items()
                        if k not in ("min_tokens", "stop_token_ids", "return_token_ids",
                                     "skip_special_tokens")}
                body["logprobs"] = 0
                body["return_tokens_as_token_ids"] = True
            bodies.append(body)
        answers = self.client.post_many("/v1/completions", bodies)
        out = []
        for answer in answers:
            choices = sorted(answer["choices"], key=lambda c: int(c.get("index", 0)))
            out.append([self._read_sample(c, stops) for c in choices])
        return out

    def beam_search(self, prompts: Sequence[Sequence[int]], *, num_beams: int,
                    max_new_tokens: int) -> list[list[int]]:
        """The best of ``num_beams`` beams for each prompt (vLLM's ``use_beam_search``; one
        beam: greedy decoding), EOS and what follows it dropped."""
        if num_beams == 1:
            drawn = self.sample(prompts, [0] * len(prompts), temperature=0.0,
                                max_new_tokens=max_new_tokens)
            return [row[0][0] for row in drawn]
        bodies = [{"model": self.info.served_model, "prompt": [list(p)],
                   "max_tokens": int(max_new_tokens), "n": int(num_beams),
                   "use_beam_search": True, "temperature": 0.0, "return_token_ids": True,
                   "skip_special_tokens": False}
                  for p in prompts]
        answers = self.client.post_many("/v1/completions", bodies)
        out = []
        stops = list(self.eos_ids)
        for answer in answers:
            best = sorted(answer["choices"], key=lambda c: int(c.get("index", 0)))[0]
            ids, _ = self._read_sample(best, stops)
            for k, tok in enumerate(ids):
                if tok in stops:
                    ids = ids[:k]
                    break
            out.append(ids)
        return out

    # ---- requests and answers -----------------------------------------------------------
    def _score_body(self, seqs: list[list[int]]) -> dict[str, Any]:
        if self.info.api == "vllm":
            return {"model": self.info.served_model, "prompt": seqs, "max_tokens": 1,
                    "temperature": 0.0, "prompt_logprobs": 0, "return_token_ids": True}
        return {"model": self.info.served_model, "prompt": seqs, "max_tokens": 1,
                "temperature": 0.0, "echo": True, "logprobs": 0,
                "return_tokens_as_token_ids": True}

    def _read_scores(self, choice: dict[str, Any], seq: list[int]) -> list[float]:
        """Per position p of ``seq``, log p(seq[p] | seq[:p]) (position 0: nan)."""
        if self.info.api == "vllm":
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
                value = entry.get(str(seq[p]))
                if value is None:
                    raise ServerError(f"the server's prompt log-probs at position {p} lack "
                                      f"token {seq[p]}")
                out.append(float(value["logprob"] if isinstance(value, dict) else value))
            return out
        logprobs = choice.get("logprobs") or {}
        tokens, values = logprobs.get("tokens"), logprobs.get("token_logprobs")
        if not tokens or values is None or len(tokens) < len(seq):
            raise ServerError(f"the server at {self.info.base_url} did not echo the prompt's "
                              "log-probs (echo + logprobs)")
        ids = [_token_id(t) for t in tokens[:len(seq)]]
        if ids != seq:
            raise ServerError(f"the server at {self.info.base_url} echoed other tokens than "
                              "it was sent (return_tokens_as_token_ids)")
        return [math.nan] + [float(v) for v in values[1:len(seq)]]

    def _read_sample(self, choice: dict[str, Any], stops: list[int]) -> tuple[list[int], bool]:
        ids = choice.get("token_ids")
        if ids is None:
            tokens = (choice.get("logprobs") or {}).get("tokens")
            if tokens is None:
                raise ServerError(f"the server at {self.info.base_url} returned no token ids "
                                  "of its samples")
            ids = [_token_id(t) for t in tokens]
        ids = [int(t) for t in ids]
        stopped = choice.get("finish_reason") == "stop"
        if ids and ids[-1] in stops:
            ids, stopped = ids[:-1], True
        return ids, stopped

    # ---- checks -------------------------------------------------------------------------
    def check_server(self) -> None:
        """Before a run: the server's tokenizer agrees with the local one on a probe text, and
        its log-probs are possible (finite, <= 0) and not uniform."""
        probe = self.encode(PROBE_TEXT)
        if self.info.api == "vllm":
            self._check_tokenizer(probe)
        seq = list(self.bos_ids) + probe if self.bos_ids else probe
        logp = self.sequence_logprobs([seq], [1])[0]
        if not np.all(np.isfinite(logp)) or float(logp.max()) > LOGPROB_SLACK:
            raise ServerError(f"the server at {self.info.base_url} returned impossible "
                              f"log-probs on a probe text (max {float(np.max(logp)):.4g}, "
                              "finite: " f"{bool(np.all(np.isfinite(logp)))}): refused")
        uniform = -math.log(max(self.vocab_size, 2))
        if float(np.ptp(logp)) < 1e-6 or float(logp.mean()) < uniform + UNIFORM_MARGIN_NATS:
            raise ServerError(
                f"the server at {self.info.base_url} gives a (near) uniform distribution: mean "
                f"log-prob {float(logp.mean()):.3f} nats per token on a probe text, against "
                f"{uniform:.3f} for uniform over {self.vocab_size} tokens. The model folder it "
                "serves is read wrongly (for a ctxleak cache folder: convert it again with "
                "this ctxleak version), or it is another model")

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
                f"{_first_difference(probe, theirs)}. Give the served model's tokenizer "
                "(tokenizer=HF id or folder)", param="tokenizer")


def _token_id(key: str) -> int:
    """An id from ``token_id:123`` (return_tokens_as_token_ids) or ``123``."""
    text = str(key)
    return int(text.rsplit(":", 1)[-1]) if text.startswith("token_id:") else int(text)


def _first_difference(a: Sequence[int], b: Sequence[int]) -> int:
    for k, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return k
    return min(len(a), len(b))


def tokenizer_source(model: str, tokenizer: str | None) -> str:
    """Where the local tokenizer is read from: ``tokenizer`` if given, else ``model``'s folder
    (a named model's converted cache folder, the one its server is started on)."""
    if tokenizer:
        return tokenizer
    if model in NAMED_MODELS:
        _, source, path, _ = _resolve_source(model)
        if source == "gguf" and path is not None:
            return str(_converted(path)[0])
    return model


def _eos_ids(tokenizer: Any, folder: str) -> list[int]:
    ids: set[int] = set()
    if tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    if Path(folder, "generation_config.json").is_file():
        extra = GenerationConfig.from_pretrained(folder).eos_token_id
        if isinstance(extra, int):
            ids.add(extra)
        elif isinstance(extra, (list, tuple)):
            ids.update(int(i) for i in extra)
    return sorted(ids)


def _server_facts(client: ServedClient, served_model: str | None) -> tuple[str, dict[str, Any]]:
    """The served model's id (``served_model``, or the server's only one) and what the server
    says about it: ``/v1/models``'s entry (id, max_model_len, root, owned_by; not its
    ``created``, the time of asking) and ``/version``."""
    listing = client.get("/v1/models")
    models = [m for m in listing.get("data", []) if isinstance(m, dict)]
    ids = [str(m.get("id")) for m in models]
    if served_model is None:
        if len(ids) != 1:
            raise ConfigError(f"the server at {client.url} serves {len(ids)} models ({ids}): "
                              "name one with served_model", param="served_model")
        served_model = ids[0]
    if served_model not in ids:
        raise ConfigError(f"the server at {client.url} does not serve '{served_model}' (it "
                          f"serves {ids})", param="served_model")
    entry = models[ids.index(served_model)]
    facts = {k: entry[k] for k in ("id", "max_model_len", "root", "owned_by")
             if k in entry}
    try:
        version = client.get("/version")
        if isinstance(version, dict) and "version" in version:
            facts["version"] = version["version"]
    except ServerError:
        pass
    return served_model, facts


def client_options(options: ClientOptions | None, request_timeout: float | None = None,
                   retries: int | None = None) -> ClientOptions:
    """``options`` (default: :class:`ClientOptions`'s) with the user's ``request_timeout``
    (seconds) and ``retries`` (times sent again: ``retries + 1`` attempts in all), each checked
    and naming its parameter when it is wrong."""
    options = options or ClientOptions()
    timeout = check_request_timeout(request_timeout)
    again = check_retries(retries)
    if timeout is not None:
        options = replace(options, timeout=timeout)
    if again is not None:
        options = replace(options, attempts=again + 1)
    return options


def serve(model: str = "default", server_url: str = "http://127.0.0.1:8000", *,
          served_model: str | None = None, tokenizer: str | None = None,
          chat_template: str = "auto", api: str = "auto", api_key_env: str | None = None,
          options: ClientOptions | None = None, request_timeout: float | None = None,
          retries: int | None = None, check: bool = True) -> ServedLM:
    """A model served at ``server_url`` (an OpenAI-compatible API; vLLM for exact scoring) as
    an LM every method that needs only log-probs and samples accepts.

    ``model``: the name ctxleak knows it by (``default``, a Hugging Face id or folder), which
    also gives the local tokenizer unless ``tokenizer`` names one. ``served_model``: the name
    the server serves it under (default: the server's only model). ``api``: ``vllm`` (token-id
    prompts with ``prompt_logprobs``), ``openai-echo`` (``echo`` + ``logprobs``) or ``auto``
    (vLLM when the server answers ``prompt_logprobs``). The API key, if any, is read from the
    environment (``api_key_env``, else CTXLEAK_API_KEY or OPENAI_API_KEY) and never stored.
    ``check``: the tokenizer and log-prob checks of :meth:`ServedLM.check_server`.
    ``request_timeout``: seconds one request may take (the whole answer; default 600);
    ``retries``: times a request that failed for a transient reason (a refused connection, a
    timeout, HTTP 429 or 5xx) is sent again (default 3; 0: tried once). Both override
    ``options`` and change no measured number.
    """
    if chat_template not in ("auto", "on", "off"):
        raise ConfigError(f"unknown chat_template '{chat_template}': use auto, on or off",
                          param="chat_template")
    if api not in ("auto", "vllm", "openai-echo"):
        raise ConfigError(f"unknown api '{api}': use auto, vllm or openai-echo", param="api")
    if not server_url.startswith(("http://", "https://")):
        raise ConfigError(f"server_url must start with http:// or https://, not "
                          f"'{public_url(server_url)}'", param="server_url")
    options = client_options(options, request_timeout, retries)
    client = ServedClient(server_url, api_key=api_key_from_env(api_key_env), options=options)
    served_model, facts = _server_facts(client, served_model)
    source = tokenizer_source(model, tokenizer)
    try:
        tok = AutoTokenizer.from_pretrained(source)
    except (OSError, ValueError, KeyError) as exc:
        raise ConfigError(f"could not load the tokenizer '{source}' of the served model: "
                          f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}; "
                          "give tokenizer=HF id or folder", param="tokenizer") from None
    has_template = bool(getattr(tok, "chat_template", None))
    if chat_template == "on" and not has_template:
        raise ConfigError(f"chat_template='on', but the tokenizer '{source}' has no chat "
                          "template", param="chat_template")
    use_template = has_template if chat_template == "auto" else chat_template == "on"
    max_len = facts.get("max_model_len")
    info = ServedInfo(name=model, served_model=served_model, base_url=client.url,
                      tokenizer=source, api="vllm" if api == "auto" else api, server=facts,
                      path=source, chat_template=use_template)
    lm = ServedLM(client=client, tokenizer=tok, info=info, use_chat_template=use_template,
                  bos_ids=bos_convention(tok), eos_ids=_eos_ids(tok, source),
                  max_model_len=int(max_len) if max_len else None)
    if api == "auto":
        lm.info = _detect_api(lm)
    if check:
        lm.check_server()
    return lm


def _detect_api(lm: ServedLM) -> ServedInfo:
    """vLLM's prompt_logprobs when the server answers them, else the echo form."""
    seq = list(lm.bos_ids) + lm.encode("Hello world") if lm.bos_ids else lm.encode("Hello world")
    answer = lm.client.post("/v1/completions", lm._score_body([seq]))
    choice = (answer.get("choices") or [{}])[0]
    api = "vllm" if isinstance(choice.get("prompt_logprobs"), list) else "openai-echo"
    return ServedInfo(**{**lm.info.to_dict(), "api": api})


def describe_server(lm: ServedLM) -> str:
    """One line for the console: what is served where."""
    facts = json.dumps({k: v for k, v in lm.info.server.items() if k != "created"})
    return f"served model '{lm.info.served_model}' at {lm.info.base_url} {facts}"
