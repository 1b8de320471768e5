"""In-process generation: the model's own prompt streams decoded step by step in one batched KV
cache (:func:`decode_streams`, the :meth:`~ctxleak.engine.lm.InProcessLM.decode_streams`
operation), sampling (:func:`sample`) and transformers' beam search (:func:`beam_search`).

Rows are the jobs' streams side by side, left-padded with an attention mask and position ids
from each row's first real token. The prompts go through the model once
(:mod:`ctxleak.engine.local.prefill`), into a cache with room for the tokens still to come
(:mod:`ctxleak.engine.local.kvroom`); then each step is one forward pass over every live row, and
each job takes :func:`ctxleak.engine.streams.take_step` on its own rows with its own seeded
generator. A job that stops (EOS or its maximum) leaves the batch: its rows are dropped from the
cache, so finished examples stop costing compute. The draw is float64 with noise from a
counter-based hash (:mod:`ctxleak.kernels.draw`), so it gives the same tokens on every device and
does not depend on the device's random number generator.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from transformers import GenerationConfig

from ctxleak.engine.batching import policy_of
from ctxleak.engine.forward import head_logits, hidden_states, left_pad, pad_id
from ctxleak.engine.lm import InProcessLM
from ctxleak.engine.local.kvroom import give_room
from ctxleak.engine.local.prefill import prefill, sliding_window
from ctxleak.engine.progress import count_tokens
from ctxleak.engine.streams import Generation, StreamJob, share_step, single_stream, take_step
from ctxleak.kernels.draw import seeded_generator


def decode_streams(lm: InProcessLM, jobs: Sequence[StreamJob], stops: Sequence[int], *,
                   sample: bool, use_cache: bool = True, share_prefix: bool = True
                   ) -> list[Generation]:
    """One generation per (checked) job: every job's streams in one batched KV cache
    (``share_prefix``: the tokens every row begins with go through the model once), or
    ``use_cache=False``, each job alone with every stream recomputed from scratch at each step
    (the naive way, kept for tests and benchmarks)."""
    stop_ids = list(stops)
    if not use_cache:
        return [_generate_uncached(lm, job, stop_ids, sample) for job in jobs]
    # cached: one prefill of every job's streams, then one forward pass per step over the rows
    # of the jobs still running
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
            share_step([jobs[j] for j in live], [logits[slice(*rows[j])] for j in live], step,
                       stop_ids)
            for j in live:
                token = take_step(jobs[j], outs[j], logits[slice(*rows[j])], step, stop_ids,
                                  gens[j], sample)
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


def _generate_uncached(lm: InProcessLM, job: StreamJob, stops: list[int], sample: bool
                       ) -> Generation:
    """The naive way, for tests and benchmarks: every stream recomputed from scratch each step."""
    generator = seeded_generator(job.seed)
    pad = pad_id(lm)
    seqs = [list(p) for p in job.prompts]
    gen = Generation(token_ids=[], stopped_on_eos=False)
    with torch.inference_mode():
        for step in range(job.max_new_tokens):
            ids, mask, pos = left_pad(seqs, pad, lm.device)
            hidden, _ = hidden_states(lm, ids, mask, pos)
            token = take_step(job, gen, head_logits(lm, hidden[:, -1]).double(), step, stops,
                              generator, sample)
            if token is None:
                break
            seqs = [s + [token] for s in seqs]
    return gen


def sample(lm: InProcessLM, prompts: Sequence[Sequence[int]], seeds: Sequence[int], *,
           temperature: float, max_new_tokens: int, min_new_tokens: int = 0, n: int = 1
           ) -> list[list[Generation]]:
    """:func:`ctxleak.engine.generation.sample` in-process: :func:`decode_streams` with one
    stream per job, response j of prompt i drawn from seed ``seeds[i] + j``. The jobs record
    nothing, so a batch-invariant policy has no floats to replay: the tokens never depend on
    the batch."""
    combine = single_stream(temperature if temperature > 0 else 1.0)
    jobs = [StreamJob([list(p)], combine, None, int(seed) + j, max_new_tokens, min_new_tokens)
            for p, seed in zip(prompts, seeds) for j in range(n)]
    for job in jobs:
        job.check()
    gens = decode_streams(lm, jobs, lm.eos_ids, sample=temperature > 0) if jobs else []
    return [gens[i * n:(i + 1) * n] for i in range(len(prompts))]


def beam_search(lm: InProcessLM, prompts: Sequence[Sequence[int]], *, max_new_tokens: int,
                num_beams: int, batch_size: int | None = None) -> list[list[int]]:
    """:func:`ctxleak.engine.generation.beam_generate` in-process: transformers' ``generate``
    on left-padded batches."""
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
            new = (int(t) for t in generated[row, ids.shape[1]:].tolist())
            out[i] = list(itertools.takewhile(lambda tok: tok not in eos, new))
    return out
