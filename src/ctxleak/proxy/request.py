"""A chat-completion request read for the privacy proxy: which content is the private context
(the documents marked in its ``ctxleak`` field, which the OpenAI client sends with
``extra_body``), which is prompt (the chat messages), and the decoding settings. Every refusal
is a :class:`ProxyError` naming the request field, answered in the OpenAI error shape."""

from __future__ import annotations

import json
import math
from functools import lru_cache
from typing import Any

from ctxleak.errors import ConfigError
from ctxleak.mitigations.datastore import Datastore
from ctxleak.mitigations.mechanisms import Mechanism
from ctxleak.mitigations.named import parse_mechanism
from ctxleak.proxy.chat_request import ChatRequest, Document
from ctxleak.proxy.config import MIN_TEMPERATURE, ProxyConfig

#: Request fields the proxy does not implement for an answer (refused with HTTP 400
#: ``unsupported_field``, not ignored): OpenAI's, and the sampling and decoding fields vLLM's
#: OpenAI server takes beside them, each of which would change the answer a client expects.
UNSUPPORTED = ("tools", "tool_choice", "functions", "function_call", "parallel_tool_calls",
               "logprobs", "top_logprobs", "stop", "response_format", "logit_bias", "top_p",
               "presence_penalty", "frequency_penalty", "top_k", "min_p", "typical_p",
               "repetition_penalty", "length_penalty", "best_of", "use_beam_search",
               "ignore_eos", "stop_token_ids", "bad_words", "allowed_token_ids",
               "prompt_logprobs", "truncate_prompt_tokens", "guided_json", "guided_regex",
               "guided_choice", "guided_grammar", "structured_outputs", "prediction",
               "reasoning_effort", "modalities", "audio", "web_search_options")


class ProxyError(Exception):
    """An HTTP error in the OpenAI shape: ``{"error": {"message", "type", "param", "code"}}``."""

    def __init__(self, status: int, message: str, *, param: str | None = None,
                 kind: str = "invalid_request_error", code: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.kind = kind
        self.code = code

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.kind, "param": self.param,
                          "code": self.code}}


def _bad(param: str, message: str) -> ProxyError:
    return ProxyError(400, f"{param}: {message}", param=param)


def _text(value: str, param: str) -> str:
    """``value`` as it may reach the tokenizer and the ledger: valid Unicode (no lone surrogate,
    which JSON's ``\\ud800`` escapes can carry)."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise _bad(param, "holds a lone surrogate (a \\ud800-\\udfff escape that is not "
                          "half of a pair): not valid Unicode text") from None
    return value


def _stored(value: str, param: str) -> str:
    """A string the ledger keeps (an id, a class): :func:`_text`, and no NUL character, which
    PostgreSQL cannot store: refused whatever the ledger, so a request reads the same on every
    store."""
    if "\x00" in _text(value, param):
        raise _bad(param, "holds a NUL character (\\u0000), which the ledger cannot keep")
    return value


def parse_mechanism_field(value: Any) -> Mechanism:
    """``ctxleak.mechanism``: a spec such as ``"dp-rag:eps=5"`` or ``{"name": "dp-rag", "eps":
    5}`` (:func:`~ctxleak.mitigations.named.parse_mechanism`); a bad one is HTTP 400 naming
    the field."""
    if not isinstance(value, (str, dict)):
        raise _bad("ctxleak.mechanism", f"must be a mechanism such as \"dp-rag:eps=5\" or "
                                        f"{{\"name\": \"dp-rag\", \"eps\": 5}}, not {value!r}")
    try:
        return parse_mechanism(value)
    except ConfigError as exc:
        text = str(exc).removeprefix("mechanisms: ")
        raise _bad("ctxleak.mechanism", text) from None


#: The deepest nesting of arrays and objects a request body may have (a chat request needs 6).
MAX_DEPTH = 64


def _depth(value: Any) -> int:
    """How deeply ``value``'s arrays and objects nest (a scalar: 0), without recursion."""
    deepest, todo = 0, [(value, 1)]
    while todo:
        item, depth = todo.pop()
        children = item.values() if isinstance(item, dict) else \
            item if isinstance(item, list) else None
        if children is not None:
            deepest = max(deepest, depth)
            if depth > MAX_DEPTH:
                break
            todo.extend((child, depth + 1) for child in children)
    return deepest


