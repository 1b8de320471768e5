"""Every API function accepts the keywords it accepted when each one was written out in its
signature, with the same defaults and meanings, now that the run options are typed once
(``**run: Unpack[RunKeywords]``) and the decorator binds the call: the lists below are those
signatures, literally. Nothing here loads a model: the Method each call makes is caught before
it runs."""

from __future__ import annotations

import inspect
from dataclasses import fields
from typing import Any

import pytest

import ctxleak
import ctxleak.api.canary
import ctxleak.api.explain
import ctxleak.api.running
from ctxleak.errors import ConfigError, CtxleakDeprecationWarning
from ctxleak.run.options import RunOptions

#: The run options every API function takes: (keyword, default, type as the signature wrote it).
RUN = [("device", "auto", "str"), ("dtype", "auto", "str"), ("batch_size", "auto", "str"),
       ("batch_invariant", True, "bool"), ("limit", None, "int | None"), ("seed", 0, "int"),
       ("output", None, "str | None"), ("resume", False, "bool"),
       ("chat_template", "auto", "str"), ("trust_remote_code", False, "bool"),
       ("device_map", None, "str | None"), ("threads", None, "int | None"),
       ("server_url", None, "str | None"), ("served_model", None, "str | None"),
       ("tokenizer", None, "str | None"), ("request_timeout", None, "float | None"),
       ("retries", None, "int | None"), ("revision", None, "str | None"),
       ("model_args", None, "Any"), ("keep_texts", False, "bool")]

#: Each function's other keywords, in order, with their defaults (the first ones positional:
#: ``POSITIONAL``).
OWN: dict[str, list[tuple[str, Any]]] = {
    "influence": [
        ("model", "default"), ("data", "demo"), ("progress", True), ("retriever", None),
        ("task", "auto"), ("template", None), ("fields", None), ("lambda_", 1.0),
        ("temperature", None), ("max_new_tokens", 50), ("min_new_tokens", None),
        ("ngram", "full"), ("stride", None), ("context_sizes", None), ("bounded_eps", None),
        ("mechanisms", None), ("datastore", None), ("classes", None),
        ("deployed_temperature", None),
        ("repeat_threshold", 0.5), ("rouge_threshold", 0.5), ("bertscore_model", None),
        ("factkb_model", None), ("redact", False), ("control", True), ("controls", None),
        ("passages", None), ("exposure_budget", None), ("log_format", "auto"),
        ("class_field", "classification"), ("class_budgets", None), ("document_budgets", None),
        ("prompt_messages", None), ("system_prompt", None), ("app_prompt", None)],
    "iclinf": [
        ("model", "default"), ("data", "demo"), ("progress", True), ("test_data", None),
        ("split", "split"), ("text_field", "text"), ("label_field", "label"), ("labels", None),
        ("queries", 100), ("format", "auto"), ("instruction", None), ("exemplar_template", None),
        ("query_template", None), ("max_text_tokens", 256), ("shots", "4"),
        ("calibration", None), ("calibration_eps", 1e-06), ("output_space", "labels"),
        ("label_scoring", "first-token")],
    "audit": [
        ("model", "default"), ("data", "demo"), ("progress", True), ("text_field", "text"),
        ("label_field", "label"), ("target_eps", "1,10,100"), ("delta", "1e-5"),
        ("subset_size", 8), ("clip", 10.0), ("temperature", 2.0), ("sequences", 4),
        ("max_new_tokens", 24), ("min_new_tokens", 0), ("search", "temperature"),
        ("orders", "2-99"), ("label", "Sports"), ("template", None)],
    "susceptibility": [
        ("model", "default"), ("data", "demo"), ("progress", True), ("method", "both"),
        ("contexts", 256), ("entity_contexts", None), ("top_k", 10), ("sigma2", 1.0),
        ("reference", "marginal"), ("query_types", "closed,open_qa,open_completion"),
        ("fisher_vocab", "topk"), ("fisher_truncation", "renormalised"),
        ("context_entities", "mix"), ("sampling", "no-replacement"), ("relations", None),
        ("entities_per_relation", None)],
    "probe": [
        ("model", "default"), ("data", "demo"), ("progress", True), ("mode", None),
        ("pii", None), ("shots", "1"), ("structure", "twins"), ("beam", 2),
        ("max_new_tokens", "paper"), ("generate", True), ("subjects", 20),
        ("soft_tokens", 20), ("train_fraction", 0.5), ("epochs", 30), ("soft_lr", 0.005),
        ("context_template", "{document}\n{prompt}"), ("canary", None), ("canary_epochs", 4),
        ("canary_lr", 0.002), ("canary_layers", 8), ("canary_baseline", False),
        ("alpha", 0.05), ("redact", False), ("leak_maps", True)],
    "canary_audit": [
        ("model", "default"), ("data", "demo-qa"), ("progress", True), ("lambda_", 1.0),
        ("temperature", 0.8), ("bounded_eps", None), ("max_new_tokens", 8),
        ("min_new_tokens", None), ("trials", 40), ("digits", 6), ("confidence", 0.95),
        ("threshold", None)],
    "influence_explain": [
        ("model", "default"), ("context", ""), ("query", ""), ("task", "qa"),
        ("template", None), ("lambda_", 1.0), ("temperature", 0.8), ("max_new_tokens", 50),
        ("min_new_tokens", None), ("ngram", 4), ("top", 5)],
}
#: How many of each function's first keywords may also be given by position.
POSITIONAL = {"influence_explain": 3}
#: What a call needs besides the defaults (an explanation needs a context).
NEEDS: dict[str, dict[str, Any]] = {"influence_explain": {"context": "The code is 4417."}}

