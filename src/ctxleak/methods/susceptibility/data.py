"""Relations, queries and context pools for susceptibility (Efficiently Computing Susceptibility to
Context in Language Models §5.1, Du et al. 2024).

Two input formats are read, both checked before any model is loaded:

* **ctxleak** (the bundled ``relations.json``): ``{"relations": [{name, closed_query,
  open_qa_query, open_completion_query, context_template, entities: [{entity, answer}],
  fake_entities: [...], answers: [...]}, ...]}``.
* **Du et al. (YAGO)** (``yago_qec.json`` of the ``measureLM`` repository, as we understand it
  from the paper and that repository's data-building notebook): an object mapping a relation id
  (a YAGO/schema.org predicate URI, possibly ``reverse-``-prefixed) to ``{"query_forms":
  {"closed": [...], "open": [...]}, "entities": [...], "answers": [...], "context_templates":
  [...], "fake_entities" / "gpt_fake_entities": [...], ...}``. Assumptions, documented here because
  the format has no spec: ``entities[i]`` and ``answers[i]`` are parallel (entity i's true answer;
  an entity listed several times keeps its first answer); the candidate answers for contexts are
  the distinct values of ``answers``; open forms that start with ``Q:`` are question-answering,
  the others sentence-completion; every form of a type becomes its own query (``#1``, ``#2`` in
  the id when a type has several); ``gpt_fake_entities`` (the GPT-4 names the paper uses) are
  preferred over ``fake_entities``; other keys (URIs, types, degrees) are ignored.

Query forms use ``{entity}`` and, for closed (yes/no) queries, ``{answer}``. A closed query about a
real entity asks about its true answer; one about a made-up entity asks about a candidate answer
picked deterministically from the relation's answers (Du et al. need one; the paper does not say
which).

Contexts and their sampling: :mod:`ctxleak.methods.susceptibility.contexts`.
"""

from __future__ import annotations

import string
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ctxleak.errors import ConfigError, InputError
from ctxleak.run.records import check_input_file, demo_path, id_key, parse_json

QUERY_TYPES = ("closed", "open_qa", "open_completion")


def unique(values: Sequence[str] | Any) -> list[str]:
    """The values without repeats, in order of first appearance."""
    return list(dict.fromkeys(values))
DEMO_FILE = "relations.json"


@dataclass(frozen=True)
class Relation:
    """One relation: query forms per type, context templates, real entities with their answers,
    made-up entities and the candidate answers used to build contexts."""

    name: str
    queries: dict[str, list[str]]
    context_templates: list[str]
    entities: list[tuple[str, str]]
    fake_entities: list[str]
    answers: list[str]


@dataclass(frozen=True)
class Query:
    """One query: a relation's query form filled with one entity."""

    id: str
    relation: str
    entity: str
    is_real: bool
    query_type: str
    text: str
    answer: str | None = None  # the true answer of a real entity
    index: int = 0  # position in the full query list (seeds do not depend on --limit)

    @property
    def is_open(self) -> bool:
        return self.query_type != "closed"


# ---------------------------------------------------------------------------------------------
# loading


def resolve_data_path(data: str | Path) -> Path:
    """``demo`` -> the bundled relation set; otherwise the path itself."""
    return demo_path(DEMO_FILE) if str(data) == "demo" else Path(data)


def load_relations(data: str | Path) -> list[Relation]:
    """Read and check a relation file (ctxleak or Du et al. YAGO format); ``"demo"`` for the
    bundled set. Errors name the file and the field."""
    path = check_input_file(resolve_data_path(data))
    blob = path.read_bytes().removeprefix(b"\xef\xbb\xbf")  # a UTF-8 byte-order mark
    try:
        text = blob.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"not UTF-8 text ({exc.reason})", file=str(path),
                         line=blob[:exc.start].count(b"\n") + 1) from None
    raw = parse_json(text, file=str(path))
    if isinstance(raw, dict) and "relations" in raw:
        items = raw["relations"]
        if not isinstance(items, list):
            raise InputError("must be a list of relation objects", file=str(path),
                             field="relations")
        relations = [_ctxleak_relation(item, i, str(path)) for i, item in enumerate(items)]
    elif isinstance(raw, dict) and raw and all(isinstance(v, dict) and "query_forms" in v
                                               for v in raw.values()):
        relations = [_yago_relation(name, item, str(path)) for name, item in raw.items()]
    else:
        raise InputError("unknown format: expected {\"relations\": [...]} (ctxleak) or an object "
                         "of relations with \"query_forms\" (Du et al. yago_qec.json)",
                         file=str(path))
    if not relations:
        raise InputError("no relations in the file", file=str(path))
    names = [id_key(r.name) for r in relations]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise InputError(f"relation names must be unique, repeated: {', '.join(dup)}",
                         file=str(path), field="name")
    return relations


