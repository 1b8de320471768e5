"""Generation over several prompt streams combined step by step (SPEC §1).

At each step every stream's next-token logits are computed (one batched forward pass over the
streams, each with its own KV cache row), a caller-given ``combine`` turns them into one
distribution, a token is drawn from it, and that token is appended to every stream. Context
Influence Decoding (paper 000, Def. 3.4) combines two streams (with and without the context);
the DP synthetic-text mechanism (paper 001, App. C.1) combines s one-shot prompts.

Sampling is seeded by (run seed, example index) through :func:`derive_seed`, so the same example
gets the same draws whatever the sharding or order of a run. The draw itself happens on the CPU
in float64, so it does not depend on the device's random number generator.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from ctxleak.engine.forward import (
    MASKED_LOGIT,
    common_prefix_length,
    head_logits,
    hidden_states,
    left_pad,
    pad_id,
)
from ctxleak.engine.kvroom import give_room
from ctxleak.engine.models import LM

# A shared prefix shorter than this is not worth a separate forward pass and a cache copy.
MIN_SHARED_PREFIX = 8
# Prefill rows go in one bucket while they are at least this share of its longest row.
BUCKET_RATIO = 0.75

Combine = Callable[[torch.Tensor, int, tuple[int, ...]], torch.Tensor]
"""``combine(logits[S, V] float64, step, excluded) -> log-probs[V] float64`` (normalised).
``excluded``: the token ids the engine masked at this step in every stream (EOS before the
minimum length, :func:`masked_ids`), so a combiner that transforms the logits (the DP
mechanism's clipping) can keep them out of its output set without guessing from values."""

Observe = Callable[[torch.Tensor, torch.Tensor, int, int], Any]
"""``observe(logits[S, V], log-probs[V], token, step) -> record`` kept in ``Generation.records``
(called for every drawn token, the stopping EOS included)."""


def derive_seed(run_seed: int, example_index: int) -> int:
    """A 63-bit seed for one example, independent of the order examples are processed in."""
    state = np.random.SeedSequence([int(run_seed) & 0xFFFFFFFF, int(example_index)])
    return int(state.generate_state(2, dtype=np.uint32).astype(np.uint64) @
               np.array([1 << 31, 1], dtype=np.uint64)) & ((1 << 63) - 1)


@dataclass
class Generation:
    """Generated token ids (EOS not included), whether EOS ended it, and per-step records of
    ``observe``."""

    token_ids: list[int]
    stopped_on_eos: bool
    records: list[Any] = field(default_factory=list)
    # stream index -> the KV cache of its prompt prefilled alone (StreamJob.keep_prompt_cache)
    prompt_caches: dict[int, Any] = field(default_factory=dict)


def mask_eos_before_min(logits: torch.Tensor, eos_ids: Sequence[int], min_new_tokens: int, *,
                        step: int | None = None) -> torch.Tensor:
    """The minimum-length rule of generation (paper 000 §3: "min new tokens 10, EOS masked
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


@dataclass
class StreamJob:
    """One example's generation for :func:`generate_many`: its prompt streams, how they combine,
    its own seed (drawn from by this example only) and its length limits."""

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

    def check(self) -> None:
        if not self.prompts or any(len(p) == 0 for p in self.prompts):
            raise ValueError("every stream needs a non-empty prompt")
        if (self.max_new_tokens < 0 or self.min_new_tokens < 0
                or self.min_new_tokens > self.max_new_tokens):
            raise ValueError("need 0 <= min_new_tokens <= max_new_tokens")


def generate_streams(lm: LM, prompts: Sequence[Sequence[int]], combine: Combine, *,
                     observe: Observe | None = None, max_new_tokens: int = 50,
                     min_new_tokens: int = 0, seed: int = 0, sample: bool = True,
                     stop_ids: Sequence[int] | None = None,
                     use_cache: bool = True, share_prefix: bool = True) -> Generation:
    """Generate one response from ``len(prompts)`` streams combined by ``combine``.

    Before ``min_new_tokens`` tokens, the stop ids (EOS) get the logit ``MASKED_LOGIT`` in every
    stream. ``sample=False`` takes the most likely token. ``use_cache=False`` recomputes every
    stream from scratch at each step (the naive way, kept for tests and benchmarks).
    ``share_prefix``: the tokens all prompts begin with (an instruction, a chat template's
    system turn) go through the model once, not once per stream (on sliding-window models only
    when the prompts and the new tokens fit in the window).
    """
    job = StreamJob(prompts, combine, observe, seed, max_new_tokens, min_new_tokens)
    return generate_many(lm, [job], sample=sample, stop_ids=stop_ids, use_cache=use_cache,
                         share_prefix=share_prefix)[0]


def generate_many(lm: LM, jobs: Sequence[StreamJob], *, sample: bool = True,
                  stop_ids: Sequence[int] | None = None, use_cache: bool = True,
                  share_prefix: bool = True) -> list[Generation]:
    """Generate one response per job, the streams of all jobs decoded in one batched KV cache.

    Rows are the jobs' streams side by side, left-padded with an attention mask and position ids
    from each row's first real token. At each step one forward pass extends every live row; each
    job combines its own rows, masks EOS before its own minimum and draws from its own generator
    (``torch.Generator`` seeded by ``job.seed``), so a job's tokens do not depend on which other
    jobs share its batch (up to float noise in the logits). A job that stops (EOS or its maximum)
    leaves the batch: its rows are dropped from the cache, so finished examples stop costing
    compute. ``share_prefix``: the tokens every row begins with go through the model once.
    """
    for job in jobs:
        job.check()
    if not jobs:
        return []
    stops = list(lm.eos_ids if stop_ids is None else stop_ids)
    if not use_cache:
        return [_generate_uncached(lm, job, stops, sample) for job in jobs]
    device, pad = lm.device, pad_id(lm)
    seqs = [list(p) for job in jobs for p in job.prompts]
    bounds = np.cumsum([0] + [len(job.prompts) for job in jobs]).tolist()
    gens = [torch.Generator(device="cpu").manual_seed(job.seed) for job in jobs]
    outs = [Generation(token_ids=[], stopped_on_eos=False) for _ in jobs]
    live = [j for j, job in enumerate(jobs) if job.max_new_tokens > 0]

    with torch.inference_mode():
        if not live:
            return outs
        shared = shared_prefix_length(seqs) if share_prefix else 0
        window = sliding_window(lm)
        longest = max(job.max_new_tokens for job in jobs)
        if window is not None and max(len(s) for s in seqs) + longest > window:
            # a sliding window counts cache slots, not positions: the padding between the
            # prefix and a short stream's tokens would push real tokens out of its window
            shared = 0
        alone: dict[int, Any] = {bounds[j] + k: None for j, job in enumerate(jobs)
                                 for k in job.keep_prompt_cache
                                 if len(seqs[bounds[j] + k]) > 1} if window is None else {}
        if alone:  # each kept prompt alone (see prefill_alone), no shared prefix
            hidden, cache, mask, pos = _prefill_buckets(lm, seqs, pad, alone)
            for j, job in enumerate(jobs):
                outs[j].prompt_caches = {k: alone[bounds[j] + k] for k in job.keep_prompt_cache
                                         if alone.get(bounds[j] + k) is not None}
        elif shared >= MIN_SHARED_PREFIX and shared_prefill_pays(seqs, shared):
            hidden, cache, mask, pos = _prefill_shared(lm, seqs, shared, pad)
        else:
            hidden, cache, mask, pos = _prefill_buckets(lm, seqs, pad)
        give_room(cache, longest - 1)  # decode steps write in place, no torch.cat of the cache
        rows = {j: (bounds[j], bounds[j + 1]) for j in live}  # each live job's rows, in order
        step = 0
        while True:
            logits = head_logits(lm, hidden[:, -1]).double()
            tokens: dict[int, int] = {}
            for j in live:
                job, (a, b) = jobs[j], rows[j]
                own = logits[a:b]
                mask_eos_before_min(own, stops, job.min_new_tokens, step=step)
                logprobs = job.combine(own, step, masked_ids(stops, job.min_new_tokens, step))
                token = _draw(logprobs, gens[j], sample)
                if job.observe is not None:
                    outs[j].records.append(job.observe(own, logprobs, token, step))
                if token in stops:
                    outs[j].stopped_on_eos = True
                    continue
                outs[j].token_ids.append(token)
                if step + 1 < job.max_new_tokens:
                    tokens[j] = token
            if not tokens:
                break
            keep = [r for j in live if j in tokens for r in range(*rows[j])]
            if len(keep) < mask.shape[0]:  # drop the finished jobs' rows from the batch
                index = torch.as_tensor(keep, dtype=torch.long, device=device)
                cache.batch_select_indices(index)
                mask, pos = mask[index], pos[index]
            live = [j for j in live if j in tokens]
            sizes = [rows[j][1] - rows[j][0] for j in live]
            starts = np.cumsum([0] + sizes).tolist()
            rows = {j: (starts[k], starts[k + 1]) for k, j in enumerate(live)}
            new = torch.as_tensor([[tokens[j]] for j in live for _ in range(rows[j][1] - rows[j][0])],
                                  dtype=torch.long, device=device)
            mask = torch.cat([mask, torch.ones_like(new)], dim=1)
            pos = pos[:, -1:] + 1
            hidden, cache = hidden_states(lm, new, mask, pos, cache=cache, use_cache=True)
            step += 1
    return outs


def _generate_uncached(lm: LM, job: StreamJob, stops: list[int], sample: bool) -> Generation:
    """The naive way, for tests and benchmarks: every stream recomputed from scratch each step."""
    generator = torch.Generator(device="cpu").manual_seed(job.seed)
    pad = pad_id(lm)
    seqs = [list(p) for p in job.prompts]
    gen = Generation(token_ids=[], stopped_on_eos=False)
    with torch.inference_mode():
        for step in range(job.max_new_tokens):
            ids, mask, pos = left_pad(seqs, pad, lm.device)
            hidden, _ = hidden_states(lm, ids, mask, pos)
            logits = head_logits(lm, hidden[:, -1]).double()
            mask_eos_before_min(logits, stops, job.min_new_tokens, step=step)
            logprobs = job.combine(logits, step, masked_ids(stops, job.min_new_tokens, step))
            token = _draw(logprobs, generator, sample)
            if job.observe is not None:
                gen.records.append(job.observe(logits, logprobs, token, step))
            if token in stops:
                gen.stopped_on_eos = True
                break
            gen.token_ids.append(token)
            seqs = [s + [token] for s in seqs]
    return gen


def sliding_window(lm: LM) -> int | None:
    """The model's sliding attention window in tokens, if any of its layers has one (Gemma 3,
    Mistral; Qwen2 only with ``use_sliding_window``)."""
    config = getattr(lm.model, "config", None)
    config = getattr(config, "text_config", None) or config
    window = getattr(config, "sliding_window", None)
    if not window or getattr(config, "use_sliding_window", True) is False:
        return None
    return int(window)


def shared_prefix_length(seqs: Sequence[Sequence[int]]) -> int:
    """How many leading tokens every sequence has in common, leaving each at least one token of
    its own (the last prompt token must go through the model to give the first logits)."""
    if len(seqs) < 2:
        return 0
    n = min(len(s) for s in seqs) - 1
    first = seqs[0]
    for s in seqs[1:]:
        n = min(n, common_prefix_length(first, s))
    return max(n, 0)


def _prefill_shared(lm: LM, seqs: Sequence[Sequence[int]], shared: int, pad: int
                    ) -> tuple[torch.Tensor, Any, torch.Tensor, torch.Tensor]:
    """Prefill: the shared prefix once (batch 1), its cache repeated for every stream, then each
    stream's own tokens left-padded after it. The padding sits between the prefix and the
    stream's tokens, masked out; position ids carry on from the prefix without gaps."""
    device = lm.device
    head = torch.as_tensor([list(seqs[0][:shared])], dtype=torch.long, device=device)
    _, cache = hidden_states(lm, head, torch.ones_like(head), use_cache=True)
    cache.batch_repeat_interleave(len(seqs))  # a fresh cache: repeated in place, not copied
    ids, own_mask, own_pos = left_pad([s[shared:] for s in seqs], pad, device)
    mask = torch.cat([torch.ones((len(seqs), shared), dtype=own_mask.dtype, device=device),
                      own_mask], dim=1)
    pos = own_pos + shared
    hidden, cache = hidden_states(lm, ids, mask, pos, cache=cache, use_cache=True)
    return hidden, cache, mask, pos


