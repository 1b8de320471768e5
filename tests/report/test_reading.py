"""Reading a run: the verdict first (console, report, Jupyter, results.json), units, the probe's
hit log and its p-values only where n can carry them, from tiny runs of every non-influence
method, and from run folders written before verdicts."""

from __future__ import annotations

import json
import math
import re

import pytest
from helpers.tiny_data import icl_keywords, write_command_data

import ctxleak
from ctxleak.errors import InputError
from ctxleak.methods.verdict import check_verdict
from ctxleak.report import Report


@pytest.fixture(scope="module")
def runs(tiny_dir, tmp_path_factory):
    root = write_command_data(tmp_path_factory.mktemp("reading"), 4)
    common = dict(seed=5, progress=False)
    return {
        "icl": ctxleak.iclinf(tiny_dir, str(root / "train.jsonl"),
                              test_data=str(root / "test.jsonl"), shots=[2], queries=3,
                              output=str(root / "icl"), **icl_keywords(), **common),
        "audit": ctxleak.audit(tiny_dir, "demo", subset_size=3, sequences=2, max_new_tokens=4,
                               target_eps=[1, 100], output=str(root / "audit"), **common),
        "susceptibility": ctxleak.susceptibility(tiny_dir, str(root / "rel.json"), contexts=4,
                                                 limit=3, output=str(root / "susc"), **common),
        "probe": ctxleak.probe(tiny_dir, str(root / "records.jsonl"), pii="phone", limit=3,
                               mode="black-box", output=str(root / "probe"), **common),
    }


NAMES = ["icl", "audit", "susceptibility", "probe"]


@pytest.mark.parametrize("name", NAMES)
def test_verdict_is_stored_and_shown_first(name, runs, capsys):
    result = runs[name]
    verdict = result.summary["verdict"]
    assert check_verdict(verdict) is None and verdict["text"].endswith(".")
    stored = json.loads((result.path / "results.json").read_text())["summary"]
    assert stored["verdict"] == verdict
    assert all(isinstance(v, str) for v in stored["units"].values())
    # console: the verdict and its rule are the first lines, before any table
    capsys.readouterr()
    result.show(plain=True)
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"Verdict: {verdict['text']}"
    assert lines[1] == f"Rule: {verdict['rule']}"
    # the report: the verdict right under the title, before every section
    page = (result.path / "report.html").read_text()
    at = page.index('<section class="verdict"')
    assert page.index("<h1>") < at < min(page.index(t) for t in ("<h2>", "<table")
                                         if t in page)
    assert Report("x").render().count('class="verdict"') == 0  # only when given
    # Jupyter
    assert 'class="verdict"' in result._repr_html_()


@pytest.mark.parametrize("name", NAMES)
def test_old_run_folders_without_a_verdict_load_and_get_one_computed(name, runs, tmp_path):
    src = runs[name].path
    body = json.loads((src / "results.json").read_text())
    verdict = body["summary"].pop("verdict")
    body["summary"].pop("units")
    folder = tmp_path / name
    folder.mkdir()
    for f in src.iterdir():  # an old folder: no manifest or line digests either
        if f.is_file() and f.name not in ("results.json", "report.html") \
                and not f.name.startswith("."):
            (folder / f.name).write_bytes(f.read_bytes())
    (folder / "results.json").write_text(json.dumps(body))
    loaded = ctxleak.load_result(folder)
    assert "verdict" not in loaded.summary
    assert loaded.view().verdict(loaded) == verdict  # the same rule from the same numbers
    assert verdict["text"] in loaded.to_html().replace("&#x27;", "'").replace("&quot;", '"')
    # a stored verdict that is not text and rule is refused, naming the field
    body["summary"]["verdict"] = {"text": 1}
    (folder / "results.json").write_text(json.dumps(body))
    with pytest.raises(InputError, match="summary.verdict"):
        ctxleak.load_result(folder)


def test_probe_hit_log_and_p_values_at_small_n(runs):
    result = runs["probe"]
    path = result.path / "hits.jsonl"
    hits = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(hits) == result.summary["hits"]
    exact = [r for r in result.records if r.get("exact_match")]
    assert len(hits) == len(exact)
    for h in hits:
        assert h["span"] == h["target"] and h["target"] in h["around"]
    assert oct(path.stat().st_mode & 0o777) == "0o600"  # it holds PII
    # 3 subjects: the one-sided signed-rank test can never reach α = 0.05, so no p is shown
    sig = result.summary["significance"]
    assert sig["alpha"] == 0.05
    assert all(g["n"] <= 3 and not g["can_reject"] and g["min_n"] == 5 for g in sig["groups"])
    rows = result.table()
    assert all(r["p (target > null)"] is None and "< 5" in r["p note"] for r in rows)
    assert "No conclusion at α = 0.05" in result.summary["verdict"]["text"]


