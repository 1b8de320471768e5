"""Generation over several prompt streams combined step by step.

At each step every stream's next-token logits are computed (one batched forward pass over the
streams, each with its own KV cache row), a caller-given ``combine`` turns them into one
distribution, a token is drawn from it, and that token is appended to every stream. Context
Influence Decoding (Def. 3.4 of "Estimating Privacy Leakage of Augmented Contextual Knowledge in
Language Models") combines two streams (with and without the context); the DP synthetic-text
mechanism (App. C.1 of "Evaluating Privacy Leakage From In-Context Learning") combines s
one-shot prompts.

Sampling is seeded by (run seed, example index) through :func:`derive_seed`, so the same example
gets the same draws whatever the sharding or order of a run. The draw itself happens on the CPU
in float64, so it does not depend on the device's random number generator.

Batch-invariant numerics: the tokens of a job do not depend on the jobs decoded with it, but the
logits do, by float noise (float32 matrix products change with the number of rows, attention
with the padding). Under the model's batch-invariant policy (:mod:`ctxleak.engine.batching`)
every float a job records (CID's log-probs, λ_t and ε, the DP mechanism's divergences) is
therefore recomputed after generation by :func:`replay`: the job's own prompt streams scored
teacher-forced with the generated tokens, in forward passes that hold this job only and whose
shapes depend only on it, and ``combine`` and ``observe`` run again over those logits, step by
step, exactly as during generation (EOS masked before the minimum length, float64). The records
are then byte-identical whatever the batch size, the number of examples in flight or the
data-parallel sharding, and describe the same distributions as the generation's own up to float
noise (about 1e-6). The prefill code lives in :mod:`ctxleak.engine.prefill`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from transformers import GenerationConfig

from ctxleak.engine.batching import policy_of
from ctxleak.engine.capabilities import (
    NEXT_TOKEN_DISTRIBUTION,
    WEIGHTS,
    capabilities_of,
    check_capabilities,
)
from ctxleak.engine.forward import head_logits, hidden_states, left_pad, pad_id
from ctxleak.engine.kvroom import give_room
from ctxleak.engine.lm import Generation, InProcessLM, LanguageModel
from ctxleak.engine.prefill import prefill, sliding_window
from ctxleak.engine.progress import count_tokens
from ctxleak.engine.scoring import continuation_logits
from ctxleak.kernels.cid import MASKED_LOGIT
from ctxleak.kernels.draw import draw, seeded_generator

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


@dataclass
class StreamJob:
    """One example's generation for :func:`generate_many`: its prompt streams, how they combine,
    its own seed (drawn from by this example only) and its length limits.

    ``combine`` and ``observe`` may pass state within a step (``observe`` follows ``combine``
    of the same step) but keep none across steps: everything read after generation comes from
    the records, since the engine may run a job's steps again (:func:`replay`)."""

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
    # batch-invariant policy: recompute the records from this job alone (:func:`replay`);
    # False when the caller takes these floats from passes of its own example instead
    replay: bool = True

    def check(self) -> None:
        if not self.prompts or any(len(p) == 0 for p in self.prompts):
            raise ValueError("every stream needs a non-empty prompt")
        if (self.max_new_tokens < 0 or self.min_new_tokens < 0
                or self.min_new_tokens > self.max_new_tokens):
            raise ValueError("need 0 <= min_new_tokens <= max_new_tokens")


