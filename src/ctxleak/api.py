"""The Python API (SPEC §11): one function per method, each returning a typed Result.

``model`` is a name (``"default"``, ``"gemma-270m"``), a Hugging Face id, a local directory, a
``.gguf`` file or an LM loaded with :func:`ctxleak.load_model`. ``data`` is a path (JSONL, CSV,
Parquet, a ``datasets`` save_to_disk folder), ``"demo"``, a list of dicts, a pandas DataFrame or a
``datasets.Dataset``. Every CLI flag is a keyword with the same meaning (the run options
``device``, ``dtype``, ``batch_size``, ``batch_invariant``, ``limit``, ``seed``, ``output``,
``resume``, ``chat_template``, ``trust_remote_code``, ``device_map``, ``threads`` and each
method's own), and the CLI and the API write the same run directory.
"""

from __future__ import annotations

from typing import Any

from ctxleak.run.options import RunOptions


def _common(model: Any, options: dict[str, Any]) -> tuple[RunOptions, dict[str, Any], Any]:
    """(run options, the method's keywords, the loaded LM or None)."""
    from ctxleak.run.runner import is_lm

    lm = model if is_lm(model) else None
    name = lm.info.name if lm is not None else str(model)
    common, own = RunOptions.split({**options, "model": name})
    return common, own, lm


def _run(method_class: type, model: Any, data: Any, progress: bool,
         options: dict[str, Any]) -> Any:
    from ctxleak.run.runner import run_method

    common, own, lm = _common(model, options)
    method = method_class(common, **own)
    return run_method(method, lm, data, progress=progress)


def influence(model: Any = "default", data: Any = "demo", *, progress: bool = True,
              **options: Any) -> Any:
    """Expected context influence of ``data`` under CID (paper 000, Def. 3.1-3.4):
    ``ctxleak influence``. Options: ``lam``, ``temperature`` (lists sweep), ``max_new_tokens``,
    ``min_new_tokens``, ``ngram``, ``stride``, ``context_sizes``, ``bounded_eps``, ``task``,
    ``template``, ``fields``, ``repeat_threshold``, ``rouge_threshold``, ``bertscore_model``,
    ``factkb_model``, ``redact`` and the run options. Returns an :class:`InfluenceResult`."""
    from ctxleak.methods.influence.method import InfluenceMethod

    return _run(InfluenceMethod, model, data, progress, options)


def iclinf(model: Any = "default", data: Any = "demo", *, progress: bool = True,
           **options: Any) -> Any:
    """ICLInf, the privacy loss of in-context exemplars (paper 001 §3-4, Eq. 4):
    ``ctxleak icl``. Options: ``shots`` (a list sweeps), ``queries``, ``test_data``, ``split``,
    ``text_field``, ``label_field``, ``labels``, ``fmt``, ``instruction``,
    ``exemplar_template``, ``query_template``, ``max_text_tokens``, ``calibrate``,
    ``calibration``, ``calibration_eps``, ``output_space``, ``label_scoring`` and the run
    options. Returns an :class:`ICLInfResult`."""
    from ctxleak.methods.icl.method import ICLInfMethod

    return _run(ICLInfMethod, model, data, progress, options)


def audit(model: Any = "default", data: Any = "demo", *, progress: bool = True,
          **options: Any) -> Any:
    """Audit DP synthetic-text generation: ε_empirical against each target ε (paper 001 §5,
    App. C): ``ctxleak audit``. Options: ``target_eps``, ``delta``, ``subset_size``, ``clip``,
    ``temperature``, ``search``, ``n_gen``, ``max_tokens``, ``min_tokens``, ``orders``,
    ``label``, ``template``, ``text_field``, ``label_field`` and the run options. Returns an
    :class:`AuditResult`."""
    from ctxleak.methods.audit.method import AuditMethod

    return _run(AuditMethod, model, data, progress, options)


