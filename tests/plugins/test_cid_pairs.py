"""The plugin's wire protocol and its book of pairs, without vLLM: every setting outside its
domain is refused naming it; a pair's two requests find their roles by the context prompt's
digest; a third request, settings or lengths that differ between the two, a stream ahead of the
decisions and a missing partner void the pair (its rows forced to EOS, the reason in its
records); a step decided once is repeated, not drawn again; one decided step equals a step of
in-process CID on the same logits (hand-checked: λ-mix at T, the seeded float64 draw)."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from ctxleak.kernels.cid import bounded_lambda, cid_logprobs
from ctxleak.kernels.draw import draw, seeded_generator
from ctxleak.plugins import cid_pairs
from ctxleak.plugins.cid_pairs import PairBook
from ctxleak.plugins.protocol import (
    PairSettingError,
    check_request,
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
    ({"ctxleak_min": -1}, "'ctxleak_min' must be an integer in \\[0, "),
    ({"ctxleak_seed": "x"}, "integer"), ({"ctxleak_lamda": 0.5}, "unknown vllm_xargs"),
    # what would raise in the engine (torch.Generator.manual_seed, indexing) is refused here
    ({"ctxleak_seed": str(2**64)},
     "'ctxleak_seed' must be an integer in \\[0, 18446744073709551615\\], not '1844"),
    ({"ctxleak_seed": 2**70}, "'ctxleak_seed'.*\\[0, 18446744073709551615\\]"),
    ({"ctxleak_seed": "-1"}, "'ctxleak_seed'.*not '-1'"),
    ({"ctxleak_seed": 1.5}, "'ctxleak_seed' must be an integer"),
    ({"ctxleak_seed": None}, "lacks 'ctxleak_seed'"),
    ({"ctxleak_lam": float("nan")}, "'ctxleak_lam' must be finite"),
    ({"ctxleak_temperature": "inf"}, "'ctxleak_temperature' must be finite"),
    ({"ctxleak_eps": float("nan")}, "'ctxleak_eps' must be finite"),
    ({"ctxleak_temperature": 10**400}, "'ctxleak_temperature' must be a number"),
    ({"ctxleak_lam": True}, "'ctxleak_lam' must be a number"),
    ({"ctxleak_greedy": 2}, "'ctxleak_greedy' must be an integer in \\[0, 1\\]"),
    ({"ctxleak_greedy": -1}, "'ctxleak_greedy'"),
    ({"ctxleak_ex_post": 2}, "'ctxleak_ex_post' must be an integer in \\[0, 1\\]"),
    ({"ctxleak_ex_post": "yes"}, "'ctxleak_ex_post' must be an integer"),
    ({"ctxleak_min": 2**31}, "'ctxleak_min' must be an integer in \\[0, 2147483647\\]"),
    ({"ctxleak_stops": "-1"}, "'ctxleak_stops' must be token ids in \\[0, 2\\^31\\)"),
    ({"ctxleak_stops": f"0,{2**31}"}, "'ctxleak_stops' must be token ids"),
    ({"ctxleak_stops": ["0"]}, "'ctxleak_stops' must be comma-separated"),
    ({"ctxleak_pair": PAIR + "\n"}, "32 lowercase hex")])
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


def test_plain_steps_record_the_ex_post_epsilon_only_where_asked():
    """Plain CID asked for its ex-post ε records 2·max_y |log p̄_λ(y|D) − log p(y|∅)| at λ
    itself (computed here by hand over the vocabulary); λ_t stays λ; not asked, none. The key
    is sent only where set, so every other request still reads as protocol 2 wrote it."""
    assert "ctxleak_ex_post" not in _xargs()
    sent = pair_xargs(pair=PAIR, context_ids=CTX, lam=0.5, temperature=0.8, seed=4,
                      greedy=False, eps=None, min_new_tokens=0, stops=[STOP], ex_post=True)
    assert sent["ctxleak_ex_post"] == 1 and read_settings(sent).ex_post
    for asked in (True, False):
        book, _ = _book()
        settings = read_settings(_xargs(ctxleak_ex_post=int(asked)))
        a, b = book.admit(settings, 3, CTX), book.admit(settings, 3, EMPTY)
        z = _logits(7)
        book.apply(z.clone(), [(0, a, 0), (1, b, 0)])
        step = book.pairs[PAIR].steps[0]
        assert step["lam"] == 0.5
        if not asked:
            assert step["eps_ex_post"] is None
            continue
        zc, ze = z[0].double(), z[1].double()
        mixed = torch.log_softmax((0.5 * zc + 0.5 * ze) / 0.8, dim=-1)
        by_hand = 2 * float((mixed - torch.log_softmax(ze / 0.8, dim=-1)).abs().max())
        assert step["eps_ex_post"] == pytest.approx(by_hand, rel=1e-12)
        assert step["eps_ex_post"] > 0


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


def test_the_request_checks_beyond_the_arguments_name_them():
    settings = read_settings(_xargs(ctxleak_min=5))
    check_request(settings, max_tokens=5, n=1)
    check_request(settings, max_tokens=None, n=1)  # vLLM fills it in later
    with pytest.raises(PairSettingError, match="'ctxleak_min' \\(5\\) must be at most the "
                                               "request's max_tokens \\(4\\)"):
        check_request(settings, max_tokens=4, n=1)
    with pytest.raises(PairSettingError, match="n = 1"):
        check_request(settings, max_tokens=5, n=2)


def test_every_seed_torch_takes_is_sent_as_the_plugin_reads_it():
    """The ends of torch's range are admitted and run; a negative seed is sent as torch reads
    it (s + 2^64), so the served draw is in-process CID's."""
    for seed in (0, 2**64 - 1, 2**63):
        assert read_settings(_xargs(ctxleak_seed=str(seed))).seed == seed
    sent = pair_xargs(pair=PAIR, context_ids=CTX, lam=0.5, temperature=0.8, seed=-1,
                      greedy=False, eps=None, min_new_tokens=0, stops=[STOP])
    assert sent["ctxleak_seed"] == str(2**64 - 1)
    book, _ = _book()
    settings = read_settings(sent)
    a, b = book.admit(settings, 4, CTX), book.admit(settings, 4, EMPTY)
    z = _logits(11)
    out = book.apply(z.clone(), [(0, a, 0), (1, b, 0)])
    want = draw(cid_logprobs(z[0].double(), z[1].double(), 0.5, 0.8), seeded_generator(-1), True)
    assert int(out[0].argmax()) == want and book.pairs[PAIR].error is None


