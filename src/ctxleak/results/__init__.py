"""Result objects: what every method returns, and what :func:`load_result` reads back from any
run directory, CLI runs included (:mod:`ctxleak.results.base` says what a Result holds).

- :mod:`~ctxleak.results.base`: :class:`Result` (tables, pandas, console, HTML, save);
- :mod:`~ctxleak.results.influence` and :mod:`~ctxleak.results.methods`: one class per method,
  and :func:`result_class` (command name -> class);
- :mod:`~ctxleak.results.loading`: :func:`load_result`;
- :mod:`~ctxleak.results.finish`: :func:`finish_run`, from a run's plain data to its Result;
- :mod:`~ctxleak.results.findings`: :class:`Findings`, one row per document across runs;
- :mod:`~ctxleak.results.tables`: :class:`DocumentTable`, every table of one row per document.
"""

from ctxleak.results.attacks import ExtractResult, MembershipResult
from ctxleak.results.base import Result
from ctxleak.results.findings import Findings, findings_of
from ctxleak.results.finish import finish_run
from ctxleak.results.influence import ExampleView, InfluenceResult, LeakMapHTML
from ctxleak.results.loading import load_result, user_id_row
from ctxleak.results.methods import (
    RESULT_CLASSES,
    AuditResult,
    CanaryResult,
    ExplainResult,
    ICLInfResult,
    ProbeResult,
    SusceptibilityResult,
    result_class,
)
from ctxleak.results.tables import DocumentTable

__all__ = ["RESULT_CLASSES", "AuditResult", "CanaryResult", "DocumentTable", "ExampleView",
           "ExplainResult", "ExtractResult", "Findings", "ICLInfResult", "MembershipResult",
           "InfluenceResult", "LeakMapHTML", "ProbeResult", "Result", "SusceptibilityResult",
           "findings_of", "finish_run", "load_result", "result_class", "user_id_row"]
