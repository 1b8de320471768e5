"""A canary audit's run folder is range- and cross-checked as it is loaded, manifest or not: an
ε lower bound edited above its guarantee cannot read "holds", a law that is not the one its
numbers give, counts and rates out of range, a score above its canary's length."""

from __future__ import annotations

import json

import pytest
from helpers.run_folders import without_manifest

from ctxleak.errors import EditedRunError
from ctxleak.methods.attacks.lower_bound import eps_lower_bound, law
from ctxleak.results import CanaryResult, load_result

TRIAL = {"id": "trial-0", "trial": 0, "document_id": "d0", "canary": "885440",
         "other": "403958", "included": True, "response": "885440", "response_ids": [5, 6],
         "stopped_on_eos": False, "released_tokens": 2, "composed_eps": 16.0, "score": 6}


def _audit(tmp_path):
    summary = {**eps_lower_bound(10, 10, 0, 10, 0.95), "eps_guarantee": 16.0, "n_trials": 40,
               "threshold": 6.0, "lambda": 1.0, "temperature": 0.8, "bounded_eps": 8.0}
    summary["law"] = law(summary["eps_lower"], 16.0)
    assert summary["law"] == "holds"
    path = CanaryResult(records=[dict(TRIAL)], summary=summary,
                        config={"command": "canary"}).save(tmp_path / "audit")
    assert load_result(path).summary["law"] == "holds"  # as written, it loads
    return without_manifest(path)


def _edited(path, **changes):
    body = json.loads((path / "results.json").read_text())
    body["summary"].update(changes)
    (path / "results.json").write_text(json.dumps(body))
    return path


@pytest.mark.parametrize("changes, field, says", [
    ({"eps_lower": 20.0}, "summary.eps_lower", "not the lower bound its counts give"),
    ({"law": "violated"}, "summary.law", "give 'holds'"),
    ({"tp": 11}, "summary.tp", "11 true positives of 10"),
    ({"tpr": 1.5}, "summary.tpr", "a probability"),
    ({"confidence": 1.0}, "summary.confidence", "a confidence"),
    ({"eps_guarantee": -1.0}, "summary.eps_guarantee", "an ε"),
])
def test_an_edited_canary_summary_is_refused(tmp_path, changes, field, says):
    path = _edited(_audit(tmp_path), **changes)
    with pytest.raises(EditedRunError, match=says) as err:
        load_result(path)
    assert err.value.field == field


def test_a_score_above_its_canary_is_refused(tmp_path):
    path = _audit(tmp_path)
    (path / "samples.jsonl").write_text(json.dumps({**TRIAL, "score": 7}) + "\n")
    with pytest.raises(EditedRunError, match="above the canary's 6 characters"):
        load_result(path)
