"""ICLInf over a test set (Evaluating Privacy Leakage From In-Context Learning §3-4, Eq. 4; App. B; App. E.1).

For each query j: draw S_j (n_shots exemplars without replacement, seeded by
``derive_seed(seed, j)``), build the full prompt and the n leave-one-out prompts (and, with
calibration, the content-free prompts of each of these n + 1 exemplar sets), score them in one
engine call with the full prompt first so that each other prompt reuses the KV cache of the prefix
it shares with it, and compute the loss of each exemplar position under every requested output
space (labels, full vocabulary) with and without calibration.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from ctxleak.engine.generation import derive_seed
from ctxleak.engine.lm import LanguageModel
from ctxleak.engine.scoring import continuation_logprobs, next_token_logprobs
from ctxleak.errors import ConfigError
from ctxleak.methods.icl.calibration import (
    DEFAULT_CALIBRATION_EPS,
    calibrate_sets,
    content_free_logp,
)
from ctxleak.methods.icl.data import ICLTask
from ctxleak.methods.icl.loss import position_losses, query_iclinf, renormalise, summarize_iclinf
from ctxleak.methods.icl.prompts import CONTENT_FREE, PromptBuilder, QueryPrompts, query_prompts
from ctxleak.run.validate import check_number

OUTPUT_SPACES = ("labels", "vocab")
LABEL_SCORING = ("first-token", "full")


def variant_key(space: str, calibrated: bool) -> str:
    """``labels``, ``labels_calibrated``, ``vocab`` or ``vocab_calibrated``."""
    return space + ("_calibrated" if calibrated else "")


@dataclass(frozen=True)
class ICLConfig:
    """How A(S, x) is computed and which variants are reported.

    ``output_spaces``: ``labels`` (renormalised label distribution, §3) and/or ``vocab`` (the
    full next-token distribution, App. E.1). ``calibration``: which of (off, on) to report
    (App. B). ``label_scoring``: ``first-token`` (each label's first token with its leading
    space, as in the paper) or ``full`` (the whole label string, teacher-forced).
    """

    output_spaces: tuple[str, ...] = ("labels",)
    calibration: tuple[bool, ...] = (False,)
    label_scoring: str = "first-token"
    calibration_eps: float = DEFAULT_CALIBRATION_EPS
    content_free: tuple[str, ...] = CONTENT_FREE
    reuse_prefix: bool = True
    max_text_tokens: int | None = 256

    def __post_init__(self) -> None:
        if not self.output_spaces or any(s not in OUTPUT_SPACES for s in self.output_spaces):
            raise ConfigError(f"output spaces must be among {OUTPUT_SPACES}, got "
                              f"{self.output_spaces}")
        if not self.calibration:
            raise ConfigError("calibration must list at least one of off/on")
        if self.label_scoring not in LABEL_SCORING:
            raise ConfigError(f"unknown label_scoring '{self.label_scoring}': use first-token "
                              "or full", param="label_scoring")
        check_number(self.calibration_eps, "calibration_eps", minimum=0.0)
        if any(self.calibration) and not self.content_free:
            raise ConfigError("calibration needs at least one content-free input")
        if self.max_text_tokens is not None and self.max_text_tokens < 1:
            raise ConfigError(f"max_text_tokens must be at least 1, got {self.max_text_tokens}",
                              param="max_text_tokens")

    @property
    def variants(self) -> list[str]:
        return [variant_key(s, c) for s in self.output_spaces for c in self.calibration]

    @property
    def calibrated(self) -> bool:
        return any(self.calibration)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class LabelScorer:
    """Token ids of the labels and the log-probability of each label after a prompt."""

    def __init__(self, lm: LanguageModel, labels: Sequence[str], mode: str = "first-token",
                 prefix: str = " ") -> None:
        if mode not in LABEL_SCORING:
            raise ConfigError(f"unknown label_scoring '{mode}': use first-token or full",
                              param="label_scoring")
        self.lm, self.labels, self.mode, self.prefix = lm, list(labels), mode, prefix
        self.sequences = [lm.encode(prefix + label) for label in self.labels]
        for label, seq in zip(self.labels, self.sequences):
            if not seq:
                raise ConfigError(f"label {label!r} has no tokens")
        self.first_ids = [seq[0] for seq in self.sequences]
        seen: dict[Any, str] = {}  # what the mode scores of each label -> the label
        for label, seq in zip(self.labels, self.sequences):
            key: Any = seq[0] if mode == "first-token" else tuple(seq)
            if key in seen and mode == "first-token":
                raise ConfigError(
                    f"labels {seen[key]!r} and {label!r} share their first token "
                    f"{lm.decode([key])!r} (id {key}), so first-token scoring cannot tell "
                    "them apart: use label_scoring='full' to score whole label strings, "
                    "or rename them with labels=...", param="label_scoring", also=("labels",))
            if key in seen:
                raise ConfigError(f"labels {seen[key]!r} and {label!r} have the same tokens: "
                                  "rename them with labels=...", param="labels")
            seen[key] = label

    @property
    def max_label_tokens(self) -> int:
        return max(len(s) for s in self.sequences) if self.mode == "full" else 1

    def score(self, prompts: Sequence[Sequence[int]], *, vocab: bool, reuse_prefix: bool = True,
              groups: Sequence[int] | None = None) -> tuple[np.ndarray, np.ndarray | None]:
        """(label log-probabilities [P, k], not yet renormalised; full next-token log-probs
        [P, V] when ``vocab``). The first prompt (of each of ``groups``, the queries scored
        together) is the reference for prefix reuse; each group is one example for the model's
        batching policy."""
        full_rows = None
        if self.mode == "first-token":
            if vocab:
                rows = next_token_logprobs(self.lm, prompts, reuse_prefix=reuse_prefix,
                                           groups=groups)
                full_rows = rows.numpy()
                return full_rows[:, self.first_ids], full_rows
            rows = next_token_logprobs(self.lm, prompts, token_ids=self.first_ids,
                                       reuse_prefix=reuse_prefix, groups=groups)
            return rows.numpy(), None
        k = len(self.labels)
        seqs = [p for p in prompts for _ in range(k)]
        conts = [c for _ in prompts for c in self.sequences]
        scored = continuation_logprobs(self.lm, seqs, conts, reuse_prefix=reuse_prefix,
                                       groups=None if groups is None else
                                       [g for g in groups for _ in range(k)])
        label_logp = np.array([float(s.sum()) for s in scored]).reshape(len(prompts), k)
        if vocab:
            full_rows = next_token_logprobs(self.lm, prompts, reuse_prefix=reuse_prefix,
                                            groups=groups).numpy()
        return label_logp, full_rows


def draw_exemplars(pool_size: int, n_shots: int, seed: int, query_index: int) -> list[int]:
    """Indices of S_j: ``n_shots`` distinct pool indices, seeded by ``derive_seed(seed, j)``.

    A partial Fisher-Yates shuffle (O(n_shots), whatever the pool size), so the draw for n shots
    is the first n of the draw for more shots: a shots sweep compares nested exemplar sets.
    """
    if not 0 < n_shots <= pool_size:
        raise ConfigError(f"cannot draw {n_shots} exemplars from a pool of {pool_size}")
    rng = np.random.default_rng(derive_seed(seed, query_index))
    moved: dict[int, int] = {}
    out = []
    for i in range(n_shots):
        j = int(rng.integers(i, pool_size))
        at_i, at_j = moved.get(i, i), moved.get(j, j)
        moved[i], moved[j] = at_j, at_i
        out.append(at_j)
    return out


def select_queries(n_test: int, n_queries: int | None, seed: int) -> list[int]:
    """Test indices used as queries: all of them, or a seeded sample of ``n_queries`` kept in
    file order (a file sorted by label, like DBpedia's, still gives a mixed sample)."""
    if n_queries is None or n_queries >= n_test:
        return list(range(n_test))
    if n_queries < 1:
        raise ConfigError(f"queries must be at least 1, got {n_queries}", param="queries")
    rng = np.random.default_rng(np.random.SeedSequence([int(seed) & 0xFFFFFFFF, 0x1C1]))
    return sorted(int(i) for i in rng.choice(n_test, size=n_queries, replace=False))


def _probs(logp: np.ndarray) -> list[Any]:
    """Probabilities with 6 significant digits (small ones stay non-zero)."""
    return [float(f"{v:.6g}") for v in np.exp(np.asarray(logp)).ravel()] if np.ndim(logp) == 1 \
        else [_probs(row) for row in logp]


def _variant(logp_sets: np.ndarray, labels: Sequence[str] | None) -> dict[str, Any]:
    """Losses of one variant from its distributions, set 0 = all exemplars, 1.. = without i."""
    full, loo = logp_sets[0], logp_sets[1:]
    losses = position_losses(full, loo)
    out: dict[str, Any] = {"loss_by_position": [float(v) for v in losses],
                           "iclinf": query_iclinf(losses)}
    where = [int(i) for i in np.abs(full[None, :] - loo).argmax(axis=-1)]
    if labels is not None:
        out["max_at_label"] = [labels[i] for i in where]
    else:
        out["max_at_token"] = where
    return out


@dataclass
class QueryScores:
    """Log-distributions of one query's n + 1 exemplar sets (0 = all, i + 1 = without e_i)."""

    labels: np.ndarray                      # [n + 1, k], renormalised
    labels_cf: np.ndarray | None = None     # [n + 1, c, k], renormalised
    vocab: np.ndarray | None = None         # [n + 1, V]
    vocab_cf: np.ndarray | None = None      # [n + 1, c, V]


def score_prompts(scorer: LabelScorer, qp: QueryPrompts, config: ICLConfig, *,
                  reuse_prefix: bool | None = None) -> QueryScores:
    """Score every prompt of a query in one engine call (full prompt first)."""
    return score_prompts_many(scorer, [qp], config, reuse_prefix=reuse_prefix)[0]


def score_prompts_many(scorer: LabelScorer, qps: Sequence[QueryPrompts], config: ICLConfig, *,
                       reuse_prefix: bool | None = None) -> list[QueryScores]:
    """Score the full and leave-one-out prompts of several queries in one engine call, each
    query's prompts reusing the prefix of its own full prompt."""
    ordered = [qp.ordered() for qp in qps]
    prompts = [p for o in ordered for p in o]
    groups = [g for g, o in enumerate(ordered) for _ in o]
    vocab = "vocab" in config.output_spaces
    reuse = config.reuse_prefix if reuse_prefix is None else reuse_prefix
    label_logp, vocab_logp = scorer.score(prompts, vocab=vocab, reuse_prefix=reuse,
                                          groups=groups)
    out, begin = [], 0
    for qp, o in zip(qps, ordered):
        end = begin + len(o)
        out.append(_query_scores(qp, label_logp[begin:end],
                                 None if vocab_logp is None else vocab_logp[begin:end]))
        begin = end
    return out


def _query_scores(qp: QueryPrompts, label_logp: np.ndarray, vocab_logp: np.ndarray | None
                  ) -> QueryScores:
    s = 1 + len(qp.loo)
    c = len(qp.content_free[0]) if qp.content_free else 0
    labels = renormalise(label_logp)
    out = QueryScores(labels=labels[:s])
    if c:
        out.labels_cf = labels[s:].reshape(s, c, -1)
    if vocab_logp is not None:
        out.vocab = vocab_logp[:s]
        if c:
            out.vocab_cf = vocab_logp[s:].reshape(s, c, -1)
    return out


def query_record(scores: QueryScores, config: ICLConfig, labels: Sequence[str],
                 gold: int) -> dict[str, dict[str, Any]]:
    """The per-variant part of a query's record: distributions, loss per position, ICLInf_j,
    prediction and correctness."""
    variants: dict[str, dict[str, Any]] = {}
    label_sets: dict[bool, np.ndarray] = {}
    for calibrated in config.calibration:
        if calibrated:
            assert scores.labels_cf is not None
            sets = calibrate_sets(scores.labels, scores.labels_cf, config.calibration_eps)
        else:
            sets = scores.labels
        label_sets[calibrated] = sets
    for space in config.output_spaces:
        for calibrated in config.calibration:
            lab = label_sets[calibrated]
            pred = int(np.argmax(lab[0]))
            if space == "labels":
                v = _variant(lab, labels)
                v.update({"dist": _probs(lab[0]), "loo_dists": _probs(lab[1:])})
                if calibrated:
                    assert scores.labels_cf is not None
                    v["content_free"] = _probs(content_free_logp(scores.labels_cf))
            else:
                assert scores.vocab is not None
                sets = scores.vocab
                if calibrated:
                    assert scores.vocab_cf is not None
                    sets = calibrate_sets(sets, scores.vocab_cf, config.calibration_eps)
                v = _variant(sets, None)
                top = int(np.argmax(sets[0]))
                v["top_token"] = {"id": top, "prob": float(f"{np.exp(sets[0][top]):.6g}")}
            v.update({"prediction": labels[pred], "correct": pred == gold})
            variants[variant_key(space, calibrated)] = v
    return variants


def measure_query(lm: LanguageModel, task: ICLTask, builder: PromptBuilder, scorer: LabelScorer,
                  config: ICLConfig, n_shots: int, query_index: int, seed: int
                  ) -> dict[str, Any]:
    """One query's JSON record: exemplar indices, per-variant distributions and losses, ICLInf_j,
    prediction and correctness, prompt length and time."""
    return measure_queries(lm, task, builder, scorer, config, [(n_shots, query_index)], seed)[0]


def measure_queries(lm: LanguageModel, task: ICLTask, builder: PromptBuilder, scorer: LabelScorer,
                    config: ICLConfig, items: Sequence[tuple[int, int]], seed: int
                    ) -> list[dict[str, Any]]:
    """:func:`measure_query` of several (shots, query index) together: all their prompts scored
    in one engine call (:func:`score_prompts_many`). ``seconds`` is the batch's time divided by
    its queries."""
    t0 = time.perf_counter()
    built = []
    for n_shots, query_index in items:
        query = task.test[query_index]
        picked = draw_exemplars(len(task.train), n_shots, seed, query_index)
        exemplars = [(i, task.train[i].text, task.train[i].label) for i in picked]
        qp = query_prompts(builder, exemplars, query.text, calibrate=config.calibrated,
                           content_free=config.content_free)
        window = lm.max_length
        need = len(qp.full) + scorer.max_label_tokens
        if window is not None and need > window:
            raise ConfigError(f"query {query_index}: the {n_shots}-shot prompt needs {need} "
                              f"tokens, more than the model's window of {window}: use fewer "
                              "shots=... or a smaller max_text_tokens=...", param="shots",
                              also=("max_text_tokens",))
        built.append((n_shots, query_index, query, picked, qp))
    all_scores = score_prompts_many(scorer, [b[-1] for b in built], config)
    records = []
    for (n_shots, query_index, query, picked, qp), scores in zip(built, all_scores):
        variants = query_record(scores, config, task.labels, query.label_index)
        if "vocab" in config.output_spaces:
            for v in variants.values():
                if "top_token" in v:
                    v["top_token"]["text"] = lm.decode([v["top_token"]["id"]])
        records.append({
            "shots": n_shots, "query_index": query_index,
            "source": f"{query.file}:{query.line}", "text": query.text, "label": query.label,
            "exemplar_indices": picked, "exemplar_labels": [task.train[i].label for i in picked],
            "prompt_tokens": len(qp.full), "truncated_texts": qp.truncated_texts,
            "variants": variants,
        })
    seconds = round((time.perf_counter() - t0) / max(len(items), 1), 4)
    for record in records:
        record["seconds"] = seconds
    return records


def query_id(n_shots: int, query_index: int) -> str:
    return f"shots={n_shots}/q={query_index}"


def run_iclinf(lm: LanguageModel, task: ICLTask, shots: Iterable[int] = (4,), *,
               config: ICLConfig | None = None, queries: int | None = 100, seed: int = 0,
               chat: bool = False,
               on_record: Callable[[dict[str, Any]], None] | None = None) -> list[dict[str, Any]]:
    """ICLInf of ``task`` for each number of shots (library entry point; the CLI adds run
    directories, resume and reports). Returns one record per (shots, query)."""
    config = config or ICLConfig()
    shots = list(shots)
    task.check_shots(shots)
    builder = PromptBuilder(lm, task.fmt, task.labels, chat=chat,
                            max_text_tokens=config.max_text_tokens)
    scorer = LabelScorer(lm, task.labels, config.label_scoring, builder.label_prefix)
    records = []
    for n in shots:
        for j in select_queries(len(task.test), queries, seed):
            rec = {"id": query_id(n, j), **measure_query(lm, task, builder, scorer, config, n, j,
                                                         seed)}
            records.append(rec)
            if on_record is not None:
                on_record(rec)
    return records


def summarize_records(records: Sequence[dict[str, Any]],
                      variants: Sequence[str] | None = None) -> dict[str, dict[str, Any]]:
    """``{shots: {variant: {n, iclinf_mean, iclinf_std, accuracy, mean_loss_by_position}}}``
    (Eq. 4 with the paper's mean ± std, Fig. 1's loss by position)."""
    out: dict[str, dict[str, Any]] = {}
    for n in sorted({int(r["shots"]) for r in records}):
        rows = [r for r in records if int(r["shots"]) == n]
        keys = variants or list(rows[0]["variants"])
        out[str(n)] = {}
        for key in keys:
            vs = [r["variants"][key] for r in rows if key in r["variants"]]
            s = summarize_iclinf([v["iclinf"] for v in vs], [v["loss_by_position"] for v in vs],
                          [v["correct"] for v in vs])
            out[str(n)][key] = s.as_dict()
    return out

