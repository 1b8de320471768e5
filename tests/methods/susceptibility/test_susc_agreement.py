"""A run that computes both methods says, in its summary, console and report, when Fisher
susceptibility does not track Monte Carlo susceptibility (Spearman below the stated threshold
over enough queries)."""

from __future__ import annotations

import pytest

from ctxleak.methods.susceptibility.pipeline import (
    AGREEMENT_MIN_QUERIES,
    AGREEMENT_SPEARMAN,
    SusceptibilityOptions,
    summarize_queries,
)
from ctxleak.report.susceptibility import print_susceptibility, susceptibility_report


def _records(chi_f: list[float]) -> list[dict]:
    types = ("closed", "open_qa", "open_completion")
    return [{"relation": "capital", "entity_kind": "real", "query_type": types[i % 3],
             "open": i % 3 != 0, "query": f"q{i}", "chi_mc": 0.1 * (i + 1), "chi_f": f,
             "seconds_mc": 1.0, "seconds_fisher": 0.1, "n_draws": 4, "n_entity_draws": 1,
             "n_distinct_contexts": 4} for i, f in enumerate(chi_f)]


def test_disagreement_is_flagged_in_summary_console_and_report(capsys):
    n = AGREEMENT_MIN_QUERIES
    options = SusceptibilityOptions(n_contexts=4)
    against = summarize_queries(_records([float(n - i) for i in range(n)]), options)
    agreement = against["agreement"]
    assert agreement["agrees"] is False and agreement["spearman"] == pytest.approx(-1.0)
    assert agreement["threshold"] == AGREEMENT_SPEARMAN and agreement["n"] == n
    assert f"ρ = -1.00 over {n} queries" in agreement["warning"]
    print_susceptibility(against, "marginal", "runs/x")
    lines = [ln for ln in capsys.readouterr().out.splitlines() if "warning" in ln]
    assert len(lines) == 1 and "does not track Monte Carlo" in lines[0]
    html = susceptibility_report(_records([float(n - i) for i in range(n)]), against, options,
                                 {}, model="m", data="d").render()
    assert "does not track Monte Carlo" in html

    along = summarize_queries(_records([float(i) for i in range(n)]), options)
    assert along["agreement"]["agrees"] is True and along["agreement"]["warning"] is None
    print_susceptibility(along, "marginal", "runs/x")
    assert "warning" not in capsys.readouterr().out
    few = summarize_queries(_records([float(5 - i) for i in range(5)]), options)
    assert few["agreement"]["agrees"] is None and few["agreement"]["warning"] is None
    assert "agreement" not in summarize_queries(
        _records([1.0] * n), SusceptibilityOptions(method="mc", n_contexts=4))
