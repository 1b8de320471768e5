"""``--redact`` masks the same PII in every text a run shows: the report's passages, examples,
leak maps and verdict, the console's lines and tables, and the Jupyter views.

PII is planted in every field of a small influence run on the tiny model (contexts, passages,
queries, references, an id, and through the id the verdict): names after a field label
("Employee: Marta Velikova", the reported case), a name at a passage's start and a name split
from its label across passages, e-mails, phone numbers and money amounts written four ways. The
tiny model's word tokenizer cannot spell names, so the run is also shown again as if its tokens
were the texts' pieces (every name split across two tokens) and every response repeated its
context, query and reference.

Ids are the data owner's keys, not PII: they are shown, through the same masking (an id that is
an e-mail address is masked), and ordinary ids ("emp-0042") stay readable.
"""

from __future__ import annotations

import html
import json
import re

import pytest
from conftest import run_cli

import ctxleak
from ctxleak.methods.influence.verdict import run_verdict

MAIL_ID = "payroll@example.net"  # an id that is PII: masked like any other text
ROWS = [
    {"id": "emp-0042",  # the reported case: a name after a field label, an amount, in HR records
     "context": "Employee: Marta Velikova\nCustomer since 2019. Salary: EUR 84,500 per year. "
                "Phone: (555) 010-4417, e-mail hr.desk@example.com.",
     "query": "What does Marta Velikova earn?", "reference": "Marta Velikova earns EUR 84,500."},
    {"id": "emp-0043",  # a name at a passage's start, one split from its label across passages
     "passages": ["Jonas Ekdahl joined in 2021 as an analyst.", "His supervisor:",
                  "Ines Okafor approved a wage of $84,500.",
                  "Reviewer: Jonas Ekdahl. Income 84.500 € a year, salary: 91200 now."],
     "query": "Who approved the wage of Jonas Ekdahl?", "reference": "Ines Okafor, $84,500."},
    {"id": MAIL_ID,  # a greeting before a role word, a name on the last line
     "context": "Dear Customer,\nyour balance is 1,250.00 USD. Call +44 20 7946 0958 or write "
                "to billing@example.org.\nContact: Priya Raman",
     "query": "Whom should the customer call?", "reference": "Priya Raman on +44 20 7946 0958."},
]
NAMES = ["Marta", "Velikova", "Jonas", "Ekdahl", "Ines", "Okafor", "Priya", "Raman"]
PLANTED = ["Marta Velikova", "Jonas Ekdahl", "Ines Okafor", "Priya Raman", *NAMES,
           "hr.desk@example.com", "billing@example.org", MAIL_ID, "(555) 010-4417", "010-4417",
           "+44 20 7946 0958", "7946 0958", "EUR 84,500", "$84,500", "84,500", "84.500 €",
           "84.500", "91200", "1,250.00 USD", "1,250.00"]
KEPT = ["Customer", "Dear", "Employee", "Reviewer", "supervisor", "approved", "analyst",
        "emp-0042", "emp-0043"]


def leaked(text: str) -> list[str]:
    """The planted strings in ``text`` as whole words."""
    return [s for s in PLANTED if re.search(rf"(?<![\w@.-]){re.escape(s)}(?![\w@-])", text)]


