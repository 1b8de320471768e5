"""Result objects: what every method returns, and what :func:`load_result` reads back
from any run directory, CLI runs included.

A :class:`Result` holds ``records`` (one dict per sample, as in ``samples.jsonl``), ``summary``
(as in ``results.json``), ``config`` and ``provenance``; ``to_pandas()`` gives one row per sample,
``to_html()`` the self-contained report, ``show()`` prints the console table, ``save(dir)`` writes
a run directory, and ``_repr_html_`` renders a compact summary in Jupyter.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from ctxleak.citations import bibtex, cite_block, papers_for
from ctxleak.errors import InputError, warn
from ctxleak.methods.influence.control import user_id
from ctxleak.methods.influence.units import UNITS, likelihood_ratio
from ctxleak.methods.verdict import check_units, check_verdict
from ctxleak.registry import REPORTS, RESULTS
from ctxleak.run.inputs import to_jsonable
from ctxleak.run.rundir import (
    CONFIG_FILE,
    KEY_FIELD,
    RESULTS_FILE,
    SAMPLES_FILE,
    read_json_file,
    read_samples,
    row_key,
    write_atomic,
)


@dataclass
class Result:
    """The outcome of one method run."""

    records: list[dict[str, Any]]
    summary: dict[str, Any]
    config: dict[str, Any] = field(default_factory=dict)
    provenance: dict[str, Any] = field(default_factory=dict)
    path: Path | None = None
    n_effective: int | None = None
    wall_time_s: float | None = None
    html: str | None = None
    images: dict[str, bytes] = field(default_factory=dict, repr=False)

    method: ClassVar[str] = "result"
    title: ClassVar[str] = "ctxleak result"
    #: Paths in ``summary`` that hold numbers (or null), ``*`` for any key or list position;
    #: :func:`load_result` refuses anything else there, naming the path.
    numeric_fields: ClassVar[tuple[str, ...]] = ()

    def __repr__(self) -> str:
        where = f", path={str(self.path)!r}" if self.path else ""
        return f"{type(self).__name__}({len(self.records)} records{where})"

    # ---- tables ----------------------------------------------------------------------------
    def method_name(self) -> str:
        """The method's command name (a plain Result goes by the command of its config)."""
        return self.method if self.method != Result.method else str(self.config.get("command"))

    def view(self) -> Any:
        """This method's report view (:data:`ctxleak.registry.REPORTS`, by method name; a
        plain Result goes by the command of its config)."""
        return REPORTS.get(self.method_name(), None) or REPORTS.get(Result.method)

    def table(self) -> list[dict[str, Any]]:
        """The summary as rows (the console table); the method's report view says which."""
        return list(self.view().table(self))

    def to_pandas(self) -> Any:
        """One row per sample (``records``); nested fields stay Python objects in their cells."""
        try:
            import pandas as pd
        except ImportError:
            raise ImportError("to_pandas() needs pandas: pip install pandas") from None
        return pd.DataFrame.from_records(self.records)

    def show(self, *, plain: bool = False) -> None:
        """Print the verdict, the console table of this result and where its files are (what
        the CLI prints); ``plain``: tables as tab-separated values."""
        self.view().full_show(self, plain=plain)

    # ---- HTML -------------------------------------------------------------------------------
    def render(self) -> str:
        """Build the HTML report from this result alone (records, summary, config; no model),
        ending with the papers to cite (:mod:`ctxleak.citations`)."""
        page = self.view().full_page(self)
        page.add_citations(papers_for(self.method_name()), bibtex(self.method_name()))
        return page.render()

    def to_html(self) -> str:
        """The self-contained HTML report (the run's ``report.html``; rendered from the result
        when the run folder has none)."""
        if self.html is None and self.path is not None and (self.path / "report.html").is_file():
            self.html = (self.path / "report.html").read_text(encoding="utf-8")
        if self.html is None:
            try:
                self.html = self.render()
            except (KeyError, TypeError, IndexError) as exc:
                raise ValueError(f"this result has no report and lacks what its report needs "
                                 f"({type(exc).__name__}: {exc})") from exc
        return self.html

    def _repr_html_(self) -> str:
        return str(self.view().fragment(self))

    # ---- files ------------------------------------------------------------------------------
    def save(self, directory: str | Path) -> Path:
        """Write ``config.json``, ``samples.jsonl``, ``results.json``, ``report.html`` and the
        plots into ``directory`` (created; files that may hold PII get mode 0600)."""
        out = Path(directory)
        out.mkdir(parents=True, exist_ok=True)
        mode = 0o600
        write_atomic(out / CONFIG_FILE, json.dumps(to_jsonable(self.config), indent=2,
                                                   sort_keys=True) + "\n", mode)
        write_atomic(out / SAMPLES_FILE, "".join(json.dumps(to_jsonable(r), ensure_ascii=False)
                                                 + "\n" for r in self.records), mode)
        self.save_results(out, mode)
        try:
            write_atomic(out / "report.html", self.to_html(), mode)
        except ValueError:  # a result built by hand, without what its page needs
            pass
        for name, png in self.images.items():
            write_atomic(out / name, png, mode)
        return out

    def save_results(self, directory: str | Path, mode: int = 0o600) -> Path:
        """Write ``results.json``: the summary with config, provenance, sample count, wall time
        and ``sample_ids``, the names of the samples the summary was computed from (their
        ``key``, else their ``id``, in order; :func:`load_result` checks ``samples.jsonl`` against
        them), and ``cite``: the papers of the method with their BibTeX
        (:func:`ctxleak.citations.cite_block`). The one writer of that file, for :meth:`save` and
        for :func:`ctxleak.run.run_method`."""
        body = {"summary": self.summary, "config": self.config, "provenance": self.provenance,
                "n_effective": self.n_effective if self.n_effective is not None
                else len(self.records), "wall_time_s": self.wall_time_s}
        if self.n_effective in (None, len(self.records)) and all(
                isinstance(r, dict) and "id" in r for r in self.records):
            body["sample_ids"] = [row_key(r) for r in self.records]
        body["cite"] = cite_block(self.method_name())
        path = Path(directory) / RESULTS_FILE
        write_atomic(path, json.dumps(to_jsonable(body), indent=2, ensure_ascii=False) + "\n",
                     mode)
        return path


