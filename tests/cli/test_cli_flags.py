"""One vocabulary of flags: every option has help, the commands are listed in the order a user
needs them, renamed flags and keywords keep working for one release with a deprecation warning,
--revision and --model-args reach from_pretrained and the provenance, ``ctxleak data`` lists the
named datasets."""

from __future__ import annotations

import json
import warnings

import pytest
import typer
from conftest import run_cli

import ctxleak
from ctxleak.cli.app import COMMAND_ORDER, RENAMED_FLAGS, app, nest_defaults, rename_flags
from ctxleak.engine.model_args import parse_model_args
from ctxleak.errors import ConfigError, CtxleakDeprecationWarning
from ctxleak.run.options import RunOptions


def _walk(command, path):
    yield path, command
    for name, sub in getattr(command, "commands", {}).items():
        yield from _walk(sub, [*path, name])


def test_every_option_and_argument_has_help():
    root = typer.main.get_command(app)
    missing = []
    for path, command in _walk(root, ["ctxleak"]):
        for param in command.params:
            if getattr(param, "hidden", False):
                continue
            if not (getattr(param, "help", None) or "").strip():
                missing.append(f"{' '.join(path)} {param.opts}")
        assert (command.help or "").strip(), path
    assert missing == []


def test_help_gives_each_command_one_line_when_wide_enough(capsys, monkeypatch):
    """A docstring's line breaks do not cut a command's description in the listing: at 400
    columns each command takes exactly one line, its sentence whole."""
    monkeypatch.setenv("COLUMNS", "400")
    code, out, _ = run_cli(["--help"], capsys)
    assert code == 0
    panel = out[out.index("Commands"):]
    rows = [line for line in panel.splitlines() if line.startswith("│ ")]
    names = list(typer.main.get_command(app).list_commands(None))
    assert len(rows) == len(names)
    icl = next(r for r in rows if r.strip("│ ").startswith("icl "))
    assert "(Evaluating Privacy Leakage From In-Context Learning)" in icl


def test_help_lists_commands_in_order_and_the_config_flag(capsys):
    code, out, _ = run_cli(["--help"], capsys)
    assert code == 0
    names = list(typer.main.get_command(app).list_commands(None))
    assert names[0] == "influence" and names == [n for n in COMMAND_ORDER if n in names]
    panel = out[out.index("Commands"):]
    listed = [line.strip("│ ").split()[0] for line in panel.splitlines()
              if line.startswith("│ ") and not line.startswith("│  ")]
    assert listed == names  # printed in that order, influence first
    assert "--config" in out and "Configuration" in out
    code, out, _ = run_cli(["influence", "--help"], capsys)
    assert "COMMAND [ARGS]" not in out and "[explain [OPTIONS]]" in out
    assert "explain --help" in out and "--config" in out
    assert "--revision" in out and "--model-args" in out
    assert "Counts are named by what they count" in " ".join(out.replace("│", " ").split())


@pytest.mark.parametrize("command, old, new", [
    ("audit", "--max-tokens", "--max-new-tokens"), ("audit", "--min-tokens", "--min-new-tokens"),
    ("audit", "--n-gen", "--sequences"), ("dp epsilon", "--n-gen", "--sequences"),
    ("dp calibrate", "--max-tokens", "--max-new-tokens")])
