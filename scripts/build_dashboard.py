"""Build the proxy's Grafana dashboard (``src/ctxleak/data/monitoring/grafana-dashboard.json``)
with Grafana's own typed builders (grafana-foundation-sdk, a development dependency), so that
the JSON follows Grafana's dashboard model rather than a hand-written copy of it.

    python scripts/build_dashboard.py          # rewrite the shipped file
    python scripts/build_dashboard.py --check  # exit 1 if the shipped file differs

The fast tier runs the check, so a change here that is not rebuilt fails the tests.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from grafana_foundation_sdk.builders import dashboard, prometheus, stat, table, timeseries
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models.dashboard import DataSourceRef

SHIPPED = Path(__file__).resolve().parents[1] / "src/ctxleak/data/monitoring/grafana-dashboard.json"
SOURCE = DataSourceRef(type_val="prometheus", uid="${datasource}")
#: Every query is scoped to the proxies the operator picks (the ``job`` label of the scrape).
JOB = 'job=~"$job"'


def _query(expr: str, legend: str, ref: str = "A") -> prometheus.Dataquery:
    return prometheus.Dataquery().expr(expr).legend_format(legend).ref_id(ref)


def _series(title: str, unit: str, description: str, *queries: prometheus.Dataquery,
            width: int = 12) -> timeseries.Panel:
    panel = (timeseries.Panel().title(title).description(description).unit(unit)
             .datasource(SOURCE).height(8).span(width))
    for query in queries:
        panel = panel.with_target(query)
    return panel


def build() -> dict[str, object]:
    """The dashboard as Grafana's JSON model."""
    board = (
        dashboard.Dashboard("ctxleak proxy: budgets, callers, upstream")
        .uid("ctxleak-proxy")
        .description("The privacy proxy `ctxleak serve`: what each document has left of its "
                     "privacy budget (ε, in nats), who spends it, and whether the model behind "
                     "the proxy answers. Series that name documents are the operator's "
                     "(/metrics with the operator key).")
        .tags(["ctxleak", "privacy"])
        .refresh("30s")
        .time("now-6h", "now")
        .with_variable(dashboard.DatasourceVariable("datasource").type("prometheus")
                       .label("Prometheus"))
        .with_variable(dashboard.QueryVariable("job").label("Proxy job")
                       .datasource(SOURCE)
                       .query("label_values(ctxleak_proxy_requests_total, job)")
                       .multi(True).include_all(True))
        .with_row(dashboard.Row("Budgets"))
        .with_panel(
            table.Panel().title("Documents with the least budget left")
            .description("ε left (budget − spent, open reservations counted as spent) and the "
                         "fraction of the budget used, for the documents closest to exhaustion "
                         "(the proxy exports the lowest N; --metrics-documents).")
            .datasource(SOURCE).height(8).span(12)
            .with_target(_query(f"bottomk(20, ctxleak_proxy_budget_remaining{{{JOB}}})",
                                "{{document}}").instant())
            .with_target(_query(f"ctxleak_proxy_budget_used_fraction{{{JOB}}}",
                                "{{document}}", "B").instant()))
        .with_panel(
            stat.Panel().title("Documents at ≥ 90 % of their budget")
            .description("How many of the exported documents have used at least 90 % of "
                         "their ε budget.")
            .datasource(SOURCE).height(4).span(6)
            .with_target(_query(f"count(ctxleak_proxy_budget_used_fraction{{{JOB}}} >= 0.9)"
                                " or vector(0)", "documents")))
        .with_panel(
            stat.Panel().title("Documents in the ledger").datasource(SOURCE).height(4).span(6)
            .with_target(_query(f"sum(ctxleak_proxy_ledger_documents{{{JOB}}})", "documents")))
        .with_panel(_series(
            "ε spent per minute", "none",
            "Guaranteed ε charged per minute, summed over answers and their documents; plain "
            "CID's ex-post figure (data-dependent, not a guarantee) beside it.",
            _query(f"sum(rate(ctxleak_proxy_epsilon_spent_total{{{JOB}}}[5m])) * 60",
                   "guaranteed ε / min"),
            _query(f"sum(rate(ctxleak_proxy_epsilon_ex_post_total{{{JOB}}}[5m])) * 60",
                   "ex-post ε / min (plain CID)", "B")))
        .with_panel(_series(
            "Documents left out per minute", "none",
            "Documents dropped from answers because their budget was spent, and exhaustion "
            "events by what the proxy did.",
            _query(f"sum(rate(ctxleak_proxy_documents_dropped_total{{{JOB}}}[5m])) * 60",
                   "dropped / min"),
            _query(f"sum by (action) (rate(ctxleak_proxy_budget_exhausted_total{{{JOB}}}[5m]))"
                   " * 60", "exhausted ({{action}}) / min", "B")))
        .with_row(dashboard.Row("Callers"))
        .with_panel(_series(
            "Chat requests per minute, by caller", "reqpm",
            "Requests by the caller's key name (--caller-keys).",
            _query(f"sum by (caller) (rate(ctxleak_proxy_caller_requests_total{{{JOB}}}[5m]))"
                   " * 60", "{{caller}}")))
        .with_panel(_series(
            "Refused for the caller's rate or share, per minute", "reqpm",
            "HTTP 429 for the caller's rate (--caller-rate) and documents left out because "
            "the caller's share of their budget (--caller-share) is spent.",
            _query(f"sum by (caller) (rate(ctxleak_proxy_caller_rate_limited_total{{{JOB}}}"
                   "[5m])) * 60", "rate-limited {{caller}}"),
            _query(f"sum by (caller) (rate(ctxleak_proxy_caller_share_spent_total{{{JOB}}}"
                   "[5m])) * 60", "share spent {{caller}}", "B")))
        .with_row(dashboard.Row("Requests and the upstream"))
        .with_panel(_series(
            "Requests per second, by route and status", "reqps",
            "Every answered request, errors included (502/504: the upstream failed or timed "
            "out; 503: the ledger does not answer; 429: a rate or a queue is full).",
            _query(f"sum by (route, status) (rate(ctxleak_proxy_requests_total{{{JOB}}}[5m]))",
                   "{{route}} {{status}}")))
        .with_panel(_series(
            "Chat latency (seconds)", "s",
            "Median and 95th percentile seconds per chat request.",
            _query("histogram_quantile(0.5, sum by (le) (rate("
                   f"ctxleak_proxy_request_seconds_bucket{{{JOB},route=\"chat\"}}[5m])))", "p50"),
            _query("histogram_quantile(0.95, sum by (le) (rate("
                   f"ctxleak_proxy_request_seconds_bucket{{{JOB},route=\"chat\"}}[5m])))", "p95",
                   "B")))
        .with_panel(_series(
            "Upstream failures (fraction of chat requests)", "percentunit",
            "Chat requests answered 502 or 504 (the model behind the proxy failed or timed "
            "out), as a fraction of all chat requests.",
            _query(f"sum(rate(ctxleak_proxy_requests_total{{{JOB},route=\"chat\","
                   "status=~\"502|504\"}[5m])) / sum(rate(ctxleak_proxy_requests_total{"
                   f"{JOB},route=\"chat\"}}[5m]))", "failed fraction")))
        .with_panel(_series(
            "Tokens released per second, by mode", "none",
            "Tokens released by CID answers (the stopping EOS included).",
            _query(f"sum by (mode) (rate(ctxleak_proxy_tokens_total{{{JOB}}}[5m]))", "{{mode}}")))
    )
    model = board.build()
    for number, panel in enumerate(model.panels or [], 1):  # unique ids, in reading order
        panel.id_val = number
    return json.loads(json.dumps(model, cls=JSONEncoder))


def render() -> str:
    """The dashboard's JSON text as shipped (sorted keys, two-space indent, newline at end)."""
    return json.dumps(build(), indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the shipped file differs")
    args = parser.parse_args()
    text = render()
    if args.check:
        same = SHIPPED.exists() and SHIPPED.read_text(encoding="utf-8") == text
        print("grafana-dashboard.json is " + ("up to date" if same else "out of date: run "
                                                "python scripts/build_dashboard.py"))
        return 0 if same else 1
    SHIPPED.write_text(text, encoding="utf-8")
    print(f"wrote {SHIPPED}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