def _buckets(seqs: Sequence[Sequence[int]], alone: Collection[int] = ()) -> list[list[int]]:
    """The prefill buckets of :func:`_prefill_buckets`: each row of ``alone`` by itself, the
    others longest first, a row joining the open bucket while it is at least ``BUCKET_RATIO`` of
    that bucket's longest row."""
    order = sorted((r for r in range(len(seqs)) if r not in alone), key=lambda r: -len(seqs[r]))
    buckets: list[list[int]] = [[r] for r in sorted(alone)]
    for r in order:
        if (buckets and buckets[-1][0] not in alone
                and len(seqs[r]) >= BUCKET_RATIO * len(seqs[buckets[-1][0]])):
            buckets[-1].append(r)
        else:
            buckets.append([r])
    return buckets


def shared_prefill_pays(seqs: Sequence[Sequence[int]], shared: int) -> bool:
    """Whether prefilling the ``shared`` leading tokens once (:func:`_prefill_shared`, every
    row's own tokens then padded to the longest) computes fewer positions than the bucketed
    prefill: a chat template's 24 shared tokens do not pay for padding CID's short no-context
    prompts to the long ones (5,528 positions against about 3,700 on 16 demo examples)."""
    longest = max(len(s) for s in seqs)
    with_shared = shared + len(seqs) * (longest - shared)
    bucketed = sum(len(b) * max(len(seqs[r]) for r in b) for b in _buckets(seqs))
    return with_shared < bucketed


