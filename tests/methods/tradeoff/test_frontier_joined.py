"""One frontier over runs measured apart (ctxleak.results.joined, ``ctxleak influence frontier
RUN RUN``): two runs' settings joined give the very rows one run of every setting gives (each
example draws from its own seed whatever its neighbours, and its control is another
question's); a setting both runs measured is read once, and said; runs over other questions or
options are refused in one line naming the field."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from conftest import run_cli

import ctxleak
from ctxleak.errors import ConfigError

DOCS = [{"id": f"q{i}", "context": c, "query": "where is it ?", "reference": r}
        for i, (c, r) in enumerate((
            ("the museum is in paris near the river .", "paris"),
            ("the office moved to rome last year .", "rome"),
            ("the depot sits in harwich by the port .", "harwich"),
            ("the school is in leeds on the hill .", "leeds")))]


def _run(tiny_dir, data, out, capsys, *flags: str) -> None:
    code, _, err = run_cli(["influence", "--model", tiny_dir, "--data", str(data),
                            "--max-new-tokens", "3", "--output", str(out), *flags], capsys)
    assert code == 0, err


def _by_setting(front: dict) -> dict[str, dict]:
    return {row["setting"]: row for row in front["rows"]}


def test_two_runs_joined_are_one_run_of_every_setting(tiny_dir, tmp_path, capsys):
    data = tmp_path / "qa.jsonl"
    data.write_text("".join(json.dumps(d) + "\n" for d in DOCS))
    _run(tiny_dir, data, tmp_path / "half", capsys, "--lambda", "0.5,1")
    _run(tiny_dir, data, tmp_path / "zero", capsys, "--lambda", "0,1")
    _run(tiny_dir, data, tmp_path / "all", capsys, "--lambda", "0,0.5,1")
    half, zero, whole = (ctxleak.load_result(tmp_path / n) for n in ("half", "zero", "all"))
    joined = half.frontier_summary(joined=[zero])
    alone = whole.frontier_summary()
    assert _by_setting(joined) == _by_setting(alone) and len(joined["rows"]) == 3
    assert joined["recommendation"] == alone["recommendation"]
    # λ = 1 was measured by both: read from the first, and said
    one = next(k for k in _by_setting(joined) if k.startswith("lambda=1,"))
    assert joined["joined"] == [f"{one}: read from {tmp_path / 'half'}, also measured by "
                                f"{tmp_path / 'zero'}"]
    assert half.frontier(joined=[zero]).attrs["joined"] == joined["joined"]
    # measured by three runs: one line a setting, the later runs named in order
    again = replace(zero, path=tmp_path / "again")
    nought = next(k for k in _by_setting(joined) if k.startswith("lambda=0,"))
    assert half.frontier_summary(joined=[zero, again])["joined"] == [
        f"{one}: read from {tmp_path / 'half'}, also measured by {tmp_path / 'zero'}, "
        f"{tmp_path / 'again'}",
        f"{nought}: read from {tmp_path / 'zero'}, also measured by {tmp_path / 'again'}"]
    # the command line joins the folders the same way
    code, stdout, err = run_cli(["--plain", "influence", "frontier", str(tmp_path / "half"),
                                 str(tmp_path / "zero")], capsys)
    assert code == 0, err
    labels = [line.split("\t")[0] for line in stdout.splitlines() if "\t" in line][1:]
    assert sorted(labels) == ["λ = 0", "λ = 0.5", "λ = 1"]
    assert "Joined runs: " in stdout
    # --plot writes the joined frontier's plot to a new file, and never replaces one
    png = tmp_path / "front.png"
    code, stdout, err = run_cli(["influence", "frontier", str(tmp_path / "half"),
                                 str(tmp_path / "zero"), "--plot", str(png)], capsys)
    assert code == 0, err
    made = png.read_bytes()
    assert made.startswith(b"\x89PNG") and f"plot: {png}" in stdout
    code, _, err = run_cli(["influence", "frontier", str(tmp_path / "half"), "--plot",
                            str(png)], capsys)
    assert code != 0 and f"--plot {png} already exists: ctxleak does not replace a file" in err
    assert png.read_bytes() == made
    # with --overwrite it is replaced, by the one run's frontier (another picture)
    code, _, err = run_cli(["influence", "frontier", str(tmp_path / "half"), "--plot",
                            str(png), "--overwrite"], capsys)
    assert code == 0, err
    assert png.read_bytes().startswith(b"\x89PNG") and png.read_bytes() != made
    # in Python, the same plot as the command line's from the same summary
    from ctxleak.report.frontier import save_frontier_plot

    again_png = save_frontier_plot(half.frontier_summary(joined=[zero]), tmp_path / "py.png")
    assert again_png.read_bytes() == made
    # a folder that does not exist: one line naming the path, nothing written
    missing = tmp_path / "no-such-folder" / "front.png"
    code, _, err = run_cli(["influence", "frontier", str(tmp_path / "half"), "--plot",
                            str(missing)], capsys)
    assert code == 2 and f"cannot write the plot to {missing}" in err and "Traceback" not in err
    assert not missing.parent.exists()


def test_runs_over_other_questions_or_options_are_refused(tiny_dir, tmp_path, capsys):
    data = tmp_path / "qa.jsonl"
    data.write_text("".join(json.dumps(d) + "\n" for d in DOCS))
    _run(tiny_dir, data, tmp_path / "a", capsys, "--lambda", "0.5,1")
    first = ctxleak.load_result(tmp_path / "a")

    def other(name, config=None, records=None):  # the run as another run would have saved it
        return replace(first, path=tmp_path / name, config={**first.config, **(config or {})},
                       records=first.records if records is None else records)

    with pytest.raises(ConfigError, match=r"^.*longer ran with max_new_tokens 4 and .*/a with "
                                          r"3: a frontier joins runs over the same questions"):
        first.frontier_summary(joined=[other("longer", {"max_new_tokens": 4})])
    with pytest.raises(ConfigError, match="b ran with input_sha256"):
        first.frontier_summary(joined=[other("b", {"input_sha256": {"data": "0" * 64}})])
    fewer = [r for r in first.records if r["id"] != "q3"]
    with pytest.raises(ConfigError, match=r"fewer answered other questions than .*/a \(3 "
                                          r"against 4; 'q3' is not in it\)"):
        first.frontier_summary(joined=[other("fewer", records=fewer)])
    shuffled = sorted(first.records, key=lambda r: r["id"] != "q2")
    with pytest.raises(ConfigError, match="the same questions come in another order"):
        first.frontier_summary(joined=[other("shuffled", records=shuffled)])
    # what may differ: the settings, where and how fast the run went
    moved = other("moved", {"output": "elsewhere", "threads": 1, "lambda": [0.25]})
    assert len(first.frontier_summary(joined=[moved])["rows"]) == 2
    # the command line refuses in one line, naming the field
    longer = tmp_path / "longer"
    _run(tiny_dir, data, longer, capsys, "--lambda", "0", "--max-new-tokens", "4", "--limit", "1")
    code, _, err = run_cli(["influence", "frontier", str(tmp_path / "a"), str(longer)], capsys)
    assert code != 0 and "max_new_tokens 4" in err


def test_a_plot_needs_references(tiny_dir, tmp_path, capsys):
    """A sweep without references has a frontier of leak only, and no plot of utility against
    it: --plot is refused in one line, and no file is made."""
    data = tmp_path / "qa.jsonl"
    data.write_text("".join(json.dumps({k: v for k, v in d.items() if k != "reference"}) + "\n"
                            for d in DOCS))
    _run(tiny_dir, data, tmp_path / "run", capsys, "--lambda", "0.5,1")
    png = tmp_path / "front.png"
    code, _, err = run_cli(["influence", "frontier", str(tmp_path / "run"), "--plot", str(png)],
                           capsys)
    assert code != 0 and f"--plot {png}: the frontier has no utility against the references" \
        in err
    assert not png.exists()
    # in Python: the summary of the runs, then the plot
    from ctxleak.report.frontier import save_frontier_plot

    with pytest.raises(ConfigError, match="no utility against the references"):
        save_frontier_plot(ctxleak.load_result(tmp_path / "run").frontier_summary(), png)
