"""Examples and prompt formats for context influence (paper 000 §4.1, Fig. 6)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ctxleak.engine.models import LM
from ctxleak.engine.prompts import build_prompt, template_fields
from ctxleak.errors import ConfigError, InputError
from ctxleak.methods.influence.ngrams import PromptParts
from ctxleak.run.records import demo_path, read_rows

# The paper's formats: PubMedQA-style QA and CNN-DM summarisation (paper 000, Fig. 6).
TASK_TEMPLATES = {
    "qa": "Document: {context}. {query}",
    "summarization": "Article: {context}. Summary of the above news article:",
}


@dataclass(frozen=True)
class InfluenceExample:
    id: str
    context: str
    query: str
    reference: str | None
    task: str


def load_examples(data: str, *, task: str = "auto", rename: Mapping[str, str] | None = None,
                  template: str | None = None) -> list[InfluenceExample]:
    """Read ``context``, ``query`` (may be empty for summarisation) and optional ``reference``
    and ``id`` from JSONL/CSV, or the bundled demo set with ``data='demo'``."""
    if task not in ("auto", "custom", *TASK_TEMPLATES):
        raise ConfigError(f"unknown --task '{task}': use auto, qa, summarization or custom")
    if task == "custom" and not template:
        raise ConfigError("--task custom needs --template, e.g. 'Notes: {context}\\nQ: {query}'")
    if template is not None:
        missing = {"context"} - set(template_fields(template))
        if missing:
            raise ConfigError("--template must contain the slot {context}")
    path = demo_path("influence.jsonl") if data == "demo" else Path(data)
    rows = read_rows(path, rename=rename, required=["context"])
    out, seen = [], set()
    for k, row in enumerate(rows):
        ex_task = task if task != "auto" else str(row.get("task") or "qa")
        if ex_task not in ("custom", *TASK_TEMPLATES):
            raise InputError(f"unknown task '{ex_task}'", file=row.file, line=row.line,
                             field="task")
        query = row.text("query", allow_empty=True) if "query" in row.fields else ""
        if ex_task == "qa" and not query.strip():
            raise InputError("is empty (a qa example needs a question)", file=row.file,
                             line=row.line, field="query")
        reference = row.get("reference")
        if reference is not None and not isinstance(reference, str):
            raise InputError("must be a string", file=row.file, line=row.line, field="reference")
        ex_id = str(row.get("id") if row.get("id") is not None else k)
        if ex_id in seen:
            raise InputError(f"duplicate id '{ex_id}'", file=row.file, line=row.line, field="id")
        seen.add(ex_id)
        out.append(InfluenceExample(id=ex_id, context=row.text("context"), query=query,
                                    reference=reference, task=ex_task))
    return out


def template_for(example: InfluenceExample, template: str | None) -> str:
    if template is not None:
        return template
    return TASK_TEMPLATES[example.task]


def prompt_parts(lm: LM, example: InfluenceExample, template: str | None = None,
                 context_tokens: int | None = None, reserve: int = 0) -> tuple[PromptParts, int]:
    """The example's prompt split around its context, with the context cut to its first
    ``context_tokens`` tokens (Fig. 2b) and to the model's window minus ``reserve`` new tokens.
    Returns the parts and how many context tokens the window forced out (0 if none)."""
    tmpl = template_for(example, template)
    context_ids = lm.encode(example.context)
    if context_tokens is not None:
        context_ids = context_ids[:context_tokens]
    prompt = build_prompt(lm, tmpl, {"context": context_ids, "query": example.query})
    start, end = prompt.spans["context"]
    ids = list(prompt.ids)
    dropped = 0
    window = lm.max_length
    if window is not None and len(ids) + reserve > window:
        dropped = min(end - start, len(ids) + reserve - window)
        end_kept = end - dropped
        ids = ids[:end_kept] + ids[end:]
        end = end_kept
    return PromptParts(tuple(ids[:start]), tuple(ids[start:end]), tuple(ids[end:])), dropped
