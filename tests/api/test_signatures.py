"""The Python API's signatures are the options dataclasses: every API function takes its
method's parameters as keywords and the run options as ``**run: Unpack[RunKeywords]``, with the
same names, defaults and documentation, and an unknown keyword fails with a did-you-mean
(tests/api/test_keywords.py holds every keyword to the list it had before)."""

from __future__ import annotations

import inspect
import re
from dataclasses import FrozenInstanceError, fields

import pytest

import ctxleak
from ctxleak.api.docs import default_text
from ctxleak.errors import ConfigError
from ctxleak.methods.audit.method import AuditParams
from ctxleak.methods.icl.params import ICLInfParams
from ctxleak.methods.influence.params import InfluenceParams
from ctxleak.methods.pii.params import ProbeParams
from ctxleak.methods.susceptibility.method import SusceptibilityParams
from ctxleak.run.options import RunOptions
from ctxleak.run.params import DOC, option_docs

API = {"influence": (InfluenceParams, "InfluenceResult"),
       "iclinf": (ICLInfParams, "ICLInfResult"),
       "audit": (AuditParams, "AuditResult"),
       "susceptibility": (SusceptibilityParams, "SusceptibilityResult"),
       "probe": (ProbeParams, "ProbeResult")}
FACE = [("model", "default"), ("data", "demo"), ("progress", True)]
#: Keywords of one API function beyond its face, parameters and run options.
EXTRA = {"influence": [("retriever", None)]}


def run_fields():
    return [f for f in fields(RunOptions) if f.name != "model"]


def flat(text: str) -> str:
    return " ".join(text.split())


@pytest.mark.parametrize("name", sorted(API))
def test_signature_is_run_options_plus_params(name):
    params_class, result = API[name]
    sig = inspect.signature(getattr(ctxleak, name))
    expected = FACE + EXTRA.get(name, []) + [(f.name, f.default) for f in fields(params_class)] + \
        [("run", inspect.Parameter.empty)]
    assert [(p.name, p.default) for p in sig.parameters.values()] == expected
    kinds = [p.kind for p in sig.parameters.values()]
    assert kinds[:2] == [inspect.Parameter.POSITIONAL_OR_KEYWORD] * 2
    assert set(kinds[2:-1]) == {inspect.Parameter.KEYWORD_ONLY}
    assert kinds[-1] is inspect.Parameter.VAR_KEYWORD
    assert sig.parameters["run"].annotation == "Unpack[RunKeywords]"
    assert sig.return_annotation == result


@pytest.mark.parametrize("name", sorted(API))
def test_docstring_documents_every_keyword_from_its_option(name):
    params_class, result = API[name]
    doc = flat(getattr(ctxleak, name).__doc__)
    assert "Parameters ---------- model : " in doc and f"Returns ------- {result}" in doc
    docs = {**option_docs(params_class), **option_docs(RunOptions)}
    for f in [*fields(params_class), *run_fields()]:
        assert re.search(rf"(^| ){f.name} : [^\n]*default ", doc), f.name
        assert flat(docs[f.name]) in doc, f.name


@pytest.mark.parametrize("name", ["influence_explain", "canary_audit"])
def test_explain_and_canary_take_the_run_options(name):
    func = getattr(ctxleak, name)
    run = list(inspect.signature(func).parameters.values())[-1]
    assert (run.name, run.kind, run.annotation) == ("run", inspect.Parameter.VAR_KEYWORD,
                                                    "Unpack[RunKeywords]")
    doc = flat(func.__doc__)
    for f in run_fields():
        assert re.search(rf" {f.name} : [^\n]*default {re.escape(default_text(f.default))} ", doc)


def test_params_are_frozen_and_documented():
    for params_class, _ in API.values():
        obj = params_class()
        with pytest.raises(FrozenInstanceError):
            obj.redact = True  # type: ignore[misc]
        for f in fields(params_class):
            assert f.metadata.get(DOC), (params_class.__name__, f.name)


@pytest.mark.parametrize("call, typo, meant", [
    ("influence", "lamda", "lambda_"), ("iclinf", "shot", "shots"), ("audit", "target_epsilon",
                                                                   "target_eps"),
    ("susceptibility", "topk", "top_k"), ("probe", "canary_epoch", "canary_epochs"),
    ("influence", "batchsize", "batch_size"), ("influence_explain", "lamda", "lambda_")])
def test_unknown_keyword_suggests_the_closest(call, typo, meant):
    with pytest.raises(ConfigError, match=rf"{call}\(\) got an unknown keyword '{typo}' "
                                          rf"\(did you mean '{meant}'\?\)"):
        getattr(ctxleak, call)(**{typo: 1})


def test_unknown_keyword_without_a_close_one():
    with pytest.raises(ConfigError) as info:
        ctxleak.influence(zzzzzz=1)
    assert "unknown keyword 'zzzzzz'" in str(info.value) and "did you mean" not in str(info.value)


@pytest.mark.parametrize("params_class, bad, param", [
    (InfluenceParams, {"lambda_": -1}, "lambda_"), (InfluenceParams, {"ngram": 0}, "ngram"),
    (InfluenceParams, {"lambda_": "1,1"}, "lambda_"), (ICLInfParams, {"queries": 0}, "queries"),
    (ICLInfParams, {"shots": 0}, "shots"), (AuditParams, {"subset_size": 1}, "subset_size"),
    (SusceptibilityParams, {"top_k": 0}, "top_k"),
    (SusceptibilityParams, {"relations": ""}, "relations"),
    (ProbeParams, {"beam": 0}, "beam"), (ProbeParams, {"canary": 1}, "canary")])
def test_params_validate_and_name_the_parameter(params_class, bad, param):
    with pytest.raises(ConfigError) as info:
        params_class(**bad)
    assert info.value.param == param


def test_params_normalise_and_stay_stable_under_rebuild():
    from dataclasses import replace

    p = InfluenceParams(lambda_="0.5,1", ngram="8", max_new_tokens=6)
    assert p.lambda_ == (0.5, 1.0) and p.ngram == 8 and p.min_new_tokens == 6
    assert replace(p) == p  # normalised values check again to themselves
    assert ProbeParams(mode="black-box,in-context").mode == ("black-box", "in-context")
    assert replace(ProbeParams(canary=2)) == ProbeParams(canary=2)
    assert SusceptibilityParams(query_types=["open"]).query_types == ("open_qa",
                                                                      "open_completion")