OTHER = "fedcba9876543210" * 2


def _two_pairs(book, max_tokens=3):
    """Pair A (λ = 0.25) on rows 0-1, pair B (λ = 0.5, this module's settings) on rows 2-3."""
    sa = read_settings(_xargs(ctxleak_pair=OTHER, ctxleak_lam=0.25))
    sb = read_settings(_xargs())
    members = [book.admit(sa, max_tokens, CTX), book.admit(sa, max_tokens, EMPTY),
               book.admit(sb, max_tokens, CTX), book.admit(sb, max_tokens, EMPTY)]
    return members


def test_a_pair_whose_step_raises_is_voided_alone(monkeypatch):
    """A kernel that raises for pair A's λ voids A (EOS, the error in its records); pair B of
    the same batch decodes the tokens it decodes alone, and the engine sees no exception."""
    steps = 3
    logits = [_logits(20 + t, rows=4) for t in range(steps)]
    alone, alone_written = _book()
    sb = read_settings(_xargs())
    b0, b1 = alone.admit(sb, steps, CTX), alone.admit(sb, steps, EMPTY)
    want = [int(alone.apply(z[2:].clone(), [(0, b0, t), (1, b1, t)])[0].argmax())
            for t, z in enumerate(logits)]

    real = cid_pairs.cid_logprobs

    def failing(zc, ze, lam, temperature):
        if lam == 0.25:
            raise RuntimeError("kernel failure injected for pair A")
        return real(zc, ze, lam, temperature)

    monkeypatch.setattr(cid_pairs, "cid_logprobs", failing)
    book, written = _book()
    members = _two_pairs(book, steps)
    got = []
    for t, z in enumerate(logits):
        out = book.apply(z.clone(), [(r, m, t if r >= 2 else 0) for r, m in enumerate(members)])
        assert int(out[0].argmax()) == int(out[1].argmax()) == STOP
        assert int(out[2].argmax()) == int(out[3].argmax())
        got.append(int(out[2].argmax()))
    assert got == want
    assert written[PAIR]["steps"] == alone_written[PAIR]["steps"]
    assert written[PAIR]["error"] is None
    assert "RuntimeError: kernel failure injected for pair A" in written[OTHER]["error"]
    assert written[OTHER]["steps"] == []


