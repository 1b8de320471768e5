"""The served-model backend's logic against a fake vLLM server backed by a tiny model
(tests/helpers/fake_server.py), in the fast tier: what is served equals in-process scoring of
the same weights, one served run of each method equals its in-process run, and every way a
server fails (an HTTP error, not JSON, the wrong shape, impossible or uniform log-probs, a
server that dies mid-run or hangs, a wrong tokenizer, an unknown model) is a clear error, not a
hang or a wrong number. Fidelity against a real vLLM server lives in the ``served`` tier."""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from conftest import run_cli
from helpers.cid_ledgers import cid_ledgers
from helpers.fake_server import FakeVLLM, Fault, fake_vllm, wait_until
from helpers.rundiff import untimed
from helpers.tiny_data import icl_keywords, write_command_data

import ctxleak
from ctxleak.engine.scoring import continuation_logprobs
from ctxleak.engine.served import serve
from ctxleak.engine.served_client import ClientOptions, ServerError
from ctxleak.errors import ConfigError
from ctxleak.mitigations.cid import CIDConfig
from ctxleak.run.records import demo_path

TOL = 1e-5  # nats per token: the same float32 weights, one forward pass here and there


#: the tiny tokenizer's <pad>, <bos> and <unk>: never sampled, so that a sampled answer's text
#: encodes back to its ids (as a real model's answers do)
SPECIAL = (0, 1, 3)


@pytest.fixture(scope="module")
def server(tiny):
    with fake_vllm(tiny, never=SPECIAL) as running:
        yield running


@pytest.fixture(scope="module")
def served(server, tok_dir):
    return serve("tiny", server.url, tokenizer=tok_dir)


PROMPTS = ["the capital of france is", "rome is in italy . the city"]
CONTS = ["paris . yes", "of rome and the news report said"]


def test_scoring_candidates_and_vocabulary_equal_in_process(served, tiny):
    """Teacher-forced log-probs (short continuations through allowed_token_ids, long ones
    through prompt_logprobs), candidate next tokens and the whole next-token distribution."""
    prompts = [tiny.encode(p) for p in PROMPTS]
    conts = [tiny.encode(c) for c in CONTS]
    assert len(conts[0]) <= 4 < len(conts[1])  # both of the client's scoring roads
    for there, here in zip(continuation_logprobs(served, prompts, conts),
                           continuation_logprobs(tiny, prompts, conts)):
        assert there.dtype == np.float64
        np.testing.assert_allclose(there, here, atol=TOL, rtol=0)
    cands = [5, 9, 20]
    by_hand = np.stack([continuation_logprobs(tiny, prompts, [[c]] * 2) for c in cands])[..., 0].T
    np.testing.assert_allclose(served.candidate_logprobs(prompts, cands), by_hand, atol=TOL)
    full = served.vocab_logprobs(prompts)
    assert full.shape == (2, len(tiny.tokenizer))
    np.testing.assert_allclose(np.exp(full).sum(axis=1), 1.0, atol=1e-6)
    np.testing.assert_allclose(full[:, cands], by_hand, atol=TOL)


def test_samples_keep_min_tokens_and_drop_the_stopping_eos(served, server, tiny):
    prompt = tiny.encode(PROMPTS[0])
    rows = served.draw([prompt], [7], temperature=1.0, max_new_tokens=6, min_new_tokens=3,
                         n=3)[0]
    assert len(rows) == 3
    for ids, stopped in rows:
        assert len(ids) >= 3 and not set(ids) & set(served.eos_ids)
        assert stopped or len(ids) == 6
    again = served.draw([prompt], [7], temperature=1.0, max_new_tokens=6, min_new_tokens=3,
                          n=3)[0]
    assert again == rows  # seeded
    sent = [b for path, b in server.requests if path == "/v1/completions" and b.get("n") == 3]
    assert sent[-1]["min_tokens"] == 3 and sent[-1]["stop_token_ids"] == served.eos_ids


