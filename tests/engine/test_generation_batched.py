"""Generation across examples (issue 13): the streams of many examples in one batched KV cache
give each example the tokens it gets alone, and finished examples leave the batch."""

from __future__ import annotations

import pytest
import torch

from ctxleak.engine.generation import generate_many, generate_streams
from ctxleak.engine.local import generation as local_generation
from ctxleak.engine.local import prefill as prefilling
from ctxleak.engine.streams import StreamJob


def _mix(weights):
    def combine(logits, step, excluded):
        w = torch.as_tensor(weights, dtype=logits.dtype)[:, None]
        return torch.log_softmax((w * logits).sum(0) / 0.9, -1)
    return combine


def _observe(logits, logp, tok, step):
    return float(logp[tok]), logits[:, tok].tolist()


def _jobs(lm):
    enc = lm.encode
    texts = [["a job with no new tokens", "its rows leave at once"],
             ["the capital of france is paris . the capital of italy is", "the capital"],
             ["rome is a city .", "rome"],
             ["the doctor said the news report was one page . it was", "it was",
              "the news"],
             ["paris", "berlin is in germany . the city of"],
             ["the city of berlin is in germany . it is", "it is"]]
    limits = [(0, 0), (12, 3), (5, 5), (9, 0), (12, 12), (1, 0)]
    return [StreamJob([lm.bos_ids + enc(t) for t in streams], _mix([0.6] + [0.4 / (len(streams) - 1)]
                                                                  * (len(streams) - 1)),
                      _observe, seed=100 + k, max_new_tokens=mx, min_new_tokens=mn)
            for k, (streams, (mx, mn)) in enumerate(zip(texts, limits))]


def test_batched_jobs_match_each_job_alone(tiny_lm):
    """Same tokens for every batch composition (1, 3, all 6 jobs), log-probs equal to float
    noise; EOS ends a job early and a job with no new tokens gives none, without touching the
    others."""
    alone = [generate_streams(tiny_lm, j.prompts, j.combine, observe=j.observe, seed=j.seed,
                              max_new_tokens=j.max_new_tokens, min_new_tokens=j.min_new_tokens)
             for j in _jobs(tiny_lm)]
    for size in (1, 3, 6):
        jobs = _jobs(tiny_lm)
        got = [g for k in range(0, len(jobs), size) for g in generate_many(tiny_lm, jobs[k:k + size])]
        for a, b in zip(alone, got):
            assert b.token_ids == a.token_ids
            assert b.stopped_on_eos == a.stopped_on_eos
            assert len(b.records) == len(a.records)
            for ra, rb in zip(a.records, b.records):
                assert rb[0] == pytest.approx(ra[0], abs=1e-5)
                assert rb[1] == pytest.approx(ra[1], abs=1e-4)
    assert len(alone[5].token_ids) <= 1
    assert alone[0].token_ids == [] and alone[0].records == []


def test_uncached_batch_matches_cached(llama_lm):
    jobs = _jobs(llama_lm)
    a = generate_many(llama_lm, jobs)
    b = generate_many(llama_lm, _jobs(llama_lm), use_cache=False)
    assert [g.token_ids for g in a] == [g.token_ids for g in b]


def test_finished_jobs_leave_the_batch(llama_lm, monkeypatch):
    """A job that reaches its maximum stops costing compute: later forward passes carry only
    the live jobs' rows."""
    rows = []
    real = local_generation.hidden_states
    for module in (local_generation, prefilling):  # decode steps, and the prefill
        monkeypatch.setattr(module, "hidden_states",
                            lambda lm, ids, *a, **k: rows.append((ids.shape[0],
                                                                  k.get("cache") is None))
                            or real(lm, ids, *a, **k))
    enc = llama_lm.encode
    jobs = [StreamJob([llama_lm.bos_ids + enc("the capital of"), llama_lm.bos_ids + enc("rome")],
                      _mix([0.5, 0.5]), seed=1, max_new_tokens=2, min_new_tokens=2),
            StreamJob([llama_lm.bos_ids + enc("paris is")], _mix([1.0]), seed=2,
                      max_new_tokens=6, min_new_tokens=6)]
    out = generate_many(llama_lm, jobs)
    assert [len(g.token_ids) for g in out] == [2, 6]
    # prefill (3 rows, in buckets of similar length), step 1 with both jobs (3 rows), then only
    # the second job's row (1)
    assert sum(n for n, prefill in rows if prefill) == 3
    assert [n for n, prefill in rows if not prefill] == [3, 1, 1, 1, 1]


def test_jobs_are_checked(llama_lm):
    with pytest.raises(ValueError, match="non-empty"):
        generate_many(llama_lm, [StreamJob([[]], _mix([1.0]))])
    with pytest.raises(ValueError, match="min_new_tokens"):
        generate_many(llama_lm, [StreamJob([[3]], _mix([1.0]), max_new_tokens=1,
                                           min_new_tokens=2)])
    assert generate_many(llama_lm, []) == []


def test_bucketed_prefill_equals_one_padded_prefill(tiny_lm, monkeypatch):
    """Rows of very different lengths are prefilled in buckets and their caches merged with
    left padding: the same tokens and log-probs as one prefill of all rows padded together."""
    calls = []
    real = prefilling.hidden_states
    monkeypatch.setattr(prefilling, "hidden_states",
                        lambda lm, ids, *a, **k: calls.append((ids.shape, k.get("cache")))
                        or real(lm, ids, *a, **k))
    bucketed = generate_many(tiny_lm, _jobs(tiny_lm))
    prefill = [shape for shape, cache in calls if cache is None]
    assert len(prefill) >= 2  # the rows went through the model in several buckets
    rows = sum(len(j.prompts) for j in _jobs(tiny_lm))
    assert sum(s[0] for s in prefill) == rows
    monkeypatch.setattr(prefilling, "BUCKET_RATIO", 0.0)  # every row in one bucket
    calls.clear()
    single = generate_many(tiny_lm, _jobs(tiny_lm))
    assert [shape[0] for shape, cache in calls if cache is None] == [rows]
    for a, b in zip(single, bucketed):
        assert a.token_ids == b.token_ids
        for ra, rb in zip(a.records, b.records):
            assert rb[0] == pytest.approx(ra[0], abs=1e-5)
