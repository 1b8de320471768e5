"""A generation over several prompt streams combined step by step, as every backend runs it: the
request (:class:`StreamJob`), its result (:class:`Generation`) and one step of one job
(:func:`take_step`): the EOS mask before the minimum length, the job's ``combine``, the seeded draw
(:mod:`ctxleak.kernels.draw`) and the job's record. Backend-free: the in-process decoder
(:mod:`ctxleak.engine.local.generation`) and the one that asks a served model for each step's
distributions (:func:`ctxleak.engine.generation.decode_by_requests`) take the same steps.

Context Influence Decoding (Def. 3.4 of "Estimating Privacy Leakage of Augmented Contextual
Knowledge in Language Models") combines two streams, with and without the context; the DP
synthetic-text mechanism (App. C.1 of "Evaluating Privacy Leakage From In-Context Learning")
combines s one-shot prompts.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from ctxleak.kernels.cid import MASKED_LOGIT
from ctxleak.kernels.draw import draw

Combine = Callable[[torch.Tensor, int, tuple[int, ...]], torch.Tensor]
"""``combine(logits[S, V] float64, step, excluded) -> log-probs[V] float64`` (normalised).
``excluded``: the token ids the engine masked at this step in every stream (EOS before the
minimum length, :func:`masked_ids`), so a combiner that transforms the logits (the DP
mechanism's clipping) can keep them out of its output set without guessing from values."""

Observe = Callable[[torch.Tensor, torch.Tensor, int, int], Any]
"""``observe(logits[S, V], log-probs[V], token, step) -> record`` kept in ``Generation.records``
(called for every drawn token, the stopping EOS included)."""


@dataclass
class Generation:
    """Generated token ids (EOS not included), whether EOS ended it, and per-step records of
    ``observe``."""

    token_ids: list[int]
    stopped_on_eos: bool
    records: list[Any] = field(default_factory=list)
    # stream index -> the KV cache of its prompt prefilled alone (StreamJob.keep_prompt_cache)
    prompt_caches: dict[int, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Share:
    """Work a job's step can share with the other jobs of the same step (bounded CID's λ_t
    search): the jobs whose ``key`` is equal, on a device type in ``devices``, hand their rows'
    logits (masked as :func:`take_step` masks them) to one ``compute`` call, which returns each
    job's part; ``receive(step, part)`` gives the job its own before its ``combine`` runs. A job
    that gets no part (alone, another device, or ``compute`` raised) does the work itself."""

    key: Hashable
    compute: Callable[[list[torch.Tensor]], list[Any]]
    receive: Callable[[int, Any], None]
    devices: frozenset[str]


@dataclass
class StreamJob:
    """One example's generation for :func:`~ctxleak.engine.generation.generate_many`: its
    prompt streams, how they combine, its own seed (drawn from by this example only) and its
    length limits.

    ``combine`` and ``observe`` may pass state within a step (``observe`` follows ``combine``
    of the same step) but keep none across steps: everything read after generation comes from
    the records, since the engine may run a job's steps again
    (:func:`~ctxleak.engine.generation.replay`)."""

    prompts: Sequence[Sequence[int]]
    combine: Combine
    observe: Observe | None = None
    seed: int = 0
    max_new_tokens: int = 50
    min_new_tokens: int = 0
    # streams whose prompt is prefilled alone (batch 1, no padding, all but its last token in
    # one pass: what scoring computes for its reference prefix) and whose KV cache is handed
    # back in ``Generation.prompt_caches`` (models with plain caches; no sliding window)
    keep_prompt_cache: tuple[int, ...] = ()
    # batch-invariant policy: recompute the records from this job alone (replay);
    # False when the caller takes these floats from passes of its own example instead
    replay: bool = True
    # work this job's steps may share with other jobs' (Share); None: none
    share: Share | None = None

    def check(self) -> None:
        if not self.prompts or any(len(p) == 0 for p in self.prompts):
            raise ValueError("every stream needs a non-empty prompt")
        if (self.max_new_tokens < 0 or self.min_new_tokens < 0
                or self.min_new_tokens > self.max_new_tokens):
            raise ValueError("need 0 <= min_new_tokens <= max_new_tokens")


def mask_eos_before_min(logits: torch.Tensor, eos_ids: Sequence[int], min_new_tokens: int, *,
                        step: int | None = None) -> torch.Tensor:
    """The minimum-length rule of generation (the context-influence paper §3: "min new tokens 10, EOS masked
    before that in both streams"), written once for generating and for scoring: the EOS logits
    get ``MASKED_LOGIT`` (probability 0) in place, and ``logits`` is returned.

    ``step`` given: every row is a stream at that generation step (masked when
    ``step < min_new_tokens``). ``step`` None: row t is the t-th response position of a
    teacher-forced pass (rows ``t < min_new_tokens`` masked), so a scored response sees the
    distributions it was drawn from."""
    if min_new_tokens <= 0 or not len(eos_ids):
        return logits
    eos = torch.as_tensor(list(eos_ids), dtype=torch.long, device=logits.device)
    if step is not None:
        if step < min_new_tokens:
            logits[:, eos] = MASKED_LOGIT
    else:
        logits[:min_new_tokens, eos] = MASKED_LOGIT
    return logits


def masked_ids(eos_ids: Sequence[int], min_new_tokens: int, step: int) -> tuple[int, ...]:
    """The token ids :func:`mask_eos_before_min` masks at generation ``step`` (EOS while
    ``step < min_new_tokens``), given to ``combine`` as its ``excluded`` argument."""
    return tuple(int(t) for t in eos_ids) if step < min_new_tokens else ()


def share_step(jobs: Sequence[StreamJob], logits: Sequence[torch.Tensor], step: int,
               stops: Sequence[int]) -> None:
    """Before one step of ``jobs`` (``logits``: each job's own rows, masked here in place as
    :func:`take_step` masks them): each group of two or more jobs with an equal
    :class:`Share` key, on a device its ``devices`` name, computes its work once and each job
    receives its part. A group whose ``compute`` runs out of GPU memory (its rows stacked) is
    left to work alone, one job at a time; any other error is raised."""
    groups: dict[Hashable, list[tuple[int, Share]]] = {}
    for k, job in enumerate(jobs):
        if job.share is not None and logits[k].device.type in job.share.devices:
            groups.setdefault(job.share.key, []).append((k, job.share))
    for members in groups.values():
        if len(members) < 2:
            continue
        for k, _ in members:
            mask_eos_before_min(logits[k], stops, jobs[k].min_new_tokens, step=step)
        try:
            parts = members[0][1].compute([logits[k] for k, _ in members])
        except torch.cuda.OutOfMemoryError:  # each job does the work itself, in less memory
            continue
        for (_, share), part in zip(members, parts):
            share.receive(step, part)


def take_step(job: StreamJob, out: Generation, own: torch.Tensor, step: int, stops: list[int],
              generator: torch.Generator, sample: bool) -> int | None:
    """One step of one job on its rows' logits ``own`` (masked in place): combine, draw,
    observe, append. Returns the token to feed back, or None when the job stops here."""
    mask_eos_before_min(own, stops, job.min_new_tokens, step=step)
    logprobs = job.combine(own, step, masked_ids(stops, job.min_new_tokens, step))
    token = draw(logprobs, generator, sample)
    if job.observe is not None:
        out.records.append(job.observe(own, logprobs, token, step))
    if token in stops:
        out.stopped_on_eos = True
        return None
    out.token_ids.append(token)
    return token if step + 1 < job.max_new_tokens else None


def single_stream(temperature: float = 1.0) -> Combine:
    """Plain temperature sampling from one stream."""

    def combine(logits: torch.Tensor, step: int, excluded: tuple[int, ...] = ()) -> torch.Tensor:
        return torch.log_softmax(logits[0] / temperature, dim=-1)

    return combine