def _prefill_buckets(lm: LM, seqs: Sequence[Sequence[int]], pad: int,
                     alone: dict[int, Any] | None = None
                     ) -> tuple[torch.Tensor, Any, torch.Tensor, torch.Tensor]:
    """Prefill of left-padded rows, rows of similar length together: CID's prompt without the
    context is much shorter than the one with it, and padding it to the longest would compute
    the padding (a third of the positions on the demo set). Each bucket is left-padded to its
    own longest row and goes through the model alone; the caches are then left-padded with
    zeros (masked out) to the longest row and put back in row order. Mask and position ids are
    those of left-padding every row to the longest, so decoding goes on as after one prefill.
    Models whose cache is not plain per-layer tensors (sliding windows) get one prefill.

    ``alone``: rows prefilled each in its own bucket by :func:`prefill_alone`, whose caches are
    stored in ``alone[row]`` (read-only from then on: the merged cache is a new object)."""
    device = lm.device
    ids, mask, pos = left_pad(seqs, pad, device)
    own = {} if alone is None else alone
    buckets = _buckets(seqs, own)
    if (len(buckets) == 1 and not own) or sliding_window(lm) is not None:
        hidden, cache = hidden_states(lm, ids, mask, pos, use_cache=True)
        return hidden[:, -1:], cache, mask, pos
    width = ids.shape[1]
    parts, caches = [], []
    for bucket in buckets:
        if bucket[0] in own:
            hidden, cache = prefill_alone(lm, seqs[bucket[0]])
            own[bucket[0]] = cache
        else:
            b_ids, b_mask, b_pos = left_pad([seqs[r] for r in bucket], pad, device)
            hidden, cache = hidden_states(lm, b_ids, b_mask, b_pos, use_cache=True)
        parts.append(hidden[:, -1:])
        caches.append(cache)
    merged = copy.deepcopy(caches[0]) if buckets[0][0] in own else caches[0]
    layers: list[Any] = [getattr(c, "layers", None) for c in caches]
    if any(ls is None or any(not hasattr(layer, "keys") or getattr(layer, "is_sliding", False)
                             for layer in ls) for ls in layers):
        hidden, cache = hidden_states(lm, ids, mask, pos, use_cache=True)  # unknown cache type
        return hidden[:, -1:], cache, mask, pos
    back = torch.as_tensor([k for k, _ in sorted(enumerate(r for b in buckets for r in b),
                                                  key=lambda kr: kr[1])],
                           dtype=torch.long, device=device)

    def padded(t: torch.Tensor) -> torch.Tensor:
        extra = width - t.shape[-2]
        if extra == 0:
            return t
        return torch.cat([t.new_zeros((*t.shape[:-2], extra, t.shape[-1])), t], dim=-2)

    for i, layer in enumerate(merged.layers):
        layer.keys = torch.cat([padded(ls[i].keys) for ls in layers])[back]
        layer.values = torch.cat([padded(ls[i].values) for ls in layers])[back]
    return torch.cat(parts)[back], merged, mask, pos


