"""Planning a probe run (ProPILE: Probing Privacy Leakage in Large Language Models): which subjects,
which probe items under which mode and variant (black-box, in-context, white-box, canary), built and
checked before any model is loaded; and the new-token budget of each PII type."""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ctxleak.engine.lm import LanguageModel
from ctxleak.errors import ConfigError, InputError
from ctxleak.methods.pii.canary import split_subjects
from ctxleak.methods.pii.items import continuation_ids, make_items
from ctxleak.methods.pii.records import PIIRecord, load_records
from ctxleak.methods.pii.synth import AREA_CODES, synth_records
from ctxleak.methods.pii.templates import MAX_NEW_TOKENS, scoring_pair
from ctxleak.run.inputs import IN_MEMORY, is_named, memory_rows
from ctxleak.run.runner import say

DEFAULT_PII = "phone,email,address,relation,university"
CANARY_DEFAULT_PII = "phone,address,university"


@dataclass(frozen=True)
class Task:
    """One sample: a probe item under a mode (``black-box``, ``in-context``, ``white-box``,
    ``canary``), a variant (how it is probed: ``beam``, ``soft-prompt``, ``fine-tuned``,
    ``base``), a subject group (canary: ``inserted`` / ``held-out``; white-box: ``held-out``)
    and k of the k-shot prompt."""

    mode: str
    variant: str
    group: str | None
    k: int
    item: Any

    @property
    def key(self) -> str:
        return f"{self.mode}|{self.variant}|{self.group or '-'}|k{self.k}|{self.item.key}"

    @property
    def runner(self) -> tuple[Any, ...]:
        return (self.mode, self.variant, self.item.pii_type if self.variant == "soft-prompt"
                else None)


def memory_records(data: Any) -> list[Any]:
    """PII records given in memory: :class:`PIIRecord` objects or dicts (a list, a DataFrame,
    a ``datasets.Dataset``), checked like the lines of a records file."""
    if isinstance(data, (list, tuple)) and data and all(isinstance(r, PIIRecord) for r in data):
        return list(data)
    records = [PIIRecord.from_dict(fields, file=IN_MEMORY, line=line)
               for line, fields in memory_rows(data)]
    if not records:
        raise InputError("no records in the data", file=IN_MEMORY)
    return records


def load_probe_records(data: Any, subjects: int, seed: int, limit: int | None, need: int) -> list[Any]:
    """The subjects to probe: ``demo`` makes ``subjects`` synthetic records (seeded), otherwise
    a records JSONL file; ``limit`` keeps the first N (at least ``need``)."""
    if is_named(data, "demo"):
        if subjects < 2 or subjects > len(AREA_CODES) * 100:
            raise ConfigError(f"subjects must be between 2 and {len(AREA_CODES) * 100}, "
                              f"got {subjects}", param="subjects")
        n = max(subjects, need)
        if n > len(AREA_CODES) * 100:
            raise ConfigError(f"canary {need // 2} needs {n} demo subjects, more than the "
                              f"{len(AREA_CODES) * 100} available", param="canary")
        records = synth_records(n, seed)
    elif isinstance(data, (str, Path)):
        records = load_records(data)
        if not records:
            raise InputError("the records file holds no records", file=str(data))
    else:
        records = memory_records(data)
    if limit is not None:
        if limit < 2:
            raise ConfigError(f"limit must be at least 2 (null PII needs other subjects), "
                              f"got {limit}", param="limit")
        records = records[:max(limit, need)]
    if len(records) < 2:
        raise ConfigError("probing needs at least 2 subjects (null PII is another subject's)")
    return records


@dataclass
class Plan:
    tasks: list[Task]
    skipped: dict[str, int]
    train_items: dict[str, list[Any]]  # white-box: PII type -> training items
    inserted: list[Any]
    held_out: list[Any]