def test_influence_runs_served_and_scores_logged_answers_as_in_process(served, tiny, tmp_path):
    """The server's own answers (λ = 1, T = 1) are recorded with their windows, passages and
    control; the same answers given as logged responses and scored through the server equal
    in-process scoring of them: with and without the context, each n-gram window, each passage
    left out, and the control."""
    kw = dict(temperature=1.0, ngram=8, seed=0, max_new_tokens=8, min_new_tokens=2,
              passages="sentence", progress=False)
    own = ctxleak.influence(served, "demo", limit=2, output=str(tmp_path / "own"), **kw)
    assert len(own.records) == 2
    for rec in own.records:
        assert len(rec["response_ids"]) >= 2 and len(rec["passages"]) >= 2
        assert len(rec["window_influence"]) == len(rec["windows"]) >= 2
    rows = [json.loads(line) for line in
            demo_path("influence.jsonl").read_text(encoding="utf-8").splitlines()[:2]]
    logged = [{**row, "response": rec["response"]} for row, rec in zip(rows, own.records)]
    here = ctxleak.influence(tiny, logged, output=str(tmp_path / "here"), **kw)
    there = ctxleak.influence(served, logged, output=str(tmp_path / "there"), **kw)
    for b, c in zip(here.records, there.records):
        assert b["response_ids"] == c["response_ids"] and b["passages"] == c["passages"]
        for key in ("logp_context", "logp_empty", "token_influence", "window_influence",
                    "passage_influence", "control_influence"):
            np.testing.assert_allclose(c[key], b[key], atol=1e-4, err_msg=key)
        assert b["max_passage"] == c["max_passage"]
    # a served control scores each answer under the control context only: its no-context
    # log-probs are the record's already
    control = own.summary["settings"][0]["control"]
    assert control["cost"]["forward_passes"] == control["controls"] == 2


def test_a_served_run_without_a_temperature_runs_at_1_and_says_so(served, tmp_path):
    """A run that did not choose a temperature runs at 1 against a served model (its own
    answers, sampled by the server) and says so in one line."""
    with pytest.warns(UserWarning, match=r"temperature 1: the default against a served model"):
        res = ctxleak.influence(served, "demo", limit=1, max_new_tokens=3, progress=False,
                                output=str(tmp_path / "default"))
    assert {r["temperature"] for r in res.records} == {1.0}
    assert res.config["temperature"] == [1.0]


@pytest.mark.parametrize("cid", [dict(lam=0.5, temperature=0.8),
                                 dict(lam=1.0, temperature=1.0, bounded_eps=2.0)],
                         ids=["lambda-0.5", "bounded-eps-2"])
def test_cid_through_a_server_decodes_what_in_process_cid_decodes(served, server, tiny, cid):
    """Context Influence Decoding from the server's whole next-token distributions (one
    request per stream and step) draws the same tokens as in-process CID from the same seeds,
    with the same ledger: λ_t, log p̄_λ(y_t | D), log p(y_t | ∅) and the ex-post ε per token."""
    config = CIDConfig(max_new_tokens=8, min_new_tokens=3, **cid)
    full, empty = tiny.encode("rome is in italy . the city of rome"), tiny.encode("the city of")
    jobs = [(full, empty, config, 11), (empty + full, empty, config, 12)]
    since = len(server.requests)
    there = cid_ledgers(served, jobs)
    assert all(body["logprobs"] == len(tiny.tokenizer) for _, body in server.requests[since:])
    for a, b in zip(cid_ledgers(tiny, jobs), there):
        assert a.response_ids == b.response_ids and a.stopped_on_eos == b.stopped_on_eos
        assert len(a.response_ids) >= config[1].min_new_tokens
        for e, f in zip(a.entries, b.entries):
            np.testing.assert_allclose([f.lam, f.logp_context, f.logp_empty],
                                       [e.lam, e.logp_context, e.logp_empty], atol=1e-5)
            assert f.eps == e.eps == cid.get("bounded_eps")
            if f.eps is not None:
                assert f.eps_ex_post == pytest.approx(e.eps_ex_post, abs=1e-5)
                assert f.eps_ex_post <= f.eps


def test_influence_below_lambda_1_and_at_t_0_8_served_equals_in_process(served, tiny, tmp_path):
    """λ = 0.5 at T = 0.8 through a server: the response decoded by CID, its passages and its
    control scored under the same mixture, all equal to the in-process run."""
    kw = dict(lambda_=0.5, temperature=0.8, seed=0, max_new_tokens=4, min_new_tokens=2,
              passages="sentence", progress=False, limit=2)
    here = ctxleak.influence(tiny, "demo", output=str(tmp_path / "here"), **kw)
    there = ctxleak.influence(served, "demo", output=str(tmp_path / "there"), **kw)
    for b, c in zip(here.records, there.records):
        assert b["response_ids"] == c["response_ids"] and c["lambda"] == 0.5
        for key in ("logp_context", "logp_empty", "token_influence", "passage_influence",
                    "control_influence"):
            np.testing.assert_allclose(c[key], b[key], atol=1e-4, err_msg=key)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return write_command_data(tmp_path_factory.mktemp("served-data"), 4)