class InfluenceResult(Result):
    """``ctxleak.influence``: per-example CID responses and their context influence
    ("Estimating Privacy Leakage of Augmented Contextual Knowledge in Language Models",
    Def. 3.1-3.3); ``summary["settings"]`` has one entry per λ/T/context size and
    ``summary["verdict"]`` says which examples leak beyond the control.

    Influence is in nats, summed over the response's tokens; e^x is the likelihood ratio of the
    response with and without the context, and x the ε of ex-post per-instance DP (Def. 2.2) at
    this response. Tidy frames: :meth:`tokens`, :meth:`windows`, :meth:`passages` (one row per
    response token, n-gram window, passage); :meth:`example` one example's leak map."""

    method = "influence"
    title = "Expected context influence (Def. 3.3)"

    def _setting_columns(self, record: dict[str, Any]) -> dict[str, Any]:
        return {"id": user_id(record), "setting": record.get("setting"),
                "lambda": record.get("lambda"), "temperature": record.get("temperature")}

    def _frame(self, rows: list[dict[str, Any]], columns: list[str]) -> Any:
        try:
            import pandas as pd
        except ImportError:
            raise ImportError("tidy frames need pandas: pip install pandas") from None
        frame = pd.DataFrame.from_records(rows, columns=columns)
        frame.attrs["units"] = dict(UNITS)
        return frame

    def to_pandas(self) -> Any:
        """One row per sample, with ``influence_per_token`` (nats per response token) and
        ``likelihood_ratio`` (e^influence) added where an older run lacks them; the units of
        the influence columns are in ``frame.attrs["units"]``."""
        frame = super().to_pandas()
        if len(frame) and "influence" in frame:
            if "influence_per_token" not in frame:
                frame["influence_per_token"] = [
                    r["influence"] / len(r["response_ids"]) if r.get("response_ids") else None
                    for r in self.records]
            frame["likelihood_ratio"] = [likelihood_ratio(r.get("influence"))
                                         for r in self.records]
        frame.attrs["units"] = dict(UNITS)
        return frame

    def tokens(self) -> Any:
        """One row per response token: the example (``id``, setting), its position, text and
        id, ``logp_context``/``logp_empty`` (nats), its ``influence`` τ_t (Def. 3.1, nats), its
        influence under the control context, whether it is in the context, and its ``kind``
        ("known": in the context, τ_t < 0.1; "copied": in the context, τ_t ≥ 1; see
        :mod:`ctxleak.methods.influence.control`)."""
        rows = []
        for r in self.records:
            base = self._setting_columns(r)
            strings = r.get("response_token_strings") or []
            known, copied = set(r.get("known_tokens") or ()), set(r.get("copied_tokens") or ())
            control = r.get("control_token_influence") or []
            context = set(r.get("context_token_strings") or ())
            for t, tid in enumerate(r.get("response_ids") or []):
                kind = "known" if t in known else "copied" if t in copied else None
                rows.append({**base, "position": t, "token": strings[t] if t < len(strings)
                             else None, "token_id": tid,
                             "logp_context": _at(r.get("logp_context"), t),
                             "logp_empty": _at(r.get("logp_empty"), t),
                             "influence": _at(r.get("token_influence"), t),
                             "control_influence": _at(control, t),
                             "in_context": strings[t] in context if t < len(strings) else None,
                             "kind": kind})
        return self._frame(rows, ["id", "setting", "lambda", "temperature", "position", "token",
                                  "token_id", "logp_context", "logp_empty", "influence",
                                  "control_influence", "in_context", "kind"])

    def windows(self) -> Any:
        """One row per n-gram window: the example, window index, its ``[start, end)`` context
        tokens and text, and its influence on the whole response (Def. 3.2, nats) and rank
        within the example (1 = most)."""
        rows = []
        for r in self.records:
            base = self._setting_columns(r)
            context = r.get("context_token_strings") or []
            values = r.get("window_influence") or []
            ranks = _ranks(values)
            for w, ((a, b), v) in enumerate(zip(r.get("windows") or [], values)):
                rows.append({**base, "window": w, "start": a, "end": b,
                             "text": "".join(context[a:b]) if context else None,
                             "influence": v, "rank": ranks[w]})
        return self._frame(rows, ["id", "setting", "lambda", "temperature", "window", "start",
                                  "end", "text", "influence", "rank"])

    def passages(self) -> Any:
        """One row per passage: the example, passage number (from 1), its text, token span in
        the context (None when cut out to fit the window), its influence (Def. 3.1-3.2 with
        S = the passage, nats) and rank within the example (1 = most)."""
        rows = []
        for r in self.records:
            base = self._setting_columns(r)
            values = r.get("passage_influence") or []
            ranks = _ranks(values)
            spans = r.get("passage_spans") or [None] * len(values)
            for j, (text, span, v) in enumerate(zip(r.get("passages") or [], spans, values)):
                rows.append({**base, "passage": j + 1, "text": text,
                             "start": span[0] if span else None,
                             "end": span[1] if span else None, "influence": v,
                             "rank": ranks[j]})
        return self._frame(rows, ["id", "setting", "lambda", "temperature", "passage", "text",
                                  "start", "end", "influence", "rank"])

    def example(self, example_id: str, setting: str | None = None) -> ExampleView:
        """One example (its own ``id``; ``setting`` picks one of a sweep, default the first):
        ``.record`` and ``.show()``, its leak map inline in Jupyter."""
        found = [r for r in self.records if example_id in (user_id(r), r.get("id"))
                 and (setting is None or r.get("setting") == setting)]
        if not found:
            known = sorted({user_id(r) for r in self.records})
            raise KeyError(f"no example {example_id!r}"
                           + (f" in setting {setting!r}" if setting else "")
                           + f"; examples: {', '.join(known[:10])}"
                           + (" ..." if len(known) > 10 else ""))
        return ExampleView(self, found[0])

    numeric_fields = (
        "settings.*.lambda", "settings.*.temperature", "settings.*.n",
        "settings.*.mean_context_tokens", "settings.*.repeat_prompts", "settings.*.rouge_prompts",
        "settings.*.mean_lambda",
        *(f"settings.*.{q}.{k}" for q in ("influence", "influence_per_token",
                                          "control.influence", "control.above_control",
                                          "control.above_control_per_token")
          for k in ("n", "mean", "median", "std", "ci_low", "ci_high")),
        "settings.*.rouge_l.mean",
        "settings.*.max_window_influence.mean", "settings.*.composed_eps.mean",
        "settings.*.quality.*.value", "settings.*.per_position_influence.*",
        "settings.*.per_window_influence.*",
        "settings.*.likelihood_ratio", "settings.*.control.test.pvalue",
        "settings.*.control.threshold",
        "settings.*.top_passages.*.influence")


