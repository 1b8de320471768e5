"""Probe's in-context leak map (paper 004 in-context mode with paper 000, Def. 3.1-3.2): each
document token's score is the mean, over the windows covering it, of Σ_t |log p(y_t|prompt with
the documents) − log p(y_t|prompt without that window)|, checked against direct scoring."""

from __future__ import annotations

import numpy as np
from helpers.tiny_data import word_records

from ctxleak.engine.prompts import build_prompt
from ctxleak.engine.scoring import continuation_logprobs
from ctxleak.methods.influence.ngrams import windows
from ctxleak.methods.pii.items import continuation_ids
from ctxleak.methods.pii.leakmap import in_context_map
from ctxleak.methods.pii.templates import scoring_pair

TEMPLATE = "{document}\n{prompt}"


def test_in_context_map_matches_direct_scoring(tiny_lm):
    record = word_records(1)[0]
    doc_text = "\n".join(record.documents)
    row = {"prompt": f"the phone of {record.name} is ", "target": record.phone}
    found = in_context_map(tiny_lm, row, doc_text, TEMPLATE, ngram=4)
    text, _ = scoring_pair(row["prompt"], row["target"])
    doc = tiny_lm.encode(doc_text)
    target = continuation_ids(tiny_lm, text, row["target"])

    def score(d):
        ids = build_prompt(tiny_lm, TEMPLATE, {"document": d, "prompt": text}, chat=False).ids
        return continuation_logprobs(tiny_lm, [ids], [target], reuse_prefix=False)[0]

    full = score(doc)
    spans = windows(len(doc), 4, 2)
    infl = [float(np.abs(full - score(doc[:s] + doc[e:])).sum()) for s, e in spans]
    expected = [np.mean([v for (s, e), v in zip(spans, infl) if s <= j < e])
                for j in range(len(doc))]
    assert found["windows"] == len(spans) and found["n"] == 4
    assert found["context_tokens"] == tiny_lm.token_strings(doc)
    assert found["target_tokens"] == tiny_lm.token_strings(target)
    # the map reuses the shared prefix's KV cache and scores windows in batches (float32
    # forward passes; float64 from the log-softmax on): ~1e-7 apart from full recomputation
    np.testing.assert_allclose(found["scores"], expected, rtol=1e-5, atol=1e-6)


def test_in_context_map_without_documents_is_none(tiny_lm):
    assert in_context_map(tiny_lm, {"prompt": "the phone is ", "target": "one two"}, "",
                          TEMPLATE) is None


def test_leak_map_is_measured_into_the_records_and_rendered_from_them(llama_lm, tmp_path,
                                                                      monkeypatch):
    """The in-context map is a measurement: ``measure`` stores it in each in-context record
    (equal to :func:`in_context_map` on that row), a loaded result carries it, and the report
    renders it from the records alone (no model, no scoring at report time)."""
    from ctxleak.api import run_method
    from ctxleak.methods.pii import leakmap
    from ctxleak.methods.pii import method as pii_method
    from ctxleak.methods.pii.method import ProbeMethod, ProbeParams
    from ctxleak.methods.pii.records import save_records
    from ctxleak.results import load_result

    records = word_records(3)
    save_records(records, tmp_path / "records.jsonl")
    method = ProbeMethod(params=ProbeParams(mode="in-context", pii="phone", generate=False))
    result = run_method(method, llama_lm, str(tmp_path / "records.jsonl"),
                        output=str(tmp_path / "run"), progress=False)
    docs = {r.subject_id: "\n".join(r.documents) for r in records}
    rows = [r for r in result.records if r["mode"] == "in-context"]
    assert rows and all(r["leak_map"] for r in rows)
    for r in rows:
        assert r["leak_map"] == in_context_map(llama_lm, r, docs[r["subject"]], TEMPLATE)
    loaded = load_result(tmp_path / "run")
    assert [r["leak_map"] for r in loaded.records] == [r["leak_map"] for r in rows]
    assert 'id="probe-0"' in loaded.to_html()

    def no_scoring(*args, **kwargs):
        raise AssertionError("the report must not measure")

    monkeypatch.setattr(leakmap, "in_context_map", no_scoring)
    monkeypatch.setattr(pii_method, "in_context_map", no_scoring)  # where the method calls it
    html = loaded.render()  # the report view, from the loaded Result alone
    top = max(rows, key=lambda r: r["influence"])
    assert 'id="probe-0"' in html and f"{top['influence']:.4g}" in html


def test_no_leak_maps_skips_the_window_scoring(llama_lm, tmp_path, monkeypatch):
    """``leak_maps=False`` (``--no-leak-maps``) measures no map and is recorded in the config."""
    from ctxleak.api import run_method
    from ctxleak.methods.pii import leakmap
    from ctxleak.methods.pii import method as pii_method
    from ctxleak.methods.pii.method import ProbeMethod, ProbeParams
    from ctxleak.methods.pii.records import save_records

    def no_scoring(*args, **kwargs):
        raise AssertionError("leak_maps=False must not score windows")

    monkeypatch.setattr(leakmap, "in_context_map", no_scoring)
    monkeypatch.setattr(pii_method, "in_context_map", no_scoring)  # where the method calls it
    save_records(word_records(2), tmp_path / "records.jsonl")
    result = run_method(ProbeMethod(params=ProbeParams(mode="in-context", pii="phone",
                                                       generate=False, leak_maps=False)),
                        llama_lm,
                        str(tmp_path / "records.jsonl"), output=str(tmp_path / "run"),
                        progress=False)
    assert result.records and all("leak_map" not in r for r in result.records)
    assert result.config["leak_maps"] is False and 'id="probe-0"' not in result.to_html()
