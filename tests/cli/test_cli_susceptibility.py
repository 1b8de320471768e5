"""``ctxleak susceptibility`` end to end: a tiny model saved to a directory (fast), and the
default model (integration), checking the run directory and ``--resume``."""

from __future__ import annotations

import json
import math
import stat

import pytest
from helpers.tiny_data import CAPITAL_RELATION as RELATION
from helpers.tiny_data import TINY_RELATIONS
from helpers.tiny_data import write_json as _write
from helpers.tiny_models import tiny_gpt2
from typer.testing import CliRunner

from ctxleak.cli.app import app, main

runner = CliRunner()


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny-gpt2")
    lm = tiny_gpt2()
    lm.model.save_pretrained(path)
    lm.tokenizer.save_pretrained(path)
    return path


def _rows(run):
    return [json.loads(line) for line in (run / "samples.jsonl").read_text().splitlines()]


def _check_run_dir(run, n, *, both=True):
    results = json.loads((run / "results.json").read_text())
    rows = _rows(run)
    assert len(rows) == n and results["n_effective"] == n
    assert (run / "report.html").read_text().startswith("<!DOCTYPE html>")
    summary = results["summary"]
    assert summary["n_queries"] == n
    assert results["provenance"]["torch"] and results["config"]["method"] == "both"
    for row in rows:
        assert {"id", "relation", "entity", "real", "query_type", "query"} <= set(row)
        if both:
            assert 0 <= row["chi_mc"] <= math.log(row["n_distinct_contexts"]) + 1e-9
            assert row["chi_f"] >= 0 and row["seconds_mc"] > 0 and row["seconds_fisher"] > 0
            assert 1 <= len(row["persuasive_contexts"]) <= 3
            psis = [c["psi"] for c in row["persuasive_contexts"]]
            assert psis == sorted(psis, reverse=True)
    # contexts cut to the window are counted per query and in results.json (none here)
    assert summary["truncation"] == {"queries": 0, "contexts": 0, "tokens": 0}
    assert all(row["contexts_truncated"] == 0 == row["context_tokens_cut"] for row in rows)
    # the queries' texts are user data: the folder is 0700 and its files 0600
    assert stat.S_IMODE(run.stat().st_mode) == 0o700
    for name in ("samples.jsonl", "results.json", "report.html", "config.json"):
        assert stat.S_IMODE((run / name).stat().st_mode) == 0o600, name
    if both:
        assert (run / "scatter_fisher_vs_mc.png").read_bytes().startswith(b"\x89PNG")
        for name in ("relations_mc.png", "relations_fisher.png", "real_vs_fake_mc.png",
                     "real_vs_fake_fisher.png"):
            assert (run / name).is_file()
        timing = summary["timing"]
        assert timing["speedup_fisher_over_mc"] == pytest.approx(
            timing["seconds_per_query_mc"] / timing["seconds_per_query_fisher"])
        assert set(summary["correlation"]) >= {"overall", "by_query_type", "open", "closed"}
        assert set(summary["means"]) == {"by_query_type", "open_vs_closed", "real_vs_fake",
                                         "by_relation"}
    return results, rows


