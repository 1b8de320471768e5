"""CID inside transformers' generate (paper 000, Def. 3.4; bounded CID, App. B Alg. 1): the
processor against ctxleak's own CID loop and against an independent, cache-free recomputation of
both streams at every step."""

from __future__ import annotations

import pytest
import torch
from helpers.cid_ledgers import cid_ledger
from transformers import LogitsProcessor

from ctxleak.errors import ConfigError, CtxleakDeprecationWarning
from ctxleak.integrations.generate import cid_generate
from ctxleak.integrations.transformers import ContextInfluenceProcessor
from ctxleak.methods.influence.data import InfluenceExample, prompt_parts
from ctxleak.mitigations.cid import CIDConfig, bounded_lambda, cid_logprobs

CONTEXTS = ["paris is the capital of france and rome is the capital of italy",
            "the doctor said the patient name is one two three",
            "berlin germany"]
QUERIES = ["what is the capital of spain ?", "what is the name ?", "a city ?"]
TEMPLATE = "Document: {context}. {query}"


class Recorder(LogitsProcessor):
    """Placed after the CID processor: keeps each step's rows and the scores it returned."""

    def __init__(self) -> None:
        self.steps: list[tuple[torch.Tensor, torch.Tensor]] = []

    def __call__(self, input_ids, scores):
        self.steps.append((input_ids.clone(), scores.clone()))
        return scores


def parts_of(lm, i):
    ex = InfluenceExample(str(i), CONTEXTS[i], QUERIES[i], None, "qa")
    return prompt_parts(lm, ex, TEMPLATE)[0]


def last_logits(lm, ids) -> torch.Tensor:
    """Next-token logits of one unpadded prompt, computed from scratch (no cache)."""
    with torch.no_grad():
        return lm.model(input_ids=torch.tensor([list(ids)])).logits[0, -1].double()


def expected_step(lm, part, gen, lam, temperature, masked=()):
    """``cid_logprobs`` of both streams after the tokens ``gen`` (EOS masked in both)."""
    z_ctx, z_emp = last_logits(lm, part.full + gen), last_logits(lm, part.empty + gen)
    for i in masked:
        z_ctx[i] = z_emp[i] = -1e30
    return (cid_logprobs(z_ctx, z_emp, lam, temperature),
            torch.log_softmax(z_emp / temperature, dim=-1))


def assert_close_finite(actual, expected, tol=1e-5):
    finite = torch.isfinite(actual)
    assert torch.equal(finite, expected > -1e29)
    assert torch.allclose(actual[finite].double(), expected[finite], atol=tol, rtol=0)


@pytest.mark.parametrize("lam", [0.5, 1.5])
def test_greedy_matches_cid_answer(tiny_lm, lam):
    """Greedy decoding with the processor = ctxleak's own two-stream CID loop, token for token,
    and the ledger's log-probabilities equal its records to 1e-5."""
    part = parts_of(tiny_lm, 0)
    own = cid_ledger(tiny_lm, part.full, part.empty,
                       CIDConfig(lam=lam, temperature=0.8, max_new_tokens=8, min_new_tokens=3),
                       seed=0, sample=False)
    out = cid_generate(tiny_lm, context=CONTEXTS[0], query=QUERIES[0], lambda_=lam, do_sample=False,
                       temperature=0.8, max_new_tokens=8, min_new_tokens=3)
    row = out.ledger[0]
    assert out.response_ids[0] == own.response_ids
    assert row.stopped_on_eos == own.stopped_on_eos
    assert row.to_record()["logp_context"] == pytest.approx(own.logp_context, abs=1e-5)
    assert row.to_record()["logp_empty"] == pytest.approx(own.logp_empty, abs=1e-5)
    assert row.influence == pytest.approx(own.influence, abs=1e-4)