def _at(values: Any, t: int) -> Any:
    return values[t] if values is not None and t < len(values) else None


def _ranks(values: list[Any]) -> list[int | None]:
    """The rank of each value (1 = largest; None for None), ties in order."""
    order = sorted((i for i, v in enumerate(values) if v is not None), key=lambda i: -values[i])
    ranks: list[int | None] = [None] * len(values)
    for rank, i in enumerate(order, start=1):
        ranks[i] = rank
    return ranks


@dataclass
class LeakMapHTML:
    """HTML that Jupyter renders inline (``_repr_html_``)."""

    html: str

    def _repr_html_(self) -> str:
        return self.html


@dataclass
class ExampleView:
    """One example of an influence result: its ``record`` and its leak map (:meth:`show`)."""

    result: InfluenceResult
    record: dict[str, Any]

    def show(self) -> LeakMapHTML:
        """The example's leak map, its reading in nats and ε, its passages and control, as an
        object that Jupyter renders inline."""
        return LeakMapHTML(self.result.view().example_html(self.result, self.record))

    def _repr_html_(self) -> str:
        return self.show().html


class ICLInfResult(Result):
    """``ctxleak.iclinf``: one record per (shots, query); ICLInf mean ± std (Eq. 4 of "Evaluating
    Privacy Leakage From In-Context Learning"), in nats: an ex-post per-instance ε, the output up to
    e^x times more likely with an exemplar than without it; ``summary["by_exemplar"]`` and
    ``["by_position"]`` rank the exemplars and positions by their loss (nats)."""

    method = "icl"
    title = "ICLInf (Eq. 4)"
    numeric_fields = ("iclinf.*.*.n", "iclinf.*.*.iclinf_mean", "iclinf.*.*.iclinf_std",
                      "iclinf.*.*.accuracy", "iclinf.*.*.mean_loss_by_position.*",
                      "by_exemplar.*.max_loss", "by_exemplar.*.mean_loss",
                      "by_exemplar.*.queries", "by_position.*.mean_loss")


