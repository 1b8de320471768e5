"""A control for context influence: how much *any* context moves the model on this query.

Context influence ("Estimating Privacy Leakage of Augmented Contextual Knowledge in Language
Models", Def. 3.1-3.2) compares the response's log-probabilities with the context D and without
it. Part of that is what any document in the prompt does (format, length, topic). The control
scores the same response, with the same query and template, under another example's context C,
which cannot hold this example's private facts: ``control influence = Σ_t |log p̄_λ(y_t | C, x,
y<t) − log p(y_t | x, y<t)|`` (nats, the same definition and λ, T as the example's own). The
example's influence above it is what its own context added.

The control context is the nearest earlier example's context that differs from the example's own
(then the nearest later one: the first example gets the second's), so it is the same whatever
the batch size and however many examples a resumed run asks for. With few examples each one gets
several controls (:func:`control_sets`, :func:`default_controls`: the nearest other documents,
enough for 20 control influences in all), so that the flag rule can use a percentile of the
pooled control influences and state a false-flag rate; the first is always the nearest one.
"Differs" is judged after :func:`context_key`'s normalisation (Unicode NFC, whitespace runs as
one space, case folded), and neither context may contain the other: data in the SQuAD style,
with several questions on one document, or a retriever that returns a superset of another
query's passages, would otherwise give an example its own private facts as control and hide its
leak. An example with no such context has none, and its summary says so. Across a setting, a
one-sided Wilcoxon signed-rank test asks whether the examples' influence exceeds their controls'
(:func:`paired_test`), and an example is flagged when its influence exceeds the control
distribution (:func:`flag_rule`).

Per response token, the paper's point against Repeat/Rouge Prompts: a token that appears in the
context may carry little influence (the model already knew it, :data:`KNOWN_BELOW`) or much
(copied from the context, :data:`COPIED_ABOVE`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import stats

from ctxleak.methods.ids import user_id
from ctxleak.methods.influence.metrics import mean_with_ci
from ctxleak.mitigations.influence import response_influence, token_influence
from ctxleak.normal_text import normal_text

#: A response token found in the context with influence below this (nats; likelihood ratio
#: below e^0.1 ≈ 1.105) is one the model already knew.
KNOWN_BELOW = 0.1
#: A response token found in the context with influence at or above this (nats; likelihood
#: ratio at least e ≈ 2.72) was copied from it.
COPIED_ABOVE = 1.0
#: The test's level, and the fewest examples for which a percentile of the controls is used.
ALPHA = 0.05
PERCENTILE = 95.0
MIN_FOR_PERCENTILE = 20

TOKEN_RULE = (f"a response token that also appears in the context (same token id) is 'known' "
              f"when its influence is below {KNOWN_BELOW:g} nats (likelihood ratio < "
              f"{math.exp(KNOWN_BELOW):.3g}: the model predicted it as well without the "
              f"context) and 'copied' when it is at least {COPIED_ABOVE:g} nat (ratio ≥ "
              f"{math.exp(COPIED_ABOVE):.3g})")


#: Why an example among others has no control (it is not flagged, and not in the paired test).
NO_CONTROL = ("no other example's context is another document (each is equal to its own, or one "
              "contains the other, after normalising case and whitespace), so these examples "
              "have no control: they are not flagged and not in the paired test")
#: How far :func:`control_indices` looks for a differing context before it gives up on one
#: example (candidates checked); only data where thousands of examples share one context or
#: contain each other's get near it.
CONTROL_SEARCH_LIMIT = 10_000

_SPACES = re.compile(r"\s+")


def context_key(context: str) -> str:
    """A context as compared for the control: :func:`ctxleak.normal_text.normal_text` (NFKC,
    invisible characters removed), every whitespace run as one space,
    no leading or trailing whitespace, case folded. Two contexts with the same key are one
    document; a passage split or a re-wrapped line does not make a context "another" one."""
    return _SPACES.sub(" ", normal_text(context)).strip().casefold()


def control_indices(contexts: Sequence[str]) -> list[int | None]:
    """The control of each example, by index, given the examples' contexts in the run's order:
    the nearest earlier example whose context is another document (:func:`context_key` differs
    and neither key contains the other), else the nearest later one; None when no example's
    context qualifies (one example, or all share one document).

    Earlier examples are preferred so that an example's control does not change when a resumed
    run asks for more of them (``--limit``); with distinct contexts this is example k-1 for
    k ≥ 1 and example 1 for example 0."""
    keys = [context_key(c) for c in contexts]
    # the most recent index of each distinct key so far, the most recent last (dict order)
    last_seen: dict[str, int] = {}
    # the later control last found for a key: still the nearest for a later example of that key
    # while it lies ahead (or when there was none), so a run of one document is searched once
    ahead: dict[str, int | None] = {}
    out: list[int | None] = []
    for k, key in enumerate(keys):
        found = None
        for checked, other in enumerate(reversed(last_seen)):
            if checked >= CONTROL_SEARCH_LIMIT:
                break
            if _another_document(key, other):
                found = last_seen[other]
                break
        if found is None:
            known = ahead.get(key, -1)  # -1: not searched yet
            if known is not None and known <= k:
                known = ahead[key] = _later_control(keys, k)
            found = known
        out.append(found)
        last_seen.pop(key, None)
        last_seen[key] = k
    return out


def default_controls(n_examples: int) -> int:
    """How many control contexts each example gets when the user did not say: one with
    :data:`MIN_FOR_PERCENTILE` examples or more; with fewer, enough for that many control
    influences in all (so the flag rule can use a percentile, a stated false-flag rate of
    about 5 %), at most one per other example."""
    if n_examples < 2:
        return 1
    return max(1, min(n_examples - 1, math.ceil(MIN_FOR_PERCENTILE / n_examples)))


def control_sets(contexts: Sequence[str], per_example: int = 1) -> list[list[int]]:
    """Up to ``per_example`` controls of each example, by index, nearest first: the nearest
    earlier examples whose contexts are other documents than the example's (and than each
    other's: one control per document), then the nearest later ones. The first is always
    :func:`control_indices`'s, so a run with one control per example and one with several
    share it. Empty when no example's context qualifies."""
    if per_example < 1:
        raise ValueError(f"per_example must be at least 1, not {per_example}")
    if per_example == 1:
        return [[] if c is None else [c] for c in control_indices(contexts)]
    keys = [context_key(c) for c in contexts]
    first = control_indices(contexts)
    last_seen: dict[str, int] = {}  # each distinct key's most recent index, most recent last
    out: list[list[int]] = []
    for k, key in enumerate(keys):
        chosen: list[int] = []
        taken: set[str] = set()
        for checked, other in enumerate(reversed(last_seen)):  # keys here are distinct
            if checked >= CONTROL_SEARCH_LIMIT or len(chosen) == per_example:
                break
            if _another_document(key, other):
                chosen.append(last_seen[other])
                taken.add(other)
        start, nearest = k + 1, first[k]
        if not chosen and nearest is not None:  # the nearest later one, found as
            # control_indices finds it (past a run of this document longer than the limit)
            chosen.append(nearest)
            taken.add(keys[nearest])
            start = nearest + 1
        for j in range(start, min(len(keys), k + 1 + CONTROL_SEARCH_LIMIT)):
            if len(chosen) == per_example:
                break
            if keys[j] not in taken and _another_document(key, keys[j]):
                chosen.append(j)
                taken.add(keys[j])
        out.append(chosen)
        last_seen.pop(key, None)
        last_seen[key] = k
    return out


