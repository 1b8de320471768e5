"""Quiet, consistent output: no weight-loading bars, a short LM repr, plain text (no ANSI, no
box drawing) off a terminal and in notebooks, a progress bar that moves with the tokens
computed, and a Hub id that fails within seconds when the Hub cannot be reached."""

from __future__ import annotations

import sys
import time
import types

import pytest
from conftest import run_cli
from huggingface_hub import constants
from transformers.utils import logging as hf_logging

import ctxleak
from ctxleak.engine import progress as engine_progress
from ctxleak.engine.models import load_model
from ctxleak.engine.scoring import continuation_logprobs
from ctxleak.errors import ConfigError
from ctxleak.report.console import closing_line, console
from ctxleak.run import progress as run_progress
from ctxleak.run import runner

BOX = "│┃━─╭╮╰╯┏┓"


def test_load_model_shows_no_loading_bar_and_leaves_the_setting_alone(tiny_dir, capfd):
    before = hf_logging.is_progress_bar_enabled()
    lm = load_model(tiny_dir, device="cpu")
    err = capfd.readouterr().err
    assert "Loading weights" not in err and "%|" not in err
    assert hf_logging.is_progress_bar_enabled() == before
    n = sum(p.numel() for p in lm.model.parameters())
    assert repr(lm) == (f"LM(name={tiny_dir!r}, device='cpu', dtype='float32', "
                        f"params={n / 1e6:.0f}M)" if n >= 1e6 else
                        f"LM(name={tiny_dir!r}, device='cpu', dtype='float32', params={n})")
    assert len(repr(lm)) < 200 and "\n" not in repr(lm)


def test_lm_repr_counts_millions(llama_lm):
    from dataclasses import replace

    class Big:
        def parameters(self):
            import torch
            return [torch.zeros(1000, 1000), torch.zeros(34_515_000)]

    big = replace(llama_lm, model=Big())
    assert repr(big).endswith("params=36M)") and "tiny-llama" in repr(big)


def test_notebooks_without_ipywidgets_get_the_text_bar(monkeypatch):
    from tqdm import tqdm as text_tqdm
    from tqdm.auto import tqdm as auto_tqdm

    monkeypatch.delitem(sys.modules, "IPython", raising=False)
    assert run_progress.tqdm_class() is text_tqdm
    kernel = types.SimpleNamespace(kernel=object())  # a shell inside a Jupyter kernel
    monkeypatch.setitem(sys.modules, "IPython", types.SimpleNamespace(get_ipython=lambda: kernel))
    real = run_progress.importlib.util.find_spec
    monkeypatch.setattr(run_progress.importlib.util, "find_spec",
                        lambda name, *a: None if name == "ipywidgets" else real(name, *a))
    assert run_progress.tqdm_class() is text_tqdm
    monkeypatch.setattr(run_progress.importlib.util, "find_spec", lambda name, *a: object())
    assert run_progress.tqdm_class() is auto_tqdm


def test_engine_forward_passes_report_their_tokens(llama_lm):
    seen = []
    prompts = [llama_lm.encode("the capital of france is"), llama_lm.encode("rome is")]
    with engine_progress.counting(seen.append):
        continuation_logprobs(llama_lm, prompts, llama_lm.encode("paris ."))
    assert seen and sum(seen) >= sum(len(p) for p in prompts)
    count = len(seen)
    engine_progress.count_tokens(5)  # no listener: nothing happens
    assert len(seen) == count


def test_progress_moves_with_tokens_inside_a_batch(llama_lm, tmp_path, monkeypatch):
    events = []

    class Recording(run_progress.RunProgress):
        def add_tokens(self, n):
            events.append(("tokens", n))
            super().add_tokens(n)

        def example_done(self):
            events.append(("example", self.bar.n))
            super().example_done()

        def close(self):
            events.append(("close", self.bar.n, self.bar.total, self.tokens))
            super().close()

    monkeypatch.setattr(runner, "RunProgress", Recording)
    docs = [{"id": f"d{i}", "context": "the capital of france is paris .", "query": "what ?"}
            for i in range(4)]
    ctxleak.influence(llama_lm, docs, max_new_tokens=3, min_new_tokens=3, batch_size="4",
                      output=str(tmp_path / "run"), progress=True)
    first_done = next(i for i, e in enumerate(events) if e[0] == "example")
    # the bar moved (tokens) while the batch of 4 was measured, before any example finished
    assert sum(e[1] for e in events[:first_done] if e[0] == "tokens") > 0
    assert events[first_done][1] > 0
    _, n, total, tokens = events[-1]
    assert n == total == tokens and tokens == sum(e[1] for e in events if e[0] == "tokens")
    assert sum(1 for e in events if e[0] == "example") == 4


