"""What a canary audit's stored numbers must satisfy ("Auditing Differentially Private Machine
Learning: How Private is Private SGD?"), checked by resume and :func:`ctxleak.load_result`: a
trial's score a count of the canary's characters, the summary's counts, rates and confidence in
range, ``tp ≤ n_in`` and ``fp ≤ n_out``, the ε lower bound the one its counts give (Clopper–
Pearson, :func:`~ctxleak.methods.attacks.lower_bound.eps_lower_bound`) and the law the one its bound
and guarantee give, so an edited ``eps_lower`` above its guarantee cannot read "holds"."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ctxleak.methods.attacks.lower_bound import eps_lower_bound, law
from ctxleak.methods.checks import Bound, RecordChecks, close, count, is_number, probability
from ctxleak.run.samples import RowProblem

EPS = "an ε, nats"


def score_in_range(row: Mapping[str, Any]) -> RowProblem | None:
    """A trial's score counts characters of its canary: at most the canary's length."""
    score, canary = row.get("score"), row.get("canary")
    if is_number(score) and isinstance(canary, str) and score > len(canary):
        return "score", f"{score!r} is above the canary's {len(canary)} characters"
    return None


def counts_and_bound(summary: Mapping[str, Any]) -> RowProblem | None:
    """``tp ≤ n_in``, ``fp ≤ n_out``; ``eps_lower`` the bound those counts give at the
    summary's confidence; ``law`` the one ``eps_lower`` and ``eps_guarantee`` give."""
    got: list[Any] = [summary.get(k) for k in ("tp", "n_in", "fp", "n_out")]
    tp, n_in, fp, n_out = got
    numbers = all(is_number(v) for v in (tp, n_in, fp, n_out))
    if numbers and tp > n_in:
        return "tp", f"{tp!r} true positives of {n_in!r} trials with the target planted"
    if numbers and fp > n_out:
        return "fp", f"{fp!r} false positives of {n_out!r} trials without it"
    lower, confidence = summary.get("eps_lower"), summary.get("confidence")
    if numbers and is_number(lower) and is_number(confidence) and 0 < confidence < 1:
        delta = summary.get("delta") or 0.0  # an (ε, δ) guarantee's δ, 0 for a pure one
        want = float(eps_lower_bound(int(tp), int(n_in), int(fp), int(n_out),
                                     float(confidence),
                                     float(delta) if is_number(delta) else 0.0)["eps_lower"])
        if not close(float(lower), want, 1e-9 * (1 + abs(want))):
            return "eps_lower", (f"{lower!r} is not the lower bound its counts give ({want!r}: "
                                 f"tp {tp}/{n_in}, fp {fp}/{n_out} at {confidence})")
    upper = summary.get("eps_guarantee")
    if is_number(lower) and (upper is None or is_number(upper)) and "law" in summary:
        want_law = law(float(lower), None if upper is None else float(upper))
        if summary["law"] != want_law:
            return "law", (f"{summary['law']!r}, where ε lower bound {lower!r} and guarantee "
                           f"{upper!r} give {want_law!r}")
    return None


#: The checks of a canary trial and of the audit's summary.
CHECKS = RecordChecks(
    bounds=(count("score"), count("trial"), count("released_tokens"),
            Bound("composed_eps", 0, None, EPS), count("response_ids.*")),
    cross=(score_in_range,),
    summary=(Bound("eps_lower", 0, None, EPS), Bound("eps_guarantee", 0, None, EPS),
             Bound("eps_guarantee_ex_ante", 0, None, EPS),
             Bound("delta", 0, 1, "a δ", open_high=True),
             Bound("confidence", 0, 1, "a confidence", open_low=True, open_high=True),
             count("tp"), count("n_in"), count("fp"), count("n_out"), count("n_trials", 2),
             probability("tpr"), probability("fpr"), probability("tpr_ci.*"),
             probability("fpr_ci.*"), count("trials_needed"),
             Bound("lambda", 0, None, "a context influence level λ"),
             Bound("temperature", 0, None, "a temperature", open_low=True),
             Bound("bounded_eps", 0, None, EPS, open_low=True)),
    summary_cross=(counts_and_bound,),
)
