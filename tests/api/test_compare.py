"""``ctxleak.compare`` and ``ctxleak compare``: runs of one method side by side (a column per
run, a line per run in each headline figure), refusing runs of different methods."""

from __future__ import annotations

import json

import pytest
from conftest import run_cli
from helpers.tiny_data import TEMPLATES, TEST, TRAIN

import ctxleak
from ctxleak.comparison import compare_rows, run_labels
from ctxleak.errors import ConfigError
from ctxleak.report.plots import PNG_SIGNATURE

DOCS = ["the capital of france is paris .", "rome is the capital of italy and a city ."]


@pytest.fixture(scope="module")
def runs(tmp_path_factory, tiny_dir, gpt2_lm):
    root = tmp_path_factory.mktemp("compare")
    docs = root / "docs.jsonl"
    docs.write_text("".join(json.dumps({"id": f"d{i}", "context": c, "query": "capital ?"})
                            + "\n" for i, c in enumerate(DOCS)))
    kw = dict(lambda_=[0.5, 1.0], max_new_tokens=4, ngram=2, seed=2, progress=False)
    llama = ctxleak.influence(tiny_dir, str(docs), output=str(root / "llama"), **kw)
    gpt2 = ctxleak.influence(gpt2_lm, str(docs), output=str(root / "gpt2"), **kw)
    flags = dict(zip(TEMPLATES[::2], TEMPLATES[1::2]))
    for name, pairs in (("train", TRAIN), ("test", TEST)):
        (root / f"{name}.jsonl").write_text(
            "".join(json.dumps({"text": t, "label": lab}) + "\n" for t, lab in pairs))
    icl = ctxleak.iclinf(tiny_dir, str(root / "train.jsonl"), test_data=str(root / "test.jsonl"),
                         shots=[1], queries=2, format=flags["--format"],
                         instruction=flags["--instruction"],
                         exemplar_template=flags["--exemplar-template"],
                         query_template=flags["--query-template"], output=str(root / "icl"),
                         progress=False)
    return {"llama": llama, "gpt2": gpt2, "icl": icl, "root": root}


def test_compare_lays_runs_side_by_side(runs, tmp_path):
    comp = ctxleak.compare([runs["llama"], str(runs["gpt2"].path)], output=tmp_path / "cmp")
    assert comp.method == "influence" and len(comp.labels) == 2
    llama_label, gpt2_label = comp.labels
    assert gpt2_label == "tiny-gpt2"
    # every compared cell is the run's own summary value
    for label, result in zip(comp.labels, (runs["llama"], ctxleak.load_result(runs["gpt2"].path))):
        for s in result.summary["settings"]:
            row = next(r for r in comp.rows if r["row"] == f"λ={s['lambda']:g}, T=0.8"
                       and r["quantity"] == "influence")
            assert row[label] == s["influence"]["mean"]
    assert {r["quantity"] for r in comp.rows} >= {"influence", "95% CI", "max n-gram"}
    assert not {"ctx tokens", "n"} & {r["quantity"] for r in comp.rows}  # run facts, not results
    # figures with one line per run; both models' sizes are known, so "against model size"
    assert {"compare_per_position.png", "compare_per_window.png", "compare_lambda.png",
            "compare_model_size.png"} <= set(comp.images)
    assert all(png.startswith(PNG_SIGNATURE) for png in comp.images.values())
    saved = json.loads((tmp_path / "cmp" / "compare.json").read_text())
    assert saved["method"] == "influence" and saved["table"] == comp.rows
    assert [r["provenance"]["model"] for r in saved["runs"]] == [
        r.provenance["model"] for r in comp.results]  # what was compared is recorded
    page = (tmp_path / "cmp" / "report.html").read_text()
    assert page.count("<img ") == len(comp.images) and "tiny-gpt2" in page


def test_compare_refuses_different_methods_and_single_runs(runs):
    with pytest.raises(ConfigError, match="different methods"):
        ctxleak.compare([runs["llama"], runs["icl"]])
    with pytest.raises(ConfigError, match="at least two runs, or one run with several "
                                          "settings"):
        ctxleak.compare([runs["icl"]])  # one run, one number of shots: nothing to pair
    with pytest.raises(ConfigError, match="at least two"):
        ctxleak.compare([])
    # one run at two λ is paired with itself, setting against setting
    one = ctxleak.compare(str(runs["llama"].path))
    assert [c.label for c in one.contrasts] == ["λ = 0.5 vs λ = 1"]


