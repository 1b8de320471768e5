"""The leak-map section of a report (Estimating Privacy Leakage of Augmented Contextual Knowledge in
Language Models, Def. 3.1-3.2): the examples and context passages that leaked most, each linked to
its map, and one map per example: the context coloured by the influence of the n-gram windows
covering each token, beside the response coloured per token.

Used by the influence report, ``influence explain`` and probe's in-context mode (where a
subject's documents are the context)."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ctxleak.methods.ids import user_id
from ctxleak.methods.influence.leakmap import context_token_scores, ranked_examples, top_passages
from ctxleak.report.html import Link, Report

# (context token strings, response token strings) of the record at an index
TokensOf = Callable[[int], tuple[list[str], list[str]]]

EXPLAIN = ("Each context token is coloured by the mean influence τ_{i,n} (Def. 3.2) "
           "of the n-gram windows that cover it: how much the whole response's log-probabilities "
           "move when that window is deleted from the context. Darker red: the response leans "
           "more on that passage. The response beside it is coloured by each token's influence "
           "τ_t (Def. 3.1). Hover a token for its value. With --ngram N --stride 1 every token "
           "gets its own moving average; with the default stride (= N) a window's tokens share "
           "its value.")


#: How many examples get a leak map (those with the most influence): every value is in the files.
MAX_MAPS = 30


def anchor(index: int) -> str:
    """The id of record ``index``'s map in the page."""
    return f"ex-{index}"


def record_label(record: dict[str, Any], many_settings: bool) -> str:
    rid = str(record.get("id", ""))
    return f"{rid} ({record['setting']})" if many_settings else rid


def add_leak_section(report: Report, records: Sequence[dict[str, Any]], tokens_of: TokensOf, *,
                     max_maps: int = MAX_MAPS, top_k: int = 20,
                     states: Mapping[tuple[str, str], str] | None = None) -> None:
    """The ranked examples, the top passages and the maps of the ``max_maps`` examples with
    the most influence (those beyond have no map: every value is in samples.jsonl), all maps
    on one colour scale (:func:`map_scales`). ``states``: (example id, setting) -> what the
    control says of it ("flagged beyond the control", "not flagged", ...), added to each map's
    heading."""
    many = len({r.get("setting") for r in records}) > 1
    order = ranked_examples(records)
    mapped = set(order[:max_maps])
    has_windows = any(r.get("window_influence") for r in records)
    has_passages = any(r.get("passage_influence") for r in records)
    report.add_heading("Where the context leaked")
    if has_windows:
        report.add_text(EXPLAIN)
    elif not has_passages:
        report.add_text("This run computed no n-gram windows, so the context cannot be "
                        "coloured: run with --ngram N (and --stride 1 for a map per token) to "
                        "see which context passages drove each response. The responses are "
                        "coloured per token.")
    if has_passages:
        report.add_text("Examples with passages colour each passage's tokens by the passage's "
                        "influence (Def. 3.1-3.2 with S = the passage, nats: the response "
                        "scored with the passage left out). The responses are coloured per "
                        "token.")

    def label(i: int) -> Any:
        text = record_label(records[i], many)
        return Link(text, anchor(i)) if i in mapped else text

    rows = []
    for rank, i in enumerate(order[:200], start=1):
        r = records[i]
        row: dict[str, Any] = {"rank": rank, "example": label(i), "influence": r["influence"]}
        if has_windows:
            row["max n-gram influence"] = r.get("max_window_influence")
        if has_passages:
            row["top passage"] = r.get("max_passage")  # numbered from 1
            row["top passage influence"] = r.get("max_passage_influence")
        row["response"] = r["response"]
        rows.append(row)
    report.add_table(rows, caption="Examples by response influence τ (Def. 3.2), most first; "
                                   "the linked ones have a map below")
    if has_windows:
        passages = []
        for rank, (i, w) in enumerate(top_passages(records, top_k), start=1):
            start, end = records[i]["windows"][w]
            context = report.shown_tokens(tokens_of(i)[0])  # a window may cut a name
            passages.append({"rank": rank, "example": label(i), "tokens": f"{start}-{end}",
                             "passage": "".join(context[start:end]),
                             "influence": records[i]["window_influence"][w]})
        report.add_table(passages, caption=f"The {len(passages)} context passages (n-gram "
                                           "windows) with the most influence on their response")
    maps = [(i, *tokens_of(i)) for i in order[:max_maps]]
    scales = map_scales([(records[i], len(context)) for i, context, _ in maps])
    report.add_text(f"Every map below is on one colour scale: full red is {scales[0]:.3g} nats "
                    f"in the contexts and {scales[1]:.3g} nats in the responses (the largest "
                    "value of any map), so colours compare across examples.")
    for i, context, response in maps:
        heading = record_label(records[i], many)
        state = (states or {}).get((user_id(records[i]), str(records[i].get("setting", ""))))
        if state:
            heading += f" · {state}"
        add_record_map(report, records[i], anchor(i), heading, context, response, scales)


