"""Models that cannot be loaded, through the CLI (issue 22): exit status 2, one line on stderr
that names the folder or file at fault (or the flag), and no traceback. Each broken folder is a
copy of a tiny loadable one (tests/helpers/tiny_model_dirs.py), broken one way."""

from __future__ import annotations

import shutil

import pytest
import torch
from conftest import run_cli
from helpers.tiny_model_dirs import BROKEN, broken_dir, tiny_llama_dir
from huggingface_hub import constants

from ctxleak.engine.local import devices
from ctxleak.engine.model_files import fingerprint
from ctxleak.run.rundir import MODEL_KEY, RunDir

# (flags, substrings the single error line must contain); {dir} is the model folder under test
CASES = {
    "corrupt weights": (["--model", "{dir}"], ["{dir}/model.safetensors",
                                               "not a safetensors file, or is cut short"]),
    "truncated weights": (["--model", "{dir}"], ["{dir}/model.safetensors", "is cut short"]),
    "no config": (["--model", "{dir}"], ["{dir}", "without config.json"]),
    "config not JSON": (["--model", "{dir}"], ["{dir}/config.json", "not valid JSON"]),
    "unknown architecture": (["--model", "{dir}"], ["{dir}/config.json", "'foobar'",
                                                    "--trust-remote-code"]),
    "no tokenizer": (["--model", "{dir}"], ["{dir}", "has no tokenizer files"]),
    "no weights": (["--model", "{dir}"], ["{dir}", "has no weight files"]),
    "cuda on a CPU build": (["--device", "cuda"], ["--device='cuda'", "without CUDA",
                                                   "--device='cpu'"]),
    "mps absent": (["--device", "mps"], ["--device='mps'", "no Apple GPU"]),
    "hub id offline": (["--model", "someorg/somemodel"], ["'someorg/somemodel'",
                                                          "not in the Hugging Face cache",
                                                          "HF_HUB_OFFLINE"]),
    "weights replaced before resume": (["--model", "{dir}", "--resume"], [
        "the files of model '{dir}' changed", "model.safetensors changed", "--output"]),
}
assert set(BROKEN) <= set(CASES)


@pytest.fixture(scope="module")
def good_dir(tmp_path_factory):
    return tiny_llama_dir(tmp_path_factory.mktemp("models") / "good")


def _prepare(kind: str, good_dir, tmp_path, monkeypatch) -> str:
    """The model folder of case ``kind`` (and the run folder or environment it needs)."""
    folder = tmp_path / "model"
    if kind in BROKEN:
        return str(broken_dir(good_dir, kind, folder))
    shutil.copytree(good_dir, folder)
    if kind == "cuda on a CPU build":
        monkeypatch.setattr(torch.version, "cuda", None)
        monkeypatch.setattr(torch.version, "hip", None)
    elif kind == "mps absent":
        monkeypatch.setattr(devices, "_mps_available", lambda: False)
    elif kind == "hub id offline":
        monkeypatch.setenv("HF_HUB_OFFLINE", "1")
        monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    elif kind == "weights replaced before resume":
        run = RunDir(tmp_path / "out", {"command": "influence", "model": str(folder),
                                        MODEL_KEY: fingerprint(folder)})
        run.append_sample({"id": "x"})
        run.close()
        other = tiny_llama_dir(tmp_path / "other", seed=5)
        shutil.copy(other / "model.safetensors", folder / "model.safetensors")
    return str(folder)


@pytest.mark.parametrize("kind", list(CASES))
def test_model_that_cannot_load_is_one_line(kind, good_dir, tmp_path, capsys, monkeypatch):
    folder = _prepare(kind, good_dir, tmp_path, monkeypatch)
    capsys.readouterr()  # what preparing printed
    flags, expected = CASES[kind]
    argv = ["influence", "--data", "demo", "--limit", "1", "--max-new-tokens", "2",
            "--output", str(tmp_path / "out")]
    argv += [flag.replace("{dir}", folder) for flag in flags]
    if "--model" not in argv:
        argv += ["--model", folder]
    code, _, err = run_cli(argv, capsys)
    lines = err.strip().splitlines()
    assert code == 2, err
    assert len(lines) == 1 and "Traceback" not in err, err
    for text in expected:
        assert text.replace("{dir}", folder) in lines[0], lines[0]
