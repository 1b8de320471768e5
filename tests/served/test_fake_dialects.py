"""The served backend's wire dialects and its interface against the fake server
(tests/helpers/fake_server.py), in the fast tier: the plain OpenAI-compatible dialect (a server
without vLLM's extensions, which refuses them) scores continuations and candidates as in-process
scoring does; ``api="auto"`` picks the dialect the server answers; the whole next-token
distribution is read from ``logprobs`` or refused with what to do; beam search is read from the
server's beams; ``serve``'s wrong arguments and an operation the backend lacks are refused
before any request."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers.fake_server import VLLM_ONLY, Fault, fake_vllm

from ctxleak.engine.capabilities import (
    EMBEDDING_GRADIENTS,
    NEXT_TOKEN_DISTRIBUTION,
    NEXT_TOKEN_LOGITS,
    MissingCapability,
    check_capabilities,
)
from ctxleak.engine.generation import beam_generate, sample
from ctxleak.engine.models import load_model
from ctxleak.engine.scoring import continuation_logits, continuation_logprobs, next_token_logprobs
from ctxleak.engine.served import (
    DIALECTS,
    OpenAIServedLM,
    ServedLM,
    VLLMServedLM,
    describe_server,
    serve,
)
from ctxleak.engine.served_client import ServerError
from ctxleak.errors import ConfigError

TOL = 1e-5  # nats per token: the same float32 weights, one forward pass here and there
PROMPTS = ["the capital of france is", "rome is in italy . the city"]
CONTS = ["paris . yes", "of rome and the news report said"]
NEVER = (0, 1, 3)  # the tiny tokenizer's <pad>, <bos> and <unk>: never sampled


@pytest.fixture(scope="module")
def plain(tiny):
    """A plain OpenAI-compatible server: vLLM's request fields are refused, no /tokenize."""
    with fake_vllm(tiny, plain=True, never=NEVER) as running:
        yield running


@pytest.fixture(scope="module")
def server(tiny):
    with fake_vllm(tiny, never=NEVER) as running:
        yield running


def _sent(server, since):
    return [b for path, b in server.requests[since:] if path == "/v1/completions"]


# ---- the plain OpenAI-compatible dialect ----------------------------------------------------

def test_auto_picks_the_dialect_the_server_answers(plain, server, tok_dir):
    assert type(serve("tiny", plain.url, tokenizer=tok_dir)) is OpenAIServedLM
    lm = serve("tiny", server.url, tokenizer=tok_dir)
    assert type(lm) is VLLMServedLM and lm.info.api == "vllm"
    assert set(DIALECTS) == {"vllm", "openai-echo"}
    assert "served model 'tiny'" in describe_server(lm) and server.url in lm.describe()


def test_plain_dialect_scores_as_in_process(plain, tiny, tok_dir):
    """Continuations (short and long: one road, echo + logprobs) and candidate next tokens
    (each appended to its prompt and scored) equal in-process scoring; no request carries a
    vLLM field (the plain server would refuse it)."""
    lm = serve("tiny", plain.url, tokenizer=tok_dir, api="openai-echo")
    assert isinstance(lm, OpenAIServedLM) and lm.run_options() == {
        "model": "tiny", "server_url": plain.url, "served_model": "tiny", "tokenizer": tok_dir}
    since = len(plain.requests)
    prompts = [tiny.encode(p) for p in PROMPTS]
    conts = [tiny.encode(c) for c in CONTS]
    for there, here in zip(continuation_logprobs(lm, prompts, conts),
                           continuation_logprobs(tiny, prompts, conts)):
        assert there.dtype == np.float64
        np.testing.assert_allclose(there, here, atol=TOL, rtol=0)
    cands = [5, 9, 20]
    there = next_token_logprobs(lm, prompts, token_ids=cands)
    here = next_token_logprobs(tiny, prompts, token_ids=cands)
    assert there.dtype == here.dtype and tuple(there.shape) == (2, 3)
    np.testing.assert_allclose(there.numpy(), here.numpy(), atol=TOL, rtol=0)
    bodies = _sent(plain, since)
    assert bodies and all(b["echo"] and not set(b) & set(VLLM_ONLY) for b in bodies)


