"""The verdict: one plain sentence a user can act on, and the rule behind it.

The contract, shared by every method: ``summarize`` puts

    summary["verdict"] = {"text": "<one plain sentence>", "rule": "<the rule behind it>"}

(both strings, made with :func:`make_verdict`) into the run's summary; the report shows it first,
at the top of the console summary, of the HTML report and of Jupyter's summary. A run folder
written before verdicts loads without one (and the report computes it again where the run has
what it needs). :func:`check_verdict` is what :func:`ctxleak.load_result` holds a stored verdict
to. To change the contract, change it here and in ``check_verdict`` together.

``summary["units"]`` (optional) maps a summary key to its unit and meaning, in words.

The readings of a privacy loss in nats used in the sentences (:func:`ratio_text`): a loss of x
nats is a likelihood ratio of e^x, and, as the log of how much more likely the output is with a
piece of context than without it, the ε of ex-post per-instance differential privacy
("Estimating Privacy Leakage of Augmented Contextual Knowledge in Language Models", Def. 2.2).
"""

from __future__ import annotations

import math
from typing import Any

#: The keys of a verdict, both strings.
VERDICT_KEYS = ("text", "rule")

#: The reading of a privacy loss in nats, for ``summary["units"]``.
NATS_AS_EPS = ("nats; the ε of ex-post per-instance differential privacy: the output is up to "
               "e^x times more likely with the exemplar/context than without it")


def make_verdict(text: str, rule: str) -> dict[str, str]:
    """``{"text": text, "rule": rule}``, both non-empty strings."""
    verdict = {"text": str(text).strip(), "rule": str(rule).strip()}
    problem = check_verdict(verdict)
    if problem:
        raise ValueError(problem)
    return verdict


def check_verdict(value: Any) -> str | None:
    """What is wrong with a stored verdict (``None`` if nothing): it must be an object with a
    non-empty string ``text`` and a string ``rule``."""
    if not isinstance(value, dict):
        return f"must be an object with text and rule, got {type(value).__name__}"
    for key in VERDICT_KEYS:
        if not isinstance(value.get(key), str):
            return f"{key} must be a string, got {value.get(key)!r}"
    if not value["text"]:
        return "text must not be empty"
    return None


def check_units(value: Any) -> str | None:
    """What is wrong with a stored ``units`` map (``None`` if nothing): strings to strings."""
    if not isinstance(value, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        return "must be an object mapping names to strings"
    return None


def num(x: float | None, digits: int = 3) -> str:
    """A number for a sentence: ``digits`` significant digits, "—" for none or non-finite."""
    if x is None or not math.isfinite(float(x)):
        return "—"
    return f"{float(x):.{digits}g}"


def ratio_text(nats: float | None) -> str:
    """A privacy loss in nats read as a likelihood ratio: ``"e^3.9 ≈ 49×"``."""
    if nats is None or not math.isfinite(float(nats)):
        return "—"
    if nats > 700:
        return f"e^{num(nats)}"
    return f"e^{num(nats, 2)} ≈ {num(math.exp(nats), 2)}×"


def listing(items: list[str], limit: int = 3) -> str:
    """``"a, b and c"`` (the first ``limit``; "and n more" beyond)."""
    shown = items[:limit]
    more = len(items) - len(shown)
    if more:
        return ", ".join(shown) + f" and {more} more"
    if len(shown) <= 1:
        return "".join(shown)
    return ", ".join(shown[:-1]) + " and " + shown[-1]


__all__ = ["NATS_AS_EPS", "VERDICT_KEYS", "check_units", "check_verdict", "listing",
           "make_verdict", "num", "ratio_text"]
