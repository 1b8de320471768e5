"""The influence command end to end: run directory, resume, config files, errors."""

from __future__ import annotations

import json
import stat

import numpy as np
import pytest
from conftest import run_cli
from helpers.hand_influence import hand_unigram_influence

from ctxleak.cli.app import main
from ctxleak.methods.influence.data import InfluenceExample, prompt_parts


def cli(argv, capsys):
    return run_cli(argv, capsys)


BASE = ["influence", "--data", "demo", "--max-new-tokens", "4", "--min-new-tokens", "1"]


def test_run_resume_and_refuse_changed_config(tiny_dir, tmp_path, capsys):
    out = tmp_path / "run"
    code, stdout, err = cli(BASE + ["--model", tiny_dir, "--limit", "2", "--ngram", "8",
                                    "--output", str(out)], capsys)
    assert code == 0, err
    for name in ("config.json", "samples.jsonl", "results.json", "report.html",
                 "per_position.png", "per_window.png"):
        assert (out / name).is_file(), name
    assert stat.S_IMODE((out / "samples.jsonl").stat().st_mode) == 0o600
    results = json.loads((out / "results.json").read_text())
    prov = results["provenance"]
    assert {"ctxleak", "torch", "transformers", "model"} <= set(prov)
    assert results["n_effective"] == 2 and results["wall_time_s"] > 0
    setting = results["summary"]["settings"][0]
    assert setting["influence"]["n"] == 2 and "per_window_influence" in setting
    assert setting["quality"]["bertscore_f1"]["value"] is None
    assert "not requested" in setting["quality"]["factkb"]["reason"]
    assert "Quality metrics not computed" in (out / "report.html").read_text()
    lines = (out / "samples.jsonl").read_text().splitlines()
    first = json.loads(lines[0])
    assert len(first["response_ids"]) == len(first["token_influence"]) == len(first["logp_empty"])
    np.testing.assert_allclose(first["token_influence"], np.abs(
        np.array(first["logp_context"]) - np.array(first["logp_empty"])), atol=1e-5)
    page = (out / "report.html").read_text()
    assert page.lower().count("<script") == 1  # only the hashed table script
    assert page.count('<section class="leakmap"') == 2 and "Where the context leaked" in page

    code, _, err = cli(BASE + ["--model", tiny_dir, "--limit", "3", "--ngram", "8",
                               "--output", str(out), "--resume"], capsys)
    assert code == 0, err
    lines2 = (out / "samples.jsonl").read_text().splitlines()
    assert lines2[:2] == lines and len(lines2) == 3   # finished examples kept, one added

    code, _, err = cli(BASE + ["--model", tiny_dir, "--limit", "3", "--ngram", "8",
                               "--output", str(out)], capsys)
    assert code == 2 and "--resume" in err
    code, _, err = cli(BASE + ["--model", tiny_dir, "--lambda", "0.5", "--ngram", "8",
                               "--output", str(out), "--resume"], capsys)
    assert code == 2 and "config differs in lambda" in err


def test_sweep_and_config_file(tiny_dir, tmp_path, capsys):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"command: influence\nmodel: {tiny_dir}\ndata: demo\nlimit: 1\n"
                   "lambda: [0, 1.5]\ncontext-sizes: [4, 8]\nmax-new-tokens: 3\n"
                   "min-new-tokens: 0\n")
    out = tmp_path / "sweep"
    code, stdout, err = cli(["run", str(cfg), "--output", str(out)], capsys)
    assert code == 0, err
    results = json.loads((out / "results.json").read_text())
    settings = results["summary"]["settings"]
    # λ = 0 and 1.5 at each context size, each size led by the λ = 1 baseline it lacked
    assert len(settings) == 6 and [s.get("added_baseline", False) for s in settings] == [
        True, False, False] * 2
    zero = [s for s in settings if s["lambda"] == 0]
    assert all(s["influence"]["mean"] == 0 for s in zero)
    assert (out / "lambda_sweep.png").is_file() and (out / "context_size.png").is_file()
    # --config works on the command itself and flags override it
    out2 = tmp_path / "cfg2"
    code, _, err = cli(["influence", "--config", str(cfg), "--lambda", "0", "--output",
                        str(out2)], capsys)
    assert code == 0, err
    assert json.loads((out2 / "config.json").read_text())["lambda"] == [0.0]