def pieces(text: str) -> list[str]:
    """``text`` as tokens: words with their leading space, each word longer than three
    characters split in two (so every planted name is split across tokens)."""
    out = []
    for word in re.findall(r"\s*\S+", text):
        cut = len(word) - len(word.strip()) + max(2, len(word.strip()) // 2)
        out += [word[:cut], word[cut:]] if len(word.strip()) > 3 else [word]
    return out


def context(row: dict) -> str:
    return row.get("context") or "\n\n".join(row["passages"])


def _words_pieces(texts):
    return {p.strip() for t in texts for p in pieces(t) if len(p.strip()) >= 2}


_TEXTS = [t for r in ROWS for t in (context(r), r["query"], r["reference"])]
# The pieces a name is split into that no other word of the rows gives ("es" of "Ines" is
# also the end of "does")
NAME_PIECES = _words_pieces(f" {n}" for n in NAMES) - _words_pieces(
    re.sub("|".join(NAMES), " ", t) for t in _TEXTS)


def token_texts(page: str) -> list[str]:
    """The texts of the token spans of the page's leak maps."""
    return [html.unescape(re.sub(r"<[^>]+>", "", t))
            for t in re.findall(r'<span class="tok"[^>]*>(.*?)</span>', page)]


def cli_run(tiny_dir, tmp_path, capsys):
    """``ctxleak influence --redact`` on the rows above: (stdout, run folder)."""
    data = tmp_path / "hr.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    out = tmp_path / "run"
    code, stdout, err = run_cli(["influence", "--model", tiny_dir, "--data", str(data),
                                 "--max-new-tokens", "2", "--passages", "sentence", "--ngram",
                                 "3", "--redact", "--output", str(out)], capsys)
    assert code == 0, err
    return stdout, out


def test_redacted_cli_run_shows_no_planted_pii(tiny_dir, tmp_path, capsys):
    stdout, out = cli_run(tiny_dir, tmp_path, capsys)
    page = (out / "report.html").read_text()
    assert leaked(stdout) == [] and leaked(page) == []
    assert "Customer since 2019" in page and "approved" in page and "emp-0042" in page


def shown_again(out):
    """The run loaded again, its tokens the texts' pieces, every response repeating its
    context, query and reference, and one example flagged (the verdict names its id)."""
    result = ctxleak.load_result(out)
    by_id = {r["id"]: r for r in ROWS}
    for record in result.records:
        row = by_id[record["id"]]
        record["context_token_strings"] = pieces(context(row))
        record["response"] = f"{context(row)} {row['query']} {row['reference']}"
        record["response_token_strings"] = pieces(record["response"])
        record["token_influence"] = [0.1] * len(record["response_token_strings"])
    setting = result.summary["settings"][0]
    # the largest influence above its control set to the flagged example's (which example it
    # is depends on the tiny model's sampled answers), so that the verdict names it
    setting["control"].update(largest_above={"label": f"{MAIL_ID} (passage 2)", "nats": 0.5},
                              flagged=[MAIL_ID], flagged_labels=[f"{MAIL_ID} (passage 2)"],
                              flagged_where=["passage 2"], flagged_above_control=[0.5])
    # the greeting's passage ranked first among the documents, so that the page lists it
    # whatever the tiny model's sampled answers made of the ranking
    setting["documents"] = sorted(setting.get("documents") or [],
                                  key=lambda d: not str(d["document"]).startswith("Dear"))
    result.summary["verdict"] = run_verdict(result.summary["settings"])
    return result


def test_every_shown_text_of_a_redacted_run_is_masked(tiny_dir, tmp_path, capsys):
    _, out = cli_run(tiny_dir, tmp_path, capsys)
    result = shown_again(out)
    assert MAIL_ID in result.summary["verdict"]["text"]
    page = result.render()
    fragments = result._repr_html_() + "".join(
        result.example(r["id"]).show().html for r in ROWS)
    result.show()
    result.show(plain=True)
    console = capsys.readouterr().out
    for shown in (page, fragments, console):
        assert leaked(shown) == []
    assert len(NAME_PIECES) >= len(NAMES)  # the check below looks for something
    for shown in (page, fragments):
        assert not NAME_PIECES & {t.strip() for t in token_texts(shown)}  # no piece of a name
        for word in KEPT:
            assert word in shown, word
    assert "Verdict: Too few examples" in console and "[REDACTED] (passage 2" in console
    assert re.search(r"emp-004[23] passage", console)  # ids that are no PII stay readable
    assert page.count("[REDACTED]") > 40
    result.config["redact"] = False  # the same page unredacted: the test can see every leak
    assert set(leaked(result.render())) == set(PLANTED)


# --------------------------------------------------------------------------- the detectors

@pytest.mark.parametrize(("text", "names"), [
    ("Employee: Marta Velikova\nCustomer since 2019.", {"Marta", "Velikova"}),
    ("Line manager: Ines Okafor, HR", {"Ines", "Okafor"}),
    ("Approved by: Ines Okafor.", {"Ines", "Okafor"}),
    ("Reviewer: Jonas Ekdahl (HR)", {"Jonas", "Ekdahl"}),  # any field label at a line start
    ("His supervisor:\n\nInes Okafor approved it.", {"Ines", "Okafor"}),  # the next passage
    ("Customer Service: Ann Lee", {"Ann", "Lee"}),
    ("Customer Marta Velikova called. Employee: Marta Velikova", {"Marta", "Velikova"}),
    ("Dear Customer, thank you.", set()),  # roles and greetings are no names
    ("Contact: Customer Care team", set()),
    ("Hi Team, write to customer.care@example.com or Customer Care.", set()),
    ("Department: Human Resources\nCity: New York", set()),  # labels of things and places
    ("Contact:\nPhone: 555 0100", set()),  # a label is no name
])
def test_names_after_field_labels_and_not_roles(text, names):
    from ctxleak.sensitive.detect import find_names

    assert {s.text for s in find_names(text)} == names


@pytest.mark.parametrize(("text", "amount"), [
    ("Salary: EUR 84,500 per year", "EUR 84,500"), ("a wage of $84,500.", "$84,500"),
    ("Income 84.500 € a year", "84.500 €"), ("salary: 84500", "84500"),
    ("earns 84 500 euros", "84 500 euros"), ("balance of 1,250.00 USD", "1,250.00 USD"),
    ("the price is £1.2 million", "£1.2 million"), ("rent: 950", "950"),
])
def test_money_amounts_are_masked(text, amount):
    from ctxleak.report import redact_text

    assert redact_text(text) == text.replace(amount, "[REDACTED]")


@pytest.mark.parametrize("keep", ["in 2023 we had 1500 users", "id 12345", "version 3.11.2",
                                  "control cost: 3 extra forward passes", "pi is 3.14159"])
def test_numbers_that_are_no_money_stay(keep):
    from ctxleak.report import redact_text

    assert redact_text(keep) == keep


def test_a_name_split_across_tokens_is_masked_in_every_token():
    from ctxleak.report import Report

    report = Report("t", redact=True, names=["Marta Velikova"])
    shown = report.shown_tokens(["Met", " Mar", "ta", " Vel", "ikova", " today", " for",
                                 " $", "84", ",", "500"])
    assert shown == ["Met", "[REDACTED]", "", "[REDACTED]", "", " today", " for",
                     "[REDACTED]", "", "", ""]


@pytest.mark.parametrize("plain", [False, True])
def test_console_tables_and_lines_go_through_the_active_redactor(plain, capsys):
    from ctxleak.report import Redactor, redacting
    from ctxleak.report.console import console, print_closing, print_rows

    with redacting(Redactor.of_run(True, ["Employee: Marta Velikova"])):
        print_rows([{"who": "Marta", "mail": "bob@example.net", "n": 3}], title="Velikova",
                   plain=plain)
        console(plain).print("Verdict: Marta Velikova earns $84,500")
        print_closing("runs/x", plain)
    out = capsys.readouterr().out
    assert "Marta" not in out and "Velikova" not in out and "bob@" not in out
    # the title's and the cells' words, and in the line the name (one value of the run, masked
    # whole) and the amount
    assert "84,500" not in out and out.count("[REDACTED]") == 5
    assert "runs/x/report.html" in out  # the run folder's path is no data
    print_rows([{"who": "Marta"}], plain=plain)  # outside a redacted run: as it is
    assert "Marta" in capsys.readouterr().out


# --------------------------------------------------------------------------- one set of values

KEY = "sk-live-4f9a8b7c6d5e4f3a2b1c0d9e8f7a"
PHONE = "555 014 2298"
IVAN = "Иван Петров"
VALUE_ROWS = [
    {"id": "ops-1",  # the key split over two lines in the document, the answer states it whole
     "context": "Billing service notes.\nAPI key: sk-live-4f9a8b7c6d5e\n4f3a2b1c0d9e8f7a "
                f"(rotate it every year).\nFront desk phone: {PHONE}.",
     "query": "How do I reach the billing service?", "reference": "Through the front desk."},
    {"id": "hr-2",  # a Cyrillic name the document holds, repeated by the answer
     "context": f"Сотрудник: {IVAN}, отдел кадров.\nThe onboarding checklist is reviewed "
                "every spring.",
     "query": "Who runs onboarding?", "reference": "Someone in human resources."}]
RESPONSES = {"ops-1": f"Use {KEY} and rotate it every year.",
             "hr-2": f"{IVAN} handles onboarding."}
SHOWN_VALUES = [KEY, PHONE, "555-014-2298", "014\n2298", IVAN, "Иван", "Петров",
                "иван петров"]


def values_run(tiny_dir, tmp_path, capsys):
    """An influence run with ``--redact`` on :data:`VALUE_ROWS`, loaded again with the
    answers of :data:`RESPONSES` (as if the model had given them), a per-document ledger
    naming the values the answers repeat, and the verdict the run's summary gives when the
    first answer copied the phone number split over two lines."""
    data = tmp_path / "ops.jsonl"
    data.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in VALUE_ROWS))
    out = tmp_path / "run"
    code, _, err = run_cli(["influence", "--model", tiny_dir, "--data", str(data),
                            "--max-new-tokens", "2", "--ngram", "3", "--redact",
                            "--output", str(out)], capsys)
    assert code == 0, err
    result = ctxleak.load_result(out)
    by_id = {r["id"]: r for r in VALUE_ROWS}
    for record in result.records:
        record["context_token_strings"] = pieces(by_id[record["id"]]["context"])
        record["response"] = RESPONSES[record["id"]]
        record["response_token_strings"] = pieces(record["response"])
        record["token_influence"] = [0.1] * len(record["response_token_strings"])
    setting = result.summary["settings"][0]
    setting["documents"] = [
        {"document": "doc-ops", "source": "ops.txt", "retrieved": 1, "leaked": 1, "copied": 1,
         "flagged": 0, "scored": 1, "influence_sum": 0.5, "influence_max": 0.5,
         "top_queries": [{"id": "ops-1", "query": "How do I reach the billing service?",
                          "setting": setting["setting"]}],
         "pii_in_answers": [{"text": KEY}, {"text": "555-014-2298"}, {"text": IVAN}]}]
    setting["document_control"] = {
        "rule": "the answer copied the document", "decoys": 1, "threshold": None,
        "false_flag_rate": None, "n_leaks": 1, "answers": 1,
        "leaks": [{"id": "ops-1", "document": "doc-ops", "copied": ["555 014\n2298"],
                   "above": None}]}
    # the greeting's passage ranked first among the documents, so that the page lists it
    # whatever the tiny model's sampled answers made of the ranking
    setting["documents"] = sorted(setting.get("documents") or [],
                                  key=lambda d: not str(d["document"]).startswith("Dear"))
    result.summary["verdict"] = run_verdict(result.summary["settings"])
    return result