def test_settings_that_would_raise_in_the_engine_void_their_pair_at_admission():
    """Past the admission check (here by hand): a seed torch refuses, EOS ids outside the
    vocabulary; the pair is void, its rows end where an EOS id is a column, nothing raises."""
    book, written = _book()
    bad_seed = replace(read_settings(_xargs()), seed=2**70)
    a, b = book.admit(bad_seed, 4, CTX), book.admit(bad_seed, 4, EMPTY)
    out = book.apply(_logits(30), [(0, a, 0), (1, b, 0)])
    assert int(out[0].argmax()) == int(out[1].argmax()) == STOP
    assert "seed was refused" in written[PAIR]["error"]

    vocab_book = PairBook(lambda pair, payload: None, {}, vocab=11)
    vocab_book.admit(replace(read_settings(_xargs()), stops=(50,)), 4, CTX)
    assert "EOS ids [50] are outside the vocabulary of 11" in str(vocab_book.pairs[PAIR].error)

    book, written = _book()  # vocabulary unknown: the masking step raises, the pair is void
    far = replace(read_settings(_xargs()), stops=(50,), min_new_tokens=2)
    a, b = book.admit(far, 4, CTX), book.admit(far, 4, EMPTY)
    z = _logits(31)
    out = book.apply(z.clone(), [(0, a, 0), (1, b, 0)])
    assert torch.equal(out, z) and "IndexError" in written[PAIR]["error"]


def test_records_that_cannot_be_written_do_not_stop_the_batch():
    def full_disk(pair, payload):
        raise OSError(28, "No space left on device")

    book = PairBook(full_disk, {})
    settings = read_settings(_xargs())
    a, b = book.admit(settings, 1, CTX), book.admit(settings, 1, EMPTY)
    out = book.apply(_logits(32), [(0, a, 0), (1, b, 0)])
    assert int(out[0].argmax()) == int(out[1].argmax()) and book.pairs[PAIR].written


# ---- teacher-forced answers (``ctxleak_forced``) ---------------------------------------------
@pytest.mark.parametrize("forced, message", [
    ("a,b", "'ctxleak_forced' must be comma-separated token ids"),
    ([4, 5], "'ctxleak_forced' must be comma-separated token ids"),
    ("4,-1", "'ctxleak_forced' must be token ids in \\[0, 2\\^31\\)"),
    (f"4,{2**31}", "'ctxleak_forced' must be token ids in \\[0, 2\\^31\\)"),
    (f"4,{STOP},5", "EOS id \\('ctxleak_stops'\\) only as its last token")])
def test_forced_tokens_outside_their_domain_are_refused_naming_them(forced, message):
    with pytest.raises(PairSettingError, match=message):
        read_settings(_xargs(ctxleak_forced=forced))


def test_forced_tokens_are_checked_against_max_tokens_and_an_eos_may_end_them():
    settings = read_settings(_xargs(ctxleak_forced=f"4,5,{STOP}"))
    assert settings.forced == (4, 5, STOP)
    check_request(settings, max_tokens=3, n=1)
    with pytest.raises(PairSettingError, match="'ctxleak_forced' holds 3 tokens, more than "
                                               "the request's max_tokens \\(2\\)"):
        check_request(settings, max_tokens=2, n=1)
    assert read_settings(_xargs(ctxleak_forced=7)).forced == (7,)
    sent = pair_xargs(pair=PAIR, context_ids=CTX, lam=0.5, temperature=0.8, seed=0,
                      greedy=False, eps=None, min_new_tokens=0, stops=[STOP], forced=[4, 5])
    assert sent["ctxleak_forced"] == "4,5" and "ctxleak_forced" not in _xargs()


def test_forced_steps_record_the_mixture_of_the_given_tokens_then_draw_on():
    """Each forced step is a decided step with the given token (EOS masked before the minimum,
    bounded CID's λ_t and ex-post ε as when drawing); the generator is not drawn from, so the
    first step past the forced tokens draws its first number."""
    book, written = _book()
    settings = read_settings(_xargs(ctxleak_forced="3,9", ctxleak_eps=0.5, ctxleak_lam=1.0,
                                    ctxleak_min=1))
    a, b = book.admit(settings, 3, CTX), book.admit(settings, 3, EMPTY)
    zs = [_logits(40 + t) for t in range(3)]
    tokens = [int(book.apply(z.clone(), [(0, a, t), (1, b, t)])[0].argmax())
              for t, z in enumerate(zs)]
    gen = seeded_generator(4)
    for t, z in enumerate(zs):
        zc, ze = z[0].double(), z[1].double()
        if t < 1:
            zc[STOP], ze[STOP] = -1e30, -1e30
        lam, div = bounded_lambda(zc, ze, 0.5, 1.0, 0.8)
        mixed = cid_logprobs(zc, ze, lam, 0.8)
        token = [3, 9][t] if t < 2 else draw(mixed, gen, True)
        step = written[PAIR]["steps"][t] if PAIR in written else book.pairs[PAIR].steps[t]
        assert tokens[t] == step["token"] == token
        assert step["lam"] == lam and step["eps_ex_post"] == pytest.approx(2 * div)
        assert step["logp_mix"] == pytest.approx(float(mixed[token]), abs=1e-12)
        empty = torch.log_softmax(ze / 0.8, dim=-1)
        assert step["logp_empty"] == pytest.approx(float(empty[token]), abs=1e-12)
    assert written[PAIR]["error"] is None and len(written[PAIR]["steps"]) == 3