def test_cli_end_to_end_and_resume(tmp_path, tiny_model_dir):
    data = tmp_path / "rel.json"
    data.write_text(json.dumps(TINY_RELATIONS))
    run = tmp_path / "run"
    base = ["susceptibility", "--model", str(tiny_model_dir), "--device", "cpu",
            "--data", str(data), "--entity-contexts", "2", "--contexts", "6",
            "--output", str(run)]
    result = runner.invoke(app, [*base, "--limit", "4"])
    assert result.exit_code == 0, result.output
    assert "Susceptibility (4 queries)" in result.output and "speedup" in result.output
    results, first = _check_run_dir(run, 4)
    assert first[0]["id"] == "capital/real/france/closed"
    # paper 002 §5.1 mix (the default): 2 of the 6 draws mention the queried entity, the other
    # 4 are the relation's contexts about its other entities; recorded in results.json
    for row in first:
        assert row["n_draws"] == 6 and row["n_entity_draws"] == 2
    mix = results["summary"]["context_mix"]
    assert mix == {"scope": "mix", "contexts": 6, "sampling": "no-replacement",
                   "entity_contexts": 2, "other_contexts": 4, "mean_draws": 6.0,
                   "mean_entity_draws": 2.0, "mean_distinct_contexts": pytest.approx(
                       sum(r["n_distinct_contexts"] for r in first) / 4)}
    assert results["config"]["context_entities"] == "mix"
    assert results["config"]["entity_contexts"] == 2

    # resume: finished queries are kept as they are, the rest are added
    result = runner.invoke(app, [*base, "--limit", "9", "--resume"])
    assert result.exit_code == 0, result.output
    results, rows = _check_run_dir(run, 9)
    assert rows[:4] == first
    assert len(results["summary"]["correlation"]["by_query_type"]) == 3
    assert {r["entity_kind"] for r in rows} == {"real", "fake"}

    # a changed setting is refused on resume; no --resume refuses a used directory
    result = runner.invoke(app, [*base[:-4], "--contexts", "7", "--output", str(run), "--resume"])
    assert result.exit_code != 0 and "config differs in contexts" in str(result.exception)
    result = runner.invoke(app, [*base, "--sampling", "replacement", "--resume"])
    assert result.exit_code != 0 and "config differs in sampling" in str(result.exception)
    result = runner.invoke(app, [*base, "--limit", "2"])
    assert result.exit_code != 0 and "already holds a run" in str(result.exception)


def test_cli_same_seed_same_numbers(tmp_path, tiny_model_dir):
    outs = []
    for name in ("a", "b"):
        run = tmp_path / name
        result = runner.invoke(app, ["susceptibility", "--model", str(tiny_model_dir),
                                     "--device", "cpu", "--method", "mc", "--contexts", "5",
                                     "--query-types", "open_completion", "--limit", "3",
                                     "--context-entities", "relation", "--output", str(run)])
        assert result.exit_code == 0, result.output
        outs.append([(r["chi_mc"], r["persuasive_contexts"]) for r in _rows(run)])
        assert "chi_f" not in _rows(run)[0]
    assert outs[0] == outs[1]
    # the named options keep a single pool: 'query' (the default before the paper's mix)
    # draws every context about the queried entity
    run = tmp_path / "query"
    result = runner.invoke(app, ["susceptibility", "--model", str(tiny_model_dir), "--device",
                                 "cpu", "--method", "mc", "--contexts", "5", "--limit", "2",
                                 "--context-entities", "query", "--output", str(run)])
    assert result.exit_code == 0, result.output
    assert all(r["n_entity_draws"] == r["n_draws"] == 5 for r in _rows(run))
    for r in _rows(run):
        assert all(r["entity"] in c["context"] for c in r["persuasive_contexts"])
    mix = json.loads((run / "results.json").read_text())["summary"]["context_mix"]
    assert mix["scope"] == "query" and "entity_contexts" not in mix


def test_cli_fisher_only_full_vocabulary_and_no_context_reference(tmp_path, tiny_model_dir):
    run = tmp_path / "f"
    result = runner.invoke(app, ["susceptibility", "--model", str(tiny_model_dir), "--device",
                                 "cpu", "--method", "fisher", "--fisher-vocab", "full",
                                 "--limit", "2", "--output", str(run)])
    assert result.exit_code == 0, result.output
    rows = _rows(run)
    assert all(r["fisher_vocab"] == "full" and abs(r["fisher_mass"] - 1) < 1e-6 for r in rows)
    assert "chi_mc" not in rows[0]
    run2 = tmp_path / "n"
    result = runner.invoke(app, ["susceptibility", "--model", str(tiny_model_dir), "--device",
                                 "cpu", "--method", "mc", "--reference", "no-context",
                                 "--contexts", "4", "--limit", "2", "--output", str(run2)])
    assert result.exit_code == 0, result.output
    row = _rows(run2)[0]
    assert "chi_mc_nocontext" in row and "chi_mc" not in row and row["reference"] == "no-context"
    # 4 contexts without --entity-contexts: the paper's ratio gives 1 about the entity
    assert row["n_entity_draws"] == 1 and row["n_draws"] == 4
    assert json.loads((run2 / "results.json").read_text())["config"]["entity_contexts"] == 1


