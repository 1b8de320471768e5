"""The DP mechanism across sequences (issue 13): the s streams of several synthetic sequences
in one batched KV cache give each sequence its own tokens and per-token losses."""

from __future__ import annotations

import pytest

from ctxleak.methods.audit.mechanism import PrivateJob, generate_private, generate_private_many


def test_sequences_generated_together_equal_each_alone(tiny_lm):
    enc = tiny_lm.encode
    head = tiny_lm.bos_ids + enc("the news report was one page .")
    texts = ["the capital of france is paris .", "rome is a city .", "the doctor said yes",
             "berlin is in germany .", "madrid"]
    jobs = [PrivateJob([head + enc(t) for t in texts[:3]], clip=2.0, temperature=1.5, alpha=4.0,
                       max_new_tokens=8, min_new_tokens=2, seed=1),
            PrivateJob([head + enc(t) for t in texts[1:]], clip=5.0, temperature=0.8, alpha=2.0,
                       max_new_tokens=5, seed=2),
            PrivateJob([enc(t) for t in texts[::2]], clip=1.0, temperature=2.0, alpha=None,
                       max_new_tokens=10, min_new_tokens=10, seed=3)]
    together = generate_private_many(tiny_lm, jobs)
    for job, got in zip(jobs, together):
        alone = generate_private(tiny_lm, job.prompts, clip=job.clip, temperature=job.temperature,
                                 alpha=job.alpha, max_new_tokens=job.max_new_tokens,
                                 min_new_tokens=job.min_new_tokens, seed=job.seed)
        assert got.token_ids == alone.token_ids
        assert got.stopped_on_eos == alone.stopped_on_eos
        assert got.token_argmax == alone.token_argmax
        assert got.token_rdp == pytest.approx(alone.token_rdp, rel=1e-4, abs=1e-10)
        assert got.prompt_rdp == pytest.approx(alone.prompt_rdp, rel=1e-4, abs=1e-10)
    assert together[2].token_rdp == [] and len(together[2].token_ids) == 10
    with pytest.raises(ValueError, match="at least 2 prompts"):
        generate_private_many(tiny_lm, [PrivateJob([head], clip=1.0, temperature=1.0, alpha=2.0)])


def test_replayed_losses_equal_the_generation_ones(tiny_lm):
    """Batch-invariant runs recompute each sequence's per-token RDP from its own s prompts
    (teacher-forced): the same tokens, and losses equal to those computed while decoding."""
    from ctxleak.methods.audit.mechanism import replay_private

    enc = tiny_lm.encode
    head = tiny_lm.bos_ids + enc("the news report was one page .")
    prompts = [head + enc(t) for t in ("the capital of france is paris .", "rome is a city .",
                                       "the doctor said yes")]
    for job in (PrivateJob(prompts, clip=2.0, temperature=1.5, alpha=4.0, max_new_tokens=8,
                           min_new_tokens=3, seed=1),
                PrivateJob(prompts[:2], clip=5.0, temperature=0.8, alpha=2.0, max_new_tokens=6,
                           seed=4)):
        gen = generate_private_many(tiny_lm, [job])[0]
        again = replay_private(tiny_lm, job, gen)
        assert again.token_ids == gen.token_ids and again.stopped_on_eos == gen.stopped_on_eos
        assert len(again.token_rdp) == gen.n_released and again.token_argmax == gen.token_argmax
        assert again.token_rdp == pytest.approx(gen.token_rdp, rel=1e-4, abs=1e-10)
        assert again.prompt_rdp == pytest.approx(gen.prompt_rdp, rel=1e-4, abs=1e-10)
