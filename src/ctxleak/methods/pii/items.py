"""ProPILE probe items (ProPILE: Probing Privacy Leakage in Large Language Models, App. A.3): one
subject, one PII type (for relations: one relationship), one template, with its null PII; and their
token ids (:func:`encode_item`).

The prompt's trailing space (App. A.3) is moved onto the answer (``scoring_pair``): the model
sees ``"... is"`` and the answer ``" x"``, the way BPE tokenizers split a word after a space,
for scoring and for generation alike. The answer's token ids are those of the tokenizer's split
of ``prompt + " " + answer`` after the prompt's ids (so the model is scored on the ids it would
itself see), falling back to the ids of ``" " + answer`` when the prompt's ids change.
"""

from __future__ import annotations

import hashlib
import random
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from ctxleak.engine.lm import LanguageModel
from ctxleak.engine.prompts import build_prompt
from ctxleak.methods.pii.records import PII_FIELDS, PIIRecord
from ctxleak.methods.pii.templates import (
    PII_TYPES,
    STRUCTURES,
    build_prompts,
    canonical_pii_type,
    choose_shots,
    scoring_pair,
)

MODES = ("black-box", "white-box", "in-context")
CONTEXT_TEMPLATE = "{document}\n{prompt}"

def parse_pii_types(value: str | Iterable[str]) -> list[str]:
    """``"email,phone"`` -> ``["email", "phone"]`` (canonical names, duplicates dropped, order
    kept). Raises ``ValueError`` naming an unknown type."""
    parts = value.split(",") if isinstance(value, str) else list(value)
    out = list(dict.fromkeys(canonical_pii_type(part) for part in parts if str(part).strip()))
    if not out:
        raise ValueError(f"no PII type given; choose from {', '.join(PII_TYPES)}")
    return out


@dataclass(frozen=True)
class ProbeItem:
    """One probing prompt: subject, PII type, probed field (the type, or the relationship for
    relations), template, prompt text, target and null PII, the shots' subject ids, and the
    subject's documents in in-context mode."""

    subject_id: str
    pii_type: str
    field: str
    structure: str
    template: str
    prompt: str
    target: str
    null_target: str | None = None
    null_subject: str | None = None
    shots: tuple[str, ...] = ()
    context: str | None = None

    @property
    def key(self) -> str:
        return f"{self.subject_id}|{self.pii_type}|{self.template}"

    @property
    def unit(self) -> tuple[str, str]:
        """What the maximum over templates is taken over: (subject, field)."""
        return (self.subject_id, self.field)


def _structure(template_name: str) -> str:
    """``twins``, ``triplets``, ``quadruplets``, ``relation`` or ``university``."""
    return template_name.split("-", 1)[0]


def _fields(record: PIIRecord, pii_type: str) -> list[str]:
    if pii_type == "relation":
        return [rel for rel, name in record.relations.items() if name]
    return [pii_type] if record.get(pii_type) else []


def _seed(*parts: Any) -> int:
    text = "|".join(str(p) for p in parts).encode()
    return int.from_bytes(hashlib.sha256(text).digest()[:8], "big")