def test_probe_hit_count_and_verdict_agree_on_whether_anything_was_generated(runs, tiny_dir,
                                                                            tmp_path):
    """A likelihood-only run has no hit count (None, not 0: nothing was looked for) and its
    verdict says so; a run that generated counts its hits and says what it found."""
    generated = runs["probe"]
    assert isinstance(generated.summary["hits"], int)
    assert "nothing was generated" not in generated.summary["verdict"]["text"]
    root = write_command_data(tmp_path, 4)
    scored = ctxleak.probe(tiny_dir, str(root / "records.jsonl"), pii="phone", limit=3,
                           mode="black-box", generate=False, output=str(tmp_path / "run"),
                           seed=5, progress=False)
    assert all("generation" not in r or r["generation"] is None for r in scored.records)
    assert scored.summary["hits"] is None
    assert "nothing was generated" in scored.summary["verdict"]["text"]


def test_probe_hit_log_lists_a_real_exact_match(runs, tmp_path):
    """The hit log from a run folder whose generation did contain the target."""
    result = runs["probe"]
    rows = [dict(r) for r in result.records]
    rows[0].update(generation=f"it is {rows[0]['target']}.", exact_match=True)
    files = result.view().files(type(result)(records=rows, summary=result.summary,
                                             config=result.config))
    log = [json.loads(x) for x in files["hits.jsonl"].splitlines()]
    first = next(h for h in log if h["subject"] == rows[0]["subject"])
    assert first["span"] == rows[0]["target"] and first["start"] == 6
    assert first["template"] == rows[0]["template"] and first["pii_type"] == "phone"


def test_susceptibility_stays_under_its_ceiling(runs):
    result = runs["susceptibility"]
    for r in result.records:
        assert r["answer_entropy"] >= 0
        top = result.summary["ceiling"]["ceilings"][result.records.index(r)]
        # the mutual information never exceeds min(H(A|q), H(C))
        assert r["chi_mc"] <= top + 1e-9
        assert top <= math.log(len(r["context_draws"]["count"])) + 1e-9
    assert "nats" in result.summary["units"]["chi_mc"]
    assert "not nats" in result.summary["units"]["chi_f"]


def test_icl_units_per_exemplar_and_position(runs):
    s = runs["icl"].summary
    assert [p["position"] for p in s["by_position"]] == [1, 2]
    assert s["by_exemplar"] == sorted(s["by_exemplar"], key=lambda e: -e["max_loss"])
    # the largest loss of any exemplar is the largest ICLInf_j of any query
    largest = max(r["variants"][s["variants"][0]]["iclinf"] for r in runs["icl"].records)
    assert s["by_exemplar"][0]["max_loss"] == pytest.approx(largest)
    assert "ex-post per-instance" in s["units"]["by_exemplar"]
    assert re.search(r"training row \d+ \(", s["verdict"]["text"])


def test_leak_map_has_a_colour_legend_in_nats():
    r = Report("t")
    r.add_leak_map("ex-0", "one", ["a", "b"], [0.5, -1.0], ["c"], [2.0])
    page = r.render()
    legends = re.findall(r'<div class="caption legend"><em class="scaleend">−([^<]*)</em>'
                         r'<div class="scalebar" role="img"', page)
    assert legends == ["1 nats", "2 nats"]  # each side on its own scale, in nats
    assert "linear-gradient(to right,rgb(31,119,180),#fff,rgb(214,39,40))" in page


def test_verdict_block_escapes_and_sits_under_the_title():
    r = Report("title", "sub")
    r.add_heading("Results")
    r.set_verdict("<script>x</script> leaks", "rule & more")
    page = r.render()
    assert page.index("<h1>") < page.index('id="verdict"') < page.index("<h2>")
    assert "&lt;script&gt;x&lt;/script&gt; leaks" in page and "rule &amp; more" in page
    assert 'class="verdict"' in r.fragment()


def test_constant_series_get_a_readable_axis():
    from matplotlib.figure import Figure

    from ctxleak.report import plots

    for c, lim in ((3.9, (1.95, 5.85)), (0.0, (-1.0, 1.0)), (-2.0, (-3.0, -1.0))):
        ax = Figure().add_subplot(1, 1, 1)
        ax.plot([1, 2, 3], [c, c, c])
        plots._constant_ylim(ax, [c, c, c])
        assert ax.get_ylim() == pytest.approx(lim)
        assert ax.yaxis.get_major_formatter().get_useOffset() is False
    ax = Figure().add_subplot(1, 1, 1)
    ax.plot([1, 2], [1.0, 5.0])
    before = ax.get_ylim()
    plots._constant_ylim(ax, [1.0, 5.0])  # a varying series keeps matplotlib's limits
    assert ax.get_ylim() == before


def test_density_plot_draws_no_kde_below_five_distinct_values(monkeypatch):
    from ctxleak.report import plots

    calls = []
    monkeypatch.setattr(plots, "_kde", lambda vs, grid: calls.append(len(vs)) or [0.0] * 400)
    png = plots.density_plot({"few": [1.0, 2.0, 2.0, 3.0], "many": [1.0, 2.0, 3.0, 4.0, 5.0]},
                             title="t", xlabel="x")
    assert png.startswith(b"\x89PNG") and calls == [5]  # only the sample with 5 distinct values
