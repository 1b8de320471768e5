"""Model capabilities: each method states what it needs given its options, and a backend that
lacks one is refused before the first request, naming what is missing and what to do instead.

The served model here points at a closed port: a refusal that came after a request would be a
ServerError (connection refused), not the MissingCapability these tests expect."""

from __future__ import annotations

import re

import pytest
import typer
from helpers.tiny_models import word_tokenizer

from ctxleak.cli.app import app
from ctxleak.engine import capabilities as caps
from ctxleak.engine.capabilities import MissingCapability, capabilities_of, check_capabilities
from ctxleak.engine.served import OpenAIServedLM, ServedInfo, ServedLM, VLLMServedLM
from ctxleak.engine.served_client import ClientOptions, ServedClient
from ctxleak.methods.audit.method import AuditMethod
from ctxleak.methods.icl.method import ICLInfMethod
from ctxleak.methods.influence.method import InfluenceMethod
from ctxleak.methods.influence.params import InfluenceParams
from ctxleak.methods.pii.method import ProbeMethod
from ctxleak.methods.pii.params import ProbeParams
from ctxleak.methods.susceptibility.method import SusceptibilityMethod, SusceptibilityParams
from ctxleak.run.method import Method
from ctxleak.run.options import RunOptions
from ctxleak.run.runner import run_method

DEAD = "http://127.0.0.1:9"


@pytest.fixture(scope="module")
def served() -> ServedLM:
    """A served model at a closed port, with the tiny models' tokenizer (refusals need no
    real model)."""
    info = ServedInfo(name="tiny", served_model="m", base_url=DEAD, tokenizer="word-level",
                      api="vllm")
    return VLLMServedLM(client=ServedClient(DEAD, options=ClientOptions(attempts=1)),
                    tokenizer=word_tokenizer(add_bos=True), info=info, eos_ids=[2])


@pytest.fixture(scope="module")
def echo() -> ServedLM:
    """The same served model behind a plain OpenAI-compatible server (no whole next-token
    distribution)."""
    info = ServedInfo(name="tiny", served_model="m", base_url=DEAD, tokenizer="word-level",
                      api="openai-echo")
    return OpenAIServedLM(client=ServedClient(DEAD, options=ClientOptions(attempts=1)),
                          tokenizer=word_tokenizer(add_bos=True), info=info, eos_ids=[2])


def test_in_process_has_everything_served_three():
    class InProcess:
        pass

    assert capabilities_of(InProcess()) == caps.IN_PROCESS
    assert caps.SERVED == {caps.CONTINUATION_LOGPROBS, caps.NEXT_TOKEN_LOGPROBS, caps.SAMPLING}
    assert caps.SERVED < caps.SERVED_DISTRIBUTION < caps.IN_PROCESS
    assert caps.SERVED_DISTRIBUTION - caps.SERVED == {caps.NEXT_TOKEN_DISTRIBUTION}


def test_check_names_each_missing_capability(served):
    needs = {caps.SAMPLING: "drawn", caps.WEIGHTS: "fine-tuned: do X",
             caps.EMBEDDING_GRADIENTS: "soft prompt: do Y"}
    with pytest.raises(MissingCapability) as info:
        check_capabilities(served, needs)
    assert set(info.value.missing) == {caps.WEIGHTS, caps.EMBEDDING_GRADIENTS}
    message = str(info.value)
    assert "fine-tuned: do X" in message and "soft prompt: do Y" in message
    assert DEAD in message and "drawn" not in message
    check_capabilities(served, {caps.SAMPLING: "drawn"})  # has it: no error


def influence(**params):
    return InfluenceMethod(RunOptions(), InfluenceParams(**params))


MIXTURES = [  # what needs the whole next-token distribution at every step
    (influence(lambda_=0.5, temperature=1.0), "CID at λ ≠ 1 mixes the whole next-token"),
    (influence(lambda_=0.5, temperature=1.0), r"--lambda 1 \(Python: lambda_=1;"),
    (influence(lambda_="1,2", temperature=1.0), "CID at λ ≠ 1"),
    (influence(lambda_=1.0, temperature=1.0, bounded_eps=2.0), "bounded CID"),
    (influence(lambda_=1.0, temperature=0.8), "temperature T ≠ 1"),
]


