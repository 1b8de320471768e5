"""Helpers shared by the tests: tiny models and data, a run-folder diff, hand-computed influence,
and a headless-browser driver."""


def examples(n: int) -> int:
    """Hypothesis examples for a property: ``n`` under the ``ci`` profile (the full check,
    ``HYPOTHESIS_PROFILE=ci``), a fifth of it (at least 10) under ``dev``, plain pytest's."""
    import os

    return n if os.environ.get("HYPOTHESIS_PROFILE", "dev") == "ci" else max(10, n // 5)