@pytest.mark.parametrize("argv, message", [
    (["--lambda", "-1"], "--lambda must be >= 0"),
    (["--temperature", "0"], "--temperature must be > 0"),
    (["--ngram", "x"], "--ngram must be"),
    (["--data", "/nonexistent.jsonl"], "file not found"),
    (["--model", "no-such-model"], "unknown model 'no-such-model': use one of default"),
    (["--threads", "0"], "--threads must be at least 1"),
])
def test_user_errors_exit_2_without_traceback(argv, message, tmp_path, capsys):
    code, _, err = cli(BASE + ["--limit", "1", "--output", str(tmp_path / "x")] + argv, capsys)
    assert code == 2
    assert message in err and "Traceback" not in err


def test_a_failed_start_leaves_the_folder_usable(tiny_dir, tmp_path, capsys):
    """A run stopped before computing anything (wrong model name) leaves a config only: the
    corrected command takes the folder over without --resume; --threads sets torch's threads."""
    import torch

    out = str(tmp_path / "run")
    code, _, err = cli(BASE + ["--limit", "1", "--output", out, "--model", "no-such"], capsys)
    assert code == 2 and "unknown model" in err
    assert (tmp_path / "run" / "config.json").is_file()
    before = torch.get_num_threads()
    try:
        code, _, err = cli(BASE + ["--limit", "1", "--output", out, "--model", tiny_dir,
                                   "--threads", "1"], capsys)
        assert code == 0, err
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)
    assert json.loads((tmp_path / "run" / "config.json").read_text())["model"] == tiny_dir


def test_debug_shows_traceback(tmp_path):
    from ctxleak.errors import ConfigError

    with pytest.raises(ConfigError):
        main(["--debug"] + BASE + ["--lambda", "-1", "--output", str(tmp_path / "y")])


def test_version_and_help(capsys):
    code, out, _ = cli(["--version"], capsys)
    assert code == 0 and out.startswith("ctxleak ")
    code, out, _ = cli(["influence", "--help"], capsys)
    assert code == 0 and "--lambda" in out and "--resume" in out


def test_explain_on_tiny_model(tiny_dir, llama_lm, tmp_path, capsys):
    out = tmp_path / "explain"
    context = "the capital of france is paris . the capital of italy is rome ."
    query = "the capital of france is"
    code, stdout, err = cli(["influence", "explain", "--model", tiny_dir, "--context", context,
                             "--query", query, "--max-new-tokens", "4",
                             "--min-new-tokens", "1", "--ngram", "2", "--output", str(out)],
                            capsys)
    assert code == 0, err
    res = json.loads((out / "results.json").read_text())["summary"]
    # the heatmap (paper 000, Table 1) scores the first token with the distribution it was drawn
    # from: EOS masked (--min-new-tokens 1), λ = 1, T = 0.8; recomputed here from scratch
    example = InfluenceExample("explain", context, query, None, "qa")
    parts, _ = prompt_parts(llama_lm, example, None, reserve=4)
    first = res["response_ids"][0]
    want = hand_unigram_influence(llama_lm, parts, [], first, 1.0, 0.8, mask_eos=True)
    np.testing.assert_allclose(res["unigram_influence_on_first_token"], want, atol=1e-6)
    assert res["context_tokens"] == llama_lm.token_strings(list(parts.context))
    # top 5 of the stride-1 bigrams, in decreasing order, each naming its own tokens
    top = res["top_ngrams"]
    assert [r["rank"] for r in top] == [1, 2, 3, 4, 5]
    assert all(a["influence"] >= b["influence"] for a, b in zip(top, top[1:]))
    for r in top:
        lo, hi = map(int, r["tokens"].split("-"))
        assert hi - lo == 2 and r["n-gram"] == llama_lm.decode(list(parts.context[lo:hi]))
    assert res["influence"] == pytest.approx(sum(res["token_influence"]))
    assert "Most influential" in stdout


@pytest.mark.integration
def test_default_model_end_to_end(tmp_path, capsys, default_lm):
    out = tmp_path / "default"
    code, stdout, err = cli(["influence", "--data", "demo", "--limit", "1", "--max-new-tokens",
                             "8", "--ngram", "32", "--output", str(out)], capsys)
    assert code == 0, err
    row = json.loads((out / "samples.jsonl").read_text().splitlines()[0])
    # --min-new-tokens defaults to min(10, --max-new-tokens): EOS is masked at all 8 steps
    assert len(row["response_ids"]) == 8 and not row["stopped_on_eos"]
    tau = np.abs(np.array(row["logp_context"]) - np.array(row["logp_empty"]))
    np.testing.assert_allclose(row["token_influence"], tau, atol=1e-5)
    assert row["influence"] == pytest.approx(float(tau.sum()), abs=1e-4) and row["influence"] > 0
    # every 32-token window scored against the same reference: Def. 3.1-3.2 from the rows
    assert row["ngram"] == 32 and row["windows"][0] == [0, 32]
    assert row["windows"][-1][1] == row["context_tokens"]
    for w, logp in zip(row["window_influence"], row["window_logp"]):
        assert w == pytest.approx(float(np.abs(np.array(row["logp_context"]) - logp).sum()),
                                  abs=1e-4)
    assert row["max_window_influence"] == pytest.approx(max(row["window_influence"]), abs=1e-5)
    assert row["max_window"] == int(np.argmax(row["window_influence"]))
    assert max(row["window_influence"]) > 0