def generate_streams(lm: InProcessLM, prompts: Sequence[Sequence[int]], combine: Combine, *,
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


def generate_many(lm: LanguageModel, jobs: Sequence[StreamJob], *, sample: bool = True,
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

    Under the model's batch-invariant policy (:mod:`ctxleak.engine.batching`) each job's records
    are then recomputed from its own streams alone (:func:`replay`; not for a job with
    ``replay=False``, whose caller takes its floats from passes of its own example), so they do
    not depend on the batch either.

    A model without weights in this process that gives the whole next-token distribution (a
    vLLM server) decodes by :func:`decode_by_requests` instead: the same steps, masks, draws and
    records, from one request per stream and step.
    """
    for job in jobs:
        job.check()
    if not jobs:
        return []
    stops = list(lm.eos_ids if stop_ids is None else stop_ids)
    if WEIGHTS not in capabilities_of(lm):
        return decode_by_requests(lm, jobs, stops, sample)
    local = lm.in_process("decoding from the model's logits")
    if not use_cache:
        outs = [_generate_uncached(local, job, stops, sample) for job in jobs]
    else:
        outs = _decode_together(local, jobs, stops, sample, share_prefix)
    if not policy_of(local).invariant:
        return outs
    return [replay(local, job, gen, stop_ids=stops) if job.replay else gen
            for job, gen in zip(jobs, outs)]


def decode_by_requests(lm: LanguageModel, jobs: Sequence[StreamJob], stops: list[int],
                       sample: bool) -> list[Generation]:
    """:func:`generate_many` on a model that gives the whole next-token distribution but no
    weights here (a served model): at each step one list of requests, the next-token
    log-probs of every live stream (``lm.next_token_logprobs``, sent together), then each
    job's :func:`_step` exactly as in-process. Log-probs stand in for logits: they differ by
    one constant per row, which ``combine`` removes (every combiner ends in a softmax). A
    served model's numbers do not depend on the requests sent with them, so nothing is
    replayed."""
    check_capabilities(lm, {NEXT_TOKEN_DISTRIBUTION: "decoding from a combination of "
                            "next-token distributions needs every token's log-prob at each step"},
                       what="this generation")
    gens = [seeded_generator(job.seed) for job in jobs]
    outs = [Generation(token_ids=[], stopped_on_eos=False) for _ in jobs]
    seqs = [[list(p) for p in job.prompts] for job in jobs]
    live = [j for j, job in enumerate(jobs) if job.max_new_tokens > 0]
    step = 0
    while live:
        table = lm.next_token_logprobs([s for j in live for s in seqs[j]]).double()
        at, still = 0, []
        for j in live:
            own = table[at:at + len(seqs[j])].clone()
            at += len(seqs[j])
            token = _step(jobs[j], outs[j], own, step, stops, gens[j], sample)
            if token is not None:
                seqs[j] = [s + [token] for s in seqs[j]]
                still.append(j)
        count_tokens(len(live))
        live = still
        step += 1
    return outs


def _decode_together(lm: InProcessLM, jobs: Sequence[StreamJob], stops: list[int], sample: bool,
                     share_prefix: bool) -> list[Generation]:
    """:func:`generate_many`'s cached decoding: one prefill of every job's streams, then one
    forward pass per step over the rows of the jobs still running."""
    seqs = [list(p) for job in jobs for p in job.prompts]
    bounds = np.cumsum([0] + [len(job.prompts) for job in jobs]).tolist()
    gens = [seeded_generator(job.seed) for job in jobs]
    outs = [Generation(token_ids=[], stopped_on_eos=False) for _ in jobs]
    live = [j for j, job in enumerate(jobs) if job.max_new_tokens > 0]
    if not live:
        return outs
    with torch.inference_mode():
        longest = max(job.max_new_tokens for job in jobs)
        alone: dict[int, Any] = {bounds[j] + k: None for j, job in enumerate(jobs)
                                 for k in job.keep_prompt_cache
                                 if len(seqs[bounds[j] + k]) > 1} \
            if sliding_window(lm) is None else {}
        hidden, cache, mask, pos = prefill(lm, seqs, pad_id(lm), share_prefix=share_prefix,
                                           longest_new=longest, alone=alone)
        for j, job in enumerate(jobs):  # each kept prompt's cache, prefilled alone
            outs[j].prompt_caches = {k: alone[bounds[j] + k] for k in job.keep_prompt_cache
                                     if alone.get(bounds[j] + k) is not None}
        give_room(cache, longest - 1)  # decode steps write in place, no torch.cat of the cache
        rows = {j: (bounds[j], bounds[j + 1]) for j in live}  # each live job's rows, in order
        step = 0
        while True:
            logits = head_logits(lm, hidden[:, -1]).double()
            tokens: dict[int, int] = {}
            for j in live:
                token = _step(jobs[j], outs[j], logits[slice(*rows[j])], step, stops, gens[j],
                              sample)
                if token is not None:
                    tokens[j] = token
            if not tokens:
                break
            keep = [r for j in live if j in tokens for r in range(*rows[j])]
            if len(keep) < mask.shape[0]:  # drop the finished jobs' rows from the batch
                index = torch.as_tensor(keep, dtype=torch.long, device=lm.device)
                cache.batch_select_indices(index)
                mask, pos = mask[index], pos[index]
            live = [j for j in live if j in tokens]
            sizes = [rows[j][1] - rows[j][0] for j in live]
            starts = np.cumsum([0] + sizes).tolist()
            rows = {j: (starts[k], starts[k + 1]) for k, j in enumerate(live)}
            new = torch.as_tensor([[tokens[j]] for j in live for _ in range(*rows[j])],
                                  dtype=torch.long, device=lm.device)
            mask = torch.cat([mask, torch.ones_like(new)], dim=1)
            pos = pos[:, -1:] + 1
            hidden, cache = hidden_states(lm, new, mask, pos, cache=cache, use_cache=True)
            step += 1
    return outs


def _step(job: StreamJob, out: Generation, own: torch.Tensor, step: int, stops: list[int],
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


def _generate_uncached(lm: InProcessLM, job: StreamJob, stops: list[int], sample: bool) -> Generation:
    """The naive way, for tests and benchmarks: every stream recomputed from scratch each step."""
    generator = seeded_generator(job.seed)
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
            token = draw(logprobs, generator, sample)
            if job.observe is not None:
                gen.records.append(job.observe(logits, logprobs, token, step))
            if token in stops:
                gen.stopped_on_eos = True
                break
            gen.token_ids.append(token)
            seqs = [s + [token] for s in seqs]
    return gen


def single_stream(temperature: float = 1.0) -> Combine:
    """Plain temperature sampling from one stream."""

    def combine(logits: torch.Tensor, step: int, excluded: tuple[int, ...] = ()) -> torch.Tensor:
        return torch.log_softmax(logits[0] / temperature, dim=-1)

    return combine


def sample(lm: LanguageModel, prompts: Sequence[Sequence[int]], seeds: Sequence[int], *,
           temperature: float, max_new_tokens: int, min_new_tokens: int = 0, n: int = 1
           ) -> list[list[Generation]]:
    """``n`` responses to each prompt, the sampling operation of every backend: response j of
    prompt i drawn from the seed ``seeds[i] + j`` at ``temperature`` (0: greedy), EOS masked
    before ``min_new_tokens``; for each prompt its ``n`` generations (no records). A served
    model samples on its server (vLLM seeds choice j with seed + j too, so give seeds that lie
    ``n`` or more apart); in-process, :func:`generate_many` with one stream per job."""
    if temperature < 0:
        raise ValueError(f"temperature must be >= 0, not {temperature}")
    if len(seeds) != len(prompts):
        raise ValueError("need one seed per prompt")
    return lm.sample(prompts, seeds, temperature=temperature, max_new_tokens=max_new_tokens,
                     min_new_tokens=min_new_tokens, n=n)


def local_sample(lm: InProcessLM, prompts: Sequence[Sequence[int]], seeds: Sequence[int], *,
                 temperature: float, max_new_tokens: int, min_new_tokens: int = 0, n: int = 1
                 ) -> list[list[Generation]]:
    """:func:`sample` in-process: :func:`generate_many` with one stream per job."""
    combine = single_stream(temperature if temperature > 0 else 1.0)
    jobs = [StreamJob([list(p)], combine, None, int(seed) + j, max_new_tokens, min_new_tokens)
            for p, seed in zip(prompts, seeds) for j in range(n)]
    gens = generate_many(lm, jobs, sample=temperature > 0)
    return [gens[i * n:(i + 1) * n] for i in range(len(prompts))]


def beam_generate(lm: LanguageModel, prompts: Sequence[Sequence[int]], *, max_new_tokens: int,
                  num_beams: int = 2, batch_size: int | None = None) -> list[list[int]]:
    """New token ids for each prompt by beam search (greedy when ``num_beams == 1``), as
    ProPILE probes (App. A.3: beam 2), no sampling, with Hugging Face's default
    generation settings otherwise. Prompts are left-padded with an attention mask, longest
    first, ``batch_size`` at a time (None: the model's batching policy's, or as many as fit 2048
    tokens, at most 16); EOS and what follows it are dropped."""
    if num_beams < 1:
        raise ValueError("num_beams must be >= 1")
    return lm.beam_search(prompts, max_new_tokens=max_new_tokens, num_beams=num_beams,
                          batch_size=batch_size)


def local_beam_search(lm: InProcessLM, prompts: Sequence[Sequence[int]], *, max_new_tokens: int,
                      num_beams: int, batch_size: int | None = None) -> list[list[int]]:
    """:func:`beam_generate` in-process: transformers' ``generate`` on left-padded batches."""
    pad = pad_id(lm)
    eos = list(lm.eos_ids)
    config = GenerationConfig(max_new_tokens=max_new_tokens, num_beams=num_beams,
                              do_sample=False, pad_token_id=pad,
                              eos_token_id=eos if eos else None)
    if not prompts:
        return []
    order = sorted(range(len(prompts)), key=lambda i: -len(prompts[i]))
    size = batch_size or policy_of(lm).batch_size \
        or max(1, min(16, 2048 // max(1, len(prompts[order[0]]))))
    out: list[list[int]] = [[] for _ in prompts]
    for start in range(0, len(order), size):
        chunk = order[start:start + size]
        ids, mask, _ = left_pad([list(prompts[i]) for i in chunk], pad, lm.device)
        with torch.inference_mode():
            generated = lm.model.generate(input_ids=ids, attention_mask=mask,
                                          generation_config=config)
        count_tokens(int(generated.shape[0]) * int(generated.shape[1]))  # for the progress bar
        for row, i in enumerate(chunk):
            new = [int(t) for t in generated[row, ids.shape[1]:].tolist()]
            for k, tok in enumerate(new):
                if tok in eos:
                    new = new[:k]
                    break
            out[i] = new
    return out


def stream_logits(lm: LanguageModel, prompts: Sequence[Sequence[int]], token_ids: Sequence[int],
                  stopped_on_eos: bool, *, reuse_prefix: bool = True) -> list[torch.Tensor]:
    """Raw next-token logits (float32 ``[steps, V]``, no EOS mask) of each prompt stream at every
    step of a finished generation: row t follows ``prompt + token_ids[:t]``. ``steps`` is
    ``len(token_ids)``, plus one when EOS ended the generation (the step that drew it).

    Computed teacher-forced from these prompts only (one planner run, rows per pass from the
    token budget; ``reuse_prefix``: the streams share the KV cache of the first one's prefix)."""
    steps = len(token_ids) + int(stopped_on_eos)
    if steps == 0:
        return [torch.zeros((0, 0)) for _ in prompts]
    # the token after the last scored step is never read: any id completes the sequence
    filler = list(lm.eos_ids[:1]) or [int(prompts[0][-1])]
    cont = list(token_ids) + (filler if stopped_on_eos else [])
    return continuation_logits(lm, [list(p) for p in prompts], cont, reuse_prefix=reuse_prefix,
                               batch_size="auto", reduce=lambda i, z: z.float())


def replay(lm: LanguageModel, job: StreamJob, generation: Generation, *,
           stop_ids: Sequence[int] | None = None, reuse_prefix: bool = True) -> Generation:
    """``generation`` (of ``job``) with its per-step records recomputed by :func:`stream_logits`:
    at step t the streams' logits get the EOS mask of step t, ``job.combine`` gives the
    distribution and ``job.observe`` the record of the token drawn then (the generated token, or
    the stopping EOS: ``stop_ids[0]``, as which EOS id was drawn is not kept). Same tokens, new
    records (and no prompt caches)."""
    stops = list(lm.eos_ids if stop_ids is None else stop_ids)
    tokens = list(generation.token_ids)
    logits = stream_logits(lm, job.prompts, tokens, generation.stopped_on_eos,
                           reuse_prefix=reuse_prefix)
    out = Generation(token_ids=tokens, stopped_on_eos=generation.stopped_on_eos)
    drawn = tokens + (stops[:1] if generation.stopped_on_eos else [])
    for step, token in enumerate(drawn):
        own = torch.stack([z[step] for z in logits]).double()
        mask_eos_before_min(own, stops, job.min_new_tokens, step=step)
        logprobs = job.combine(own, step, masked_ids(stops, job.min_new_tokens, step))
        if job.observe is not None:
            out.records.append(job.observe(own, logprobs, token, step))
    return out
