"""Generation against naive loops written here."""

from __future__ import annotations

import pytest
import torch
from helpers.naive_draw import naive_draw
from helpers.tiny_models import tiny_gemma3

from ctxleak.engine.generation import derive_seed, generate_streams
from ctxleak.engine.local import prefill
from ctxleak.engine.local.prefill import MIN_SHARED_PREFIX, shared_prefill_pays, shared_prefix_length
from ctxleak.engine.streams import single_stream
from ctxleak.kernels.cid import MASKED_LOGIT


def naive_sample(lm, prompt, n, seed, temperature):
    """One stream, full recomputation each step, the same seeded draw, written again in numpy."""
    g = torch.Generator().manual_seed(seed)
    seq, out = list(prompt), []
    for _ in range(n):
        with torch.no_grad():
            logits = lm.model(torch.tensor([seq])).logits[0, -1].double()
        logp = torch.log_softmax(logits / temperature, -1)
        tok = naive_draw(logp, g)
        if tok in lm.eos_ids:
            break
        out.append(tok)
        seq.append(tok)
    return out


def test_single_stream_matches_naive_sampling(tiny_lm):
    prompt = tiny_lm.bos_ids + tiny_lm.encode("the capital of france is")
    got = generate_streams(tiny_lm, [prompt], single_stream(0.8), max_new_tokens=12, seed=7)
    assert got.token_ids == naive_sample(tiny_lm, prompt, 12, 7, 0.8)


def test_cached_equals_uncached_with_several_streams(tiny_lm):
    prompts = [tiny_lm.encode("the capital of france is paris . the capital of italy is"),
               tiny_lm.encode("the city")]

    def mix(logits, step, excluded):
        return torch.log_softmax(0.5 * logits[0] + 0.5 * logits[1], -1)

    def observe(logits, logp, tok, step):
        return float(logp[tok])

    a = generate_streams(tiny_lm, prompts, mix, observe=observe, max_new_tokens=15, seed=3)
    b = generate_streams(tiny_lm, prompts, mix, observe=observe, max_new_tokens=15, seed=3,
                         use_cache=False)
    assert a.token_ids == b.token_ids
    assert a.records == pytest.approx(b.records, abs=1e-6)


def test_min_new_tokens_masks_eos_and_stop_ends(tiny_lm):
    eos = tiny_lm.eos_ids[0]

    seen = []

    def eos_loving(logits, step, excluded):  # EOS is the only choice unless excluded
        seen.append((step, excluded, float(logits[0, eos])))
        logp = torch.full_like(logits[0], -50.0)
        logp[eos] = 0.0
        logp[list(excluded)] = -torch.inf  # the engine names the masked ids explicitly
        logp[4] = max(float(logp[4]), -40.0)
        return torch.log_softmax(logp, -1)

    prompt = tiny_lm.encode("the")
    for use_cache in (True, False):
        seen.clear()
        out = generate_streams(tiny_lm, [prompt], eos_loving, min_new_tokens=5, max_new_tokens=9,
                               use_cache=use_cache)
        assert len(out.token_ids) == 5 and out.stopped_on_eos
        # steps 0-4 exclude EOS (and its logit is masked); step 5 excludes nothing
        assert [(s, e) for s, e, _ in seen] == [(s, (eos,)) for s in range(5)] + [(5, ())]
        assert all(z == MASKED_LOGIT for _, _, z in seen[:5]) and seen[5][2] > MASKED_LOGIT
    out = generate_streams(tiny_lm, [prompt], eos_loving, min_new_tokens=0, max_new_tokens=9)
    assert out.token_ids == [] and out.stopped_on_eos


