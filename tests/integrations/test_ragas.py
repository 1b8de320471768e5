"""The ragas metric inside the real ragas (issue 83), integration tier: ``ragas.evaluate`` with
ctxleak's metrics over a two-row evaluation dataset, no LLM judge, the default model scoring,
agrees with ``ctxleak.influence`` (the library call, in this process) on the same rows to 1e-6
nats. ragas cannot live beside ./.venv's pins (scripts/setup_ragas.sh says why), so the metric
runs in a subprocess of ./.venv-ragas (``scripts/setup.sh --dev``, or
``$CTXLEAK_RAGAS_PYTHON``), with this checkout's ``src`` first on its path."""

from __future__ import annotations

import json
import math
import os
import subprocess
from pathlib import Path

import pytest

import ctxleak
from ctxleak.integrations.ragas_rows import FIGURES, figure, ragas_rows

REPO = Path(__file__).resolve().parents[2]
SAMPLES = [{"user_input": "What is Lena Wirth's salary?",
            "retrieved_contexts": ["Lena Wirth's salary is 84,500 euros a year. Her email is "
                                   "lena.wirth@northwind.example.",
                                   "The Lisbon office opens at 9 am."],
            "response": "Lena Wirth earns 84,500 euros a year; write to "
                        "lena.wirth@northwind.example."},
           {"user_input": "Where is the Berlin office?",
            "retrieved_contexts": ["The Berlin office is at Friedrichstrasse 12."],
            "response": "It is at Friedrichstrasse 12."}]
OPTIONS = {"max_new_tokens": 24}

SCRIPT = """
import json, sys
import torch
torch.set_num_threads(int(sys.argv[1]))
import ragas
from ragas import EvaluationDataset, evaluate
from ragas.metrics.base import SingleTurnMetric
import ctxleak
from ctxleak.integrations.ragas import context_leak_metrics
samples, options = json.load(sys.stdin)
dataset = EvaluationDataset.from_list(samples)
metrics = context_leak_metrics(dataset, ctxleak.influence, "default", **options)
result = evaluate(dataset, metrics=metrics, show_progress=False, raise_exceptions=True)
print(json.dumps({"ragas": ragas.__version__, "ctxleak": ctxleak.__file__,
                  "metric": all(isinstance(m, SingleTurnMetric) for m in metrics),
                  "names": [m.name for m in metrics], "scores": result.scores}))
"""


def _ragas_python() -> Path:
    python = Path(os.environ.get("CTXLEAK_RAGAS_PYTHON") or REPO / ".venv-ragas" / "bin" / "python")
    if not python.exists():
        pytest.skip(f"no ragas virtualenv at {python} (run `bash scripts/setup_ragas.sh`)")
    return python


@pytest.mark.integration
def test_ragas_evaluate_agrees_with_ctxleak_influence(default_lm, tmp_path):
    import torch

    python = _ragas_python()
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "RAGAS_DO_NOT_TRACK": "true",
           "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    done = subprocess.run([str(python), "-c", SCRIPT, str(torch.get_num_threads())],
                          input=json.dumps([SAMPLES, {**OPTIONS, "output": str(tmp_path / "m")}]),
                          capture_output=True, text=True, env=env, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    # the real ragas, this checkout's metric, a real ragas metric class
    assert out["ragas"].startswith("0.4.") and out["metric"], out
    assert Path(out["ctxleak"]).is_relative_to(REPO / "src")
    assert out["names"] == ["ctxleak_influence_above_control_nats", "ctxleak_influence_nats",
                            "ctxleak_copied_spans", "ctxleak_values_carried_out"]

    result = ctxleak.influence(default_lm, ragas_rows(SAMPLES), progress=False,
                               output=str(tmp_path / "library"), **OPTIONS)
    assert len(out["scores"]) == len(result.records) == 2
    for scores, record in zip(out["scores"], result.records):
        for name, metric in zip(FIGURES, out["names"]):
            want = figure(record, name)
            assert not math.isnan(want)  # each row is the other's control
            assert scores[metric] == pytest.approx(want, abs=1e-6), (record["id"], name)
    # the first answer carried the email address out of its first context
    assert out["scores"][0]["ctxleak_values_carried_out"] >= 1
    assert out["scores"][1]["ctxleak_values_carried_out"] == 0
