"""ctxleak's context influence as a ragas metric: :class:`ContextLeak`, a single-turn metric
over a ragas evaluation dataset's ``user_input``, ``retrieved_contexts`` and ``response``, usable
in ``ragas.evaluate(dataset, metrics=[...])`` with no LLM judge (only the scoring model).

A PII detector run on the response (what RAG evaluation frameworks offer) cannot say whether a
value came from the context or from the model; this metric says how much the retrieved contexts
moved the logged answer beyond what unrelated contexts do ("Estimating Privacy Leakage of
Augmented Contextual Knowledge in Language Models", Def. 3.1-3.2), in nats, and what it copied
(:mod:`ctxleak.integrations.ragas_rows` lists the figures and their units).

The dataset's rows are measured together by the influence function you pass
(:func:`ctxleak.influence`), once, on the first score: each row's control is made of the other
rows' contexts, so a score equals what ``ctxleak influence`` gives that row. Needs
``pip install 'ctxleak[ragas]'``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ragas.dataset_schema import SingleTurnSample
from ragas.metrics.base import MetricOutputType, MetricType, SingleTurnMetric
from ragas.run_config import RunConfig

from ctxleak.errors import InputError
from ctxleak.integrations.ragas_rows import FIGURES, Measured, figure

#: The columns of a sample the metric reads.
COLUMNS = {"user_input", "retrieved_contexts", "response"}


@dataclass
class ContextLeak(SingleTurnMetric):
    """One figure (:data:`ctxleak.integrations.ragas_rows.FIGURES`) of each row's influence
    record, from ``measured`` (the dataset's rows measured together); its name says the figure,
    and the unit where it is nats: ``ctxleak_influence_above_control_nats``,
    ``ctxleak_influence_nats``, ``ctxleak_copied_spans``, ``ctxleak_values_carried_out``."""

    measured: Measured | None = None
    figure: str = "influence_above_control"
    name: str = ""
    _required_columns: dict[MetricType, set[str]] = field(
        default_factory=lambda: {MetricType.SINGLE_TURN: set(COLUMNS)})
    output_type: MetricOutputType = MetricOutputType.CONTINUOUS

    def __post_init__(self) -> None:
        if self.figure not in FIGURES:
            raise InputError(f"unknown figure {self.figure!r} (one of {', '.join(FIGURES)})",
                             field="figure")
        if not isinstance(self.measured, Measured):
            raise InputError("needs the measured dataset: ContextLeak(measured=Measured(dataset, "
                             "ctxleak.influence))", field="measured")
        if not self.name:
            unit = FIGURES[self.figure]
            self.name = f"ctxleak_{self.figure}" + ("_nats" if unit == "nats" else "")
        super().__post_init__()

    def init(self, run_config: RunConfig) -> None:
        """Nothing to set up: no LLM judge and no embeddings."""

    async def _single_turn_ascore(self, sample: SingleTurnSample, callbacks: Any = None) -> float:
        assert self.measured is not None  # __post_init__
        return figure(self.measured.record(sample), self.figure)


def context_leak_metrics(dataset: Any, influence: Callable[..., Any], model: Any = "default", *,
                         figures: Sequence[str] = tuple(FIGURES), **options: Any
                         ) -> list[ContextLeak]:
    """One :class:`ContextLeak` per figure, all reading one measurement of ``dataset``:
    ``influence(model, rows, progress=False, **options)`` (pass :func:`ctxleak.influence` and
    its keywords)."""
    measured = Measured(dataset, influence, model, **options)
    return [ContextLeak(measured=measured, figure=f) for f in figures]
