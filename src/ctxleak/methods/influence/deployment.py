"""Whether the audit decodes as the deployment does: influence is measured on answers sampled at
the audit's temperature, and a deployment that decodes otherwise gives other answers (a greedy
deployment repeats the password a document holds where an audit at T = 0.5 may invent one).

:func:`decoding_note` says so in one sentence, for the console and the report, when the
deployment's temperature (``deployed_temperature``, or a served model's greedy default) is
not one the audit measured at.
"""

from __future__ import annotations

from collections.abc import Sequence

#: The temperature a served deployment is taken to answer at when none is given: greedy.
SERVED_DEPLOYMENT = 0.0


def deployed(given: float | None, served: bool) -> tuple[float | None, str]:
    """The deployment's temperature and where it comes from: ``given``
    (``deployed_temperature``), else a served model's greedy default, else unknown (None)."""
    if given is not None:
        return float(given), "deployed_temperature"
    if served:
        return SERVED_DEPLOYMENT, "a served deployment's greedy default, assumed"
    return None, ""


def decoding_note(audited: Sequence[float], given: float | None, served: bool) -> str | None:
    """One sentence when the audit's temperatures (``audited``) differ from the deployment's;
    None when they agree or the deployment's is unknown."""
    temperature, source = deployed(given, served)
    if temperature is None or any(abs(t - temperature) < 1e-9 for t in audited):
        return None
    shown = ", ".join(f"{t:g}" for t in audited)
    greedy = " (greedy)" if temperature == 0 else ""
    return (f"the audit decoded at T = {shown}, the deployment at T = {temperature:g}{greedy} "
            f"({source}): its answers may differ from the deployment's (a greedy deployment "
            f"repeats values a sampled answer may replace or invent); audit at the deployment's "
            f"temperature, or score the deployment's own logged answers")


__all__ = ["SERVED_DEPLOYMENT", "decoding_note", "deployed"]