def _another_document(key: str, other: str) -> bool:
    """Whether two normalised contexts are different documents: unequal, neither inside the
    other."""
    return key != other and key not in other and other not in key


def _later_control(keys: Sequence[str], k: int) -> int | None:
    """The nearest later example whose context is another document than example k's."""
    seen: set[str] = set()
    for j in range(k + 1, len(keys)):
        if keys[j] in seen:
            continue
        if len(seen) >= CONTROL_SEARCH_LIMIT:
            return None
        if _another_document(keys[k], keys[j]):
            return j
        seen.add(keys[j])
    return None


def per_token_fields(influence: float, tokens: int) -> dict[str, Any]:
    """The response's length and its influence per token (nats/token; None when empty)."""
    return {"response_tokens": tokens,
            "influence_per_token": influence / tokens if tokens else None}


def context_token_kinds(response_ids: Sequence[int], context_ids: Sequence[int],
                        token_influence_: Sequence[float]) -> dict[str, list[int]]:
    """Positions of the response tokens found in the context that the model already knew
    (influence < :data:`KNOWN_BELOW`) and those copied (≥ :data:`COPIED_ABOVE`)."""
    ctx = set(context_ids)
    known, copied = [], []
    for t, (token, tau) in enumerate(zip(response_ids, token_influence_)):
        if token in ctx:
            if tau < KNOWN_BELOW:
                known.append(t)
            elif tau >= COPIED_ABOVE:
                copied.append(t)
    return {"known_tokens": known, "copied_tokens": copied}


