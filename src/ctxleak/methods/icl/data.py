"""Labelled data for ICLInf (Evaluating Privacy Leakage From In-Context Learning §4.1): a train
split (the exemplar pool), a test split (the queries) and the label verbalisers.

Sources: JSONL or CSV files of ``{text, label}`` (a test file, or one file with a split field),
the bundled demo task, or AG News, DBpedia-14 and TREC through the optional ``datasets`` package.
Every problem is reported before a model is loaded, naming the file, line and field.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ctxleak.errors import ConfigError, InputError
from ctxleak.methods.icl.prompts import FORMATS, PromptFormat, get_format
from ctxleak.run.inputs import describe, is_named
from ctxleak.run.records import Row, demo_path, id_key, read_rows


@dataclass(frozen=True)
class LabeledExample:
    """One example: its text, its label's verbaliser and index, and where it came from."""

    text: str
    label: str
    label_index: int
    file: str
    line: int


@dataclass(frozen=True)
class ICLTask:
    """Exemplar pool, queries, verbalisers (in the order of the label distribution), format."""

    train: list[LabeledExample]
    test: list[LabeledExample]
    labels: tuple[str, ...]
    fmt: PromptFormat
    source: dict[str, Any] = field(default_factory=dict)

    def check_shots(self, shots: Iterable[int]) -> None:
        """More shots than training examples (or fewer than one) is a clear error."""
        for n in shots:
            if n < 1:
                raise ConfigError(f"shots must be at least 1, got {n}", param="shots")
            if n > len(self.train):
                where = self.source.get("train", "the training data")
                raise InputError(f"shots={n} needs at least {n} training examples (the "
                                 f"exemplar pool), but there are only {len(self.train)}",
                                 file=where, param="shots")


# Hugging Face ids of the paper's datasets, their text and label columns, and the verbalisers of
# Table 2 for the datasets' own class names.
HF_DATASETS: dict[str, tuple[str, str, str]] = {
    "agnews": ("fancyzhx/ag_news", "text", "label"),
    "dbpedia": ("fancyzhx/dbpedia_14", "content", "label"),
    "trec": ("CogComp/trec", "text", "coarse_label"),
}
HF_ALIASES = {"ag_news": "agnews", "dbpedia_14": "dbpedia", "dbpedia14": "dbpedia"}
HF_LABEL_NAMES: dict[str, dict[str, str]] = {
    "agnews": {"World": "World", "Sports": "Sports", "Business": "Business",
               "Sci/Tech": "Technology"},
    "dbpedia": {"Company": "Company", "EducationalInstitution": "School", "Artist": "Artist",
                "Athlete": "Athlete", "OfficeHolder": "Politician",
                "MeanOfTransportation": "Transportation", "Building": "Building",
                "NaturalPlace": "Nature", "Village": "Village", "Animal": "Animal",
                "Plant": "Plant", "Album": "Album", "Film": "Film", "WrittenWork": "Book"},
    "trec": {"ABBR": "Abbreviation", "ENTY": "Entity", "DESC": "Description", "HUM": "Person",
             "LOC": "Location", "NUM": "Number"},
}
HF_LABEL_ORDER: dict[str, tuple[str, ...]] = {  # class index order, when features lack names
    "agnews": ("World", "Sports", "Business", "Technology"),
    "dbpedia": FORMATS["dbpedia"].labels or (),
    "trec": ("Abbreviation", "Entity", "Description", "Person", "Location", "Number"),
}


@dataclass(frozen=True)
class _Raw:
    text: str
    label: str  # raw label as text (integers as their decimal string)
    file: str
    line: int


def _raw_label(value: Any, row: Row, name: str) -> str:
    if value is None:
        raise InputError("missing field", file=row.file, line=row.line, field=name)
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise InputError(f"must be a string or an integer, got {type(value).__name__}",
                         file=row.file, line=row.line, field=name)
    label = id_key(str(value))  # NFC, as ids: "Café" typed two ways is one class
    if not label:
        raise InputError("is empty", file=row.file, line=row.line, field=name)
    return label