def test_plain_dialect_samples_with_openai_fields_only(plain, tiny, tok_dir):
    """Greedy samples come back as the tokens' ids; the request carries no vLLM field."""
    lm = serve("tiny", plain.url, tokenizer=tok_dir, api="openai-echo")
    since = len(plain.requests)
    prompt = tiny.encode(PROMPTS[0])
    got = sample(lm, [prompt], [3], temperature=0.0, max_new_tokens=5)[0][0]
    assert 0 < len(got.token_ids) <= 5 and not got.records
    body = _sent(plain, since)[-1]
    assert body["logprobs"] == 0 and body["return_tokens_as_token_ids"] is True
    assert body["seed"] == 3 and not set(body) & set(VLLM_ONLY)
    ids = list(prompt)
    for tok in got.token_ids:  # greedy: each token the in-process argmax (specials never drawn)
        logp = next_token_logprobs(tiny, [ids])[0]
        logp[list(NEVER)] = -np.inf
        assert tok == int(logp.argmax())
        ids.append(tok)


def test_a_plain_server_cannot_be_read_as_vllm(plain, tok_dir):
    with pytest.raises(ServerError, match="HTTP 400"):
        serve("tiny", plain.url, tokenizer=tok_dir, api="vllm")


# ---- the whole next-token distribution ------------------------------------------------------

def test_vocabulary_log_probs_are_parsed_by_token_id(server, tiny, tok_dir):
    lm = serve("tiny", server.url, tokenizer=tok_dir)
    prompts = [tiny.encode(p) for p in PROMPTS]
    full = next_token_logprobs(lm, prompts)
    here = next_token_logprobs(tiny, prompts)
    assert tuple(full.shape) == (2, lm.vocab_size) and full.dtype == here.dtype
    np.testing.assert_allclose(full.numpy(), here.numpy()[:, :lm.vocab_size], atol=TOL)
    body = _sent(server, 0)[-1]
    assert body["logprobs"] == lm.vocab_size and body["max_tokens"] == 1


def test_too_few_vocabulary_log_probs_say_what_to_do(tiny, tok_dir):
    """A server capped below the vocabulary (vLLM's --max-logprobs) refuses: the error says to
    start it with --max-logprobs -1; one that answers fewer than asked is refused too."""
    with fake_vllm(tiny, max_logprobs=5) as capped:
        lm = serve("tiny", capped.url, tokenizer=tok_dir)
        with pytest.raises(ServerError, match="--max-logprobs -1") as err:
            next_token_logprobs(lm, [tiny.encode(PROMPTS[0])])
    assert err.value.status == 400
    with fake_vllm(tiny) as few:
        lm = serve("tiny", few.url, tokenizer=tok_dir)
        few.fault = Fault("few-logprobs", after=few.completion_requests)
        with pytest.raises(ServerError, match="covering") as err:
            next_token_logprobs(lm, [tiny.encode(PROMPTS[0])])
    assert few.url in str(err.value)


# ---- beam search ----------------------------------------------------------------------------

def test_beam_search_reads_the_best_beam(tiny, tok_dir):
    """One beam is greedy decoding (equal to in-process); several: the server's best beam, as
    transformers' beam search finds it on the same weights, EOS and what follows dropped."""
    prompts = [tiny.encode(p) for p in PROMPTS]
    with fake_vllm(tiny) as server:  # every token may be decoded, as in-process
        lm = serve("tiny", server.url, tokenizer=tok_dir)
        for beams in (1, 3):
            since = len(server.requests)
            there = beam_generate(lm, prompts, max_new_tokens=4, num_beams=beams)
            assert there == beam_generate(tiny, prompts, max_new_tokens=4, num_beams=beams)
            assert all(not set(ids) & set(lm.eos_ids) for ids in there)
            if beams > 1:
                assert all(b["use_beam_search"] and b["n"] == beams
                           for b in _sent(server, since))
        with pytest.raises(ValueError, match="num_beams"):
            beam_generate(lm, prompts, max_new_tokens=4, num_beams=0)


