"""The detectors of secrets and personal data (ctxleak.sensitive): values compared across
formats, written out by hand both ways; what Presidio and detect-secrets find in sentences
written here; and a redacted report that shows none of a list of secrets."""

from __future__ import annotations

import subprocess
import sys

import pytest

from ctxleak.report import Redactor, Report
from ctxleak.sensitive import carried_values, find_sensitive, value_in
from ctxleak.sensitive.values import date_values, money_values, number_values

SALARY = ["$142,000", "142,000 USD", "USD 142,000", "142000 dollars", "US$142,000", "$142k"]
DAY = ["14 June 2026", "2026-06-14", "June 14, 2026", "14th of June 2026", "Jun 14 2026",
       "2026/06/14"]


@pytest.mark.parametrize("a", SALARY)
@pytest.mark.parametrize("b", SALARY)
def test_money_matches_across_formats_both_ways(a: str, b: str) -> None:
    assert value_in(a, "money", f"The answer: {b}.")


@pytest.mark.parametrize("answer", ["$14,200", "1,420,000 USD", "€142,000", "142,001 dollars",
                                    "£142,000", "no salary here"])
def test_money_negatives(answer: str) -> None:
    assert not value_in("$142,000", "money", answer)


def test_money_reads_amount_and_currency() -> None:
    values = [v for v, _, _ in money_values("paid 4,250 EUR, then $1.5m and 27,600 pounds")]
    assert [(c, str(a)) for c, a in values] == [("EUR", "4250"), ("USD", "1500000.0"),
                                               ("GBP", "27600")]


@pytest.mark.parametrize("a", DAY)
@pytest.mark.parametrize("b", DAY)
def test_dates_match_across_formats_both_ways(a: str, b: str) -> None:
    assert value_in(a, "date", f"Leave starts {b}.")


def test_dates_negatives_and_ambiguity() -> None:
    assert not value_in("14 June 2026", "date", "on 2026-06-15")
    assert not value_in("14 June 2026", "date", "on 14 June 2025")
    # 05/06/2026 may be 5 June or 6 May: both readings are kept
    assert date_values("05/06/2026")[0][0] == {(2026, 6, 5), (2026, 5, 6)}
    assert value_in("5 June 2026", "date", "05/06/2026")
    assert value_in("6 May 2026", "date", "05/06/2026")


def test_numbers_whole_with_or_without_separators() -> None:
    assert value_in("1,420", "number", "we had 1420 users")
    assert value_in("1420", "number", "we had 1,420 users")
    assert not value_in("142", "number", "we had 1420 users")
    assert not value_in("142", "number", "pi is 3.142")
    assert not value_in("1420", "number", "we had 142 users")
    assert number_values("1 420 and 3.5") == [1420, 3.5]


def test_exact_values_are_whole_tokens() -> None:
    assert value_in("4417-B", "pin", "the door code is 4417-B.")
    assert not value_in("4417-B", "pin", "the door code is 4417-BX")
    assert not value_in("4417-B", "pin", "the door code is 4417")
    assert not value_in("4417", "pin", "call 44170")
    assert value_in("Tr0ub4dor&3x", "password", "use 'Tr0ub4dor&3x' to log in")
    assert not value_in("Tr0ub4dor&3x", "password", "use Tr0ub4dor to log in")


def test_phones_names_and_empty() -> None:
    assert value_in("(555) 010-4417", "phone", "call +1 555-010-4417 now")
    assert not value_in("(555) 010-4417", "phone", "call 555-010-4418")
    assert value_in("Marta Velikova", "person", "MARTA   VELIKOVA said")
    assert not value_in("", "money", "$5") and not value_in("$5", "money", "")


# --------------------------------------------------------------------------- detectors
# (the engines load once in this module: the first test that calls find_sensitive pays for it)

def _found(text: str) -> dict[str, str]:
    return {s.text: s.type for s in find_sensitive(text)}


def test_spans_are_sorted_disjoint_and_exact() -> None:
    text = ("Marta Velikova (employee id NW-20417) lives at 14 Alder Road, Springfield, IL 62704;"
            " the VPN PIN is 4417 and db_password = 'Tr0ub4dor&3x'.")
    spans = find_sensitive(text)
    assert spans and all(text[s.start:s.end] == s.text for s in spans)
    assert all(a.end <= b.start for a, b in zip(spans, spans[1:]))


def test_finds_password_assignment_and_prose() -> None:
    assert _found("db_password = 'Tr0ub4dor&3x'").get("Tr0ub4dor&3x") == "password"
    assert _found("The VPN password is Wint3r!Payroll, keep it safe.").get(
        "Wint3r!Payroll") == "password"
    # a sentence about passwords with none in it
    assert "password" not in _found("The password reset link expires after a day.").values()


def test_finds_aws_key_and_tokens() -> None:
    found = _found("The job uses AKIAIOSFODNN7EXAMPLE and token "
                   "ghp_16C7e42F292c6912E7710c838347Ae178B4a for the mirror.")
    assert found.get("AKIAIOSFODNN7EXAMPLE") == "secret"
    assert found.get("ghp_16C7e42F292c6912E7710c838347Ae178B4a") == "secret"


