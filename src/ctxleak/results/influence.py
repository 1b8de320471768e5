"""The Result of context influence: per-example CID responses, and tidy frames of tokens,
n-gram windows and passages ("Estimating Privacy Leakage of Augmented Contextual Knowledge in
Language Models")."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ctxleak.errors import ConfigError
from ctxleak.methods.ids import user_id
from ctxleak.methods.influence.checks import CHECKS
from ctxleak.methods.influence.units import UNITS, likelihood_ratio
from ctxleak.methods.tradeoff.frontier import COLUMNS, KEEP, frontier
from ctxleak.report.views import INFLUENCE
from ctxleak.results.base import Result, import_pandas
from ctxleak.results.joined import join_runs
from ctxleak.results.tables import DocumentTable


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
    checks = CHECKS

    def _setting_columns(self, record: dict[str, Any]) -> dict[str, Any]:
        return {"id": user_id(record), "setting": record.get("setting"),
                "lambda": record.get("lambda"), "temperature": record.get("temperature")}

    def _frame(self, rows: list[dict[str, Any]], columns: list[str]) -> Any:
        frame = import_pandas("tidy frames need").DataFrame.from_records(rows, columns=columns)
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

    def frontier(self, keep: float = KEEP, audits: Sequence[Any] = (),
                 joined: Sequence[Any] = ()) -> Any:
        """The privacy–utility frontier, one row per setting (:mod:`~ctxleak.methods.influence.
        frontier`): privacy loss (influence above the control per token, nats, with its
        interval), bounded CID's ε per response, utility (F1, else ROUGE-L) and its paired
        difference to λ = 1, and ``pareto``; ``frame.attrs`` holds the ``recommendation`` (the
        setting with the least privacy loss keeping ``keep`` of the best utility).

        ``audits``: canary audits (:func:`ctxleak.canary_audit` results) of some of the
        settings; each fills ``eps_lower``, the ε its attack demonstrated, on the row of the
        same λ, T and ε (a second privacy axis beside the guarantee).

        ``joined``: other influence runs over the same questions, model and options (their
        results, e.g. ``ctxleak.load_result`` of their folders; :mod:`ctxleak.results.joined`),
        whose settings join this run's on one frontier; ``frame.attrs["joined"]`` lists the
        settings measured twice."""
        got = self.frontier_summary(keep, audits, joined)
        frame = self._frame(list(got["rows"]), list(COLUMNS))
        frame.attrs.update({k: got.get(k) for k in ("privacy", "privacy_unit", "privacy_note",
                                                    "utility", "keep", "recommendation",
                                                    "joined")})
        return frame

    def frontier_summary(self, keep: float = KEEP, audits: Sequence[Any] = (),
                         joined: Sequence[Any] = ()) -> dict[str, Any]:
        """:meth:`frontier` as plain data (``summary["frontier"]``'s shape: ``rows``,
        ``recommendation``, ``privacy``, ``utility``, ``keep``; ``joined`` where other runs
        joined), recomputed where ``keep``, ``audits`` or ``joined`` ask for it. An audit of a
        setting no run measured, or a second audit of one setting, is refused, naming it; so
        is a run that answered other questions or ran with other options."""
        settings: Sequence[dict[str, Any]]
        records: Sequence[dict[str, Any]]
        if joined:  # the runs' settings and records read as one sweep
            both = join_runs(self, joined)
            settings, records, notes = both.settings, both.records, list(both.notes)
        else:
            settings, records, notes = tuple(self.summary.get("settings") or ()), self.records, []
        got = self.summary.get("frontier")
        lower = self._audit_bounds(audits, settings)
        if not got or got.get("keep") != keep or lower or joined:
            got = frontier(settings, records, keep=keep,
                           seed=int(self.config.get("seed") or 0), audits=lower)
        return {**got, "joined": notes} if joined else dict(got)

    def _audit_bounds(self, audits: Sequence[Any], settings: Sequence[dict[str, Any]]
                      ) -> dict[str, float | None]:
        """Each canary audit's ε lower bound by the key of the setting it audited, every audit
        matched to one of ``settings``."""
        keys = [str(s.get("setting")) for s in settings]
        lower: dict[str, float | None] = {}
        where: dict[str, str] = {}
        for audit in audits:
            name = str(getattr(audit, "path", None) or audit)
            key = audit.summary.get("setting")
            if key is None or "eps_lower" not in audit.summary:
                raise ConfigError(f"{name} is not a canary audit (no setting and eps_lower in "
                                  f"its summary): give the results of ctxleak.canary_audit or "
                                  f"the folders of ctxleak canary", param="audits")
            if str(key) not in keys:
                raise ConfigError(f"the canary audit {name} is of the setting {key}, which "
                                  f"{self.path or 'this run'} did not measure (its settings: "
                                  f"{'; '.join(keys) or 'none'}): audit one of them at its λ, "
                                  f"T and bounded ε", param="audits")
            if str(key) in where:
                raise ConfigError(f"the canary audits {where[key]} and {name} are both of the "
                                  f"setting {key}: give one audit per setting", param="audits")
            self._same_run_facts(audit, name)
            lower[str(key)], where[str(key)] = audit.summary["eps_lower"], name
        return lower

    #: What an audit must share with the sweep beside the setting's λ, T and ε to stand on its
    #: row: the model, where it was served and the response length (ε composes per token).
    AUDIT_JOIN = (("model", "model"), ("served_model", "served model"),
                  ("server_url", "server"), ("max_new_tokens", "most new tokens"),
                  ("min_new_tokens", "least new tokens"))

    def _same_run_facts(self, audit: Any, name: str) -> None:
        """Refuse an audit of another model, server or response length than this run's (a
        fact either side did not record is not compared)."""
        mine, theirs = self.config or {}, getattr(audit, "config", None) or {}
        for key, what in self.AUDIT_JOIN:
            a, b = mine.get(key), theirs.get(key)
            if a is not None and b is not None and a != b:
                raise ConfigError(
                    f"the canary audit {name} is of another {what} ({key} {b!r}) than "
                    f"{self.path or 'this run'} ({a!r}): its ε lower bound does not belong on "
                    f"this frontier; audit the sweep's own {what}", param="audits")

    def documents(self) -> DocumentTable:
        """The leak ledger per document (runs with retrieved documents or passages), one row per
        (setting, document), most leaked first: its ``class``, times ``retrieved``, ``scored``
        (in the context the answer was scored with), ``leaked`` (answers in which it was judged
        leaked: above the per-document control or copied), ``leak_max`` and ``leak_sum`` (nats
        above that control), ``copied`` (answers that copied it), ``flagged`` (flagged answers
        in which it leaked), its ``budget`` and ``over_budget``; the
        sum and largest of its leave-one-out influence (nats), per response token; the
        questions it moved most; the PII it carries that answers repeated; under bounded CID
        its composed ε guarantee (``eps_basic``, ``eps_tight`` at ``delta``). See
        :mod:`ctxleak.methods.rag.exposure`. A :class:`DocumentTable`, as the attacks' ledgers:
        its rows, ``.to_pandas()``."""
        rows = [{"setting": s.get("setting"), "lambda": s.get("lambda"),
                 "temperature": s.get("temperature"), **row,
                 "over_budget": row["document"] in (s.get("over_budget") or ())}
                for s in self.summary.get("settings") or () for row in s.get("documents") or ()]
        columns = ["setting", "lambda", "temperature", "document", "source", "class",
                   "retrieved", "scored", "leaked", "leak_max", "leak_sum", "copied", "flagged",
                   "influence_sum", "influence_max", "influence_per_token",
                   "influence_per_token_max", "top_queries", "pii_in_answers", "pii_carried",
                   "budget", "over_budget", "worst_answer", "first_copy", "text"]
        if any("eps_basic" in r for r in rows):
            columns += ["eps_per_token", "released_tokens", "eps_basic", "eps_tight", "delta",
                        "composition"]
        return DocumentTable(rows, columns, dict(UNITS))

    def over_budget(self) -> list[tuple[str, str]]:
        """``(setting, document)`` of every document over a budget: its summed influence over
        the run's ``exposure_budget``, or its leak over its class's or its own budget (nats,
        :mod:`ctxleak.methods.rag.budgets`); [] without a budget. The baseline a sweep added
        (λ = 1, no bound, not asked for) is reported in its own rows, never failing the gate."""
        return [(str(s.get("setting")), str(d)) for s in self.summary.get("settings") or ()
                if not s.get("added_baseline") for d in s.get("over_budget") or ()]

    def budget_breaches(self) -> list[str]:
        """One line per document over a budget: which document, which answer, by how much
        (prefixed by the setting in a sweep)."""
        settings = self.summary.get("settings") or ()
        return [(f"[{s.get('setting')}] " if len(settings) > 1 else "") + line
                for s in settings if not s.get("added_baseline")
                for line in s.get("budget_breaches") or ()]

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
        "settings.*.rouge_l.mean", "settings.*.exact_match.mean", "settings.*.f1.mean",
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
        return LeakMapHTML(INFLUENCE.example_html(self.result, self.record))

    def _repr_html_(self) -> str:
        return self.show().html
