"""``--redact`` uses the detectors of PII extraction (e-mails, phone numbers, addresses, names),
and a redacted report of the demo data shows none of the demo's PII."""

from __future__ import annotations

import json
import re

import pytest
from conftest import run_cli

import ctxleak
from ctxleak.report import html as report_html
from ctxleak.report import redact_text
from ctxleak.run.records import demo_path
from ctxleak.sensitive.detect import find_names, find_pii
from ctxleak.sensitive.detect import redaction_spans as pii_spans

# The people, addresses and phone numbers written into the demo's clinic notes and personal
# records (by hand, from data/demo/influence.jsonl).
NAMES = ["Tobias", "Renwick", "Halvard", "Quince", "Mirela", "Osgood", "Callum", "Frayne",
         "Annika", "Ledbetter", "Jonah", "Petrakis-Wilde", "Rosalind", "Achterberg", "Dana",
         "Whitlock", "Priya", "Marcus", "Ellory-Tan", "Ingrid", "Sauvé-Morrow", "Oluwaseun",
         "Barrow-Keane", "Lucía", "Fenwick-Oduya", "Henrik", "Aldergrove"]
ADDRESSES = ["27 Juniper Hollow", "112 Sorrel Lane", "9 Thornapple Court", "61 Wicker Street",
             "18 Bellwether Road", "305 Cinder Path", "OR 97999", "NJ 07999", "VT 05999",
             "OH 43999", "WA 98999", "ME 04999"]


def demo_rows():
    rows = [json.loads(line) for line in demo_path("influence.jsonl").read_text().splitlines()]
    return [r for r in rows if r["kind"] != "news"]


def demo_pii():
    text = "\n".join(r["context"] for r in demo_rows())
    emails = re.findall(r"[\w.+-]+@example\.(?:com|org|net)", text)
    phones = re.findall(r"\(555\) 01\d-\d{4}", text)
    assert len(emails) == 6 and len(phones) == 7  # the hand count of the demo
    return emails + phones + NAMES + ADDRESSES


def leaked(text):
    return [s for s in demo_pii() if re.search(rf"(?<![\w-]){re.escape(s)}(?![\w-])", text)]


def test_redaction_is_the_extraction_detectors():
    assert not hasattr(report_html, "EMAIL_RE") and not hasattr(report_html, "PHONE_RE")
    text = ("Write to ann.lee@example.com, call (555) 010-2233, visit 12 Oak Street, Dover, "
            "DE 19901.")
    spans = [(s.start, s.end) for s in pii_spans(text)]
    assert report_html.redaction_spans(text) == spans
    assert {s.type for s in pii_spans(text)} >= {"email", "phone", "address"}
    # extraction's own spans are a subset of what is redacted (phones: validated ones too)
    for s in find_pii(text):
        assert any(a <= s.start and s.end <= b for a, b in spans), s


def test_names_from_cues_emails_and_known_names():
    spans = find_names("Patient: Ada Quill, 40. Dr Bo Vance saw Ada. Hi Cy, mail "
                               "zed.orrin@example.com, signed Zed Orrin.", ["Mo Pike"])
    found = {s.text for s in spans}
    assert found == {"Ada", "Quill", "Bo", "Vance", "Cy", "Zed", "Orrin"}
    assert [s.text for s in spans].count("Ada") == 2  # every occurrence of a found name
    assert {s.text for s in find_names("Mo Pike and Mo came.", ["Mo Pike"])} == \
        {"Mo", "Pike"}
    assert find_names("The Larkspur Logistics depot opened in Brackenridge.") == []


@pytest.mark.parametrize("row", demo_rows(), ids=lambda r: r["id"])
def test_each_demo_context_redacts_all_its_pii(row):
    assert leaked(row["context"])  # the row has PII
    out = redact_text(row["context"])
    assert leaked(out) == [] and "[REDACTED]" in out
    assert "Larkspur" in out or "Larkspur" not in row["context"]  # not every capital word


def test_redacted_influence_report_of_the_demo_shows_no_pii(tiny_dir, tmp_path, capsys):
    data = tmp_path / "pii_demo.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in demo_rows()))
    out = tmp_path / "run"
    code, stdout, err = run_cli(["influence", "--model", tiny_dir, "--data", str(data),
                                 "--max-new-tokens", "2", "--redact", "--output", str(out)],
                                capsys)
    assert code == 0, err
    assert leaked(stdout) == [] and leaked((out / "report.html").read_text()) == []
    # the tiny model's word tokenizer cannot spell names: render the run again as if its
    # tokens were the demo's words and every response repeated its whole context
    result = ctxleak.load_result(out)
    contexts = {r["id"]: r["context"] for r in demo_rows()}
    for record in result.records:
        words = re.findall(r"\s*\S+", contexts[str(record["id"]).split("|")[0]])
        record["context_token_strings"] = words
        record["response_token_strings"] = words
        record["response"] = "".join(words)
    page = result.render()
    assert leaked(page) == [] and page.count("[REDACTED]") > 50
    result.config["redact"] = False
    assert len(leaked(result.render())) == len(set(demo_pii()))  # the test can see a leak
