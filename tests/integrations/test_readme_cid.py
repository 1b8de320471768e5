"""The documentation's "CID in your own generate()" example (docs/integration.md, moved there
from the README) runs as written: on a tiny in-process model (its `load_model` swapped for the
tiny Llama) and, marked integration, on the default model."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[2] / "docs" / "integration.md"


def readme_code() -> str:
    section = README.read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", section, flags=re.S)
    assert len(blocks) >= 2  # cid_generate, and the processor in one's own generate call
    return "\n".join(blocks)


def run_example(capsys) -> str:
    exec(compile(readme_code(), str(README), "exec"), {"__name__": "readme"})
    return capsys.readouterr().out


def check_output(out: str) -> None:
    for label in ("[plain]", "[lambda=0.5]", "[eps=1/token]"):
        assert label in out
    assert "composed eps" in out
    assert len(out.strip().splitlines()) == 10  # 3 answers x 3 lines, and the direct call


def test_readme_example_on_a_tiny_model(monkeypatch, capsys, llama_lm):
    import ctxleak.engine.models as models
    import ctxleak.integrations.generate as generate

    monkeypatch.setattr(models, "load_model", lambda *a, **k: llama_lm)
    monkeypatch.setattr(generate, "load_model", lambda *a, **k: llama_lm)  # where CID calls it
    monkeypatch.setattr(llama_lm.tokenizer, "chat_template",  # the example splits the template
                        "{% for m in messages %}question : {{ m['content'] }}{% endfor %} answer :",
                        raising=False)
    check_output(run_example(capsys))


@pytest.mark.integration
def test_readme_example_on_the_default_model(capsys):
    check_output(run_example(capsys))
