"""Influence across examples (issue 13): the same seed gives the same samples whatever the
number of examples measured together, and batched n-gram scoring equals scoring one example at
a time."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers.cid_ledgers import cid_ledgers

import ctxleak
from ctxleak.engine.batching import BatchPolicy, shared_prefixes, using
from ctxleak.methods.influence.ngrams import (
    KEPT_VARIANTS,
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


def _samples(path) -> list[dict]:
    return [json.loads(line) for line in (path / "samples.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("settings", [
    dict(lambda_=[0.5, 1.0], ngram=3),  # CID with λ < 1 and plain decoding, n-gram windows
    dict(lambda_=1.5, bounded_eps=2.0, ngram=4, stride=2),  # bounded CID: λ_t, ε, sliding windows
], ids=["cid", "bounded"])
def test_same_samples_for_1_3_and_8_examples_per_batch(llama_lm, tmp_path, settings):
    """Batch invariance (issue 13): samples.jsonl is byte-identical whatever the number of
    examples measured together, floats included (log-probs, influences, λ_t, ε, windows)."""
    runs = {}
    for size in (1, 3, 8):
        out = tmp_path / f"b{size}"
        ctxleak.influence(llama_lm, _docs(), max_new_tokens=8, min_new_tokens=2, batch_size=size,
                          seed=5, output=str(out), progress=False, **settings)
        runs[size] = (out / "samples.jsonl").read_bytes()
    rows = [json.loads(line) for line in runs[1].splitlines()]
    assert len(rows) == 8 * (2 if isinstance(settings["lambda_"], list) else 1)
    assert all(r["window_influence"] for r in rows)
    if "bounded_eps" in settings:
        assert all(r["token_eps_ex_post"] and r["composed_eps"] is not None for r in rows)
        assert any(0 < x < 1.5 for r in rows for x in r["lambdas"])  # the bound binds
    assert runs[3] == runs[1]
    assert runs[8] == runs[1]


def test_a_sweep_gives_each_setting_the_records_of_its_own_run(llama_lm, tmp_path):
    """A sweep measures an example's settings together, sharing its prompts' KV caches
    (``shared_prefixes``): every record, floats and control included, is bitwise the record of
    a run of that setting alone."""
    docs = _docs(3)
    kw = dict(max_new_tokens=4, min_new_tokens=2, ngram=3, seed=5, progress=False)
    sweep = ctxleak.influence(llama_lm, docs, lambda_=[1.0, 0.5], output=str(tmp_path / "s"),
                              **kw)
    assert [r["id"] for r in sweep.records] == ["d0", "d0", "d1", "d1", "d2", "d2"]
    for lam in (1.0, 0.5):
        alone = ctxleak.influence(llama_lm, docs, lambda_=lam, output=str(tmp_path / f"{lam}"),
                                  **kw)
        mine = [r for r in _samples(tmp_path / "s") if r["lambda"] == lam]
        assert mine == _samples(tmp_path / f"{lam}")
        assert len(alone.records) == 3


def test_without_batch_invariance_tokens_still_match(llama_lm, tmp_path):
    """``batch_invariant=False`` (cross-example scoring passes): the same tokens, the floats
    equal up to the float noise of the batch shape; the option is in the run config."""
    runs = {}
    for size in (1, 8):
        out = tmp_path / f"b{size}"
        res = ctxleak.influence(llama_lm, _docs(), lambda_=0.5, max_new_tokens=8, min_new_tokens=2,
                                ngram=3, batch_size=size, seed=5, output=str(out),
                                progress=False, batch_invariant=False)
        assert res.config["batch_invariant"] is False
        runs[size] = _samples(out)
    out = tmp_path / "invariant"
    ctxleak.influence(llama_lm, _docs(), lambda_=0.5, max_new_tokens=8, min_new_tokens=2, ngram=3,
                      batch_size=8, seed=5, output=str(out), progress=False)
    invariant = _samples(out)
    for a, b, c in zip(runs[1], runs[8], invariant):
        assert b["response_ids"] == a["response_ids"] == c["response_ids"]
        np.testing.assert_allclose(b["window_influence"], a["window_influence"], atol=2e-5)
        assert b["influence"] == pytest.approx(a["influence"], abs=2e-5)
        # the generation's own log-probs (option off) and those the invariant run takes from
        # each example's window scoring describe the same distributions
        for key in ("logp_context", "logp_empty", "token_influence", "window_influence"):
            np.testing.assert_allclose(c[key], b[key], atol=2e-5)


def test_replayed_cid_floats_equal_the_generation_ones(llama_lm):
    """The recomputed (per-example, teacher-forced) log-probs, λ_t and ε describe the
    distributions the response was drawn from: equal to the generation's own to float noise."""
    from ctxleak.methods.influence.data import InfluenceExample, prompt_parts
    from ctxleak.mitigations.cid import CIDConfig, replay_cid

    parts = [prompt_parts(llama_lm, InfluenceExample(**d, reference=None, task="qa"))[0]
             for d in _docs(4)]
    for config in (CIDConfig(lam=0.5, temperature=0.8, max_new_tokens=8, min_new_tokens=3),
                   CIDConfig(lam=1.5, temperature=0.8, max_new_tokens=8, min_new_tokens=3,
                             bounded_eps=2.0)):
        gens = cid_ledgers(llama_lm, [(p.full, p.empty, config, 10 + k)
                                            for k, p in enumerate(parts)])
        for p, gen in zip(parts, gens):
            again = replay_cid(llama_lm, p.full, p.empty, config[0].settings(config[1]), gen)
            assert again.response_ids == gen.response_ids and again.stopped_on_eos == gen.stopped_on_eos
            np.testing.assert_allclose(again.logp_context, gen.logp_context, atol=1e-5)
            np.testing.assert_allclose(again.logp_empty, gen.logp_empty, atol=1e-5)
            np.testing.assert_allclose(again.lambdas, gen.lambdas, atol=1e-5)
            if config[0].bounded_eps is None:  # plain CID: no ε figures
                assert again.token_eps_ex_post is None and gen.token_eps_ex_post is None
            else:
                np.testing.assert_allclose(again.token_eps_ex_post, gen.token_eps_ex_post,
                                           atol=1e-5)
            assert len(again.lambdas) == len(gen.response_ids) + int(gen.stopped_on_eos)