def control_fields(control_id: str | int | None, logp_control: Any, record: dict[str, Any]
                   ) -> dict[str, Any]:
    """The control fields of a record: the control example's id, the response's token
    influence under the control context (against the record's own no-context log-probs), its
    sum, and the record's influence above it (total and per token). All None without one."""
    if control_id is None:
        return {"control_id": None, "control_token_influence": None, "control_influence": None,
                "influence_above_control": None, "influence_above_control_per_token": None,
                "control_ids": [], "control_influences": None, "control_p": None}
    tau = token_influence(logp_control, record["logp_empty"])
    control = response_influence(tau)
    above = float(record["influence"]) - control
    tokens = len(record["response_ids"])
    return {"control_id": control_id,
            "control_token_influence": [round(float(v), 6) for v in tau],
            "control_influence": control, "influence_above_control": above,
            "influence_above_control_per_token": above / tokens if tokens else None}


def control_set_fields(control_ids: Sequence[str | int], logp_controls: Sequence[Any],
                       record: dict[str, Any]) -> dict[str, Any]:
    """Every control of a record (the first is the one :func:`control_fields` describes): their
    ids, their influences on the response (nats, each as ``control_influence``), and
    ``control_p`` = (1 + #controls at or above the example's influence) / (controls + 1), how
    often an example whose context adds nothing beyond what these contexts do would reach its
    influence (the rank of the example among its own controls, exchangeable under that
    null)."""
    influences = [response_influence(token_influence(logp, record["logp_empty"]))
                  for logp in logp_controls]
    own = float(record["influence"])
    at_or_above = sum(1 for c in influences if c >= own)
    return {"control_ids": list(control_ids), "control_influences": influences,
            "control_p": (1 + at_or_above) / (len(influences) + 1)}


def record_controls(record: dict[str, Any]) -> list[float]:
    """A record's control influences: all of them (``control_influences``), or its one
    ``control_influence`` in a run folder written before several controls per example."""
    many = record.get("control_influences")
    if many:
        return [float(c) for c in many]
    one = record.get("control_influence")
    return [] if one is None else [float(one)]


@dataclass
class ControlCost:
    """What the control cost in this process: forward passes (one per response and control
    context, one more per response for the no-context logits where λ ≠ 1 or CID is bounded) and
    wall-clock seconds, beside the seconds of the whole measurement. ``decoy_forward_passes``:
    those of them that scored an answer with a decoy document in a passage's place (the
    per-document control, :mod:`.decoys`), one per passage."""

    forward_passes: int = 0
    seconds: float = 0.0
    measure_seconds: float = 0.0
    examples: int = 0
    decoy_forward_passes: int = 0

    def add(self, requests: Sequence[Any], seconds: float,
            responses: Sequence[int] | None = None) -> None:
        """Count ``requests`` (one per response and control context): one forward pass each,
        and one no-context pass per response whose CID mixes it in (λ ≠ 1 or bounded), shared
        by its controls. ``responses[i]``: the response request i scores (default: its own)."""
        owner = list(range(len(requests))) if responses is None else list(responses)
        mixed = {o for o, r in zip(owner, requests) if r.bounded_eps is not None or r.lam != 1}
        self.forward_passes += len(requests) + len(mixed)
        self.examples += len(set(owner))
        self.seconds += seconds

    def to_dict(self) -> dict[str, Any]:
        share = self.seconds / self.measure_seconds if self.measure_seconds else None
        return {"forward_passes": self.forward_passes, "examples": self.examples,
                "decoy_forward_passes": self.decoy_forward_passes,
                "seconds": round(self.seconds, 3),
                "measure_seconds": round(self.measure_seconds, 3),
                "share_of_measure_time": round(share, 4) if share is not None else None}