@pytest.mark.parametrize("method", ["iclinf", "susceptibility", "probe"])
def test_a_served_run_equals_the_in_process_run(method, served, tiny, data, tmp_path):
    """ICLInf, Monte Carlo susceptibility (the whole next-token distribution) and black-box
    probing: every recorded number within 1e-4 of the in-process run on the same weights."""
    source, kw = {
        "iclinf": (data / "train.jsonl", dict(test_data=str(data / "test.jsonl"), queries=2,
                                              shots="1,2", seed=0, **icl_keywords())),
        "susceptibility": (data / "rel.json", dict(method="mc", contexts=3, limit=3, seed=0)),
        "probe": (data / "records.jsonl", dict(mode="black-box", generate=False, pii="phone,relation",
                                               shots=1, limit=4, seed=0))}[method]
    run = getattr(ctxleak, method)
    there = run(served, str(source), output=str(tmp_path / "served"), progress=False, **kw)
    here = run(tiny, str(source), output=str(tmp_path / "local"), progress=False, **kw)
    assert there.records and len(there.records) == len(here.records)
    _close(untimed(list(there.records)), untimed(list(here.records)))
    _close(untimed(there.summary), untimed(here.summary), "summary")
    assert there.provenance["model"]["base_url"] == served.info.base_url


def _close(a, b, path="records"):
    if isinstance(a, dict):
        assert a.keys() == b.keys(), path
        for k in a:
            _close(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, list):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b)):
            _close(x, y, f"{path}[{i}]")
    elif isinstance(a, float) or isinstance(b, float):
        assert a == pytest.approx(b, abs=1e-4, rel=1e-4, nan_ok=True), path
    else:
        assert a == b, path


def test_the_cli_runs_cid_against_a_server(server, tok_dir, tmp_path, capsys):
    """``ctxleak influence --server-url ... --lambda 0.5 --bounded-eps 4``: bounded CID decoded
    through the server from the command line, each token's λ_t and ε in the record."""
    out = tmp_path / "run"
    code, stdout, err = run_cli(["influence", "--model", "tiny", "--server-url", server.url,
                                 "--tokenizer", tok_dir, "--data", "demo", "--limit", "1",
                                 "--temperature", "1", "--lambda", "0.5", "--bounded-eps", "4",
                                 "--max-new-tokens", "4", "--output", str(out)], capsys)
    assert code == 0, err
    config = json.loads((out / "config.json").read_text())
    assert config["server_url"] == server.url and config["bounded_eps"] == 4.0
    (record,) = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    assert record["eps"] == 4.0 and len(record["lambdas"]) == len(record["token_eps_ex_post"])
    assert all(0 <= lam <= 0.5 for lam in record["lambdas"])
    assert all(e <= 4.0 + 1e-9 for e in record["token_eps_ex_post"])


# ---- a server that is wrong about itself ----------------------------------------------------

def test_wrong_tokenizer_is_caught(tiny, tok_dir):
    shifted = FakeVLLM(tiny, tokenize=lambda text: [t + 1 for t in tiny.encode(text)])
    with shifted:
        with pytest.raises(ConfigError, match="does not match the server's") as err:
            serve("tiny", shifted.url, tokenizer=tok_dir)
    assert err.value.param == "tokenizer"


def test_unknown_served_model_is_a_clear_error(server, tok_dir):
    with pytest.raises(ConfigError) as err:
        serve("tiny", server.url, served_model="no-such-model", tokenizer=tok_dir)
    assert "does not serve 'no-such-model'" in str(err.value) and "'tiny'" in str(err.value)


@pytest.mark.parametrize("mode, says", [("uniform", "uniform"), ("positive", "impossible")])
def test_a_server_with_impossible_log_probs_is_refused(tiny, tok_dir, mode, says):
    with fake_vllm(tiny, fault=Fault(mode)) as bad:
        with pytest.raises(ServerError, match=says) as err:
            serve("tiny", bad.url, tokenizer=tok_dir)
    assert bad.url in str(err.value)


# ---- a server that fails mid-run ---------------------------------------------------------

def _served_after(tiny, tok_dir, fault, **options):
    """A checked served model on a fake whose fault starts after the check's requests."""
    bad = FakeVLLM(tiny).start()
    lm = serve("tiny", bad.url, tokenizer=tok_dir, options=ClientOptions(**options))
    fault.after += bad.completion_requests
    bad.fault = fault
    return bad, lm