def test_auto_batches_examples_and_resume_keeps_order(llama_lm, tmp_path, monkeypatch):
    """``auto`` measures several examples per call; a resumed run appends the rest in item
    order and gives the same records as an uninterrupted one."""
    from ctxleak.methods.influence.method import InfluenceMethod
    from ctxleak.run.manifest import digests_file

    sizes = []
    real = InfluenceMethod.measure
    monkeypatch.setattr(InfluenceMethod, "measure",
                        lambda self, lm, ready, items: sizes.append(len(items))
                        or real(self, lm, ready, items))
    kw = dict(max_new_tokens=6, min_new_tokens=1, ngram=4, seed=2, progress=False)
    whole = tmp_path / "whole"
    ctxleak.influence(llama_lm, _docs(6), output=str(whole), **kw)
    assert sizes == [1, 5]  # the first alone (the progress bar's early estimate), then the rest
    part = tmp_path / "part"
    ctxleak.influence(llama_lm, _docs(6), output=str(part), limit=2, **kw)
    # a resumed run must have the same config: finish the first 2 under a fresh limit-free run
    rows = (part / "samples.jsonl").read_text()
    resumed = tmp_path / "resumed"
    ctxleak.influence(llama_lm, _docs(6), output=str(resumed), **kw)
    (resumed / "samples.jsonl").write_text(rows)
    digests = digests_file(part / "samples.jsonl")  # as an interrupted run leaves them
    digests_file(resumed / "samples.jsonl").write_bytes(digests.read_bytes())
    sizes.clear()
    ctxleak.influence(llama_lm, _docs(6), output=str(resumed), resume=True, **kw)
    assert sizes == [1, 3]  # the 4 left, the first of them alone
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
        with using(tiny_lm, BatchPolicy.of(size)):
            many = window_influence_many(tiny_lm, requests)
        for r, got in zip(requests, many):
            with using(tiny_lm, BatchPolicy(batch_size=1)):
                alone = window_influence(tiny_lm, r.parts, r.response, r.spans, lam=r.lam,
                                         temperature=r.temperature,
                                         min_new_tokens=r.min_new_tokens, reuse_prefix=False)
            assert got.spans == list(r.spans)
            np.testing.assert_allclose(got.logp_context, alone.logp_context, atol=2e-5)
            np.testing.assert_allclose(got.logp_ablated, alone.logp_ablated, atol=2e-5)
    assert many[-1].logp_ablated.shape == (len(requests[0].spans), 0)