def min_n_for(alpha: float = ALPHA) -> int:
    """The fewest pairs for which an exact one-sided signed-rank test can give p < ``alpha``:
    its smallest p-value is 1/2^n (every difference positive)."""
    return max(1, math.ceil(math.log2(1.0 / alpha) + 1e-12))


def paired_test(differences: Sequence[float], alpha: float = ALPHA) -> dict[str, Any]:
    """One-sided Wilcoxon signed-rank test that the examples' influence exceeds their
    controls' (``scipy.stats.wilcoxon``, alternative 'greater'); p is None with the reason when
    n cannot support it."""
    d = np.asarray([x for x in differences if x is not None], dtype=np.float64)
    out: dict[str, Any] = {"name": "Wilcoxon signed-rank, one-sided (influence > control)",
                           "n": int(d.size), "alpha": alpha, "statistic": None, "pvalue": None,
                           "reason": None}
    need = min_n_for(alpha)
    if d.size < need:
        low = 0.5 ** d.size if d.size else 1.0
        out["reason"] = (f"n = {d.size} pairs: the one-sided signed-rank test cannot go below "
                         f"p = 1/2^{d.size} = {low:.3g}, so it can never reject at α = "
                         f"{alpha:g}; it needs n ≥ {need}")
        return out
    if not np.any(d != 0):
        out["reason"] = "every difference is zero: nothing to test"
        return out
    res = stats.wilcoxon(d, alternative="greater")
    out["statistic"], out["pvalue"] = float(res.statistic), float(res.pvalue)
    return out


def false_flag_rate(n_controls: int) -> float | None:
    """How often the flag rule falls on an example whose context adds nothing beyond what any
    context does, when its influence and the ``n_controls`` control influences are exchangeable:
    above the largest of n controls 1 time in n + 1; above their 95th percentile (n ≥ 20) about
    5 %. None without controls."""
    if n_controls < 1:
        return None
    if n_controls >= MIN_FOR_PERCENTILE:
        return 1.0 - PERCENTILE / 100.0
    return 1.0 / (n_controls + 1)


def flag_rule(controls: Sequence[float]) -> tuple[float | None, str]:
    """The threshold an example's influence must exceed to be flagged, and the rule in words:
    the 95th percentile of the control influences with at least 20 of them, else their
    largest."""
    c = np.asarray([x for x in controls if x is not None], dtype=np.float64)
    if c.size == 0:
        return None, "no control influences: no example is flagged"
    if c.size >= MIN_FOR_PERCENTILE:
        return (float(np.percentile(c, PERCENTILE)),
                f"influence is above the {PERCENTILE:g}th percentile of the {c.size} control "
                f"influences (each response scored with another example's context)")
    return (float(c.max()),
            f"influence is above the largest of the {c.size} control influences (each response "
            f"scored with another example's context; fewer than {MIN_FOR_PERCENTILE} "
            f"examples, too few for a {PERCENTILE:g}th percentile)")


def leak_where(record: dict[str, Any]) -> str | None:
    """Where the example leaked most: ``document hr-7`` where its most influential passage is a
    retrieved document with an id, else ``passage 2`` (numbered from 1), else its n-gram
    window's context tokens ``tokens 32-40``; None without any."""
    if record.get("max_passage") is not None:
        named = record.get("max_passage_id")
        if named is not None and str(named) != str(record["max_passage"]):
            return f"document {named}"
        return f"passage {record['max_passage']}"
    if record.get("max_window") is not None and record.get("windows"):
        a, b = record["windows"][record["max_window"]]
        return f"tokens {a}-{b}"
    return None


def leak_label(record: dict[str, Any]) -> str:
    """``news-04 (passage 2)``: the example and where it leaked most (:func:`leak_where`)."""
    where = leak_where(record)
    return f"{user_id(record)} ({where})" if where else user_id(record)


