"""Batch-invariant numerics (issue 13): the floats of a generation recomputed from its example
alone.

:func:`~ctxleak.engine.generation.generate_many` decodes the streams of many examples in one
batched KV cache. Its tokens do not depend on the batch (each example draws from its own
generator), but the logits it computes do, by float noise: float32 matrix products change with
the number of rows, attention with the padding. So every float a method writes for an example
(CID's log-probs, λ_t and ε, the DP mechanism's divergences) is recomputed after generation by
:func:`replay`: the example's own prompt streams are scored teacher-forced with the generated
tokens, in forward passes that hold this example only and whose shapes depend only on it (one
planner run over its streams, rows per pass from the token budget), and the job's ``combine`` and
``observe`` are run again over those logits, step by step, exactly as during generation (EOS
masked before the minimum length, float64). The result is byte-identical whatever the batch
size, the number of examples in flight or the data-parallel sharding, and describes the same
distributions as the generation's own records up to float noise (about 1e-6).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ctxleak.engine.generation import Generation, StreamJob, mask_eos_before_min, masked_ids
from ctxleak.engine.models import LM
from ctxleak.engine.scoring import continuation_logits


def stream_logits(lm: LM, prompts: Sequence[Sequence[int]], token_ids: Sequence[int],
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


def replay(lm: LM, job: StreamJob, generation: Generation, *,
           stop_ids: Sequence[int] | None = None, reuse_prefix: bool = True) -> Generation:
    """``generation`` (of ``job``) with its per-step records recomputed by :func:`stream_logits`:
    at step t the streams' logits get the EOS mask of step t, ``job.combine`` gives the
    distribution and ``job.observe`` the record of the token drawn then (the generated token, or
    the stopping EOS: ``stop_ids[0]``, as which EOS id was drawn is not kept). ``job`` must be a
    fresh job whose callbacks hold no state from the generation. Same tokens, new records."""
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
