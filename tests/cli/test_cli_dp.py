"""Tests for ``ctxleak dp calibrate`` and ``ctxleak dp epsilon`` (paper 001 App. C.3)."""

from __future__ import annotations

import json

import pytest
from conftest import run_cli

from ctxleak.mitigations.accounting import theoretical_epsilon


def run(capsys, *args: str) -> tuple[int, str, str]:
    return run_cli(args, capsys)


def test_calibrate_temperature_json_reproduces_table_4(capsys):
    code, out, _ = run(capsys, "dp", "calibrate", "--target-eps", "1,5,10", "--delta", "1e-5",
                       "--clip", "10", "--subset-size", "50", "--sequences", "50",
                       "--max-new-tokens", "40", "--json")
    assert code == 0
    rows = json.loads(out)
    assert [set(r) for r in rows] == [{"target_eps", "temperature", "clip", "subset_size",
                                       "alpha", "eps"}] * 3
    assert [round(r["temperature"], 2) for r in rows] == [36.18, 8.53, 4.80]
    assert [r["alpha"] for r in rows] == [18, 5, 3]
    assert all(r["clip"] == 10 and r["subset_size"] == 50 for r in rows)
    assert [r["eps"] for r in rows] == pytest.approx([1, 5, 10])


def test_calibrate_clip_and_subset_size(capsys):
    code, out, _ = run(capsys, "dp", "calibrate", "--target-eps", "1,100", "--temperature", "2",
                       "--search", "clip", "--json")
    assert code == 0
    assert [round(r["clip"], 2) for r in json.loads(out)] == [0.55, 21.20]
    code, out, _ = run(capsys, "dp", "calibrate", "--target-eps", "5,10,50",
                       "--search", "subset-size", "--json")
    rows = json.loads(out)
    assert code == 0
    assert [r["subset_size"] for r in rows] == [214, 121, 36]
    assert [r["alpha"] for r in rows] == [5, 4, 2]


def test_calibrate_table_output(capsys):
    code, out, _ = run(capsys, "dp", "calibrate", "--target-eps", "0.5,100")
    assert code == 0
    assert "68.579" in out and "0.9435" in out and "α*" in out


def test_calibrate_custom_orders(capsys):
    code, out, _ = run(capsys, "dp", "calibrate", "--target-eps", "10", "--orders", "2,4-6",
                       "--json")
    assert code == 0
    assert json.loads(out)[0]["alpha"] in (2, 4, 5, 6)


def test_epsilon_command(capsys):
    code, out, _ = run(capsys, "dp", "epsilon", "--clip", "10", "--subset-size", "50",
                       "--temperature", "4.8", "--sequences", "50", "--max-new-tokens", "40",
                       "--delta", "1e-5", "--json")
    assert code == 0
    got = json.loads(out)
    eps, alpha = theoretical_epsilon(10, 50, 4.8, 50, 40, 1e-5)
    assert got["eps"] == pytest.approx(eps) and got["alpha"] == alpha == 3
    code, out, _ = run(capsys, "dp", "epsilon", "--temperature", "4.8")
    assert code == 0 and "α* = 3" in out and "10.01" in out


@pytest.mark.parametrize("args,message", [
    (["dp", "calibrate", "--delta", "0"], "--delta"),
    (["dp", "calibrate", "--delta", "1.5"], "--delta"),
    (["dp", "calibrate", "--clip", "-1"], "--clip"),
    (["dp", "calibrate", "--temperature", "0"], "--temperature"),
    (["dp", "calibrate", "--subset-size", "0"], "--subset-size"),
    (["dp", "calibrate", "--target-eps", "1,x"], "--target-eps"),
    (["dp", "calibrate", "--target-eps", "-1"], "--target-eps"),
    (["dp", "calibrate", "--target-eps", "0.01"], "cannot be reached"),
    (["dp", "calibrate", "--search", "delta"], "--search"),
    (["dp", "calibrate", "--orders", "1-5"], "--orders"),
    (["dp", "calibrate", "--orders", "2-x"], "--orders"),
    (["dp", "epsilon", "--delta", "1"], "--delta"),
    (["dp", "epsilon", "--temperature", "-2"], "--temperature"),
    (["dp", "epsilon", "--sequences", "0"], "--sequences"),
])
def test_bad_input_exits_2_without_traceback(capsys, args, message):
    code, _, err = run(capsys, *args)
    assert code == 2
    assert "error:" in err and message in err
    assert "Traceback" not in err