def _from_rows(rows: Sequence[Row], text_field: str, label_field: str) -> list[_Raw]:
    return [_Raw(row.text(text_field), _raw_label(row.get(label_field), row, label_field),
                 row.file, row.line) for row in rows]


def read_split(path: Any, *, text_field: str = "text", label_field: str = "label") -> list[_Raw]:
    """Examples of one JSONL/CSV file; a missing or empty text or label names file:line:field."""
    return _from_rows(read_rows(path), text_field, label_field)


def split_by_field(path: Any, split_field: str, *, text_field: str = "text",
                   label_field: str = "label") -> tuple[list[_Raw], list[_Raw]]:
    """Train and test examples of one file whose ``split_field`` is ``train`` or ``test``."""
    rows = read_rows(path)
    train: list[Row] = []
    test: list[Row] = []
    for row in rows:
        value = row.get(split_field)
        if value is None:
            raise InputError(f"missing field (give test_data=FILE, or a '{split_field}' field "
                             "of 'train' or 'test' on every line)", file=row.file, line=row.line,
                             field=split_field, also=("test_data",))
        value = str(value).strip().lower()
        if value not in ("train", "test"):
            raise InputError(f"must be 'train' or 'test', got {value!r}", file=row.file,
                             line=row.line, field=split_field)
        (train if value == "train" else test).append(row)
    for name, part in (("train", train), ("test", test)):
        if not part:
            raise InputError(f"no lines with {split_field} = '{name}'", file=str(path))
    return (_from_rows(train, text_field, label_field),
            _from_rows(test, text_field, label_field))


def parse_labels(spec: str | Sequence[str] | None) -> tuple[list[str], dict[str, str]] | None:
    """``--labels``: ``World,Sports`` (verbalisers in order) or ``0=World,1=Sports`` (raw label
    -> verbaliser), in Unicode NFC like the data's labels. Returns (verbalisers in order,
    explicit mapping or {})."""
    if spec is None:
        return None
    items = [id_key(str(s)) for s in (spec.split(",") if isinstance(spec, str) else spec)]
    items = [s for s in items if s]
    if not items:
        raise ConfigError("labels is empty: give a comma list such as World,Sports",
                          param="labels")
    mapped = ["=" in s for s in items]
    if any(mapped) and not all(mapped):
        raise ConfigError("labels: use either names (World,Sports) or raw=name pairs "
                          "(0=World,1=Sports), not both", param="labels")
    mapping: dict[str, str] = {}
    order: list[str] = []
    for item in items:
        raw, _, name = item.partition("=") if "=" in item else (item, "", item)
        raw, name = raw.strip(), name.strip()
        if not name:
            raise ConfigError(f"labels: empty label name in {item!r}", param="labels")
        if "=" in item:
            if raw in mapping:
                raise ConfigError(f"labels: raw label {raw!r} given twice", param="labels")
            mapping[raw] = name
        if name not in order:
            order.append(name)
        elif "=" not in item:
            raise ConfigError(f"labels: label {name!r} given twice", param="labels")
    return order, mapping


def _label_map(raw: Sequence[_Raw], verbalisers: Sequence[str],
               mapping: dict[str, str]) -> dict[str, str]:
    """Raw label -> verbaliser: explicit pairs, identity when the data uses the names, else class
    indices 0..k-1 in the order of ``verbalisers`` (integer labels of the HF datasets)."""
    if mapping:
        return dict(mapping)
    seen = {r.label for r in raw}
    if seen <= set(verbalisers):
        return {v: v for v in verbalisers}
    indices = {str(i): v for i, v in enumerate(verbalisers)}
    if seen <= set(indices):
        return indices
    return {v: v for v in verbalisers}  # unknown labels are reported with their line below


