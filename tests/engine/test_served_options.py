"""How long a served model's requests may take and how often a failed one is sent again, set
where the served model is named (``load_model``, every API function, the CLI flags
``--request-timeout SECONDS`` and ``--retries N``, and YAML): they reach the client, bad
values are refused naming the flag, and a run may resume with other values (they change no
number). No server is needed: the URL points at a closed port, or the client is recorded."""

from __future__ import annotations

import pytest
from conftest import run_cli

import ctxleak
from ctxleak.engine.models import load_model
from ctxleak.engine.served import client_options
from ctxleak.engine.served import connect as served_module
from ctxleak.engine.served_client import ClientOptions, ServerError
from ctxleak.errors import ConfigError
from ctxleak.run.options import RunOptions
from ctxleak.run.rundir import config_differences

DEAD = "http://127.0.0.1:9"


class Reached(Exception):
    """Raised by the recorded client once it has been built."""


@pytest.fixture
def recorded(monkeypatch):
    """The options every ServedClient is built with; building one stops the call there."""
    seen: list[ClientOptions] = []

    def client(url, api_key=None, options=None):
        seen.append(options)
        raise Reached(url)

    monkeypatch.setattr(served_module, "ServedClient", client)
    return seen


def test_user_values_override_the_client_defaults():
    default = ClientOptions()
    assert client_options(None) == default
    got = client_options(None, request_timeout=7, retries=0)
    assert got.timeout == 7.0 and got.attempts == 1  # 0 retries: tried once in all
    assert client_options(None, retries=5).attempts == 6 and got.max_in_flight == 32
    base = ClientOptions(max_in_flight=2, timeout=3.0)
    kept = client_options(base, retries=2)
    assert (kept.max_in_flight, kept.timeout, kept.attempts) == (2, 3.0, 3)


@pytest.mark.parametrize("keyword, value", [
    ("request_timeout", 0), ("request_timeout", -1.5), ("request_timeout", float("inf")),
    ("request_timeout", float("nan")), ("request_timeout", "10"), ("request_timeout", True),
    ("retries", -1), ("retries", 1.5), ("retries", "3"), ("retries", True)])
def test_bad_values_are_refused_naming_the_keyword(keyword, value):
    with pytest.raises(ConfigError) as info:
        client_options(None, **{keyword: value})
    assert info.value.param == keyword and keyword in str(info.value)
    with pytest.raises(ConfigError) as info:
        RunOptions(server_url=DEAD, **{keyword: value}).check()
    assert info.value.param == keyword


def test_load_model_reaches_the_client(recorded):
    with pytest.raises(Reached):
        load_model("default", server_url=DEAD, request_timeout=12.5, retries=2)
    assert recorded[-1].timeout == 12.5 and recorded[-1].attempts == 3


def test_serve_takes_a_scheme_in_any_case_and_checks_the_port(recorded):
    """``serve`` and ``load_model(server_url=)`` check the URL as a run does: ``HTTP://`` is
    ``http://`` (schemes are case-insensitive), a port out of range is one clear line that shows
    the URL as given, before any client is built."""
    with pytest.raises(Reached) as reached:
        load_model("default", server_url="HTTP://127.0.0.1:9")
    assert str(reached.value) == "http://127.0.0.1:9"
    before = len(recorded)
    with pytest.raises(ConfigError, match=r"'HTTP://127\.0\.0\.1:99999'.*port") as info:
        load_model("default", server_url="HTTP://127.0.0.1:99999")
    assert info.value.param == "server_url" and len(recorded) == before


def test_an_api_run_reaches_the_client(recorded, tmp_path):
    with pytest.raises(Reached):
        ctxleak.influence(server_url=DEAD, temperature=1.0, request_timeout=9, retries=0,
                          output=str(tmp_path / "run"), progress=False)
    assert recorded[-1].timeout == 9.0 and recorded[-1].attempts == 1


def test_the_cli_flags_reach_the_client(recorded, capsys, tmp_path):
    with pytest.raises(Reached):
        run_cli(["influence", "--server-url", DEAD, "--temperature", "1", "--request-timeout",
                 "4.5", "--retries", "1", "--output", str(tmp_path / "run")], capsys)
    assert recorded[-1].timeout == 4.5 and recorded[-1].attempts == 2


def test_yaml_keys_reach_the_client(recorded, capsys, tmp_path):
    config = tmp_path / "served.yaml"
    config.write_text("request-timeout: 30\nretries: 6\n")
    with pytest.raises(Reached):
        run_cli(["influence", "--config", str(config), "--server-url", DEAD, "--temperature",
                 "1", "--output", str(tmp_path / "run")], capsys)
    assert recorded[-1].timeout == 30.0 and recorded[-1].attempts == 7


def test_retries_against_a_closed_port():
    """The real client: a refused connection is tried ``retries + 1`` times, then one error."""
    with pytest.raises(ServerError, match="after 1 try "):
        load_model("default", server_url=DEAD, retries=0)
    with pytest.raises(ServerError, match="after 2 tries"):
        load_model("default", server_url=DEAD, retries=1, request_timeout=2)


@pytest.mark.parametrize("argv, says", [
    (["--request-timeout", "0"], "--request-timeout must be a finite number of seconds > 0"),
    (["--request-timeout", "-3"], "--request-timeout must be a finite number of seconds > 0"),
    (["--retries", "-1"], "--retries must be an integer ≥ 0")])
def test_the_cli_names_the_flag_of_a_bad_value(recorded, capsys, tmp_path, argv, says):
    code, _, err = run_cli(["influence", "--server-url", DEAD, *argv, "--output",
                            str(tmp_path / "run")], capsys)
    assert code == 2 and says in err
    assert recorded == []  # refused before any client exists


def test_they_are_resume_neutral():
    old = RunOptions(server_url=DEAD, request_timeout=5, retries=0).to_dict()
    new = RunOptions(server_url=DEAD).to_dict()
    assert "request_timeout" in old and "retries" in old  # recorded in config.json
    assert config_differences(old, new) == []
    assert config_differences(old, {**new, "seed": 1}) == ["seed"]  # a real change still shows
