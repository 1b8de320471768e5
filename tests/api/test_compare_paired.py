"""``compare`` pairs runs over the same data per example: each example's difference, a paired t
interval and the Wilcoxon signed-rank test (checked against hand-computed values), columns
named by what differs between the runs, ``Comparison.to_pandas()`` one row per paired example,
refusal of runs over different data, nothing written unless ``output`` is given."""

from __future__ import annotations

import math
import statistics

import pytest
from conftest import run_cli

import ctxleak
from ctxleak.comparison import pair_runs
from ctxleak.comparison.pairs import paired_stats, smallest_signed_rank_n
from ctxleak.errors import ConfigError
from ctxleak.results import InfluenceResult

IDS = [f"e{i}" for i in range(1, 8)]
LEFT = [3.0, 5.0, 4.0, 7.5, 6.0, 9.5, 10.0]
RIGHT = [1.0, 4.0, 4.5, 5.0, 3.0, 6.0, 6.0]  # differences 2, 1, -0.5, 2.5, 3, 3.5, 4
T_975_6 = 2.446911851  # Student's t, 97.5% quantile, 6 degrees of freedom (tables)


def _records(lam, values, ids=IDS):
    return [{"id": i, "key": f"{i}|lambda={lam:g},T=0.8,context=all", "lambda": lam,
             "temperature": 0.8, "context_limit": None, "influence": v,
             "response_ids": [1, 2, 3, 4], "max_window_influence": v / 2}
            for i, v in zip(ids, values)]


def _run(records, lam, model="tiny", **config):
    return InfluenceResult(records=records, summary={"settings": []},
                           config={"command": "influence", "model": model, "data": "d.jsonl",
                                   "lambda": lam, "temperature": [0.8], "seed": 0,
                                   "output": f"runs/{model}-{lam}", **config},
                           provenance={"model": {"name": model}})


def test_hand_computed_paired_statistics():
    s = paired_stats(LEFT, RIGHT)
    d = [a - b for a, b in zip(LEFT, RIGHT)]
    assert s["pairs"] == 7 and s["mean difference"] == pytest.approx(15.5 / 7)
    half = T_975_6 * statistics.stdev(d) / math.sqrt(7)
    assert s["ci low"] == pytest.approx(15.5 / 7 - half, rel=1e-8)
    assert s["ci high"] == pytest.approx(15.5 / 7 + half, rel=1e-8)
    # |d| ranks 1..7 without ties, the one negative difference has rank 1: W- = 1; the exact
    # two-sided p counts the sign patterns with W- <= 1 (none, or rank 1 alone): 2 * 2 / 2^7
    assert s["wilcoxon p"] == pytest.approx(4 / 128)
    assert s["left mean"] == pytest.approx(sum(LEFT) / 7) and s["note"] == ""


def test_too_few_pairs_give_a_dash_and_the_reason():
    assert smallest_signed_rank_n(0.05) == 6  # 2/2^5 = 0.0625 > 0.05 >= 2/2^6
    five = paired_stats(LEFT[:5], RIGHT[:5])
    assert five["wilcoxon p"] is None and five["ci low"] is not None
    assert "needs 6 to reach p < 0.05" in five["note"] and "0.0625" in five["note"]
    one = paired_stats([1.0], [0.0])
    assert one["ci low"] is None and "at least 2" in one["note"]
    same = paired_stats([1.0, 2.0, 3.0], [1.0, 2.0, 3.0])
    assert same["wilcoxon p"] is None and "every difference is 0" in same["note"]
    assert same["ci low"] == same["ci high"] == 0.0


def test_two_runs_at_two_lambdas_pair_per_example():
    a, b = _run(_records(1.0, LEFT), [1.0]), _run(_records(0.5, RIGHT), [0.5])
    contrasts, why = pair_runs("influence", [a, b])
    assert why == "" and len(contrasts) == 1
    c = contrasts[0]
    assert c.label == "λ = 1 vs λ = 0.5" and (c.left.label, c.right.label) == ("λ = 1",
                                                                              "λ = 0.5")
    assert len(c.units) == 7 and c.only_left == c.only_right == 0
    by = {s["quantity"]: s for s in c.stats}
    assert by["influence"]["wilcoxon p"] == pytest.approx(4 / 128)
    assert by["influence per token"]["mean difference"] == pytest.approx(15.5 / 7 / 4)
    assert by["influence"]["unit"] == "nats, summed over the response"


