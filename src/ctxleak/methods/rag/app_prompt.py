"""The application's own prompt ("Estimating Privacy Leakage of Augmented Contextual Knowledge in
Language Models", Def. 3.1 measured on the answer a deployment gave, under the prompt it sent):
where each example's prompt comes from, and the messages it is scored under.

- ``app messages``: an OpenInference LLM span's ``llm.input_messages``. The turn's documents
  are found in them (in rank order, in one message) and become the ``{context}`` slot, the
  query the ``{query}`` slot; the rest is the app's text, kept literally.
- ``app template``: the run's ``prompt_messages`` (chat messages with ``{context}`` and
  ``{query}``), or ``system_prompt`` before one user turn holding the run's template.
- ``ctxleak template``: ctxleak's template as one user turn (the default for other data).

Either of the app's is rendered through the model's chat template and tokenised whole
(:mod:`ctxleak.engine.chat_prompt`).
"""

from __future__ import annotations

import string
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ctxleak.engine.chat_prompt import (
    Messages,
    WholePrompt,
    as_template,
    has_chat_template,
    render_messages,
    whole_prompt,
)
from ctxleak.engine.lm import LanguageModel
from ctxleak.errors import ConfigError, InputError, warn
from ctxleak.methods.rag.spans import INPUT_MESSAGES
from ctxleak.mitigations.prompts import NAMED_MESSAGES
from ctxleak.run.records import parse_json, read_text_file

CTXLEAK, APP_MESSAGES, APP_TEMPLATE = "ctxleak template", "app messages", "app template"
_SLOTS = ("context", "query")


@dataclass(frozen=True)
class ExamplePrompt:
    """Where one example's prompt comes from (``source``: :data:`CTXLEAK`, :data:`APP_MESSAGES`
    or :data:`APP_TEMPLATE`), its messages with slots (None: ctxleak's template) and whether the
    run asked for the app's prompt (then a model without a chat template is an error, not a
    fallback)."""

    source: str
    messages: Messages | None = None
    required: bool = False


@dataclass(frozen=True)
class AppPromptChoice:
    """The run's choice: its ``prompt_messages`` (checked), ``system_prompt`` and
    ``app_prompt`` (None: a trace's messages where it has them; True: required; False:
    ctxleak's template)."""

    messages: Messages | None = None
    system_prompt: str | None = None
    use: bool | None = None

    @property
    def given(self) -> bool:
        """Whether the run gives the app's template itself."""
        return self.messages is not None or self.system_prompt is not None


def _escape(text: str) -> str:
    return text.replace("{", "{{").replace("}", "}}")


def load_prompt_messages(value: Any, param: str = "prompt_messages") -> Messages:
    """``value`` as chat messages with slots: a list of ``{"role", "content"}`` objects, or the
    path of a JSON file holding one. Each content a ``str.format`` template whose slots are
    ``{context}`` (exactly once over all messages) and ``{query}`` (at most once); or the name
    of a built-in prompt (:data:`~ctxleak.mitigations.prompts.NAMED_MESSAGES`, e.g.
    ``short-answer``). A bad one is an error naming the file (or the parameter) and the field
    (``[1].content``)."""
    where = param
    if isinstance(value, str) and value in NAMED_MESSAGES and not Path(value).exists():
        value = NAMED_MESSAGES[value]
    if isinstance(value, (str, Path)):
        where = str(value)
        if not Path(value).is_file():
            raise ConfigError(f"{param}: cannot read {where}: "
                              f"{'it is a folder' if Path(value).is_dir() else 'no such file'}",
                              param=param)
        # read as every data file is: UTF-8, nesting and repeated keys checked, errors naming
        # the file and the line
        value = parse_json(read_text_file(value), file=where)

    def bad(message: str, field: str | None = None) -> Exception:
        if where == param:
            return ConfigError(f"{param}{field or ''}: {message}", param=param)
        return InputError(message, file=where, field=field)

    if not isinstance(value, (list, tuple)) or not value:
        raise bad('must be a non-empty list of {"role", "content"} messages')
    out, slots = [], []
    for j, item in enumerate(value):
        if isinstance(item, tuple) and len(item) == 2:  # already read: (role, content)
            item = {"role": item[0], "content": item[1]}
        if not isinstance(item, Mapping):
            raise bad(f"must be an object, got {type(item).__name__}", f"[{j}]")
        for key in ("role", "content"):
            if not isinstance(item.get(key), str):
                raise bad("missing or not a string", f"[{j}].{key}")
        try:
            names = [f for _, f, _, _ in string.Formatter().parse(item["content"])
                     if f is not None]
        except ValueError as exc:
            raise bad(f"not a valid template ({exc}); write a literal brace as {{{{ or }}}}",
                      f"[{j}].content") from None
        unknown = sorted(set(names) - set(_SLOTS))
        if unknown:
            raise bad(f"unknown slot {{{unknown[0]}}}; allowed: {{context}}, {{query}} (a "
                      "literal brace is written {{ or }})", f"[{j}].content")
        slots += names
        out.append((item["role"], item["content"]))
    if slots.count("context") != 1 or slots.count("query") > 1:
        raise bad("the messages must hold {context} exactly once and {query} at most once "
                  f"(they hold {slots.count('context')} and {slots.count('query')})")
    return tuple(out)


