"""A served run whose real vLLM server goes away gives a clear error and ``resume`` finishes it on
another address. A slow server, no server and every other way a server fails are checked against
the fake server in the fast tier (tests/served/test_fake_served.py)."""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from helpers.relay import Relay

import ctxleak
from ctxleak.engine.served_client import ServerError


@pytest.mark.served
@pytest.mark.integration
def test_server_gone_mid_run_then_resume(vllm_server, tmp_path):
    """An influence run (one example per batch) reaches the session's real vLLM server through a
    relay, which is cut (its connections reset, new ones refused: what a client sees when the
    server is killed) once the first record is on disk. The run fails with an error that names
    the address and says how to finish it; the server's own address (the URL may change on
    resume) and ``resume=True`` finish the run, keeping the records written before the cut. The
    fast tier's fake server checks the same, its server dying, on every commit."""
    out = tmp_path / "run"
    samples = out / "samples.jsonl"
    kw = dict(temperature=1.0, limit=2, seed=0, max_new_tokens=16, batch_size="1",
              output=str(out), progress=False)
    first = Relay(vllm_server.url)
    try:
        with ThreadPoolExecutor(1) as pool:
            running = pool.submit(ctxleak.influence, "default", "demo", server_url=first.url,
                                  served_model=vllm_server.served_name, **kw)
            deadline = time.monotonic() + 600
            while not (samples.is_file() and samples.read_text().strip()):
                assert not running.done(), f"the run ended before the kill: {running.result()}"
                assert time.monotonic() < deadline, "no record within 600 s"
                time.sleep(0.2)
            first.cut()
            with pytest.raises(ServerError) as err:
                running.result(timeout=600)
    finally:
        first.cut()
    message = str(err.value)
    assert first.url in message
    assert "--resume" in message
    kept = [json.loads(line) for line in samples.read_text().splitlines()]
    assert len(kept) == 1

    assert vllm_server.url != first.url
    done = ctxleak.influence("default", "demo", server_url=vllm_server.url,
                             served_model=vllm_server.served_name, resume=True, **kw)
    assert len(done.records) == 2
    on_disk = [json.loads(line) for line in samples.read_text().splitlines()]
    assert len(on_disk) == 2
    assert on_disk[:len(kept)] == kept  # the records before the kill are kept as written
    assert len({r["id"] for r in on_disk}) == 2
    assert json.loads((out / "results.json").read_text())["provenance"]["model"]["base_url"] \
        == vllm_server.url


@pytest.mark.served
@pytest.mark.integration
def test_default_dir_is_a_model_folder(default_dir):
    """What the server is started on: a Hugging Face folder with ``architectures`` and the
    tokenizer (a folder without ``architectures`` is served silently wrong)."""
    config = json.loads((Path(default_dir) / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"]
    assert (Path(default_dir) / "tokenizer.json").is_file()
