"""Finding e-mails, phones and addresses in crafted text; grouping into records.

Phone numbers: NANP reserves 555-0100..555-0199 for fiction, but "(555) 010-1234" fails
phonenumbers validation (555 is not an area code and exchanges cannot start with 0), so the tests
use real area codes with the fictional 555-01XX line numbers, e.g. (212) 555-0123, which
phonenumbers validates.
"""

from __future__ import annotations

import itertools

import pytest

from ctxleak.errors import ConfigError, InputError
from ctxleak.methods.pii.extract import extract, extract_records
from ctxleak.sensitive.detect import Span, clean_address, find_pii, name_from_text


def _of(spans, kind):
    return [s.text for s in spans if s.type == kind]


@pytest.mark.parametrize("phone", [
    "(212) 555-0123",
    "212.555.0123",
    "212-555-0123",
    "+1 212 555 0123",
    "+1 (415) 555-0142",
    "1-212-555-0199",
    "2125550100",
])
def test_phone_formats(phone):
    text = f"For bookings call {phone} today."
    spans = find_pii(text)
    assert _of(spans, "phone") == [phone]
    (span,) = spans
    assert text[span.start:span.end] == phone and span.score > 0


def test_invalid_fictional_area_code_is_rejected():
    # 555 is not an area code: phonenumbers does not validate these, so they are not PII spans.
    assert _of(find_pii("call (555) 010-1234 or 555.010.1234"), "phone") == []


def test_phone_region_configurable():
    text = "Ring 020 7946 0018 in London."  # Ofcom drama range
    assert _of(find_pii(text, "US"), "phone") == []
    assert _of(find_pii(text, "GB"), "phone") == ["020 7946 0018"]


def test_unknown_region():
    with pytest.raises(ConfigError):
        find_pii("x", region="XX")


@pytest.mark.parametrize("email", [
    "jane.doe@example.com",
    "jane.q.doe+newsletter@example.org",
    "j_doe-99@mail.dept.example.net",
    "first.last+tag.more@sub.example.co.uk",
])
def test_emails(email):
    text = f"Write to <{email}>, or {email}."
    assert _of(find_pii(text), "email") == [email, email]


def test_email_edges():
    spans = find_pii("not-an-email@ nor @example.com, but a.b@example.com.")
    assert _of(spans, "email") == ["a.b@example.com"]


def test_addresses():
    text = ("Our office: 100 Main Street\nBoston, MA 02110. The lab is at "
            "1600 Amphitheatre Parkway, Mountain View, CA 94043 or call +1 (415) 555-0142.")
    spans = find_pii(text)
    assert _of(spans, "address") == ["100 Main Street\nBoston, MA 02110",
                                      "1600 Amphitheatre Parkway, Mountain View, CA 94043"]
    assert _of(spans, "phone") == ["+1 (415) 555-0142"]
    assert clean_address(spans[0].text) == "100 Main Street, Boston, MA 02110"


def test_address_offsets_survive_irregular_spacing():
    text = "Mail:   12 Elm St.,   Apt 4,  Springfield,  IL 62704 please"
    (span,) = find_pii(text)
    assert span.type == "address"
    assert text[span.start:span.end] == span.text
    assert span.text.startswith("12 Elm St.") and span.text.endswith("62704")


@pytest.mark.parametrize("text", [
    "Released on 2024-05-01 and patched 05/01/2024.",
    "Dates: 2024/05/01, 1.5.2024, 12-31-99 and 05/01/2024 2024-05-01.",
    "Card 4111 1111 1111 1111 and 4111-1111-1111-1111 and 4111111111111111.",
    "Amex 3782 822463 10005 and 5555555555554444 ending.",
    "Order 2024-05-01 paid with 4111111111111111 on 05/01/2024 at 10:30.",
])
def test_no_false_positives_on_dates_and_cards(text):
    assert find_pii(text) == []


def test_date_next_to_phone_does_not_hide_it():
    text = "On 05/01/2024 2125550123 was busy; born 2024-05-01 at 100 Main Street, Boston, MA 02110"
    spans = find_pii(text)
    assert _of(spans, "phone") == ["2125550123"]
    assert _of(spans, "address") == ["100 Main Street, Boston, MA 02110"]


def test_spans_sorted_and_disjoint():
    text = ("Jane: jane@example.com (212) 555-0123 100 Main Street, Boston, MA 02110 "
            "john+x@example.org 415.555.0142")
    spans = find_pii(text)
    assert [s.type for s in spans] == ["email", "phone", "address", "email", "phone"]
    for a, b in itertools.pairwise(spans):
        assert a.end <= b.start
    assert all(isinstance(s, Span) and text[s.start:s.end] == s.text for s in spans)


def test_name_from_text():
    assert name_from_text("Contact\nName: Jane Q. Roe\nmore") == "Jane Q. Roe"
    assert name_from_text("name: lowercase words") is None
    assert name_from_text("no label here") is None


FULL = ("Jane Roe can be reached at jane.roe@example.com or (212) 555-0123. "
        "Letters: 100 Main Street, Boston, MA 02110.")
NO_ADDRESS = "Jane Roe: jane.roe@example.com, 212-555-0123."
ONLY_PHONE = "Max Doe picks up at +1 415 555 0142."


def test_extract_records_requires_all_by_default():
    docs = [{"text": FULL, "name": "Jane Roe", "relations": {"father": "John Roe"}},
            {"text": NO_ADDRESS, "name": "Jane Roe"},
            {"text": ONLY_PHONE, "name": "Max Doe"},
            {"text": FULL}]  # no name
    result = extract(docs)
    assert result.documents_read == 4 and result.documents_kept == 1
    assert result.documents_without_name == 1 and result.documents_incomplete == 2
    assert result.span_counts == {"email": 3, "phone": 4, "address": 2}
    (rec,) = result.records
    assert (rec.name, rec.email, rec.phone, rec.address) == (
        "Jane Roe", "jane.roe@example.com", "(212) 555-0123", "100 Main Street, Boston, MA 02110")
    assert rec.relations == {"father": "John Roe"} and rec.documents == [FULL]
    assert extract_records(docs) == result.records


def test_extract_records_relaxed_groups_per_subject():
    docs = [{"text": NO_ADDRESS, "name": "Jane Roe"},
            {"text": FULL, "name": "Jane  Roe"},
            {"text": ONLY_PHONE, "name": "Max Doe", "subject": "m1"},
            {"text": "Nothing personal here.", "name": "Nobody Here"}]
    recs = extract_records(docs, require_all=False)
    assert [r.subject_id for r in recs] == ["Jane Roe", "m1"]
    jane, max_ = recs
    assert jane.address == "100 Main Street, Boston, MA 02110" and len(jane.documents) == 2
    # the phone written two ways counts as one number; the first form seen is kept
    assert jane.phone == "212-555-0123"
    assert (max_.phone, max_.email, max_.address) == ("+1 415 555 0142", None, None)


def test_extract_bad_document():
    with pytest.raises(InputError):
        extract_records([{"name": "Jane Roe"}])
    with pytest.raises(InputError):
        extract_records([{"text": FULL, "name": 3}])
