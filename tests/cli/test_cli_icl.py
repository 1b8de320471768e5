"""``ctxleak icl`` end to end: a tiny model saved to disk, and the default model (integration)."""

from __future__ import annotations

import json
import stat

import pytest
import torch
from conftest import run_cli
from helpers.tiny_data import TEMPLATES, TEST, TRAIN
from helpers.tiny_models import tiny_llama


def run(capsys, *args: str) -> tuple[int, str, str]:
    return run_cli(args, capsys)


def write_jsonl(path, pairs):
    path.write_text("".join(json.dumps({"text": t, "label": lab}) + "\n" for t, lab in pairs),
                    encoding="utf-8")
    return str(path)


@pytest.fixture()
def one_thread():
    """Tiny models run fastest on one thread (and do not stall on a busy machine)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory):
    lm = tiny_llama(seed=11)
    path = tmp_path_factory.mktemp("tiny-icl-model")
    lm.model.save_pretrained(path)
    lm.tokenizer.save_pretrained(path)
    return str(path)


@pytest.fixture()
def files(tmp_path):
    return write_jsonl(tmp_path / "train.jsonl", TRAIN), write_jsonl(tmp_path / "test.jsonl", TEST)


def test_icl_end_to_end_with_sweep_and_resume(capsys, tmp_path, tiny_model_dir, files,
                                              one_thread):
    train, test = files
    out = tmp_path / "run"
    args = ["icl", "--model", tiny_model_dir, "--data", train, "--test-data", test,
            "--shots", "1,2", "--queries", "3", "--calibration", "both", "--output-space", "both",
            *TEMPLATES, "--output", str(out)]
    code, stdout, err = run(capsys, *args, "--limit", "2")
    assert code == 0, err
    assert "ICLInf" in stdout and "labels_calibrated" in stdout and str(out) in stdout

    results = json.loads((out / "results.json").read_text())
    summary = results["summary"]
    assert set(summary["iclinf"]) == {"1", "2"}
    assert set(summary["iclinf"]["2"]) == {"labels", "labels_calibrated", "vocab",
                                           "vocab_calibrated"}
    cell = summary["iclinf"]["2"]["labels"]
    assert cell["n"] == 2 and len(cell["mean_loss_by_position"]) == 2
    assert cell["iclinf_mean"] >= 0 and 0 <= cell["accuracy"] <= 1
    assert results["n_effective"] == 4 and summary["labels"] == ["yes", "no", "one"]
    assert results["provenance"]["prompt_template"]["exemplar"] == \
        "question : {text} answer : {label}\n"
    for name in ("loss_by_position.png", "shots_sweep.png", "calibration.png",
                 "labels_vs_vocab.png"):
        assert (out / name).read_bytes().startswith(b"\x89PNG")
    html = (out / "report.html").read_text()
    assert "ICLInf" in html and "Fig. 1" in html and "Fig. 7" in html
    # the samples and report hold the input texts: folder 0700, files 0600 (issue 15)
    assert stat.S_IMODE(out.stat().st_mode) == 0o700
    for name in ("samples.jsonl", "report.html", "results.json", "loss_by_position.png"):
        assert stat.S_IMODE((out / name).stat().st_mode) == 0o600, name
    assert set(results["config"]["input_sha256"]) == {"data", "test_data"}

    lines = (out / "samples.jsonl").read_text().splitlines()
    samples = [json.loads(line) for line in lines]
    assert [s["key"] for s in samples] == ["shots=1/q=0", "shots=1/q=1", "shots=2/q=0",
                                           "shots=2/q=1"]
    # the query's row in the test set is its id; the number of shots has its own column
    assert [(s["id"], s["shots"]) for s in samples] == [("0", 1), ("1", 1), ("0", 2), ("1", 2)]
    s = samples[2]
    assert len(s["exemplar_indices"]) == 2 and s["shots"] == 2
    v = s["variants"]["labels"]
    assert len(v["dist"]) == 3 and len(v["loo_dists"]) == 2 and len(v["loss_by_position"]) == 2
    assert v["iclinf"] == max(v["loss_by_position"]) and isinstance(v["correct"], bool)
    # a sweep uses nested exemplar sets
    assert samples[0]["exemplar_indices"] == s["exemplar_indices"][:1]

    # resume: the finished queries are kept as they are, only the new ones are computed
    code, stdout, err = run(capsys, *args, "--limit", "3", "--resume")
    assert code == 0, err
    assert "resuming: 4 of 6" in err
    new_lines = (out / "samples.jsonl").read_text().splitlines()
    assert new_lines[:4] == lines and len(new_lines) == 6
    assert json.loads((out / "results.json").read_text())["n_effective"] == 6

    # resume with a different config is refused
    changed = list(args)
    changed[changed.index("--calibration") + 1] = "on"
    code, _, err = run(capsys, *changed, "--resume")
    assert code == 2 and "config differs" in err


def test_bad_input_is_reported_before_the_model_is_loaded(capsys, tmp_path, files):
    train, _ = files
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "a", "label": "yes"}\n{"text": "", "label": "no"}\n')
    base = ["icl", "--model", str(tmp_path / "no-such-model"), *TEMPLATES]
    code, _, err = run(capsys, *base, "--data", train, "--test-data", str(bad))
    assert code == 2 and "bad.jsonl:2" in err and "field 'text'" in err and "is empty" in err
    bad.write_text('{"text": "a", "label": "maybe"}\n')
    code, _, err = run(capsys, *base, "--data", train, "--test-data", str(bad))
    assert code == 2 and "bad.jsonl:1" in err and "unknown label 'maybe'" in err
    bad.write_text('{"text": "a", "label": "yes"}\nnot json\n')
    code, _, err = run(capsys, *base, "--data", train, "--test-data", str(bad))
    assert code == 2 and "bad.jsonl:2" in err and "not valid JSON" in err
    code, _, err = run(capsys, *base, "--data", train, "--test-data", files[1], "--shots", "9")
    assert code == 2 and "--shots=9" in err and "only 8" in err
    code, _, err = run(capsys, *base, "--data", train, "--test-data", files[1],
                       "--calibration", "sometimes")
    assert code == 2 and "--calibration must be off, on or both" in err
    assert "no-such-model" not in err  # none of these got as far as the model


def test_labels_sharing_a_first_token_through_the_cli(capsys, tmp_path, tiny_model_dir,
                                                      one_thread):
    pairs = [("the city", "capital city"), ("the country", "capital country")] * 2
    train = write_jsonl(tmp_path / "train.jsonl", pairs)
    args = ["icl", "--model", tiny_model_dir, "--data", train, "--test-data", train, *TEMPLATES,
            "--shots", "1", "--output", str(tmp_path / "out")]
    code, _, err = run(capsys, *args)
    assert code == 2 and "--label-scoring='full'" in err and "share their first token" in err
    code, stdout, err = run(capsys, *args[:-1], str(tmp_path / "out2"), "--label-scoring", "full")
    assert code == 0, err


@pytest.mark.integration
def test_icl_demo_on_the_default_model(capsys, tmp_path, default_lm):
    out = tmp_path / "demo"
    code, stdout, err = run(capsys, "icl", "--data", "demo", "--shots", "2", "--queries", "3",
                            "--device", "cpu", "--output", str(out))
    assert code == 0, err
    results = json.loads((out / "results.json").read_text())
    cell = results["summary"]["iclinf"]["2"]["labels"]
    assert cell["n"] == 3 and cell["iclinf_mean"] > 0
    assert results["summary"]["labels"] == ["World", "Sports", "Business", "Technology"]
    assert results["provenance"]["label_tokens"]["World"] == default_lm.encode(" World")
    samples = [json.loads(x) for x in (out / "samples.jsonl").read_text().splitlines()]
    assert len(samples) == 3 and all(len(s["variants"]["labels"]["dist"]) == 4 for s in samples)
    assert (out / "report.html").is_file() and (out / "loss_by_position.png").is_file()