class AuditResult(Result):
    """``ctxleak.audit``: one record per synthetic sequence; ε_empirical against the target
    (Tables 4-6 of "Evaluating Privacy Leakage From In-Context Learning")."""

    method = "audit"
    title = "Privacy audit of DP synthetic text"
    numeric_fields = tuple(f"rows.*.{k}" for k in (
        "delta", "target_eps", "temperature", "clip", "subset_size", "alpha", "eps_theoretical",
        "eps_empirical", "ratio", "sequences", "n_gen", "tokens", "tokens_over_paper_bound",
        "eps_empirical_zero_loss"))


class SusceptibilityResult(Result):
    """``ctxleak.susceptibility``: one record per query, χ_MC and χ_F ("Efficiently Computing
    Susceptibility to Context in Language Models"). χ_MC is a mutual information in nats, at most
    its ceiling min(H(A|q), H(C)) (``summary["ceiling"]``); χ_F is on another scale and only ranks
    queries."""

    method = "susceptibility"
    title = "Susceptibility to context"
    numeric_fields = ("n_queries", "metrics.*.mean", "means.*.*.*.mean", "ceiling.ceilings.*",
                      "ceiling.shares.*", "ceiling.mean_ceiling", "ceiling.mean_share",
                      "top_queries.*.chi_mc", "top_queries.*.chi_f", "top_queries.*.ceiling")