def test_under_auto_the_first_example_is_measured_alone(llama_lm, tmp_path, monkeypatch):
    """The bar estimates the run's tokens, so the time left, from the first example within
    seconds; the rest are batched as before, and the records are those of one batch."""
    from ctxleak.methods.influence.method import InfluenceMethod

    sizes = []
    measure = InfluenceMethod.measure

    def recording(self, over, ready, items):
        sizes.append(len(items))
        return measure(self, over, ready, items)

    monkeypatch.setattr(InfluenceMethod, "measure", recording)
    docs = [{"id": f"d{i}", "context": "the capital of france is paris .", "query": "what ?"}
            for i in range(4)]
    runs = [ctxleak.influence(llama_lm, docs, max_new_tokens=3, min_new_tokens=3,
                              batch_size=size, batch_invariant=True, progress=False,
                              output=str(tmp_path / size)) for size in ("auto", "4")]
    assert sizes == [1, 3, 4]
    assert [r["response_ids"] for r in runs[0].records] == \
        [r["response_ids"] for r in runs[1].records]


def test_progress_falls_back_to_examples_without_tokens():
    bar = run_progress.RunProgress(3, "x")
    bar.example_done()
    bar.example_done()
    assert bar.by_examples and bar.bar.n == 2 and bar.bar.total == 3
    with_tokens = run_progress.RunProgress(4, "y")
    with_tokens.add_tokens(200)  # a batch of two examples
    with_tokens.example_done()
    with_tokens.example_done()
    assert with_tokens.bar.total is None  # estimated once the batch is in, not from its first
    with_tokens.add_tokens(10)  # the next batch starts: 100 tokens per example, 400 in all
    assert with_tokens.bar.total == 400 and with_tokens.bar.n == 210


def test_show_is_plain_text_off_a_terminal_and_in_jupyter(llama_lm, tmp_path, capsys,
                                                          monkeypatch):
    result = ctxleak.influence(llama_lm, [{"context": "the capital of france is paris .",
                                           "query": "what ?"}], max_new_tokens=2,
                               output=str(tmp_path / "r"), progress=False)
    capsys.readouterr()
    import builtins

    class ZMQInteractiveShell:  # what rich looks for to draw in a notebook
        pass

    monkeypatch.setattr(builtins, "get_ipython", lambda: ZMQInteractiveShell(), raising=False)
    result.show()
    out = capsys.readouterr().out
    assert "\x1b[" not in out and not any(c in out for c in BOX)
    assert out.rstrip().splitlines()[-1] == closing_line(result.path)
    assert all(line == line.rstrip() for line in out.splitlines())


def test_piped_tables_are_plain_and_full_width(capsys):
    code, out, _ = run_cli(["models"], capsys)
    assert code == 0 and "default" in out
    assert not any(c in out for c in BOX) and "\x1b[" not in out
    assert all(line == line.rstrip() for line in out.splitlines())
    row = next(line for line in out.splitlines() if line.startswith("default"))
    assert "SmolLM2-135M-Instruct" in row  # the description on its row, not wrapped or cut
    code, tsv, _ = run_cli(["--plain", "models"], capsys)
    assert "name\tstatus\tdescription" in tsv
    assert console().print  # the console stays usable for other output


def test_offline_hub_id_fails_at_once_with_the_hint(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    t0 = time.time()
    with pytest.raises(ConfigError, match="HF_HUB_OFFLINE"):
        load_model("ctxleak-test/not-a-cached-model", device="cpu")
    assert time.time() - t0 < 5


def test_unreachable_hub_fails_within_seconds_with_the_hint(monkeypatch):
    # online as far as huggingface_hub knows, but the endpoint refuses connections
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    t0 = time.time()
    with pytest.raises(ConfigError) as info:
        load_model("ctxleak-test/not-a-cached-model", device="cpu")
    assert time.time() - t0 < 5
    message = str(info.value)
    assert "cannot be reached" in message and "127.0.0.1:9" in message
    assert "HF_HUB_OFFLINE=1" in message and "\n" not in message
