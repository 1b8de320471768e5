"""Scoring against naive computations written here: one sequence at a time, full forward pass."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ctxleak.engine.batching import shared_prefixes
from ctxleak.engine.forward import left_pad, right_pad
from ctxleak.engine.local import scoring as local_scoring
from ctxleak.engine.scoring import continuation_logits, continuation_logprobs, next_token_logprobs


def naive_logits(lm, ids):
    with torch.no_grad():
        return lm.model(torch.tensor([list(ids)])).logits[0].double()


def naive_continuation(lm, prompt, cont):
    logp = torch.log_softmax(naive_logits(lm, list(prompt) + list(cont)), -1)
    return np.array([logp[len(prompt) - 1 + t, tok].item() for t, tok in enumerate(cont)])


def random_ids(lm, n, seed):
    g = np.random.default_rng(seed)
    return [int(x) for x in g.integers(4, len(lm.tokenizer), size=n)]


def ablations(lm, n_ctx=40, window=4, seed=0):
    """A prompt with a context and the variants that each delete one window of it."""
    context = random_ids(lm, n_ctx, seed)
    head, tail = lm.bos_ids + random_ids(lm, 3, seed + 1), random_ids(lm, 5, seed + 2)
    prompts = [head + context + tail]
    for start in range(0, n_ctx, window):
        prompts.append(head + context[:start] + context[start + window:] + tail)
    return prompts


def test_next_token_matches_naive_batched_and_unbatched(tiny_lm):
    prompts = [random_ids(tiny_lm, n, s) for s, n in enumerate([3, 11, 7, 1, 20])]
    expected = torch.stack([torch.log_softmax(naive_logits(tiny_lm, p)[-1], -1) for p in prompts])
    for bs in (1, 2, "auto"):
        got = next_token_logprobs(tiny_lm, prompts, batch_size=bs)
        assert got.dtype == torch.float64
        assert got.shape == (5, tiny_lm.vocab_size)
        torch.testing.assert_close(got, expected, atol=1e-5, rtol=0)


def test_next_token_selected_ids_are_exact_columns(tiny_lm):
    prompts = [random_ids(tiny_lm, 9, 3)]
    full = next_token_logprobs(tiny_lm, prompts)
    cols = [7, 3, 40]
    part = next_token_logprobs(tiny_lm, prompts, token_ids=cols)
    torch.testing.assert_close(part, full[:, cols])


def test_continuation_matches_naive(tiny_lm):
    prompts = [random_ids(tiny_lm, n, s) for s, n in enumerate([5, 12, 2])]
    cont = random_ids(tiny_lm, 6, 99)
    got = continuation_logprobs(tiny_lm, prompts, cont, reuse_prefix=False)
    for p, g in zip(prompts, got):
        np.testing.assert_allclose(g, naive_continuation(tiny_lm, p, cont), atol=1e-5)


@pytest.mark.parametrize("batch_size", [1, 3, "auto"])
def test_prefix_reuse_equals_full_recomputation(tiny_lm, batch_size):
    prompts = ablations(tiny_lm)
    cont = random_ids(tiny_lm, 7, 5)
    reused = continuation_logprobs(tiny_lm, prompts, cont, reuse_prefix=True,
                                   batch_size=batch_size)
    full = continuation_logprobs(tiny_lm, prompts, cont, reuse_prefix=False, batch_size=1)
    for a, b, p in zip(reused, full, prompts):
        np.testing.assert_allclose(a, b, atol=1e-5)
        np.testing.assert_allclose(b, naive_continuation(tiny_lm, p, cont), atol=1e-5)


def test_prefix_reuse_actually_uses_the_cache(tiny_lm, monkeypatch):
    calls = []
    real = local_scoring.expand_cache

    def spy(cache, length, batch):
        calls.append(length)
        return real(cache, length, batch)

    monkeypatch.setattr(local_scoring, "expand_cache", spy)
    continuation_logprobs(tiny_lm, ablations(tiny_lm), random_ids(tiny_lm, 3, 1), batch_size=2)
    assert calls and max(calls) >= local_scoring.MIN_REUSE_TOKENS


def test_next_token_prefix_reuse(tiny_lm):
    prompts = ablations(tiny_lm, seed=4)
    a = next_token_logprobs(tiny_lm, prompts, reuse_prefix=True, batch_size=2)
    b = next_token_logprobs(tiny_lm, prompts, reuse_prefix=False, batch_size=1)
    torch.testing.assert_close(a, b, atol=1e-5, rtol=0)


def test_left_and_right_padding_agree(tiny_lm):
    seqs = [random_ids(tiny_lm, n, s) for s, n in enumerate([4, 13, 9])]
    with torch.no_grad():
        ids, mask, pos = left_pad(seqs, 0, "cpu")
        left = tiny_lm.model(input_ids=ids, attention_mask=mask, position_ids=pos).logits
        ids, mask, pos = right_pad(seqs, 0, "cpu")
        right = tiny_lm.model(input_ids=ids, attention_mask=mask, position_ids=pos).logits
    width = max(map(len, seqs))
    for row, s in enumerate(seqs):
        single = naive_logits(tiny_lm, s)
        l_rows = torch.log_softmax(left[row, width - len(s):].double(), -1)
        r_rows = torch.log_softmax(right[row, :len(s)].double(), -1)
        torch.testing.assert_close(l_rows, torch.log_softmax(single, -1), atol=1e-5, rtol=0)
        torch.testing.assert_close(r_rows, torch.log_softmax(single, -1), atol=1e-5, rtol=0)


def test_per_prompt_continuations_and_empty_ones(tiny_lm):
    prompts = [random_ids(tiny_lm, 4, 1), random_ids(tiny_lm, 6, 2)]
    conts = [random_ids(tiny_lm, 3, 3), []]
    got = continuation_logprobs(tiny_lm, prompts, conts)
    np.testing.assert_allclose(got[0], naive_continuation(tiny_lm, prompts[0], conts[0]),
                               atol=1e-5)
    assert got[1].shape == (0,)


def test_bad_requests(tiny_lm):
    with pytest.raises(ValueError, match="empty"):
        continuation_logprobs(tiny_lm, [[]], [5])
    with pytest.raises(ValueError, match="one continuation per prompt"):
        continuation_logprobs(tiny_lm, [[4], [5]], [[5]])


def test_prefix_kv_store_hands_out_independent_copies(tiny_lm):
    """A stored prefix cache equals a fresh one; extending a copy leaves the store intact;
    the oldest prefix goes when the store is full."""
    from ctxleak.engine.forward import PrefixKV, hidden_states

    store = PrefixKV(tiny_lm, size=2)
    head, tail = random_ids(tiny_lm, 6, 1), random_ids(tiny_lm, 4, 2)
    expected = naive_logits(tiny_lm, head + tail)[-1]
    for _ in range(2):
        cache = store.get(head)
        ids = torch.tensor([tail])
        with torch.no_grad():
            hidden, _ = hidden_states(tiny_lm, ids, torch.ones((1, 10), dtype=torch.long),
                                      torch.arange(6, 10)[None], cache=cache, use_cache=True)
            got = tiny_lm.model.get_output_embeddings()(hidden)[0, -1].double()
        assert torch.allclose(got, expected, atol=1e-5)
        assert cache.get_seq_length() == 10
    assert store.hits == 1
    store.get(tail)
    store.get(random_ids(tiny_lm, 3, 3))
    store.get(head)
    assert store.hits == 1  # head had been dropped


def test_prefix_reuse_across_examples_in_one_batch(tiny_lm, monkeypatch):
    """Issue 13: variants of several examples (groups) share a forward pass, each reusing its
    own example's cached prefix at its own length (left-padded caches, right-padded suffixes):
    the same log-probs as scoring every prompt in full."""
    batches = []
    real = local_scoring._forward_after_own_prefixes
    monkeypatch.setattr(local_scoring, "_forward_after_own_prefixes",
                        lambda lm, seqs, prefixes, refs, pad:
                        batches.append((len({id(r) for r in refs}), len(set(prefixes))))
                        or real(lm, seqs, prefixes, refs, pad))
    enc = tiny_lm.encode
    words = ("the capital of france is paris . rome is the capital of italy and a city . the "
             "doctor said the news report was one page . berlin is in germany .").split()
    prompts, conts, groups = [], [], []
    for g, n in enumerate((26, 31, 22)):
        ctx = enc(" ".join(words[g:g + n]))
        full = tiny_lm.bos_ids + enc("document :") + ctx + enc("answer :")
        variants = [full] + [full[:k] + full[k + 3:] for k in (18, 20, 24)]
        prompts += variants
        conts += [enc("paris is the capital")[:3 + g]] * len(variants)
        groups += [g] * len(variants)
    got = continuation_logprobs(tiny_lm, prompts, conts, groups=groups, batch_size="auto")
    want = continuation_logprobs(tiny_lm, prompts, conts, reuse_prefix=False, batch_size=1)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, atol=2e-5)
    assert any(n_groups > 1 and n_prefixes > 1 for n_groups, n_prefixes in batches)
    nxt = next_token_logprobs(tiny_lm, prompts, groups=groups, reuse_prefix=True)
    np.testing.assert_allclose(nxt, next_token_logprobs(tiny_lm, prompts, batch_size=1),
                               atol=2e-5)


def test_sliding_window_model_keeps_one_example_per_reuse_batch():
    """A model with sliding-window layers cannot take padded caches: its variants reuse the
    prefix one example at a time, with the same numbers as scoring in full."""
    from helpers.tiny_models import tiny_gemma3

    lm = tiny_gemma3(sliding_window=64)
    enc = lm.encode
    prompts, groups = [], []
    for g, text in enumerate(["the capital of france is paris . rome is the capital of italy "
                              "and a city . the doctor said", "berlin is in germany . the news "
                              "report was one page . the city of rome is the capital"]):
        full = lm.bos_ids + enc("document :") + enc(text) + enc("answer :")
        prompts += [full, full[:17] + full[19:], full[:20] + full[22:]]
        groups += [g] * 3
    assert not local_scoring._plain_layers(lm.model(torch.tensor([prompts[0]]),
                                              use_cache=True).past_key_values)
    cont = enc("paris is")
    got = continuation_logprobs(lm, prompts, cont, groups=groups)
    want = continuation_logprobs(lm, prompts, cont, reuse_prefix=False, batch_size=1)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, atol=2e-5)


def test_shared_prefixes_compute_a_prompt_once_across_calls_with_the_same_numbers(tiny_lm,
                                                                                  monkeypatch):
    """Inside ``shared_prefixes``, two scoring calls of one prompt with different continuations
    (a sweep's settings) compute the prompt's KV cache once; each call's numbers are bitwise
    those of the call made alone inside a fresh ``shared_prefixes``, and equal a from-scratch
    recomputation."""
    prompt = ablations(tiny_lm)[0]
    assert len(prompt) >= local_scoring.MIN_REUSE_TOKENS
    conts = [random_ids(tiny_lm, 4, 1), random_ids(tiny_lm, 4, 2)]
    computed = []
    real = local_scoring.hidden_states

    def spy(lm, ids, *args, **kwargs):
        if kwargs.get("use_cache") and ids.shape[0] == 1 and kwargs.get("cache") is None:
            computed.append(int(ids.shape[1]))
        return real(lm, ids, *args, **kwargs)

    monkeypatch.setattr(local_scoring, "hidden_states", spy)
    with shared_prefixes():
        together = [continuation_logprobs(tiny_lm, [prompt], c, reuse_prefix=True)[0]
                    for c in conts]
    # the reference prefix (up to the position that predicts the first scored token) once
    assert computed == [len(prompt) - 1]
    for c, got in zip(conts, together):
        with shared_prefixes():
            alone = continuation_logprobs(tiny_lm, [prompt], c, reuse_prefix=True)[0]
        assert np.array_equal(got, alone)
        np.testing.assert_allclose(got, naive_continuation(tiny_lm, prompt, c), atol=1e-5)


def _scored(lm, prompts, cont, **kw):
    """log p(cont | prompt) of each prompt through ``continuation_logits`` (where ``bases`` goes)."""
    def reduce(i, logits):
        logp = torch.log_softmax(logits, dim=-1)
        return np.array([logp[t, tok].item() for t, tok in enumerate(cont)])

    return continuation_logits(lm, prompts, cont, reduce=reduce, **kw)


@pytest.fixture
def widths(monkeypatch):
    """The width (positions per row) of each in-process forward pass from now on."""
    computed = []
    real = local_scoring.hidden_states

    def spy(lm, ids, *args, **kwargs):
        computed.append(int(ids.shape[1]))
        return real(lm, ids, *args, **kwargs)

    monkeypatch.setattr(local_scoring, "hidden_states", spy)
    return computed


def test_a_prompt_is_built_on_another_prompts_cache(tiny_lm, widths):
    """``bases``: a prompt sharing its first tokens with another (a control or a decoy with the
    example's own prompt) takes that prefix from the other's KV cache, inside
    ``shared_prefixes``: only its own remaining tokens are computed, the numbers equal a
    from-scratch recomputation, and they are bitwise the same in a fresh store (the cache built
    on the base is one computation, stored under both prompts' ids). Outside the store the base
    is not used."""
    prompts = ablations(tiny_lm)
    full, other = prompts[0], prompts[6]  # other: the window [20, 24) of the context deleted
    shared = next(i for i, (a, b) in enumerate(zip(full, other)) if a != b)
    assert shared >= local_scoring.MIN_REUSE_TOKENS
    cont = random_ids(tiny_lm, 4, 7)
    runs = []
    for _ in range(2):
        with shared_prefixes():
            _scored(tiny_lm, [full], cont)  # the example's own prompt, scored first
            widths.clear()
            runs.append(_scored(tiny_lm, [other], cont, bases={0: full[:-1]})[0])
        # the rest of its prompt on the base's cache, then the continuation's positions
        assert widths == [len(other) - 1 - shared, len(cont) + 1]
    assert np.array_equal(runs[0], runs[1])
    np.testing.assert_allclose(runs[0], naive_continuation(tiny_lm, other, cont), atol=1e-5)
    with shared_prefixes():  # without the base: the whole prompt computed on its own
        widths.clear()
        alone = _scored(tiny_lm, [other], cont)[0]
    assert widths == [len(other) - 1, len(cont) + 1]
    np.testing.assert_allclose(runs[0], alone, atol=1e-5)
    widths.clear()  # outside the store: the group's own first prompt is its reference
    _scored(tiny_lm, [other, other], cont, bases={0: full[:-1]})
    assert widths[0] == len(other) - 1 and len(other) - 1 - shared not in widths


def test_a_base_too_short_or_on_sliding_layers_is_not_used(llama_lm, widths):
    """A base that shares fewer than ``MIN_REUSE_TOKENS`` tokens, or a model with
    sliding-window layers (whose cache cannot be cut), gives the plain reference cache: the
    whole prompt computed in one pass, never the rest of it on the base's; on a sliding-window
    model the base itself is not computed either."""
    from helpers.tiny_models import tiny_gemma3

    sliding = tiny_gemma3(sliding_window=4)
    for lm in (llama_lm, sliding):
        prompts = ablations(lm)
        full, other = prompts[0], prompts[6]
        shared = next(i for i, (a, b) in enumerate(zip(full, other)) if a != b)
        assert shared >= local_scoring.MIN_REUSE_TOKENS
        unrelated = random_ids(lm, len(full), 99)
        cont = random_ids(lm, 3, 5)
        base = unrelated if lm is llama_lm else full[:-1]
        widths.clear()
        with shared_prefixes():
            got = _scored(lm, [other], cont, bases={0: base})[0]
        assert len(other) - 1 in widths and len(other) - 1 - shared not in widths
        with shared_prefixes():
            plain = _scored(lm, [other], cont)[0]
        assert np.array_equal(got, plain)
    with shared_prefixes():  # a sliding-window model: no base computed at all, even the first
        widths.clear()
        _scored(sliding, [other], cont, bases={0: full[:-3]})
    assert widths == [len(other) - 1, len(cont) + 1]


def test_a_handed_over_prefill_joins_the_store_within_its_bound(tiny_lm, widths, monkeypatch):
    """A prompt's KV cache handed to the scoring (``prefix_caches``, prefill_alone's shape: the
    prompt less its last token in one batch-1 pass) is kept in the run's store under those ids,
    so that another prompt built on it (``bases``) takes it from there instead of computing it;
    the store stays within its bound (the oldest dropped)."""
    from ctxleak.engine.batching import SHARED_PREFIXES
    from ctxleak.engine.local.prefill import prefill_alone

    monkeypatch.setattr(local_scoring, "SHARED_PREFIXES_KEPT", 2)
    prompts = ablations(tiny_lm)
    full, other = prompts[0], prompts[6]
    shared = next(i for i, (a, b) in enumerate(zip(full, other)) if a != b)
    cont = random_ids(tiny_lm, 4, 7)
    with torch.inference_mode():  # as generation prefills
        _, handed = prefill_alone(tiny_lm, full)
    with shared_prefixes():
        store = SHARED_PREFIXES.get()
        for k in range(3):  # older caches the bound must drop
            local_scoring._keep(store, ("older", k), handed)
        widths.clear()
        _scored(tiny_lm, [full], cont, prefix_caches={0: handed})
        assert widths == [len(cont) + 1]  # the handed-over prefix is not computed again
        assert len(store) == 2 and tuple(full[:-1]) in store
        widths.clear()
        built = _scored(tiny_lm, [other], cont, bases={0: full[:-1]})[0]
        assert widths == [len(other) - 1 - shared, len(cont) + 1]  # the base from the store
    np.testing.assert_allclose(built, naive_continuation(tiny_lm, other, cont), atol=1e-5)