#: Run options other than the defaults, all valid together.
RUN_GIVEN = {"device": "cpu", "dtype": "float32", "batch_size": "3", "batch_invariant": False,
             "limit": 2, "seed": 5, "output": "elsewhere", "resume": True,
             "chat_template": "off", "trust_remote_code": True, "device_map": "auto",
             "threads": 1, "server_url": "http://127.0.0.1:9", "served_model": "m",
             "tokenizer": "t", "request_timeout": 5.0, "retries": 1, "revision": "r",
             "model_args": "attn_implementation=eager", "keep_texts": True}


def accepted(name: str) -> list[str]:
    """The keywords ``ctxleak.<name>`` accepts, read from its signature: its named parameters,
    and the run options where it takes ``**run: Unpack[RunKeywords]``."""
    out: list[str] = []
    for param in inspect.signature(getattr(ctxleak, name)).parameters.values():
        if param.kind is inspect.Parameter.VAR_KEYWORD:
            assert "RunKeywords" in str(param.annotation), param
            out += list(ctxleak.api.running.RunKeywords.__annotations__)
        else:
            out.append(param.name)
    return out


@pytest.fixture
def caught(monkeypatch):
    """The Methods the API functions make, caught instead of run (each call returns None)."""
    made: list[Any] = []

    def run_method(method, *args, **kwargs):
        made.append(method)

    for module in (ctxleak.api.running, ctxleak.api.canary, ctxleak.api.explain):
        monkeypatch.setattr(module, "run_method", run_method)
    return made


def test_run_options_are_typed_once_as_they_were_written():
    hints = ctxleak.api.running.RunKeywords.__annotations__
    assert [(name, str(getattr(hint, "__forward_arg__", hint))) for name, hint in hints.items()] \
        == [(name, kind) for name, _, kind in RUN]
    assert [(f.name, f.default) for f in fields(RunOptions) if f.name != "model"] == \
        [(name, default) for name, default, _ in RUN]
    assert not ctxleak.api.running.RunKeywords.__total__


