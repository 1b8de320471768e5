"""Generation over several prompt streams combined step by step: the backend-free functions
every method calls, dispatched through the model's interface (:mod:`ctxleak.engine.lm`).

At each step every stream's next-token distribution is computed, the job's ``combine`` turns
them into one distribution, a token is drawn from it, and that token is appended to every stream
(:mod:`ctxleak.engine.streams`: the request, its result and the step). A model in this process
decodes all jobs' streams in one batched KV cache (its
:meth:`~ctxleak.engine.lm.InProcessLM.decode_streams`, :mod:`ctxleak.engine.local.generation`);
a served model that gives the whole next-token distribution answers one request per stream and
step (:func:`decode_by_requests`). Context Influence Decoding (Def. 3.4 of "Estimating Privacy
Leakage of Augmented Contextual Knowledge in Language Models") combines two streams (with and
without the context); the DP synthetic-text mechanism (App. C.1 of "Evaluating Privacy Leakage
From In-Context Learning") combines s one-shot prompts.

Sampling is seeded by (run seed, example index) through :func:`derive_seed`, so the same example
gets the same draws whatever the sharding or order of a run. The draw itself is float64 with
noise from a counter-based hash keyed by the example's own CPU generator
(:mod:`ctxleak.kernels.draw`), so it gives the same tokens on every device and does not depend on
the device's random number generator.

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
noise (about 1e-6).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from ctxleak.engine.batching import policy_of
from ctxleak.engine.capabilities import (
    NEXT_TOKEN_DISTRIBUTION,
    WEIGHTS,
    capabilities_of,
    check_capabilities,
)
from ctxleak.engine.lm import InProcessLM, LanguageModel
from ctxleak.engine.progress import count_tokens
from ctxleak.engine.scoring import continuation_logits
from ctxleak.engine.streams import (
    Combine,
    Generation,
    Observe,
    StreamJob,
    mask_eos_before_min,
    masked_ids,
    take_step,
)
from ctxleak.kernels.draw import seeded_generator

__all__ = ["beam_generate", "decode_by_requests", "derive_seed", "generate_many",
           "generate_streams", "replay", "sample", "stream_logits"]


def derive_seed(run_seed: int, example_index: int) -> int:
    """A 63-bit seed for one example, independent of the order examples are processed in."""
    state = np.random.SeedSequence([int(run_seed) & 0xFFFFFFFF, int(example_index)])
    return int(state.generate_state(2, dtype=np.uint32).astype(np.uint64) @
               np.array([1 << 31, 1], dtype=np.uint64)) & ((1 << 63) - 1)


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
    """Generate one response per job, the streams of all jobs decoded in one batched KV cache
    (the model's :meth:`~ctxleak.engine.lm.InProcessLM.decode_streams`,
    :mod:`ctxleak.engine.local.generation`).

    Each job combines its own rows, masks EOS before its own minimum and draws from its own
    generator (seeded by ``job.seed``), so a job's tokens do not depend on which other jobs
    share its batch (up to float noise in the logits); a job that stops leaves the batch.
    ``share_prefix``: the tokens every row begins with go through the model once;
    ``use_cache=False``: every stream recomputed from scratch at each step (tests, benchmarks).

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
    outs = local.decode_streams(jobs, stops, sample=sample, use_cache=use_cache,
                                share_prefix=share_prefix)
    if not policy_of(local).invariant:
        return outs
    return [replay(local, job, gen, stop_ids=stops) if job.replay else gen
            for job, gen in zip(jobs, outs)]


def decode_by_requests(lm: LanguageModel, jobs: Sequence[StreamJob], stops: list[int],
                       sample: bool) -> list[Generation]:
    """:func:`generate_many` on a model that gives the whole next-token distribution but no
    weights here (a served model): at each step one list of requests, the next-token
    log-probs of every live stream (``lm.next_token_logprobs``, sent together), then each
    job's :func:`~ctxleak.engine.streams.take_step` exactly as in-process. Log-probs stand in
    for logits: they differ by one constant per row, which ``combine`` removes (every combiner
    ends in a softmax). A served model's numbers do not depend on the requests sent with them,
    so nothing is replayed."""
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
            token = take_step(jobs[j], outs[j], own, step, stops, gens[j], sample)
            if token is not None:
                seqs[j] = [s + [token] for s in seqs[j]]
                still.append(j)
        count_tokens(len(live))
        live = still
        step += 1
    return outs


def sample(lm: LanguageModel, prompts: Sequence[Sequence[int]], seeds: Sequence[int], *,
           temperature: float, max_new_tokens: int, min_new_tokens: int = 0, n: int = 1
           ) -> list[list[Generation]]:
    """``n`` responses to each prompt, the sampling operation of every backend: response j of
    prompt i drawn from the seed ``seeds[i] + j`` at ``temperature`` (0: greedy), EOS masked
    before ``min_new_tokens``; for each prompt its ``n`` generations (no records). A served
    model samples on its server (vLLM seeds choice j with seed + j too, so give seeds that lie
    ``n`` or more apart); in-process, one stream per job decoded together
    (:func:`ctxleak.engine.local.generation.sample`)."""
    if temperature < 0:
        raise ValueError(f"temperature must be >= 0, not {temperature}")
    if len(seeds) != len(prompts):
        raise ValueError("need one seed per prompt")
    return lm.sample(prompts, seeds, temperature=temperature, max_new_tokens=max_new_tokens,
                     min_new_tokens=min_new_tokens, n=n)


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