def test_factkb_for_every_setting_with_a_local_classifier(tiny_dir, tmp_path, capsys):
    """FactKB (paper 000 §4.1) with a classifier saved to a folder (a tiny random one here):
    one value per λ setting, each the mean probability of the last ('factual') class, and a
    FactKB column in the report's table."""
    import torch
    from helpers.tiny_models import word_tokenizer
    from transformers import BertConfig, BertForSequenceClassification

    from ctxleak.methods.tradeoff.quality import factkb

    torch.manual_seed(0)
    tok = word_tokenizer(add_bos=False)
    clf = BertForSequenceClassification(BertConfig(
        vocab_size=len(tok), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
        intermediate_size=32, max_position_embeddings=600, num_labels=2)).eval()
    folder = tmp_path / "factkb"
    clf.save_pretrained(folder)
    tok.save_pretrained(folder)
    # by hand on one pair
    enc = tok("the capital", "paris is the capital", return_tensors="pt")
    with torch.no_grad():
        expected = float(torch.softmax(clf(**enc).logits[0].double(), -1)[-1])
    got = factkb(["the capital"], ["paris is the capital"], str(folder))
    assert got["value"] == pytest.approx(expected, rel=1e-6) and got["n"] == 1

    out = tmp_path / "run"
    code, _, err = cli(BASE + ["--limit", "2", "--model", tiny_dir, "--lambda", "0,1",
                               "--factkb-model", str(folder), "--output", str(out)], capsys)
    assert code == 0, err
    settings = json.loads((out / "results.json").read_text())["summary"]["settings"]
    assert len(settings) == 2
    for s in settings:
        assert 0 < s["quality"]["factkb"]["value"] < 1 and s["quality"]["factkb"]["n"] == 2
        assert s["quality"]["bertscore_f1"]["value"] is None
    assert ">FactKB<" in (out / "report.html").read_text()


def test_resume_after_an_edited_data_file_is_refused(tiny_dir, tmp_path, capsys):
    """config.json stores the SHA-256 of the data file; a --resume after a row's context changed
    is refused (it would otherwise keep the stale result), and the finished rows stay."""
    data = tmp_path / "d.jsonl"
    rows = [{"id": "a", "context": "the capital of france is paris", "query": "what ?"},
            {"id": "b", "context": "rome is in italy", "query": "where ?"}]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "run"
    args = ["influence", "--data", str(data), "--model", tiny_dir, "--max-new-tokens", "3",
            "--min-new-tokens", "1", "--ngram", "1000", "--output", str(out)]
    code, _, err = cli(args + ["--limit", "1"], capsys)
    assert code == 0, err
    config = json.loads((out / "config.json").read_text())
    assert set(config["input_sha256"]) == {"data"}
    # --ngram larger than the context: clipped to the whole context, recorded and counted
    first = json.loads((out / "samples.jsonl").read_text().splitlines()[0])
    assert first["ngram_clipped_from"] == 1000 and first["ngram"] == first["context_tokens"]
    summary = json.loads((out / "results.json").read_text())["summary"]["settings"][0]
    assert summary["ngram_clipped"] == 1 and summary["truncated_contexts"] == 0
    before = (out / "samples.jsonl").read_text()

    rows[0]["context"] = "berlin is a city"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    code, _, err = cli(args + ["--resume"], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "content of the data input changed" in err and str(out) in err
    assert (out / "samples.jsonl").read_text() == before


def test_ctrl_c_says_what_was_kept_and_how_to_resume(tiny_dir, tmp_path, capsys, monkeypatch):
    import ctxleak.run.runner as runner

    def interrupted(common):
        raise KeyboardInterrupt

    monkeypatch.setattr(runner, "load_lm", interrupted)
    out = tmp_path / "run"
    code, _, err = cli(BASE + ["--model", tiny_dir, "--limit", "1", "--output", str(out)], capsys)
    assert code == 130
    assert f"0 finished example(s) are saved in {out}" in err
    assert f"--resume --output {out}" in err
