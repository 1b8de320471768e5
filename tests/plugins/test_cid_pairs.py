"""The plugin's wire protocol and its book of pairs, without vLLM: every setting outside its
domain is refused naming it; a pair's two requests find their roles by the context prompt's
digest; a third request, settings or lengths that differ between the two, a stream ahead of the
decisions and a missing partner void the pair (its rows forced to EOS, the reason in its
records); a step decided once is repeated, not drawn again; one decided step equals a step of
in-process CID on the same logits (hand-checked: λ-mix at T, the seeded float64 draw)."""

from __future__ import annotations

import pytest
import torch

from ctxleak.kernels.cid import bounded_lambda, cid_logprobs
from ctxleak.kernels.draw import draw, seeded_generator
from ctxleak.plugins.cid_pairs import PairBook
from ctxleak.plugins.protocol import (
    PairSettingError,
    is_pair_request,
    pair_xargs,
    prompt_digest,
    read_settings,
    record_path,
)

CTX, EMPTY, STOP = [5, 6, 7, 8], [7, 8], 0
PAIR = "0123456789abcdef" * 2


def _xargs(**change):
    base = pair_xargs(pair=PAIR, context_ids=CTX, lam=0.5, temperature=0.8, seed=4,
                      greedy=False, eps=None, min_new_tokens=0, stops=[STOP])
    return {**base, **change}


@pytest.mark.parametrize("change, message", [
    ({"ctxleak_lam": 1.5}, "must be in \\[0, 1\\]"), ({"ctxleak_lam": -0.1}, "\\[0, 1\\]"),
    ({"ctxleak_lam": "nan"}, "finite"), ({"ctxleak_eps": 0}, "must be > 0"),
    ({"ctxleak_eps": -1}, "must be > 0"), ({"ctxleak_temperature": 0}, "must be > 0"),
    ({"ctxleak_pair": "../../etc"}, "32 lowercase hex"), ({"ctxleak_context": "zz"}, "16 hex"),
    ({"ctxleak_stops": ""}, "EOS ids"), ({"ctxleak_stops": "a,b"}, "comma-separated"),
    ({"ctxleak_min": -1}, ">= 0"), ({"ctxleak_seed": "x"}, "integer"),
    ({"ctxleak_lamda": 0.5}, "unknown vllm_xargs")])
def test_settings_outside_their_domain_are_refused_naming_them(change, message):
    with pytest.raises(PairSettingError, match=message):
        read_settings(_xargs(**change))


def test_a_request_without_plugin_arguments_is_left_alone():
    assert not is_pair_request(None) and not is_pair_request({"other": 1})
    assert is_pair_request(_xargs())
    with pytest.raises(PairSettingError):
        record_path("../x")


def _book():
    written: dict[str, dict] = {}
    return PairBook(written.__setitem__, {"plugin": "ctxleak-cid"}), written


def _logits(seed, rows=2, vocab=11):
    return torch.randn(rows, vocab, generator=torch.Generator().manual_seed(seed)) * 2


def test_one_decided_step_is_in_process_cids_step():
    """λ-mix at T in float64 and one draw from the pair's own generator, both rows forced."""
    book, _ = _book()
    settings = read_settings(_xargs())
    a = book.admit(settings, 4, EMPTY)   # the no-context request may come first
    b = book.admit(settings, 4, CTX)
    assert (a.role, b.role) == ("empty", "context")
    z = _logits(1)
    out = book.apply(z.clone(), [(0, a, 0), (1, b, 0)])  # row 0 empty, row 1 context
    mixed = cid_logprobs(z[1].double(), z[0].double(), 0.5, 0.8)
    token = draw(mixed, seeded_generator(4), True)
    assert int(out[0].argmax()) == int(out[1].argmax()) == token
    assert torch.isinf(out[0]).sum() == z.shape[1] - 1
    step = book.pairs[PAIR].steps[0]
    assert step["logp_mix"] == pytest.approx(float(mixed[token]), abs=1e-12)
    empty = torch.log_softmax(z[0].double() / 0.8, dim=-1)
    assert step["logp_empty"] == pytest.approx(float(empty[token]), abs=1e-12)


