"""The flags of a served model, checked where they are parsed, before anything is loaded or
contacted: a server URL with a bad port or host is one line naming the URL as given, a scheme
in any case is accepted, and the options only a served model reads are refused without
``--server-url`` (in the CLI and in the Python API), so no run folder records a served model that
was never contacted."""

from __future__ import annotations

import pytest
from conftest import run_cli

import ctxleak
from ctxleak.errors import ConfigError
from ctxleak.run.options import RunOptions, check_server_url


def _one_line_error(argv, capsys):
    code, _, err = run_cli(argv, capsys)
    assert code == 2, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    return err


@pytest.mark.parametrize("url, words", [
    ("http://127.0.0.1:99999", ["http://127.0.0.1:99999", "port", "65535"]),  # the example
    ("http://127.0.0.1:0", ["http://127.0.0.1:0", "port 0"]),
    ("http://localhost:80a", ["http://localhost:80a", "port"]),
    ("http://[::1:8000", ["http://[::1:8000", "IPv6"]),
    ("http://exa mple.com:8000", ["exa mple.com", "host"]),
    ("http://-bad-.example:8000", ["-bad-.example", "host"])])
def test_a_bad_port_or_host_is_one_line_naming_the_url(url, words, tmp_path, capsys):
    err = _one_line_error(["influence", "--server-url", url, "--temperature", "1",
                           "--output", str(tmp_path / "run")], capsys)
    assert all(w in err for w in words), err
    assert "--server-url" in err and not (tmp_path / "run").exists()
    with pytest.raises(ConfigError) as info:
        ctxleak.influence(data="demo", server_url=url, output=str(tmp_path / "api"))
    assert info.value.param == "server_url" and not (tmp_path / "api").exists()


@pytest.mark.parametrize("url", ["HTTP://127.0.0.1:9", "Https://LocalHost:8000/v1"])
def test_a_scheme_in_any_case_is_accepted(url):
    check_server_url(url)
    options = RunOptions(server_url=url).check()
    assert options.server_url.startswith(("http://", "https://"))
    assert options.server_url.split("://", 1)[1] == url.split("://", 1)[1]


def test_a_scheme_in_capitals_reaches_the_server(tmp_path, capsys):
    code, _, err = run_cli(["influence", "--server-url", "HTTP://127.0.0.1:9", "--retries", "0",
                            "--temperature", "1", "--limit", "1",
                            "--output", str(tmp_path / "run")], capsys)
    assert code != 0 and "must start with" not in err and "127.0.0.1:9" in err, err
    assert "Traceback" not in err


@pytest.mark.parametrize("url", ["FTP://Host.Example:21", "Localhost:8000"])
def test_a_refused_url_is_shown_as_given(url):
    with pytest.raises(ConfigError) as info:
        check_server_url(url)
    assert url in str(info.value)


@pytest.mark.parametrize("flag, value, name", [
    ("--served-model", "llama", "served_model"),  # the example's three
    ("--request-timeout", "30", "request_timeout"),
    ("--retries", "2", "retries"),
    ("--tokenizer", "HuggingFaceTB/SmolLM2-135M-Instruct", "tokenizer")])
def test_served_only_flags_need_a_server_url(flag, value, name, tmp_path, capsys):
    err = _one_line_error(["influence", flag, value, "--output", str(tmp_path / "run")], capsys)
    assert flag in err and "--server-url" in err, err
    assert not (tmp_path / "run").exists()  # no config.json records a server never contacted
    typed = {"request_timeout": 30.0, "retries": 2}.get(name, value)
    with pytest.raises(ConfigError) as info:
        ctxleak.influence(data="demo", output=str(tmp_path / "api"), **{name: typed})
    assert info.value.param == name and "server_url" in str(info.value)
    assert not (tmp_path / "api").exists()
    with pytest.raises(ConfigError):
        RunOptions(**{name: typed}).check()
    RunOptions(server_url="http://127.0.0.1:9", **{name: typed}).check()  # with one: fine
