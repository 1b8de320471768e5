"""The parts of the ragas metric that need no ragas (issue 83): a ragas evaluation dataset as
ctxleak's rows, the figures read from an influence record, and one measurement of the whole
dataset shared by every row (its control made of the other rows' contexts), equal to
``ctxleak.influence`` on the same rows. The metric inside the real ragas is
tests/integrations/test_ragas.py (integration tier, its own virtualenv)."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest

import ctxleak
from ctxleak.errors import InputError
from ctxleak.integrations.ragas_rows import FIGURES, Measured, figure, ragas_rows

SAMPLES = [{"user_input": "what is the capital ?", "response": "paris is",
            "retrieved_contexts": ["the capital of france is paris .", "berlin is in germany ."]},
           {"user_input": "where is rome ?", "response": "rome is in italy .",
            "retrieved_contexts": ["rome is in italy ."]}]


def test_samples_become_query_log_rows():
    objects = SimpleNamespace(samples=[SimpleNamespace(**s) for s in SAMPLES])
    rows = ragas_rows(objects)
    assert rows == ragas_rows(SAMPLES)
    assert rows[0] == {"id": "row-1", "query": "what is the capital ?", "response": "paris is",
                       "documents": ["the capital of france is paris .", "berlin is in germany ."]}
    assert [r["id"] for r in rows] == ["row-1", "row-2"]


@pytest.mark.parametrize(("change", "field"), [
    ({"user_input": "  "}, "user_input"), ({"retrieved_contexts": []}, "retrieved_contexts"),
    ({"retrieved_contexts": "one text"}, "retrieved_contexts"),
    ({"retrieved_contexts": ["ok", 3]}, "retrieved_contexts"), ({"response": None}, "response")])
def test_a_bad_sample_is_named_by_row_and_field(change, field):
    with pytest.raises(InputError, match=rf"ragas dataset:2.*{field}"):
        ragas_rows([SAMPLES[0], {**SAMPLES[1], **change}])
    with pytest.raises(InputError, match="no samples"):
        ragas_rows([])


def test_the_figures_and_their_units():
    record = {"influence": 2.5, "influence_above_control": -0.25,
              "copied": [{"kind": "verbatim"}, {"kind": "verbatim"}, {"kind": "pii"},
                         {"kind": "secret"}, {"kind": "pii"}]}
    assert {f: figure(record, f) for f in FIGURES} == {
        "influence_above_control": -0.25, "influence": 2.5, "copied_spans": 2.0,
        "values_carried_out": 3.0}
    assert FIGURES["influence"] == FIGURES["influence_above_control"] == "nats"
    assert math.isnan(figure({"influence": 1.0, "influence_above_control": None},
                             "influence_above_control"))
    assert figure({"influence": 1.0}, "copied_spans") == 0.0
    with pytest.raises(InputError, match="unknown figure 'leak'"):
        figure(record, "leak")


def test_the_dataset_is_measured_once_for_every_row():
    calls = []

    def influence(model, rows, progress=True, **options):
        calls.append((model, [r["id"] for r in rows], progress, options))
        return SimpleNamespace(records=[{"id": r["id"], "influence": float(n)}
                                        for n, r in enumerate(rows, 1)])

    measured = Measured(SAMPLES, influence, "tiny", max_new_tokens=3)
    assert calls == []  # nothing runs before the first score
    assert measured.record(SAMPLES[1])["influence"] == 2.0
    assert measured.record(SAMPLES[0])["influence"] == 1.0
    assert calls == [("tiny", ["row-1", "row-2"], False, {"max_new_tokens": 3})]
    with pytest.raises(InputError, match="'where is rome \\?' is not a row"):
        measured.record({**SAMPLES[1], "response": "rome is in spain ."})


def test_each_row_scores_what_ctxleak_influence_gives_it(llama_lm, tmp_path):
    measured = Measured(SAMPLES, ctxleak.influence, llama_lm, max_new_tokens=3,
                        output=str(tmp_path / "metric"))
    result = ctxleak.influence(llama_lm, ragas_rows(SAMPLES), progress=False, max_new_tokens=3,
                               output=str(tmp_path / "library"))
    for sample, record in zip(SAMPLES, result.records):
        ours = measured.record(sample)
        assert ours["id"] == record["id"]
        for name in FIGURES:
            assert figure(ours, name) == pytest.approx(figure(record, name), abs=1e-6)
    # the two rows share no context: each is the other's control
    assert all(not math.isnan(figure(measured.record(s), "influence_above_control"))
               for s in SAMPLES)