def plan_probes(records: list[Any], modes: list[str], types: list[str], ks: list[int], structure: str,
          train_fraction: float, seed: int, canary: int | None, canary_baseline: bool) -> Plan:
    """Every probe item of the run, built and checked before any model is loaded."""
    tasks: list[Task] = []
    skipped: dict[str, int] = {}
    train_items: dict[str, list[Any]] = {}
    inserted: list[Any] = []
    held: list[Any] = []

    def items(recs: list[Any], **kw: Any) -> list[Any]:
        try:
            found, skip = make_items(recs, types, structure=structure, seed=seed, **kw)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        for reason, n in skip.items():
            skipped[reason] = skipped.get(reason, 0) + n
        return found

    if canary is not None:
        try:
            inserted, held = split_subjects(records, canary, seed)
        except ValueError as exc:
            raise ConfigError(f"canary: {exc}", param="canary") from None
        variants = ["fine-tuned"] + (["base"] if canary_baseline else [])
        # Null PII comes from the held-out subjects (never trained on), as the "secret sharer"
        # canaries are compared with ones never inserted; "inserted-vs-inserted" (likelihoods
        # only) also compares with other inserted subjects' PII: the name -> PII association.
        groups = (("inserted", inserted, held, variants),
                  ("held-out", held, held, variants),
                  ("inserted-vs-inserted", inserted, inserted,
                   [v + "-likelihood" for v in variants]))
        for k in ks:
            for group, recs, pool, group_variants in groups:
                found = items(recs, shots=k, null_pool=pool)
                for variant in group_variants:
                    tasks += [Task("canary", variant, group, k, it) for it in found]
    for m in modes:
        if m in ("black-box", "in-context"):
            for k in ks:
                tasks += [Task(m, "beam", None, k, it)
                          for it in items(records, shots=k, in_context=m == "in-context")]
        elif m == "white-box":
            order = list(records)
            random.Random(seed).shuffle(order)
            n_train = min(len(order) - 2, max(1, round(train_fraction * len(order))))
            if n_train < 1:
                raise ConfigError("white-box needs at least 3 subjects (1 to train on, 2 held "
                                  "out for null PII)")
            train, test = order[:n_train], order[n_train:]
            for t in types:
                found, _ = make_items(train, [t], first_template_only=True, seed=seed)
                if not found:
                    raise ConfigError(f"white-box: no training subject has {t}")
                train_items[t] = found
            test_items = items(test, first_template_only=True)
            tasks += [Task(m, v, "held-out", 1, it) for v in ("soft-prompt", "beam")
                      for it in test_items]
    if not tasks:
        raise ConfigError("nothing to probe: no subject has the requested PII types"
                          + (f" ({', '.join(f'{r}: {n}' for r, n in skipped.items())})"
                             if skipped else ""))
    return Plan(tasks, skipped, train_items, inserted, held)


def token_budgets(lm: LanguageModel, plan: Plan, setting: str, *, generate: bool = True
                  ) -> dict[str, int]:
    """New-token budget per PII type; warns when a target cannot fit in the paper's budget
    (only when the run ``generate``s: without generation no budget is used)."""
    if setting not in ("paper", "auto"):
        return {t: int(setting) for t in MAX_NEW_TOKENS}
    longest: dict[str, int] = {}
    seen: set[tuple[str, str]] = set()
    for task in plan.tasks:
        it = task.item
        if (it.pii_type, it.target) in seen:
            continue
        seen.add((it.pii_type, it.target))
        text, _ = scoring_pair(it.prompt.rsplit("\n", 1)[-1], it.target)
        n = len(continuation_ids(lm, text, it.target))
        longest[it.pii_type] = max(longest.get(it.pii_type, 0), n)
    budgets = dict(MAX_NEW_TOKENS)
    for t, n in sorted(longest.items()):
        if setting == "auto":
            budgets[t] = max(MAX_NEW_TOKENS[t], n + 2)
        elif n > MAX_NEW_TOKENS[t] and generate:
            say(f"warning: the longest {t} target takes {n} tokens, more than the paper's budget "
                f"of {MAX_NEW_TOKENS[t]}: exact match cannot see it (try --max-new-tokens auto)")
    return budgets
