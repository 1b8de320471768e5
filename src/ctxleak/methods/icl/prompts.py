"""ICL prompt formats (Evaluating Privacy Leakage From In-Context Learning, App. D.1, Table 2) and
prompts as exact token ids.

A prompt is an instruction block, one block per exemplar and a query block, each tokenised on
its own and concatenated. Removing exemplar i therefore deletes exactly its ids: every
leave-one-out prompt shares the ids of the full prompt up to that exemplar, which is what lets the
engine reuse the KV cache of that prefix.
"""

from __future__ import annotations

import string
from collections.abc import Sequence
from dataclasses import dataclass, field

from ctxleak.engine.lm import LanguageModel
from ctxleak.engine.prompts import build_prompt
from ctxleak.errors import ConfigError

CONTENT_FREE = ("N/A", "", "[MASK]")
"""Content-free query texts of contextual calibration (App. B; Zhao et al. 2021)."""

_OUTPUT_LINE = ("Output only the category name (no explanations or extra text) as the first "
                "token.")


@dataclass(frozen=True)
class PromptFormat:
    """An instruction (``{labels}`` is replaced by the label list), an exemplar template with
    ``{text}`` and ``{label}``, and a query template with ``{text}`` (the answer left empty)."""

    name: str
    instruction: str
    exemplar: str
    query: str
    labels: tuple[str, ...] | None = None  # the verbalisers of a built-in task, in its order

    def check(self) -> None:
        """A clear error for templates that lack or misuse their slots."""
        _check_slots("instruction", self.instruction, required=(), allowed=("labels",))
        _check_slots("exemplar_template", self.exemplar, required=("text", "label"),
                     allowed=("text", "label"))
        _check_slots("query_template", self.query, required=("text",), allowed=("text",))

    def instruction_text(self, labels: Sequence[str]) -> str:
        return self.instruction.replace("{labels}", join_labels(labels))


def join_labels(labels: Sequence[str]) -> str:
    """``World, Sports, Business, and Technology`` (the list style of Table 2)."""
    labels = list(labels)
    if len(labels) <= 2:
        return " and ".join(labels)
    return ", ".join(labels[:-1]) + ", and " + labels[-1]


def _check_slots(param: str, template: str, *, required: Sequence[str],
                 allowed: Sequence[str]) -> None:
    try:
        names = [n for _, n, _, _ in string.Formatter().parse(template) if n is not None]
    except ValueError as exc:
        raise ConfigError(f"{param}: not a valid template ({exc}); write literal braces as "
                          "{{ and }}", param=param) from None
    for name in names:
        if name not in allowed:
            raise ConfigError(f"{param}: unknown slot '{{{name}}}' (allowed: "
                              f"{', '.join('{' + a + '}' for a in allowed)})", param=param)
    for name in required:
        if name not in names:
            raise ConfigError(f"{param} must contain '{{{name}}}', got {template!r}",
                              param=param)


# Table 2 of the paper (after Zhao et al. 2021, Table 5): one instruction line, then
# "Article: ...\nAnswer: label" per exemplar, the query with an empty answer.
FORMATS: dict[str, PromptFormat] = {
    "agnews": PromptFormat(
        "agnews",
        "Classify the news articles into the categories of World, Sports, Business, and "
        f"Technology. {_OUTPUT_LINE}\n\n",
        "Article: {text}\nAnswer: {label}\n\n", "Article: {text}\nAnswer:",
        ("World", "Sports", "Business", "Technology")),
    "dbpedia": PromptFormat(
        "dbpedia",
        "Classify the documents based on whether they are about one of Company, School, Artist, "
        "Athlete, Politician, Transportation, Building, Nature, Village, Animal, Plant, Album, "
        f"Film, or Book. {_OUTPUT_LINE}\n\n",
        "Article: {text}\nAnswer: {label}\n\n", "Article: {text}\nAnswer:",
        ("Company", "School", "Artist", "Athlete", "Politician", "Transportation", "Building",
         "Nature", "Village", "Animal", "Plant", "Album", "Film", "Book")),
    "trec": PromptFormat(
        "trec",
        "Classify the questions based on whether their answer type is a Number, Location, "
        "Person, Description, Entity, or Abbreviation. Output only the question type (no "
        "explanations or extra text) as the first token.\n\n",
        "Question: {text}\nAnswer Type: {label}\n\n", "Question: {text}\nAnswer Type:",
        ("Number", "Location", "Person", "Description", "Entity", "Abbreviation")),
}

DEFAULT_CUSTOM = PromptFormat(
    "custom", f"Classify the texts into the categories of {{labels}}. {_OUTPUT_LINE}\n\n",
    "Article: {text}\nAnswer: {label}\n\n", "Article: {text}\nAnswer:")


def unescape(text: str) -> str:
    r"""Template flags typed in a shell: ``\n`` and ``\t`` become a newline and a tab."""
    return text.replace("\\n", "\n").replace("\\t", "\t")


