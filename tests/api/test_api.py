"""The Python API (SPEC §11): the CLI and the API write the same run directory for the same
options (times aside), ``load_result`` reads back CLI runs as typed results, and library errors
name parameters while the CLI names flags."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import run_cli
from helpers.rundiff import run_dir_differences
from helpers.tiny_data import TEMPLATES, icl_keywords, write_command_data

import ctxleak
from ctxleak.errors import ConfigError, InputError
from ctxleak.report.console import closing_line
from ctxleak.run.inputs import to_jsonable


@pytest.fixture(scope="module")
def data_files(tmp_path_factory):
    return write_command_data(tmp_path_factory.mktemp("api-data"), 4,
                              contexts=["the capital of france is paris .",
                                        "rome is the capital of italy and a city ."])


# (CLI arguments, API function, API data, API keywords): the same run both ways
CASES = {
    "influence": (lambda d: ["influence", "--data", str(d / "docs.jsonl"), "--lambda", "0.5,1",
                             "--max-new-tokens", "4", "--ngram", "2"],
                  "influence", lambda d: str(d / "docs.jsonl"),
                  dict(lambda_=[0.5, 1.0], max_new_tokens=4, ngram=2)),
    "icl": (lambda d: ["icl", "--data", str(d / "train.jsonl"), "--test-data",
                       str(d / "test.jsonl"), "--shots", "1,2", "--queries", "3",
                       "--calibration", "both", *TEMPLATES],
            "iclinf", lambda d: str(d / "train.jsonl"),
            lambda d: dict(test_data=str(d / "test.jsonl"), shots=[1, 2], queries=3,
                           calibration="both", **icl_keywords())),
    "audit": (lambda d: ["audit", "--data", "demo", "--subset-size", "3", "--sequences", "2",
                         "--max-new-tokens", "4", "--target-eps", "1,100"],
              "audit", lambda d: "demo",
              dict(subset_size=3, sequences=2, max_new_tokens=4, target_eps=[1, 100])),
    "susceptibility": (lambda d: ["susceptibility", "--data", str(d / "rel.json"),
                                  "--contexts", "4", "--limit", "3"],
                       "susceptibility", lambda d: str(d / "rel.json"),
                       dict(contexts=4, limit=3)),
    "probe": (lambda d: ["probe", "--data", str(d / "records.jsonl"), "--pii", "phone",
                         "--limit", "3"],
              "probe", lambda d: str(d / "records.jsonl"), dict(pii="phone", limit=3)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_cli_and_api_write_the_same_run_directory(name, tiny_dir, data_files, tmp_path, capsys):
    argv, function, data, keywords = CASES[name]
    cli_dir, api_dir = tmp_path / "cli", tmp_path / "api"
    code, out, err = run_cli([*argv(data_files), "--model", tiny_dir, "--seed", "4",
                              "--output", str(cli_dir)], capsys)
    assert code == 0, err
    # every command: a table (no box drawing, no ANSI codes off a terminal), then the same
    # closing line
    assert out.rstrip().splitlines()[-1] == closing_line(cli_dir)
    assert "\x1b[" not in out and not any(c in out for c in "│┃━╭")
    assert str(next(iter(ctxleak.load_result(cli_dir).table()[0]))) in out
    kw = keywords(data_files) if callable(keywords) else keywords
    result = getattr(ctxleak, function)(tiny_dir, data(data_files), seed=4,
                                        output=str(api_dir), progress=False, **kw)
    assert run_dir_differences(cli_dir, api_dir) == []
    # what the API returns is what it wrote, and what load_result reads back from the CLI's run
    loaded = ctxleak.load_result(cli_dir)
    assert type(loaded) is type(result) and type(result).__name__.endswith("Result")
    assert len(loaded.records) == len(result.records) == loaded.n_effective > 0
    assert loaded.summary == json.loads((cli_dir / "results.json").read_text())["summary"]
    assert to_jsonable(result.summary) == \
        json.loads((api_dir / "results.json").read_text())["summary"]
    frame = loaded.to_pandas()
    assert len(frame) == len(loaded.records) and list(frame["id"]) == \
        [r["id"] for r in loaded.records]
    html = loaded.to_html()
    assert html.startswith("<!DOCTYPE html>") and html == (cli_dir / "report.html").read_text()
    fragment = result._repr_html_()
    assert "<table" in fragment and "<html" not in fragment
    assert loaded.table() and loaded.table() == result.table()


def test_result_save_and_load_round_trip(tiny_dir, data_files, tmp_path, capsys):
    result = ctxleak.influence(tiny_dir, str(data_files / "docs.jsonl"), max_new_tokens=3,
                               output=str(tmp_path / "run"), progress=False)
    saved = result.save(tmp_path / "copy")
    back = ctxleak.load_result(saved)
    assert back.records == result.records and back.summary == result.summary
    assert back.config == result.config and back.to_html() == result.to_html()
    assert set(back.images) == set(result.images) and back.images
    result.show()
    out = capsys.readouterr().out
    assert "influence" in out and f"{result.summary['settings'][0]['n']}" in out


def test_a_loaded_model_and_data_in_memory(llama_lm, tmp_path):
    rows = [{"id": "a", "context": "the capital of france is paris .", "query": "what ?"},
            {"id": "b", "context": "rome is a city .", "query": "what ?"}]
    by_list = ctxleak.influence(llama_lm, rows, max_new_tokens=3, seed=1, progress=False,
                                output=str(tmp_path / "list"))
    assert by_list.config["model"] == "tiny-llama" and by_list.config["data"] == \
        "<list of 2 rows>"
    pd = pytest.importorskip("pandas")
    by_frame = ctxleak.influence(llama_lm, pd.DataFrame(rows), max_new_tokens=3, seed=1,
                                 progress=False, output=str(tmp_path / "frame"))
    assert [r["response_ids"] for r in by_frame.records] == \
        [r["response_ids"] for r in by_list.records]
    assert [r["id"] for r in by_frame.records] == ["a", "b"]  # the user's ids, untouched
    assert [r["key"] for r in by_frame.records] == ["a|lambda=1,T=0.8,context=all",
                                                    "b|lambda=1,T=0.8,context=all"]


def test_resume_through_the_api(llama_lm, tmp_path):
    rows = [{"context": f"the capital of {c} is {p} .", "query": "what ?"}
            for c, p in (("france", "paris"), ("italy", "rome"), ("spain", "madrid"))]
    out = str(tmp_path / "run")
    first = ctxleak.influence(llama_lm, rows, max_new_tokens=3, limit=2, output=out,
                              progress=False)
    assert len(first.records) == 2
    with pytest.raises(ConfigError, match="already holds a run"):
        ctxleak.influence(llama_lm, rows, max_new_tokens=3, output=out, progress=False)
    whole = ctxleak.influence(llama_lm, rows, max_new_tokens=3, output=out, resume=True,
                              progress=False)
    assert len(whole.records) == 3 and whole.records[:2] == first.records
    with pytest.raises(ConfigError, match="config differs in max_new_tokens"):
        ctxleak.influence(llama_lm, rows, max_new_tokens=4, output=out, resume=True,
                          progress=False)


def test_library_errors_name_parameters_and_the_cli_flags(tmp_path, capsys, monkeypatch):
    import ctxleak.run.runner as runner

    def refuse(*_a, **_k):
        raise AssertionError("the model was loaded before the options were checked")

    monkeypatch.setattr(runner, "load_lm", refuse)
    with pytest.raises(ConfigError, match=r"^lambda_ must be >= 0") as info:
        ctxleak.influence("default", "demo", lambda_=-1, output=str(tmp_path / "a"))
    assert info.value.param == "lambda_"
    with pytest.raises(ConfigError, match=r"^shots must be at least 1"):
        ctxleak.iclinf("default", "demo", shots=[0])
    with pytest.raises(ConfigError, match=r"^contexts must be at least 1"):
        ctxleak.susceptibility("default", "demo", contexts=0)
    with pytest.raises(ConfigError, match=r"^subset_size must be at least 2"):
        ctxleak.audit("default", "demo", subset_size=1)
    with pytest.raises(ConfigError, match=r"^beam must be >= 1"):
        ctxleak.probe("default", "demo", beam=0)
    with pytest.raises(InputError, match=r"<data>:2, field 'context': missing field"):
        ctxleak.influence("default", [{"context": "x", "query": "q"}, {"query": "q"}])
    code, _, err = run_cli(["influence", "--lambda", "-1", "--output", str(tmp_path / "b")],
                           capsys)
    assert code == 2 and "error: --lambda must be >= 0" in err
    code, _, err = run_cli(["icl", "--shots", "0", "--output", str(tmp_path / "c")], capsys)
    assert code == 2 and "error: --shots must be at least 1" in err
    code, _, err = run_cli(["susceptibility", "--top-k", "0", "--output",
                            str(tmp_path / "d")], capsys)
    assert code == 2 and "error: --top-k must be at least 1" in err
    assert not any((tmp_path / n).exists() for n in "abcd")


def test_flag_message_rewrites_only_the_named_parameter():
    from ctxleak.errors import flag_message

    exc = ConfigError("max_new_tokens must be >= 1, not 0 (see max_new_tokens)",
                      param="max_new_tokens")
    assert flag_message(exc, {"max_new_tokens": "--max-new-tokens"}) == \
        "--max-new-tokens must be >= 1, not 0 (see max_new_tokens)"
    assert flag_message(ConfigError("lam must be >= 0"), {"lam": "--lambda"}) == \
        "lam must be >= 0"  # names no parameter: unchanged
    assert flag_message(ConfigError("top_k must be", param="k"), {"k": "--k"}) == \
        "top_k must be"  # only whole words


def test_import_ctxleak_stays_light():
    code = ("import sys, ctxleak; assert callable(ctxleak.influence.__call__); "
            "bad = [m for m in ('torch', 'transformers', 'numpy', 'matplotlib', 'pandas') "
            "if m in sys.modules]; print(bad)")
    out = subprocess.run([sys.executable, "-c", code.replace(
        "assert callable(ctxleak.influence.__call__); ", "")], capture_output=True, text=True,
        check=True).stdout
    assert out.strip() == "[]"
    assert {"influence", "iclinf", "audit", "susceptibility", "probe", "dp", "load_result",
            "load_model"} <= set(dir(ctxleak))


def test_dp_calibrate_and_epsilon():
    (cal,) = ctxleak.dp.calibrate(10, 1e-5, clip=10, subset_size=50, sequences=50, max_new_tokens=40)
    eps = ctxleak.dp.epsilon(clip=10, subset_size=50, temperature=cal.temperature, sequences=50,
                             max_new_tokens=40, delta=1e-5)
    assert eps["eps"] == pytest.approx(10, rel=1e-3) and eps["alpha"] == cal.alpha
    with pytest.raises(ConfigError, match="^delta must be in"):
        ctxleak.dp.epsilon(delta=2)


def test_influence_explain_cli_and_api_agree(tiny_dir, tmp_path, capsys):
    args = dict(context="the capital of france is paris . rome is a city .",
                query="what is the capital ?", max_new_tokens=4, ngram=2, top=3)
    code, out, err = run_cli(["influence", "explain", "--context", args["context"], "--query",
                              args["query"], "--max-new-tokens", "4", "--ngram", "2", "--top",
                              "3", "--model", tiny_dir, "--output", str(tmp_path / "cli")],
                             capsys)
    assert code == 0, err
    result = ctxleak.influence_explain(tiny_dir, output=str(tmp_path / "api"), **args)
    assert run_dir_differences(tmp_path / "cli", tmp_path / "api") == []
    assert len(result.summary["top_ngrams"]) == 3 and result.table() == \
        ctxleak.load_result(tmp_path / "cli").table()
    assert result.summary["response"] in out


CAPITAL_ROWS = [{"context": f"the capital of {c} is {p} .", "query": "what ?", "n": i}
                for i, (c, p) in enumerate((("france", "paris"), ("italy", "rome"),
                                            ("spain", "madrid")))]


def test_rows_in_memory_hash_as_canonical_json_lines(tmp_path):
    """The same rows as a list, a DataFrame or a ``datasets.Dataset`` (keys in any order) hash
    alike; an edited cell changes the hash; config.json stores it under input_sha256."""
    import datasets
    import pandas as pd

    from ctxleak.run.inputs import rows_sha256
    from ctxleak.run.options import RunOptions
    from ctxleak.run.runner import open_run

    frame = pd.DataFrame(CAPITAL_ROWS)
    assert rows_sha256(frame) == rows_sha256(CAPITAL_ROWS) == \
        rows_sha256(datasets.Dataset.from_list(CAPITAL_ROWS)) == \
        rows_sha256([{k: r[k] for k in reversed(list(r))} for r in CAPITAL_ROWS])
    edited = frame.copy()
    edited.loc[2, "n"] = 7
    assert rows_sha256(edited) != rows_sha256(frame)
    with open_run("influence", RunOptions(output=str(tmp_path / "r")), {},
                  inputs={"data": frame, "none": None}) as run:
        assert run.config["input_sha256"] == {"data": rows_sha256(CAPITAL_ROWS)}


def test_resume_notices_edited_rows_in_memory_as_it_does_an_edited_file(llama_lm, tmp_path):
    """Rows given in memory are hashed (canonical JSON lines, keys sorted) like a file's bytes:
    the same rows in another form or another object resume; an edited cell is refused with
    the same error as an edited file."""
    import pandas as pd

    frame = pd.DataFrame(CAPITAL_ROWS)
    edited = frame.copy()
    edited.loc[0, "context"] = "berlin is a city ."
    opts = {"max_new_tokens": 2, "progress": False}
    out = str(tmp_path / "frame")
    ctxleak.influence(llama_lm, frame, limit=2, output=out, **opts)
    resumed = ctxleak.influence(llama_lm, frame.copy(), output=out, resume=True, **opts)
    assert len(resumed.records) == 3
    with pytest.raises(ConfigError) as by_frame:
        ctxleak.influence(llama_lm, edited, output=out, resume=True, **opts)

    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in CAPITAL_ROWS))
    ctxleak.influence(llama_lm, str(path), limit=2, output=str(tmp_path / "file"), **opts)
    path.write_text("".join(json.dumps(r) + "\n" for r in edited.to_dict(orient="records")))
    with pytest.raises(ConfigError) as by_file:
        ctxleak.influence(llama_lm, str(path), output=str(tmp_path / "file"), resume=True,
                          **opts)
    assert str(by_frame.value).replace(str(tmp_path / "frame"), "RUN") == \
        str(by_file.value).replace(str(tmp_path / "file"), "RUN")
    assert "content of the data input changed" in str(by_frame.value)
