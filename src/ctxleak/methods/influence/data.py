"""Examples and prompt formats for context influence (Estimating Privacy Leakage of Augmented
Contextual Knowledge in Language Models §4.1, Fig. 6)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ctxleak.bundled import BUNDLED_SETS
from ctxleak.engine.lm import LanguageModel
from ctxleak.engine.prompts import template_fields
from ctxleak.errors import ConfigError, InputError
from ctxleak.methods.rag.app_prompt import (
    AppPromptChoice,
    ExamplePrompt,
    app_whole_prompt,
    with_prompt,
)
from ctxleak.methods.rag.documents import (
    DocumentProblem,
    RetrievedDocument,
    duplicate_problem,
    is_document_list,
    to_document,
)
from ctxleak.methods.rag.passages import (
    SPLITS,
    clip_spans,
    list_pieces,
    piece_spans,
    split_context,
)
from ctxleak.methods.rag.spans import LOG_FORMATS, is_span_log, read_span_log
from ctxleak.methods.tradeoff.facts import FACTS
from ctxleak.mitigations.prompts import TASK_TEMPLATES, PromptParts, fit_window, template_parts
from ctxleak.run.inputs import is_named
from ctxleak.run.records import demo_path, example_id, iter_rows, reject_duplicate_ids


@dataclass(frozen=True)
class InfluenceExample:
    id: str | int
    context: str
    query: str
    reference: str | None
    task: str
    # a logged answer to audit (the ``response`` field): scored instead of one generated
    response: str | None = None
    # the context as passages (a retriever's list, or the context split by sentence or
    # paragraph, :mod:`ctxleak.methods.rag.passages`): pieces whose concatenation is
    # ``context``; None: one piece
    passages: tuple[str, ...] | None = None
    # the retrieved documents the passages came from, one per passage
    # (:mod:`ctxleak.methods.rag.documents`); None for passages given as strings or split from
    # the context
    documents: tuple[RetrievedDocument, ...] | None = None
    # the logged answer's token ids (the ``response_ids`` field): scored exactly as given
    response_ids: tuple[int, ...] | None = None
    # the app's prompt (:mod:`.app_prompt`; None: ctxleak's template) and the logged temperature
    prompt: ExamplePrompt | None = None
    logged_temperature: float | None = None

    @property
    def response_source(self) -> str:
        """Where the scored answer came from: ``generated``, ``logged ids`` or ``logged text
        (re-tokenised)``."""
        if self.response_ids is not None:
            return "logged ids"
        return "generated" if self.response is None else "logged text (re-tokenised)"

    def logged_ids(self, lm: LanguageModel) -> list[int]:
        """The token ids of the logged answer: ``response_ids`` exactly as given, else the
        ``response`` text re-tokenised (which may give other ids than the model generated)."""
        if self.response_ids is not None:
            return list(self.response_ids)
        return lm.encode(self.response or "")
    # every reference answer where the row gives a list (``reference`` is the first)
    references: tuple[str, ...] = ()
    # what the answer rests on (the ``fact`` field, :data:`FACTS`): ``common`` (stated in many
    # documents of the datastore), ``private`` (in one document only); None where not given
    fact: str | None = None
    # its documents of class public (``classes``), first among its passages: in every prompt,
    # the one without the documents included (:mod:`.classes`)
    public: tuple[str, ...] = ()

    @property
    def all_references(self) -> tuple[str, ...]:
        """The reference answers utility is scored against (the best one counts)."""
        return self.references or ((self.reference,) if self.reference else ())

    @property
    def passage_texts(self) -> list[str]:
        """Each passage without the whitespace that joins it to the one before."""
        return [p.strip() for p in self.passages or ()]


HUB_DATASETS = ("cnn_dailymail", "pubmedqa")

#: Bundled demo sets by name -> their file under ``data/demo`` (:data:`ctxleak.bundled.BUNDLED_SETS`,
#: the one registry, says what each is).
DEMO_SETS = {name: s.file for name, s in BUNDLED_SETS.items()}


def resolve_data(data: Any) -> Any:
    """A demo set's bundled file for its name (:data:`DEMO_SETS`); any other ``data`` as is."""
    for name, file in DEMO_SETS.items():
        if is_named(data, name):
            return demo_path(file)
    return data