def test_finds_pin_only_with_its_cue() -> None:
    assert _found("The door code for the server room is 4417-B.").get("4417-B") == "pin"
    assert _found("Your VPN PIN: 880213").get("880213") == "pin"
    assert "pin" not in _found("Room 4417 holds 880213 files.").values()


def test_finds_name_address_id_diagnosis() -> None:
    found = _found("Employee: Daniel Okafor, employee ID NW-19862, 14 Alder Road, Springfield, "
                   "IL 62704. Diagnosis: atrial fibrillation.")
    assert found.get("Daniel Okafor") == "person"
    assert found.get("NW-19862") == "id"
    assert found.get("14 Alder Road, Springfield, IL 62704") == "address"
    assert found.get("atrial fibrillation") == "medical"


def test_carried_values_cover_the_old_detectors() -> None:
    from ctxleak.sensitive.detect import find_amounts, find_names, find_pii

    text = ("Payroll record. Employee: Marta Velikova, salary $142,000, phone (555) 010-4417, "
            "marta.velikova@northwind.example, 14 Alder Road, Springfield, IL 62704. "
            "Database password: Hunter2-Prod!")
    new = carried_values(text)
    old = [s.text for s in [*find_pii(text), *find_amounts(text), *find_names(text)]]
    assert len(old) >= 4  # the name, the amount, the phone, the e-mail (and the address)
    for value in old:
        assert any(value in v or v in value for v in new), value
    assert new.get("Hunter2-Prod!") == "password"
    office = "Our offices in New York and San Francisco open at 8."
    assert "location" in {s.type for s in find_sensitive(office)}
    assert "location" not in carried_values(office).values()  # a city alone is nobody's data


def test_empty_and_numeric_texts() -> None:
    assert find_sensitive("") == [] and find_sensitive("0.53") == []
    assert [s.type for s in find_sensitive("$142,000")] == ["money"]


SECRETS = ["Tr0ub4dor&3x", "AKIAIOSFODNN7EXAMPLE", "4417-B", "Marta Velikova", "NW-20417",
           "14 Alder Road", "type 2 diabetes", "$142,000", "(555) 010-4417"]


def test_redacted_report_shows_none_of_the_secrets() -> None:
    text = ("Employee: Marta Velikova (employee id NW-20417), 14 Alder Road, Springfield, IL "
            "62704, earns $142,000 and was diagnosed with type 2 diabetes. The database "
            "password is Tr0ub4dor&3x, the AWS key AKIAIOSFODNN7EXAMPLE, the door code 4417-B; "
            "call (555) 010-4417.")
    rows = [[text, "Velikova's code is 4417-B; log in with Tr0ub4dor&3x"]]
    # the run's redactor: a name or a code found once is masked where nothing marks it
    r = Report("Audit", redact=True, names=Redactor.of_run(True, rows).names)
    r.add_text(text)
    r.add_table(rows, ["passage", "answer"])
    page = r.render()
    left = [s for s in SECRETS if s in page or s.replace("&", "&amp;") in page]
    assert left == []
    assert "Velikova" not in page and "[REDACTED]" in page


def test_secret_stops_at_a_glued_sentence_and_jwt_stays_whole() -> None:
    # passages joined without a space, as a redactor reads a list of passages
    assert _found("Database password: Qx7!vR2#mK9pL4zW.Facilities are open.").get(
        "Qx7!vR2#mK9pL4zW") == "password"
    jwt = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ0ZXN0LXRlbmFudCJ9.Zk3x9QmP2vL7rT4wY8nB1cD6fH0jK5sA"
    assert _found(f"Use the JWT {jwt}.").get(jwt) == "secret"


def test_run_redactor_spreads_names_not_holiday_words() -> None:
    texts = ["Holidays: Martin Luther King Jr. Day 19 January, Labor Day 7 September.",
             "Employee: Helena Wirth, VPN PIN: 730519.", "Wirth's PIN is 730519, Labor Day off."]
    redactor = Redactor.of_run(True, texts)
    out = redactor.text(texts[2])
    assert "Wirth" not in out and "730519" not in out  # found once, masked where unmarked
    assert "Labor Day off" in out  # words of a holiday the model took for a name stay


def test_import_loads_no_engine() -> None:
    code = ("import sys, ctxleak, ctxleak.sensitive, ctxleak.report.redaction; "
            "print([m for m in ('spacy', 'presidio_analyzer', 'detect_secrets') "
            "if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "[]"


def test_loading_detect_secrets_leaves_the_processs_warnings_shown(monkeypatch):
    """detect-secrets turns on logging.captureWarnings when imported, which silenced every
    later warning of an attack (a cut answer, a tampered journal row): ctxleak puts the
    process's own display back."""
    import logging
    import sys
    import warnings

    import ctxleak.sensitive.secrets as secrets

    for name in [m for m in sys.modules if m.startswith("detect_secrets")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setattr(logging, "_warnings_showwarning", None)  # as in a fresh process
    monkeypatch.setattr(secrets, "_plugins", None)
    shown = []
    monkeypatch.setattr(warnings, "showwarning", lambda *a, **k: shown.append(a[0]))
    secrets._load()
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.warn("still shown", UserWarning, stacklevel=1)
    assert [str(m) for m in shown] == ["still shown"]