def parse_body(raw: bytes) -> tuple[dict[str, Any], bytes]:
    """The request body as a JSON object (and its bytes): not JSON, not an object or nested
    more than :data:`MAX_DEPTH` levels is HTTP 400."""
    deep = False
    try:
        body = json.loads(raw)
    except RecursionError:
        body, deep = None, True
    except ValueError:
        raise ProxyError(400, "the request body is not JSON") from None
    if deep or _depth(body) > MAX_DEPTH:
        raise ProxyError(400, f"the request body nests arrays and objects more than "
                              f"{MAX_DEPTH} levels deep")
    if not isinstance(body, dict):
        raise ProxyError(400, "the request body must be a JSON object")
    return body, raw


def is_marked(body: dict[str, Any]) -> bool:
    """Whether the request marks private context (a ``ctxleak`` field with documents); one
    without it passes through to the upstream unchanged."""
    marked = body.get("ctxleak")
    if marked is None:
        return False
    if isinstance(marked, dict) and marked.get("documents") == []:
        return False
    return True


def _number(value: Any, param: str) -> float:
    """A request's number: an int or float (not true or false), finite in float64 (an integer
    too large for it is HTTP 400, not an overflow)."""
    try:
        number = float(value) if isinstance(value, (int, float)) and \
            not isinstance(value, bool) else math.nan
    except OverflowError:
        number = math.nan
    if not math.isfinite(number):
        shown = f"{str(value)[:20]}…" if len(str(value)) > 24 else repr(value)
        raise _bad(param, f"must be a finite number, not {shown}")
    return number


