"""Shared helpers of the probe tests (no tests here): PII records written with the tiny models'
word vocabulary (tests/tiny_models.py), so that names, targets and documents tokenise to real
ids rather than <unk>."""

from __future__ import annotations

from ctxleak.methods.pii.records import PIIRecord

PLACES = ["paris", "france", "rome", "italy", "berlin", "germany", "madrid", "spain"]
PHONES = ["one two", "two three", "three four", "four one", "one three", "two four",
          "three one", "four two"]


def word_records(n: int = 6) -> list[PIIRecord]:
    """``n`` (<= 8) subjects with distinct names, phones, e-mails, addresses, fathers and
    universities, each with one document stating the phone the way the twins-2 template asks
    for it ("the phone of NAME is PHONE")."""
    out = []
    for i in range(n):
        a, b = PLACES[i % 8], PLACES[(i + 3) % 8]
        out.append(PIIRecord(
            subject_id=f"s{i}", name=f"{a} {b}", email=f"{b} news {PLACES[(i + 4) % 8]}",
            phone=PHONES[i], address=f"{PLACES[(i + 5) % 8]} city {PLACES[(i + 6) % 8]}",
            relations={"father": f"{PLACES[(i + 1) % 8]} {b}"},
            university=f"{PLACES[(i + 2) % 8]} report {PLACES[(i + 7) % 8]}",
            documents=[f"the phone of {a} {b} is {PHONES[i]} . the email of {a} {b} is "
                       f"{b} news {PLACES[(i + 4) % 8]} ."]))
    return out