# ---- refused before any request -------------------------------------------------------------

@pytest.mark.parametrize("kwargs, param", [
    ({"chat_template": "maybe"}, "chat_template"), ({"api": "sglang"}, "api"),
    ({"server_url": "localhost:8000"}, "server_url"), ({"request_timeout": 0}, "request_timeout"),
    ({"request_timeout": float("nan")}, "request_timeout"), ({"retries": -1}, "retries"),
    ({"retries": True}, "retries")])
def test_serve_refuses_wrong_arguments_before_any_request(server, tok_dir, kwargs, param):
    since = len(server.requests)
    kwargs = {"server_url": server.url, **kwargs}
    with pytest.raises(ConfigError) as err:
        serve("tiny", tokenizer=tok_dir, **kwargs)
    assert err.value.param == param
    if param != "api":  # load_model: the one road from a model argument (its dialect: auto)
        with pytest.raises(ConfigError) as again:
            load_model("tiny", tokenizer=tok_dir, **kwargs)
        assert again.value.param == param
    assert len(server.requests) == since


def test_the_interface_refuses_what_a_server_cannot_give_before_any_request(server, plain,
                                                                           tok_dir):
    """Raw logits, a transform of them and the weights are refused by the capability check
    itself (MissingCapability naming the model and what to do), with no request sent; so is the
    whole next-token distribution on a plain OpenAI-compatible server."""
    lm = serve("tiny", server.url, tokenizer=tok_dir)
    assert isinstance(lm, ServedLM) and NEXT_TOKEN_LOGITS not in lm.capabilities
    since = len(server.requests)
    with pytest.raises(MissingCapability, match="CID mixture"):
        next_token_logprobs(lm, [[1, 5, 6]], token_ids=[7], logit_transform=lambda i, x: x)
    with pytest.raises(MissingCapability, match="CID mixture"):
        continuation_logprobs(lm, [[1, 5, 6]], [[7, 8]], logit_transform=lambda i, x: x)
    with pytest.raises(MissingCapability, match="gradients, to measure") as err:
        lm.in_process("gradients, to measure", what="the Fisher estimate")
    assert err.value.missing == ("weights",) and "the Fisher estimate" in str(err.value)
    with pytest.raises(MissingCapability):
        check_capabilities(lm, {EMBEDDING_GRADIENTS: "why"})
    assert len(server.requests) == since
    echo = serve("tiny", plain.url, tokenizer=tok_dir, api="openai-echo")
    since = len(plain.requests)
    with pytest.raises(MissingCapability, match="--max-logprobs -1") as err:
        continuation_logits(echo, [[1, 5, 6]], [[7, 8]], reduce=lambda i, x: x)
    assert err.value.missing == (NEXT_TOKEN_DISTRIBUTION,) and plain.url in str(err.value)
    assert len(plain.requests) == since


def test_the_whole_distribution_at_every_position_is_the_log_softmax_of_the_logits(
        server, tiny, tok_dir):
    """vLLM's dialect gives what mixing distributions needs: at every continuation position
    every token's log-prob, one request per prefix, equal to the in-process logits'
    log-softmax (the logits themselves up to one constant per position)."""
    lm = serve("tiny", server.url, tokenizer=tok_dir)
    prompts = [tiny.encode(p) for p in PROMPTS]
    conts = [tiny.encode(c)[:3] for c in CONTS]
    since = len(server.requests)
    there = continuation_logits(lm, prompts, conts, reduce=lambda i, z: z)
    assert len(server.requests) - since == sum(len(c) for c in conts)
    here = continuation_logits(tiny, prompts, conts, reduce=lambda i, z: z)
    for a, b in zip(there, here):
        assert a.dtype == torch.float64 and a.shape == b.shape
        np.testing.assert_allclose(a.numpy(), torch.log_softmax(b.double(), -1).numpy(),
                                   atol=TOL, rtol=0)


def test_an_in_process_model_is_its_own_weights(tiny):
    assert tiny.in_process("anything") is tiny
    assert tiny.run_options() == {"model": tiny.info.name}
    assert tiny.info.name in tiny.describe() and tiny.parameter_count()