def make_items(records: Sequence[PIIRecord], pii_types: Sequence[str], *, shots: int = 1,
               structure: str = "twins", seed: int = 0, in_context: bool = False,
               first_template_only: bool = False,
               null_pool: Sequence[PIIRecord] | None = None
               ) -> tuple[list[ProbeItem], dict[str, int]]:
    """Probe items for every subject and PII type (type-major order) and the counts of skipped
    (subject, type) pairs by reason.

    ``shots`` is k of a k-shot prompt (k - 1 other subjects as demonstrations, drawn with
    :func:`choose_shots`); ``first_template_only`` keeps the first template (white-box, App.
    A.4); ``in_context`` attaches the subject's documents and skips subjects without any. Null
    PII comes from ``null_pool`` (default: ``records``), never the subject or one of its shots.
    Raises ``ValueError`` when ``shots < 1``, an unknown type or structure is given, or a subject
    has fewer than ``shots - 1`` others to draw demonstrations from.
    """
    if isinstance(shots, bool) or not isinstance(shots, int) or shots < 1:
        raise ValueError(f"shots must be an integer >= 1 (a k-shot prompt holds k templates), "
                         f"got {shots!r}")
    if structure != "all" and structure not in STRUCTURES:
        raise ValueError(f"unknown structure {structure!r}; choose from "
                         f"{', '.join(STRUCTURES)} or all")
    types = parse_pii_types(pii_types)
    pool = list(records if null_pool is None else null_pool)
    items: list[ProbeItem] = []
    skipped: Counter[str] = Counter()
    for pii_type in types:
        for record in records:
            if in_context and not record.documents:
                skipped[f"{pii_type}: no document"] += 1
                continue
            fields = _fields(record, pii_type)
            if not fields:
                skipped[f"{pii_type}: no {pii_type}"] += 1
                continue
            if (pii_type in PII_FIELDS and structure != "twins"
                    and not all(record.get(f) for f in PII_FIELDS)):
                skipped[f"{pii_type}: lacks the other PII its templates need"] += 1
                continue
            for fld in fields:
                rel = fld if pii_type == "relation" else None
                rng = random.Random(_seed(seed, record.subject_id, pii_type, fld))
                try:
                    shot_records = choose_shots(records, record, shots - 1, pii_type,
                                                seed=rng.randrange(2**32), relationship=rel)
                except ValueError as exc:
                    raise ValueError(f"{shots}-shot prompts for subject {record.subject_id!r}, "
                                     f"{pii_type} {fld}: {exc}") from None
                prompts = build_prompts(record, pii_type, shot_records,
                                        structure="twins" if first_template_only else structure,
                                        relationship=rel)
                if first_template_only:
                    prompts = prompts[:1]
                target = prompts[0][2]
                banned = {record.subject_id, *(s.subject_id for s in shot_records)}
                candidates = [r for r in pool if r.subject_id not in banned
                              and _value(r, fld) and _value(r, fld) != target]
                null = rng.choice(candidates) if candidates else None
                context = "\n".join(record.documents) if in_context else None
                for name, text, tgt in prompts:
                    items.append(ProbeItem(
                        subject_id=record.subject_id, pii_type=pii_type, field=fld,
                        structure=_structure(name), template=name, prompt=text, target=tgt,
                        null_target=_value(null, fld) if null else None,
                        null_subject=null.subject_id if null else None,
                        shots=tuple(s.subject_id for s in shot_records), context=context))
    return items, dict(skipped)


def _value(record: PIIRecord | None, fld: str) -> str | None:
    return None if record is None else record.get(fld)


@dataclass(frozen=True)
class Encoded:
    """Token ids of an item: the prompt the model sees, the prompt without the documents (in
    context mode), the target and the null PII as continuations."""

    prompt: tuple[int, ...]
    target: tuple[int, ...]
    null: tuple[int, ...] | None
    bare: tuple[int, ...] | None = None
    context_truncated: int = 0


def continuation_ids(lm: LanguageModel, prompt_text: str, answer: str) -> list[int]:
    """Ids of ``" " + answer`` as the tokenizer splits ``prompt_text + " " + answer`` after the
    ids of ``prompt_text`` (or, when the prompt's own ids change, ``encode(" " + answer)``)."""
    answer = answer.strip()
    head = lm.encode(prompt_text)
    joint = lm.encode(prompt_text + " " + answer)
    if len(joint) > len(head) and joint[:len(head)] == head:
        return joint[len(head):]
    return lm.encode(" " + answer)


def encode_item(lm: LanguageModel, item: ProbeItem, *, chat: bool = False,
                context_template: str = CONTEXT_TEMPLATE, reserve: int = 0) -> Encoded:
    """Token ids for one item (BOS and, with ``chat``, the chat template by
    :func:`ctxleak.engine.prompts.build_prompt`). Documents longer than the model's window
    (less the answer and ``reserve`` new tokens) are cut at the end, and the cut is counted."""
    text, _ = scoring_pair(item.prompt, item.target)
    bare = build_prompt(lm, "{prompt}", {"prompt": text}, chat=chat).ids
    target = tuple(continuation_ids(lm, text, item.target))
    null = tuple(continuation_ids(lm, text, item.null_target)) if item.null_target else None
    if item.context is None:
        return Encoded(bare, target, null)
    doc = lm.encode(item.context)
    cut = 0
    window = lm.max_length
    if window:
        longest = max(len(target), len(null or ()))
        room = window - len(bare) - longest - reserve - 8
        if len(doc) > max(room, 0):
            cut = len(doc) - max(room, 0)
            doc = doc[:max(room, 0)]
    full = build_prompt(lm, context_template, {"document": doc, "prompt": text}, chat=chat).ids
    return Encoded(full, target, null, bare=bare, context_truncated=cut)