def test_one_run_with_two_settings_gives_the_same_pairs():
    one = _run(_records(1.0, LEFT) + _records(0.5, RIGHT), [1.0, 0.5])
    contrasts, _ = pair_runs("influence", [one])
    (c,) = contrasts
    assert c.label == "λ = 1 vs λ = 0.5" and len(c.units) == 7
    two, _ = pair_runs("influence", [_run(_records(1.0, LEFT), [1.0]),
                                     _run(_records(0.5, RIGHT), [0.5])])
    assert c.stats == two[0].stats


def test_models_are_named_and_settings_matched():
    a = _run(_records(1.0, LEFT) + _records(0.5, RIGHT), [1.0, 0.5], model="m-a")
    b = _run(_records(1.0, RIGHT) + _records(0.5, LEFT), [1.0, 0.5], model="m-b")
    contrasts, _ = pair_runs("influence", [a, b])
    assert [c.label for c in contrasts] == ["model m-a vs m-b"] * 2
    assert [c.left.label for c in contrasts] == ["m-a, λ = 1", "m-a, λ = 0.5"]
    assert contrasts[0].stats[0]["mean difference"] == pytest.approx(15.5 / 7)
    assert contrasts[1].stats[0]["mean difference"] == pytest.approx(-15.5 / 7)


def test_to_pandas_one_row_per_paired_example_merges_on_id():
    pd = pytest.importorskip("pandas")
    from ctxleak.comparison import Comparison

    a, b = _run(_records(1.0, LEFT), [1.0]), _run(_records(0.5, RIGHT), [0.5])
    contrasts, _ = pair_runs("influence", [a, b])
    comp = Comparison("influence", ["λ = 1", "λ = 0.5"], [a, b], [], contrasts=contrasts)
    frame = comp.to_pandas()
    assert len(frame) == 7 and list(frame["id"]) == IDS
    assert list(frame["influence difference"]) == pytest.approx(
        [x - y for x, y in zip(LEFT, RIGHT)])
    assert set(frame["comparison"]) == {"λ = 1 vs λ = 0.5"}
    users = pd.DataFrame({"id": IDS, "owner": list("abcdefg")})
    merged = users.merge(frame, on="id", validate="one_to_one")
    assert list(merged["owner"]) == list("abcdefg")
    assert comp.paired()[0]["matched"] == "7 paired of 7 (λ = 1) and 7 (λ = 0.5)"


def test_runs_over_different_data():
    a = _run(_records(1.0, LEFT[:3]), [1.0])
    other = _run(_records(0.5, RIGHT[:3], ids=["x1", "x2", "x3"]), [0.5])
    with pytest.raises(ConfigError, match="different data: none of the 3 example ids of "
                                          "λ = 1 matches the 3 of λ = 0.5"):
        pair_runs("influence", [a, other])
    some = _run(_records(0.5, RIGHT[:3], ids=["e1", "e2", "x3"]), [0.5])
    with pytest.warns(UserWarning, match="2 paired of 3"):
        contrasts, _ = pair_runs("influence", [a, some])
    assert [dict(u)["id"] for u in contrasts[0].units] == ["e1", "e2"]


def test_compare_tiny_runs_pairs_and_writes_nothing_by_default(llama_lm, tmp_path, capsys,
                                                               monkeypatch):
    rows = [{"id": f"d{i}", "context": c, "query": "capital ?"} for i, c in enumerate(
        ["the capital of france is paris .", "rome is the capital of italy .",
         "madrid is in spain ."])]
    run = ctxleak.influence(llama_lm, rows, lambda_=[1.0, 0.5], max_new_tokens=3, seed=2,
                            progress=False, output=str(tmp_path / "run"))
    monkeypatch.chdir(tmp_path)
    before = sorted(p.name for p in tmp_path.iterdir())
    comp = ctxleak.compare(str(run.path))  # one run, two settings
    (c,) = comp.contrasts
    assert c.label == "λ = 1 vs λ = 0.5" and len(c.units) == 3
    frame = comp.examples()
    for row in frame:
        left = next(r for r in run.records if r["id"] == row["id"] and r["lambda"] == 1.0)
        right = next(r for r in run.records if r["id"] == row["id"] and r["lambda"] == 0.5)
        assert row["influence left"] == left["influence"]
        assert row["influence difference"] == pytest.approx(left["influence"]
                                                            - right["influence"])
    assert comp.path is None
    code, out, err = run_cli(["compare", str(run.path)], capsys)
    assert code == 0, err
    assert "paired per example" in out and "λ = 1 vs λ = 0.5" in out and "not saved" in out
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # no folder left behind
    assert "Paired per example" in comp.to_html()
