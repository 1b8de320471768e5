"""Connecting to a served model (``serve``) against the fake server (tests/helpers/fake_server.py)
without the checks before a run (``check=False``: only the server's listing and version are
asked): the facts the server gives, the EOS ids of the tokenizer folder's generation config, and
each way the connection is refused (several models and none named, a tokenizer that does not
load, a chat template asked for and missing, a server failing the dialect's probe)."""

from __future__ import annotations

import json

import pytest
from helpers.fake_server import Fault, fake_vllm

from ctxleak.engine.served import OpenAIServedLM, VLLMServedLM, serve
from ctxleak.engine.served.connect import _server_facts
from ctxleak.engine.served_client import ServedClient, ServerError
from ctxleak.errors import ConfigError


@pytest.fixture(scope="module")
def server(llama_lm):
    with fake_vllm(llama_lm, served_name="tiny", max_model_len=128, root="/models/tiny") as up:
        yield up


@pytest.fixture
def folder(llama_lm, tmp_path):
    """The tiny model's tokenizer saved to a folder (no chat template)."""
    llama_lm.tokenizer.save_pretrained(tmp_path)
    return tmp_path


def test_the_servers_facts_and_the_folders_eos_ids(server, folder, llama_lm):
    (folder / "generation_config.json").write_text(json.dumps({"eos_token_id": [2, 7]}))
    lm = serve("tiny", server.url, tokenizer=str(folder), api="vllm", check=False)
    assert type(lm) is VLLMServedLM and lm.eos_ids == [2, 7]
    assert lm.max_model_len == 128 and lm.info.tokenizer == str(folder)
    assert lm.info.server == {"id": "tiny", "max_model_len": 128, "root": "/models/tiny",
                              "owned_by": "fake", "version": "fake-vllm"}
    assert lm.identity() == {"root": "/models/tiny", "max_model_len": 128,
                             "version": "fake-vllm"}
    assert lm.bos_ids == llama_lm.bos_ids and not lm.use_chat_template
    (folder / "generation_config.json").write_text(json.dumps({"eos_token_id": 9}))
    assert serve("tiny", server.url, tokenizer=str(folder), api="vllm", check=False).eos_ids \
        == [2, 9]
    assert all(path != "/v1/completions" for path, _ in server.requests)  # no check was run


def test_a_tokenizer_that_does_not_load_is_named(server, tmp_path):
    missing = tmp_path / "no-tokenizer"
    missing.mkdir()
    with pytest.raises(ConfigError, match=f"could not load the tokenizer '{missing}' of the "
                                          "served model") as error:
        serve("tiny", server.url, tokenizer=str(missing), check=False)
    assert error.value.param == "tokenizer"


def test_a_chat_template_asked_for_and_missing_is_refused(server, folder):
    with pytest.raises(ConfigError, match="chat_template='on', but the tokenizer") as error:
        serve("tiny", server.url, tokenizer=str(folder), chat_template="on", check=False)
    assert error.value.param == "chat_template"


def test_a_server_of_several_models_needs_the_one_named(llama_lm, folder):
    listing = {"object": "list", "data": [{"id": "a", "root": "ra"},
                                          {"id": "tiny", "root": "rt", "max_model_len": 64}]}
    with fake_vllm(llama_lm, models_answer=listing) as up:
        with pytest.raises(ConfigError, match=r"serves 2 models \(\['a', 'tiny'\]\): name one "
                                              "with served_model") as error:
            serve("tiny", up.url, tokenizer=str(folder), check=False)
        assert error.value.param == "served_model"
        lm = serve("tiny", up.url, served_model="tiny", tokenizer=str(folder), api="vllm",
                   check=False)
    assert lm.info.served_model == "tiny" and lm.max_model_len == 64
    assert lm.info.server["root"] == "rt"


@pytest.mark.parametrize("status, dialect", [(400, OpenAIServedLM), (500, None)])
def test_the_dialects_probe_falls_back_only_on_a_refusal(llama_lm, folder, status, dialect):
    """``api="auto"``: HTTP 400 to vLLM's fields is a plain OpenAI server; any other failure
    is the server's, raised as it is."""
    with fake_vllm(llama_lm, fault=Fault("http", status=status)) as up:
        if dialect is not None:
            assert type(serve("tiny", up.url, tokenizer=str(folder), retries=0,
                              check=False)) is dialect
            return
        with pytest.raises(ServerError, match=f"answered HTTP {status}") as error:
            serve("tiny", up.url, tokenizer=str(folder), retries=0, check=False)
    assert error.value.status == status


class Listing:
    """A client whose ``get`` answers ``/v1/models`` with one model and ``/version`` with
    ``version`` (an exception: raised)."""

    url = "http://127.0.0.1:9"

    def __init__(self, version):
        self.version = version

    def get(self, path):
        if path == "/v1/models":
            return {"data": [{"id": "m", "created": 123, "root": "r"}]}
        if isinstance(self.version, Exception):
            raise self.version
        return self.version


@pytest.mark.parametrize("version", [ServerError("HTTP 404", status=404), {"build": "x"}, []])
def test_a_server_without_a_version_is_described_without_one(version):
    client: ServedClient = Listing(version)  # type: ignore[assignment]
    assert _server_facts(client, None) == ("m", {"id": "m", "root": "r"})
