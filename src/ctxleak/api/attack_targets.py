"""The targets of the black-box attacks at the faces: :func:`attack_target` makes the one the
CLI's target flags name (an OpenAI-compatible chat endpoint, a chain or a function named
``module:NAME``, or the bundled RAG app answered by a ctxleak model or through an endpoint), and
:class:`RAGBuilder` is a RAG app the audit builds itself over the documents it chooses, so that
a membership audit leaves its held-out documents out of the index ("Is My Data in Your
Retrieval Database?"; :mod:`ctxleak.targets.rag`). :func:`claimed_eps` is the ε such an app's
bounded Context Influence Decoding claims, set beside an attack's lower bound."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ctxleak.api.retrieval import load_retriever
from ctxleak.engine.served_options import check_request_timeout, check_retries
from ctxleak.errors import ConfigError
from ctxleak.methods.attacks.attack_method import document_eps, queries_per_document
from ctxleak.methods.attacks.extract import AttackDocument
from ctxleak.methods.attacks.membership import PERTURBATIONS
from ctxleak.mitigations.cid import CIDConfig
from ctxleak.targets.base import Target
from ctxleak.targets.endpoint import ChatEndpointTarget
from ctxleak.targets.endpoint_answerer import EndpointAnswerer
from ctxleak.targets.frameworks import as_target
from ctxleak.targets.mechanism_answerer import MechanismAnswerer
from ctxleak.targets.model_answerer import ModelAnswerer
from ctxleak.targets.rag import RAGApp


@dataclass(frozen=True)
class RAGBuilder:
    """A RAG app the audit builds over the documents it chooses (:class:`RAGApp`: BM25 over
    them, the bundled prompt, ``top_k`` documents per question), answered by ``answerer``; so a
    membership audit can leave its held-out documents out of the index. ``name`` describes it."""

    answerer: Any
    top_k: int = 3
    name: str = "northwind-demo"

    def build(self, documents: Sequence[Mapping[str, Any]]) -> RAGApp:
        """The app over ``documents`` (dicts with ``id`` and ``text``)."""
        return RAGApp(list(documents), answerer=self.answerer, top_k=self.top_k,
                      name=self.name)


def load_object(spec: str, param: str) -> Any:
    """The object ``spec`` names (``PATH.py:NAME`` or ``module:NAME``, as ``--retriever``), its
    errors naming ``param``."""
    try:
        return load_retriever(spec)
    except ConfigError as exc:
        raise ConfigError(str(exc).replace("retriever", param, 1), param=param) from None


def attack_target(target: Any = None, *, endpoint: str | None = None,
                  endpoint_model: str | None = None, api_key_env: str | None = None,
                  system: str | None = None, concurrency: int = 4,
                  rate_per_s: float | None = None, chain: str | None = None,
                  function: str | None = None, rag_demo: bool = False,
                  model: Any = "default", lambda_: float = 1.0,
                  bounded_eps: float | None = None, temperature: float | None = None,
                  max_new_tokens: int = 64, top_k: int = 3, endpoint_context: str = "inline",
                  request_timeout: float | None = None, retries: int | None = None,
                  run: Mapping[str, Any] | None = None,
                  endpoint_seeded: bool | None = None) -> Any:
    """The target the CLI's flags name, exactly one of: ``target`` (anything
    :func:`~ctxleak.targets.frameworks.as_target` takes), ``endpoint`` (an OpenAI-compatible
    chat API: ``endpoint_model``, its key from the environment variable ``api_key_env``,
    ``concurrency`` questions in flight, ``rate_per_s``; ``request_timeout`` seconds for one
    answer, default 60, and ``retries`` of a timed-out or transiently failed request, default
    4), ``chain`` or ``function``
    (``module:NAME``), or ``rag_demo``: a :class:`RAGBuilder` answered by ``model`` (a name or
    loaded model, with the run options ``run``; decoded by CID at ``lambda_`` and
    ``bounded_eps``) or, with ``endpoint``, by that endpoint: the documents inline in the app's
    prompt (``endpoint_context="inline"``) or, for a ``ctxleak serve`` proxy, as its marked
    context (``"ctxleak"``), decoded there at ``lambda_`` / ``bounded_eps``;
    ``endpoint_seeded``: send each question's seed to the endpoint (default: inline yes, to
    ``ctxleak serve`` no, as it draws a DP answer's noise itself and refuses a client's seed
    unless started with ``--audit-seeds``)."""
    given = [name for name, on in (("target", target is not None),
                                   ("endpoint", endpoint is not None and not rag_demo),
                                   ("chain", chain is not None),
                                   ("function", function is not None),
                                   ("rag_demo", rag_demo)) if on]
    if len(given) != 1:
        raise ConfigError("give exactly one target: endpoint, chain, function or rag_demo"
                          + (f" (got {', '.join(given)})" if given else ""),
                          param=given[1] if len(given) > 1 else "endpoint")
    endpoint_kw: dict[str, Any] = {"api_key_env": api_key_env, "system": system,
                                   "max_tokens": max_new_tokens, "concurrency": concurrency,
                                   "rate_per_s": rate_per_s}
    for name, value, key in ((("request_timeout", check_request_timeout(request_timeout),
                               "timeout_s"), ("retries", check_retries(retries), "retries"))):
        if value is not None:
            if endpoint is None:
                raise ConfigError(f"{name} is for an endpoint's requests: give endpoint=URL, or "
                                  "leave it out", param=name, also=("endpoint",))
            endpoint_kw[key] = value
    if target is not None:
        return target if isinstance(target, RAGBuilder) else as_target(target)
    if chain is not None:
        return as_target(load_object(chain, "chain"))
    if function is not None:
        return as_target(load_object(function, "function"))
    if endpoint is not None and not rag_demo:
        return ChatEndpointTarget(endpoint, _endpoint_model(endpoint, endpoint_model),
                                  temperature=temperature or 0.0, **endpoint_kw)
    if endpoint is not None:
        return RAGBuilder(_endpoint_answerer(endpoint, _endpoint_model(endpoint, endpoint_model),
                                             endpoint_context, lambda_, bounded_eps,
                                             {**endpoint_kw, "temperature": temperature,
                                              "seeded": endpoint_seeded},
                                             (run or {}).get("seed", 0)),
                          top_k=top_k)
    return RAGBuilder(_model_answerer(model, lambda_, bounded_eps, temperature, max_new_tokens,
                                      run or {}), top_k=top_k)


def _endpoint_model(endpoint: str, name: str | None) -> str:
    if not name:
        raise ConfigError(f"endpoint {endpoint} needs endpoint_model: the model name it serves",
                          param="endpoint_model")
    return name


def _endpoint_answerer(endpoint: str, model: str, context: str, lambda_: float,
                       bounded_eps: float | None, settings: Mapping[str, Any],
                       seed: int) -> EndpointAnswerer:
    """The demo RAG app's answerer through ``endpoint``; CID's settings go to ``ctxleak
    serve`` (``context="ctxleak"``) and are refused for a plain endpoint, which ignores them."""
    cid: dict[str, Any] = {}
    if lambda_ != 1.0:
        cid["lambda"] = lambda_
    if bounded_eps is not None:
        cid["epsilon"] = bounded_eps
    if cid and context != "ctxleak":
        raise ConfigError("lambda_ and bounded_eps through an endpoint are ctxleak serve's "
                          "decoding settings: give endpoint_context='ctxleak' (--endpoint-"
                          "context ctxleak) for a ctxleak serve proxy", param="endpoint_context")
    return EndpointAnswerer(endpoint, model, context=context, ctxleak=cid or None, seed=seed,
                            **settings)


def _model_answerer(model: Any, lambda_: float, bounded_eps: float | None,
                    temperature: float | None, max_new_tokens: int,
                    run: Mapping[str, Any]) -> MechanismAnswerer:
    """The demo RAG app's answerer: ``model`` (loaded with the run options ``run`` when given
    by name) decoding by CID at ``lambda_`` / ``bounded_eps``, sampling at ``temperature``
    (default 1; 0: greedy, which voids bounded CID's guarantee and is refused with it), each
    question from its own seed (the run's ``seed`` and the question)."""
    from ctxleak.api.running import run_options  # the face's one road from a name to a model
    from ctxleak.run.runner import load_lm

    temperature = 1.0 if temperature is None else temperature
    if temperature == 0 and bounded_eps is not None:
        raise ConfigError("temperature 0 (greedy) voids bounded CID's guarantee, which holds "
                          "for sampled tokens: give a temperature > 0", param="temperature")
    common, lm = run_options(model, run)
    cid = CIDConfig(lam=lambda_, temperature=temperature or 1.0, max_new_tokens=max_new_tokens,
                    min_new_tokens=0, bounded_eps=bounded_eps)
    return ModelAnswerer(lm if lm is not None else load_lm(common), cid, seed=common.seed,
                         greedy=temperature == 0)


def on_target(target: Any, documents: Sequence[AttackDocument]) -> Target:
    """The Target attacked: a :class:`RAGBuilder` built over ``documents``, any other as
    :func:`~ctxleak.targets.frameworks.as_target` makes it."""
    if isinstance(target, RAGBuilder):
        return target.build([{"id": d.id, "text": d.text} for d in documents])
    return as_target(target)


def claimed_eps(target: Any, attacks: Sequence[str], questions: int,
                perturbations: int = PERTURBATIONS) -> float | None:
    """The ε a RAGBuilder's defence claims for one document over the queries one attack asks
    of it: its claim per response (bounded CID: ε per token × new tokens, as the canary audit's
    ex-ante guarantee) × the most queries per document (the interrogation attack asks
    ``questions``, the calibrated one 1 + ``perturbations``, the others one); in process (the
    answerer's mechanism) or through ``ctxleak serve`` (its ``epsilon`` × ``max_tokens``;
    another defence the proxy deploys says its claim with each answer, which the attack reads
    instead). None without a pure ε-DP claim that covers a document
    (:func:`~ctxleak.methods.attacks.attack_method.document_eps`)."""
    if not isinstance(target, RAGBuilder):
        return None
    answerer = target.answerer
    queries = queries_per_document(attacks, questions, perturbations)
    if isinstance(answerer, MechanismAnswerer):
        claim = answerer.mechanism.claim(answerer.decoding)
        return document_eps(claim.eps, claim.delta, claim.relation, queries)
    # an endpoint answerer: ctxleak serve's settings (else the claim its answers say)
    eps = (getattr(answerer, "settings", None) or {}).get("epsilon")
    tokens = getattr(getattr(answerer, "endpoint", None), "max_tokens", None)
    return None if eps is None or tokens is None else \
        document_eps(eps * tokens, 0.0, "context", queries)


__all__ = ["RAGBuilder", "attack_target", "claimed_eps", "load_object", "on_target"]