def load_hub_dataset(name: str, split: str = "test", limit: int | None = None
                     ) -> list[InfluenceExample]:
    """The paper's datasets through the ``datasets`` library (needs it and network, or a local
    cache): CNN-DM 3.0.0 for summarisation, PubMedQA (pqa_labeled) for QA."""
    try:
        import datasets
    except ImportError:
        raise ConfigError(f"data={name!r} needs the 'datasets' package (pip install datasets) "
                          "and network access; or export it to JSONL and pass the file",
                          param="data") from None
    try:
        if name == "cnn_dailymail":
            ds = datasets.load_dataset("cnn_dailymail", "3.0.0", split=split)
        else:
            ds = datasets.load_dataset("pubmed_qa", "pqa_labeled", split="train")
    except Exception as exc:  # noqa: BLE001 - offline, missing cache, renamed dataset
        raise ConfigError(f"could not load dataset '{name}': {exc}") from None
    out = []
    for i, row in enumerate(ds):
        if limit is not None and i >= limit:
            break
        if name == "cnn_dailymail":
            out.append(InfluenceExample(str(row.get("id", i)), row["article"], "",
                                        row["highlights"], "summarization"))
        else:
            context = " ".join(row["context"]["contexts"])
            out.append(InfluenceExample(str(row.get("pubid", i)), context, row["question"],
                                        row.get("long_answer"), "qa"))
    return out


def load_examples(data: Any, **options: Any) -> list[InfluenceExample]:
    """The examples of :func:`load_log`."""
    return load_log(data, **options)[0]


def load_log(data: Any, *, task: str = "auto", rename: Mapping[str, str] | None = None,
             template: str | None = None, limit: int | None = None,
             passages: str | None = None, log_format: str = "auto",
             app: AppPromptChoice | None = None
             ) -> tuple[list[InfluenceExample], dict[str, int] | None]:
    """Read ``context``, ``query`` (may be empty for summarisation) and optional ``reference``
    (a string, or a list of acceptable answers), ``response`` (a logged answer, scored instead
    of generating one), ``response_ids`` (its token ids, scored exactly as given;
    :func:`check_logged_ids`), ``fact`` (``common`` or ``private``: what the answer rests on,
    copied to every record) and ``id`` from JSONL/CSV, the bundled demo sets with
    ``data='demo'`` or ``'demo-qa'`` (:data:`DEMO_SETS`), or the paper's
    datasets with ``data='cnn_dailymail'`` / ``'pubmedqa'`` (through ``datasets``).

    A row may give its context as ``passages``, a list of strings (joined by a blank line; it
    then needs no ``context``, and wins over one), or as ``documents``: what a retriever
    returned, a list of strings, dicts (``text``, ``id``, ``source``, ``metadata``, ``score``)
    or LangChain, LlamaIndex or Haystack documents (:mod:`ctxleak.methods.rag.documents`), each
    kept with its id, source, metadata, rank and score. Two documents with one id and different
    texts are refused. ``passages='sentence'`` or ``'paragraph'`` splits every other row's
    context into passages (:mod:`ctxleak.methods.rag.passages`). A JSONL file of OpenInference
    spans (``log_format='openinference'``, or recognised by its first line with ``'auto'``)
    gives one row per answered trace (:mod:`ctxleak.methods.rag.spans`); ``'rows'`` reads every
    file as rows. ``app``: the app's prompt (:mod:`.app_prompt`). Returns the examples and a
    span log's trace counts (``{"answers", "retriever_only"}``; None for other data)."""
    _check_options(task, template, passages)
    choice = app or AppPromptChoice()
    if isinstance(data, str) and data in HUB_DATASETS and not Path(data).exists():
        return [with_prompt(_split(ex, passages), None, choice, False, template_for(ex, template),
                            {})
                for ex in load_hub_dataset(data, limit=limit)], None
    path = resolve_data(data)
    if log_format not in LOG_FORMATS:
        raise ConfigError(f"log_format must be {', '.join(LOG_FORMATS)}, not '{log_format}'",
                          param="log_format")
    spans = log_format == "openinference" or (log_format == "auto" and is_span_log(path))
    log = read_span_log(path) if spans else None
    rows = log.rows if log is not None else iter_rows(path, rename=rename)
    out = []
    where: list[tuple[str, int]] = []
    seen_ids: dict[str, tuple[str, str]] = {}
    # One string object per distinct text (a document, a passage, a query) over the data set: a
    # day's query log retrieves the same documents again and again, and each turn then holds
    # references to them, not copies (ctxleak keeps every turn until the run ends).
    shared: dict[Any, Any] = {}
    for k, row in enumerate(rows):
        ex = _example(row, k, task, passages, seen_ids, shared)
        out.append(with_prompt(ex, row, choice, log is not None, template_for(ex, template), shared))
        where.append((row.file, row.line))
    reject_duplicate_ids((ex.id, file, line) for ex, (file, line) in zip(out, where))
    return out, log.traces if log is not None else None