def test_resume_refuses_a_change_of_batch_invariance(llama_lm, tmp_path):
    from ctxleak.errors import ConfigError

    kw = dict(max_new_tokens=3, min_new_tokens=1, seed=1, progress=False, output=str(tmp_path))
    ctxleak.influence(llama_lm, _docs(3), limit=2, **kw)
    with pytest.raises(ConfigError, match="batch_invariant"):
        ctxleak.influence(llama_lm, _docs(3), resume=True, batch_invariant=False, **kw)
    ctxleak.influence(llama_lm, _docs(3), resume=True, batch_size=2, **kw)  # batch size: fine
    assert len(_samples(tmp_path)) == 3
    with pytest.raises(ConfigError, match="batch_invariant must be True or False"):
        ctxleak.influence(llama_lm, _docs(3), batch_invariant="yes", output=str(tmp_path / "x"))


def test_resume_refuses_a_run_started_under_another_seeded_draw(llama_lm, tmp_path,
                                                                 monkeypatch):
    """A run's samples drawn by one draw and its resumed rows by another would mix two
    samplers: resume refuses a folder whose config names another draw, or none (a folder of a
    ctxleak that recorded neither the draw nor a manifest), and resumes one naming this draw."""
    import json

    import ctxleak.run.runner as runner
    from ctxleak.errors import ConfigError
    from ctxleak.kernels.draw import DRAW

    kw = dict(max_new_tokens=3, min_new_tokens=1, seed=1, progress=False)
    out = tmp_path / "other"
    monkeypatch.setattr(runner, "DRAW", "torch.multinomial")
    ctxleak.influence(llama_lm, _docs(3), limit=2, output=str(out), **kw)
    monkeypatch.undo()
    with pytest.raises(ConfigError, match=r"differs in draw \(the seeded draw"):
        ctxleak.influence(llama_lm, _docs(3), resume=True, output=str(out), **kw)
    out = tmp_path / "old"
    ctxleak.influence(llama_lm, _docs(3), limit=2, output=str(out), **kw)
    config = json.loads((out / "config.json").read_text())
    assert config["draw"] == DRAW
    ctxleak.influence(llama_lm, _docs(3), resume=True, output=str(out), **kw)  # same draw
    assert len(_samples(out)) == 3
    for name in (".ctxleak-manifest.json", ".samples.jsonl.sha256"):
        (out / name).unlink()
    del config["draw"]
    (out / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    with pytest.raises(ConfigError, match="differs in draw"):
        ctxleak.influence(llama_lm, _docs(3), resume=True, output=str(out), **kw)


@pytest.mark.parametrize("invariant", [True, False])
def test_prefill_handed_to_scoring_equals_recomputation(llama_lm, monkeypatch, invariant):
    """Generation prefills each prompt with the context alone, in scoring's shape, and hands
    its KV cache to the n-gram scoring: the records equal those of scoring that recomputes the
    prefix, exactly, with one forward pass per example fewer in scoring."""
    import ctxleak.engine.local.scoring as scoring
    from ctxleak.methods.influence import pipeline
    from ctxleak.methods.influence.data import InfluenceExample

    jobs = [pipeline.Job(InfluenceExample(**d, reference=None, task="qa"),
                         pipeline.Setting.cid(lam, 0.8), 20 + k)
            for k, d in enumerate(_docs(4)) for lam in (0.5, 1.0)]
    options = pipeline.InfluenceOptions(max_new_tokens=6, min_new_tokens=2, ngram=3)
    calls = []
    real = scoring.hidden_states
    monkeypatch.setattr(scoring, "hidden_states",
                        lambda *a, **kw: calls.append(1) or real(*a, **kw))
    records, counts = {}, {}
    for hand_over in (False, True):
        calls.clear()
        with using(llama_lm, BatchPolicy(batch_size=3, invariant=invariant)):
            records[hand_over] = pipeline.measure_examples(llama_lm, jobs, options,
                                                           hand_over_prefill=hand_over)
        counts[hand_over] = len(calls)
    assert all(r["window_influence"] for r in records[True])
    if invariant:
        assert records[True] == records[False]
    else:  # the generation's own log-probs come from a prefill of another shape
        window = ("response_ids", "windows", "window_influence", "window_logp", "max_window")
        assert [{k: r[k] for k in window} for r in records[True]] == \
            [{k: r[k] for k in window} for r in records[False]]
    long_enough = sum(1 for ex, setting, _ in jobs if len(
        pipeline.example_parts(llama_lm, ex, setting, options)[0].full) - 1
        >= scoring.MIN_REUSE_TOKENS)
    assert long_enough >= 4 and counts[True] == counts[False] - long_enough


def test_a_handed_over_prefill_is_the_base_of_the_kept_variants(llama_lm, monkeypatch):
    """Inside ``shared_prefixes`` (every influence run), each prompt with a window left out
    keeps a KV cache of its own, built on the full prompt's: the prefill generation hands over
    is that base too, so scoring computes no pass over a full prompt (one per distinct prompt
    fewer; before, the variants computed it again) and the records are bitwise those of
    computing it."""
    import ctxleak.engine.local.scoring as scoring
    from ctxleak.methods.influence import pipeline
    from ctxleak.methods.influence.data import InfluenceExample

    jobs = [pipeline.Job(InfluenceExample(**d, reference=None, task="qa"),
                         pipeline.Setting.cid(lam, 0.8), 20 + k)
            for k, d in enumerate(_docs(8)[4:]) for lam in (0.5, 1.0)]
    options = pipeline.InfluenceOptions(max_new_tokens=6, min_new_tokens=2, ngram=8)
    fulls = {tuple(pipeline.example_parts(llama_lm, ex, setting, options)[0].full)
             for ex, setting, _ in jobs}
    assert len(fulls) == 4 and min(len(f) for f in fulls) > scoring.MIN_REUSE_TOKENS + 8
    widths = []
    real = scoring.hidden_states
    monkeypatch.setattr(scoring, "hidden_states", lambda lm, ids, *a, **kw:
                        widths.append(int(ids.shape[1])) or real(lm, ids, *a, **kw))
    records, passes = {}, {}
    for hand_over in (False, True):
        widths.clear()
        with shared_prefixes(), using(llama_lm, BatchPolicy(batch_size=3, invariant=True)):
            records[hand_over] = pipeline.measure_examples(llama_lm, jobs, options,
                                                           hand_over_prefill=hand_over)
        passes[hand_over] = list(widths)
    assert all(len(r["windows"]) <= KEPT_VARIANTS for r in records[True])
    assert records[True] == records[False]
    assert len(passes[True]) == len(passes[False]) - len(fulls)
    assert sum(passes[True]) == sum(passes[False]) - sum(len(f) - 1 for f in fulls)