def test_a_forced_eos_at_the_end_ends_the_answer():
    book, written = _book()
    settings = read_settings(_xargs(ctxleak_forced=f"6,{STOP}"))
    a, b = book.admit(settings, 2, CTX), book.admit(settings, 2, EMPTY)
    for t in range(2):
        book.apply(_logits(50 + t), [(0, a, t), (1, b, t)])
    assert written[PAIR]["stopped"] and [s["token"] for s in written[PAIR]["steps"]] == [6, STOP]


def test_forced_tokens_outside_the_vocabulary_void_their_pair_alone():
    """Known vocabulary: void at admission. Unknown: the step raises, and the pair alone is
    void (its rows end); nothing reaches the engine."""
    vocab_book = PairBook(lambda pair, payload: None, {}, vocab=11)
    vocab_book.admit(read_settings(_xargs(ctxleak_forced="4,11")), 2, CTX)
    assert "forced token ids [11] are outside the vocabulary of 11" in \
        str(vocab_book.pairs[PAIR].error)
    book, written = _book()
    far = read_settings(_xargs(ctxleak_forced="4000"))
    a, b = book.admit(far, 1, CTX), book.admit(far, 1, EMPTY)
    out = book.apply(_logits(60), [(0, a, 0), (1, b, 0)])
    assert int(out[0].argmax()) == int(out[1].argmax()) == STOP
    assert "IndexError" in written[PAIR]["error"] and written[PAIR]["steps"] == []


def _bounded_pairs(book, ids, max_tokens):
    """Bounded pairs (ε = 0.5, λ_max = 1, EOS masked at the first step, each seeded by its id)
    on rows 2k (context) and 2k + 1, one per id."""
    members = []
    for pair in ids:
        s = read_settings(_xargs(ctxleak_pair=pair, ctxleak_eps=0.5, ctxleak_lam=1.0,
                                 ctxleak_seed=int(pair, 16), ctxleak_min=1))
        members += [book.admit(s, max_tokens, CTX), book.admit(s, max_tokens, EMPTY)]
    return members


@pytest.mark.parametrize("device, broken_search", [("cpu", False), ("cpu", True), (None, False)])
def test_bounded_pairs_of_one_batch_search_together_as_each_alone(monkeypatch, device,
                                                                  broken_search):
    """Five bounded pairs in one batch (their EOS masked at the first step) get, step by step,
    the records each gets alone: one λ_t search of five rows is five searches of one, bit for
    bit (searched together where the device allows it, here the CPU by choice); where that
    search raises, each pair searches alone and nothing is voided; and by default (a GPU
    only) the CPU searches one pair at a time."""
    if device is not None:
        monkeypatch.setattr(cid_pairs, "SEARCH_TOGETHER_ON", frozenset({device}))
    ids, steps = [f"{k:032x}" for k in range(1, 6)], 3
    logits = [_logits(40 + t, rows=10, vocab=50) for t in range(steps)]
    alone = []
    for k, pair in enumerate(ids):
        book, written = _book()
        c, e = _bounded_pairs(book, [pair], steps)
        for t, z in enumerate(logits):
            book.apply(z[2 * k:2 * k + 2].clone(), [(0, c, t), (1, e, t)])
        alone.append(written[pair]["steps"])
    calls = []
    real = cid_pairs.bounded_lambda_rows

    def counted(zc, ze, *args):
        calls.append(len(zc))
        if broken_search:
            raise RuntimeError("the group's search fails")
        return real(zc, ze, *args)

    monkeypatch.setattr(cid_pairs, "bounded_lambda_rows", counted)
    book, written = _book()
    members = _bounded_pairs(book, ids, steps)
    for t, z in enumerate(logits):
        book.apply(z.clone(), [(r, m, t) for r, m in enumerate(members)])
    assert calls == ([5] * steps if device else [])
    assert [written[p]["steps"] for p in ids] == alone
    assert all(written[p]["error"] is None for p in ids)
    assert any(0 < s["lam"] < 1 for steps_ in alone for s in steps_)  # the bound binds somewhere
