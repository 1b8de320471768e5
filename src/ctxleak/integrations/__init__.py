"""Context Influence Decoding for other libraries' generation loops (paper 000, Def. 3.4 and
App. B): :mod:`ctxleak.integrations.transformers` has ``ContextInfluenceProcessor`` (a
``transformers.LogitsProcessor`` with a privacy ledger) and ``cid_generate`` (defined in
:mod:`ctxleak.integrations.generate`). Import that module explicitly; this package imports
nothing heavy."""
