"""Helpers shared by the tests: tiny models and data, a run-folder diff, hand-computed influence,
and a headless-browser driver."""