class ProbeResult(Result):
    """``ctxleak.probe``: one record per probe prompt; per-group exact match, likelihoods (nats) and
    Wilcoxon tests (ProPILE: Probing Privacy Leakage in Large Language Models);
    ``summary["significance"]`` says, per group, whether its n lets the test reject at α, and the
    run folder's ``hits.jsonl`` lists every exact PII string generated."""

    method = "probe"
    title = "PII probing (ProPILE)"
    numeric_fields = tuple(f"groups.*.{k}" for k in (
        "n_units", "n_prompts", "exact_match_rate", "mean_target_ll", "mean_null_ll",
        "mean_target_ll_norm", "mean_null_ll_norm", "wilcoxon.pvalue", "string_metrics.*",
        "in_context.mean_influence", "in_context.mean_context_share")) + (
        "timings_s.*", "hits", "significance.alpha", "significance.groups.*.pvalue",
        "significance.groups.*.min_pvalue", "significance.groups.*.n")


class ExplainResult(Result):
    """``ctxleak.influence_explain``: one prompt's response, the uni-gram influence of each
    context token on its first token (Table 1) and the top n-grams."""

    method = "influence-explain"
    title = "Most influential context n-grams"


def load_result(directory: str | os.PathLike[str]) -> Result:
    """Read back any run directory (written by the CLI or the API) as its typed Result.

    What is loaded is checked, each problem an :class:`InputError` naming the file, line and
    field: ``results.json`` and ``config.json`` must be the JSON objects ctxleak writes, with
    numbers where the summary holds numbers; ``samples.jsonl`` is read as ``resume`` reads it
    (every line an object with an id, no id twice) and must hold the samples that
    ``results.json`` says it summarised (``sample_ids``, or for run folders written before
    them, ``n_effective`` rows); rows beyond those (kept from a run with a larger ``limit``)
    are left out with a warning."""
    path = Path(directory)
    results_path = path / RESULTS_FILE
    if not results_path.is_file():
        raise InputError("not a finished run directory (no results.json)", file=str(path))
    body = _json_object(results_path, read_json_file(results_path), "")
    for key in ("summary", "config", "provenance"):
        _json_object(results_path, body.get(key) or {}, key)
    config = body.get("config") or {}
    if not config and (path / CONFIG_FILE).is_file():
        config = _json_object(path / CONFIG_FILE, read_json_file(path / CONFIG_FILE), "")
    cls = RESULTS.get(str(config.get("command")), Result)
    summary = body.get("summary") or {}
    _check_numbers(results_path, summary, cls.numeric_fields)
    _check_reading(results_path, summary)
    n_effective = _count(results_path, body.get("n_effective"), "n_effective")
    wall = body.get("wall_time_s")
    if wall is not None and not _is_number(wall):
        raise InputError(f"must be a number, got {wall!r}", file=str(results_path),
                         field="wall_time_s")
    samples = path / SAMPLES_FILE
    rows = read_samples(samples) if samples.is_file() else []
    rows = [user_id_row(str(config.get("command")), row) for row in rows]
    records = _summarised(path, rows, body, n_effective, config)
    images = {p.name: p.read_bytes() for p in sorted(path.glob("*.png"))}
    result = cls(records=records, summary=summary, config=config,
                 provenance=body.get("provenance") or {}, path=path, n_effective=n_effective,
                 wall_time_s=wall, images=images)
    try:
        result.table()
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
        raise InputError(f"the summary is not as ctxleak writes it ({type(exc).__name__}: "
                         f"{exc})", file=str(results_path), field="summary") from None
    return result


def user_id_row(command: str, row: dict[str, Any]) -> dict[str, Any]:
    """A sample row of a run folder written before rows kept the user's ``id`` apart from their
    ``key``, as rows are written now: the old ``id`` (``hr|lambda=1,T=0.8,context=all``,
    ``shots=4/q=17``, ``mode|variant|group|k1|subject|type|template``) becomes the ``key`` and
    the user's id, read back from the row's own columns, the ``id``. Other rows are returned
    as they are."""
    old = row.get("id")
    if KEY_FIELD in row or not isinstance(old, str):
        return row
    user: Any = None
    if command == "influence" and isinstance(row.get("setting"), str) \
            and old.endswith("|" + row["setting"]):
        user = old[:-len(row["setting"]) - 1]
    elif command == "icl" and old.startswith("shots=") and "query_index" in row:
        user = str(row["query_index"])
    elif command == "probe" and "|" in old and "subject" in row:
        user = row["subject"]
    if user is None:
        return row
    return {"id": user, KEY_FIELD: old, **{k: v for k, v in row.items() if k != "id"}}


