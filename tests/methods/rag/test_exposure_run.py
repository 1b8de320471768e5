"""The document ledger of a real (tiny-model) influence run: it adds up each passage's own
leave-one-out influence from the records, reaches results.json, pandas, the report and the
console, and the exposure budget makes the CLI exit with status 3."""

from __future__ import annotations

import json

import pytest
from conftest import run_cli

import ctxleak
from ctxleak.errors import ConfigError

SHARED = "the capital of france is paris ."
DATA = [  # retrieved documents with ids, and a row of plain passages
    {"id": "a", "query": "what is the capital ?",
     "documents": [{"id": "fr", "text": SHARED}, {"id": "it", "text": "rome is the capital of italy ."}]},
    {"id": "b", "query": "where is berlin ?",
     "documents": [{"id": "fr", "text": SHARED}, {"id": "de", "text": "berlin is in germany ."}]},
    {"id": "c", "query": "who said it ?", "passages": ["the doctor said the news report ."]},
]


@pytest.fixture(scope="module")
def run(llama_lm, tmp_path_factory):
    out = tmp_path_factory.mktemp("ledger") / "run"
    return ctxleak.influence(llama_lm, DATA, max_new_tokens=4, min_new_tokens=2,
                             temperature=1.0, progress=False, exposure_budget=0.0,
                             output=str(out)), out


def test_the_ledger_adds_each_documents_own_influence(run) -> None:
    res, _ = run
    setting = res.summary["settings"][0]
    by_doc = {d["text"]: d for d in setting["documents"]}
    shared = by_doc["the capital of france is paris ."]
    ours = [r["passage_influence"][0] for r in res.records if r["passages"][0] == SHARED]
    assert shared["retrieved"] == 2 and shared["scored"] == 2
    assert shared["document"] == "fr"  # named by its id; the plain passage by its words
    assert by_doc["the doctor said the news report ."]["document"] == "the doctor said the news report …"
    assert shared["influence_sum"] == pytest.approx(sum(ours))
    assert shared["influence_max"] == pytest.approx(max(ours))
    tokens = sum(len(r["response_ids"]) for r in res.records if r["passages"][0] == SHARED)
    assert shared["influence_per_token"] == pytest.approx(sum(ours) / tokens)
    assert {q["query"] for q in shared["top_queries"]} == {"what is the capital ?",
                                                           "where is berlin ?"}
    sums = [d["influence_sum"] for d in setting["documents"]]
    assert sums == sorted(sums, reverse=True) and len(sums) == 4
    # a budget of 0 nats: every document that moved an answer at all is over it
    assert setting["over_budget"] == [d["document"] for d in setting["documents"]
                                      if d["influence_sum"] > 0]


def test_the_ledger_reaches_pandas_the_saved_run_and_the_report(run) -> None:
    res, out = run
    frame = res.documents()  # a DocumentTable: its columns as pandas gives them
    assert list(frame["document"])[:1] == [res.summary["settings"][0]["documents"][0]["document"]]
    assert frame["over_budget"].any()
    saved = json.loads((out / "results.json").read_text())
    assert saved["summary"]["settings"][0]["documents"] == res.summary["settings"][0]["documents"]
    loaded = ctxleak.load_result(out)
    assert loaded.over_budget() == res.over_budget() != []
    verdict = res.summary["verdict"]["text"]
    top = res.summary["settings"][0]["documents"][0]
    assert f"Documents by leak: {top['document']} (leaked in {top['leaked']} answer(s)" in verdict
    assert f"{top['influence_sum']:.3g} nats over {top['scored']} answer(s))" in verdict
    assert "over the exposure budget of 0 nats" in verdict
    page = res.to_html()
    assert "Documents: the leak ledger" in page and "over the exposure budget of 0 nats" in page


def test_top_passages_name_retrieved_documents_by_their_ids(run) -> None:
    """A retrieved document with an id is named by it among the top passages (the summary, the
    console); a plain passage keeps its number in its example's context."""
    res, _ = run
    top = res.summary["settings"][0]["top_passages"]
    assert len(top) == 5
    for row in top:
        record = next(r for r in res.records if r["id"] == row["id"])
        assert row["text"] == record["passages"][row["passage"] - 1]
        if row["id"] == "c":
            assert "document" not in row
        else:
            assert row["document"] == record["passage_ids"][row["passage"] - 1]
    from ctxleak.report.influence import passage_label
    assert {passage_label(r) for r in top} == {"document fr", "document it", "document de",
                                               "passage 1"}


def test_a_resume_may_change_the_budget(llama_lm, tmp_path) -> None:
    """The exposure budget judges the ledger, it changes no sample: a run resumes under another
    budget (and without one), its samples kept byte for byte, and the summary judges anew."""
    out = tmp_path / "run"
    kw = dict(max_new_tokens=3, min_new_tokens=1, temperature=1.0, progress=False,
              output=str(out))
    first = ctxleak.influence(llama_lm, DATA[:1], exposure_budget=0.0, **kw)
    samples = (out / "samples.jsonl").read_bytes()
    assert first.over_budget() != []
    loose = ctxleak.influence(llama_lm, DATA[:1], exposure_budget=1e9, resume=True, **kw)
    assert loose.over_budget() == [] and loose.summary["settings"][0]["exposure_budget"] == 1e9
    none = ctxleak.influence(llama_lm, DATA[:1], resume=True, **kw)
    assert "exposure_budget" not in none.summary["settings"][0]
    assert (out / "samples.jsonl").read_bytes() == samples


def test_a_run_without_passages_has_no_ledger(llama_lm, tmp_path) -> None:
    res = ctxleak.influence(llama_lm, [{"context": SHARED, "query": "capital ?"}],
                            max_new_tokens=3, temperature=1.0, progress=False,
                            output=str(tmp_path / "run"))  # not ./runs of the checkout
    assert "documents" not in res.summary["settings"][0]
    assert len(res.documents()) == 0 and res.over_budget() == []


def test_a_negative_budget_is_refused() -> None:
    with pytest.raises(ConfigError, match="exposure_budget"):
        ctxleak.influence("tiny", DATA, exposure_budget=-1.0)


def test_the_cli_exits_3_over_the_budget(tiny_dir, tmp_path, capsys) -> None:
    data = tmp_path / "rag.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in DATA))
    code, out, err = run_cli(["influence", "--model", tiny_dir, "--data", str(data),
                              "--max-new-tokens", "3", "--temperature", "1",
                              "--exposure-budget", "0", "--output", str(tmp_path / "o")], capsys)
    assert code == 3, err
    assert "documents by leak:" in out and "over the exposure budget of 0 nats" in out
    # under the budget the status is 0, as for any run: the budget sentence says none is over
    from ctxleak.report.documents import budget_line

    assert budget_line({"exposure_budget": 1e9, "over_budget": []}).startswith(
        "No document is over the exposure budget")