#: The fields of a record that :func:`control_summary` reads.
_JUDGED = ("id", "setting", "influence", "control_influence", "control_influences",
           "influence_above_control", "influence_above_control_per_token", "control_p",
           "max_passage", "max_passage_id")


def _judged_fields(record: dict[str, Any]) -> dict[str, Any]:
    """The fields of ``record`` the control's summary reads, its most influential n-gram
    window kept as the only one (:func:`leak_where` then reads the same)."""
    out = {k: record[k] for k in _JUDGED if k in record}
    at, spans = record.get("max_window"), record.get("windows")
    if at is not None and spans:
        out["max_window"], out["windows"] = 0, [spans[at]]
    return out


def control_summary(records: Sequence[dict[str, Any]], cost: dict[str, Any] | None = None
                    ) -> dict[str, Any]:
    """A setting's control: whether it ran (and why not), the control influences, the paired
    test, the flag rule and the flagged examples (most influence above the control first), and
    what the control cost."""
    # what the summary reads of each record, not the record: a long run's rows are read on
    # demand and never all in memory (ctxleak.run.samples.StoredRows)
    with_control = [_judged_fields(r) for r in records if r.get("control_influence") is not None]
    ran = any("control_id" in r for r in records)
    without = [user_id(r) for r in records if ran and r.get("control_influence") is None]
    if not with_control:
        if not ran:
            reason = "the control was turned off (control=False, --no-control)"
        elif len(records) == 1:
            reason = "one example: there is no other example's context to use as a control"
        else:
            reason = (f"no example has a control: the {len(records)} examples' contexts are one "
                      f"document (equal, or one inside another, after normalising case and "
                      f"whitespace), and a control must be another document")
        return {"enabled": False, "reason": reason, "without_control": without}
    controls = [c for r in with_control for c in record_controls(r)]  # pooled
    above = [float(r["influence_above_control"]) for r in with_control]
    per_token = [r["influence_above_control_per_token"] for r in with_control
                 if r.get("influence_above_control_per_token") is not None]
    threshold, rule = flag_rule(controls)
    if len(with_control) < min_n_for(ALPHA):  # a flag would mean nothing yet: none is made
        threshold = None
        rule += (f"; with fewer than {min_n_for(ALPHA)} examples with a control no example is "
                 f"flagged (too few to tell)")
    flagged = [r for r in with_control if threshold is not None
               and float(r["influence"]) > threshold]
    flagged.sort(key=lambda r: -float(r["influence_above_control"]))
    top = max(with_control, key=lambda r: float(r["influence_above_control"]))
    per_example = sorted({len(record_controls(r)) for r in with_control})
    return {"enabled": True, "n": len(with_control), "controls": len(controls),
            "controls_per_example": per_example[0] if len(per_example) == 1 else per_example,
            "false_flag_rate": false_flag_rate(len(controls)),
            "largest_above": {"id": user_id(top), "label": leak_label(top),
                              "nats": float(top["influence_above_control"])},
            "influence": mean_with_ci(controls),
            "above_control": mean_with_ci(above),
            "above_control_per_token": mean_with_ci(per_token),
            "test": paired_test(above), "threshold": threshold, "rule": rule,
            "flagged": [user_id(r) for r in flagged],
            "flagged_labels": [leak_label(r) for r in flagged],
            "flagged_where": [leak_where(r) for r in flagged],
            "flagged_above_control": [float(r["influence_above_control"]) for r in flagged],
            "flagged_own_controls": [[sum(1 for c in record_controls(r)
                                          if c < float(r["influence"])),
                                      len(record_controls(r))] for r in flagged],
            "without_control": without, "without_control_reason": NO_CONTROL if without else None,
            "cost": cost}


__all__ = ["ALPHA", "COPIED_ABOVE", "KNOWN_BELOW", "NO_CONTROL", "TOKEN_RULE", "ControlCost",
           "context_key", "context_token_kinds", "control_fields", "control_indices",
           "control_set_fields", "control_sets", "control_summary", "default_controls",
           "record_controls", "false_flag_rate", "flag_rule", "leak_label", "leak_where",
           "min_n_for", "paired_test", "per_token_fields"]