def test_bounded_steps_record_lambda_t_and_the_ex_post_epsilon():
    book, _ = _book()
    settings = read_settings(_xargs(ctxleak_eps=0.5, ctxleak_lam=1.0))
    a, b = book.admit(settings, 3, CTX), book.admit(settings, 3, EMPTY)
    z = _logits(2)
    book.apply(z.clone(), [(0, a, 0), (1, b, 0)])
    lam, div = bounded_lambda(z[0].double(), z[1].double(), 0.5, 1.0, 0.8)
    step = book.pairs[PAIR].steps[0]
    assert step["lam"] == lam and step["eps_ex_post"] == pytest.approx(2 * div)
    assert step["eps_ex_post"] <= 0.5


def test_a_repeated_step_gets_its_token_again_without_a_new_draw():
    book, _ = _book()
    settings = read_settings(_xargs())
    a, b = book.admit(settings, 4, CTX), book.admit(settings, 4, EMPTY)
    first = book.apply(_logits(3), [(0, a, 0), (1, b, 0)]).argmax(dim=-1)
    again = book.apply(_logits(9), [(0, a, 0), (1, b, 0)]).argmax(dim=-1)  # other logits
    assert first.tolist() == again.tolist() and len(book.pairs[PAIR].steps) == 1
    # the next step draws the generator's second number, as in-process CID's step 1 does
    gen = seeded_generator(4)
    z0, z1 = _logits(3), _logits(4)
    draw(cid_logprobs(z0[0].double(), z0[1].double(), 0.5, 0.8), gen, True)
    want = draw(cid_logprobs(z1[0].double(), z1[1].double(), 0.5, 0.8), gen, True)
    assert int(book.apply(z1.clone(), [(0, a, 1), (1, b, 1)])[0].argmax()) == want


@pytest.mark.parametrize("breakage, reason", [
    ("third", "third request"), ("settings", "different settings"),
    ("length", "different max_tokens"), ("alone", "partner stream is missing"),
    ("ahead", "only 0 were decided")])
def test_a_pair_out_of_step_is_voided_and_its_rows_end(breakage, reason):
    book, written = _book()
    settings = read_settings(_xargs())
    a = book.admit(settings, 4, CTX)
    rows = [(0, a, 0)]
    if breakage == "third":
        b = book.admit(settings, 4, EMPTY)
        book.admit(settings, 4, EMPTY)
        rows.append((1, b, 0))
    elif breakage == "settings":
        rows.append((1, book.admit(read_settings(_xargs(ctxleak_seed="5")), 4, EMPTY), 0))
    elif breakage == "length":
        rows.append((1, book.admit(settings, 5, EMPTY), 0))
    elif breakage == "ahead":
        rows = [(0, a, 1), (1, book.admit(settings, 4, EMPTY), 1)]
    out = book.apply(_logits(5, rows=len(rows)), rows)
    assert all(int(out[r].argmax()) == STOP for r, _, _ in rows)
    assert reason in written[PAIR]["error"] and written[PAIR]["steps"] == []


def test_a_partner_that_leaves_midway_voids_the_pair_at_the_next_step():
    book, written = _book()
    settings = read_settings(_xargs())
    a, b = book.admit(settings, 6, CTX), book.admit(settings, 6, EMPTY)
    book.apply(_logits(6), [(0, a, 0), (1, b, 0)])
    book.leave(b)  # preempted or aborted
    out = book.apply(_logits(7, rows=1), [(0, a, 1)])
    assert int(out[0].argmax()) == STOP
    assert "missing from the batch at step 1" in written[PAIR]["error"]
    assert len(written[PAIR]["steps"]) == 1


def test_records_are_written_once_when_the_answer_ends():
    book, written = _book()
    settings = read_settings(_xargs())
    a, b = book.admit(settings, 2, CTX), book.admit(settings, 2, EMPTY)
    book.apply(_logits(8), [(0, a, 0), (1, b, 0)])
    assert PAIR not in written
    book.apply(_logits(9), [(0, a, 1), (1, b, 1)])
    assert len(written[PAIR]["steps"]) == 2 and written[PAIR]["error"] is None
    book.leave(a)
    book.leave(b)
    assert PAIR not in book.pairs
    assert prompt_digest(CTX) == settings.context_digest