def _where(index: int, name: str | None, key: str) -> str:
    label = f"relations[{index}]" + (f" ({name})" if name else "")
    return f"{label}.{key}"


def _string(item: dict[str, Any], key: str, where: str, file: str) -> str:
    if key not in item or item[key] is None:
        raise InputError("missing field", file=file, field=where)
    value = item[key]
    if not isinstance(value, str):
        raise InputError(f"must be a string, got {type(value).__name__}", file=file, field=where)
    if not value.strip():
        raise InputError("is empty", file=file, field=where)
    return value


def _string_list(value: Any, where: str, file: str, *, allow_empty: bool = False) -> list[str]:
    if value is None:
        raise InputError("missing field", file=file, field=where)
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise InputError("must be a list of strings", file=file, field=where)
    out = [v for v in value if v.strip()]
    if not out and not allow_empty:
        raise InputError("is empty", file=file, field=where)
    return out


def check_template(template: str, needed: Sequence[str], where: str, file: str) -> None:
    """A ``str.format`` template with exactly the slots in ``needed`` (``{entity}``,
    ``{answer}``): unknown, positional or missing slots are errors."""
    try:
        names = [n for _, n, _, _ in string.Formatter().parse(template) if n is not None]
    except ValueError as exc:
        raise InputError(f"bad template ({exc}); write literal braces as {{{{ and }}}}",
                         file=file, field=where) from None
    unknown = sorted({n for n in names if n not in ("entity", "answer")})
    if unknown:
        raise InputError(f"unknown placeholder(s) {', '.join('{' + (u or '') + '}' for u in unknown)}"
                         "; use {entity} and {answer}", file=file, field=where)
    missing = [n for n in needed if n not in names]
    if missing:
        raise InputError(f"template needs {', '.join('{' + m + '}' for m in missing)}",
                         file=file, field=where)


def _ctxleak_relation(item: Any, i: int, file: str) -> Relation:
    if not isinstance(item, dict):
        raise InputError("must be a JSON object", file=file, field=f"relations[{i}]")
    name = _string(item, "name", _where(i, None, "name"), file)
    w = lambda key: _where(i, name, key)  # noqa: E731
    slots = {"closed": ("entity", "answer"), "open_qa": ("entity",),
             "open_completion": ("entity",)}  # each query type's form: "<type>_query"
    queries = {t: [_string(item, f"{t}_query", w(f"{t}_query"), file)] for t in slots}
    for t, needed in slots.items():
        check_template(queries[t][0], needed, w(f"{t}_query"), file)
    context = _string(item, "context_template", w("context_template"), file)
    check_template(context, ("entity", "answer"), w("context_template"), file)
    raw_entities = item.get("entities")
    if not isinstance(raw_entities, list) or not raw_entities:
        raise InputError("missing field" if raw_entities is None else
                         "must be a non-empty list of {entity, answer} objects",
                         file=file, field=w("entities"))
    entities = []
    for j, ent in enumerate(raw_entities):
        if not isinstance(ent, dict):
            raise InputError("must be an {entity, answer} object", file=file,
                             field=w(f"entities[{j}]"))
        entities.append((_string(ent, "entity", w(f"entities[{j}].entity"), file),
                         _string(ent, "answer", w(f"entities[{j}].answer"), file)))
    _no_repeats([e for e, _ in entities], w("entities"), ".entity", file)
    fakes = _string_list(item.get("fake_entities", []), w("fake_entities"), file,
                         allow_empty=True)
    _no_repeats(fakes, w("fake_entities"), "", file)
    answers = _string_list(item.get("answers"), w("answers"), file)
    return Relation(name=name, queries=queries, context_templates=[context],
                    entities=entities, fake_entities=fakes, answers=unique(answers))


def _no_repeats(names: Sequence[str], where: str, suffix: str, file: str) -> None:
    """Entities are query ids (``relation/real/entity/type``): one entity twice would put two
    rows under one id, so it is refused, naming the second occurrence."""
    first: dict[str, int] = {}
    for j, name in enumerate(names):
        key = id_key(name)  # NFC: two spellings that print alike are one entity
        if key in first:
            raise InputError(f"duplicate entity {name!r} (also {where}[{first[key]}]); query "
                             "ids must be unique", file=file, field=f"{where}[{j}]{suffix}")
        first[key] = j


