"""The audit Method (paper 001 §5, App. C): one record per synthetic sequence of each calibrated
(δ, target ε) setting; summarised as the rows of Tables 4-6 (ε_empirical against the target)."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import Any

from ctxleak.errors import ConfigError
from ctxleak.run.method import Method
from ctxleak.run.options import RunOptions


def _positive(param: str, value: float) -> None:
    """``value`` in the dp accounting's meaningful range (:data:`ctxleak.dp.PARAM_RANGE`)."""
    from ctxleak.dp import PARAM_RANGE

    low, high = PARAM_RANGE
    if not low <= value <= high:
        raise ConfigError(f"{param} must be a number from {low:g} to {high:g}, got {value:g}",
                          param=param)


def audit_config(*, target_eps: Any = "1,10,100", delta: Any = "1e-5", subset_size: int = 8,
                 clip: float = 10.0, temperature: float = 2.0, n_gen: int = 4,
                 max_tokens: int = 24, min_tokens: int = 0, search: str = "temperature",
                 orders: Any = "2-99", label: str = "Sports", template: str | None = None) -> Any:
    """Check the audit's parameters into an :class:`AuditConfig` (errors name the parameter)."""
    from ctxleak.dp import check_targets, parse_orders, positive_floats, search_name
    from ctxleak.methods.audit import TEMPLATE, AuditConfig, check_template

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
    if subset_size < 2:
        raise ConfigError(f"subset_size must be at least 2 (the leave-one-out neighbours need "
                          f"s - 1 >= 1 prompts), got {subset_size}", param="subset_size")
    for name, value in (("n_gen", n_gen), ("max_tokens", max_tokens)):
        if value < 1:
            raise ConfigError(f"{name} must be >= 1, got {value}", param=name)
    if not 0 <= min_tokens <= max_tokens:
        raise ConfigError(f"min_tokens must be between 0 and max_tokens ({max_tokens}), "
                          f"got {min_tokens}", param="min_tokens")
    if not label.strip():
        raise ConfigError("label is empty: name a label (e.g. Sports) or 'all'", param="label")
    return AuditConfig(target_eps=tuple(targets), deltas=tuple(deltas), subset_size=subset_size,
                       clip=clip, temperature=temperature, n_gen=n_gen, max_tokens=max_tokens,
                       min_tokens=min_tokens, search=search_name(search),
                       orders=tuple(parse_orders(orders)), label=label.strip(),
                       template=check_template(template) if template else TEMPLATE)


def plan(config: Any, n_examples: int) -> list[Any]:
    """Algorithm 3 for every (δ, target), with the data-size checks, as ConfigErrors."""
    from ctxleak.methods.audit.pipeline import check_data_size, check_subset_sizes, plan_audit

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


class AuditMethod(Method):
    """Audit DP synthetic-text generation (``ctxleak audit``). Keywords are the CLI's flags:
    ``text_field``, ``label_field``, ``label``, ``template``, ``subset_size``, ``clip``,
    ``temperature``, ``search``, ``target_eps``, ``delta``, ``n_gen``, ``max_tokens``,
    ``min_tokens``, ``orders``. ``limit`` keeps the first N sequences of each target."""

    name = "audit"
    desc = "audit"
    private = True

    def __init__(self, common: RunOptions | None = None, *, text_field: str = "text",
                 label_field: str = "label", **params: Any) -> None:
        from ctxleak.results import AuditResult

        super().__init__(common)
        self.result_class = AuditResult  # type: ignore[misc]  # set here to dodge an import loop
        self.audit = audit_config(**params)
        self.text_field, self.label_field = text_field, label_field
        self.t0 = time.time()

    def items(self, data: Any) -> list[Any]:
        from ctxleak.methods.audit import audit_jobs, load_private_data

        self.data = data
        self.examples = load_private_data(data, text_field=self.text_field,
                                          label_field=self.label_field, label=self.audit.label)
        self.settings = plan(self.audit, len(self.examples))
        return audit_jobs(self.settings, self.audit.n_gen, self.common.limit)

    def config(self) -> dict[str, Any]:
        from ctxleak.run.inputs import describe

        return {"data": describe(self.data), "text_field": self.text_field,
                "label_field": self.label_field, **self.audit.as_dict()}

    def inputs(self) -> dict[str, Any]:
        from ctxleak.methods.audit.data import data_path

        return {"data": data_path(self.data)}

    def setup(self, lm: Any, run: Any) -> None:
        from ctxleak.run.runner import say

        config, settings = self.audit, self.settings
        per = config.n_gen if self.common.limit is None else min(config.n_gen, self.common.limit)
        say(f"{len(self.examples)} private examples; {len(settings)} setting(s) x {per} "
            f"sequence(s) of up to {config.max_tokens} tokens, each from "
            f"{settings[0].subset_size} one-shot prompts" if config.search != "subset_size" else
            f"{len(self.examples)} private examples; {len(settings)} setting(s) x {per} "
            "sequence(s)")

    def batch_cost(self, item: Any) -> int | None:
        """The sequence's s streams, each a one-shot prompt (about 160 tokens) plus its new
        tokens, in flight in the generation's KV cache."""
        return item.setting.subset_size * (160 + self.audit.max_tokens)

    def measure(self, lm: Any, items: Sequence[Any]) -> list[dict[str, Any]]:
        """Synthetic sequences generated together (all their streams in one KV cache), each
        from its own subset and seed."""
        from ctxleak.methods.audit.pipeline import audit_sequences

        return audit_sequences(lm, self.examples, list(items), self.audit, self.common.seed,
                               batch_invariant=self.common.batch_invariant)

    def summarize(self, records: Sequence[dict[str, Any]]) -> dict[str, Any]:
        from ctxleak.methods.audit.pipeline import setting_rows

        rows = setting_rows(self.settings, records, self.audit)
        return {"rows": rows, "search": self.audit.search,
                "complete": all(r["complete"] for r in rows)}

    def provenance_extra(self, lm: Any) -> dict[str, Any]:
        return {"prompt_template": self.audit.template}

    def artifacts(self, result: Any, lm: Any = None) -> dict[str, bytes | str]:
        from ctxleak.report.audit import figure6, token_rdp_plot

        keys = ("delta", "target_eps", "temperature", "clip", "subset_size", "sequence", "text")
        synthetic = "".join(json.dumps({k: r[k] for k in keys}, ensure_ascii=False) + "\n"
                            for r in result.records)
        rows = result.summary["rows"]
        return {"synthetic.jsonl": synthetic, "fig6_epsilon.png": figure6(rows),
                "token_rdp.png": token_rdp_plot(result.records, rows)}

    def report(self, result: Any, lm: Any = None) -> Any:
        from ctxleak.report.audit import audit_report

        self.seconds = time.time() - self.t0
        return audit_report(result.summary["rows"], result.records, self.audit, result.images,
                            model=lm.info.name if lm else result.config.get("model"),
                            data=result.config.get("data"), seconds=self.seconds)
