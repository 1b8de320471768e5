"""The canary check: fine-tuning a copy on some subjects' documents raises their PII
likelihood; the original model is untouched."""

from __future__ import annotations

import pytest
import torch
from helpers.tiny_data import word_records

from ctxleak.methods.pii.canary import (
    FinetuneConfig,
    canary_verdict,
    decoder_blocks,
    finetune_copy,
    split_subjects,
)
from ctxleak.methods.pii.probe import ProbeOptions, make_items, probe_batch


def _mean_target_ll(lm, records):
    items, _ = make_items(records, ["phone"], seed=0)
    rows = probe_batch(lm, items, ProbeOptions(generate=False))
    return sum(r["target_ll"] for r in rows) / len(rows), rows


@pytest.mark.parametrize("layers", [0, 1])
def test_finetuning_raises_inserted_target_likelihood(tiny_lm, layers):
    records = word_records(8)
    inserted, held = split_subjects(records, 4, seed=0)
    before = {k: v.detach().clone() for k, v in tiny_lm.model.state_dict().items()}
    base_ins, _ = _mean_target_ll(tiny_lm, inserted)
    result = finetune_copy(tiny_lm, [d for r in inserted for d in r.documents],
                           FinetuneConfig(epochs=25, lr=1e-2, batch_size=4,
                                          train_layers=layers, seed=0))
    assert all(torch.equal(before[k], v) for k, v in tiny_lm.model.state_dict().items())
    assert result.lm.model is not tiny_lm.model and result.lm.tokenizer is tiny_lm.tokenizer
    assert result.losses[-1] < result.losses[0]
    assert result.steps == 25 and result.n_tokens > 0
    if layers:
        blocks = decoder_blocks(tiny_lm.model)
        assert result.n_trainable == sum(p.numel() for p in blocks[-1].parameters())
    tuned_ins, rows = _mean_target_ll(result.lm, inserted)
    # the tiny GPT-2's tied head keeps its distributions near uniform, so it moves less
    assert tuned_ins > base_ins + (1.0 if tiny_lm.bos_ids else 0.05)
    # the inserted subjects' PII now beats another inserted subject's PII (null) on average
    assert sum(r["target_ll"] - r["null_ll"] for r in rows) > 0
    assert not any(p.requires_grad for p in result.lm.model.parameters())


def test_finetuning_is_seeded(gpt2_lm):
    texts = [d for r in word_records(4) for d in r.documents]
    cfg = FinetuneConfig(epochs=2, lr=1e-3, batch_size=2, train_layers=1, seed=3)
    a, b = finetune_copy(gpt2_lm, texts, cfg), finetune_copy(gpt2_lm, texts, cfg)
    assert a.losses == b.losses
    sa, sb = a.lm.model.state_dict(), b.lm.model.state_dict()
    assert all(torch.equal(sa[k], sb[k]) for k in sa)


def test_split_subjects():
    records = word_records(8)
    ins, held = split_subjects(records, 3, seed=1)
    assert len(ins) == len(held) == 3
    assert not {r.subject_id for r in ins} & {r.subject_id for r in held}
    assert split_subjects(records, 3, seed=1) == (ins, held)
    with pytest.raises(ValueError, match="needs 18 subjects with documents"):
        split_subjects(records, 9)
    with pytest.raises(ValueError, match="at least 2"):
        split_subjects(records, 1)
    with pytest.raises(ValueError, match="epochs"):
        FinetuneConfig(epochs=0).validate()


def test_verdict():
    def s(group, p):
        return {"pii_type": "phone", "structure": "twins", "group": group,
                "wilcoxon": {"pvalue": p, "median_difference": 1.0}, "exact_match_rate": 0.0}

    (v,) = canary_verdict([s("inserted", 0.001), s("held-out", 0.4)])
    assert v["detected"] and v["inserted_pvalue"] == 0.001 and v["held_out_pvalue"] == 0.4
    (v,) = canary_verdict([s("inserted", 0.001), s("held-out", 0.01)])
    assert not v["detected"]
    (v,) = canary_verdict([s("inserted", 0.2), s("held-out", 0.4)])
    assert not v["detected"]
