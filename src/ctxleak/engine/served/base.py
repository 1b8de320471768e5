"""The served backend's common part: :class:`ServedLM`, a model behind an OpenAI-compatible
completions API, owning the client (concurrency, retries, timeouts), the local tokenizer, the
checks of every answer and the operations of :class:`~ctxleak.engine.lm.LanguageModel` that a
server can give. A wire dialect (:mod:`ctxleak.engine.served.vllm`,
:mod:`ctxleak.engine.served.openai`) is a small subclass that owns its requests and its parsing:
how prompts are scored, how candidates are scored, what a sampling request carries.

Log-probs come back as the raw temperature-1 distribution (vLLM's default ``raw_logprobs``),
whatever the sampling temperature; sums are taken in float64. Measured on this machine (the
default 135M model, float32, one CPU core for the server): served log-probs agree with
in-process scoring to 6e-5 nats per token and are identical across repeats and batching.
"""

from __future__ import annotations

import itertools
import math
from abc import abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
import torch

from ctxleak.engine.batching import BatchPolicy
from ctxleak.engine.capabilities import (
    NEXT_TOKEN_DISTRIBUTION,
    NEXT_TOKEN_LOGITS,
    SERVED,
    check_capabilities,
)
from ctxleak.engine.lm import (
    EACH_PROMPT_WHOLE,
    PREFIXES_REUSED,
    LanguageModel,
    LogitTransform,
    ModelFacts,
    ScoringPlan,
)
from ctxleak.engine.served import answers
from ctxleak.engine.served.answers import LOGPROB_SLACK, token_id
from ctxleak.engine.served_client import ServedClient, ServerError
from ctxleak.engine.streams import Generation

PROBE_TEXT = ("The quick brown fox jumps over the lazy dog. Privacy matters: a model should "
              "not repeat the documents it was given, 12345.")
# A served model whose mean log-prob on the probe text is within this many nats of the uniform
# distribution's -log V is refused as uniform (a trained model scores English far better).
UNIFORM_MARGIN_NATS = 1.0
# Continuations this short are scored token by token through allowed_token_ids requests, which
# the server's prefix cache serves (prompt_logprobs requests recompute the whole prompt).
SHORT_CONTINUATION = 4
# The most whole-vocabulary rows (prefixes) one call of continuation_logits holds at once: 64
# rows of 49,152 float64 log-probs are 25 MB.
DISTRIBUTION_ROWS = 64


@dataclass(frozen=True, kw_only=True)
class ServedInfo(ModelFacts):
    """Provenance of a served model (no credentials)."""

    served_model: str
    base_url: str
    tokenizer: str
    api: str  # the wire dialect (ctxleak.engine.served.DIALECTS)
    server: dict[str, Any] = field(default_factory=dict)  # /v1/models and /version
    source: str = "served"
    path: str = ""
    dtype: str = "server"
    device: str = "server"


