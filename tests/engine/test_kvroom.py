"""The KV cache with room for the tokens to come: decode steps write in place, and every step's
keys, values and hidden states equal those of Hugging Face's concatenating ``DynamicLayer``."""

from __future__ import annotations

import torch
from helpers.tiny_models import tiny_gemma3

from ctxleak.engine import generation
from ctxleak.engine.forward import hidden_states, left_pad, pad_id
from ctxleak.engine.local import generation as local_generation
from ctxleak.engine.local.kvroom import RoomyLayer, give_room
from ctxleak.engine.streams import StreamJob


def _prefill(lm, texts):
    seqs = [lm.bos_ids + lm.encode(t) for t in texts]
    ids, mask, pos = left_pad(seqs, pad_id(lm), lm.device)
    with torch.inference_mode():
        hidden, cache = hidden_states(lm, ids, mask, pos, use_cache=True)
    return hidden, cache, mask, pos


def _step(lm, cache, mask, pos, tokens):
    new = torch.as_tensor([[t] for t in tokens], dtype=torch.long)
    mask = torch.cat([mask, torch.ones_like(new)], dim=1)
    pos = pos[:, -1:] + 1
    with torch.inference_mode():
        hidden, cache = hidden_states(lm, new, mask, pos, cache=cache, use_cache=True)
    return hidden, cache, mask, pos


def test_roomy_cache_equals_concatenating_cache(tiny_lm):
    """Same keys, values and hidden states (exactly) at every step, through a batch compaction
    (finished rows leave) and past the room given (the cache moves to a bigger buffer)."""
    texts = ["the capital of france is", "rome", "berlin is in germany . the city"]
    _, plain, mask_a, pos_a = _prefill(tiny_lm, texts)
    _, roomy, mask_b, pos_b = _prefill(tiny_lm, texts)
    assert give_room(roomy, 3)
    assert all(isinstance(layer, RoomyLayer) for layer in roomy.layers)
    rows = [0, 1, 2]
    for step in range(7):
        tokens = [5 + 3 * r + step for r in rows]
        ha, plain, mask_a, pos_a = _step(tiny_lm, plain, mask_a, pos_a, tokens)
        hb, roomy, mask_b, pos_b = _step(tiny_lm, roomy, mask_b, pos_b, tokens)
        assert torch.equal(ha, hb)
        for la, lb in zip(plain.layers, roomy.layers):
            assert torch.equal(la.keys, lb.keys) and torch.equal(la.values, lb.values)
        assert roomy.get_seq_length() == plain.get_seq_length()
        if step == 2:  # row 1 finishes: both caches drop it
            keep = torch.tensor([0, 2])
            plain.batch_select_indices(keep)
            roomy.batch_select_indices(keep)
            mask_a, pos_a, mask_b, pos_b = mask_a[keep], pos_a[keep], mask_b[keep], pos_b[keep]
            rows = [0, 2]


def test_decode_steps_write_in_place(llama_lm):
    """Within the room a step's keys are a view of the same buffer (no copy of the cache);
    out of room, the cache moves once and has room again."""
    _, cache, mask, pos = _prefill(llama_lm, ["the capital of", "paris"])
    give_room(cache, 2)
    layer = cache.layers[0]
    base = layer.keys.data_ptr()
    for _ in range(2):
        _, cache, mask, pos = _step(llama_lm, cache, mask, pos, [7, 8])
        assert layer.keys.data_ptr() == base
    _, cache, mask, pos = _step(llama_lm, cache, mask, pos, [7, 8])  # room used up: moves
    moved = layer.keys.data_ptr()
    assert moved != base
    _, cache, mask, pos = _step(llama_lm, cache, mask, pos, [7, 8])
    assert layer.keys.data_ptr() == moved


def test_give_room_leaves_other_caches_alone(llama_lm):
    """Only plain concatenating layers are converted: a sliding-window model's cache (which
    drops old positions) and an already converted cache are left as they are."""
    assert not give_room(object(), 5)
    _, cache, _, _ = _prefill(llama_lm, ["rome"])
    assert not give_room(cache, 0)
    assert give_room(cache, 4) and not give_room(cache, 4)  # already roomy: not converted twice
    _, sliding, _, _ = _prefill(tiny_gemma3(sliding_window=4), ["the capital of france is"])
    kinds = [type(layer) for layer in sliding.layers]
    assert not give_room(sliding, 4)
    assert [type(layer) for layer in sliding.layers] == kinds


def test_generation_identical_with_and_without_room(tiny_lm, monkeypatch):
    """Sampled tokens and recorded log-probs are bit-identical to the concatenating cache."""
    enc = tiny_lm.encode
    jobs = lambda: [StreamJob(  # noqa: E731
        [tiny_lm.bos_ids + enc(a), tiny_lm.bos_ids + enc(b)],
        lambda lg, step, excluded: torch.log_softmax((0.7 * lg[0] + 0.3 * lg[1]) / 0.9, -1),
        lambda lg, lp, tok, step: float(lp[tok]), seed=3 + k, max_new_tokens=9,
        min_new_tokens=mn)
        for k, (a, b, mn) in enumerate([("the capital of france is", "the capital", 9),
                                         ("rome is a city .", "rome", 2)])]
    with_room = generation.generate_many(tiny_lm, jobs())
    monkeypatch.setattr(local_generation, "give_room", lambda cache, room: False)
    without = generation.generate_many(tiny_lm, jobs())
    assert [g.token_ids for g in with_room] == [g.token_ids for g in without]
    assert [g.records for g in with_room] == [g.records for g in without]
