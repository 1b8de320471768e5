"""The datasets a method takes by name (``--data demo``, ``hf:agnews``...): what ``ctxleak data``
lists, with the rows counted from the bundled files themselves."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from ctxleak.methods.icl.data import HF_DATASETS
from ctxleak.methods.influence.data import DEMO_SETS, HUB_DATASETS
from ctxleak.run.records import demo_path


@dataclass(frozen=True)
class Dataset:
    """One named dataset: the ``--data`` value, the command that reads it, its size (a count
    with its unit) and what it holds."""

    name: str
    command: str
    rows: str
    description: str

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _lines(file: str) -> int:
    with open(demo_path(file), encoding="utf-8") as f:
        return sum(1 for line in f if line.strip())


def _traces(file: str) -> int:
    with open(demo_path(file), encoding="utf-8") as f:
        return len({json.loads(line)["context"]["trace_id"] for line in f if line.strip()})


def _relations() -> tuple[int, int]:
    with open(demo_path("relations.json"), encoding="utf-8") as f:
        relations = json.load(f)["relations"]
    return len(relations), sum(len(r["entities"]) + len(r["fake_entities"]) for r in relations)


def datasets() -> list[Dataset]:
    """Every named dataset, bundled ones first (their sizes read from the files), then those
    fetched with the optional ``datasets`` package (network needed)."""
    n_relations, n_entities = _relations()
    bundled = [
        Dataset("demo", "influence", f"{_lines('influence.jsonl')} documents",
                "Fictional news, clinic notes and personal records (e-mail, phone, address), "
                "each with a question or a summary task and a reference."),
        Dataset("demo-qa", "influence", f"{_lines('rag_qa.jsonl')} documents",
                "Short synthetic private documents (HR, clinic, finance, legal, personal), "
                "each with a question whose short answer is only in that document: F1 and "
                "exact match show what lowering λ costs."),
        Dataset("demo-qa-large", "influence", f"{_lines(DEMO_SETS['demo-qa-large'])} questions",
                "Fictional private documents in groups of four related ones (HR, clinic, "
                "finance, legal, IT, school, travel...), each question given its group: the "
                "answer is in one document only, so a mechanism that hides it loses utility."),
        Dataset("demo-datastore", "influence", f"{_lines(DEMO_SETS['demo-datastore'])} questions",
                "A datastore of fictional organisations' documents where some facts are common "
                "(stated in 40+ documents) and some private (in one): each question, marked "
                "'fact', is given its top BM25 document; a DP defence should answer only "
                "the common ones."),
        Dataset("demo-rag-log", "influence", f"{_lines(DEMO_SETS['demo-rag-log'])} turns",
                "One day of a fictional company assistant's RAG turns (query, retrieved "
                "documents, logged answer), some repeating secrets or personal data of "
                "restricted documents; the ground truth is in truth.json beside it."),
        Dataset("demo-rag-spans", "influence",
                f"{_traces(DEMO_SETS['demo-rag-spans'])} traces",
                "The same turns as OpenInference spans (chain, retriever, LLM with the app's "
                "prompt), with traces where the app only showed sources."),
        Dataset("demo", "icl", f"{_lines('icl_train.jsonl')} train + "
                f"{_lines('icl_test.jsonl')} test",
                "Invented four-topic news headlines labelled World, Sports, Business or "
                "Technology."),
        Dataset("demo", "audit", f"{_lines('icl_train.jsonl')} texts",
                "The icl demo's train split as private examples (--label Sports keeps 30)."),
        Dataset("demo", "susceptibility", f"{n_relations} relations, {n_entities} entities",
                "Well-known public facts (capitals, authors, chemical symbols...) with real "
                "and made-up entities."),
        Dataset("demo", "probe", "--subjects (20)",
                "Synthetic PII records made on the fly with --seed: fictional names, "
                "example.com e-mails, 555-01XX phones ('ctxleak pii synth' writes them)."),
    ]
    hub = [Dataset(name, "influence", "download", "Hugging Face dataset (needs the datasets "
                   "package and network).") for name in HUB_DATASETS]
    hub += [Dataset(f"hf:{name}", "icl", "download", f"{hf_id} (needs the datasets package "
                    "and network).") for name, (hf_id, _, _) in HF_DATASETS.items()]
    return bundled + hub