def run_messages(choice: AppPromptChoice, template: str) -> Messages | None:
    """The run's own messages: ``prompt_messages`` (with ``system_prompt`` before them, where
    they have no system message), or ``system_prompt`` before one user turn holding
    ``template``; None when the run gives neither."""
    messages = choice.messages
    if messages is None and choice.system_prompt is None:
        return None
    if messages is None:
        messages = (("user", template),)
    if choice.system_prompt is not None:
        if messages[0][0] == "system":
            raise ConfigError("system_prompt and prompt_messages both give a system message: "
                              "give one", param="system_prompt", also=("prompt_messages",))
        messages = (("system", _escape(choice.system_prompt)), *messages)
    return messages


def trace_messages(raw: Any, texts: Sequence[str], query: str, doc_ids: Sequence[str | None],
                   where: Mapping[str, Any]) -> tuple[Messages, list[str]]:
    """A trace's input messages with its documents as the ``{context}`` slot and its query as
    ``{query}``, and the context's pieces as the app wrote them (document j with the app's text
    between it and the one before). The documents are looked for, in rank order, in one
    message; one found in none is an error naming the trace, the document and the field."""
    tid = where["trace"]
    messages = [(str(m.get("role", "")), m["content"]) for m in raw
                if isinstance(m, Mapping) and isinstance(m.get("content"), str)]
    if len(messages) != len(raw):
        raise InputError(f"trace {tid!r}: every input message needs a string role and content",
                         file=where["file"], line=where["line"], field=INPUT_MESSAGES)
    for m, (_, content) in enumerate(messages):
        found = _find_in_order(content, texts)
        if found is not None:
            return _slotted(messages, m, found, query), \
                [content[(found[j - 1][1] if j else found[0][0]):b]
                 for j, (_, b) in enumerate(found)]
    for j, text in enumerate(texts):
        if not any(text in c for _, c in messages):
            name = doc_ids[j] if doc_ids[j] is not None else f"document {j + 1}"
            raise InputError(f"trace {tid!r}: document {name!r} (retrieval.documents.{j}) is "
                             "not in the LLM span's input messages: the app's prompt cannot "
                             "be scored without and with it (give --no-app-prompt to score "
                             "under ctxleak's template)", file=where["file"],
                             line=where["line"], field=f"{INPUT_MESSAGES}.N.message.content")
    raise InputError(f"trace {tid!r}: the documents are not in one input message in their rank "
                     "order (give --no-app-prompt to score under ctxleak's template)",
                     file=where["file"], line=where["line"],
                     field=f"{INPUT_MESSAGES}.N.message.content")


def _find_in_order(content: str, texts: Sequence[str]) -> list[tuple[int, int]] | None:
    """The ``[start, end)`` of each text in ``content``, each after the one before; None when
    one is missing."""
    out, at = [], 0
    for text in texts:
        start = content.find(text, at)
        if start < 0:
            return None
        out.append((start, start + len(text)))
        at = start + len(text)
    return out