@pytest.mark.integration
def test_cli_default_model(tmp_path):
    run = tmp_path / "default"
    base = ["susceptibility", "--model", "default", "--device", "cpu", "--data", "demo",
            "--contexts", "4", "--entity-contexts", "1", "--output", str(run)]
    result = runner.invoke(app, [*base, "--limit", "3"])
    assert result.exit_code == 0, result.output
    results, rows = _check_run_dir(run, 3)
    assert [r["query_type"] for r in rows] == ["closed", "open_qa", "open_completion"]
    # the default model has a chat template; susceptibility prompts go without it by default
    assert results["provenance"]["model"]["chat_template"] is False
    result = runner.invoke(app, [*base, "--limit", "4", "--resume"])
    assert result.exit_code == 0, result.output
    _, rows2 = _check_run_dir(run, 4)
    assert rows2[:3] == rows and rows2[3]["entity_kind"] == "fake"


# --- bad input is refused before any model is loaded (SPEC §9) ------------------------------



@pytest.fixture
def no_model(monkeypatch):
    """Fail if the CLI tries to load a model: bad input must be caught before."""
    import ctxleak.run.runner as runner

    def refuse(*_a, **_k):
        raise AssertionError("the model was loaded before the input was checked")

    monkeypatch.setattr(runner, "load_lm", refuse)


@pytest.mark.parametrize("args,needle", [
    (["--contexts", "0"], "--contexts must be at least 1"),
    (["--contexts", "4", "--entity-contexts", "8"],
     "--entity-contexts=8 must be between 0 and --contexts=4"),
    (["--entity-contexts", "-1"], "--entity-contexts=-1 must be between 0"),
    (["--query-types", "closed,yes_no"], "unknown query type 'yes_no'"),
    (["--method", "exact"], "--method must be one of"),
    (["--relations", "capital,moons"], "unknown relation(s) moons"),
])
def test_cli_rejects_bad_flags_before_loading(tmp_path, capsys, no_model, args, needle):
    with pytest.raises(SystemExit) as exit_info:
        main(["susceptibility", "--output", str(tmp_path / "run"), *args])
    assert exit_info.value.code == 2
    assert needle in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_cli_rejects_bad_files_before_loading(tmp_path, capsys, no_model):
    bad = _write(tmp_path, '{"relations": [}')
    with pytest.raises(SystemExit) as exit_info:
        main(["susceptibility", "--data", str(bad), "--output", str(tmp_path / "run")])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert str(bad) in err and "not valid JSON" in err
    missing = _write(tmp_path, {"relations": [{k: v for k, v in RELATION.items()
                                               if k != "context_template"}]}, "m.json")
    with pytest.raises(SystemExit):
        main(["susceptibility", "--data", str(missing), "--output", str(tmp_path / "run")])
    assert "context_template" in capsys.readouterr().err


@pytest.mark.parametrize("flag,loaded", [(None, "off"), ("auto", "off"), ("off", "off"),
                                         ("on", "on")])
def test_cli_loads_the_model_without_its_chat_template_unless_asked(tmp_path, monkeypatch,
                                                                    tiny_model_dir, flag, loaded):
    """Susceptibility's prompts end in the query (no chat turn) unless --chat-template on."""
    import ctxleak.run.runner as run_layer

    seen = []
    real_load = run_layer.load_lm

    def record(common):
        seen.append(common.chat_template)
        return real_load(type(common)(**{**common.to_dict(), "chat_template": "off"}))

    monkeypatch.setattr(run_layer, "load_lm", record)
    data = _write(tmp_path, TINY_RELATIONS)
    args = ["susceptibility", "--model", str(tiny_model_dir), "--data", str(data),
            "--contexts", "2", "--method", "mc", "--limit", "1", "--output", str(tmp_path / "r")]
    if flag is not None:
        args += ["--chat-template", flag]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert seen == [loaded]
