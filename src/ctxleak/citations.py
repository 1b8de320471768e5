"""The papers ctxleak implements, by title, and how to cite them: plain data, importable from any
layer (this module imports nothing of ctxleak).

Each :class:`Paper` has its title, authors, venue, year, arXiv id (where it has one), a link and a
BibTeX entry. :data:`METHOD_PAPERS` says which papers each method (by its command name) stands
on, first the one that defines what it measures. ``results.json`` carries them under ``"cite"``
(:func:`cite_block`) and every report ends with them.

The BibTeX entries are ``data/citations.bib`` (:data:`BIBTEX`, by key). To add a paper: its entry
there, one :class:`Paper` in :data:`PAPERS`, and its key in :data:`METHOD_PAPERS` for the methods
that use it.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from typing import Any


def read_bibtex(text: str) -> dict[str, str]:
    """The entries of a BibTeX file by key: each entry from its ``@type{key,`` line to its
    closing brace, entries apart by a blank line (as ``citations.bib`` is written)."""
    entries = {}
    for entry in text.strip().split("\n\n"):
        key = entry[entry.index("{") + 1:entry.index(",")]
        entries[key] = entry
    return entries


#: Every BibTeX entry by key: the papers' and ctxleak's own, as ``data/citations.bib`` holds
#: them (a file a LaTeX document can use as it is).
BIBTEX: dict[str, str] = read_bibtex(
    (resources.files("ctxleak") / "data" / "citations.bib").read_text(encoding="utf-8"))


@dataclass(frozen=True)
class Paper:
    """One paper: what a reader needs to find it and cite it."""

    key: str
    title: str
    authors: tuple[str, ...]
    venue: str
    year: int
    arxiv: str | None
    url: str | None
    bibtex: str

    @property
    def short(self) -> str:
        """``Title (First author et al., year)``, for one line of text."""
        first = self.authors[0].split()[-1]
        who = first if len(self.authors) == 1 else f"{first} et al."
        return f"{self.title} ({who}, {self.year})"

    def as_dict(self) -> dict[str, Any]:
        """The fields as JSON-ready values (strings, the author list, the year)."""
        return {"title": self.title, "authors": list(self.authors), "venue": self.venue,
                "year": self.year, "arxiv": self.arxiv, "url": self.url,
                "bibtex": self.bibtex}


CONTEXT_INFLUENCE = Paper(
    key="flemings2025estimating",
    title="Estimating Privacy Leakage of Augmented Contextual Knowledge in Language Models",
    authors=("James Flemings", "Bo Jiang", "Wanrong Zhang", "Zafar Takhirov", "Murali Annavaram"),
    venue="ACL 2025 (Proceedings of the 63rd Annual Meeting of the Association for "
          "Computational Linguistics, Volume 1: Long Papers), pages 25092-25108",
    year=2025,
    arxiv="2410.03026",
    url="https://aclanthology.org/2025.acl-long.1220/",
    bibtex=BIBTEX["flemings2025estimating"])

ICL_LEAKAGE = Paper(
    key="li2025evaluating",
    title="Evaluating Privacy Leakage From In-Context Learning",
    authors=("Hongyi Li", "James Flemings", "Youngjun Choi", "Murali Annavaram"),
    venue="manuscript (Columbia University, University of Southern California, Paichai "
          "University)",
    year=2025,
    arxiv=None,
    url=None,
    bibtex=BIBTEX["li2025evaluating"])

FISHER_SUSCEPTIBILITY = Paper(
    key="liu2024efficiently",
    title="Efficiently Computing Susceptibility to Context in Language Models",
    authors=("Tianyu Liu", "Kevin Du", "Mrinmaya Sachan", "Ryan Cotterell"),
    venue="Findings of the Association for Computational Linguistics: EMNLP 2024, "
          "pages 6615-6626",
    year=2024,
    arxiv="2410.14361",
    url="https://aclanthology.org/2024.findings-emnlp.386/",
    bibtex=BIBTEX["liu2024efficiently"])

CONTEXT_VS_PRIOR = Paper(
    key="du2024context",
    title="Context versus Prior Knowledge in Language Models",
    authors=("Kevin Du", "Vésteinn Snæbjarnarson", "Niklas Stoehr", "Jennifer White",
             "Aaron Schein", "Ryan Cotterell"),
    venue="ACL 2024 (Proceedings of the 62nd Annual Meeting of the Association for "
          "Computational Linguistics, Volume 1: Long Papers), pages 13211-13235",
    year=2024,
    arxiv=None,
    url=None,
    bibtex=BIBTEX["du2024context"])

PROPILE = Paper(
    key="kim2023propile",
    title="ProPILE: Probing Privacy Leakage in Large Language Models",
    authors=("Siwon Kim", "Sangdoo Yun", "Hwaran Lee", "Martin Gubri", "Sungroh Yoon",
             "Seong Joon Oh"),
    venue="NeurIPS 2023 (37th Conference on Neural Information Processing Systems)",
    year=2023,
    arxiv="2307.01881",
    url="https://arxiv.org/abs/2307.01881",
    bibtex=BIBTEX["kim2023propile"])

PRIVATE_PREDICTION = Paper(
    key="amin2024private",
    title="Private Prediction for Large-Scale Synthetic Text Generation",
    authors=("Kareem Amin", "Alex Bie", "Weiwei Kong", "Alexey Kurakin", "Natalia Ponomareva",
             "Umar Syed", "Andreas Terzis", "Sergei Vassilvitskii"),
    venue="Findings of the Association for Computational Linguistics: EMNLP 2024, "
          "pages 7244-7262",
    year=2024,
    arxiv=None,
    url=None,
    bibtex=BIBTEX["amin2024private"])

CALIBRATE = Paper(
    key="zhao2021calibrate",
    title="Calibrate Before Use: Improving Few-Shot Performance of Language Models",
    authors=("Zihao Zhao", "Eric Wallace", "Shi Feng", "Dan Klein", "Sameer Singh"),
    venue="ICML 2021 (Proceedings of the 38th International Conference on Machine Learning, "
          "PMLR 139), pages 12697-12706",
    year=2021,
    arxiv=None,
    url=None,
    bibtex=BIBTEX["zhao2021calibrate"])

DP_AUDITING = Paper(
    key="jagielski2020auditing",
    title="Auditing Differentially Private Machine Learning: How Private is Private SGD?",
    authors=("Matthew Jagielski", "Jonathan Ullman", "Alina Oprea"),
    venue="Advances in Neural Information Processing Systems 33 (NeurIPS 2020)",
    year=2020,
    arxiv="2006.07709",
    url=None,
    bibtex=BIBTEX["jagielski2020auditing"])

#: ctxleak itself (also in ``CITATION.cff`` at the repository's root).
CTXLEAK_BIBTEX = BIBTEX["ctxleak"]

#: Every paper by key.
PAPERS: dict[str, Paper] = {p.key: p for p in (
    CONTEXT_INFLUENCE, ICL_LEAKAGE, FISHER_SUSCEPTIBILITY, CONTEXT_VS_PRIOR, PROPILE,
    PRIVATE_PREDICTION, CALIBRATE, DP_AUDITING)}

#: The papers behind each method, by command name; the first defines what the method measures.
METHOD_PAPERS: dict[str, tuple[str, ...]] = {
    "influence": (CONTEXT_INFLUENCE.key,),
    "influence-explain": (CONTEXT_INFLUENCE.key,),
    "canary": (DP_AUDITING.key, CONTEXT_INFLUENCE.key),
    "icl": (ICL_LEAKAGE.key, CALIBRATE.key),
    "audit": (ICL_LEAKAGE.key, PRIVATE_PREDICTION.key),
    "dp": (ICL_LEAKAGE.key, PRIVATE_PREDICTION.key),
    "susceptibility": (FISHER_SUSCEPTIBILITY.key, CONTEXT_VS_PRIOR.key),
    "probe": (PROPILE.key, CONTEXT_INFLUENCE.key),
    "pii": (PROPILE.key,),
}


def papers_for(method: str) -> list[Paper]:
    """The papers of ``method`` (a command name); an unknown name has none."""
    return [PAPERS[k] for k in METHOD_PAPERS.get(method, ())]


def cite_block(method: str) -> dict[str, Any]:
    """What ``results.json`` holds under ``"cite"``: each paper of ``method`` by key (title,
    authors, venue, year, arXiv id, url, BibTeX), and ``ctxleak``'s own BibTeX."""
    return {"papers": {p.key: p.as_dict() for p in papers_for(method)},
            "ctxleak": CTXLEAK_BIBTEX}


def bibtex(method: str) -> str:
    """All BibTeX entries of ``method``'s papers, then ctxleak's, one block of text."""
    return "\n\n".join([p.bibtex for p in papers_for(method)] + [CTXLEAK_BIBTEX])