def context_scores(r: dict[str, Any], n_context: int) -> tuple[list[float | None], str, str]:
    """Record ``r``'s context tokens' scores: its passages' influence (when it has passages),
    else the mean of its n-gram windows covering each token; a note saying which, and what the
    colours are (the context map's heading)."""
    if r.get("passage_influence") and r.get("passage_spans"):  # passages: the user's unit
        kept = [(span, v) for span, v in zip(r["passage_spans"], r["passage_influence"])
                if span is not None and v is not None]
        scores = context_token_scores(n_context, [s for s, _ in kept], [v for _, v in kept])
        note = (f"{len(kept)} passages, each coloured by its influence (nats; the passage left "
                "out and the response scored)")
        colours = "each passage's influence (left out once)"
    elif r.get("window_influence") and r.get("windows"):
        scores = context_token_scores(n_context, r["windows"], r["window_influence"])
        note = f"{len(r['windows'])} windows of {r.get('ngram')} tokens"
        colours = "influence of the n-grams covering each token"
    else:
        scores, note = [None] * n_context, "no n-gram windows in this run"
        colours = "not coloured (no n-gram windows)"
    return scores, note, colours


def map_scales(shown: Sequence[tuple[dict[str, Any], int]]) -> tuple[float, float]:
    """One colour scale for every map of a page: the largest |value| of any context token and
    of any response token among the ``(record, context length)`` pairs shown (1.0 where none
    is positive)."""
    def largest(values: Any) -> float:
        finite = [abs(float(v)) for v in values if v is not None and math.isfinite(float(v))]
        return max(finite) if finite and max(finite) > 0 else 1.0
    return (largest(v for r, n in shown for v in context_scores(r, n)[0]),
            largest(v for r, _ in shown for v in r.get("token_influence") or ()))


def add_record_map(report: Report, r: dict[str, Any], section: str, label: str,
                   context: list[str], response: list[str],
                   scales: tuple[float, float] | None = None) -> None:
    """One record's map: its context coloured by its passages' influence (when it has
    passages), else by its n-gram windows', beside its response coloured per token; on the
    page's ``scales`` (context, response) where given."""
    scores, note, colours = context_scores(r, len(context))
    if len(response) != len(r["token_influence"]):
        response = [""] * len(r["token_influence"])  # never mis-align tokens and values
    report.add_leak_map(section, f"{label}: influence {r['influence']:.4g} nats", context,
                        scores, response, r["token_influence"], note=note, scales=scales,
                        colours=colours)


def explain_map(report: Report, context: list[str], starts: Sequence[float],
                per_window: Sequence[float], n: int, response: list[str],
                token_influence: Sequence[float]) -> None:
    """The map of ``influence explain`` (windows of ``n`` tokens at stride 1)."""
    spans = [(int(s), min(int(s) + n, len(context))) for s in starts]
    scores = context_token_scores(len(context), spans, per_window)
    if len(response) != len(token_influence):
        response = [""] * len(token_influence)
    report.add_leak_map(anchor(0), "the context beside the response", context, scores,
                        response, token_influence, note=f"{len(spans)} windows of {n} tokens, "
                                                        "stride 1")


def probe_maps(report: Report, rows: Sequence[dict[str, Any]], *, max_maps: int = 3) -> None:
    """Probe's in-context mode: the maps of the ``max_maps`` rows whose documents had the most
    influence on the target answer (the subject's documents are the context), rendered from
    each record's ``leak_map`` (measured by :meth:`ProbeMethod.measure`)."""
    top = sorted((r for r in rows if r.get("influence") is not None and r.get("leak_map")),
                 key=lambda r: -float(r["influence"]))[:max_maps]
    if not top:
        return
    report.add_heading("In-context: where the documents leaked into the answer")
    report.add_text("The subject's documents are the context. Each document token is coloured "
                    "by the mean influence (Def. 3.2) of the windows covering it on "
                    "the teacher-forced target answer; the answer's tokens by their own "
                    "influence τ_t (Def. 3.1). Hover a token for its value.")
    for k, r in enumerate(top):
        found = r["leak_map"]
        scores = r["token_influence"]
        answer = found["target_tokens"]
        if len(answer) != len(scores):
            answer = [""] * len(scores)
        report.add_leak_map(f"probe-{k}", f"{r['subject']} · {r['pii_type']} · "
                            f"{r['template']}: influence {r['influence']:.4g}",
                            found["context_tokens"], found["scores"], answer, scores,
                            note=f"{found['windows']} windows of {found['n']} tokens")


def flag_states(summaries: Sequence[dict[str, Any]], records: Sequence[dict[str, Any]]
                ) -> dict[tuple[str, str], str]:
    """(example id, setting) -> what its setting's control says of the example: flagged beyond
    the control, not flagged, not judged (too few examples to flag any), or no control."""
    out: dict[tuple[str, str], str] = {}
    by_setting = {str(s.get("setting")): s.get("control") or {} for s in summaries}
    for r in records:
        setting = str(r.get("setting", ""))
        control = by_setting.get(setting) or {}
        key = (user_id(r), setting)
        if not control.get("enabled") or r.get("control_influence") is None:
            out[key] = "no control"
        elif key[0] in set(control.get("flagged") or ()):
            out[key] = "flagged beyond the control"
        elif control.get("threshold") is None:
            out[key] = "not judged (too few examples to flag any)"
        else:
            out[key] = "not flagged"
    return out


__all__ = ["MAX_MAPS", "add_leak_section", "add_record_map", "anchor", "explain_map",
           "flag_states", "probe_maps"]
