"""Influence across examples (issue 13): the same seed gives the same samples whatever the
number of examples measured together, and batched n-gram scoring equals scoring one example at
a time."""

from __future__ import annotations

import json

import numpy as np
import pytest

import ctxleak
from ctxleak.methods.influence.ngrams import (
    PromptParts,
    WindowRequest,
    window_influence,
    window_influence_many,
    windows,
)

WORDS = ("the capital of france is paris . rome is the capital of italy and a city . the doctor "
         "said the news report was one page . berlin is in germany .").split()


def _docs(n: int = 8) -> list[dict]:
    """Contexts of different lengths (so rows are padded differently in every batch)."""
    return [{"id": f"d{i}", "context": " ".join(WORDS[i:i + 6 + 3 * i]),
             "query": "what is the capital ?"} for i in range(n)]


FLOATS = ("logp_context", "logp_empty", "token_influence", "influence", "window_influence",
          "window_logp", "max_window_influence", "rouge_context", "rouge_l",
          "context_token_fraction")


def _samples(path) -> list[dict]:
    return [json.loads(line) for line in (path / "samples.jsonl").read_text().splitlines()]


def test_same_samples_for_1_3_and_8_examples_per_batch(llama_lm, tmp_path):
    """samples.jsonl: same ids in the same order, byte-identical responses and token ids, the
    log-probs equal up to float noise of the batch shape (padding, row count)."""
    runs = {}
    for size in (1, 3, 8):
        out = tmp_path / f"b{size}"
        ctxleak.influence(llama_lm, _docs(), lam=[0.5, 1.0], max_new_tokens=8,
                          min_new_tokens=2, ngram=3, batch_size=size, seed=5,
                          output=str(out), progress=False)
        runs[size] = _samples(out)
    base = runs[1]
    assert len(base) == 16
    for size in (3, 8):
        assert [r["id"] for r in runs[size]] == [r["id"] for r in base]
        for a, b in zip(base, runs[size]):
            assert b["response_ids"] == a["response_ids"] and b["response"] == a["response"]
            assert b["seed"] == a["seed"] and b.get("windows") == a.get("windows")
            for key in FLOATS:
                if a.get(key) is None:
                    assert b.get(key) is None
                    continue
                assert np.asarray(b[key], dtype=float) == pytest.approx(
                    np.asarray(a[key], dtype=float), abs=2e-5), key
            rest = {k: v for k, v in a.items() if k not in FLOATS}
            assert {k: b[k] for k in rest} == rest


def test_auto_batches_examples_and_resume_keeps_order(llama_lm, tmp_path, monkeypatch):
    """``auto`` measures several examples per call; a resumed run appends the rest in item
    order and gives the same records as an uninterrupted one."""
    from ctxleak.methods.influence.method import InfluenceMethod

    sizes = []
    real = InfluenceMethod.measure
    monkeypatch.setattr(InfluenceMethod, "measure",
                        lambda self, lm, items: sizes.append(len(items)) or real(self, lm, items))
    kw = dict(max_new_tokens=6, min_new_tokens=1, ngram=4, seed=2, progress=False)
    whole = tmp_path / "whole"
    ctxleak.influence(llama_lm, _docs(6), output=str(whole), **kw)
    assert sizes == [6]
    part = tmp_path / "part"
    ctxleak.influence(llama_lm, _docs(6), output=str(part), limit=2, **kw)
    # a resumed run must have the same config: finish the first 2 under a fresh limit-free run
    rows = (part / "samples.jsonl").read_text()
    resumed = tmp_path / "resumed"
    ctxleak.influence(llama_lm, _docs(6), output=str(resumed), **kw)
    (resumed / "samples.jsonl").write_text(rows)
    sizes.clear()
    ctxleak.influence(llama_lm, _docs(6), output=str(resumed), resume=True, **kw)
    assert sizes == [4]
    a, b = _samples(whole), _samples(resumed)
    assert [r["id"] for r in b] == [r["id"] for r in a]
    assert [r["response_ids"] for r in b] == [r["response_ids"] for r in a]


def test_window_influence_many_equals_one_at_a_time(tiny_lm):
    enc = tiny_lm.encode
    requests = []
    for k, (ctx, lam, mn) in enumerate([("the capital of france is paris . rome is the capital "
                                         "of italy", 1.0, 2),
                                        ("berlin is in germany .", 0.5, 0),
                                        ("the doctor said the news report was one page . the "
                                         "city of rome", 1.5, 4)]):
        parts = PromptParts(tuple(tiny_lm.bos_ids + enc("document :")), tuple(enc(ctx)),
                            tuple(enc(". what is the capital ?")))
        response = enc("paris is the capital of the city")[:5 + k]
        requests.append(WindowRequest(parts, response, windows(len(parts.context), 2 + k),
                                      lam=lam, temperature=0.8, min_new_tokens=mn))
    requests.append(WindowRequest(requests[0].parts, [], requests[0].spans))  # empty response
    for size in ("auto", 2):
        many = window_influence_many(tiny_lm, requests, batch_size=size)
        for r, got in zip(requests, many):
            alone = window_influence(tiny_lm, r.parts, r.response, r.spans, lam=r.lam,
                                     temperature=r.temperature, min_new_tokens=r.min_new_tokens,
                                     reuse_prefix=False, batch_size=1)
            assert got.spans == list(r.spans)
            np.testing.assert_allclose(got.logp_context, alone.logp_context, atol=2e-5)
            np.testing.assert_allclose(got.logp_ablated, alone.logp_ablated, atol=2e-5)
    assert many[-1].logp_ablated.shape == (len(requests[0].spans), 0)