def test_greedy_and_seeds(tiny_lm):
    prompt = tiny_lm.encode("the doctor said")
    g1 = generate_streams(tiny_lm, [prompt], single_stream(), sample=False, max_new_tokens=6)
    g2 = generate_streams(tiny_lm, [prompt], single_stream(), sample=False, max_new_tokens=6,
                          seed=99)
    assert g1.token_ids == g2.token_ids
    assert derive_seed(0, 5) == derive_seed(0, 5) != derive_seed(0, 6) != derive_seed(1, 5)
    assert 0 <= derive_seed(123, 10**6) < 2**63


def test_bad_generation_arguments(tiny_lm):
    with pytest.raises(ValueError):
        generate_streams(tiny_lm, [[]], single_stream())
    with pytest.raises(ValueError):
        generate_streams(tiny_lm, [[4]], single_stream(), min_new_tokens=5, max_new_tokens=2)


@pytest.mark.parametrize("which", ["llama_lm", "gpt2_lm", "gemma3_window_4", "gemma3_window_256"])
def test_shared_prefix_prefill_changes_nothing(which, request, monkeypatch):
    """Streams that begin alike (an instruction) prefill that part once; the padding then sits
    between the prefix and each stream's own tokens. Same draws and log-probs as prefilling
    every stream whole, and as recomputing everything each step."""
    if which.startswith("gemma3"):  # a sliding-window layer: sharing only if all fits in it
        tiny_lm = tiny_gemma3(sliding_window=int(which.rsplit("_", 1)[1]))
    else:
        tiny_lm = request.getfixturevalue(which)
    prefills = []
    real_prefill = prefill.prefill_shared
    monkeypatch.setattr(prefill, "prefill_shared",
                        lambda *a: prefills.append(1) or real_prefill(*a))
    head = tiny_lm.bos_ids + tiny_lm.encode("the doctor said the news report was one page .")
    prompts = [head + tiny_lm.encode("the capital of france is paris . the capital of"),
               head + tiny_lm.encode("rome"),
               head + tiny_lm.encode("the city of berlin is in germany . it is")]
    assert shared_prefix_length(prompts) == len(head) >= MIN_SHARED_PREFIX

    def mix(logits, step, excluded):
        return torch.log_softmax(logits.mean(dim=0), -1)

    def observe(logits, logp, tok, step):
        return logits[:, tok].tolist()

    runs = [generate_streams(tiny_lm, prompts, mix, observe=observe, max_new_tokens=12, seed=4,
                             **kw)
            for kw in ({}, {"share_prefix": False}, {"use_cache": False})]
    assert len(prefills) == (0 if which == "gemma3_window_4" else 1)
    assert runs[0].token_ids == runs[1].token_ids == runs[2].token_ids
    for other in runs[1:]:
        for a, b in zip(runs[0].records, other.records):
            assert a == pytest.approx(b, abs=1e-4)


def test_shared_prefill_only_where_it_saves_positions():
    """Counted by hand. Four rows of 24 shared tokens: two long (200, 190) and two short (40,
    38), CID's streams with and without the context. Shared: 24 + 4 x 176 = 728 positions;
    buckets [200, 190] and [40, 38]: 2 x 200 + 2 x 40 = 480, so the buckets win. Rows of
    similar length (100, 96, 90): shared 24 + 3 x 76 = 252 against one bucket of 3 x 100."""
    head = list(range(24))
    rows = [head + [30 + k] * (n - 24) for k, n in enumerate((200, 190, 40, 38))]
    assert shared_prefix_length(rows) == 24 and not shared_prefill_pays(rows, 24)
    similar = [head + [30 + k] * (n - 24) for k, n in enumerate((100, 96, 90))]
    assert shared_prefill_pays(similar, 24)


def test_shared_prefix_length_leaves_each_stream_a_token():
    assert shared_prefix_length([[1, 2, 3], [1, 2, 3]]) == 2
    assert shared_prefix_length([[1, 2, 3, 4], [1, 2, 9]]) == 2
    assert shared_prefix_length([[5], [5, 6]]) == 0
    assert shared_prefix_length([[1, 2, 3]]) == 0
