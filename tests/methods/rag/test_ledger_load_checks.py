"""The ledger per document in a run's results.json is range- and cross-checked as the run is
loaded, manifest or not: a count below 0, a document scored more often than retrieved, a largest
leak above the leaks' sum are refused naming the field, not read as a ledger."""

from __future__ import annotations

import json

import pytest
from helpers.run_folders import without_manifest

import ctxleak
from ctxleak.errors import EditedRunError

DOCS = ["the capital of france is paris .", "rome is the capital of italy .",
        "berlin is in germany ."]
LOG = [{"id": f"turn-{t}", "query": "what is the capital ?",
        "documents": [{"id": f"d{(t + k) % 3}", "text": DOCS[(t + k) % 3]} for k in range(2)],
        "response": f"{DOCS[t % 3]} yes"} for t in range(3)]


@pytest.fixture(scope="module")
def run(llama_lm, tmp_path_factory):
    out = tmp_path_factory.mktemp("ledger") / "run"
    ctxleak.influence(llama_lm, LOG, temperature=1.0, progress=False, output=str(out))
    assert ctxleak.load_result(out).summary["settings"][0]["documents"]  # as written, it loads
    return out


@pytest.mark.parametrize("field, value, says", [
    ("retrieved", -1, "a count"),
    ("scored", 99, "is above its retrieved"),
    ("leak_sum", -0.5, "nats"),
    ("influence_max", 1e9, "is above its influence_sum"),
])
def test_an_edited_ledger_is_refused(run, tmp_path, field, value, says):
    path = tmp_path / "copy"
    path.mkdir()
    for f in run.iterdir():
        if f.is_file():
            (path / f.name).write_bytes(f.read_bytes())
    without_manifest(path)
    body = json.loads((path / "results.json").read_text())
    body["summary"]["settings"][0]["documents"][0][field] = value
    (path / "results.json").write_text(json.dumps(body))
    with pytest.raises(EditedRunError, match=says) as err:
        ctxleak.load_result(path)
    assert err.value.field.startswith("summary.settings[0].documents[0].")
    assert err.value.field.endswith(field)