def _slotted(messages: list[tuple[str, str]], m: int, found: list[tuple[int, int]],
             query: str) -> Messages:
    """The messages with message ``m``'s documents (``found``) as ``{context}`` and the query,
    where it is in them (after the context in that message, else the last place it is), as
    ``{query}``; every other brace doubled."""
    out = [(role, _escape(content)) for role, content in messages]
    role, content = messages[m]
    a, b = found[0][0], found[-1][1]
    before, after = content[:a], content[b:]
    q_after = after.find(query) if query else -1
    if q_after >= 0:
        out[m] = (role, _escape(before) + "{context}" + _escape(after[:q_after]) + "{query}"
                  + _escape(after[q_after + len(query):]))
        return tuple(out)
    out[m] = (role, _escape(before) + "{context}" + _escape(after))
    for k in reversed(range(len(out))):
        piece = out[k][1] if k != m else _escape(before)
        at = piece.rfind(_escape(query)) if query else -1
        if at >= 0:
            slot = piece[:at] + "{query}" + piece[at + len(_escape(query)):]
            out[k] = (out[k][0], slot + ("{context}" + _escape(after) if k == m else ""))
            return tuple(out)
    return tuple(out)


def choose_prompt(choice: AppPromptChoice, row: Any, *, from_spans: bool, texts: Sequence[str],
                  doc_ids: Sequence[str | None], query: str, template: str
                  ) -> tuple[ExamplePrompt | None, list[str] | None]:
    """The prompt of one row (:class:`ExamplePrompt`; None for ctxleak's template on rows that
    are not traces, as before these options) and, for a trace's messages, the context's pieces
    as the app wrote them (else None). A trace's messages are used unless ``app_prompt`` is
    False; then the run's own; ``app_prompt=True`` without either is an error naming the
    trace and ``llm.input_messages``."""
    plain = ExamplePrompt(CTXLEAK) if from_spans else None
    if choice.use is False:
        return plain, None
    raw = row.get("input_messages") if from_spans else None
    if raw and texts:
        where = {"trace": row.get("id"), "file": row.file, "line": row.line}
        messages, pieces = trace_messages(raw, texts, query, doc_ids, where)
        return ExamplePrompt(APP_MESSAGES, messages, required=choice.use is True), pieces
    own = run_messages(choice, template)
    if own is not None:
        return ExamplePrompt(APP_TEMPLATE, own, required=True), None
    if choice.use is True and from_spans:
        raise InputError(f"trace {row.get('id')!r}: its LLM span has no input messages, and "
                         "the app's prompt was asked for (app_prompt=True, --app-prompt): give "
                         "prompt_messages, or --no-app-prompt to score under ctxleak's "
                         "template", file=row.file, line=row.line, field=INPUT_MESSAGES)
    if choice.use is True:
        raise ConfigError("app_prompt=True needs the app's prompt: a span log whose LLM spans "
                          "have llm.input_messages, or prompt_messages / system_prompt",
                          param="app_prompt", also=("prompt_messages", "system_prompt"))
    return plain, None


def with_prompt(example: Any, row: Any, choice: AppPromptChoice, from_spans: bool,
                template: str, shared: dict[Any, Any]) -> Any:
    """``example`` (an :class:`~ctxleak.methods.influence.data.InfluenceExample`) with the
    prompt :func:`choose_prompt` gives it (its context's pieces as the app wrote them, for a
    trace's messages) and its logged temperature; ``template``: the run's template for it."""
    docs = example.documents or ()
    prompt, pieces = choose_prompt(choice, row, from_spans=from_spans,
                                   texts=[d.text for d in docs], doc_ids=[d.id for d in docs],
                                   query=example.query,
                                   template=template)
    temperature = row.get("logged_temperature") if from_spans else None
    if prompt is None and temperature is None:
        return example
    if pieces is not None:
        pieces = [shared.setdefault(piece, piece) for piece in pieces]
        context = "".join(pieces)
        example = replace(example, context=shared.setdefault(context, context),
                          passages=tuple(pieces))
    return replace(example, prompt=prompt, logged_temperature=temperature)


def app_messages(lm: LanguageModel, example: Any) -> Any:
    """The app's messages ``example`` is scored under, or None for ctxleak's template: also
    when the model has no chat template and the run did not ask for the app's prompt (said
    once per model; :func:`prompt_source` then says ``ctxleak template``)."""
    prompt = example.prompt
    if prompt is None or prompt.messages is None:
        return None
    if has_chat_template(lm) or prompt.required:
        return prompt.messages  # required: rendering says the model has no chat template
    if not getattr(lm, "_warned_no_chat_template", False):
        warn(f"the model {lm.info.name} has no chat template: the app's messages are not "
             "used, every answer is scored under ctxleak's template", param="app_prompt")
        lm._warned_no_chat_template = True  # type: ignore[attr-defined]
    return None


