"""``compare`` pairs the utility of influence runs as well as their influence: token F1, exact
match and ROUGE-L against the references, per example, with the paired difference (the cost of
lowering λ that "Estimating Privacy Leakage of Augmented Contextual Knowledge in Language
Models" measures against references)."""

from __future__ import annotations

import pytest
from test_compare_paired import _run

from ctxleak.comparison import pair_runs

IDS = [f"e{i}" for i in range(1, 7)]
F1_HIGH = [1.0, 1.0, 0.5, 1.0, 0.0, 1.0]
F1_LOW = [0.0, 0.5, 0.5, 0.0, 0.0, 0.0]  # differences 1, 0.5, 0, 1, 0, 1: mean 3.5 / 6


def _records(lam, f1s, rouge=None):
    return [{"id": i, "key": f"{i}|lambda={lam:g},T=0.8,context=all", "lambda": lam,
             "temperature": 0.8, "context_limit": None, "influence": 2.0,
             "response_ids": [1, 2], "f1": f, "exact_match": float(f == 1.0),
             "rouge_l": rouge} for i, f in zip(IDS, f1s)]


def test_utility_is_paired_per_example_beside_influence():
    a = _run(_records(1.0, F1_HIGH, rouge=0.5), [1.0])
    b = _run(_records(0.0, F1_LOW, rouge=0.25), [0.0])
    (c,), why = pair_runs("influence", [a, b])
    by = {s["quantity"]: s for s in c.stats}
    assert by["F1"]["pairs"] == 6
    assert by["F1"]["mean difference"] == pytest.approx(3.5 / 6)
    assert by["F1"]["left mean"] == pytest.approx(4.5 / 6)
    assert by["exact match"]["mean difference"] == pytest.approx(4 / 6)  # 4 of 6 answers lost
    assert by["ROUGE-L"]["mean difference"] == pytest.approx(0.25)
    assert by["ROUGE-L"]["ci low"] == by["ROUGE-L"]["ci high"] == pytest.approx(0.25)
    assert by["influence"]["mean difference"] == 0.0  # influence still paired
    assert by["F1"]["unit"].startswith("token F1")


def test_runs_without_references_show_no_utility_rows():
    a, b = _run(_records(1.0, [None] * 6), [1.0]), _run(_records(0.0, [None] * 6), [0.0])
    for r in a.records + b.records:
        r["exact_match"] = None
    (c,), _ = pair_runs("influence", [a, b])
    assert {s["quantity"] for s in c.stats} == {"influence", "influence per token"}


def test_a_bounded_eps_sweep_pairs_each_eps_as_its_own_side():
    plain = _records(1.0, F1_HIGH)
    bounded = _records(1.0, F1_LOW)
    for r in bounded:
        r["eps"], r["key"] = 2.0, r["key"] + ",eps=2"
    (c,), why = pair_runs("influence", [_run(plain + bounded, [1.0])])
    assert why == "" and c.label == "bounded ε = none vs bounded ε = 2"
    by = {s["quantity"]: s for s in c.stats}
    assert by["F1"]["pairs"] == 6 and by["F1"]["mean difference"] == pytest.approx(3.5 / 6)