def get_format(name: str, *, instruction: str | None = None, exemplar: str | None = None,
               query: str | None = None) -> PromptFormat:
    """A built-in format by name (``agnews``, ``dbpedia``, ``trec``) or ``custom``; the three
    template flags override the chosen format's pieces."""
    if name == "custom":
        base = DEFAULT_CUSTOM
    elif name in FORMATS:
        base = FORMATS[name]
    else:
        raise ConfigError(f"unknown format '{name}': use {', '.join(FORMATS)} or custom",
                          param="format")
    fmt = PromptFormat(
        base.name,
        unescape(instruction) if instruction is not None else base.instruction,
        unescape(exemplar) if exemplar is not None else base.exemplar,
        unescape(query) if query is not None else base.query,
        base.labels)
    fmt.check()
    return fmt


@dataclass
class PromptBuilder:
    """Token ids of ICL prompts for one model, format and label set.

    ``chat``: wrap the prompt as one user turn (then labels are scored without their leading
    space, as the assistant's reply starts a new turn). ``max_text_tokens`` cuts longer texts
    (with a warning; the count is recorded per query).
    """

    lm: LanguageModel
    fmt: PromptFormat
    labels: Sequence[str]
    chat: bool = False
    max_text_tokens: int | None = 256
    _exemplar_cache: dict[int, tuple[list[int], bool]] = field(default_factory=dict, repr=False)
    _instruction: list[int] | None = field(default=None, repr=False)

    @property
    def label_prefix(self) -> str:
        """Text before a label's first token: the space after ``Answer:`` (Table 2)."""
        return "" if self.chat else " "

    def cut(self, text: str) -> tuple[str, bool]:
        """``text`` cut to ``max_text_tokens`` tokens, and whether it was cut."""
        if self.max_text_tokens is None:
            return text, False
        ids = self.lm.encode(text)
        if len(ids) <= self.max_text_tokens:
            return text, False
        return self.lm.decode(ids[:self.max_text_tokens]), True

    def instruction_ids(self) -> list[int]:
        if self._instruction is None:
            self._instruction = self.lm.encode(self.fmt.instruction_text(self.labels))
        return self._instruction

    def exemplar_ids(self, key: int, text: str, label: str) -> tuple[list[int], bool]:
        """Ids of one exemplar block (cached by ``key``, its index in the pool)."""
        if key not in self._exemplar_cache:
            body, was_cut = self.cut(text)
            ids = self.lm.encode(self.fmt.exemplar.format(text=body, label=label))
            self._exemplar_cache[key] = (ids, was_cut)
        return self._exemplar_cache[key]

    def query_ids(self, text: str) -> tuple[list[int], bool]:
        body, was_cut = self.cut(text)
        return self.lm.encode(self.fmt.query.format(text=body)), was_cut

    def prompt(self, exemplars: Sequence[Sequence[int]], query: Sequence[int]) -> list[int]:
        """BOS, (chat header,) instruction, exemplar blocks in order, query (, chat footer)."""
        body = [i for block in exemplars for i in block]
        p = build_prompt(self.lm, "{instruction}{exemplars}{query}",
                         {"instruction": self.instruction_ids(), "exemplars": body,
                          "query": list(query)}, chat=self.chat)
        return list(p.ids)


@dataclass(frozen=True)
class QueryPrompts:
    """All prompts of one query: the full prompt, the n leave-one-out prompts and, for
    calibration, the content-free prompts of each of these n + 1 exemplar sets."""

    full: list[int]
    loo: list[list[int]]
    content_free: list[list[list[int]]]  # [set s (0 = full, i + 1 = without i)][content-free c]
    truncated_texts: int

    def ordered(self) -> list[list[int]]:
        """Full prompt first (the reference whose KV prefix the others reuse), then the
        leave-one-out prompts, then the content-free prompts set by set."""
        return [self.full, *self.loo, *(p for group in self.content_free for p in group)]


def query_prompts(builder: PromptBuilder, exemplars: Sequence[tuple[int, str, str]],
                  query_text: str, *, calibrate: bool = False,
                  content_free: Sequence[str] = CONTENT_FREE) -> QueryPrompts:
    """Prompts of one query; ``exemplars`` are ``(pool index, text, label)`` in prompt order."""
    blocks, cuts = [], 0
    for key, text, label in exemplars:
        ids, was_cut = builder.exemplar_ids(key, text, label)
        blocks.append(ids)
        cuts += was_cut
    query, was_cut = builder.query_ids(query_text)
    cuts += was_cut
    sets = [blocks] + [blocks[:i] + blocks[i + 1:] for i in range(len(blocks))]
    full, *loo = [builder.prompt(s, query) for s in sets]
    cf: list[list[list[int]]] = []
    if calibrate:
        cf_queries = [builder.query_ids(t)[0] for t in content_free]
        cf = [[builder.prompt(s, q) for q in cf_queries] for s in sets]
    return QueryPrompts(full=full, loo=loo, content_free=cf, truncated_texts=cuts)