def shown_text(page: str) -> str:
    """A page's text as a reader sees it (no images, styles or scripts; entities decoded)."""
    page = re.sub(r"<(style|script)\b.*?</\1>|<img\b[^>]*>", "", page, flags=re.S)
    return html.unescape(page)


def test_one_set_of_values_is_masked_in_every_text_of_the_run(tiny_dir, tmp_path, capsys):
    result = values_run(tiny_dir, tmp_path, capsys)
    assert "555 014\\n2298" in result.summary["verdict"]["text"]  # the copied phone, quoted
    page = shown_text(result.render())
    fragments = shown_text(result._repr_html_() + "".join(
        result.example(r["id"]).show().html for r in VALUE_ROWS))
    result.show()
    result.show(plain=True)
    console = capsys.readouterr().out
    fragments_of_key = {KEY[i:i + 6] for i in range(len(KEY) - 5)}
    for shown in (page, fragments, console):
        assert [v for v in SHOWN_VALUES if v in shown] == []
        assert "2298" not in shown
        assert sorted(f for f in fragments_of_key if f in shown) == []
        assert "ops-1" in shown
    for word in ("rotate", "onboarding", "hr-2", "billing service", "doc-ops"):
        assert word in page, word
    assert "Verdict: " in console and "ops-1 leaked doc-ops (copied '[REDACTED]')" in console
    assert "handles onboarding" in page and "[REDACTED] handles onboarding" in page
    result.config["redact"] = False  # unredacted, the page shows every value: the test sees
    plain = shown_text(result.render())
    assert KEY in plain and IVAN in plain and "555 014\\n2298" in plain


