"""ctxleak's version, at the bottom of the import graph so that any layer may record it (run
provenance, comparisons) without importing the package face."""

__version__ = "0.1.0"