def susceptibility(model: Any = "default", data: Any = "demo", *, progress: bool = True,
                   **options: Any) -> Any:
    """Monte Carlo and Fisher susceptibility of queries to context (paper 002):
    ``ctxleak susceptibility``. ``data``: a relations JSON file or ``"demo"``. Options:
    ``method``, ``contexts``, ``entity_contexts``, ``top_k``, ``sigma2``, ``reference``,
    ``query_types``, ``fisher_vocab``, ``fisher_truncation``, ``context_entities``,
    ``sampling``, ``relations``, ``entities_per_relation`` and the run options. Returns a
    :class:`SusceptibilityResult`."""
    from ctxleak.methods.susceptibility.method import SusceptibilityMethod

    return _run(SusceptibilityMethod, model, data, progress, options)


def probe(model: Any = "default", data: Any = "demo", *, progress: bool = True,
          **options: Any) -> Any:
    """ProPILE PII probing, black-box, white-box and in-context, and the canary check
    (paper 004): ``ctxleak probe``. ``data``: a PII records JSONL file, records in memory, or
    ``"demo"`` (synthetic subjects). Options: ``mode``, ``pii``, ``shots``, ``structure``,
    ``beam``, ``max_new_tokens``, ``generate``, ``subjects``, ``soft_tokens``,
    ``train_fraction``, ``epochs``, ``soft_lr``, ``context_template``, ``canary``,
    ``canary_epochs``, ``canary_lr``, ``canary_layers``, ``canary_baseline``, ``alpha``,
    ``redact``, ``leak_maps`` and the run options. Returns a :class:`ProbeResult`."""
    from ctxleak.methods.pii.method import ProbeMethod

    return _run(ProbeMethod, model, data, progress, options)


def influence_explain(model: Any = "default", context: str = "", query: str = "", *,
                      task: str = "qa", template: str | None = None, lam: float = 1.0,
                      temperature: float = 0.8, max_new_tokens: int = 50,
                      min_new_tokens: int | None = None, ngram: int = 4, top: int = 5,
                      **options: Any) -> Any:
    """One prompt explained (paper 000, Table 1): ``ctxleak influence explain``. The response by
    CID, the uni-gram influence of each context token on its first token, and the ``top``
    context ``ngram``-grams by influence on the whole response. Returns an
    :class:`ExplainResult` (its run directory has ``results.json`` and ``report.html``)."""
    from ctxleak.methods.influence.cid import CIDConfig
    from ctxleak.methods.influence.explain import explain_inputs, explain_prompt
    from ctxleak.report.influence import explain_report
    from ctxleak.results import ExplainResult
    from ctxleak.run.provenance import provenance
    from ctxleak.run.runner import load_lm, open_run

    common, own, lm = _common(model, options)
    if own:
        raise TypeError(f"influence_explain() got unexpected keyword(s) {', '.join(own)}")
    common.check()
    if min_new_tokens is None:
        min_new_tokens = min(10, max_new_tokens)
    context = explain_inputs(context, task, template, ngram, top)
    config = CIDConfig(lam=lam, temperature=temperature, max_new_tokens=max_new_tokens,
                       min_new_tokens=min_new_tokens)
    run = open_run("influence-explain", common,
                   {"context": context, "query": query, "task": task, "template": template,
                    "lambda": lam, "temperature": temperature, "ngram": ngram}, private=True)
    if not run.world.is_main:
        return None  # one prompt: under torchrun the other processes have nothing to do
    with run:
        lm = lm if lm is not None else load_lm(common)
        summary, curve = explain_prompt(lm, context, query, task=task, template=template,
                                        config=config, ngram=ngram, top=top, seed=common.seed)
        prov = provenance(lm)
        run.write_results(summary, provenance=prov, n_effective=1)
        report = explain_report(summary, query, curve)
        report.save(run.path / "report.html", mode=run.file_mode)
    result = ExplainResult(records=[], summary=summary, config=run.config, provenance=prov,
                           path=run.path, n_effective=1, html=report.render())
    result.curve = curve  # type: ignore[attr-defined]  # explain's extra (not a Result field)
    return result