def _examples(raw: Sequence[_Raw], label_map: dict[str, str], labels: Sequence[str],
              label_field: str) -> list[LabeledExample]:
    index = {name: i for i, name in enumerate(labels)}
    out = []
    for r in raw:
        name = label_map.get(r.label)
        if name is None:
            known = ", ".join(sorted(label_map)) if len(label_map) <= 20 else \
                f"{len(label_map)} labels"
            raise InputError(f"unknown label {r.label!r} (known: {known}; set them with "
                             "labels=...)", file=r.file, line=r.line, field=label_field,
                             also=("labels",))
        out.append(LabeledExample(r.text, name, index[name], r.file, r.line))
    return out


def _hf_name(data: str) -> str:
    name = data.split(":", 1)[1].strip().lower()
    name = HF_ALIASES.get(name, name)
    if name not in HF_DATASETS:
        raise ConfigError(f"unknown dataset '{data}': use hf:agnews, hf:dbpedia or hf:trec")
    return name


def load_hf(name: str) -> tuple[list[_Raw], list[_Raw], tuple[str, ...]]:
    """Train and test splits of AG News, DBpedia-14 or TREC through ``datasets`` (optional,
    needs network the first time), with Table 2's verbalisers."""
    try:
        import datasets  # noqa: F401  (optional dependency)
    except ImportError:
        raise ConfigError(f"data=hf:{name} needs the optional 'datasets' package (and network "
                          "the first time): pip install datasets; or export the data to JSONL "
                          "with 'text' and 'label' fields and pass data=FILE",
                          param="data") from None
    from datasets import load_dataset

    hf_id, text_col, label_col = HF_DATASETS[name]
    names_map = HF_LABEL_NAMES[name]
    splits = []
    for split in ("train", "test"):
        try:
            ds = load_dataset(hf_id, split=split)
        except Exception as exc:  # network, hub or cache errors from datasets
            raise ConfigError(f"could not load {hf_id} ({split}) with datasets: {exc}") from None
        feature = getattr(ds, "features", {}).get(label_col) if hasattr(ds, "features") else None
        class_names = list(getattr(feature, "names", None) or [])
        order = [names_map.get(c, c) for c in class_names] or list(HF_LABEL_ORDER[name])
        where = f"hf:{hf_id}[{split}]"
        rows = []
        for i, item in enumerate(ds):
            row = Row(fields=item, file=where, line=i + 1)
            text = row.text(text_col)
            value = item.get(label_col)
            if not isinstance(value, int) or not 0 <= value < len(order):
                raise InputError(f"unexpected label {value!r}", file=where, line=i + 1,
                                 field=label_col)
            rows.append(_Raw(text, order[value], where, i + 1))
        splits.append(rows)
    return splits[0], splits[1], tuple(HF_LABEL_ORDER[name])


def load_task(data: Any = "demo", test_data: Any = None, *, split_field: str = "split",
              text_field: str = "text", label_field: str = "label",
              labels: str | Sequence[str] | None = None, fmt: str = "auto",
              instruction: str | None = None, exemplar_template: str | None = None,
              query_template: str | None = None) -> ICLTask:
    """Load and check an ICL task.

    ``data``: ``demo`` (the bundled four-topic news task), ``hf:agnews|dbpedia|trec``, or a
    JSONL/CSV file; the queries come from ``test_data`` or, without it, from the lines whose
    ``split_field`` is ``test``. ``labels``: see :func:`parse_labels`; default: the format's
    labels (built-in formats) or the train split's labels in order of first appearance.
    ``fmt``: ``auto`` (the dataset's own format for demo and hf data, else ``custom``),
    ``agnews``, ``dbpedia``, ``trec`` or ``custom``; the template flags override its pieces.
    """
    source: dict[str, Any] = {"data": describe(data), "test_data": describe(test_data)
                              if test_data is not None else None}
    train_raw, test_raw, hf_labels, auto_fmt = _read_splits(
        data, test_data, source, split_field=split_field, text_field=text_field,
        label_field=label_field)
    fmt_name = auto_fmt if fmt == "auto" else fmt
    prompt_format = get_format(fmt_name, instruction=instruction, exemplar=exemplar_template,
                               query=query_template)
    verbalisers, mapping = _verbalisers(labels, hf_labels, prompt_format, train_raw)
    label_map = _label_map(train_raw, verbalisers, mapping)
    if len(verbalisers) < 2:
        raise ConfigError(f"ICLInf needs at least two labels, got {verbalisers}")
    train = _examples(train_raw, label_map, verbalisers, label_field)
    test = _examples(test_raw, label_map, verbalisers, label_field)
    source["format"] = prompt_format.name
    return ICLTask(train=train, test=test, labels=tuple(verbalisers), fmt=prompt_format,
                   source=source)


