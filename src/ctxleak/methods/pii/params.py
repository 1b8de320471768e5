"""The probe method's options (ProPILE, "ProPILE: Probing Privacy Leakage in Large Language
Models", App. A.3, A.4, B.1): one frozen dataclass that checks itself, one small check per
concern."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any

from ctxleak.errors import ConfigError
from ctxleak.methods.pii.canary import FinetuneConfig
from ctxleak.methods.pii.items import MODES, parse_pii_types
from ctxleak.methods.pii.plan import CANARY_DEFAULT_PII, DEFAULT_PII
from ctxleak.methods.pii.templates import STRUCTURES
from ctxleak.run.options import int_list
from ctxleak.run.params import option
from ctxleak.run.validate import check_template

#: The largest k of a k-shot probe: ProPILE's k-shot prompts add one template at a time, up to
#: five (the help of ``--shots`` says 1..5).
MAX_SHOTS = 5


def _check_numbers(checks: dict[str, tuple[Any, str, bool]]) -> None:
    """``{keyword: (value, rule, ok)}``: a ConfigError naming the first keyword not ok."""
    for name, (value, rule, ok) in checks.items():
        if not ok:
            raise ConfigError(f"{name} must be {rule}, got {value}", param=name)


def _positive(value: float) -> bool:
    """A finite number > 0 (a learning rate: inf and NaN are refused)."""
    return math.isfinite(value) and value > 0


def parse_modes(mode: str | Sequence[str] | None, canary: int | None) -> tuple[str, ...]:
    """The probing modes (default: black-box, or none besides the canary check)."""
    if mode is None:
        mode = "" if canary is not None else "black-box"
    if not isinstance(mode, str):
        mode = ",".join(mode)
    modes = tuple(m.strip() for m in mode.split(",") if m.strip())
    for m in modes:
        if m not in MODES:
            raise ConfigError(f"mode: unknown mode '{m}'; choose from {', '.join(MODES)}",
                              param="mode")
    if not modes and canary is None:
        raise ConfigError("mode: give at least one mode", param="mode")
    return modes


def parse_pii(pii: str | Sequence[str] | None, canary: int | None) -> tuple[str, ...]:
    """The PII types probed (default: the paper's, or the canary check's)."""
    if pii is None:
        pii = DEFAULT_PII if canary is None else CANARY_DEFAULT_PII
    try:
        return tuple(parse_pii_types(pii))
    except ValueError as exc:
        raise ConfigError(f"pii: {exc}", param="pii") from None


def parse_probe_shots(shots: Any) -> tuple[int, ...]:
    """k of the k-shot probes, each from 1 to :data:`MAX_SHOTS`."""
    ks = int_list(shots, "shots")
    if not ks or any(not 1 <= k <= MAX_SHOTS for k in ks):
        raise ConfigError(f"shots must be integers from 1 to {MAX_SHOTS} (k templates per "
                          f"prompt, as in ProPILE's k-shot probing), got '{shots}'",
                          param="shots")
    return tuple(ks)


def parse_max_new_tokens(value: Any) -> str:
    """``paper``, ``auto`` or a positive integer, as text."""
    text = str(value)
    if text not in ("paper", "auto"):
        try:
            if int(text) < 1:
                raise ValueError
        except ValueError:
            raise ConfigError(f"max_new_tokens must be paper, auto or a positive integer, "
                              f"not '{text}'", param="max_new_tokens") from None
    return text


@dataclass(frozen=True)
class ProbeParams:
    """The parameters of ``ctxleak probe``, checked and normalised on construction: ``mode``,
    ``pii`` and ``shots`` become tuples (a list or a comma list are accepted),
    ``max_new_tokens`` text, a typed ``\\n`` in ``context_template`` a newline."""

    mode: str | Sequence[str] | None = option(
        None, "black-box, white-box, in-context (a list runs each; default black-box, none "
        "with ``canary``).")
    pii: str | Sequence[str] | None = option(None, "PII types probed, e.g. email,phone "
                                             "(default: the paper's set).")
    shots: int | Sequence[int] | str = option("1", f"k of the k-shot probes, 1..{MAX_SHOTS}; a "
                                              "list runs each.")
    structure: str = option("twins", "Prompt structure: one of the templates' structures or "
                            "all.")
    beam: int = option(2, "Beam width of the generated answers.")
    max_new_tokens: int | str = option("paper", "paper, auto or a number of new tokens.")
    generate: bool = option(True, "Also generate answers (off: likelihoods only).")
    subjects: int = option(20, "Synthetic subjects of the demo data.")
    soft_tokens: int = option(20, "Soft prompt length (white-box).")
    train_fraction: float = option(0.5, "Share of the subjects the soft prompt is trained on, "
                                   "in (0, 1).")
    epochs: int = option(30, "Soft prompt training epochs.")
    soft_lr: float = option(0.005, "Soft prompt learning rate.")
    context_template: str = option("{document}\n{prompt}", "In-context prompt template with "
                                   "{document} and {prompt}.")
    canary: int | None = option(None, "Canary check: subjects per group (at least 2; none: "
                                "off).")
    canary_epochs: int = option(4, "Fine-tuning epochs of the canary check.")
    canary_lr: float = option(2e-3, "Fine-tuning learning rate of the canary check.")
    canary_layers: int = option(8, "Layers fine-tuned by the canary check (0 = all).")
    canary_baseline: bool = option(False, "Also probe the base model in the canary check.")
    alpha: float = option(0.05, "Significance level of the Wilcoxon test, in (0, 1).")
    redact: bool = option(False, "Mask the PII values in the report and console.")
    leak_maps: bool = option(True, "Store where the documents leaked into each in-context "
                             "answer.")

    def __post_init__(self) -> None:
        def put(name: str, value: Any) -> None:
            object.__setattr__(self, name, value)

        put("mode", parse_modes(self.mode, self.canary))
        put("pii", parse_pii(self.pii, self.canary))
        put("shots", parse_probe_shots(self.shots))
        self._check_generation()
        self._check_soft_prompt()
        put("context_template", self.context_template.replace("\\n", "\n"))  # typed in a shell
        if "in-context" in self.mode:  # type: ignore[operator]
            check_template(self.context_template, "context_template", ("document", "prompt"),
                           required=("document", "prompt"))
        self._check_canary()
        put("leak_maps", bool(self.leak_maps))

    def _check_generation(self) -> None:
        if self.structure != "all" and self.structure not in STRUCTURES:
            raise ConfigError(f"structure must be one of {', '.join(STRUCTURES)} or all, not "
                              f"'{self.structure}'", param="structure")
        if self.beam < 1:
            raise ConfigError(f"beam must be >= 1, got {self.beam}", param="beam")
        object.__setattr__(self, "max_new_tokens", parse_max_new_tokens(self.max_new_tokens))

    def _check_soft_prompt(self) -> None:
        if not 0 < self.train_fraction < 1:
            raise ConfigError(f"train_fraction must be between 0 and 1, got "
                              f"{self.train_fraction}", param="train_fraction")
        _check_numbers({"soft_tokens": (self.soft_tokens, ">= 1", self.soft_tokens >= 1),
                        "epochs": (self.epochs, ">= 1", self.epochs >= 1),
                        "soft_lr": (self.soft_lr, "a finite number > 0",
                                    _positive(self.soft_lr))})

    def _check_canary(self) -> None:
        if self.canary is not None and self.canary < 2:
            raise ConfigError(f"canary needs at least 2 subjects per group, got {self.canary}",
                              param="canary")
        if not 0 < self.alpha < 1:
            raise ConfigError(f"alpha must be between 0 and 1, got {self.alpha}",
                              param="alpha")
        if self.canary is None:
            return
        _check_numbers({"canary_epochs": (self.canary_epochs, ">= 1", self.canary_epochs >= 1),
                        "canary_lr": (self.canary_lr, "a finite number > 0",
                                      _positive(self.canary_lr)),
                        "canary_layers": (self.canary_layers, ">= 0 (0 = all layers)",
                                          self.canary_layers >= 0)})
        FinetuneConfig(epochs=self.canary_epochs, lr=self.canary_lr,
                       train_layers=self.canary_layers).validate()

    def settings(self) -> dict[str, Any]:
        """The parameters as the probe's pipeline and ``config.json`` hold them (lists), in
        their order."""
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out.update(mode=list(self.mode or ()), pii=list(self.pii or ()),
                   shots=list(self.shots))  # type: ignore[arg-type]
        return out