def test_cli_compare(runs, tmp_path, capsys):
    a, b, c = (str(runs[k].path) for k in ("llama", "gpt2", "icl"))
    code, out, err = run_cli(["compare", a, b, "--output", str(tmp_path / "o")], capsys)
    assert code == 0, err
    assert (tmp_path / "o" / "report.html").is_file() and "tiny-gpt2" in out
    code, _, err = run_cli(["compare", a, c, "--output", str(tmp_path / "x")], capsys)
    assert code == 2 and "different methods" in err and "icl" in err
    assert not (tmp_path / "x").exists()
    code, _, err = run_cli(["compare", a, str(tmp_path / "nothing")], capsys)
    assert code == 2 and "results.json" in err


def test_compare_rows_match_rows_by_identity():
    t1 = [{"λ": 1.0, "T": 0.8, "n": 3, "influence": 0.5},
          {"λ": 1.0, "T": 0.8, "n": 3, "influence": 0.7}]  # a repeat (e.g. two context sizes)
    t2 = [{"λ": 1.0, "T": 0.8, "n": 3, "influence": 0.2},
          {"λ": 0.5, "T": 0.8, "n": 3, "influence": 0.1}]
    rows = compare_rows("influence", [t1, t2], ["a", "b"])
    assert rows == [{"row": "λ=1, T=0.8", "quantity": "influence", "a": 0.5, "b": 0.2},
                    {"row": "λ=1, T=0.8 #2", "quantity": "influence", "a": 0.7, "b": None},
                    {"row": "λ=0.5, T=0.8", "quantity": "influence", "a": None, "b": 0.1}]


def test_run_labels_are_unique(runs):
    llama = runs["llama"]
    assert len(set(run_labels([llama, llama]))) == 2


@pytest.mark.integration
def test_compare_default_model_with_a_tiny_one(default_lm, llama_lm, tmp_path):
    kw = dict(limit=1, max_new_tokens=6, seed=1, progress=False)
    big = ctxleak.influence(default_lm, "demo", output=str(tmp_path / "default"), **kw)
    small = ctxleak.influence(llama_lm, "demo", output=str(tmp_path / "tiny"), **kw)
    comp = ctxleak.compare([big, small], output=tmp_path / "cmp")
    sizes = [r.provenance["model"]["parameters"] for r in (big, small)]
    assert sizes[0] > 100_000_000 > sizes[1]
    assert "compare_model_size.png" in comp.images
    row = next(r for r in comp.rows if r["quantity"] == "influence")
    assert row[comp.labels[0]] == big.summary["settings"][0]["influence"]["mean"]


@pytest.mark.parametrize("method", ["icl", "audit", "susceptibility", "probe"])
def test_compare_every_method(method, runs, tiny_dir, gpt2_lm, tmp_path):
    from helpers.tiny_data import TINY_RELATIONS, word_records

    from ctxleak.methods.pii.records import save_records

    root = runs["root"]
    if method == "icl":
        flags = dict(zip(TEMPLATES[::2], TEMPLATES[1::2]))
        kw = dict(test_data=str(root / "test.jsonl"), shots=[1, 2], queries=2,
                  format=flags["--format"], instruction=flags["--instruction"],
                  exemplar_template=flags["--exemplar-template"],
                  query_template=flags["--query-template"])
        call, data, figures = ctxleak.iclinf, str(root / "train.jsonl"), {
            "compare_shots.png", "compare_loss_by_position.png"}
    elif method == "audit":
        kw = dict(subset_size=3, sequences=1, max_new_tokens=3, target_eps=[1, 100])
        call, data, figures = ctxleak.audit, "demo", {"compare_fig6.png"}
    elif method == "susceptibility":
        (tmp_path / "rel.json").write_text(json.dumps(TINY_RELATIONS))
        kw = dict(contexts=3, limit=3)
        call, data, figures = ctxleak.susceptibility, str(tmp_path / "rel.json"), {
            "compare_chi_mc_by_relation.png", "compare_chi_f_by_query_type.png"}
    else:
        save_records(word_records(3), tmp_path / "records.jsonl")
        kw = dict(pii="phone", limit=3)
        call, data, figures = ctxleak.probe, str(tmp_path / "records.jsonl"), {
            "compare_exact_match.png"}
    a = call(tiny_dir, data, output=str(tmp_path / "a"), progress=False, seed=1, **kw)
    b = call(gpt2_lm, data, output=str(tmp_path / "b"), progress=False, seed=1, **kw)
    comp = ctxleak.compare([a, b])
    assert comp.method == method and figures <= set(comp.images)
    labels = comp.labels
    assert comp.rows and all(set(labels) <= set(r) for r in comp.rows)
    assert any(r[labels[0]] is not None and r[labels[1]] is not None for r in comp.rows)
