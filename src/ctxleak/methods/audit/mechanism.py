"""Algorithm 1 (App. C.1) of "Evaluating Privacy Leakage From In-Context Learning" on the
engine, with its data-dependent loss on the fly.

:func:`generate_private` runs the s one-shot prompts as s KV-cached streams of
:func:`ctxleak.engine.generation.generate_streams`. Its ``combine`` clips each stream's logits
(``clip_c(z)_i = max(−c, z_i − max_j z_j + c)``), averages them and returns ``softmax(z̄/τ)``; its
``observe`` takes the clipped rows of the same step (no extra forward pass) and computes, for
every prompt p, the symmetric Rényi divergence at ``α*`` between the mechanism's distribution and
the remove-one neighbour that averages the other s−1 rows (Theorem C.6, Eq. 7). The per-token
loss is the max over p (App. C.3.3).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from ctxleak.engine.generation import derive_seed, generate_many, replay
from ctxleak.engine.lm import LanguageModel
from ctxleak.engine.streams import Generation, StreamJob
from ctxleak.mitigations.dp_synthetic import (
    aggregate,
    clip_logits,
    excluded_mask,
    leave_one_out_logprobs,
    renyi_divergence_torch,
    sampling_logprobs,
)

#: Why the DP mechanism needs the model in-process (the words of a refusal).
MECHANISM_NEEDS = ("the private prediction mechanism clips and aggregates the full next-token "
                   "distributions of every subset at each step: load the model in-process")


class DPAggregator:
    """``combine`` and ``observe`` callbacks of Algorithm 1 for :func:`generate_streams`.

    ``alpha=None`` switches the data-dependent accounting off (``observe`` is then not needed).
    After each ``observe``, :attr:`divergences` holds that step's symmetric divergence per
    prompt; the aggregator keeps no state across steps, so the engine may replay a sequence.
    """

    def __init__(self, clip: float, temperature: float, alpha: float | None = None) -> None:
        if not clip > 0:
            raise ValueError(f"clip must be > 0, got {clip}")
        if not temperature > 0:
            raise ValueError(f"temperature must be > 0, got {temperature}")
        if alpha is not None and not alpha > 1:
            raise ValueError(f"alpha must be > 1, got {alpha}")
        self.clip, self.temperature, self.alpha = float(clip), float(temperature), alpha
        self._clipped: torch.Tensor | None = None
        self._excluded: torch.Tensor | None = None
        self._step = -1
        self.divergences: torch.Tensor | None = None

    def combine(self, logits: torch.Tensor, step: int,
                excluded: Sequence[int] = ()) -> torch.Tensor:
        """Clip each row, average over the s rows, log-softmax at temperature τ (float64).

        ``excluded``: the token ids the engine masked at this step (EOS before
        ``min_new_tokens``), removed from the released distribution after aggregation:
        clipping alone would turn their mask into ``−c`` and leave them sampleable (App. C.1
        clips real logits only)."""
        clipped = clip_logits(logits.double(), self.clip)
        self._excluded = excluded_mask(excluded, logits.shape[-1], logits.device)
        self._clipped, self._step = clipped, step
        return sampling_logprobs(aggregate(clipped), self.temperature, self._excluded)

    def observe(self, logits: torch.Tensor, logprobs: torch.Tensor, token: int,
                step: int) -> tuple[float, int]:
        """``(max_p D^↔_α(P‖Q_p), argmax p)`` for this step, from the rows ``combine`` clipped."""
        if self.alpha is None:
            raise RuntimeError("observe needs alpha")
        if self._clipped is None or step != self._step:
            raise RuntimeError("observe must follow combine for the same step")
        divergences = leave_one_out_rdp(self._clipped, logprobs, self.temperature, self.alpha,
                                        self._excluded)
        self.divergences = divergences
        p = int(torch.argmax(divergences))
        return float(divergences[p]), p


def leave_one_out_rdp(clipped: torch.Tensor, logprobs: torch.Tensor, temperature: float,
                      alpha: float, excluded: torch.Tensor | None = None) -> torch.Tensor:
    """``D^↔_α(P‖Q_p)`` (Eq. 6) for each prompt p: ``P`` is the mechanism's distribution (its
    log-probs already computed by ``combine``) and ``Q_p`` averages the other s−1 clipped rows,
    over the same output set as ``P`` (``excluded`` tokens removed after aggregation).
    Equal to :func:`ctxleak.mitigations.dp_synthetic.leave_one_out_divergences` without recomputing P.
    """
    logq = leave_one_out_logprobs(clipped, temperature, excluded)
    logp = logprobs.double().unsqueeze(0)
    return torch.maximum(renyi_divergence_torch(logp, logq, alpha),
                         renyi_divergence_torch(logq, logp, alpha))


@dataclass
class PrivateGeneration:
    """One sequence of Algorithm 1: generated ids (EOS excluded), whether EOS ended it, and per
    released token (the stopping EOS included) the data-dependent RDP and the prompt giving it."""

    token_ids: list[int]
    stopped_on_eos: bool
    token_rdp: list[float] = field(default_factory=list)
    token_argmax: list[int] = field(default_factory=list)
    prompt_rdp: list[float] = field(default_factory=list)

    @property
    def n_released(self) -> int:
        """Tokens the mechanism released (each costs one invocation of Algorithm 1)."""
        return len(self.token_ids) + int(self.stopped_on_eos)

    @property
    def rdp_sum(self) -> float:
        return float(np.sum(self.token_rdp))


def generate_private(lm: LanguageModel, prompts: Sequence[Sequence[int]], *, clip: float,
                     temperature: float, alpha: float | None = None, max_new_tokens: int = 40,
                     min_new_tokens: int = 0, seed: int = 0,
                     use_cache: bool = True) -> PrivateGeneration:
    """Generate one synthetic sequence from the s one-shot ``prompts`` (Algorithm 1).

    With ``alpha`` the data-dependent per-token RDP at that order is recorded (App. C.3.3);
    ``alpha=None`` runs the mechanism alone. Needs at least two prompts for the accounting.
    """
    job = PrivateJob(prompts, clip, temperature, alpha, max_new_tokens, min_new_tokens, seed)
    return generate_private_many(lm, [job], use_cache=use_cache)[0]


@dataclass(frozen=True)
class PrivateJob:
    """One synthetic sequence for :func:`generate_private_many` (the arguments of
    :func:`generate_private`)."""

    prompts: Sequence[Sequence[int]]
    clip: float
    temperature: float
    alpha: float | None = None
    max_new_tokens: int = 40
    min_new_tokens: int = 0
    seed: int = 0


def generate_private_many(lm: LanguageModel, jobs: Sequence[PrivateJob], use_cache: bool = True
                          ) -> list[PrivateGeneration]:
    """Several synthetic sequences, the s streams of each decoded in one batched KV cache
    (:func:`~ctxleak.engine.generation.generate_many`), each sequence from its own seed and
    aggregator, so it does not depend on the other sequences of the batch (nor, under a
    batch-invariant policy, do its losses)."""
    gens = generate_many(lm.in_process(MECHANISM_NEEDS), [_stream_job(job) for job in jobs],
                         use_cache=use_cache)
    return [_finish(job, gen) for job, gen in zip(jobs, gens)]


def replay_private(lm: LanguageModel, job: PrivateJob, generation: PrivateGeneration) -> PrivateGeneration:
    """``generation`` (of ``job``) with its data-dependent losses recomputed from this sequence's
    s prompts alone (:func:`ctxleak.engine.generation.replay`, what a batch-invariant run does):
    the same tokens, and per-token RDP that do not depend on the other sequences generated with
    it."""
    gen = Generation(token_ids=list(generation.token_ids),
                     stopped_on_eos=generation.stopped_on_eos)
    return _finish(job, replay(lm.in_process(MECHANISM_NEEDS), _stream_job(job), gen))


def _stream_job(job: PrivateJob) -> StreamJob:
    """The stream job that runs ``job``, with a fresh aggregator."""
    if job.alpha is not None and len(job.prompts) < 2:
        raise ValueError("the leave-one-out accounting needs at least 2 prompts")
    agg = DPAggregator(job.clip, job.temperature, job.alpha)

    def observe(logits: torch.Tensor, logprobs: torch.Tensor, token: int,
                step: int) -> tuple[float, int, torch.Tensor]:
        rdp, p = agg.observe(logits, logprobs, token, step)
        return rdp, p, agg.divergences  # type: ignore[return-value]

    return StreamJob(job.prompts, agg.combine, observe if job.alpha is not None else None,
                     job.seed, job.max_new_tokens, job.min_new_tokens)


def _finish(job: PrivateJob, gen: Generation) -> PrivateGeneration:
    out = PrivateGeneration(token_ids=list(gen.token_ids), stopped_on_eos=gen.stopped_on_eos)
    if job.alpha is not None:
        out.token_rdp = [r[0] for r in gen.records]
        out.token_argmax = [r[1] for r in gen.records]
        totals = None  # per prompt, the sum over steps of its divergence
        for r in gen.records:
            totals = r[2] if totals is None else totals + r[2]
        out.prompt_rdp = [0.0] * len(job.prompts) if totals is None else totals.tolist()
    return out


def sequence_seeds(run_seed: int, index: int) -> tuple[int, int]:
    """Seeds of sequence ``index``: one for its subset of private examples, one for sampling.
    They do not depend on the target ε, so every target sees the same subsets and draws."""
    return derive_seed(run_seed, 2 * index), derive_seed(run_seed, 2 * index + 1)


def draw_subset(n_examples: int, subset_size: int, seed: int) -> list[int]:
    """``subset_size`` distinct indices of ``range(n_examples)`` in random order (seeded)."""
    if not 1 <= subset_size <= n_examples:
        raise ValueError(f"subset size {subset_size} must be between 1 and {n_examples}")
    rng = np.random.default_rng(seed)
    return [int(i) for i in rng.choice(n_examples, size=subset_size, replace=False)]