def prefill_alone(lm: LM, prompt: Sequence[int]) -> tuple[torch.Tensor, Any]:
    """One prompt's prefill in the canonical shape of scoring's reference prefix
    (:func:`ctxleak.engine.scoring.continuation_logits`): all but its last token in one pass
    (batch 1, no padding), then the last token on that cache. Returns the last token's hidden
    state ``[1, 1, d]`` and the cache, whose first ``len(prompt) - 1`` positions are then the
    very numbers scoring would compute for that prefix."""
    device = lm.device
    head = torch.as_tensor([list(prompt[:-1])], dtype=torch.long, device=device)
    _, cache = hidden_states(lm, head, torch.ones_like(head), use_cache=True)
    last = torch.as_tensor([[int(prompt[-1])]], dtype=torch.long, device=device)
    hidden, cache = hidden_states(lm, last, torch.ones((1, len(prompt)), dtype=torch.long,
                                                       device=device),
                                  torch.as_tensor([[len(prompt) - 1]], device=device),
                                  cache=cache, use_cache=True)
    return hidden, cache


def _draw(logprobs: torch.Tensor, generator: torch.Generator, sample: bool) -> int:
    logprobs = logprobs.detach().to("cpu", torch.float64)
    if not sample:
        return int(torch.argmax(logprobs))
    probs = torch.exp(logprobs - logprobs.max())
    return int(torch.multinomial(probs / probs.sum(), 1, generator=generator))


