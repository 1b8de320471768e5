"""Synthetic records: deterministic per seed, fictional, documents mention every field."""

from __future__ import annotations

import phonenumbers
import pytest

from ctxleak.methods.pii.extract import extract
from ctxleak.methods.pii.synth import (
    AREA_CODES,
    FICTIONAL_EMAIL_DOMAINS,
    is_fictional_email,
    is_fictional_phone,
    synth_documents,
    synth_records,
)
from ctxleak.sensitive.detect import find_pii


@pytest.fixture(scope="module")
def records():
    return synth_records(60, seed=0)


def test_deterministic_per_seed(records):
    assert synth_records(60, seed=0) == records
    assert synth_records(60, seed=1) != records
    assert synth_records(10, seed=0) == records[:10]  # a prefix does not depend on n


def test_count_and_ids(records):
    assert len(records) == 60
    assert len({r.subject_id for r in records}) == 60
    assert synth_records(0, seed=0) == []
    with pytest.raises(ValueError):
        synth_records(-1)


def test_fictional_and_distinct(records):
    assert len({r.name for r in records}) == len(records)
    assert len({r.email.lower() for r in records}) == len(records)
    assert len({phonenumbers.format_number(phonenumbers.parse(r.phone, "US"),
                                           phonenumbers.PhoneNumberFormat.E164)
                for r in records}) == len(records)
    for r in records:
        assert r.email.rsplit("@", 1)[1] in FICTIONAL_EMAIL_DOMAINS and is_fictional_email(r.email)
        assert is_fictional_phone(r.phone), r.phone
        assert phonenumbers.is_valid_number(phonenumbers.parse(r.phone, "US"))
        assert set(r.relations) <= {"father", "mother", "spouse"}
        assert {"father", "mother"} <= set(r.relations)
        assert r.university and r.address


def test_all_area_codes_validate_with_fictional_lines():
    for area in AREA_CODES:
        for line in (100, 199):
            number = phonenumbers.parse(f"({area}) 555-0{line}", "US")
            assert phonenumbers.is_valid_number(number), area


def test_documents_mention_each_field(records):
    for r in records:
        assert 1 <= len(r.documents) <= 2
        for doc in r.documents:
            for value in (r.name, r.email, r.phone, r.address, r.university,
                          *r.relations.values()):
                assert value in doc, (value, doc)
            for rel in r.relations:
                assert rel in doc


def test_documents_round_trip_through_extraction(records):
    rows = synth_documents(records)
    assert len(rows) == sum(len(r.documents) for r in records)
    result = extract(rows)
    assert result.documents_kept == len(rows)
    got = {r.subject_id: r for r in result.records}
    for r in records:
        e = got[r.subject_id]
        assert (e.name, e.email, e.phone, e.address) == (r.name, r.email, r.phone, r.address)


def test_documents_hold_exactly_one_span_per_type(records):
    for r in records[:20]:
        for doc in r.documents:
            kinds = sorted(s.type for s in find_pii(doc))
            assert kinds == ["address", "email", "phone"], doc