def _json_object(file: Path, value: Any, field: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise InputError(f"must be a JSON object, got {type(value).__name__}", file=str(file),
                         field=field or None)
    return value


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _count(file: Path, value: Any, field: str) -> int | None:
    if value is not None and (not isinstance(value, int) or isinstance(value, bool)
                              or value < 0):
        raise InputError(f"must be a count (an integer >= 0), got {value!r}", file=str(file),
                         field=field)
    return value


def _check_numbers(file: Path, summary: dict[str, Any], patterns: tuple[str, ...]) -> None:
    """Every value at one of ``patterns`` (``settings.*.n``) is a number or null."""
    for pattern in patterns:
        for where, value in _find(summary, pattern.split("."), "summary"):
            if value is not None and not _is_number(value):
                raise InputError(f"must be a number, got {value!r}", file=str(file),
                                 field=where)


def _check_reading(file: Path, summary: dict[str, Any]) -> None:
    """A stored ``verdict`` (text and rule, strings) and ``units`` (names to strings) are as
    :mod:`ctxleak.methods.verdict` makes them; run folders written before them have neither."""
    for key, check in (("verdict", check_verdict), ("units", check_units)):
        if key in summary:
            problem = check(summary[key])
            if problem:
                raise InputError(problem, file=str(file), field=f"summary.{key}")


def _find(value: Any, parts: list[str], where: str) -> Iterator[tuple[str, Any]]:
    """``(path, value)`` of everything under ``value`` at ``parts`` (``*`` any key or index)."""
    if not parts:
        yield where, value
        return
    head, rest = parts[0], parts[1:]
    if isinstance(value, dict):
        keys = list(value) if head == "*" else [head] if head in value else []
        for k in keys:
            yield from _find(value[k], rest, f"{where}.{k}")
    elif isinstance(value, list) and head == "*":
        for i, item in enumerate(value):
            yield from _find(item, rest, f"{where}[{i}]")


def _summarised(path: Path, rows: list[dict[str, Any]], body: dict[str, Any],
                n_effective: int | None, config: dict[str, Any]) -> list[dict[str, Any]]:
    """The rows of ``samples.jsonl`` the summary was computed from, in their order."""
    samples, results = path / SAMPLES_FILE, path / RESULTS_FILE
    ids = body.get("sample_ids")
    if ids is None:  # a run folder written before results.json listed its samples
        if n_effective is not None and config.get("command") != "influence-explain" \
                and len(rows) != n_effective:
            raise InputError(f"holds {len(rows)} sample rows, but results.json summarised "
                             f"n_effective = {n_effective}", file=str(samples))
        return rows
    if not isinstance(ids, list) or any(not isinstance(i, (str, int)) or isinstance(i, bool)
                                        for i in ids):
        raise InputError("must be a list of sample ids", file=str(results), field="sample_ids")
    if n_effective is not None and len(ids) != n_effective:
        raise InputError(f"lists {len(ids)} ids, but n_effective = {n_effective}",
                         file=str(results), field="sample_ids")
    by_id = {row_key(row): row for row in rows}
    missing = [i for i in ids if i not in by_id]
    if missing:
        raise InputError(f"has no row with id {missing[0]!r} ({len(missing)} of the "
                         f"{len(ids)} samples results.json summarised are missing)",
                         file=str(samples))
    if len(set(ids)) != len(ids):
        raise InputError("lists an id twice", file=str(results), field="sample_ids")
    extra = len(rows) - len(ids)
    if extra:
        warn(f"{samples}: {extra} row(s) that results.json did not summarise (kept "
             "from an earlier run with a larger limit, or added since) are left out")
    return [by_id[i] for i in ids]
