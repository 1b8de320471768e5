"""Where vLLM is unavailable the served tests skip, unless ``CTXLEAK_REQUIRE_VLLM=1`` (CI sets
it): then they fail with the reason, so a broken ``scripts/setup_vllm.sh`` cannot pass CI as a
row of skipped tests. Fast tier: vLLM's absence is simulated, no server is started."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import vllm_server
from helpers.vllm_server import REQUIRE_ENV, required_vllm_python

WHY = "no vLLM server virtualenv at /nowhere (simulated)"


@pytest.fixture
def no_vllm(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    monkeypatch.setattr(vllm_server, "vllm_python", lambda: (None, WHY))
    return monkeypatch


@pytest.mark.parametrize("value", [None, "", "0"])
def test_without_the_switch_a_missing_vllm_skips_with_the_reason(no_vllm, value):
    if value is None:
        no_vllm.delenv(REQUIRE_ENV, raising=False)
    else:
        no_vllm.setenv(REQUIRE_ENV, value)
    with pytest.raises(pytest.skip.Exception, match="simulated"):
        required_vllm_python()


def test_with_the_switch_a_missing_vllm_fails_with_the_reason(no_vllm):
    no_vllm.setenv(REQUIRE_ENV, "1")
    with pytest.raises(pytest.fail.Exception) as failed:
        required_vllm_python()
    assert f"{REQUIRE_ENV}=1" in str(failed.value) and WHY in str(failed.value)


def test_an_available_vllm_is_returned_whatever_the_switch(monkeypatch):
    python = Path("/venv-vllm/bin/python")
    monkeypatch.setattr(vllm_server, "vllm_python", lambda: (python, ""))
    for value in ("1", "0"):
        monkeypatch.setenv(REQUIRE_ENV, value)
        assert required_vllm_python() == python


def test_ci_requires_vllm():
    ci = (vllm_server.REPO / ".ci" / "run").read_text()
    assert f"export {REQUIRE_ENV}=1" in ci
