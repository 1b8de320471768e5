"""The audit Method (Evaluating Privacy Leakage From In-Context Learning §5, App. C): one record per
synthetic sequence of each calibrated (δ, target ε) setting; summarised as the rows of Tables 4-6
(ε_empirical against the target)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any

from ctxleak.domains import real, whole
from ctxleak.engine.batching import BatchPolicy
from ctxleak.engine.lm import LanguageModel
from ctxleak.errors import ConfigError
from ctxleak.methods.audit import TEMPLATE, AuditConfig, audit_jobs, check_template, load_private_data
from ctxleak.methods.audit.data import data_path
from ctxleak.methods.audit.pipeline import (
    audit_sequences,
    check_data_size,
    check_subset_sizes,
    plan_audit,
    setting_rows,
)
from ctxleak.methods.audit.verdict import UNITS as VERDICT_UNITS
from ctxleak.methods.audit.verdict import audit_verdict
from ctxleak.methods.needs import audit as audit_needs
from ctxleak.mitigations.accounting_params import (
    PARAM_RANGE,
    check_targets,
    parse_orders,
    positive_floats,
    search_name,
)
from ctxleak.run.inputs import describe
from ctxleak.run.method import ParamsMethod, Plan, batches_by_cost
from ctxleak.run.params import option
from ctxleak.run.rundir import RunDir
from ctxleak.run.runner import say


def _positive(param: str, value: float) -> None:
    """``value`` in the dp accounting's meaningful range
    (:data:`~ctxleak.mitigations.accounting_params.PARAM_RANGE`)."""
    low, high = PARAM_RANGE
    real(value, param, minimum=low, maximum=high)


def audit_config(*, target_eps: Any = "1,10,100", delta: Any = "1e-5", subset_size: int = 8,
                 clip: float = 10.0, temperature: float = 2.0, n_gen: int = 4,
                 max_tokens: int = 24, min_tokens: int = 0, search: str = "temperature",
                 orders: Any = "2-99", label: str = "Sports", template: str | None = None) -> Any:
    """Check the audit's parameters into an :class:`AuditConfig` (errors name the parameter)."""
    targets = positive_floats(target_eps, "target_eps")
    check_targets(targets)
    deltas = positive_floats(delta, "delta")
    for d in deltas:
        if not d < 1:
            raise ConfigError(f"delta must be in (0, 1), got {d:g}", param="delta")
    for param, values in (("target_eps", targets), ("delta", deltas)):
        if len(set(values)) != len(values):
            raise ConfigError(f"{param} lists a value twice: "
                              f"{', '.join(f'{v:g}' for v in values)}", param=param)
    _positive("clip", clip)
    _positive("temperature", temperature)
    if whole(subset_size, "subset_size") < 2:
        raise ConfigError(f"subset_size must be at least 2 (the leave-one-out neighbours need "
                          f"s - 1 >= 1 prompts), got {subset_size}", param="subset_size")
    for name, value in (("n_gen", n_gen), ("max_tokens", max_tokens)):
        if whole(value, name) < 1:
            raise ConfigError(f"{name} must be >= 1, got {value}", param=name)
    if not 0 <= whole(min_tokens, "min_tokens") <= max_tokens:
        raise ConfigError(f"min_tokens must be between 0 and max_tokens ({max_tokens}), "
                          f"got {min_tokens}", param="min_tokens")
    if not label.strip():
        raise ConfigError("label is empty: name a label (e.g. Sports) or 'all'", param="label")
    return AuditConfig(target_eps=tuple(targets), deltas=tuple(deltas), subset_size=subset_size,
                       clip=clip, temperature=temperature, n_gen=n_gen, max_tokens=max_tokens,
                       min_tokens=min_tokens, search=search_name(search),
                       orders=tuple(parse_orders(orders)), label=label.strip(),
                       template=check_template(template) if template else TEMPLATE)


def audit_settings(config: Any, n_examples: int) -> list[Any]:
    """Algorithm 3 for every (δ, target), with the data-size checks, as ConfigErrors."""
    try:
        check_data_size(config, n_examples)
        settings = plan_audit(config)
        check_subset_sizes(settings, n_examples)
    except ValueError as exc:
        if "subset size" in str(exc):
            raise ConfigError(f"{exc} (set subset_size=..., or more examples with label=... "
                              "or data=...)", param="subset_size",
                              also=("label", "data")) from None
        raise ConfigError(str(exc)) from None
    return settings


#: AuditParams' keywords -> audit_config's (the paper's N_gen, T_max).
_CONFIG_NAMES = {"sequences": "n_gen", "max_new_tokens": "max_tokens",
                 "min_new_tokens": "min_tokens"}


