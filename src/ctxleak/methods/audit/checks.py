"""What an audit record of ``samples.jsonl`` must satisfy (Evaluating Privacy Leakage From
In-Context Learning §5, App. C): the (ε, δ)-DP setting in range (δ in (0, 1), ε, τ, c > 0,
s ≥ 1, α* > 1), every released token's data-dependent RDP ≥ 0 and ``rdp_sum`` their sum; and
the same ranges for the summary's rows."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ctxleak.methods.checks import Bound, RecordChecks, close, count, is_number, nonnegative
from ctxleak.run.samples import RowProblem

RDP = "a Rényi DP loss, nats"


def _setting(prefix: str = "") -> tuple[Bound, ...]:
    """The ranges of the mechanism's setting, at ``prefix`` (``rows.*.`` in the summary)."""
    return (Bound(f"{prefix}delta", 0, 1, "δ of (ε, δ)-DP", open_low=True, open_high=True),
            Bound(f"{prefix}target_eps", 0, None, "a target ε", open_low=True),
            Bound(f"{prefix}temperature", 0, None, "a temperature τ", open_low=True),
            Bound(f"{prefix}clip", 0, None, "a logit clip c", open_low=True),
            count(f"{prefix}subset_size", 1),
            Bound(f"{prefix}alpha", 1, None, "a Rényi order α*", open_low=True))


def rdp_sum(row: Mapping[str, Any]) -> RowProblem | None:
    """``rdp_sum`` is the sum of ``token_rdp``, one per released token."""
    tokens, total, released = row.get("token_rdp"), row.get("rdp_sum"), row.get("n_released")
    if not isinstance(tokens, list) or not all(map(is_number, tokens)):
        return None
    if is_number(released) and released != len(tokens):
        return "token_rdp", f"holds {len(tokens)} values for {released!r} released tokens"
    stored = float(sum(tokens))
    if is_number(total) and not close(float(total), stored, 1e-9 * (1 + abs(stored))):
        return "rdp_sum", f"{total!r} is not the sum of token_rdp ({stored!r})"
    return None


#: The checks of an audit record and of its summary's numbers that have a range.
CHECKS = RecordChecks(
    bounds=(*_setting(), count("sequence"), count("token_ids.*"), count("n_released"),
            count("token_argmax_prompt.*"), count("subset_lines.*"), count("text_tokens_cut"),
            nonnegative("token_rdp.*", RDP), nonnegative("prompt_rdp.*", RDP),
            nonnegative("rdp_sum", RDP)),
    cross=(rdp_sum,),
    summary=(*_setting("rows.*."), count("rows.*.sequences"), count("rows.*.n_gen", 1),
             count("rows.*.tokens"), count("rows.*.tokens_over_paper_bound"),
             Bound("rows.*.eps_theoretical", 0, None, "ε"),
             Bound("rows.*.rdp_total", 0, None, RDP)),
)
