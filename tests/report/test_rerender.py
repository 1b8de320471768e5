"""A loaded run renders its report again without the model: the report views build the page, the
figures and the console table from the Result alone (records, summary, config, the run folder),
so deleting ``report.html`` and rendering the loaded run gives the page the run wrote."""

from __future__ import annotations

import json

import pytest
from helpers.tiny_data import icl_keywords, write_command_data

import ctxleak
from ctxleak.registry import Registry, UnknownName
from ctxleak.report.views import VIEWS, view_for
from ctxleak.results import RESULT_CLASSES


@pytest.fixture(scope="module")
def runs(tiny_dir, tmp_path_factory):
    root = write_command_data(tmp_path_factory.mktemp("rerender"), 4,
                              contexts=["the capital of france is paris .",
                                        "rome is the capital of italy ."])
    docs = root / "docs.jsonl"
    common = dict(seed=5, progress=False)
    return {
        "influence": ctxleak.influence(tiny_dir, str(docs), lambda_=[0.5, 1.0], max_new_tokens=4,
                                       ngram=2, stride=1, output=str(root / "influence"),
                                       **common),
        "explain": ctxleak.influence_explain(tiny_dir, "the capital of france is paris .",
                                             "what is the capital ?", max_new_tokens=4,
                                             ngram=2, output=str(root / "explain"), seed=5),
        "icl": ctxleak.iclinf(tiny_dir, str(root / "train.jsonl"),
                              test_data=str(root / "test.jsonl"), shots=[1, 2], queries=3,
                              calibration="both", output=str(root / "icl"), **icl_keywords(),
                              **common),
        "audit": ctxleak.audit(tiny_dir, "demo", subset_size=3, sequences=2, max_new_tokens=4,
                               target_eps=[1, 100], output=str(root / "audit"), **common),
        "susceptibility": ctxleak.susceptibility(tiny_dir, str(root / "rel.json"), contexts=4,
                                                 limit=3, output=str(root / "susc"), **common),
        "probe": ctxleak.probe(tiny_dir, str(root / "records.jsonl"), pii="phone", limit=3,
                               mode="black-box,in-context", output=str(root / "probe"),
                               **common),
    }


@pytest.mark.parametrize("name", ["influence", "explain", "icl", "audit", "susceptibility",
                                  "probe"])
def test_a_loaded_run_renders_its_page_again_without_the_model(name, runs, monkeypatch):
    from ctxleak.engine import models

    result = runs[name]
    page = (result.path / "report.html").read_text(encoding="utf-8")
    assert page == result.to_html()
    (result.path / "report.html").unlink()

    def no_model(*args, **kwargs):
        raise AssertionError("rendering a loaded run must not need the model")

    monkeypatch.setattr(models, "load_model", no_model)
    monkeypatch.setattr(models.LM, "token_strings", no_model)
    loaded = ctxleak.load_result(result.path)
    assert loaded.html is None
    assert loaded.render() == page
    assert loaded.to_html() == page  # no report.html: rendered from the loaded Result
    assert loaded.table() == result.table()
    # the figures too: each of the view's files is the run's
    for file, content in view_for(loaded.method).files(loaded).items():
        on_disk = (result.path / file).read_bytes()
        assert on_disk == (content if isinstance(content, bytes) else content.encode()), file


def test_influence_records_carry_the_token_strings_of_the_leak_map(runs):
    for record in runs["influence"].records:
        assert len(record["response_token_strings"]) == len(record["response_ids"])
        assert len(record["context_token_strings"]) == record["context_tokens"]


def test_explain_is_a_run_like_the_others(runs):
    result = runs["explain"]
    assert type(result).__name__ == "ExplainResult" and len(result.records) == 1
    curve = result.summary["curve"]
    assert len(curve["starts"]) == len(curve["per_window"]) and curve["n"] == 2
    body = json.loads((result.path / "results.json").read_text())
    assert body["summary"] == json.loads(json.dumps(result.summary))
    assert body["sample_ids"] == ["explain"]
    assert result.wall_time_s == body["wall_time_s"]