@dataclass(frozen=True)
class AuditParams:
    """The parameters of ``ctxleak audit`` ("Evaluating Privacy Leakage From In-Context Learning"
    §5, App. C), checked on construction by :func:`audit_config`."""

    text_field: str = option("text", "Field holding each private example's text.")
    label_field: str = option("label", "Field holding each private example's label.")
    target_eps: Any = option("1,10,100", "Target ε of the DP generation; a list audits each.")
    delta: Any = option("1e-5", "δ of the (ε, δ) guarantee; a list audits each.")
    subset_size: int = option(8, "Private examples per sequence (s one-shot prompts).")
    clip: float = option(10.0, "Logit clipping bound c.")
    temperature: float = option(2.0, "Sampling temperature T.")
    sequences: int = option(4, "Synthetic sequences per setting (the paper's N_gen).")
    max_new_tokens: int = option(24, "Most new tokens per synthetic sequence (T_max).")
    min_new_tokens: int = option(0, "EOS is masked before this many tokens.")
    search: str = option("temperature", "What the calibration searches to meet the target "
                         "ε: temperature, clip or subset_size.")
    orders: Any = option("2-99", "Rényi orders of the accounting, e.g. 2-99 or 2,4,8.")
    label: str = option("Sports", "The label whose examples are private, or 'all'.")
    template: str | None = option(None, "One-shot prompt template (default: the paper's).")

    def __post_init__(self) -> None:
        self.audit()

    def audit(self) -> Any:
        """The checked :class:`ctxleak.methods.audit.AuditConfig`."""
        own = {_CONFIG_NAMES.get(f.name, f.name): getattr(self, f.name) for f in fields(self)
               if f.name not in ("text_field", "label_field")}
        try:
            return audit_config(**own)
        except ConfigError as exc:  # named as this face's keywords
            back = {v: k for k, v in _CONFIG_NAMES.items()}
            if exc.param not in back:
                raise
            message = str(exc)
            for old, new in back.items():
                message = re.sub(rf"(?<![\w-]){old}(?![\w-])", new, message)
            raise ConfigError(message, param=back[exc.param]) from None


@dataclass(frozen=True)
class Private:
    """What reading the data prepared: the private examples and the audit's settings."""

    examples: list[Any]
    settings: list[Any]


class AuditMethod(ParamsMethod[Any, Private, Private, AuditParams]):
    """Audit DP synthetic-text generation (``ctxleak audit``). ``common``: the run options
    (``limit`` keeps the first N sequences of each target); ``params``: the method's own
    (:class:`AuditParams`)."""

    name = "audit"
    desc = "audit"
    params_type = AuditParams

    def derive(self) -> None:
        self.audit = self.params.audit()

    def plan(self, data: Any) -> Plan[Any, Private]:
        examples = load_private_data(data, text_field=self.params.text_field,
                                     label_field=self.params.label_field,
                                     label=self.audit.label)
        settings = audit_settings(self.audit, len(examples))
        return Plan(items=audit_jobs(settings, self.audit.n_gen, self.common.limit),
                    config={"data": describe(data), "text_field": self.params.text_field,
                            "label_field": self.params.label_field, **self.audit.as_dict()},
                    state=Private(examples, settings), inputs={"data": data_path(data)})

    def prepare(self, lm: LanguageModel, plan: Plan[Any, Private], run: RunDir) -> Private:
        config, settings, n = self.audit, plan.state.settings, len(plan.state.examples)
        per = config.n_gen if self.common.limit is None else min(config.n_gen, self.common.limit)
        each = "" if config.search == "subset_size" else (  # s differs by setting there
            f" of up to {config.max_tokens} tokens, each from {settings[0].subset_size} "
            "one-shot prompts")
        say(f"{n} private examples; {len(settings)} setting(s) x {per} sequence(s){each}")
        return plan.state

    def batches(self, ready: Private, items: Sequence[Any],
                policy: BatchPolicy) -> list[list[Any]]:
        """The sequence's s streams, each a one-shot prompt (about 160 tokens) plus its new
        tokens, in flight in the generation's KV cache."""
        costs: list[int | None] = [item.setting.subset_size * (160 + self.audit.max_tokens)
                                   for item in items]
        return list(batches_by_cost(items, costs, policy))

    def measure(self, lm: LanguageModel, ready: Private,
                items: Sequence[Any]) -> list[dict[str, Any]]:
        """Synthetic sequences generated together (all their streams in one KV cache), each
        from its own subset and seed."""
        return audit_sequences(lm, ready.examples, list(items), self.audit, self.common.seed)

    def requires(self) -> dict[str, str]:
        return audit_needs()

    def summarize(self, ready: Private, records: Sequence[dict[str, Any]]) -> dict[str, Any]:
        rows = setting_rows(ready.settings, records, self.audit)
        return {"rows": rows, "search": self.audit.search,
                "complete": all(r["complete"] for r in rows),
                "units": dict(VERDICT_UNITS), "verdict": audit_verdict(rows)}

    def provenance(self, lm: LanguageModel, ready: Private) -> dict[str, Any]:
        return {"prompt_template": self.audit.template}
