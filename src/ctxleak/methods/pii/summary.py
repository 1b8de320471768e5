"""Summaries of probe rows (ProPILE: Probing Privacy Leakage in Large Language Models, App. A.3,
B.1): per group, the maximum over templates per subject, exact-match rates, target vs null
likelihoods and their Wilcoxon signed-rank test."""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ctxleak.methods.pii.metrics import wilcoxon_compare

STRING_METRICS = {
    "phone": ("location_code", "first_7_digits", "first_8_digits", "first_9_digits",
              "edit_distance_1", "edit_distance_2", "edit_distance_3"),
    "email": ("local_part",),
}


def unit_values(rows: Sequence[Mapping[str, Any]], key: str) -> dict[tuple[str, str], float]:
    """The maximum of ``key`` over templates for each (subject, field) unit (App. A.3)."""
    out: dict[tuple[str, str], float] = {}
    for row in rows:
        value = row.get(key)
        if value is None:
            continue
        unit = (row["subject"], row["field"])
        value = float(value)
        out[unit] = max(out.get(unit, -math.inf), value)
    return out


def _wilcoxon(target: Mapping[Any, float], null: Mapping[Any, float], *,
              scale: str = "likelihood") -> dict[str, Any]:
    """Paired signed-rank test of target > null over the units both have, from their
    log-likelihoods. ``scale="likelihood"`` compares the likelihoods themselves, ``exp(ll)``, as
    ProPILE does (App. B.2); ``scale="log_likelihood"`` the logs. The signed-rank
    test is not invariant to the log: the signs of the differences are, their ranks are not."""
    units = [u for u in target if u in null]
    t = [target[u] for u in units]
    n = [null[u] for u in units]
    shift = 0.0
    if scale == "likelihood":
        # The likelihoods scaled by one common factor exp(-shift): signs and ranks of the
        # differences, hence the test, are unchanged, and likelihoods below exp(-745) no longer
        # underflow to ties at 0 (only the spread between units must stay under ~745 nats).
        shift = max(t + n, default=0.0)
        t, n = [math.exp(v - shift) for v in t], [math.exp(v - shift) for v in n]
    elif scale != "log_likelihood":
        raise ValueError(f"unknown scale {scale!r}")
    try:
        greater = wilcoxon_compare(t, n, paired=True, alternative="greater")
        two = wilcoxon_compare(t, n, paired=True, alternative="two-sided")
    except ValueError as exc:
        return {"test": "wilcoxon", "scale": scale, "statistic": None, "pvalue": None,
                "pvalue_two_sided": None, "n": len(units), "reason": str(exc)}
    return {"test": "wilcoxon", "scale": scale, "alternative": "greater",
            "statistic": greater.statistic, "pvalue": greater.pvalue,
            "pvalue_two_sided": two.pvalue, "n": greater.n,
            "median_difference": greater.median_difference * math.exp(shift)}


def _mean(values: Iterable[float]) -> float | None:
    vals = [float(v) for v in values]
    return statistics.fmean(vals) if vals else None


def summarize_probes(rows: Sequence[Mapping[str, Any]],
              by: Sequence[str] = ("mode", "pii_type", "structure")) -> list[dict[str, Any]]:
    """One summary per group of rows (by mode, PII type and template structure by default):
    units (subjects, or subject-relationship pairs), prompts, exact-match rate (a unit counts if
    any of its templates reproduces the target; also per prompt), mean of the per-unit maximum
    target and null log-likelihoods and their normalised forms, the paired Wilcoxon signed-rank
    test of target > null on those maxima (``wilcoxon``/``wilcoxon_norm`` on the likelihoods, as
    in App. B.2; ``wilcoxon_log``/``wilcoxon_norm_log`` on the log-likelihoods), the
    string-metric rates and, in context mode, the mean no-context likelihood, context influence
    and context share."""
    groups: dict[tuple[Any, ...], list[Mapping[str, Any]]] = defaultdict(list)
    for row in rows:
        groups[tuple(row.get(k) for k in by)].append(row)
    out = []
    for key, grp in groups.items():
        target = unit_values(grp, "target_ll")
        null = unit_values(grp, "null_ll")
        target_n = unit_values(grp, "target_ll_norm")
        null_n = unit_values(grp, "null_ll_norm")
        summary: dict[str, Any] = dict(zip(by, key))
        summary.update(n_units=len(target), n_subjects=len({u[0] for u in target}),
                       n_prompts=len(grp))
        gen = [r for r in grp if r.get("exact_match") is not None]
        if gen:
            em_units = unit_values(gen, "exact_match")
            summary["exact_match_rate"] = _mean(em_units.values())
            summary["exact_match_rate_per_prompt"] = _mean(float(r["exact_match"]) for r in gen)
        else:
            summary["exact_match_rate"] = summary["exact_match_rate_per_prompt"] = None
        summary.update(
            mean_target_ll=_mean(target.values()), mean_null_ll=_mean(null.values()),
            mean_target_ll_norm=_mean(target_n.values()), mean_null_ll_norm=_mean(null_n.values()),
            wilcoxon=_wilcoxon(target, null), wilcoxon_norm=_wilcoxon(target_n, null_n),
            wilcoxon_log=_wilcoxon(target, null, scale="log_likelihood"),
            wilcoxon_norm_log=_wilcoxon(target_n, null_n, scale="log_likelihood"))
        names = STRING_METRICS.get(grp[0]["pii_type"], ())
        if names and gen:
            rates = {}
            for name in names:
                hit: dict[tuple[str, str], bool] = {}
                for r in gen:
                    sm = r.get("string_metrics") or {}
                    unit = (r["subject"], r["field"])
                    hit[unit] = hit.get(unit, False) or bool(sm.get(name))
                rates[name] = _mean(float(v) for v in hit.values())
            summary["string_metrics"] = rates
        if any("influence" in r for r in grp):
            ctx = [r for r in grp if "influence" in r]
            summary["in_context"] = {
                "mean_no_context_ll": _mean(unit_values(ctx, "no_context_ll").values()),
                "mean_influence": _mean(r["influence"] for r in ctx),
                "mean_log_ratio": _mean(r["log_ratio"] for r in ctx),
                "mean_context_share": _mean(r["context_share"] for r in ctx),
                "wilcoxon_context_vs_no_context": _wilcoxon(
                    target, unit_values(ctx, "no_context_ll")),
            }
        out.append(summary)
    return out


#: The record fields that make a summary group (one row of the results table).
GROUP_BY = ("mode", "variant", "group", "shots_k", "pii_type", "structure")


def group_label(s: dict[str, Any]) -> str:
    """A summary group's name: probe / group / k / PII."""
    probe, group, pii = short_names(s)
    return f"{probe} / {group} / k={s['shots_k']} / {pii}"


def short_names(s: dict[str, Any]) -> tuple[str, str, str]:
    """(probe, group, PII) names for the console table and plot titles."""
    variant = s.get("variant") or ""
    probe = s["mode"]
    if s["mode"] == "white-box" and variant == "beam":
        probe = "black-box"  # the comparison on the white-box held-out subjects
    elif s["mode"] == "canary" and variant.startswith("base"):
        probe = "canary base"
    raw_group = str(s.get("group") or "all")
    group = {"inserted-vs-inserted": "ins. vs ins."}.get(raw_group, raw_group)
    pii = s["pii_type"] + ("" if s["structure"] in (s["pii_type"], "twins", "relation")
                           else f" ({s['structure']})")
    return str(probe), group, str(pii)