def _yago_relation(name: str, item: dict[str, Any], file: str) -> Relation:
    w = lambda key: f"{name}.{key}"  # noqa: E731
    forms = item.get("query_forms")
    if not isinstance(forms, dict):
        raise InputError("must be an object {closed: [...], open: [...]}", file=file,
                         field=w("query_forms"))
    queries: dict[str, list[str]] = {t: [] for t in QUERY_TYPES}
    for j, form in enumerate(_string_list(forms.get("closed", []), w("query_forms.closed"), file,
                                          allow_empty=True)):
        check_template(form, ("entity", "answer"), w(f"query_forms.closed[{j}]"), file)
        queries["closed"].append(form)
    for j, form in enumerate(_string_list(forms.get("open", []), w("query_forms.open"), file,
                                          allow_empty=True)):
        check_template(form, ("entity",), w(f"query_forms.open[{j}]"), file)
        queries["open_qa" if form.lstrip().startswith("Q:") else "open_completion"].append(form)
    if not any(queries.values()):
        raise InputError("no query forms", file=file, field=w("query_forms"))
    templates = _string_list(item.get("context_templates"), w("context_templates"), file)
    for j, t in enumerate(templates):
        check_template(t, ("entity", "answer"), w(f"context_templates[{j}]"), file)
    _string_list(item.get("entities"), w("entities"), file)  # a non-empty list of strings
    answers = item.get("answers")
    if not isinstance(answers, list) or len(answers) != len(item["entities"]):
        raise InputError("must be a list parallel to 'entities' (entity i's answer)", file=file,
                         field=w("answers"))
    first: dict[str, tuple[str, str]] = {}  # by NFC: spellings that print alike are one
    for e, a in zip(item["entities"], answers):
        if isinstance(e, str) and isinstance(a, str) and e.strip() and a.strip():
            first.setdefault(id_key(e), (e, a))
    seen = dict(first.values())
    if not seen:
        raise InputError("no (entity, answer) pair with both non-empty", file=file,
                         field=w("entities"))
    key = "gpt_fake_entities" if item.get("gpt_fake_entities") else "fake_entities"
    fakes = _string_list(item.get(key, []), w(key), file, allow_empty=True)
    return Relation(name=name, queries=queries, context_templates=templates,
                    entities=list(seen.items()), fake_entities=unique(fakes),
                    answers=unique(seen.values()))


# ---------------------------------------------------------------------------------------------
# queries


def parse_query_types(value: str | Sequence[str]) -> list[str]:
    """``"closed,open_qa"`` -> ``["closed", "open_qa"]``; ``open`` means both open forms."""
    parts = [p.strip() for p in (value.split(",") if isinstance(value, str) else value)]
    out: list[str] = []
    for p in parts:
        if not p:
            continue
        expanded = ["open_qa", "open_completion"] if p == "open" else [p]
        for t in expanded:
            if t not in QUERY_TYPES:
                raise ConfigError(f"query_types: unknown query type '{p}'; use "
                                  f"{', '.join(QUERY_TYPES)} (or 'open' for both open forms)",
                                  param="query_types")
            if t not in out:
                out.append(t)
    if not out:
        raise ConfigError("query_types: give at least one of " + ", ".join(QUERY_TYPES),
                          param="query_types")
    return out


def _pick(values: Sequence[str], key: str) -> str:
    return values[zlib.crc32(key.encode("utf-8")) % len(values)]


def _interleave(real: list[Any], fake: list[Any]) -> list[Any]:
    out: list[Any] = []
    for i in range(max(len(real), len(fake))):
        out += real[i:i + 1] + fake[i:i + 1]
    return out


def build_queries(relations: Sequence[Relation], query_types: Sequence[str],
                  entities_per_relation: int | None = None, seed: int = 0) -> list[Query]:
    """All queries, relation by relation, real and made-up entities interleaved (so that a small
    ``--limit`` sees both), each entity with every requested query type and form.

    ``entities_per_relation`` keeps at most that many real and that many made-up entities per
    relation (a seeded sample, as the paper subsamples 50 + 50 of Du et al.'s 1000)."""
    out: list[Query] = []
    for rel in relations:
        real = [(e, a, True) for e, a in rel.entities]
        fake = [(e, None, False) for e in rel.fake_entities]
        if entities_per_relation is not None:
            rng = np.random.default_rng([seed, zlib.crc32(rel.name.encode("utf-8"))])
            real = _subsample(real, entities_per_relation, rng)
            fake = _subsample(fake, entities_per_relation, rng)
        for entity, answer, is_real in _interleave(real, fake):
            kind = "real" if is_real else "fake"
            for qtype in query_types:
                forms = rel.queries.get(qtype, [])
                for f, form in enumerate(forms):
                    slot = answer if answer is not None else _pick(rel.answers, f"{rel.name}|{entity}")
                    text = form.format(entity=entity, answer=slot)
                    suffix = f"#{f + 1}" if len(forms) > 1 else ""
                    qid = f"{rel.name}/{kind}/{entity}/{qtype}{suffix}"
                    out.append(Query(id=qid, relation=rel.name, entity=entity, is_real=is_real,
                                     query_type=qtype, text=text, answer=answer,
                                     index=len(out)))
    return out


def _subsample(items: list[Any], n: int, rng: np.random.Generator) -> list[Any]:
    if len(items) <= n:
        return items
    keep = sorted(rng.choice(len(items), size=n, replace=False).tolist())
    return [items[i] for i in keep]