def _check_options(task: str, template: str | None, passages: str | None) -> None:
    """Refuse a task, template or passage split that :func:`load_examples` cannot read."""
    if passages is not None and passages not in SPLITS:
        raise ConfigError(f"passages must be {' or '.join(SPLITS)}, not '{passages}'",
                          param="passages")
    if task not in ("auto", "custom", *TASK_TEMPLATES):
        raise ConfigError(f"unknown task '{task}': use auto, qa, summarization or custom",
                          param="task")
    if task == "custom" and not template:
        raise ConfigError("task='custom' needs template=..., e.g. 'Notes: {context}\\nQ: {query}'",
                          param="task", also=("template",))
    if template is not None:
        missing = {"context"} - set(template_fields(template))
        if missing:
            raise ConfigError("template must contain the slot {context}", param="template")


def _example(row: Any, k: int, task: str, passages: str | None,
             seen_ids: dict[str, tuple[str, str]], shared: dict[Any, Any]) -> InfluenceExample:
    """The example of row ``k``: its task, query, references, logged answer and its ids, its id,
    its documents or passages, and its context (texts shared through ``shared``)."""
    ex_task = task if task != "auto" else str(row.get("task") or "qa")
    if ex_task not in ("custom", *TASK_TEMPLATES):
        raise InputError(f"unknown task '{ex_task}'", file=row.file, line=row.line,
                         field="task")
    query = row.text("query", allow_empty=True) if "query" in row.fields else ""
    query = shared.setdefault(query, query)
    if ex_task == "qa" and not query.strip():
        raise InputError("is empty (a qa example needs a question)", file=row.file,
                         line=row.line, field="query")
    reference, references = _references(row)
    response = row.get("response")
    if response is not None and not isinstance(response, str):
        raise InputError("must be a string", file=row.file, line=row.line, field="response")
    logged_ids = _row_response_ids(row, query)
    raw_id = row.get("id")
    ex_id: str | int = str(k) if raw_id is None else example_id(raw_id, file=row.file,
                                                                line=row.line)
    if isinstance(raw_id, int) and not isinstance(raw_id, bool):
        ex_id = raw_id  # the user's id as given: an integer id merges back as one
    docs = _row_documents(row, query, seen_ids, shared)
    pieces = list_pieces([d.text for d in docs]) if docs else _row_passages(row)
    if pieces:
        pieces = [shared.setdefault(piece, piece) for piece in pieces]
    context = "".join(pieces) if pieces else row.text("context")
    context = shared.setdefault(context, context)
    example = InfluenceExample(id=ex_id, context=context, query=query, reference=reference,
                               references=references,
                               task=ex_task, passages=tuple(pieces) if pieces else None,
                               response=response, documents=docs,
                               response_ids=logged_ids, fact=_row_fact(row))
    return example if pieces else _split(example, passages)


