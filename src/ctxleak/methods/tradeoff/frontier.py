"""The privacy–utility frontier of an influence sweep: which mechanism, λ or ε keeps answers
useful and documents private.

"Estimating Privacy Leakage of Augmented Contextual Knowledge in Language Models" offers two
mitigations, a lower λ (Context Influence Decoding) and bounded CID with ε per token
(App. B, Alg. 1), and reads what each costs in utility against references (§4). A sweep
(``--lambda 0,0.5,1 --bounded-eps 2,8``) measures every combination; :func:`frontier` puts its
settings side by side, one row each:

* privacy loss: the influence above the control per token (nats per token, with its 95%
  bootstrap interval), what the document itself added beyond any context; where a setting has no
  control, every row falls back to the mean influence per token, and ``privacy_note`` says so;
* the guarantee: bounded CID's mean composed ε per response (Theorem B.1 by basic composition),
  ``None`` for plain CID;
* a second privacy axis where canary audits of the settings are given (``audits``, by setting
  key: :mod:`ctxleak.methods.attacks.canary`): ``eps_lower``, the ε an attacker demonstrated at
  95 % confidence, in
  nats per response, beside the guarantee;
* utility: answer match (the normalised reference inside the normalised answer, 0/1 per
  question) where the records have it, else token F1 against the references (SQuAD's,
  :mod:`.utility`), else ROUGE-L F1, with its interval, and the paired difference to the
  λ = 1 unbounded setting of the same temperature and context size (the paired bootstrap of
  :func:`.utility.paired_difference`);
* ``pareto``: no other setting is at least as good on both (privacy loss no higher, utility no
  lower) and better on one.

A sweep may hold other mechanisms than CID (``--mechanism``: a DP vote over shards, DP-RAG,
scrubbing; :mod:`ctxleak.methods.influence.mechanism_mode`), each measured by the same influence
and the same utility. Every row then shows what its setting claims (``eps_guarantee`` per
response, ``delta``, the ``relation`` the claim covers, ``tokens_paid``) beside the leak
measured, and exact match, token F1 and ROUGE-L each with its paired difference to the
baseline.

Fact groups: where every setting's questions come in both groups of ``record["fact"]``,
"common" (a fact the model may know without the document) and "private" (only the document
holds it), utility is read on the common-fact questions only and privacy loss on the
private-fact questions only (the summary's ``fact_groups``,
:func:`ctxleak.methods.influence.summary.fact_groups`, else the records'), and ``fact_note``
says so in one line; without both groups nothing changes.

A setting whose privacy loss or utility is not a finite number (NaN, ±inf: a run cut short,
a summary edited by hand) is skipped: it keeps its row, but is never on the Pareto front, never
compared and never recommended, and ``skipped`` names it with the reason.

The recommendation is the Pareto setting with the least privacy loss that keeps at least
``keep`` (default 90 %) of the best utility, said in one sentence with what its claim covers
(a shard-level ε is not a document-level ε); when no setting with less privacy loss than the
best one does, it says so and names the setting that comes closest (the most utility among
those that leak less) with its share of the best utility and how much less it leaks. With
fewer than :data:`MIN_QUESTIONS` questions the utility differences are not resolved, and it
recommends nothing (naming the setting the rule would pick on those few questions).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from ctxleak.errors import ConfigError
from ctxleak.methods.tradeoff.facts import FACT_UTILITIES, fact_groups
from ctxleak.methods.tradeoff.rows import (
    NOTHING,
    SCORE_PARTS,
    Frontier,
    FrontierRow,
    difference,
    skipped,
    utility_columns,
)
from ctxleak.methods.tradeoff.setting_summary import (
    FactGroups,
    SettingSummary,
    check_utilities,
    mean_of,
    missing_key,
    read_summaries,
)

#: The share of the best utility a recommended setting keeps, by default.
KEEP = 0.9

#: The utility a frontier reads, first found first: key, name. Answer match (the normalised
#: reference inside the normalised answer, :func:`.utility.reference_scores`) where the records
#: have it, else F1, else ROUGE-L.
UTILITIES = (("match", "answer match"), ("f1", "F1"), ("rouge_l", "ROUGE-L"))

#: Fewer questions than this and utility differences are not resolved: no recommendation.
MIN_QUESTIONS = 30

#: The columns of a frontier row, in order.
COLUMNS = ("setting", "label", "mechanism", "lambda", "temperature", "bounded_eps", "privacy",
           "privacy_ci_low", "privacy_ci_high", "eps_guarantee", "delta", "relation",
           "tokens_paid", "eps_lower", "utility", "utility_ci_low",
           "utility_ci_high", "baseline", "added_baseline", "utility_difference", "difference_ci_low",
           "difference_ci_high", "difference_pairs", "difference_reason", "pareto",
           "utility_kept",
           *(f"{k}{part}" for k in FACT_UTILITIES for part in SCORE_PARTS))

ABOVE_CONTROL = "influence above control per token"
PER_TOKEN = "influence per token"


def frontier(settings: Sequence[Mapping[str, Any]],
             records: Sequence[dict[str, Any]] | None = None, *, keep: float = KEEP,
             seed: int = 0, audits: Mapping[str, float | None] | None = None,
             min_questions: int = MIN_QUESTIONS) -> dict[str, Any]:
    """:func:`frontier_of` as plain data (:meth:`.rows.Frontier.to_dict`)."""
    return frontier_of(settings, records, keep=keep, seed=seed, audits=audits,
                       min_questions=min_questions).to_dict()


def frontier_of(settings: Sequence[Mapping[str, Any]],
                records: Sequence[dict[str, Any]] | None = None, *, keep: float = KEEP,
                seed: int = 0, audits: Mapping[str, float | None] | None = None,
                min_questions: int = MIN_QUESTIONS) -> Frontier:
    """The frontier of an influence run's ``settings`` (``summary["settings"]``, each read once
    as a :class:`~.setting_summary.SettingSummary`: a summary missing a key the frontier reads
    is refused, naming the setting and the key); ``records`` (the run's samples) give the
    paired utility differences to λ = 1, left ``None`` without; ``audits``: the canary audits'
    ε lower bounds by setting key (``eps_lower``, None where a setting has none); a key that is
    none of the settings' is refused, naming it.

    Returns (:class:`.rows.Frontier`) the ``rows`` (one per setting, in the sweep's order), the
    ``privacy`` and ``utility`` they read (with ``privacy_note`` where the control is missing),
    ``keep``, ``questions`` (the fewest any setting measured utility on), the ``recommended``
    setting's key (``None`` where none is, and with fewer than ``min_questions`` questions) and
    the ``recommendation``; ``facts`` (questions per fact group, ``None`` without both groups)
    and ``fact_note``, the line that says which questions utility and privacy loss were read
    on; ``skipped``, the settings left out of every comparison because a figure is not finite
    (:func:`.rows.skipped`)."""
    if not (isinstance(keep, (int, float)) and not isinstance(keep, bool) and 0 < keep <= 1):
        raise ConfigError(f"keep must be a share of the best utility in (0, 1], got {keep!r}",
                          param="keep")
    summaries = read_summaries(settings)
    check_utilities(summaries)
    keys = [s.setting for s in summaries]
    unknown = [k for k in audits or {} if k not in map(str, keys)]
    if unknown:
        raise ConfigError(f"the audit of setting {unknown[0]} matches none of the sweep's "
                          f"settings ({'; '.join(map(str, keys))})", param="audits")
    by_setting: dict[Any, list[dict[str, Any]]] = {}
    for r in records or ():
        by_setting.setdefault(r.get("setting"), []).append(r)
    views, facts = fact_views(summaries, by_setting, seed)
    if facts is not None:  # utility's paired differences on the common-fact questions only
        by_setting = {k: [r for r in v if r.get("fact") == "common"]
                      for k, v in by_setting.items()}
    privacy, note = _privacy_measure(views)
    key, name = next(((k, n) for k, n in UTILITIES
                      if any(mean_of(s.measured.utility(k)) is not None for s in views)),
                     (None, None))
    rows = _ranked([_row(s, label, privacy, key, by_setting, keys, seed,
                         (audits or {}).get(str(s.setting)))
                    for s, label in zip(views, setting_labels(views))])
    questions = min((int(s.measured.n) for s in views if s.measured.n is not None),
                    default=None)
    resolved = questions is None or questions >= min_questions
    chosen = recommend(rows, keep) if resolved else None
    left_out = skipped(rows, privacy, name)
    sentence = (f"No recommendation: every setting with figures was skipped ({len(left_out)} "
                f"of {len(rows)}: a leak or utility that is not a finite number)."
                if left_out and not any(r.point for r in rows)
                else recommendation(rows, chosen, keep, privacy, name) if resolved else (
        f"No recommendation: utility differences not resolved with {questions} question(s) "
        f"(fewer than {min_questions}); measure at least {min_questions} questions to choose "
        f"between settings." + _indicative(rows, keep, name)))
    return Frontier(privacy=privacy, privacy_note=note, utility=name, utility_key=key, keep=keep,
                    questions=questions, min_questions=min_questions, resolved=resolved,
                    facts=facts, fact_note=fact_note(facts),
                    recommended=chosen.setting if chosen else None, recommendation=sentence,
                    skipped=tuple(left_out), rows=tuple(rows))


def _row(setting: SettingSummary, label: str, privacy: str, key: str | None,
         by_setting: Mapping[Any, Sequence[dict[str, Any]]], keys: Sequence[str], seed: int,
         eps_lower: float | None) -> FrontierRow:
    """One setting's row, before the Pareto front (:func:`_ranked`): its ``privacy`` measure,
    its claim, its utility ``key`` and every utility's paired difference to its baseline's
    records (``by_setting``, the baseline's where ``keys`` has it)."""
    base = baseline_key(setting)
    is_base = setting.setting == base
    mine = by_setting.get(setting.setting, [])
    theirs = by_setting.get(base, []) if base in keys else []
    measured = setting.measured
    leak = (measured.above_control_per_token if privacy == ABOVE_CONTROL else
            measured.influence_per_token)
    return FrontierRow(
        setting=setting.setting, label=label, mechanism=setting.mechanism,
        lambda_=setting.lambda_, temperature=setting.temperature,
        bounded_eps=setting.bounded_eps, privacy=leak or NOTHING,
        guarantee=setting.guarantee, eps_lower=eps_lower,
        utility=(measured.utility(key) if key else None) or NOTHING, baseline=is_base,
        added_baseline=setting.added_baseline,
        difference=difference(mine, theirs, key, is_base, seed),
        scores=utility_columns(setting, mine, theirs, is_base, seed))


def fact_views(settings: Sequence[SettingSummary],
               by_setting: Mapping[Any, Sequence[dict[str, Any]]], seed: int = 0
               ) -> tuple[list[SettingSummary], dict[str, int] | None]:
    """The settings as the frontier reads them, and the questions per fact group. Where every
    setting has both fact groups (its summary's ``fact_groups``, else computed from its
    records in ``by_setting``), each is read with its utilities (and ``n``) from the
    "common" group and its influence per token and above the control from the "private"
    group (:meth:`~.setting_summary.SettingSummary.on_fact_groups`); otherwise the settings as
    they are and ``None``."""
    groups = [s.fact_groups or (FactGroups.read(
        fact_groups(by_setting.get(s.setting) or (), seed=seed), f"the records of {s.setting}")
        if by_setting else None) for s in settings]
    split = [g for g in groups if g is not None and g.common.n and g.private.n]
    if not settings or len(split) < len(settings):
        return list(settings), None
    counts = {"common": min(int(g.common.n or 0) for g in split),
              "private": min(int(g.private.n or 0) for g in split)}
    return [s.on_fact_groups(g) for s, g in zip(settings, split)], counts


def fact_note(facts: Mapping[str, int] | None) -> str | None:
    """The line that says what a fact-split frontier read where: ``utility on the 24
    common-fact questions, leak on the 64 private-fact questions``; None without a split."""
    if not facts:
        return None
    return (f"utility on the {facts['common']} common-fact questions, leak on the "
            f"{facts['private']} private-fact questions")


def _privacy_measure(settings: Sequence[SettingSummary]) -> tuple[str, str | None]:
    """Influence above the control per token where every setting has one, else the mean
    influence per token, with the note why; a setting whose summary has neither is refused,
    naming it."""
    missing = [s for s in settings if mean_of(s.measured.above_control_per_token) is None]
    if not missing:
        return ABOVE_CONTROL, None
    for i, s in enumerate(settings):
        if s.measured.influence_per_token is None and "influence_per_token" not in s.keys:
            raise missing_key(f"settings[{i}] ({s.setting})", "influence_per_token", s.keys)
    reason = missing[0].no_control or "no example had a control"
    return PER_TOKEN, (f"privacy is the mean influence per token, not the influence above a "
                       f"control: {len(missing)} of {len(settings)} setting(s) have no control "
                       f"({reason})")


def setting_labels(summaries: Sequence[SettingSummary]) -> list[str]:
    """Each setting by what varies across the sweep: ``λ = 0.5``, ``λ = 1, ε = 2``, with T and
    the context size where they vary too; ``λ = 1 (added baseline)`` where the sweep did not ask
    for the unmitigated setting and it was measured as the baseline."""
    temps = {s.temperature for s in summaries}
    contexts = {context_part(s.setting) for s in summaries}
    out = []
    for s in summaries:
        if s.mechanism:
            extra = [f"T = {s.temperature:g}"] if len(temps) > 1 else []
            out.append(", ".join([str(s.mechanism), *extra]))
            continue
        parts = [f"λ = {s.lambda_:g}" if s.lambda_ is not None else "λ = ?"]
        if s.bounded_eps is not None:
            parts.append(f"ε = {s.bounded_eps:g}")
        if len(temps) > 1:
            parts.append(f"T = {s.temperature:g}")
        if len(contexts) > 1:
            parts.append(context_part(s.setting).replace("=", " = "))
        out.append(", ".join(parts) + (" (added baseline)" if s.added_baseline else ""))
    return out


def context_part(key: Any) -> str:
    """The ``context=...`` part of a setting's key (:attr:`.setting.Setting.key`)."""
    return next((p for p in str(key).split(",") if p.startswith("context=")), "context=all")


def baseline_key(setting: SettingSummary) -> str | None:
    """The key of the setting a row's utility is compared with: plain decoding, λ = 1 without
    a bound, at the same temperature and context size."""
    if setting.temperature is None:
        return None
    return f"lambda=1,T={setting.temperature:g},{context_part(setting.setting)}"


def pareto_flags(points: Sequence[tuple[float, float] | None]) -> list[bool | None]:
    """For each (privacy loss, utility) point, whether it is on the Pareto front: True when no
    other point has privacy loss no higher and utility no lower, one of them strictly; None
    where a point is missing or not finite (NaN, ±inf), which is compared with no other."""
    points = [p if p is not None and all(map(math.isfinite, p)) else None for p in points]
    flags: list[bool | None] = []
    for i, point in enumerate(points):
        if point is None:
            flags.append(None)
            continue
        p, u = point
        flags.append(not any(
            other is not None and j != i and other[0] <= p and other[1] >= u
            and (other[0] < p or other[1] > u) for j, other in enumerate(points)))
    return flags


def _ranked(rows: Sequence[FrontierRow]) -> list[FrontierRow]:
    """The rows with ``pareto`` (:func:`pareto_flags`) and ``utility_kept``, each one's share of
    the best utility (None where the best is 0)."""
    flagged = [replace(r, pareto=f) for r, f in zip(rows, pareto_flags([r.point for r in rows]))]
    best = _best(flagged)
    top = None if best is None else _figures(best)[1]
    return [replace(r, utility_kept=r.utility.mean / top
                    if top is not None and r.utility.mean is not None and top > 0
                    and math.isfinite(r.utility.mean) else None)
            for r in flagged]


def _figures(row: FrontierRow) -> tuple[float, float]:
    """The privacy loss and utility of a row that has both (:func:`_best`'s)."""
    point = row.point
    if point is None:
        raise ValueError(f"the row {row.label} has no privacy loss or no utility")
    return point


def _best(rows: Sequence[FrontierRow]) -> FrontierRow | None:
    """The row with the best utility (of those tied, the least privacy loss)."""
    scored = [r for r in rows if r.point is not None]
    return min(scored, key=lambda r: (-_figures(r)[1], _figures(r)[0])) if scored else None


def recommend(rows: Sequence[FrontierRow], keep: float = KEEP) -> FrontierRow | None:
    """The Pareto row with the least privacy loss whose utility is at least ``keep`` times the
    best; None without utility, or where the best utility is 0."""
    best = _best(rows)
    if best is None or _figures(best)[1] <= 0:
        return None
    fit = [r for r in rows if r.pareto and _figures(r)[1] >= keep * _figures(best)[1]]
    return min(fit, key=lambda r: _figures(r)[0]) if fit else None


def _pct(x: float) -> str:
    return f"{100 * x:.0f} %"


def recommendation(rows: Sequence[FrontierRow], chosen: FrontierRow | None, keep: float,
                   privacy: str, utility: str | None) -> str:
    """One sentence: the recommended setting, what share of the best utility it keeps at what
    share of the best setting's privacy loss, or why there is none."""
    best = _best(rows)
    if utility is None or best is None:
        return ("No recommendation: no example has a reference answer, so utility cannot be "
                "measured (give a reference field, or try data='demo-qa').")
    if chosen is None:
        return (f"No recommendation: every setting's {utility} is 0 (no answer matches a "
                f"reference), so there is no utility to keep.")
    unit = "nats per token"
    (top_privacy, top), (loss, kept) = _figures(best), _figures(chosen)
    head = f"{best.label}: {utility} {top:.3g}, {privacy} {top_privacy:.3g} {unit}"
    if chosen is best:
        near = closest(rows)
        return (f"No setting with less {privacy} keeps {_pct(keep)} of the best {utility} "
                f"({head})." + (f" Closest: {_kept_text(near, best, utility)}." if near else ""))
    if top_privacy > 0 and loss >= 0:
        cost = f"{_pct(loss / top_privacy)} of its {privacy}"
    else:
        cost = f"{privacy} {loss:.3g} {unit}"
    sentence = f"{chosen.label} keeps {_pct(kept / top)} of the best {utility} at {cost} ({head}"
    claim = chosen.guarantee
    if claim.eps is not None and claim.relation is None:
        sentence += f"; ε {claim.eps:.3g} per response guaranteed"
    return sentence + ")." + claim_sentence(chosen)


def closest(rows: Sequence[FrontierRow]) -> FrontierRow | None:
    """The setting that comes closest to a recommendation where none keeps enough utility:
    of those with less privacy loss than the best-utility setting, the one with the most
    utility (of those tied, the least privacy loss); None where none leaks less."""
    best = _best(rows)
    if best is None:
        return None
    least = _figures(best)[0]
    return _best([r for r in rows if r.point is not None and _figures(r)[0] < least])


def _kept_text(row: FrontierRow, best: FrontierRow, utility: str | None) -> str:
    """``λ = 0.5 keeps 84 % of the best F1 (F1 0.42 vs 0.50) with 0.12 nats per token less
    leak``: a setting against the best-utility one."""
    (loss, value), (top_loss, top) = _figures(row), _figures(best)
    kept = _pct(value / top) if top > 0 else "—"
    return (f"{row.label} keeps {kept} of the best {utility} ({utility} "
            f"{value:.2f} vs {top:.2f}) with {top_loss - loss:.2g} nats per token less leak")


def _indicative(rows: Sequence[FrontierRow], keep: float, utility: str | None) -> str:
    """What the rule would pick on too few questions to resolve it, said as indicative
    only: the setting it picks where that leaks less than the best-utility one, else the
    closest (:func:`closest`); empty where neither is."""
    best = _best(rows)
    if best is None or utility is None or _figures(best)[1] <= 0:
        return ""
    pick = recommend(rows, keep)
    near = pick if pick is not None and pick is not best else closest(rows)
    return (f" Indicative only, on these questions: {_kept_text(near, best, utility)}."
            if near else "")


#: What a claim under each relation covers, and what it does not, in a few words.
CLAIM_SCOPE = {
    "document": "per document: adding or removing any one document; a person whose data "
                "sits in k documents is covered at k times ε",
    "shard": "shard-level over the dealt list: adding or removing one document shifts "
             "every later document's shard, so a document-level ε does not follow",
    "context": "for the whole retrieved context replaced by any other",
    "none": "no guarantee: the measured leak is all that is known",
}


def claim_sentence(row: FrontierRow) -> str:
    """What the recommended row claims and what the claim covers, with the ε an attack
    demonstrated beside it where one was given; empty for a row of a run from before claims
    were recorded."""
    claim = row.guarantee
    if claim.relation is None:
        return ""
    if claim.relation == "none" or claim.eps is None:
        text = f" Its claim: {CLAIM_SCOPE['none']}."
    else:
        delta = f", δ = {claim.delta:.2g}" if claim.delta else ""
        text = (f" Its claim: ε = {claim.eps:.3g}{delta} per response, "
                f"{CLAIM_SCOPE.get(claim.relation, claim.relation)}.")
    if row.eps_lower is not None:
        text += f" A canary attack demonstrated ε ≥ {row.eps_lower:.3g} (95 %)."
    return text


__all__ = ["ABOVE_CONTROL", "CLAIM_SCOPE", "COLUMNS", "KEEP", "MIN_QUESTIONS",
           "NOTHING", "PER_TOKEN", "UTILITIES", "FrontierRow", "SettingSummary", "baseline_key",
           "claim_sentence", "closest", "context_part", "fact_note", "fact_views", "frontier",
           "frontier_of",
           "pareto_flags", "recommend", "recommendation", "setting_labels", "skipped",
           "utility_columns"]