def _integer(value: Any, param: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _bad(param, f"must be an integer, not {value!r}")
    if not low <= value <= high:
        raise _bad(param, f"must be between {low} and {high}, not {value}")
    return value


def _content(message: Any, k: int) -> str:
    """The text of message ``k``: a string, or a list of ``{"type": "text", "text": …}``."""
    if not isinstance(message, dict):
        raise _bad(f"messages[{k}]", "must be an object with 'role' and 'content'")
    content = message.get("content")
    if content is None:
        return ""
    if isinstance(content, str):
        return _text(content, f"messages[{k}].content")
    if isinstance(content, list):
        texts = []
        for j, part in enumerate(content):
            if not isinstance(part, dict) or part.get("type") != "text" \
                    or not isinstance(part.get("text"), str):
                raise _bad(f"messages[{k}].content[{j}]", "only text parts are supported")
            texts.append(_text(part["text"], f"messages[{k}].content[{j}].text"))
        return "".join(texts)
    raise _bad(f"messages[{k}].content", "must be a string or a list of text parts")


def prompt_text(messages: Any) -> str:
    """The prompt of a CID answer: the messages' texts joined by blank lines (one user message:
    its text exactly). It fills the query slot of the influence prompt, so a one-message request
    decodes as ``ctxleak influence`` does on the same document and question."""
    if not isinstance(messages, list) or not messages:
        raise _bad("messages", "must be a non-empty list of chat messages")
    texts = [_content(m, k) for k, m in enumerate(messages)]
    query = "\n\n".join(t for t in texts if t)
    if not query.strip():
        raise _bad("messages", "hold no text (the question is the prompt of the answer)")
    return query


@lru_cache(maxsize=4)
def datastore_documents(store: Datastore) -> tuple[Document, ...]:
    """The proxy's datastore as the documents of a request answered over it (the same tuple
    every time)."""
    return tuple(Document(i, t, None) for i, t in store.documents)


def _documents(marked: dict[str, Any]) -> tuple[Document, ...]:
    docs = marked.get("documents")
    if not isinstance(docs, list) or not docs:
        raise _bad("ctxleak.documents", "must be a non-empty list of {\"id\", \"text\"} objects")
    out: list[Document] = []
    seen: dict[str, int] = {}
    for k, doc in enumerate(docs):
        where = f"ctxleak.documents[{k}]"
        if not isinstance(doc, dict):
            raise _bad(where, "must be an object with 'id' and 'text'")
        doc_id, text = doc.get("id"), doc.get("text")
        if doc_id is None or (isinstance(doc_id, str) and not doc_id.strip()):
            raise _bad(f"{where}.id", "is missing: every document needs an id (the budget is "
                                      "kept per document id)")
        if isinstance(doc_id, bool) or not isinstance(doc_id, (str, int)):
            raise _bad(f"{where}.id", f"must be a string, not {doc_id!r}")
        if not isinstance(text, str) or not text:
            raise _bad(f"{where}.text", "must be a non-empty string")
        cls = doc.get("class")
        if cls is not None and (not isinstance(cls, str) or not cls.strip()):
            raise _bad(f"{where}.class", f"must be a class name such as \"public\" or "
                                         f"\"restricted\", not {cls!r}")
        doc_id = _stored(str(doc_id), f"{where}.id")
        _text(text, f"{where}.text")
        if cls is not None:
            _stored(cls, f"{where}.class")
        if doc_id in seen:  # each copy would take its own place (a shard) for one charge
            raise ProxyError(400, f"{where}.id: {doc_id!r} is given twice (as document "
                                  f"{seen[doc_id]} too): a document is listed once",
                             param=f"{where}.id", code="duplicate_document")
        seen[doc_id] = k
        out.append(Document(doc_id, text, cls))
    return tuple(out)


def parse_request(body: dict[str, Any], config: ProxyConfig) -> ChatRequest:
    """The request's marked context, its mechanism and settings, each bad field refused by
    name: CID at ``ctxleak.lambda`` / ``ctxleak.epsilon``, the mechanism ``ctxleak.mechanism``
    names, or the proxy's ``mechanism`` for a request that names neither."""
    marked = body.get("ctxleak")
    if marked is None and config.datastore is not None:  # every request is answered over it
        marked = {}
    if not isinstance(marked, dict):
        raise _bad("ctxleak", "must be an object such as {\"documents\": [{\"id\": …, \"text\": "
                              "…}], \"lambda\": 0.5} or with \"epsilon\"")
    unknown = sorted(set(marked) - {"documents", "lambda", "epsilon", "mechanism"})
    if unknown:
        raise _bad(f"ctxleak.{unknown[0]}", "is not a field of the marked context (documents, "
                                            "lambda, epsilon, mechanism)")
    over_datastore = config.datastore is not None and "lambda" not in marked \
        and "epsilon" not in marked
    if over_datastore and marked.get("documents"):  # (its size is the operator's)
        raise _bad("ctxleak.documents", "this proxy answers over its own datastore: send the "
                                        "question only")
    documents = datastore_documents(config.datastore) if over_datastore else _documents(marked)
    mechanism = _mechanism(marked, config)
    if over_datastore and not mechanism.over_datastore:
        raise _bad("ctxleak.mechanism", f"{mechanism.key()} decodes with the documents "
                                        f"a request gives, not over a datastore")
    key = mechanism.key()
    for name in UNSUPPORTED:
        if body.get(name) is not None:
            raise ProxyError(400, f"{name}: is not supported for an answer of {key} (refused, "
                                  f"not ignored)", param=name, code="unsupported_field")
    _within_bounds(mechanism, len(documents), over_datastore, config)
    query, temperature = _prompt_and_temperature(body, config)
    max_tokens, min_tokens = _lengths(body, config)
    seed, stream, include_usage = _seed_and_stream(body)
    request = ChatRequest(documents=documents, query=query,
                          question=last_user_message(body["messages"]), mechanism=mechanism,
                          temperature=temperature, max_tokens=max_tokens,
                          min_tokens=min_tokens, seed=seed, stream=stream,
                          model=str(body.get("model") or config.served_name),
                          include_usage=include_usage,
                          datastore=config.datastore if over_datastore else None,
                          messages=config.prompt_messages,
                          public_top_k=config.public_top_k, seed_known=seed is not None)
    _check_charge(request)
    if seed is not None and request.charge.guaranteed and not config.audit_seeds:
        raise ProxyError(400, f"seed: an answer of {key} is differentially private only while "
                              f"its noise is secret: the proxy draws its seed itself, and a "
                              f"client's seed is refused (an operator auditing the proxy "
                              f"starts it with --audit-seeds)", param="seed",
                         code="seed_not_allowed")
    return request


def over_limit(param: str, message: str) -> ProxyError:
    """HTTP 400 ``over_limit`` on ``param``: a request past a bound the operator set at
    start."""
    return ProxyError(400, f"{param}: {message}", param=param, code="over_limit")


def _within_bounds(mechanism: Mechanism, n_documents: int, over_datastore: bool,
                   config: ProxyConfig) -> None:
    """The operator's bounds on one request, checked before anything is reserved or decoded:
    at most ``max_documents`` documents of its own, at most ``max_streams`` prompt streams
    decoded at once (:meth:`~ctxleak.mitigations.mechanisms.Mechanism.streams`), and enough
    documents for the mechanism; over the datastore, no message says its size."""
    key = mechanism.key()
    if not over_datastore and n_documents > config.max_documents:
        raise over_limit("ctxleak.documents", f"{n_documents} documents, more than this "
                                              f"proxy's max_documents of "
                                              f"{config.max_documents} per request")
    streams = mechanism.streams(n_documents, over_datastore)
    if streams > config.max_streams:
        raise over_limit("ctxleak.mechanism", f"{key} would decode {streams} prompt streams "
                                              f"at once, more than this proxy's max_streams "
                                              f"of {config.max_streams}")
    if n_documents < mechanism.min_documents:
        raise _bad("ctxleak.documents", f"{key} needs at least {mechanism.min_documents} "
                                        f"documents, the request has {n_documents}"
                   if not over_datastore else f"{key} needs more documents than this "
                                              f"proxy's datastore holds")


def _mechanism(marked: dict[str, Any], config: ProxyConfig) -> Mechanism:
    """The request's mechanism: ``ctxleak.mechanism``, or CID at ``ctxleak.lambda`` (λ in
    [0, 1], default 1) and ``ctxleak.epsilon`` (bounded CID's ε per token), or the proxy's."""
    if marked.get("mechanism") is not None:
        if marked.get("lambda") is not None or marked.get("epsilon") is not None:
            raise _bad("ctxleak.mechanism", "give ctxleak.mechanism or CID's ctxleak.lambda / "
                                            "ctxleak.epsilon, not both")
        return _allowed(parse_mechanism_field(marked["mechanism"]), config)
    if "lambda" not in marked and "epsilon" not in marked:
        if config.mechanism is None:
            raise _bad("ctxleak.lambda", "give ctxleak.lambda (CID's λ in [0, 1]) or "
                                         "ctxleak.epsilon (bounded CID's ε per token)")
        return config.mechanism
    lam = 1.0
    if marked.get("lambda") is not None:
        lam = _number(marked["lambda"], "ctxleak.lambda")
        if not 0.0 <= lam <= 1.0:
            raise _bad("ctxleak.lambda", f"must be in [0, 1] (0: no context, 1: plain "
                                         f"decoding), not {lam}")
    eps = None
    if marked.get("epsilon") is not None:
        eps = _number(marked["epsilon"], "ctxleak.epsilon")
        if not eps > 0:
            raise _bad("ctxleak.epsilon", f"must be > 0 (ε per token of bounded CID), not {eps}")
    # Context Influence Decoding by its name in the registry (the proxy names no mechanism class)
    return parse_mechanism({"name": "cid", "lam": lam,
                            **({} if eps is None else {"bounded_eps": eps})})


def _allowed(mechanism: Mechanism, config: ProxyConfig) -> Mechanism:
    """A client's ``ctxleak.mechanism`` where the operator allows it (one of
    ``allowed_mechanisms`` or the proxy's own, compared by key; any with
    ``allow_any_mechanism``), else HTTP 400 ``mechanism_not_allowed`` listing the allowed.
    (Context Influence Decoding asked by ``ctxleak.lambda`` / ``ctxleak.epsilon`` is not
    checked here: those stay a client's choice.)"""
    keys = config.allowed_keys()
    if config.allow_any_mechanism or mechanism.key() in keys:
        return mechanism
    listed = ", ".join(keys) if keys else "none: this proxy answers by its own settings only"
    raise ProxyError(400, f"ctxleak.mechanism: {mechanism.key()} is not one of the mechanisms "
                          f"this proxy's operator allows ({listed})", param="ctxleak.mechanism",
                     code="mechanism_not_allowed")


def _check_charge(request: ChatRequest) -> None:
    """What the request would reserve, checked before anything is: an ε per token needs sampled
    tokens and a finite reservation; a mechanism must be able to claim the answer."""
    per_token = request.charge.per_token
    if per_token is not None and request.temperature is None:
        raise _bad("temperature", "must be > 0 with ctxleak.epsilon: bounded CID's guarantee "
                                  "holds for sampled tokens, not greedy ones")
    if per_token is not None and not math.isfinite(per_token * (request.max_tokens + 1)):
        raise _bad("ctxleak.epsilon", f"the reservation ε × (max_tokens + 1) = {per_token:g} × "
                                      f"{request.max_tokens + 1} is not a finite number")
    try:
        _ = request.claim
    except ConfigError as exc:
        raise _bad("ctxleak.mechanism", f"{request.mechanism.key()} at max_tokens "
                                        f"{request.max_tokens}: {exc}") from None


def _prompt_and_temperature(body: dict[str, Any], config: ProxyConfig
                            ) -> tuple[str, float | None]:
    """``n`` (one choice), the prompt text and the temperature (None: greedy)."""
    n = body.get("n")
    if n is not None and n != 1:
        raise _bad("n", f"only one choice per request (n = 1), not {n!r}")
    query = prompt_text(body.get("messages"))
    temperature: float | None = config.temperature
    if body.get("temperature") is not None:
        t = _number(body["temperature"], "temperature")
        if t < 0:
            raise _bad("temperature", f"must be >= 0, not {t}")
        if 0 < t < MIN_TEMPERATURE:
            raise _bad("temperature", f"must be 0 (greedy) or at least {MIN_TEMPERATURE:g}, not "
                                      f"{t:g}: below it CID could not decode at the λ asked")
        temperature = t if t > 0 else None
    return query, temperature


def _lengths(body: dict[str, Any], config: ProxyConfig) -> tuple[int, int]:
    """``max_tokens`` (or ``max_completion_tokens``) and ``min_tokens``."""
    limit = config.max_tokens_limit
    max_tokens = config.max_tokens
    for name in ("max_completion_tokens", "max_tokens"):
        if body.get(name) is not None:
            max_tokens = _integer(body[name], name, 1, limit)
    min_tokens = min(config.min_tokens, max_tokens)
    if body.get("min_tokens") is not None:
        min_tokens = _integer(body["min_tokens"], "min_tokens", 0, max_tokens)
    return max_tokens, min_tokens


def _seed_and_stream(body: dict[str, Any]) -> tuple[int | None, bool, bool]:
    """``seed`` (None: a fresh one), ``stream`` and ``stream_options.include_usage``."""
    seed = None
    if body.get("seed") is not None:
        seed = _integer(body["seed"], "seed", 0, (1 << 63) - 1)
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise _bad("stream", f"must be true or false, not {stream!r}")
    options = body.get("stream_options") or {}
    if not isinstance(options, dict):
        raise _bad("stream_options", f"must be an object, not {options!r}")
    return seed, stream, bool(options.get("include_usage"))


def last_user_message(messages: list[Any]) -> str:
    """The text of the last message whose role is ``user`` (a mechanism's query; the whole
    prompt text where none is)."""
    for k in range(len(messages) - 1, -1, -1):
        message = messages[k]
        if isinstance(message, dict) and message.get("role") == "user":
            text = _content(message, k)
            if text.strip():
                return text
    return prompt_text(messages)