def _row_documents(row: Any, query: str, seen: dict[str, tuple[str, str]],
                   shared: dict[Any, Any] | None = None
                   ) -> tuple[RetrievedDocument, ...] | None:
    """The row's retrieved documents: its ``documents`` field, or a ``passages`` field that holds
    more than strings (None for neither). Errors name the file, line, query, document and
    field; ``seen`` (id -> (text, query) over the data set) refuses one id with two texts.
    Texts, ids and metadata already in ``shared`` are taken from it, new ones added
    (:func:`_shared_document`)."""
    name = "documents" if row.get("documents") is not None else "passages"
    value = row.get(name)
    if value is None or (name == "passages" and not is_document_list(value)):
        return None
    where = f"query {query!r}: " if query else ""
    if not isinstance(value, (list, tuple)):
        raise InputError(f"{where}must be a list of retrieved documents, got "
                         f"{type(value).__name__}", file=row.file, line=row.line, field=name)
    if not value:
        raise InputError(f"{where}no documents: the retriever returned nothing",
                         file=row.file, line=row.line, field=name)
    docs = []
    for rank, item in enumerate(value, start=1):
        try:
            docs.append(to_document(item, rank))
        except DocumentProblem as exc:
            field = name if exc.field == "documents" else f"{name}.{exc.field}"
            raise InputError(f"{where}{exc}", file=row.file, line=row.line,
                             field=field) from None
    problem = duplicate_problem(docs, seen, query)
    if problem:
        raise InputError(where + problem, file=row.file, line=row.line, field=f"{name}.id")
    if shared is not None:
        docs = [_shared_document(d, shared) for d in docs]
    return tuple(docs)


def _shared_document(doc: RetrievedDocument, shared: dict[Any, Any]) -> RetrievedDocument:
    """``doc`` with its text, id, source and metadata taken from ``shared`` where an equal one
    is there (strings by themselves, metadata by its JSON, keys in their order), added where
    not. Nothing changes a document's metadata once made (what ctxleak writes copies it), so
    equal ones can be one dict."""
    def one(value: str | None) -> str | None:
        return None if value is None else shared.setdefault(value, value)

    key = ("metadata", json.dumps(doc.metadata) if doc.metadata else "")  # key order kept
    return RetrievedDocument(text=shared.setdefault(doc.text, doc.text), rank=doc.rank,
                             id=one(doc.id), source=one(doc.source),
                             metadata=shared.setdefault(key, doc.metadata), score=doc.score)


def _row_fact(row: Any) -> str | None:
    """The row's ``fact`` field (one of :data:`FACTS`), None without it; any other value an error
    naming the file, line and field."""
    value = row.get("fact")
    if value is None or (isinstance(value, str) and value in FACTS):
        return value
    raise InputError(f"must be {' or '.join(repr(f) for f in FACTS)}, not {value!r}",
                     file=row.file, line=row.line, field="fact")


def _row_response_ids(row: Any, query: str) -> tuple[int, ...] | None:
    """The row's ``response_ids`` (a logged answer's token ids), checked to be a non-empty list
    of integers ≥ 0; None without the field."""
    value = row.get("response_ids")
    if value is None:
        return None
    where = f"query {query!r}: " if query else ""
    if not isinstance(value, (list, tuple)) or not value:
        raise InputError(f"{where}must be a non-empty list of token ids", file=row.file,
                         line=row.line, field="response_ids")
    for t, tok in enumerate(value, start=1):
        if isinstance(tok, bool) or not isinstance(tok, int) or tok < 0:
            raise InputError(f"{where}token {t} is {tok!r}, not a token id (an integer >= 0)",
                             file=row.file, line=row.line, field="response_ids")
    return tuple(value)


def check_logged_ids(lm: LanguageModel, examples: Sequence[InfluenceExample]) -> None:
    """Refuse a logged ``response_ids`` the model cannot have produced: an id outside its
    vocabulary, or ids that do not decode (special tokens skipped, surrounding whitespace
    stripped) to the row's ``response`` text where both are given. The error names the example,
    its query and the field."""
    for ex in examples:
        if ex.response_ids is None:
            continue
        where = f"example {ex.id} (query {ex.query!r}): "
        bad = [t for t in ex.response_ids if t >= lm.vocab_size]
        if bad:
            raise InputError(f"{where}token id {bad[0]} is outside the model's vocabulary "
                             f"(size {lm.vocab_size}): were these ids made by another "
                             "model's tokenizer?", field="response_ids")
        if ex.response is not None:
            text = lm.decode(list(ex.response_ids))
            if text.strip() != ex.response.strip():
                raise InputError(f"{where}the ids decode to {_clip(text)!r}, not the "
                                 f"response {_clip(ex.response)!r}: give the ids the model "
                                 "generated for that response", field="response_ids")


