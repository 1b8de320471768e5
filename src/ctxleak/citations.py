"""The papers ctxleak implements, by title, and how to cite them: plain data, importable from any
layer (this module imports nothing of ctxleak).

Each :class:`Paper` has its title, authors, venue, year, arXiv id (where it has one), a link and a
BibTeX entry. :data:`METHOD_PAPERS` says which papers each method (by its command name) stands
on, first the one that defines what it measures. ``results.json`` carries them under ``"cite"``
(:func:`cite_block`) and every report ends with them.

To add a paper: one :class:`Paper` in :data:`PAPERS`, and its key in :data:`METHOD_PAPERS` for
the methods that use it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


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
    bibtex="""@inproceedings{flemings2025estimating,
  title     = {Estimating Privacy Leakage of Augmented Contextual Knowledge in Language Models},
  author    = {Flemings, James and Jiang, Bo and Zhang, Wanrong and Takhirov, Zafar and
               Annavaram, Murali},
  booktitle = {Proceedings of the 63rd Annual Meeting of the Association for Computational
               Linguistics (Volume 1: Long Papers)},
  pages     = {25092--25108},
  year      = {2025},
  address   = {Vienna, Austria},
  publisher = {Association for Computational Linguistics},
  doi       = {10.18653/v1/2025.acl-long.1220},
  url       = {https://aclanthology.org/2025.acl-long.1220/},
  eprint    = {2410.03026},
  archivePrefix = {arXiv}
}""")

ICL_LEAKAGE = Paper(
    key="li2025evaluating",
    title="Evaluating Privacy Leakage From In-Context Learning",
    authors=("Hongyi Li", "James Flemings", "Youngjun Choi", "Murali Annavaram"),
    venue="manuscript (Columbia University, University of Southern California, Paichai "
          "University)",
    year=2025,
    arxiv=None,
    url=None,
    bibtex="""@misc{li2025evaluating,
  title  = {Evaluating Privacy Leakage From In-Context Learning},
  author = {Li, Hongyi and Flemings, James and Choi, Youngjun and Annavaram, Murali},
  year   = {2025},
  note   = {Manuscript}
}""")

FISHER_SUSCEPTIBILITY = Paper(
    key="liu2024efficiently",
    title="Efficiently Computing Susceptibility to Context in Language Models",
    authors=("Tianyu Liu", "Kevin Du", "Mrinmaya Sachan", "Ryan Cotterell"),
    venue="Findings of the Association for Computational Linguistics: EMNLP 2024, "
          "pages 6615-6626",
    year=2024,
    arxiv="2410.14361",
    url="https://aclanthology.org/2024.findings-emnlp.386/",
    bibtex="""@inproceedings{liu2024efficiently,
  title     = {Efficiently Computing Susceptibility to Context in Language Models},
  author    = {Liu, Tianyu and Du, Kevin and Sachan, Mrinmaya and Cotterell, Ryan},
  booktitle = {Findings of the Association for Computational Linguistics: EMNLP 2024},
  pages     = {6615--6626},
  year      = {2024},
  address   = {Miami, Florida, USA},
  publisher = {Association for Computational Linguistics},
  doi       = {10.18653/v1/2024.findings-emnlp.386},
  url       = {https://aclanthology.org/2024.findings-emnlp.386/},
  eprint    = {2410.14361},
  archivePrefix = {arXiv}
}""")

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
    bibtex="""@inproceedings{du2024context,
  title     = {Context versus Prior Knowledge in Language Models},
  author    = {Du, Kevin and Sn{\\ae}bjarnarson, V{\\'e}steinn and Stoehr, Niklas and
               White, Jennifer and Schein, Aaron and Cotterell, Ryan},
  booktitle = {Proceedings of the 62nd Annual Meeting of the Association for Computational
               Linguistics (Volume 1: Long Papers)},
  pages     = {13211--13235},
  year      = {2024},
  address   = {Bangkok, Thailand},
  publisher = {Association for Computational Linguistics}
}""")

PROPILE = Paper(
    key="kim2023propile",
    title="ProPILE: Probing Privacy Leakage in Large Language Models",
    authors=("Siwon Kim", "Sangdoo Yun", "Hwaran Lee", "Martin Gubri", "Sungroh Yoon",
             "Seong Joon Oh"),
    venue="NeurIPS 2023 (37th Conference on Neural Information Processing Systems)",
    year=2023,
    arxiv="2307.01881",
    url="https://arxiv.org/abs/2307.01881",
    bibtex="""@inproceedings{kim2023propile,
  title     = {{ProPILE}: Probing Privacy Leakage in Large Language Models},
  author    = {Kim, Siwon and Yun, Sangdoo and Lee, Hwaran and Gubri, Martin and
               Yoon, Sungroh and Oh, Seong Joon},
  booktitle = {Advances in Neural Information Processing Systems (NeurIPS)},
  volume    = {36},
  year      = {2023},
  eprint    = {2307.01881},
  archivePrefix = {arXiv}
}""")

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
    bibtex="""@inproceedings{amin2024private,
  title     = {Private Prediction for Large-Scale Synthetic Text Generation},
  author    = {Amin, Kareem and Bie, Alex and Kong, Weiwei and Kurakin, Alexey and
               Ponomareva, Natalia and Syed, Umar and Terzis, Andreas and
               Vassilvitskii, Sergei},
  booktitle = {Findings of the Association for Computational Linguistics: EMNLP 2024},
  pages     = {7244--7262},
  year      = {2024},
  publisher = {Association for Computational Linguistics}
}""")

CALIBRATE = Paper(
    key="zhao2021calibrate",
    title="Calibrate Before Use: Improving Few-Shot Performance of Language Models",
    authors=("Zihao Zhao", "Eric Wallace", "Shi Feng", "Dan Klein", "Sameer Singh"),
    venue="ICML 2021 (Proceedings of the 38th International Conference on Machine Learning, "
          "PMLR 139), pages 12697-12706",
    year=2021,
    arxiv=None,
    url=None,
    bibtex="""@inproceedings{zhao2021calibrate,
  title     = {Calibrate Before Use: Improving Few-Shot Performance of Language Models},
  author    = {Zhao, Zihao and Wallace, Eric and Feng, Shi and Klein, Dan and Singh, Sameer},
  booktitle = {Proceedings of the 38th International Conference on Machine Learning},
  series    = {Proceedings of Machine Learning Research},
  volume    = {139},
  pages     = {12697--12706},
  year      = {2021},
  publisher = {PMLR}
}""")

DP_AUDITING = Paper(
    key="jagielski2020auditing",
    title="Auditing Differentially Private Machine Learning: How Private is Private SGD?",
    authors=("Matthew Jagielski", "Jonathan Ullman", "Alina Oprea"),
    venue="Advances in Neural Information Processing Systems 33 (NeurIPS 2020)",
    year=2020,
    arxiv="2006.07709",
    url=None,
    bibtex="""@inproceedings{jagielski2020auditing,
  title     = {Auditing Differentially Private Machine Learning: How Private is Private {SGD}?},
  author    = {Jagielski, Matthew and Ullman, Jonathan and Oprea, Alina},
  booktitle = {Advances in Neural Information Processing Systems},
  volume    = {33},
  year      = {2020},
  eprint    = {2006.07709},
  archivePrefix = {arXiv}
}""")

RAG_EXTRACTION = Paper(
    key="zeng2024good",
    title="The Good and The Bad: Exploring Privacy Issues in Retrieval-Augmented Generation (RAG)",
    authors=("Shenglai Zeng", "Jiankun Zhang", "Pengfei He", "Yue Xing", "Yiding Liu", "Han Xu",
             "Jie Ren", "Shuaiqiang Wang", "Dawei Yin", "Yi Chang", "Jiliang Tang"),
    venue="Findings of the Association for Computational Linguistics: ACL 2024",
    year=2024,
    arxiv="2402.16893",
    url=None,
    bibtex="""@inproceedings{zeng2024good,
  title     = {The Good and The Bad: Exploring Privacy Issues in Retrieval-Augmented Generation
               ({RAG})},
  author    = {Zeng, Shenglai and Zhang, Jiankun and He, Pengfei and Xing, Yue and Liu, Yiding
               and Xu, Han and Ren, Jie and Wang, Shuaiqiang and Yin, Dawei and Chang, Yi and
               Tang, Jiliang},
  booktitle = {Findings of the Association for Computational Linguistics: ACL 2024},
  year      = {2024},
  eprint    = {2402.16893},
  archivePrefix = {arXiv}
}""")

RAG_MEMBERSHIP = Paper(
    key="anderson2024my",
    title="Is My Data in Your Retrieval Database? Membership Inference Attacks Against "
          "Retrieval Augmented Generation",
    authors=("Maya Anderson", "Guy Amit", "Abigail Goldsteen"),
    venue="arXiv preprint",
    year=2024,
    arxiv="2405.20446",
    url=None,
    bibtex="""@misc{anderson2024my,
  title     = {Is My Data in Your Retrieval Database? Membership Inference Attacks Against
               Retrieval Augmented Generation},
  author    = {Anderson, Maya and Amit, Guy and Goldsteen, Abigail},
  year      = {2024},
  eprint    = {2405.20446},
  archivePrefix = {arXiv}
}""")

MASK_MEMBERSHIP = Paper(
    key="liu2025mask",
    title="Mask-based Membership Inference Attacks for Retrieval-Augmented Generation",
    authors=("Mingrui Liu", "Sixiao Zhang", "Cheng Long"),
    venue="Proceedings of the ACM Web Conference 2025 (WWW 2025)",
    year=2025,
    arxiv="2410.20142",
    url=None,
    bibtex="""@inproceedings{liu2025mask,
  title     = {Mask-based Membership Inference Attacks for Retrieval-Augmented Generation},
  author    = {Liu, Mingrui and Zhang, Sixiao and Long, Cheng},
  booktitle = {Proceedings of the ACM Web Conference 2025},
  year      = {2025},
  eprint    = {2410.20142},
  archivePrefix = {arXiv}
}""")

INTERROGATION = Paper(
    key="naseh2025riddle",
    title="Riddle Me This! Stealthy Membership Inference for Retrieval-Augmented Generation",
    authors=("Ali Naseh", "Yuefeng Peng", "Anshuman Suri", "Harsh Chaudhari", "Alina Oprea",
             "Amir Houmansadr"),
    venue="arXiv preprint",
    year=2025,
    arxiv="2502.00306",
    url=None,
    bibtex="""@misc{naseh2025riddle,
  title     = {Riddle Me This! Stealthy Membership Inference for Retrieval-Augmented
               Generation},
  author    = {Naseh, Ali and Peng, Yuefeng and Suri, Anshuman and Chaudhari, Harsh and Oprea,
               Alina and Houmansadr, Amir},
  year      = {2025},
  eprint    = {2502.00306},
  archivePrefix = {arXiv}
}""")

CALIBRATED_MEMBERSHIP = Paper(
    key="gao2025dcmi",
    title="DCMI: A Differential Calibration Membership Inference Attack Against "
          "Retrieval-Augmented Generation",
    authors=("Xinyu Gao", "Xiangtao Meng", "Yingkai Dong", "Zheng Li", "Shanqing Guo"),
    venue="arXiv preprint",
    year=2025,
    arxiv="2509.06026",
    url=None,
    bibtex="""@misc{gao2025dcmi,
  title     = {{DCMI}: A Differential Calibration Membership Inference Attack Against
               Retrieval-Augmented Generation},
  author    = {Gao, Xinyu and Meng, Xiangtao and Dong, Yingkai and Li, Zheng and Guo, Shanqing},
  year      = {2025},
  eprint    = {2509.06026},
  archivePrefix = {arXiv}
}""")

COMPLETION_MEMBERSHIP = Paper(
    key="li2024generating",
    title="Generating Is Believing: Membership Inference Attacks against Retrieval-Augmented "
          "Generation",
    authors=("Yuying Li", "Gaoyang Liu", "Chen Wang", "Yang Yang"),
    venue="arXiv preprint",
    year=2024,
    arxiv="2406.19234",
    url=None,
    bibtex="""@misc{li2024generating,
  title     = {Generating Is Believing: Membership Inference Attacks against
               Retrieval-Augmented Generation},
  author    = {Li, Yuying and Liu, Gaoyang and Wang, Chen and Yang, Yang},
  year      = {2024},
  eprint    = {2406.19234},
  archivePrefix = {arXiv}
}""")

#: ctxleak itself (also in ``CITATION.cff`` at the repository's root).
CTXLEAK_BIBTEX = """@software{ctxleak,
  title  = {ctxleak: how much of a language model's output comes from, and leaks, its
            private context},
  author = {{The ctxleak team}},
  year   = {2026},
  note   = {Python package, version 0.1.0; licence Apache-2.0}
}"""

#: Every paper by key.
PAPERS: dict[str, Paper] = {p.key: p for p in (
    CONTEXT_INFLUENCE, ICL_LEAKAGE, FISHER_SUSCEPTIBILITY, CONTEXT_VS_PRIOR, PROPILE,
    PRIVATE_PREDICTION, CALIBRATE, DP_AUDITING, RAG_EXTRACTION, RAG_MEMBERSHIP, MASK_MEMBERSHIP,
    INTERROGATION, CALIBRATED_MEMBERSHIP, COMPLETION_MEMBERSHIP)}

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
    "attack-extract": (RAG_EXTRACTION.key,),
    "attack-membership": (RAG_MEMBERSHIP.key, MASK_MEMBERSHIP.key, INTERROGATION.key,
                          CALIBRATED_MEMBERSHIP.key, COMPLETION_MEMBERSHIP.key,
                          DP_AUDITING.key),
    # the sheet joins the influence audit's and the attacks' runs: the papers of their measures
    "findings": (CONTEXT_INFLUENCE.key, RAG_EXTRACTION.key, RAG_MEMBERSHIP.key,
                 MASK_MEMBERSHIP.key, INTERROGATION.key),
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