@pytest.mark.parametrize("method, expect", [
    (AuditMethod(RunOptions()), "DP mechanism"),
    (SusceptibilityMethod(RunOptions(), SusceptibilityParams(method="fisher")),
     "Fisher susceptibility"),
    (SusceptibilityMethod(RunOptions(), SusceptibilityParams(method="both")),
     "--method mc \\(Python: method='mc'"),
    (ProbeMethod(RunOptions(), ProbeParams(mode="white-box")), "white-box probing"),
    (ProbeMethod(RunOptions(), ProbeParams(mode="white-box")),
     r"--mode black-box \(Python: mode='black-box'\)"),
    (ProbeMethod(RunOptions(), ProbeParams(canary=3)), "canary check"),
    (ProbeMethod(RunOptions(), ProbeParams(canary=3)), r"--canary unset \(Python: canary=None\)"),
])
def test_refused_on_a_served_model_before_any_request(served, method, expect, tmp_path):
    out = tmp_path / "run"
    with pytest.raises(MissingCapability, match=expect) as info:
        run_method(method, served, "demo", output=str(out), progress=False)
    assert "in-process" in str(info.value)
    assert not out.exists()  # refused before the run folder, and before any request


@pytest.mark.parametrize("method, expect", MIXTURES)
def test_cid_is_refused_where_the_server_gives_no_whole_distribution(echo, method, expect,
                                                                     tmp_path):
    """λ ≠ 1, bounded CID and T ≠ 1 run against vLLM (every token's log-prob); a plain
    OpenAI-compatible server is refused before any request, saying what to do instead."""
    out = tmp_path / "run"
    with pytest.raises(MissingCapability, match=expect) as info:
        run_method(method, echo, "demo", output=str(out), progress=False)
    assert "--max-logprobs -1" in str(info.value) and "in-process" in str(info.value)
    assert info.value.missing == (caps.NEXT_TOKEN_DISTRIBUTION,)
    assert not out.exists()


@pytest.mark.parametrize("method", [
    influence(lambda_=1.0, temperature=1.0),
    influence(lambda_=1.0, temperature=1.0, ngram=8),
    ICLInfMethod(RunOptions()),
    ProbeMethod(RunOptions(), ProbeParams(mode="black-box")),
    ProbeMethod(RunOptions(), ProbeParams(mode="in-context")),
])
def test_what_a_served_model_can_run(served, echo, method):
    assert set(method.requires()) <= caps.SERVED
    check_capabilities(served, method.requires())
    check_capabilities(echo, method.requires())


@pytest.mark.parametrize("method", [method for method, _ in MIXTURES[::2]] + [
    SusceptibilityMethod(RunOptions(), SusceptibilityParams(method="mc"))])
def test_what_vllm_can_run_besides(served, method):
    assert set(method.requires()) <= caps.SERVED_DISTRIBUTION
    check_capabilities(served, method.requires())


def test_a_method_that_states_nothing_needs_everything():
    needs = Method().requires()
    assert set(needs) == caps.IN_PROCESS
    assert all("in-process" in why for why in needs.values())


def test_a_served_model_named_by_url_is_refused_before_it_is_contacted(tmp_path):
    common = RunOptions(server_url=DEAD, output=str(tmp_path / "run"))
    method = SusceptibilityMethod(common, SusceptibilityParams(method="fisher"))
    with pytest.raises(MissingCapability, match=r"--method mc \(Python: method='mc'") as info:
        run_method(method, None, "demo", progress=False)
    assert DEAD in str(info.value)  # not a ServerError: nothing was sent to the dead port
    assert not (tmp_path / "run").exists()


def test_server_url_with_credentials_is_refused():
    from ctxleak.errors import ConfigError

    with pytest.raises(ConfigError, match="CTXLEAK_API_KEY"):
        RunOptions(server_url="http://user:secret@127.0.0.1:8000").check()
    with pytest.raises(ConfigError, match="http://HOST:PORT"):
        RunOptions(server_url="127.0.0.1:8000").check()


#: flags of the vLLM server a refusal may name (what to start it with), not ctxleak's
VLLM_FLAGS = {"--max-logprobs"}


@pytest.mark.parametrize("command, method", [
    ("influence", influence(lambda_=0.5, temperature=1.0)),
    ("influence", influence(lambda_=1.0, temperature=0.8)),
    ("influence", influence(lambda_=1.0, temperature=1.0, bounded_eps=2.0)),
    ("audit", AuditMethod(RunOptions())),
    ("susceptibility", SusceptibilityMethod(RunOptions(), SusceptibilityParams(method="both"))),
    ("probe", ProbeMethod(RunOptions(), ProbeParams(mode="white-box", canary=3))),
])
def test_a_refusal_names_flags_its_command_has(command, method):
    """What to do instead names the CLI flag and the Python keyword: each flag exists."""
    cli = typer.main.get_command(app).commands[command]
    flags = {opt for param in cli.params for opt in param.opts}
    named = {flag for why in method.requires().values()
             for flag in re.findall(r"--[a-z][a-z-]*", why)} - VLLM_FLAGS
    assert "--server-url" in named
    assert named <= flags, named - flags
    assert all("Python: " in why for why in method.requires().values() if "--" in why)