def test_each_step_is_cid_logprobs(llama_lm):
    """At every step of a batched sampled generation, the processor returns cid_logprobs of the
    two streams (T = 1; generate's temperature warper divides it), and the ledger holds the
    drawn token's log p̄_λ and log p(·|∅) at T."""
    lm, lam, temp = llama_lm, 0.6, 0.7
    parts = [parts_of(lm, 0), parts_of(lm, 2)]
    rec = Recorder()
    torch.manual_seed(3)
    out = cid_generate(lm, context=[CONTEXTS[0], CONTEXTS[2]], query=[QUERIES[0], QUERIES[2]],
                       lambda_=lam, temperature=temp, max_new_tokens=6, min_new_tokens=2,
                       logits_processor=[rec])
    assert len(rec.steps) >= 1
    for step, (ids, scores) in enumerate(rec.steps):
        for r, part in enumerate(parts):
            gen = ids[r, out.prompt_length:].tolist()
            masked = tiny_eos(lm) if step < 2 else ()
            mix_1, _ = expected_step(lm, part, gen, lam, 1.0, masked)
            assert_close_finite(scores[r], mix_1)
    for r, part in enumerate(parts):
        entries = out.ledger[r].entries
        gen = out.sequences[r, out.prompt_length:].tolist()
        for t, entry in enumerate(entries):
            mix_t, emp_t = expected_step(lm, part, gen[:t], lam, temp,
                                         tiny_eos(lm) if t < 2 else ())
            assert entry.token_id == gen[t] and entry.lam == lam
            assert entry.logp_context == pytest.approx(float(mix_t[gen[t]]), abs=1e-5)
            assert entry.logp_empty == pytest.approx(float(emp_t[gen[t]]), abs=1e-5)
            assert entry.influence == pytest.approx(abs(entry.logp_context - entry.logp_empty))


def test_top_k_and_top_p_apply_after_the_mixture(llama_lm):
    """generate's truncation warpers run on the CID mixture: every drawn token is among the
    top 3 of p̄_λ at its step (top_k=3), whatever its rank in either stream alone."""
    rec = Recorder()
    torch.manual_seed(7)
    out = cid_generate(llama_lm, context=CONTEXTS[:2], query=QUERIES[:2], lambda_=1.5, top_k=3,
                       top_p=0.95, temperature=1.3, max_new_tokens=8, logits_processor=[rec])
    for r in range(2):
        for step, (_, scores) in enumerate(rec.steps[:len(out.ledger[r].entries)]):
            token = int(out.sequences[r, out.prompt_length + step])  # (pads after EOS skipped)
            assert token in scores[r].topk(3).indices.tolist()


def tiny_eos(lm):
    return list(lm.eos_ids)


def test_lambda_one_is_plain_generate_and_zero_is_no_context(llama_lm):
    lm = llama_lm
    part = parts_of(lm, 1)
    full, empty = torch.tensor([part.full]), torch.tensor([part.empty])
    plain = lm.model.generate(full, do_sample=False, max_new_tokens=8, pad_token_id=0)
    out = cid_generate(lm, context=CONTEXTS[1], query=QUERIES[1], lambda_=1.0, do_sample=False,
                       max_new_tokens=8)
    assert torch.equal(out.sequences, plain)
    torch.manual_seed(11)
    plain = lm.model.generate(full, do_sample=True, temperature=0.8, top_k=0, max_new_tokens=8,
                              pad_token_id=0)
    torch.manual_seed(11)
    out = cid_generate(lm, context=CONTEXTS[1], query=QUERIES[1], lambda_=1.0, temperature=0.8,
                       max_new_tokens=8)
    assert torch.equal(out.sequences, plain)
    no_ctx = lm.model.generate(empty, do_sample=False, max_new_tokens=8, pad_token_id=0)
    out = cid_generate(lm, context=CONTEXTS[1], query=QUERIES[1], lambda_=0.0, do_sample=False,
                       max_new_tokens=8)
    assert out.sequences[0, out.prompt_length:].tolist() == no_ctx[0, empty.shape[1]:].tolist()
    assert all(e.influence == pytest.approx(0.0, abs=1e-6) for e in out.ledger[0].entries)