def test_renamed_flags_become_the_new_ones_with_a_warning(command, old, new):
    argv = [*command.split(), old, "7", "--seed", "1"]
    with pytest.warns(CtxleakDeprecationWarning, match=f"{old} is deprecated.*use {new}"):
        assert rename_flags(argv) == [*command.split(), new, "7", "--seed", "1"]
    with pytest.warns(CtxleakDeprecationWarning):
        assert rename_flags([*command.split(), f"{old}=7"]) == [*command.split(), f"{new}=7"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert rename_flags(["influence", old, "7"]) == ["influence", old, "7"]  # not its flag
    flags = {o for p in typer.main.get_command(app).commands[command.split()[0]].params
             for o in p.opts} if " " not in command else None
    if flags is not None:  # the old spelling is no longer a flag of its own
        assert new in flags and old not in flags


def test_calibrate_switch_becomes_calibration_on():
    with pytest.warns(CtxleakDeprecationWarning, match="--calibrate is deprecated"):
        assert rename_flags(["icl", "--calibrate", "--shots", "2"]) == \
            ["icl", "--calibration", "on", "--shots", "2"]
    assert set(RENAMED_FLAGS) <= {"audit", "icl", "dp calibrate", "dp epsilon"}


def test_old_flags_in_a_config_file_map_to_the_new_ones():
    with pytest.warns(CtxleakDeprecationWarning, match="'max-tokens' in the config"):
        node = nest_defaults(["audit"], {"max-tokens": 5, "n_gen": 3, "seed": 1})
    assert node == {"audit": {"max_new_tokens": 5, "sequences": 3, "seed": 1}}
    with pytest.warns(CtxleakDeprecationWarning):
        assert nest_defaults(["icl"], {"calibrate": True}) == {"icl": {"calibration": "on"}}


def test_old_cli_flags_still_run_and_warn(capsys):
    new = run_cli(["dp", "epsilon", "--sequences", "50", "--max-new-tokens", "40", "--json"],
                  capsys)
    old = run_cli(["dp", "epsilon", "--n-gen", "50", "--max-tokens", "40", "--json"], capsys)
    assert new[0] == old[0] == 0 and json.loads(new[1]) == json.loads(old[1])
    assert json.loads(new[1])["sequences"] == 50
    assert "warning: --n-gen is deprecated" in old[2] and "use --sequences" in old[2]
    assert "deprecated" not in new[2]
    # an error about a renamed flag names the new flag, before any model is loaded
    code, _, err = run_cli(["audit", "--min-tokens", "9", "--max-tokens", "4"], capsys)
    assert code == 2 and "error: --min-new-tokens must be between 0 and max_new_tokens" in err
    assert "warning: --min-tokens is deprecated" in err


@pytest.mark.parametrize("call, old, new", [
    (lambda: ctxleak.influence(lam=-1), "lam", "lambda_"),
    (lambda: ctxleak.influence_explain(context="x", lam=-1), "lam", "lambda_"),
    (lambda: ctxleak.audit(max_tokens=0), "max_tokens", "max_new_tokens"),
    (lambda: ctxleak.audit(n_gen=0), "n_gen", "sequences"),
    (lambda: ctxleak.audit(min_tokens=99), "min_tokens", "min_new_tokens"),
])
def test_old_keywords_warn_and_reach_the_new_parameter(call, old, new):
    with pytest.warns(DeprecationWarning, match=f"'{old}' is deprecated.*use '{new}'"):
        with pytest.raises(ConfigError) as info:  # the bad value, checked under the new name
            call()
    assert info.value.param == new and str(info.value).startswith(new)


def test_old_icl_keywords_are_accepted():
    with pytest.warns(DeprecationWarning, match="'fmt' is deprecated.*use 'format'"):
        with pytest.raises(ConfigError) as info:  # fmt taken; the bad queries reported
            ctxleak.iclinf(fmt="agnews", queries=0)
    assert info.value.param == "queries"
    with pytest.warns(DeprecationWarning, match="'calibrate' is deprecated"):
        with pytest.raises(ConfigError) as info:
            ctxleak.iclinf(calibrate=True, queries=0)
    assert info.value.param == "queries"


def test_old_and_new_keyword_together_is_an_error():
    with pytest.raises(ConfigError, match="both 'lam' .deprecated. and 'lambda_'"):
        ctxleak.influence(lam=1.0, lambda_=0.5)
    with pytest.raises(ConfigError, match="both 'calibrate'"):
        ctxleak.iclinf(calibrate=True, calibration="off")


def test_dp_old_keywords_give_the_same_numbers():
    new = ctxleak.dp.epsilon(sequences=50, max_new_tokens=40)
    with pytest.warns(DeprecationWarning, match="'n_gen' is deprecated"):
        old = ctxleak.dp.epsilon(n_gen=50, max_tokens=40)
    assert old == new
    with pytest.warns(DeprecationWarning):
        (a,) = ctxleak.dp.calibrate(10, n_gen=20, max_tokens=30)
    (b,) = ctxleak.dp.calibrate(10, sequences=20, max_new_tokens=30)
    assert a.temperature == b.temperature
    with pytest.raises(TypeError, match="unexpected keyword argument 'n_gens'"):
        ctxleak.dp.epsilon(n_gens=3)


def test_model_args_parse_and_refuse_what_has_its_own_option():
    assert parse_model_args("attn_implementation=eager, low_cpu_mem_usage=true,x=2,y=0.5,z=none") \
        == {"attn_implementation": "eager", "low_cpu_mem_usage": True, "x": 2, "y": 0.5,
            "z": None}
    assert parse_model_args(None) == {} and parse_model_args({"a": 1}) == {"a": 1}
    for bad, word in (("dtype=float16", "dtype"), ("revision=main", "revision"),
                      ("eager", "key=value"), ("a b=1", "keyword name")):
        with pytest.raises(ConfigError, match=word) as info:
            parse_model_args(bad)
        assert info.value.param == "model_args"
    with pytest.raises(ConfigError):
        RunOptions(model_args="trust_remote_code=true").check()


def test_bad_model_args_fail_before_the_model_loads(capsys, tmp_path):
    code, _, err = run_cli(["influence", "--model", str(tmp_path / "nowhere"), "--model-args",
                            "torch_dtype=float16", "--output", str(tmp_path / "r")], capsys)
    assert code == 2 and "--model-args may not set 'torch_dtype'" in err
    assert not (tmp_path / "r").exists()


def test_revision_and_model_args_reach_the_model_and_the_provenance(tiny_dir, tmp_path, capsys):
    out = tmp_path / "run"
    code, stdout, err = run_cli(["influence", "--model", tiny_dir, "--limit", "1",
                                 "--max-new-tokens", "2", "--min-new-tokens", "1",
                                 "--model-args", "attn_implementation=eager",
                                 "--revision", "v1", "--output", str(out)], capsys)
    assert code == 0, err
    results = json.loads((out / "results.json").read_text())
    model = results["provenance"]["model"]
    assert model["model_args"] == {"attn_implementation": "eager"} and model["revision"] == "v1"
    # which seeded draw made the sampled tokens (the same seed gives others under another)
    assert results["provenance"]["draw"].startswith("exponential race, counter-hashed")
    config = json.loads((out / "config.json").read_text())
    assert config["model_args"] == "attn_implementation=eager" and config["revision"] == "v1"
    lm = ctxleak.load_model(tiny_dir, device="cpu", model_args={"attn_implementation": "eager"})
    assert lm.model.config._attn_implementation == "eager"
    assert lm.info.model_args == {"attn_implementation": "eager"}


def test_data_lists_the_bundled_datasets(capsys):
    code, out, _ = run_cli(["data"], capsys)
    assert code == 0
    for name, rows in (("influence", "20 documents"), ("icl", "120 train + 40 test"),
                       ("susceptibility", "10 relations"), ("probe", "--subjects")):
        assert any(name in line and rows in line for line in out.splitlines()), name
    assert any(line.startswith("demo-qa") and "24 documents" in line
               for line in out.splitlines())
    assert "hf:agnews" in out and "cnn_dailymail" in out
    assert not any(c in out for c in "│┃━─╭")  # piped: no box drawing


def test_the_walk_sees_every_command_and_option():
    # the help check above must reach the subcommands' options (else it would check nothing)
    seen = {(" ".join(path), o) for path, command in _walk(typer.main.get_command(app), [])
            for p in command.params for o in p.opts}
    for item in (("influence", "--lambda"), ("influence explain", "--top"),
                 ("dp epsilon", "--sequences"), ("pii extract", "--relax")):
        assert item in seen, item
    assert len(seen) > 150


def test_the_command_tree_is_built_once_for_every_call_error_and_warning(capsys, monkeypatch):
    """``ctxleak.cli.app.click_app`` builds typer's command tree once per process: later
    commands, an error that names a flag and a renamed flag's warning reuse it, and it is the
    tree typer builds (the same commands and flags)."""
    from ctxleak.cli import app as cli_app

    built = []
    real = typer.main.get_command
    monkeypatch.setattr(typer.main, "get_command",
                        lambda a: built.append(a) or real(a))  # type: ignore[func-returns-value]
    cli_app.click_app.cache_clear()
    try:
        for argv in (["dp", "epsilon", "--help"], ["influence", "--limit", "0"],
                     ["dp", "epsilon", "--max-tokens", "x"]):
            run_cli(argv, capsys)
        assert len(built) == 1
        fresh = real(app)
        assert set(cli_app.click_app().commands) == set(fresh.commands)
        assert [p.name for p in cli_app.click_app().commands["influence"].params] == \
            [p.name for p in fresh.commands["influence"].params]
    finally:
        cli_app.click_app.cache_clear()