def test_show_prints_each_method_through_its_view(runs, capsys):
    for name, result in runs.items():
        result.show(plain=True)
        out = capsys.readouterr().out
        assert "\t" in out and "│" not in out, name


def test_registry_is_lazy_and_names_the_choices():
    registry = Registry("widget", {"json": "json:dumps"})
    assert "json" in registry and registry.get("json") is json.dumps
    with pytest.raises(UnknownName, match=r"no widget named 'jsn'; choose one of: json"):
        registry.get("jsn")
    with pytest.raises(KeyError):
        registry["jsn"]
    assert registry.get("jsn", None) is None
    with pytest.raises(ValueError, match="registered already"):
        registry.add("json", "json:loads")
    assert set(RESULT_CLASSES) >= {"influence", "icl", "audit", "susceptibility", "probe",
                                   "influence-explain"}
    assert set(VIEWS) >= set(RESULT_CLASSES)  # every Result class has its view


def test_registry_answers_what_the_module_holds_now(monkeypatch):
    """Late binding: a name replaced in its module is replaced in the registry, and only for as
    long as it is (a looked-up object is not kept past the replacement)."""
    import ctxleak
    import ctxleak.engine.models as models

    real = models.load_model
    assert ctxleak.load_model is real
    with monkeypatch.context() as patch:
        patch.setattr(models, "load_model", lambda *a, **k: "stand-in")
        assert ctxleak.load_model() == "stand-in"
    assert ctxleak.load_model is real


@pytest.mark.parametrize("name", ["influence", "explain", "icl", "audit", "susceptibility",
                                  "probe"])
def test_results_json_and_the_report_footer_cite_the_papers(name, runs):
    from ctxleak.citations import CTXLEAK_BIBTEX, papers_for

    result = runs[name]
    papers = papers_for(result.method_name())
    assert papers, result.method_name()
    body = json.loads((result.path / "results.json").read_text(encoding="utf-8"))
    cite = body["cite"]
    assert list(cite["papers"]) == [p.key for p in papers]
    assert cite["ctxleak"] == CTXLEAK_BIBTEX
    loaded = ctxleak.load_result(result.path)  # results.json's checks pass with "cite"
    assert loaded.summary == result.summary
    footer = loaded.render().split('<footer class="cite">', 1)[1]
    for p in papers:
        entry = cite["papers"][p.key]
        assert entry["title"] == p.title and entry["bibtex"].startswith("@")
        assert "{" + p.key + "," in entry["bibtex"]
        assert f"<cite>{p.title}</cite>" in footer
        assert "{" + p.key + "," in footer  # the BibTeX block (escaping keeps braces)


def _other_times(value, key=""):
    """``value`` with every wall-clock entry (keys the run-folder comparison treats as times)
    changed to another duration."""
    from helpers.rundiff import TIME_KEY

    if isinstance(value, dict):
        return {k: _other_times(v, str(k)) for k, v in value.items()}
    if isinstance(value, list):
        return [_other_times(v, key) for v in value]
    if TIME_KEY.search(key) and isinstance(value, (int, float)) and not isinstance(value, bool):
        return value * 7.3 + 0.37
    return value


@pytest.mark.parametrize("name", ["influence", "explain", "icl", "audit", "susceptibility",
                                  "probe"])
def test_a_report_differs_only_in_its_times_when_only_the_times_differ(name, runs):
    """Two runs of one seed write the same report but for the wall-clock times, and the
    run-folder comparison (how the tests check CLI against API, one process against many)
    recognises every time on the page: each shows its unit or sits under a time heading."""
    result = ctxleak.load_result(runs[name].path)
    page = result.render()
    result.summary = _other_times(result.summary)
    result.wall_time_s = (result.wall_time_s or 0.0) * 7.3 + 0.37
    slower = result.render()
    assert (slower != page) == (name != "explain")  # the times are on the page (explain: none)
    assert _normalised_text(page, result.path) == _normalised_text(slower, result.path)


def _normalised_text(html: str, root):
    from helpers.rundiff import normalised

    copy = root.parent / f"{root.name}-copy.html"
    copy.write_text(html, encoding="utf-8")
    try:
        return normalised(copy, root)
    finally:
        copy.unlink()
