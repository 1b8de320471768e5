"""The ICLInf method's options ("Evaluating Privacy Leakage From In-Context Learning"
§3-4, App. B, E.1): one frozen dataclass that checks itself."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ctxleak.errors import ConfigError
from ctxleak.methods.icl.calibration import DEFAULT_CALIBRATION_EPS
from ctxleak.methods.icl.pipeline import ICLConfig
from ctxleak.run.options import int_list
from ctxleak.run.params import option


def resolve_calibration(calibrate: bool, calibration: str | None) -> tuple[bool, ...]:
    """``calibrate`` (= on) or ``calibration`` off|on|both -> the settings to report."""
    if calibration is None:
        return (True,) if calibrate else (False,)
    table = {"off": (False,), "on": (True,), "both": (False, True)}
    value = str(calibration).strip().lower()
    if value not in table:
        raise ConfigError(f"calibration must be off, on or both, not '{calibration}'",
                          param="calibration")
    if calibrate and value == "off":
        raise ConfigError("calibrate contradicts calibration off", param="calibrate")
    return table[value]


def resolve_spaces(output_space: str) -> tuple[str, ...]:
    table = {"labels": ("labels",), "vocab": ("vocab",), "both": ("labels", "vocab")}
    value = str(output_space).strip().lower()
    if value not in table:
        raise ConfigError(f"output_space must be labels, vocab or both, not '{output_space}'",
                          param="output_space")
    return table[value]


def parse_shots(shots: Any) -> list[int]:
    values = int_list(shots, "shots")
    if not values:
        raise ConfigError("shots needs at least one number, e.g. 4 or 1,2,4,8", param="shots")
    for n in values:
        if n < 1:
            raise ConfigError(f"shots must be at least 1, got {n}", param="shots")
    return list(dict.fromkeys(values))


@dataclass(frozen=True)
class ICLInfParams:
    """The parameters of ``ctxleak icl``, checked on construction; ``shots`` becomes a tuple
    of distinct integers (a number, a list or a comma list are accepted: a list sweeps)."""

    test_data: Any = option(None, "The queries' file (default: the lines of ``data`` whose "
                            "``split`` field is test).")
    split: str = option("split", "Field naming each line's split (train or test).")
    text_field: str = option("text", "Field holding the text.")
    label_field: str = option("label", "Field holding the label.")
    labels: str | Sequence[str] | None = option(
        None, "The label set, in order (default: the format's, or the train split's).")
    queries: int = option(100, "How many test queries (drawn by the seed).")
    format: str = option("auto", "Prompt format: auto, agnews, dbpedia, trec or custom.")
    instruction: str | None = option(None, "Instruction before the exemplars (custom format).")
    exemplar_template: str | None = option(None, "Template of one exemplar, with {text} and "
                                           "{label}.")
    query_template: str | None = option(None, "Template of the query, with {text}.")
    max_text_tokens: int = option(256, "Cut each text to this many tokens.")
    shots: int | Sequence[int] | str = option("4", "Exemplars per prompt; a list sweeps.")
    calibration: str | None = option(None, "off, on or both (report each).")
    calibration_eps: float = option(DEFAULT_CALIBRATION_EPS, "Floor of the content-free "
                                    "probabilities in contextual calibration.")
    output_space: str = option("labels", "labels (the renormalised label distribution), vocab "
                               "(the full next-token distribution) or both.")
    label_scoring: str = option("first-token", "first-token (each label's first token) or "
                                "full (the whole label string).")

    def __post_init__(self) -> None:
        object.__setattr__(self, "shots", tuple(parse_shots(self.shots)))
        self.icl()
        if self.queries < 1:
            raise ConfigError(f"queries must be at least 1, got {self.queries}",
                              param="queries")

    def icl(self) -> ICLConfig:
        """How A(S, x) is computed and which variants are reported."""
        return ICLConfig(output_spaces=resolve_spaces(self.output_space),
                         calibration=resolve_calibration(False, self.calibration),
                         label_scoring=self.label_scoring, calibration_eps=self.calibration_eps,
                         max_text_tokens=self.max_text_tokens)