def test_bounded_every_step_within_half_eps(llama_lm):
    """Alg. 1: every step's distribution is within ε/2 of the no-context one at T (checked on
    what generate actually received), λ_t ≤ λ_max, and the composed ε is their sum."""
    lm, eps, lam_max, temp = llama_lm, 0.3, 2.0, 0.8
    parts = [parts_of(lm, 0), parts_of(lm, 1)]
    rec = Recorder()
    torch.manual_seed(5)
    out = cid_generate(lm, context=CONTEXTS[:2], query=QUERIES[:2], lambda_=lam_max,
                       bounded_eps=eps, temperature=temp, max_new_tokens=6, logits_processor=[rec])
    for ids, scores in rec.steps:
        for r, part in enumerate(parts):
            gen = ids[r, out.prompt_length:].tolist()
            _, emp_t = expected_step(lm, part, gen, lam_max, temp)
            mix_t = torch.log_softmax(scores[r].double() / temp, dim=-1)
            assert float((mix_t - emp_t).abs().max()) <= eps / 2 + 1e-6
    lambdas = [lam for row in out.ledger for lam in row.lambdas]
    assert all(0 <= lam <= lam_max for lam in lambdas) and min(lambdas) < lam_max  # it binds
    for row in out.ledger:
        assert all(e <= eps for e in row.token_eps_ex_post)
        assert row.composed_eps_ex_post == pytest.approx(sum(row.token_eps_ex_post))
        assert row.to_record()["composed_eps"] == row.composed_eps


def test_bounded_ledger_reports_the_guarantee(llama_lm):
    """The ledger's ε is Theorem B.1's (paper 000, App. B): ε per released token and
    (released tokens)·ε composed, also where λ_t = λ_max left the bound slack; the per-instance
    2·max_y |log p̄_λ(y|D) − log p(y|∅)| is kept as the ex-post figure, and differs here."""
    eps = 8.0
    torch.manual_seed(5)
    out = cid_generate(llama_lm, context=CONTEXTS[:2], query=QUERIES[:2], lambda_=0.3,
                       bounded_eps=eps, temperature=0.8, max_new_tokens=6)
    for row in out.ledger:
        assert all(e.lam == 0.3 and e.eps == eps for e in row.entries)  # λ_max: slack bound
        assert row.composed_eps == pytest.approx(eps * len(row.entries), rel=1e-12)
        assert row.composed_eps_ex_post == pytest.approx(
            sum(e.eps_ex_post for e in row.entries), rel=1e-12)
        assert row.composed_eps_ex_post < row.composed_eps / 2
        rec = row.to_record()
        assert rec["eps"] == eps and rec["composed_eps"] == row.composed_eps
        assert rec["composed_eps_ex_post"] == row.composed_eps_ex_post
    setting = out.to_result().summary["settings"][0]
    assert setting["composed_eps"]["mean"] == pytest.approx(
        sum(eps * len(row.entries) for row in out.ledger) / 2, rel=1e-12)


def test_batched_rows_equal_one_at_a_time(tiny_lm):
    kwargs = dict(lambda_=1.5, do_sample=False, temperature=0.9, max_new_tokens=6)
    batch = cid_generate(tiny_lm, context=CONTEXTS, query=QUERIES, **kwargs)
    for i in range(len(CONTEXTS)):
        one = cid_generate(tiny_lm, context=CONTEXTS[i], query=QUERIES[i], **kwargs)
        assert batch.response_ids[i] == one.response_ids[0]
        got, want = batch.ledger[i].to_record(), one.ledger[0].to_record()
        assert got["logp_context"] == pytest.approx(want["logp_context"], abs=1e-5)
        assert got["logp_empty"] == pytest.approx(want["logp_empty"], abs=1e-5)