def prompt_source(lm: LanguageModel, example: Any) -> str | None:
    """The record's ``prompt_source``: where the prompt the example was scored under came from
    (None for rows under ctxleak's template, whose records do not say it, as before)."""
    if example.prompt is None:
        return None
    return example.prompt.source if app_messages(lm, example) is not None else CTXLEAK


def app_whole_prompt(lm: LanguageModel, example: Any) -> WholePrompt | None:
    """``example``'s prompt under the app's messages, tokenised whole
    (:func:`~ctxleak.engine.chat_prompt.whole_prompt`); None under ctxleak's template."""
    messages = app_messages(lm, example)
    if messages is None:
        return None
    pieces = example.passages or (example.context,)
    texts = [d.text for d in example.documents or ()]
    if len(texts) != len(pieces):  # passages given as strings: their leading whitespace
        texts = [p.lstrip() for p in pieces]
    leads = [len(p) - len(t) if p.endswith(t) else 0 for p, t in zip(pieces, texts)]
    return whole_prompt(lm, render_messages(lm, messages), pieces, example.query, leads)


def temperature_note(logged: float, scored: float) -> str | None:
    """How a greedy log's numbers read (None for an answer sampled at T > 0): influence is a
    property of the model's next-token distribution, which a greedy (T = 0) decoder only
    takes the argmax of; the answer is scored under that distribution at ``scored``."""
    if logged != 0:
        return None
    own = " (the model's own next-token distribution)" if scored == 1 else ""
    return (f"logged at T = 0 (greedy); scored at T = {scored:g}{own}: influence is how much the "
            "documents moved the model's distribution over the answer, not the chance that a "
            "greedy decoder gives it")


def prompt_fields(lm: LanguageModel, example: Any, scored: float) -> dict[str, Any]:
    """A record's ``prompt_source``, ``logged_temperature`` and, for a greedy log,
    ``temperature_note`` (:func:`temperature_note`); none for rows without them (as before)."""
    out: dict[str, Any] = {}
    source = prompt_source(lm, example)
    if source is not None:
        out["prompt_source"] = source
    if example.logged_temperature is not None:
        out["logged_temperature"] = example.logged_temperature
        note = temperature_note(example.logged_temperature, scored)
        if note:
            out["temperature_note"] = note
    return out


def log_summary(lm: LanguageModel, examples: Sequence[Any], traces: Mapping[str, int] | None,
                temperatures: Sequence[float]) -> dict[str, Any]:
    """The summary's entries on a log: ``traces`` (a span log's answers, scored, and
    retriever-only traces, never scored), ``prompt_sources`` (answers per prompt source) and,
    for greedy answers, ``temperature_note`` (:func:`temperature_note`); none for other
    data."""
    out: dict[str, Any] = {}
    if traces is not None:
        out["traces"] = dict(traces)
    sources = Counter(s for s in (prompt_source(lm, ex) for ex in examples) if s is not None)
    if sources:
        out["prompt_sources"] = dict(sources)
    greedy = sum(ex.logged_temperature == 0 for ex in examples)
    if greedy:
        notes = dict.fromkeys(temperature_note(0.0, t) for t in temperatures)
        out["temperature_note"] = f"{greedy} answers " + "; ".join(n for n in notes if n)
    return out


def app_templates(lm: LanguageModel, examples: Sequence[Any]) -> list[str]:
    """The distinct app prompts the examples are scored under, each rendered through the
    model's chat template as a ``str.format`` template (:func:`~ctxleak.engine.chat_prompt.
    as_template`), in the order first met (for the run's provenance)."""
    seen: dict[Any, str] = {}
    for ex in examples:
        messages = app_messages(lm, ex)
        if messages is not None and messages not in seen:
            seen[messages] = as_template(render_messages(lm, messages))
    return list(dict.fromkeys(seen.values()))


__all__ = ["APP_MESSAGES", "APP_TEMPLATE", "CTXLEAK", "AppPromptChoice", "ExamplePrompt",
           "app_messages", "app_templates", "app_whole_prompt", "choose_prompt", "load_prompt_messages",
           "log_summary", "prompt_fields", "prompt_source", "run_messages", "temperature_note",
           "trace_messages", "with_prompt"]