def _read_splits(data: Any, test_data: Any, source: dict[str, Any], *, split_field: str,
                 text_field: str, label_field: str
                 ) -> tuple[list[_Raw], list[_Raw], tuple[str, ...] | None, str]:
    """The train and test rows of ``data`` (see :func:`load_task`), the labels of a Hugging
    Face set (else None) and the format ``auto`` stands for; where each split came from is
    added to ``source``."""
    hf_labels: tuple[str, ...] | None = None
    if is_named(data, "demo"):
        train_path = str(demo_path("icl_train.jsonl"))
        test_path = test_data if test_data is not None else str(demo_path("icl_test.jsonl"))
        train_raw = read_split(train_path, text_field="text", label_field="label")
        test_raw = read_split(test_path, text_field=text_field, label_field=label_field) \
            if test_data is not None else read_split(test_path)
        auto_fmt = "agnews"
        source.update(train=train_path, test=describe(test_path))
    elif isinstance(data, str) and data.startswith("hf:"):
        name = _hf_name(data)
        train_raw, test_raw, hf_labels = load_hf(name)
        if test_data is not None:
            test_raw = read_split(test_data, text_field=text_field, label_field=label_field)
        auto_fmt = name
        source.update(train=f"hf:{HF_DATASETS[name][0]}[train]",
                      test=describe(test_data) if test_data is not None
                      else f"hf:{HF_DATASETS[name][0]}[test]")
    else:
        if test_data is not None:
            train_raw = read_split(data, text_field=text_field, label_field=label_field)
            test_raw = read_split(test_data, text_field=text_field, label_field=label_field)
        else:
            train_raw, test_raw = split_by_field(data, split_field, text_field=text_field,
                                                 label_field=label_field)
        auto_fmt = "custom"
        source.update(train=describe(data), test=describe(test_data) if test_data is not None
                      else f"{describe(data)} ({split_field} = test)")
    return train_raw, test_raw, hf_labels, auto_fmt


def _verbalisers(labels: str | Sequence[str] | None, hf_labels: tuple[str, ...] | None,
                 prompt_format: PromptFormat, train_raw: Sequence[_Raw]
                 ) -> tuple[list[str], dict[str, str]]:
    """The label words and the mapping of the data's labels onto them: those given
    (:func:`parse_labels`), else the Hugging Face set's, else the format's (refused when the
    training data has others), else the training data's in order of first appearance."""
    parsed = parse_labels(labels)
    if parsed is not None:
        return parsed
    if hf_labels is not None:
        return list(hf_labels), {}
    if prompt_format.labels is not None:
        verbalisers = list(prompt_format.labels)
        seen = {r.label for r in train_raw}
        if not seen <= set(verbalisers) and not seen <= {str(i) for i in range(len(verbalisers))}:
            extra = sorted(seen - set(verbalisers))[:5]
            raise ConfigError(f"format={prompt_format.name} has the labels "
                              f"{', '.join(verbalisers)}, but the training data has "
                              f"{', '.join(map(repr, extra))}: give labels=..., or use "
                              "format=custom", param="format", also=("labels",))
        return verbalisers, {}
    return list(dict.fromkeys(r.label for r in train_raw)), {}