def test_bounded_batched_rows_equal_one_at_a_time(llama_lm):
    """Each batched row's λ_t and ε_t are Alg. 1's λ_t search on that row alone, recomputed
    from scratch (sampling, so the row's own tokens are replayed)."""
    eps, lam_max, temp = 0.3, 2.0, 0.8
    torch.manual_seed(2)
    batch = cid_generate(llama_lm, context=CONTEXTS[:2], query=QUERIES[:2], lambda_=lam_max,
                         bounded_eps=eps, temperature=temp, max_new_tokens=5)
    for i in range(2):
        part = parts_of(llama_lm, i)
        gen = batch.sequences[i, batch.prompt_length:].tolist()
        for t, entry in enumerate(batch.ledger[i].entries):
            z_ctx = last_logits(llama_lm, part.full + gen[:t])
            z_emp = last_logits(llama_lm, part.empty + gen[:t])
            lam, div = bounded_lambda(z_ctx, z_emp, eps, lam_max, temp)
            assert entry.lam == pytest.approx(lam, abs=1e-6)
            assert entry.eps_ex_post == pytest.approx(2 * div, abs=1e-5)


def test_beam_search_follows_the_beams(llama_lm):
    """Beam search re-orders generate's cache; the processor re-orders its own with it: at every
    step each running beam's scores equal an independent recomputation of both streams."""
    lm, lam = llama_lm, 0.7
    parts = [parts_of(lm, 0), parts_of(lm, 2)]
    rec = Recorder()
    out = cid_generate(lm, context=[CONTEXTS[0], CONTEXTS[2]], query=[QUERIES[0], QUERIES[2]],
                       lambda_=lam, do_sample=False, num_beams=3, num_return_sequences=2,
                       max_new_tokens=7, temperature=1.0, logits_processor=[rec])
    reordered = False
    for step, (ids, scores) in enumerate(rec.steps):
        if step:
            reordered |= not torch.equal(ids[:, :-1], rec.steps[step - 1][0])
        for r in range(ids.shape[0]):
            gen = ids[r, out.prompt_length:].tolist()
            mix, _ = expected_step(lm, parts[r // 3], gen, lam, 1.0)
            assert_close_finite(scores[r], mix)
    assert reordered  # the beams did move between rows
    assert len(out.ledger) == 4
    for m, row in enumerate(out.ledger):
        gen = out.sequences[m, out.prompt_length:].tolist()
        for t, entry in enumerate(row.entries):
            mix, _ = expected_step(lm, parts[m // 2], gen[:t], lam, 1.0)
            assert entry.logp_context == pytest.approx(float(mix[gen[t]]), abs=1e-5)


def test_direct_use_from_context_span(llama_lm):
    """The processor in a user's own generate call, built from the context's span."""
    lm = llama_lm
    part = parts_of(lm, 0)
    start = len(part.before)
    proc = ContextInfluenceProcessor.from_context_span(
        lm.model, part.full, (start, start + len(part.context)), lambda_=0.5, temperature=0.8)
    ids = lm.model.generate(torch.tensor([part.full]), do_sample=False, max_new_tokens=6,
                            pad_token_id=0, **proc.generate_kwargs())
    ours = cid_generate(lm, context=CONTEXTS[0], query=QUERIES[0], lambda_=0.5, do_sample=False,
                        max_new_tokens=6)
    assert torch.equal(ids, ours.sequences)
    assert proc.to_records()[0]["logp_context"] == \
        pytest.approx(ours.to_records()[0]["logp_context"], abs=1e-6)
    with pytest.raises(ConfigError, match="reset"):  # a second call needs reset()
        lm.model.generate(torch.tensor([part.full + [5, 6]]), do_sample=False, max_new_tokens=2,
                          pad_token_id=0, **proc.generate_kwargs())


def test_ledger_needs_the_observer(llama_lm):
    part = parts_of(llama_lm, 0)
    proc = ContextInfluenceProcessor(llama_lm, part.empty, lambda_=0.5)
    llama_lm.model.generate(torch.tensor([part.full]), do_sample=False, max_new_tokens=3,
                            pad_token_id=0, logits_processor=[proc])
    with pytest.raises(ConfigError, match="observer"):
        _ = proc.ledger


@pytest.mark.parametrize("kwargs, match", [
    ({"lambda_": -1.0}, "^lambda_ must be >= 0"),  # library errors name the keyword
    ({"temperature": 0.0}, "temperature"),
    ({"bounded_eps": -1.0}, "^bounded_eps must be >= 0"),
    ({"penalty_alpha": 0.6, "top_k": 4}, "contrastive"),
    ({"prompt_lookup_num_tokens": 3}, "prompt-lookup"),
    ({"num_beam_groups": 2, "num_beams": 2}, "group beam"),
    ({"bounded_eps": 1.0, "top_p": 0.9}, "top_p"),
    ({"bounded_eps": 1.0, "do_sample": False}, "pure temperature sampling"),
    ({"context": "  "}, "context 0 is empty"),
    ({"template": "Q: {query}"}, "slot"),
])
def test_bad_configurations_are_refused(llama_lm, kwargs, match):
    args = {"context": CONTEXTS[0], "query": QUERIES[0], "max_new_tokens": 3, **kwargs}
    with pytest.raises(ConfigError, match=match):
        cid_generate(llama_lm, **args)


def test_processor_refuses_rows_it_cannot_follow(llama_lm):
    part = parts_of(llama_lm, 0)
    v = llama_lm.vocab_size
    with pytest.raises(ConfigError, match="one per prompt"):
        ContextInfluenceProcessor(llama_lm, [part.empty] * 3)(
            torch.tensor([part.full] * 2), torch.zeros(2, v))
    with pytest.raises(ConfigError, match="full_ids"):
        ContextInfluenceProcessor(llama_lm, part.empty, full_ids=part.empty)(
            torch.tensor([part.full]), torch.zeros(1, v))
    proc = ContextInfluenceProcessor(llama_lm, part.empty)
    proc(torch.tensor([part.full]), torch.zeros(1, v))
    with pytest.raises(ConfigError, match="assisted"):  # three tokens at once: a draft checked
        proc(torch.tensor([part.full + [5, 6, 7]]), torch.zeros(1, v))


@pytest.mark.integration  # a fresh interpreter that imports torch
def test_import_ctxleak_stays_light():
    import subprocess
    import sys

    code = ("import sys, ctxleak; assert 'torch' not in sys.modules; "
            "assert callable(ctxleak.cid_generate); assert 'torch' in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.integration
def test_default_model_greedy_matches_cid_answer(default_lm):
    ex = InfluenceExample("0", "Maria Lopez, born 12 March 1984, lives at 14 Elm Street.",
                          "Where does Maria live?", None, "qa")
    part = prompt_parts(default_lm, ex, TEMPLATE)[0]
    own = cid_ledger(default_lm, part.full, part.empty,
                       CIDConfig(lam=0.5, temperature=0.8, max_new_tokens=8, min_new_tokens=2),
                       seed=0, sample=False)
    out = cid_generate(default_lm, context=ex.context, query=ex.query, lambda_=0.5, do_sample=False,
                       temperature=0.8, max_new_tokens=8, min_new_tokens=2)
    assert out.response_ids[0] == own.response_ids
    rec = out.ledger[0].to_record()
    assert rec["logp_context"] == pytest.approx(own.logp_context, abs=1e-5)
    assert rec["logp_empty"] == pytest.approx(own.logp_empty, abs=1e-5)


def test_ledger_as_an_influence_result(llama_lm, tmp_path):
    """The ledger read as an InfluenceResult: one record per row with the ledger's numbers,
    expected influence = the mean of the rows' response influences (Def. 3.3), composed ε in
    bounded mode, and a save/load round trip through a run folder."""
    import ctxleak
    from ctxleak.results import InfluenceResult

    torch.manual_seed(3)
    out = cid_generate(llama_lm, context=CONTEXTS[:2], query=QUERIES[:2], lambda_=1.5,
                       bounded_eps=0.5, temperature=0.8, max_new_tokens=5)
    result = out.to_result()
    assert isinstance(result, InfluenceResult)
    assert [r["response_ids"] for r in result.records] == [row.response_ids for row in out.ledger]
    assert [r["response"] for r in result.records] == out.texts
    setting = result.summary["settings"][0]
    influences = [sum(row.token_influence) for row in out.ledger]
    assert setting["influence"]["mean"] == pytest.approx(sum(influences) / 2, rel=1e-12)
    assert setting["composed_eps"]["mean"] == pytest.approx(
        sum(row.composed_eps for row in out.ledger) / 2, rel=1e-12)
    assert all(row.composed_eps_ex_post <= 0.5 * len(row.entries) + 1e-9 for row in out.ledger)
    html = result.to_html()
    assert "Content-Security-Policy" in html and "row-1" in html
    loaded = ctxleak.load_result(result.save(tmp_path / "ledger"))
    assert isinstance(loaded, InfluenceResult)
    assert loaded.records == result.records
    assert loaded.summary["settings"][0]["influence"]["mean"] == pytest.approx(
        setting["influence"]["mean"])
    with pytest.raises(ValueError, match="empty"):
        from ctxleak.integrations.ledger import ledger_result
        ledger_result([])


# what instruction-tuned models ship in generation_config.json: truncation, masks, penalties
SHIPPED = {"top_p": 0.01, "top_k": 3, "min_p": 0.5, "typical_p": 0.2, "epsilon_cutoff": 0.1,
           "eta_cutoff": 0.1, "repetition_penalty": 1.5, "no_repeat_ngram_size": 2,
           "bad_words_ids": [[5]], "suppress_tokens": [6], "sequence_bias": {(7,): -5.0}}


@pytest.fixture
def shipped_lm(monkeypatch):
    """A tiny Llama whose own generation_config truncates and penalises (SHIPPED), with the
    logits processors that generate builds recorded in ``lm.built``."""
    from helpers.tiny_models import tiny_llama

    lm = tiny_llama(seed=4)
    for key, value in SHIPPED.items():
        setattr(lm.model.generation_config, key, value)
    lm.built = []
    original = lm.model._get_logits_processor

    def spy(*args, **kwargs):
        processors = original(*args, **kwargs)
        lm.built.append([type(p).__name__ for p in processors])
        return processors

    monkeypatch.setattr(lm.model, "_get_logits_processor", spy)
    return lm


@pytest.mark.parametrize("bounded_eps", [None, 2.0])
def test_model_generation_config_does_not_truncate_cid(shipped_lm, bounded_eps):
    """CID samples at temperature only (paper 000 §3; App. B's bound needs it): whatever the
    model's generation_config ships, generate builds no truncation warper, mask or penalty, so
    what is sampled is the p̄_λ the ledger records; each neutralised setting is named once."""
    with pytest.warns(UserWarning, match="generation_config") as caught:
        out = cid_generate(shipped_lm, context=CONTEXTS[0], query=QUERIES[0], lambda_=1.5,
                           bounded_eps=bounded_eps, temperature=0.8, max_new_tokens=4)
    message = " ".join(str(w.message) for w in caught)
    for key in SHIPPED:
        assert key in message
    assert len(shipped_lm.built) == 1
    built = set(shipped_lm.built[0])
    assert built <= {"ContextInfluenceProcessor", "TemperatureLogitsWarper"}, built
    assert "ContextInfluenceProcessor" in built
    assert len(out.ledger[0].entries) >= 1


@pytest.mark.parametrize("kwargs, match", [
    ({"repetition_penalty": 1.3}, "^repetition_penalty: generate applies it"),
    ({"sequence_bias": {(5,): 2.0}}, "^sequence_bias"),
    ({"bounded_eps": 1.0, "min_p": 0.1}, "min_p"),
    ({"bounded_eps": 1.0, "no_repeat_ngram_size": 2}, "no_repeat_ngram_size"),
    ({"bounded_eps": 1.0, "typical_p": 0.5}, "typical_p"),
])
def test_explicit_penalties_and_bounded_truncation_are_refused(llama_lm, kwargs, match):
    with pytest.raises(ConfigError, match=match) as info:
        cid_generate(llama_lm, context=CONTEXTS[0], query=QUERIES[0], max_new_tokens=3, **kwargs)
    assert info.value.param in kwargs


@pytest.mark.parametrize("kwargs, param, match", [
    ({"context": 123}, "context", "^context must be a string or a list of strings"),
    ({"context": ["a b", 7]}, "context", "item 1 is int"),
    ({"query": 4.5}, "query", "^query must be a string or a list of strings"),
    ({"lambda_": "0.5"}, "lambda_", "^lambda_ must be a number, not str"),
    ({"bounded_eps": [1.0]}, "bounded_eps", "^bounded_eps must be a number"),
    ({"temperature": None}, "temperature", "^temperature must be a number"),
    ({"template": 3}, "template", "^template must be a string"),
    ({"chat": "yes"}, "chat", "^chat must be True, False or None"),
])
def test_cid_generate_argument_types(llama_lm, kwargs, param, match):
    """Wrong types are a ConfigError naming the parameter and what it accepts, not a
    TypeError from deep inside."""
    args = {"context": CONTEXTS[0], "query": QUERIES[0], "max_new_tokens": 3, **kwargs}
    with pytest.raises(ConfigError, match=match) as info:
        cid_generate(llama_lm, **args)
    assert info.value.param == param


@pytest.mark.parametrize("args, kwargs, param", [
    ((123,), {}, "empty_ids"),
    (("some text",), {}, "empty_ids"),
    (([1, 2.5],), {}, "empty_ids"),
    (([[1, 2], None],), {}, "empty_ids"),
    (([1, 2],), {"full_ids": 7}, "full_ids"),
    (([1, 2],), {"lambda_": None}, "lambda_"),
    (([1, 2],), {"temperature": "hot"}, "temperature"),
    (([1, 2],), {"bounded_eps": "1"}, "bounded_eps"),
    (([1, 2],), {"eos_token_id": "2"}, "eos_token_id"),
])
def test_processor_argument_types(llama_lm, args, kwargs, param):
    with pytest.raises(ConfigError, match=param) as info:
        ContextInfluenceProcessor(llama_lm, *args, **kwargs)
    assert info.value.param == param
    with pytest.raises(ConfigError, match="model must be a transformers causal LM"):
        ContextInfluenceProcessor(object(), [1, 2])
    with pytest.raises(ConfigError, match="span must be") as info:
        ContextInfluenceProcessor.from_context_span(llama_lm, [1, 2, 3], "ab")
    assert info.value.param == "span"


def test_the_old_lam_keyword_still_works_with_a_deprecation_warning(tiny_lm):
    kwargs = dict(context=CONTEXTS[0], query=QUERIES[0], do_sample=False, max_new_tokens=4)
    new = cid_generate(tiny_lm, lambda_=1.5, **kwargs)
    with pytest.warns(CtxleakDeprecationWarning, match="cid_generate\\(\\): 'lam' is deprecated"):
        old = cid_generate(tiny_lm, lam=1.5, **kwargs)
    assert old.response_ids == new.response_ids  # the same λ reached the decoder
    with pytest.raises(ConfigError, match="both 'lam' .deprecated. and 'lambda_'"):
        cid_generate(tiny_lm, lam=1.5, lambda_=0.5, **kwargs)
    part = parts_of(tiny_lm, 0)
    with pytest.warns(CtxleakDeprecationWarning, match="ContextInfluenceProcessor\\(\\)"):
        proc = ContextInfluenceProcessor(tiny_lm, part.empty, lam=0.5)
    assert proc.config == ContextInfluenceProcessor(tiny_lm, part.empty, lambda_=0.5).config
    assert proc.config.lam == 0.5
    assert CIDConfig(lambda_=0.5) == CIDConfig(lam=0.5)
    with pytest.raises(ConfigError, match="both 'lam' and 'lambda_'"):
        CIDConfig(lam=0.5, lambda_=2.0)