def test_a_value_is_masked_whatever_its_whitespace_and_case():
    from ctxleak.report import Redactor

    document = ("API key: sk-live-4f9a8b7c6d5e\n4f3a2b1c0d9e8f7a\nContact: Ada Quill, "
                "ada.quill@example.com")
    redactor = Redactor.of_run(True, [document])
    for text in (f"the key {KEY} works", "the key sk-live-4f9a8b7c6d5e 4f3a2b1c0d9e8f7a",
                 "copied 'sk-live-4f9a8b7c6d5e\\n4f3a2b1c0d9e8f7a'", "ADA.QUILL@EXAMPLE.COM",
                 "ada\nquill is away"):
        shown = redactor.text(text)
        assert "4f3a2b" not in shown and "4f9a8b" not in shown and "quill" not in \
            shown.lower(), shown
    # a value is matched whole: not inside a longer word
    assert redactor.text("a quillfeather pen") == "a quillfeather pen"
    assert redactor.tokens([" the", " sk-live-4f", "9a8b7c6d5e4f3a", "2b1c0d9e8f7a", " ok"]) \
        == [" the", "[REDACTED]", "", "", " ok"]


def test_a_masked_number_is_kept_nowhere_in_the_page_or_the_console(capsys):
    from ctxleak.report import Redactor, Report, redacting
    from ctxleak.report.console import console

    redactor = Redactor(True, values=("730519",))  # a PIN found elsewhere in the run
    report = Report("t", redact=redactor)
    report.add_table([{"id": "a", "pin": 730519}, {"id": "b", "pin": 3}])
    page = report.render()
    assert "730519" not in page and 'data-v="3.0"' in page  # no value kept for sorting
    with redacting(redactor):
        console().print({"pin": 730519, "n": 3})  # not a rich renderable: printed masked
    out = capsys.readouterr().out
    assert "730519" not in out and "[REDACTED]" in out