@pytest.mark.parametrize("mode, status, says", [
    ("http", 404, "HTTP 404"), ("not-json", None, "not JSON"),
    ("wrong-shape", None, "0 choices"), ("die", None, "is it still running")])
def test_a_failed_answer_names_the_server(tiny, tok_dir, mode, status, says):
    bad, lm = _served_after(tiny, tok_dir, Fault(mode, status=status or 500), attempts=2,
                            backoff_s=0.01)
    try:
        with pytest.raises(ServerError, match=says) as err:
            lm.continuation_logprobs([[1, 5, 6, 7]], [[8, 9, 10, 11, 12]])
    finally:
        bad.stop()
    assert bad.url in str(err.value)
    assert err.value.status == status


@pytest.mark.parametrize("mode, says", [("uniform", "uniform distribution"),
                                         ("positive", "impossible log-probs")])
def test_every_answer_is_checked_not_only_the_probe(tiny, tok_dir, mode, says):
    """A server that passes the checks before a run and then answers uniform or positive
    log-probs (a bad replica, a reload) is refused on the answer itself, naming the server:
    no influence of 0.0 is measured from it. Scoring and candidate scoring alike."""
    bad, lm = _served_after(tiny, tok_dir, Fault(mode), attempts=1, backoff_s=0.01)
    try:
        with pytest.raises(ServerError, match=says) as err:
            lm.continuation_logprobs([[1, 5, 6, 7]], [[8, 9, 10, 11, 12, 13]])
        assert bad.url in str(err.value)
        if mode == "positive":  # one candidate's log-prob alone cannot show a uniform answer
            with pytest.raises(ServerError, match="impossible log-probs"):
                lm.next_token_logprobs([[1, 5, 6, 7]], token_ids=[8, 9])
    finally:
        bad.stop()


@pytest.mark.parametrize("answer, says", [
    ([], "JSON list"), ({"choices": [{"index": "0"}]}, "'index' is '0'"),
    ({"choices": [{"index": 0}, {"index": 0}]}, "2 choices for 1"),
    ({"choices": "none"}, "list of choice objects")])
def test_a_wrong_shaped_answer_is_one_line_naming_the_field(tiny, tok_dir, answer, says):
    """Every field read from a completions answer is checked: a list where an object belongs,
    a choice index that is not an integer, too many choices, choices that are not a list."""
    good = FakeVLLM(tiny).start()
    try:
        lm = serve("tiny", good.url, tokenizer=tok_dir)
        lm.client.post_many = lambda path, bodies, headers=None: [answer for _ in bodies]
        with pytest.raises(ServerError, match=says):
            lm.continuation_logprobs([[1, 5, 6, 7]], [[8, 9, 10, 11, 12, 13]])
    finally:
        good.stop()


def test_transient_errors_are_retried(tiny, tok_dir):
    bad, lm = _served_after(tiny, tok_dir, Fault("http", status=503, times=2), attempts=3,
                            backoff_s=0.01)
    try:
        got = lm.continuation_logprobs([[1, 5, 6, 7]], [[8, 9, 10, 11, 12]])[0]
    finally:
        bad.stop()
    np.testing.assert_allclose(got, continuation_logprobs(tiny, [[1, 5, 6, 7]],
                                                          [[8, 9, 10, 11, 12]])[0], atol=TOL)
    assert bad.faulted == 2


def test_a_hung_server_times_out(tiny, tok_dir):
    """Each request gives up after ``timeout`` seconds; after the tries the error names the
    server and the timeout, long before a hung server would answer."""
    bad, lm = _served_after(tiny, tok_dir, Fault("hang"), timeout=0.5, attempts=2,
                            backoff_s=0.01)
    t0 = time.monotonic()
    try:
        with pytest.raises(ServerError) as err:
            lm.continuation_logprobs([[1, 5, 6, 7]], [[8, 9, 10, 11, 12]])
    finally:
        bad.stop()
    message = str(err.value)
    assert bad.url in message and "Timeout" in message and "2 tries" in message
    assert time.monotonic() - t0 < 10


def test_no_server_is_a_clear_error(tok_dir):
    from helpers.vllm_server import free_port

    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(ServerError) as err:
        serve("tiny", url, tokenizer=tok_dir,
              options=ClientOptions(timeout=2, attempts=2, backoff_s=0.05))
    assert url in str(err.value) and "is it still running" in str(err.value)