def _clip(text: str, n: int = 60) -> str:
    return text if len(text) <= n else text[:n] + "..."


def _references(row: Any) -> tuple[str | None, tuple[str, ...]]:
    """The row's ``reference``: a string, or a list of acceptable answers (scored against the
    best); (first, all), checked."""
    value = row.get("reference")
    if value is None or isinstance(value, str):
        return value, ()
    if isinstance(value, (list, tuple)) and value and all(isinstance(v, str) and v.strip()
                                                          for v in value):
        return value[0], tuple(value)
    raise InputError("must be a string or a non-empty list of non-empty strings (acceptable "
                     "answers)", file=row.file, line=row.line, field="reference")


def _row_passages(row: Any) -> list[str] | None:
    """The row's ``passages`` field as context pieces (None when it has none), checked: a
    non-empty list of non-empty strings, else an error naming the file, line and field."""
    value = row.get("passages")
    if value is None:
        return None
    if not isinstance(value, (list, tuple)):
        raise InputError(f"must be a list of strings (the context's passages), got "
                         f"{type(value).__name__}", file=row.file, line=row.line,
                         field="passages")
    if not value:
        raise InputError("is an empty list: give at least one passage", file=row.file,
                         line=row.line, field="passages")
    for j, item in enumerate(value):
        if not isinstance(item, str):
            raise InputError(f"item {j} must be a string, got {type(item).__name__}",
                             file=row.file, line=row.line, field="passages")
        if not item.strip():
            raise InputError(f"item {j} is empty", file=row.file, line=row.line,
                             field="passages")
    return list_pieces(value)


def _split(example: InfluenceExample, mode: str | None) -> InfluenceExample:
    """``example`` with its context split into passages by ``mode`` (unchanged for None)."""
    if mode is None:
        return example
    return replace(example, passages=tuple(split_context(example.context, mode)))


def context_ids(lm: LanguageModel, example: InfluenceExample) -> tuple[list[int], list[tuple[int, int]]]:
    """The context's token ids and the ``[start, end)`` span of each passage in them: the whole
    string tokenised at once (one span) without passages, each passage on its own with them.
    Under the app's prompt, the context's tokens in the whole prompt tokenised at once
    (:func:`~ctxleak.engine.chat_prompt.whole_prompt`)."""
    whole = app_whole_prompt(lm, example)
    if whole is not None:
        return list(whole.context), list(whole.pieces)
    if not example.passages:
        ids = lm.encode(example.context)
        return ids, [(0, len(ids))]
    encoded = [lm.encode(piece) for piece in example.passages]
    return [t for ids in encoded for t in ids], piece_spans([len(ids) for ids in encoded])


def passage_spans(lm: LanguageModel, example: InfluenceExample, n_context: int
                  ) -> list[tuple[int, int] | None]:
    """Each passage's span in a context kept to its first ``n_context`` tokens (None for a
    passage cut out entirely); [] for an example without passages."""
    if not example.passages:
        return []
    return clip_spans(context_ids(lm, example)[1], n_context)


def template_for(example: InfluenceExample, template: str | None) -> str:
    if template is not None:
        return template
    return TASK_TEMPLATES[example.task]


def prompt_parts(lm: LanguageModel, example: InfluenceExample, template: str | None = None,
                 context_tokens: int | None = None, reserve: int = 0) -> tuple[PromptParts, int]:
    """The example's prompt split around its context, with the context cut to its first
    ``context_tokens`` tokens (Fig. 2b) and to the model's window minus ``reserve`` new tokens.
    Returns the parts and how many context tokens the window forced out (0 if none)."""
    whole = app_whole_prompt(lm, example)
    if whole is None:
        return template_parts(lm, template_for(example, template), context_ids(lm, example)[0],
                              example.query, context_tokens, reserve)
    kept = whole.context[:context_tokens]  # the app's messages, tokenised whole ([:None]: all)
    start = len(whole.before)
    ids, end, dropped = fit_window(lm, [*whole.before, *kept, *whole.after], start,
                                   start + len(kept), reserve)
    return PromptParts(tuple(ids[:start]), tuple(ids[start:end]), tuple(ids[end:]),
                       **whole.extra(end - start)), dropped
