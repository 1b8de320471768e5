"""Private examples and the one-shot prompt of the DP synthetic-text audit (Evaluating Privacy
Leakage From In-Context Learning, App. D.2).

Each private example becomes one one-shot prompt (Table 3): an instruction, the example under its
news type, then the same news type with an empty text for the model to write. Following the
paper (and Amin et al. 2024, Fig. 4) the private example and the generated one share the label;
the paper fixes it to ``Sports``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ctxleak.engine.lm import LanguageModel
from ctxleak.engine.prompts import Prompt, build_prompt, template_fields
from ctxleak.errors import ConfigError, InputError, warn
from ctxleak.run.inputs import describe, is_named
from ctxleak.run.records import demo_path, read_rows

#: Table 3 of the paper (AG News synthetic generation), one private example per prompt.
TEMPLATE = ("Given a label of news type, generate the chosen type of news accordingly.\n\n"
            "News Type: {label}\nText: {text}\n\nNews Type: {label}\nText:")
#: The label the paper fixes (App. D.2).
DEFAULT_LABEL = "Sports"
#: ``--label all``: keep every example, each prompt under its own example's label.
ALL_LABELS = "all"


@dataclass(frozen=True)
class PrivateExample:
    """One private example: its text, its label (may be None), and where it came from."""

    text: str
    label: str | None
    file: str
    line: int


def data_path(data: Any) -> Any:
    """``demo`` is the bundled ICL training split (``icl_train.jsonl``); otherwise a file path,
    or rows in memory (see :mod:`ctxleak.run.inputs`)."""
    if is_named(data, "demo"):
        return demo_path("icl_train.jsonl")
    return Path(data) if isinstance(data, str) else data


def load_private_data(data: Any, *, text_field: str = "text", label_field: str = "label",
                      label: str = DEFAULT_LABEL) -> list[PrivateExample]:
    """Read the private examples from JSONL/CSV (or ``demo``), checking every line.

    ``label``: keep only the examples with this label (``all`` keeps every one). Files without a
    label field keep every example and write ``label`` into the prompts. Errors name the file,
    line and field.
    """
    path = data_path(data)
    rename = {k: v for k, v in ((text_field, "text"), (label_field, "label")) if k != v}
    rows = read_rows(path, rename=rename)
    labelled = [row for row in rows if row.get("label") is not None]
    if label == ALL_LABELS and not labelled:
        raise ConfigError(f"label='all' needs a '{label_field}' field in {describe(path)}; name "
                          "the label to write in the prompts instead, e.g. label='Sports'",
                          param="label")
    out: list[PrivateExample] = []
    for row in rows:
        text = row.text("text")
        row_label = None
        if labelled:
            raw = row.get("label")
            is_int = isinstance(raw, int) and not isinstance(raw, bool)
            row_label = str(raw) if is_int else row.text("label")
            if label != ALL_LABELS and row_label.strip() != label:
                continue
        out.append(PrivateExample(text=text, label=row_label.strip() if row_label else None,
                                  file=row.file, line=row.line))
    if not out:
        found = sorted({str(r.get("label")).strip() for r in labelled})
        raise InputError(f"no example has the label '{label}' (labels found: "
                         f"{', '.join(found)}; or use label='all')", file=describe(path),
                         also=("label",))
    return out


def check_template(template: str) -> str:
    """A user template must have the ``{text}`` slot; ``{label}`` is optional."""
    fields = set(template_fields(template))
    if "text" not in fields:
        raise ConfigError("template must contain the slot {text} (the private example)",
                          param="template")
    unknown = fields - {"text", "label"}
    if unknown:
        raise ConfigError(f"template may only use the slots {{text}} and {{label}}, not "
                          f"{', '.join('{' + u + '}' for u in sorted(unknown))}",
                          param="template")
    return template


def one_shot_prompt(lm: LanguageModel, example: PrivateExample, *, label: str = DEFAULT_LABEL,
                    template: str = TEMPLATE, reserve: int = 0) -> tuple[Prompt, int]:
    """The one-shot prompt of ``example`` and the number of its text tokens cut to fit the
    model's window with ``reserve`` tokens left for generation (0 when nothing was cut)."""
    prompt_label = example.label if example.label is not None and label == ALL_LABELS else label
    text_ids = lm.encode(example.text)
    prompt = build_prompt(lm, template, {"text": text_ids, "label": prompt_label})
    window = lm.max_length
    dropped = 0
    if window is not None and len(prompt) + reserve > window:
        dropped = min(len(text_ids), len(prompt) + reserve - window)
        prompt = build_prompt(lm, template, {"text": text_ids[:len(text_ids) - dropped],
                                             "label": prompt_label})
        warn(f"{example.file}:{example.line}: private text cut by {dropped} tokens to "
             "fit the model's window")
    return prompt, dropped


def subset_prompts(lm: LanguageModel, examples: Sequence[PrivateExample], subset: Sequence[int], *,
                   label: str = DEFAULT_LABEL, template: str = TEMPLATE,
                   reserve: int = 0) -> tuple[list[list[int]], int]:
    """Token ids of the one-shot prompts of ``examples[i]`` for ``i`` in ``subset`` and the total
    number of text tokens cut to fit the window."""
    prompts, cut = [], 0
    for i in subset:
        prompt, dropped = one_shot_prompt(lm, examples[i], label=label, template=template,
                                          reserve=reserve)
        prompts.append(list(prompt.ids))
        cut += dropped
    return prompts, cut