def test_server_dies_mid_run_then_resume(tiny, tok_dir, tmp_path):
    """An influence run, one example per batch: the server dies once the first record is on
    disk. The run fails naming the server and how to finish; a server started again on another
    port and ``resume=True`` finish the run, keeping the records written before."""
    out = tmp_path / "run"
    samples = out / "samples.jsonl"
    kw = dict(temperature=1.0, ngram=8, limit=3, seed=0, max_new_tokens=6, batch_size="1",
              output=str(out), progress=False)
    first = FakeVLLM(tiny, never=SPECIAL).start()
    try:
        lm = serve("tiny", first.url, tokenizer=tok_dir,
                   options=ClientOptions(attempts=2, backoff_s=0.01))
        with ThreadPoolExecutor(1) as pool:
            running = pool.submit(ctxleak.influence, lm, "demo", **kw)
            wait_until(lambda: running.done() or (samples.is_file()
                                                  and samples.read_text().strip()))
            assert not running.done(), f"the run ended before the kill: {running.result()}"
            first.fault = Fault("die", after=first.completion_requests)
            with pytest.raises(ServerError) as err:
                running.result(timeout=120)
    finally:
        first.stop()
    assert first.url in str(err.value) and "--resume" in str(err.value)
    kept = [json.loads(line) for line in samples.read_text().splitlines()]
    assert 1 <= len(kept) < 3
    with fake_vllm(tiny, never=SPECIAL) as second:
        lm = serve("tiny", second.url, tokenizer=tok_dir)
        done = ctxleak.influence(lm, "demo", resume=True, **kw)
    assert len(done.records) == 3
    on_disk = [json.loads(line) for line in samples.read_text().splitlines()]
    assert on_disk[:len(kept)] == kept and len({r["id"] for r in on_disk}) == 3
    assert json.loads((out / "results.json").read_text())["provenance"]["model"]["base_url"] \
        == second.url


@pytest.mark.parametrize("answer, says", [
    ([], "answered [], not an object with a 'data' list"),
    ({"object": "list"}, "not an object with a 'data' list"),
    ({"data": [{"object": "model"}]}, "a model entry without a string 'id'"),
    ({"data": []}, "serves no model"),
])
def test_a_wrong_shaped_model_listing_is_one_line(tiny, tok_dir, answer, says):
    """/v1/models is read before anything else: [] or an entry without an id was a traceback."""
    with fake_vllm(tiny, models_answer=answer) as bad:
        with pytest.raises(ServerError) as err:
            serve("tiny", bad.url, tokenizer=tok_dir)
    assert says in str(err.value) and bad.url in str(err.value) and "/v1/models" in str(
        err.value)


def test_resume_refuses_another_model_served_under_the_same_name(tiny, tok_dir, tmp_path):
    """The run records what the server says of its model (root, max_model_len, version); a
    resume against a server whose 'tiny' is other weights, or is cut to a shorter window, is
    refused before any request is scored; the same model on another port resumes."""
    out = tmp_path / "run"
    kw = dict(temperature=1.0, max_new_tokens=3, seed=0, output=str(out), progress=False)
    with fake_vllm(tiny, never=SPECIAL) as first:
        ctxleak.influence(serve("tiny", first.url, tokenizer=tok_dir), "demo", limit=1, **kw)
    stored = json.loads((out / "config.json").read_text())["model_identity"]
    assert stored == {"root": "tiny", "max_model_len": 256, "version": "fake-vllm"}
    for other, says in (({"root": "/models/other-7b"}, "root 'tiny' then, '/models/other-7b'"),
                        ({"max_model_len": 128}, "max_model_len 256 then, 128 now")):
        with fake_vllm(tiny, never=SPECIAL, **other) as impostor:
            lm = serve("tiny", impostor.url, tokenizer=tok_dir)
            probed = impostor.completion_requests  # serve()'s checks of the server
            with pytest.raises(ConfigError) as err:
                ctxleak.influence(lm, "demo", limit=2, resume=True, **kw)
            assert impostor.completion_requests == probed  # nothing scored
        assert "is not the one the run started with" in str(err.value) and says in str(
            err.value)
    assert len((out / "samples.jsonl").read_text().splitlines()) == 1
    with fake_vllm(tiny, never=SPECIAL) as again:
        done = ctxleak.influence(serve("tiny", again.url, tokenizer=tok_dir), "demo", limit=2,
                                 resume=True, **kw)
    assert len(done.records) == 2
