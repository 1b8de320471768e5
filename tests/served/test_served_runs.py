"""Runs against a real vLLM server (the session's, on the default model) equal the same runs
in-process, within tolerance. The refusals, a wrong tokenizer, an unknown served model, HTTP
errors and dead or slow servers are client logic: tests/served/test_fake_served.py checks them
against a fake vLLM server in the fast tier."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from helpers.cid_ledgers import cid_ledgers
from helpers.rundiff import untimed

import ctxleak
from ctxleak.engine.scoring import continuation_logits
from ctxleak.engine.served import serve
from ctxleak.methods.influence.data import load_examples
from ctxleak.methods.influence.pipeline import InfluenceOptions, Setting, example_parts
from ctxleak.mitigations.cid import CIDConfig
from ctxleak.run.records import demo_path

pytestmark = [pytest.mark.served, pytest.mark.integration]

PER_TOKEN = 1e-4  # nats: served and in-process log-probs of one token
# summed or averaged quantities (records round to 6 digits; sums over up to 50 tokens)
ATOL, RTOL = 5e-3, 1e-3


def assert_close(a, b, path: str = "record") -> None:
    """Two parsed records equal: numbers within ATOL + RTOL * |b|, everything else exactly."""
    if isinstance(a, dict) and isinstance(b, dict):
        assert a.keys() == b.keys(), f"{path}: keys {sorted(a.keys() ^ b.keys())} differ"
        for k in a:
            assert_close(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, list) and isinstance(b, list):
        assert len(a) == len(b), f"{path}: lengths {len(a)} != {len(b)}"
        for i, (x, y) in enumerate(zip(a, b)):
            assert_close(x, y, f"{path}[{i}]")
    elif isinstance(a, float) or isinstance(b, float):
        assert isinstance(a, (int, float)) and isinstance(b, (int, float)), f"{path}: {a!r} {b!r}"
        if math.isnan(a) or math.isnan(b):
            assert math.isnan(a) and math.isnan(b), f"{path}: {a} != {b}"
        else:
            assert abs(a - b) <= ATOL + RTOL * abs(b), f"{path}: {a} != {b}"
    else:
        assert a == b, f"{path}: {a!r} != {b!r}"


@pytest.fixture(scope="module")
def served_lm(vllm_server):
    return serve("default", vllm_server.url, served_model=vllm_server.served_name)


def test_served_lm_names_the_server(served_lm, vllm_server):
    info = served_lm.info
    assert info.base_url == vllm_server.url
    assert info.served_model == vllm_server.served_name
    assert info.api == "vllm"  # detected: the server answers prompt_logprobs
    assert info.server.get("max_model_len") == 2048


def test_library_scoring_equals_in_process(served_lm, default_lm):
    """ctxleak's client and the engine's dispatch (``continuation_logprobs`` on a served model)
    give the in-process numbers, per token."""
    from ctxleak.engine.scoring import continuation_logprobs

    prompts, conts = [], []
    for ex in load_examples("demo", task="auto")[:6]:
        parts = example_parts(default_lm, ex, Setting.cid(1.0, 1.0), InfluenceOptions())[0]
        prompts += [parts.full, parts.empty]
        conts += [default_lm.encode(ex.reference)] * 2
    here = continuation_logprobs(default_lm, prompts, conts)
    there = continuation_logprobs(served_lm, prompts, conts)
    for a, b in zip(there, here):
        assert a.dtype == np.float64
        np.testing.assert_allclose(a, b, atol=PER_TOKEN, rtol=0)


def eos_masked_in_process(lm, prompts, conts, min_new_tokens: int) -> list[np.ndarray]:
    """In-process reference, one forward pass per sequence: ``log p(y_t)`` with EOS masked at
    the first ``min_new_tokens`` positions, ``log p(y_t) - log(1 - sum_e p(e))``."""
    eos = torch.as_tensor(list(lm.eos_ids))

    def reduce(i: int, logits: torch.Tensor) -> np.ndarray:
        logp = torch.log_softmax(logits.double(), dim=-1)
        ids = torch.as_tensor(conts[i])
        row = logp.gather(1, ids[:, None])[:, 0]
        mass = logp[:min_new_tokens, eos].exp().sum(dim=1)
        row[:min_new_tokens] -= torch.log1p(-mass)
        return row.numpy()

    return continuation_logits(lm, prompts, conts, reduce=reduce)


def test_influence_run_equals_in_process(served_lm, default_lm, tmp_path):
    """A served influence run (λ = 1, T = 1: the deployed model's own answer, sampled by the
    server) records the log-probs in-process scoring gives that answer: with and without the
    context, and without each n-gram window (EOS masked before the minimum length)."""
    min_new = 4
    res = ctxleak.influence(served_lm, "demo", temperature=1.0, ngram=32, limit=1, seed=0,
                            max_new_tokens=16, min_new_tokens=min_new,
                            output=str(tmp_path / "run"), progress=False)
    assert len(res.records) == 1
    rec, ex = res.records[0], load_examples("demo", task="auto")[0]
    ids = list(rec["response_ids"])
    assert len(ids) >= min_new
    parts = example_parts(default_lm, ex, Setting.cid(1.0, 1.0), InfluenceOptions(ngram=32))[0]
    answer = ids[:-1] if rec["stopped_on_eos"] else ids
    prompts = [parts.full, parts.empty] + [
        parts.with_context(parts.context[:a] + parts.context[b:]) for a, b in rec["windows"]]
    conts = [ids, ids] + [answer] * len(rec["windows"])
    here = eos_masked_in_process(default_lm, prompts, conts, min_new)
    np.testing.assert_allclose(rec["logp_context"], here[0], atol=PER_TOKEN, rtol=0)
    np.testing.assert_allclose(rec["logp_empty"], here[1], atol=PER_TOKEN, rtol=0)
    assert len(rec["window_logp"]) == len(rec["windows"]) >= 2
    for row, ref in zip(rec["window_logp"], here[2:]):
        np.testing.assert_allclose(row, ref, atol=PER_TOKEN, rtol=0)
    assert res.provenance["model"]["base_url"] == served_lm.info.base_url


def test_passages_and_logged_answers_equal_in_process(served_lm, default_lm, tmp_path):
    """Passages on a served model: each sentence of the context left out and the server's own
    answer scored (Def. 3.1-3.2 with S = the passage) equals in-process scoring of that same
    answer given as a logged ``response``; the same logged answers scored through the server
    agree too (their windows, passages and control included)."""
    kw = dict(temperature=1.0, seed=0, max_new_tokens=8, min_new_tokens=4,
              passages="sentence", progress=False)  # windows: test_influence_run_equals_...
    own = ctxleak.influence(served_lm, "demo", limit=2, output=str(tmp_path / "own"), **kw)
    rows = [json.loads(line) for line in
            demo_path("influence.jsonl").read_text(encoding="utf-8").splitlines()[:2]]
    logged = [{**row, "response": rec["response"]} for row, rec in zip(rows, own.records)]
    here = ctxleak.influence(default_lm, logged, output=str(tmp_path / "here"), **kw)
    there = ctxleak.influence(served_lm, logged, output=str(tmp_path / "there"), **kw)
    for a, b, c in zip(own.records, here.records, there.records):
        answer = a["response_ids"][:-1] if a["stopped_on_eos"] else a["response_ids"]
        assert b["response_ids"] == c["response_ids"] == answer  # the text gives back the ids
        assert len(a["passages"]) >= 2 and a["passages"] == b["passages"] == c["passages"]
        for key in ("passage_influence", "control_influence"):
            assert_close(a[key], b[key], key)
            assert_close(c[key], b[key], key)
        assert_close(c["logp_context"], b["logp_context"], "logp_context")
        assert a["max_passage"] == b["max_passage"] == c["max_passage"]


def test_cid_below_lambda_1_and_bounded_equal_in_process(served_lm, default_lm, tmp_path):
    """Context Influence Decoding through the server (every token's log-prob at each step) on
    the default model: at λ = 0.5, T = 0.8 the influence run's tokens are the in-process run's
    from the same seed and its per-token mixture log-probs agree to 1e-4 nats; bounded CID
    (ε = 2 per token) gives the same tokens, λ_t and ex-post ε."""
    kw = dict(lambda_=0.5, temperature=0.8, seed=0, max_new_tokens=8, min_new_tokens=4,
              limit=1, progress=False)
    there = ctxleak.influence(served_lm, "demo", output=str(tmp_path / "served"), **kw)
    here = ctxleak.influence(default_lm, "demo", output=str(tmp_path / "local"), **kw)
    (a,), (b,) = there.records, here.records
    assert a["response_ids"] == b["response_ids"] and len(a["response_ids"]) >= 4
    for key in ("logp_context", "logp_empty", "token_influence"):
        np.testing.assert_allclose(a[key], b[key], atol=PER_TOKEN, rtol=0, err_msg=key)
    ex = load_examples("demo", task="auto")[1]
    parts = example_parts(default_lm, ex, Setting.cid(1.0, 1.0), InfluenceOptions())[0]
    config = CIDConfig(lam=1.0, temperature=1.0, max_new_tokens=6, min_new_tokens=2,
                       bounded_eps=2.0)
    job = [(parts.full, parts.empty, config, 7)]
    (c,), (d,) = cid_ledgers(served_lm, job), cid_ledgers(default_lm, job)
    assert c.response_ids == d.response_ids
    for e, f in zip(c.entries, d.entries):
        assert e.eps == f.eps == 2.0 and e.eps_ex_post <= 2.0
        np.testing.assert_allclose([e.lam, e.logp_context, e.logp_empty, e.eps_ex_post],
                                   [f.lam, f.logp_context, f.logp_empty, f.eps_ex_post],
                                   atol=PER_TOKEN, rtol=0)


def test_iclinf_run_equals_in_process(served_lm, default_lm, tmp_path):
    kw = dict(limit=3, queries=3, shots="2", seed=0, progress=False)
    there = ctxleak.iclinf(served_lm, "demo", output=str(tmp_path / "served"), **kw)
    here = ctxleak.iclinf(default_lm, "demo", output=str(tmp_path / "local"), **kw)
    assert len(there.records) == 3
    assert_close(untimed(there.records), untimed(here.records))
    assert_close(untimed(there.summary), untimed(here.summary), "summary")


def test_monte_carlo_run_equals_in_process(served_lm, default_lm, tmp_path):
    """Monte Carlo susceptibility over the whole next-token distribution (the server returns
    all of it: --max-logprobs -1)."""
    kw = dict(method="mc", contexts=4, limit=2, seed=0, progress=False)
    there = ctxleak.susceptibility(served_lm, "demo", output=str(tmp_path / "served"), **kw)
    here = ctxleak.susceptibility(default_lm, "demo", output=str(tmp_path / "local"), **kw)
    assert len(there.records) == 2
    assert_close(untimed(there.records), untimed(here.records))


def test_black_box_probe_run_equals_in_process(served_lm, default_lm, tmp_path):
    # two of the five default PII types: every probe takes the same road, whatever its type
    kw = dict(mode="black-box", generate=False, limit=2, pii="phone,email", seed=0,
              progress=False)
    there = ctxleak.probe(served_lm, "demo", output=str(tmp_path / "served"), **kw)
    here = ctxleak.probe(default_lm, "demo", output=str(tmp_path / "local"), **kw)
    assert there.records
    assert_close(untimed(there.records), untimed(here.records))