@dataclass
class ServedLM(LanguageModel):
    """A served model with its local tokenizer and the conventions the engine needs (the same
    prompts and text as the in-process :class:`ctxleak.engine.local.LM`, no weights). A
    subclass per wire dialect sets :attr:`api` and fills in the request hooks."""

    client: ServedClient
    tokenizer: Any
    info: ServedInfo
    use_chat_template: bool = False
    bos_ids: list[int] = field(default_factory=list)
    eos_ids: list[int] = field(default_factory=list)
    batching: BatchPolicy = field(default_factory=BatchPolicy, repr=False, compare=False)
    max_model_len: int | None = None
    capabilities: frozenset[str] = SERVED

    #: The dialect's name (``ServedInfo.api``, the ``api`` argument of ``serve``).
    api: ClassVar[str] = ""

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

    def run_options(self) -> dict[str, Any]:
        return {"model": self.info.name, "server_url": self.info.base_url,
                "served_model": self.info.served_model, "tokenizer": self.info.tokenizer}

    def describe(self) -> str:
        return f"{self.info.name}: served model '{self.info.served_model}' at {self.info.base_url}"

    #: What the server says of its model that another model under the same name would change.
    IDENTITY_FACTS = ("root", "max_model_len", "version")

    def identity(self) -> dict[str, Any]:
        """The served model's weights as the server names them (``/v1/models``'s ``root``, the
        path or Hub id it loaded), its ``max_model_len`` and the server's ``/version``: another
        model, or another build, served under the same name differs here."""
        return {k: self.info.server[k] for k in self.IDENTITY_FACTS if k in self.info.server}

    # ---- the interface's operations ------------------------------------------------------
    def continuation_logprobs(self, prompts: Sequence[Sequence[int]],
                              continuations: Sequence[Sequence[int]], *,
                              plan: ScoringPlan = PREFIXES_REUSED,
                              logit_transform: LogitTransform | None = None) -> list[np.ndarray]:
        """Teacher-forced ``log p(y_t | prompt_i, y_<t)`` of each continuation (float64); the
        server's prefix cache reuses shared prefixes (``plan`` is the in-process batching's and
        changes nothing here)."""
        self._plain(logit_transform)
        return self._continuations(prompts, continuations)

    def next_token_logprobs(self, prompts: Sequence[Sequence[int]], *,
                            token_ids: Sequence[int] | None = None,
                            plan: ScoringPlan = EACH_PROMPT_WHOLE,
                            logit_transform: LogitTransform | None = None) -> torch.Tensor:
        self._plain(logit_transform)
        served = self.vocab_logprobs(prompts) if token_ids is None else \
            self.candidate_logprobs(prompts, list(token_ids))
        return torch.from_numpy(served)

    def continuation_logits(self, prompts: Sequence[Sequence[int]],
                            continuations: Sequence[Sequence[int]], *,
                            reduce: Callable[[int, torch.Tensor], object],
                            plan: ScoringPlan = PREFIXES_REUSED) -> list[Any]:
        """The whole next-token distribution at every continuation position, float64
        ``[T, V]`` reduced per prompt, as the log-probs of every token: they equal the logits
        up to one constant per position, which every use removes (the CID mixture, its bounded
        λ_t and a temperature all go through a softmax). One full-vocabulary request per prefix
        (:meth:`vocab_logprobs`), which the server's prefix cache serves; a few prompts at a
        time, so at most :data:`DISTRIBUTION_ROWS` rows are held at once."""
        check_capabilities(self, {NEXT_TOKEN_DISTRIBUTION: "the whole next-token distribution "
                                  "at every position needs a server that returns the log-probs "
                                  "of every token (vLLM started with --max-logprobs -1), or the "
                                  "model loaded in-process"})
        out: list[Any] = []
        i = 0
        while i < len(prompts):
            chunk: list[int] = []
            rows = 0
            while i < len(prompts) and (not chunk or rows + len(continuations[i])
                                        <= DISTRIBUTION_ROWS):
                chunk.append(i)
                rows += len(continuations[i])
                i += 1
            prefixes = [list(prompts[k]) + list(continuations[k][:t]) for k in chunk
                        for t in range(len(continuations[k]))]
            table = self.vocab_logprobs(prefixes) if prefixes else np.zeros((0, self.vocab_size))
            at = 0
            for k in chunk:
                n = len(continuations[k])
                out.append(reduce(k, torch.from_numpy(table[at:at + n])))
                at += n
        return out

    def _plain(self, logit_transform: LogitTransform | None) -> None:
        """A served model gives log-probs, not logits: no transform of the logits."""
        if logit_transform is not None:
            check_capabilities(self, {NEXT_TOKEN_LOGITS: "a transform of the logits (the CID "
                                      "mixture at λ ≠ 1) needs them: load the model in-process"})

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
            for i, choice in zip(chunk, self._choices(answer, len(chunk))):
                row = self._read_scores(choice, list(seqs[i]))
                out[i] = self._checked(row[starts[i]:], f"the tokens of prompt {i}")
        return out

    def _continuations(self, prompts: Sequence[Sequence[int]],
                       continuations: Sequence[Sequence[int]]) -> list[np.ndarray]:
        """Every continuation appended to its prompt and scored in one pass (a dialect may
        score short ones otherwise)."""
        return self._appended_logprobs(prompts, continuations, range(len(prompts)))

    def _appended_logprobs(self, prompts: Sequence[Sequence[int]],
                           continuations: Sequence[Sequence[int]], which: Sequence[int]
                           ) -> list[np.ndarray]:
        """The log-probs of continuations ``which``, each appended to its prompt and scored in
        one pass (:meth:`sequence_logprobs`), in the order of ``which``."""
        seqs = [list(prompts[i]) + list(continuations[i]) for i in which]
        return self.sequence_logprobs(seqs, [len(prompts[i]) for i in which])

    def candidate_logprobs(self, prompts: Sequence[Sequence[int]],
                           token_ids: Sequence[int]) -> np.ndarray:
        """``log p(c | prompt)`` of each candidate ``c``: float64 ``[N, len(token_ids)]``, each
        candidate appended to the prompt and scored (a dialect may ask otherwise)."""
        seqs = [list(p) + [int(c)] for p in prompts for c in token_ids]
        rows = self.sequence_logprobs(seqs, [len(s) - 1 for s in seqs])
        return np.asarray([r[0] for r in rows], dtype=np.float64).reshape(len(prompts),
                                                                           len(token_ids))

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
            try:
                top = self._choices(answer, 1)[0]["logprobs"]["top_logprobs"][0]
                if not isinstance(top, dict):
                    raise TypeError(type(top).__name__)
            except (KeyError, IndexError, TypeError) as exc:
                raise ServerError(f"the server at {self.info.base_url} answered no next-token "
                                  f"log-probs ('logprobs.top_logprobs': {exc})") from None
            by_id = self._checked_top(top, f"the next-token distribution of prompt {r}")
            ids = np.fromiter(by_id.keys(), dtype=np.int64, count=len(by_id))
            values = np.fromiter(by_id.values(), dtype=np.float64, count=len(by_id))
            if ids.size and int(ids.min()) < 0:
                raise ServerError(f"the server at {self.info.base_url} answered a negative "
                                  f"token id ({int(ids.min())}) in a next-token distribution")
            if ids.size and int(ids.max()) >= out.shape[1]:
                out = np.pad(out, ((0, 0), (0, int(ids.max()) + 1 - out.shape[1])),
                             constant_values=-np.inf)
            out[r, ids] = values
            mass = float(np.exp(out[r][np.isfinite(out[r])]).sum())
            if mass < 1 - 1e-3:
                raise ServerError(
                    f"the server at {self.info.base_url} returned {len(by_id)} next-token "
                    f"log-probs covering {mass:.4f} of the probability: start vLLM with "
                    "--max-logprobs -1, or load the model in-process")
        return out

    def sample(self, prompts: Sequence[Sequence[int]], seeds: Sequence[int], *,
               temperature: float, max_new_tokens: int, min_new_tokens: int = 0, n: int = 1
               ) -> list[list[Generation]]:
        return [[Generation(token_ids=ids, stopped_on_eos=stopped) for ids, stopped in row]
                for row in self.draw(prompts, seeds, temperature=temperature, n=n,
                                     max_new_tokens=max_new_tokens,
                                     min_new_tokens=min_new_tokens)]

    def draw(self, prompts: Sequence[Sequence[int]], seeds: Sequence[int], *,
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
            bodies.append(self._sample_body(body))
        answers = self.client.post_many("/v1/completions", bodies)
        return [[self._read_sample(c, stops) for c in self._choices(answer, int(n))]
                for answer in answers]

    def beam_search(self, prompts: Sequence[Sequence[int]], *, max_new_tokens: int,
                    num_beams: int, batch_size: int | None = None) -> list[list[int]]:
        """The best of ``num_beams`` beams for each prompt (vLLM's ``use_beam_search``; one
        beam: greedy decoding), EOS and what follows it dropped."""
        if num_beams == 1:
            drawn = self.draw(prompts, [0] * len(prompts), temperature=0.0,
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
            choices = answer.get("choices") if isinstance(answer, dict) else None
            best = self._choices(answer, len(choices) if isinstance(choices, list) else 1)[0]
            ids, _ = self._read_sample(best, stops)
            out.append(list(itertools.takewhile(lambda tok: tok not in stops, ids)))
        return out

    # ---- every answer checked -------------------------------------------------------------
    def _choices(self, answer: Any, n: int) -> list[dict[str, Any]]:
        """The ``n`` choices of one completions answer in index order, its shape checked: a
        JSON object whose ``choices`` is a list of ``n`` objects, each ``index`` (where given)
        an integer from 0 to n - 1, each once. Anything else is one :class:`ServerError`
        naming the server and the field."""
        where = f"the server at {self.info.base_url}"
        if not isinstance(answer, dict):
            raise ServerError(f"{where} answered a JSON {type(answer).__name__} to a "
                              "completions request, where an object with 'choices' belongs")
        choices = answer.get("choices", [])
        if not isinstance(choices, list) or not all(isinstance(c, dict) for c in choices):
            raise ServerError(f"{where} answered a completions request without a list of "
                              "choice objects ('choices')")
        if len(choices) != n:
            raise ServerError(f"{where} answered {len(choices)} choices for {n} prompts")
        indices = []
        for k, choice in enumerate(choices):
            index = choice.get("index", k)
            if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < n:
                raise ServerError(f"{where} answered a choice whose 'index' is {index!r}, not "
                                  f"an integer from 0 to {n - 1}")
            indices.append(index)
        if len(set(indices)) != n:
            raise ServerError(f"{where} answered the same choice 'index' twice")
        return [c for _, c in sorted(zip(indices, choices), key=lambda pair: pair[0])]

    def _checked(self, values: Sequence[float], what: str) -> np.ndarray:
        """Log-probs the server answered, as float64, refused when impossible (not finite,
        above 0) or uniform over the vocabulary (:func:`~.answers.checked`): every answer a run
        uses is checked, not only the probe before it. Nothing measured from a refused answer
        is written, so ``resume`` continues once the server answers correctly."""
        return answers.checked(values, what, self.info.base_url, self.vocab_size)

    def _checked_top(self, top: Any, what: str, *, tops: bool = True) -> dict[int, float]:
        """One position's answered log-probs by token id, checked on their own
        (:func:`~.answers.checked_top`)."""
        return answers.checked_top(top, what, self.info.base_url, self.vocab_size, tops=tops)

    # ---- a dialect's requests and answers ----------------------------------------------
    @abstractmethod
    def _score_body(self, seqs: list[list[int]]) -> dict[str, Any]:
        """The request that scores every position of each of ``seqs``."""

    @abstractmethod
    def _read_scores(self, choice: dict[str, Any], seq: list[int]) -> list[float]:
        """Per position p of ``seq``, log p(seq[p] | seq[:p]) from one answered choice
        (position 0: nan)."""

    def _sample_body(self, body: dict[str, Any]) -> dict[str, Any]:
        """A sampling request as the dialect sends it (default: as built)."""
        return body

    def _check_tokenizer(self, probe: list[int]) -> None:
        """Compare the server's tokenizer with the local one where the dialect can ask (default:
        it cannot; the log-prob checks of :meth:`check_server` still run)."""

    def _read_sample(self, choice: dict[str, Any], stops: list[int]) -> tuple[list[int], bool]:
        ids = choice.get("token_ids")
        if ids is None:
            tokens = (choice.get("logprobs") or {}).get("tokens")
            if tokens is None:
                raise ServerError(f"the server at {self.info.base_url} returned no token ids "
                                  "of its samples")
            try:
                ids = [token_id(t) for t in tokens]
            except (TypeError, ValueError):
                ids = None
        if not isinstance(ids, list) or not all(
                isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in ids):
            raise ServerError(f"the server at {self.info.base_url} answered sampled token ids "
                              "that are not a list of integers >= 0: refused")
        stopped = choice.get("finish_reason") == "stop"
        if ids and ids[-1] in stops:
            ids, stopped = ids[:-1], True
        return ids, stopped

    # ---- checks -------------------------------------------------------------------------
    def check_server(self) -> None:
        """Before a run: the server's tokenizer agrees with the local one on a probe text, and
        its log-probs are possible (finite, <= 0) and not uniform."""
        probe = self.encode(PROBE_TEXT)
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


def first_difference(a: Sequence[int], b: Sequence[int]) -> int:
    return next((k for k, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