@pytest.mark.parametrize("name", sorted(OWN))
def test_every_keyword_of_before_is_accepted_and_no_other(name):
    assert accepted(name) == [n for n, _ in OWN[name]] + [n for n, _, _ in RUN]
    sig = inspect.signature(getattr(ctxleak, name))
    own = [p for p in sig.parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD]
    assert [(p.name, p.default) for p in own] == OWN[name]
    first = POSITIONAL.get(name, 2)
    assert {p.kind for p in own[:first]} == {inspect.Parameter.POSITIONAL_OR_KEYWORD}
    assert {p.kind for p in own[first:]} == {inspect.Parameter.KEYWORD_ONLY}


def test_influence_shows_at_most_36_parameters():
    # 26, then 29 with the ledger's class field and budgets (class_budgets, document_budgets),
    # then 32 with the app's prompt (prompt_messages, system_prompt, app_prompt), then 33 with
    # the other mechanisms than CID as decoding modes (mechanisms), 34 with the datastore they
    # retrieve from (datastore), 36 with the deployment the sweep models (classes,
    # deployed_temperature)
    assert len(inspect.signature(ctxleak.influence).parameters) <= 36


@pytest.mark.parametrize("name", sorted(OWN))
def test_a_keyword_left_out_is_its_old_default(name, caught):
    func = getattr(ctxleak, name)
    func(**NEEDS.get(name, {}))
    func(**{**dict(OWN[name]), **NEEDS.get(name, {})}, **{n: default for n, default, _ in RUN})
    bare, explicit = caught
    assert type(bare) is type(explicit) and vars(bare) == vars(explicit)
    assert bare.common == RunOptions(model="default")


@pytest.mark.filterwarnings("ignore:temperature 1. the default against a served model")
@pytest.mark.parametrize("name", sorted(OWN))
def test_the_run_options_given_reach_the_run(name, caught):
    getattr(ctxleak, name)(**RUN_GIVEN, **NEEDS.get(name, {}))
    assert caught[0].common == RunOptions(model="default", **RUN_GIVEN)


@pytest.mark.parametrize("name", sorted(OWN))
@pytest.mark.parametrize("typo, meant", [("batchsize", "batch_size"), ("server_ur", "server_url"),
                                         ("model_arg", "model_args")])
def test_a_misspelt_run_option_suggests_it(name, typo, meant, caught):
    with pytest.raises(ConfigError, match=rf"{name}\(\) got an unknown keyword '{typo}' "
                                          rf"\(did you mean '{meant}'\?\)"):
        getattr(ctxleak, name)(**{typo: 1})
    assert caught == []


@pytest.mark.parametrize("name", sorted(OWN))
def test_a_misspelt_own_keyword_suggests_it(name, caught):
    own = OWN[name][-1][0]
    with pytest.raises(ConfigError, match=rf"unknown keyword '{own}x' \(did you mean '{own}'\?\)"):
        getattr(ctxleak, name)(**{own + "x": 1})


@pytest.mark.parametrize("name, old, new, value", [
    ("influence", "lam", "lambda_", 0.5), ("influence_explain", "lam", "lambda_", 0.5),
    ("iclinf", "fmt", "format", "qa"), ("audit", "n_gen", "sequences", 2)])
def test_a_renamed_keyword_still_works(name, old, new, value, caught):
    with pytest.warns(CtxleakDeprecationWarning, match=f"'{old}' is deprecated"):
        getattr(ctxleak, name)(**{old: value}, **NEEDS.get(name, {}))
    getattr(ctxleak, name)(**{new: value}, **NEEDS.get(name, {}))
    assert vars(caught[0]) == vars(caught[1])


def test_positional_model_and_data_and_a_wrong_call_named(caught):
    """Model and data may be positional; a third positional argument or one given twice is a
    TypeError that names the function (the wording is inspect's, not the interpreter's)."""
    ctxleak.influence("default", "demo", seed=3)
    assert caught[0].common.seed == 3
    with pytest.raises(TypeError, match=r"^influence\(\): too many positional arguments$"):
        ctxleak.influence("default", "demo", True)
    with pytest.raises(TypeError,
                       match=r"^influence\(\): multiple values for argument 'model'$"):
        ctxleak.influence("default", model="default")