def single_stream(temperature: float = 1.0) -> Combine:
    """Plain temperature sampling from one stream."""

    def combine(logits: torch.Tensor, step: int, excluded: tuple[int, ...] = ()) -> torch.Tensor:
        return torch.log_softmax(logits[0] / temperature, dim=-1)

    return combine


def beam_generate(lm: LM, prompts: Sequence[Sequence[int]], *, max_new_tokens: int,
                  num_beams: int = 2, batch_size: int | None = None) -> list[list[int]]:
    """New token ids for each prompt by beam search (greedy when ``num_beams == 1``), as
    ProPILE probes (paper 004, App. A.3: beam 2), no sampling, with Hugging Face's default
    generation settings otherwise. Prompts are
    left-padded with an attention mask; EOS and what follows it are dropped."""
    from transformers import GenerationConfig

    from ctxleak.engine.forward import left_pad, pad_id

    if num_beams < 1:
        raise ValueError("num_beams must be >= 1")
    pad = pad_id(lm)
    eos = list(lm.eos_ids)
    config = GenerationConfig(max_new_tokens=max_new_tokens, num_beams=num_beams,
                              do_sample=False, pad_token_id=pad,
                              eos_token_id=eos if eos else None)
    if not prompts:
        return []
    order = sorted(range(len(prompts)), key=lambda i: -len(prompts[i]))
    size = batch_size or max(1, min(16, 2048 // max(1, len(prompts[order[0]]))))
    out: list[list[int]] = [[] for _ in prompts]
    for start in range(0, len(order), size):
        chunk = order[start:start + size]
        ids, mask, _ = left_pad([list(prompts[i]) for i in chunk], pad, lm.device)
        with torch.inference_mode():
            generated = lm.model.generate(input_ids=ids, attention_mask=mask,
                                          generation_config=config)
        for row, i in enumerate(chunk):
            new = [int(t) for t in generated[row, ids.shape[1]:].tolist()]
            for k, tok in enumerate(new):
                if tok in eos:
                    new = new[:k]
                    break
            out[i] = new
    return out
