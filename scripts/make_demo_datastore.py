"""Write the bundled demo datastore, ``src/ctxleak/data/demo/datastore/`` (run from anywhere).

A differentially private RAG defence (a DP vote over datastore shards, Koga, Wu and Chaudhuri;
DP-RAG, Grislain) answers what many documents say and refuses what one document says. This
datastore holds both kinds of fact:

- ``private``: the 48 documents of ``rag_qa_large.jsonl`` (``demo-qa-large``), unchanged; each
  answer is in its own document only (a person's record);
- ``common``: 240 short everyday documents (newsletters, notices, handbook extracts, minutes,
  FAQs...) of five of the same organisations, written from the sentence templates below, in
  which 10 facts of those organisations (a head office's town, a canteen's name, a helpdesk
  extension...) are each stated in at least 40 documents (an organisation's common knowledge).

``documents.jsonl`` holds every document (``id``, ``text``, ``fact``); ``questions.jsonl``
(``demo-datastore``) holds questions in ``rag_qa_large.jsonl``'s format plus ``fact``: those of
``rag_qa_large.jsonl`` whose gold document BM25 ranks first in the whole datastore, and 3
questions per common fact; each question's ``documents`` are its top BM25 document
(:class:`ctxleak.mitigations.bm25.BM25`) with its score: one document a 135M model can
read. Everything is fictional: no real people, e-mail only at ``example.org``/``.com``, no
phone numbers in the new documents.

Deterministic (``random.Random(SEED)``), standard library and ctxleak only, no network.
``python scripts/make_demo_datastore.py`` writes the folder and prints a summary; ``--check`` only
says whether the committed files are what this script writes. The script asserts its own
invariants; ``tests/test_demo_datastore.py`` checks the committed files.
"""

from __future__ import annotations

import argparse
import functools
import json
import random
import re
import string
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))  # run from a checkout without installing

from ctxleak.mitigations.bm25 import BM25  # noqa: E402

DEMO = ROOT / "src" / "ctxleak" / "data" / "demo"
OUT = DEMO / "datastore"
SOURCE = DEMO / "rag_qa_large.jsonl"
SEED = 2025
DOCS_PER_ORG = 48
MIN_STATING = 40  # documents that state each common fact, at least
MIN_WORDS, MAX_WORDS = 30, 70
TOP_K = 1
MIN_PRIVATE = 64

MONTHS = ("January", "February", "March", "June", "July", "August", "September", "October",
          "November", "December")
WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday")


@dataclass(frozen=True)
class Fact:
    key: str
    answer: str
    statements: tuple[str, ...]  # each states the answer, worded differently
    questions: tuple[str, ...]   # each asks for it without giving it away


@dataclass(frozen=True)
class Org:
    prefix: str
    kind: str  # the group of its private documents in rag_qa_large.jsonl
    headers: tuple[tuple[str, str], ...]  # (genre, first line)
    facts: tuple[Fact, Fact]
    filler: tuple[str, ...]  # everyday sentences that state no common fact


ORGS = (
    Org("calloway", "hr", (
        ("newsletter", "Calloway Freight staff newsletter, {month} issue."),
        ("notice", "Calloway Freight, notice to all staff."),
        ("handbook", "Calloway Freight staff handbook, section {sec}."),
        ("minutes", "Calloway Freight, minutes of the staff forum, {day} {month}."),
        ("rota", "Calloway Freight, driver rota update for {month}."),
        ("faq", "Calloway Freight, questions from recent starters."),
        ("welcome", "Calloway Freight, welcome pack for agency drivers."),
        ("bulletin", "Calloway Freight noticeboard, {weekday} bulletin."),
    ), (
        Fact("calloway-head-office", "Harwich", (
            "Calloway Freight's head office is in Harwich.",
            "Our head office in Harwich handles all payroll questions.",
            "Post for the directors should be sent to the head office in Harwich.",
            "The quarterly review takes place at head office in Harwich.",
            "Calloway Freight has been run from its Harwich head office since 1987.",
            "Parking at the Harwich head office is tight, so please share a car when you visit.",
            "Our headquarters are in Harwich, beside the ferry port.",
            "Head office staff in Harwich may work flexible hours.",
        ), (
            "In which town is Calloway Freight's head office?",
            "Where are Calloway Freight's headquarters?",
            "Which town is the Calloway Freight head office in?",
        )),
        Fact("calloway-canteen", "The Galley", (
            "The staff canteen is called The Galley.",
            "Lunch is served in The Galley, our staff canteen, from 12:00 to 14:00.",
            "The Galley, the staff canteen, now has a vegetarian dish every day.",
            "Hot breakfasts are back in The Galley from 7:00.",
            "Please clear your trays in The Galley so the canteen team can close on time.",
            "Leaving cards can be signed at the till in The Galley.",
            "The canteen, The Galley, takes card payments only.",
            "Friday is curry day in The Galley.",
        ), (
            "What is the staff canteen at Calloway Freight called?",
            "What is the name of Calloway Freight's canteen?",
            "Where is lunch served at Calloway Freight?",
        )),
    ), (
        "Drivers must complete their tachograph checks before every shift.",
        "The cycle-to-work scheme reopens for applications in March.",
        "Hi-vis vests are compulsory in every yard, at all times.",
        "Fuel cards must be kept in the cab, never in a wallet.",
        "The charity fun run supports the local lifeboat crew.",
        "Toolbox talks on safe coupling run every Monday morning.",
        "Holiday requests go through the staff portal at least two weeks ahead.",
        "Broken pallets go in the marked skip, not the general waste.",
        "Twelve curtain-side trailers join the fleet this autumn.",
        "Please report any near miss to the yard manager the same day.",
        "Drivers' hours rules apply to agency drivers too.",
        "Eco-driving tip: ease off early and let the lorry roll to the lights.",
        "The People team answers questions at people@calloway.example.com.",
        "Payslips are on the staff portal from the 25th of each month.",
        "Defect sheets must be handed in at the end of each run.",
        "Long-service awards will be presented at the winter gathering.",
        "The night shift's quiz team won the cup again.",
    )),
    Org("brightwater", "it", (
        ("newsletter", "Brightwater Analytics team newsletter, {month}."),
        ("notice", "Brightwater Analytics, notice to all staff."),
        ("handbook", "Brightwater Analytics staff handbook, section {sec}."),
        ("minutes", "Brightwater Analytics, minutes of the team leads' meeting, {day} {month}."),
        ("faq", "Brightwater Analytics, frequently asked questions for starters."),
        ("welcome", "Brightwater Analytics, welcome email for {weekday} starters."),
        ("digest", "Brightwater Analytics, {weekday} digest."),
        ("reminder", "Brightwater Analytics, reminders for {month}."),
    ), (
        Fact("brightwater-helpdesk", "4410", (
            "The IT helpdesk is on extension 4410.",
            "For a locked laptop, ring the helpdesk on extension 4410.",
            "The helpdesk, extension 4410, is staffed from 8:00 to 18:00 on weekdays.",
            "Printer jams and broken chargers go to the helpdesk on 4410.",
            "Starters collect their laptop after ringing the IT helpdesk on 4410.",
            "Dial 4410 for the IT helpdesk if the ticket portal is down.",
            "The helpdesk extension, 4410, is printed on the back of every badge.",
            "Lost a phone with company email on it? Tell the helpdesk on 4410 at once.",
        ), (
            "What is the extension of Brightwater Analytics' IT helpdesk?",
            "Which extension do Brightwater Analytics staff ring for the helpdesk?",
            "What number reaches the IT helpdesk at Brightwater Analytics?",
        )),
        Fact("brightwater-intranet", "Beacon", (
            "The staff intranet is called Beacon.",
            "Expense forms are on Beacon, the intranet.",
            "The holiday calendar now lives on Beacon, our intranet.",
            "Read the full policy on the intranet, Beacon, under People.",
            "Beacon, the company intranet, has a faster search box.",
            "Team pages on Beacon, the intranet, are updated every Monday.",
            "Log in to Beacon, our intranet, with your usual network details.",
        ), (
            "What is the Brightwater Analytics staff intranet called?",
            "What is the name of the intranet at Brightwater Analytics?",
            "On which intranet do Brightwater Analytics staff find expense forms?",
        )),
    ), (
        "The quarterly all-hands is streamed for remote colleagues.",
        "Please lock your screen whenever you leave your laptop.",
        "Data science brown-bag talks run at 12:30 on Wednesdays.",
        "Customer dashboards get a fresh colour theme this autumn.",
        "Phishing tests are sent at random; report anything suspicious.",
        "Bikes may be parked in the basement rack.",
        "The analytics guild meets to share notebooks and tips.",
        "Please log your hours against the right project number.",
        "Monitors and keyboards can be borrowed for home working.",
        "Hot-desking bookings open seven days ahead.",
        "Two-factor login is now required for every tool.",
        "The data team is hiring two analysts; referrals earn a bonus.",
        "Quarterly objectives are due to team leads by the end of each quarter.",
        "Please keep client data out of personal notes and chats.",
        "The office plants are watered on Fridays; leave them be.",
        "Questions about payroll go to people@brightwater.example.com.",
    )),
    Org("halvorsen", "lab", (
        ("newsletter", "Halvorsen Institute newsletter, {month} edition."),
        ("notice", "Halvorsen Institute, notice to all staff and students."),
        ("handbook", "Halvorsen Institute lab handbook, chapter {sec}."),
        ("minutes", "Halvorsen Institute, minutes of the lab managers' meeting, {day} {month}."),
        ("faq", "Halvorsen Institute, questions from visiting researchers."),
        ("induction", "Halvorsen Institute, induction sheet for PhD students."),
        ("bulletin", "Halvorsen Institute, {weekday} bulletin."),
    ), (
        Fact("halvorsen-safety-week", "19 May", (
            "The annual safety week starts on 19 May.",
            "Safety week begins on 19 May, with spot checks in every lab.",
            "Mark 19 May in your diary: safety week opens with a talk in the atrium.",
            "From 19 May, safety week brings daily drills and glove-box checks.",
            "Group leaders should plan experiments around safety week, which starts on 19 May.",
            "Safety week runs from 19 May; every lab must update its risk assessments first.",
            "Posters for safety week, starting 19 May, are in the print queue.",
        ), (
            "When does the Halvorsen Institute's annual safety week start?",
            "On what date does safety week begin at the Halvorsen Institute?",
            "What is the opening day of safety week at Halvorsen?",
        )),
        Fact("halvorsen-seminars", "Orrin Theatre", (
            "Friday seminars are held in the Orrin Theatre.",
            "The seminar series meets in the Orrin Theatre at 16:00 every Friday.",
            "Seminars are back in the Orrin Theatre after the refit.",
            "Coffee is served outside the Orrin Theatre before each seminar.",
            "Speakers should test their slides in the Orrin Theatre before the seminar.",
            "The Friday seminar, in the Orrin Theatre, is open to all staff.",
            "Recordings of seminars given in the Orrin Theatre are on the shared drive.",
        ), (
            "Where are the Halvorsen Institute's Friday seminars held?",
            "In which venue does the Halvorsen seminar series meet?",
            "Where should Halvorsen Institute staff go for the weekly seminar?",
        )),
    ), (
        "Liquid nitrogen deliveries arrive on Tuesday mornings.",
        "Lab coats must be worn in all wet labs, and never in the cafe.",
        "Waste solvents go in the labelled drums in the yard, not down the sink.",
        "The pipette calibration team visits twice a year.",
        "Booking sheets for the shared centrifuges are on the corridor board.",
        "Please return borrowed reagents to the shared shelf.",
        "The postdoc forum wants volunteers to organise the winter social.",
        "Eye protection is compulsory wherever chemicals are handled.",
        "Visiting researchers need a badge from reception on their first day.",
        "Please label every bottle with your initials and the date.",
        "Autoclave runs can be booked in two-hour slots.",
        "The institute's writing retreat takes place each autumn.",
        "Spills must be reported to the lab manager within the hour.",
        "Gas cylinders must be chained upright at all times.",
        "Questions about courses go to courses@halvorsen.example.org.",
        "The greenhouse is locked at 18:00 on weekdays.",
    )),
    Org("esterbrook", "council", (
        ("newsletter", "Esterbrook Town Council residents' newsletter, {month}."),
        ("notice", "Esterbrook Town Council, public notice."),
        ("guide", "Esterbrook Town Council, guide for residents, page {sec}."),
        ("minutes", "Esterbrook Town Council, minutes of the finance committee, {day} {month}."),
        ("faq", "Esterbrook Town Council, frequently asked questions."),
        ("website", "Esterbrook Town Council website, residents' page."),
        ("leaflet", "Esterbrook Town Council, leaflet for households."),
    ), (
        Fact("esterbrook-meetings", "Corn Exchange", (
            "Full council meetings are held in the Corn Exchange.",
            "The council meets in the Corn Exchange on the second Tuesday of each month.",
            "The public gallery of the Corn Exchange seats forty people during council meetings.",
            "Residents may speak for three minutes at council meetings in the Corn Exchange.",
            "Agendas are pinned up at the Corn Exchange seven days before each council meeting.",
            "Council meetings at the Corn Exchange begin at 19:00.",
            "Step-free access to council meetings is by the side entrance of the Corn Exchange.",
        ), (
            "Where does Esterbrook Town Council hold its full council meetings?",
            "Which building hosts the meetings of Esterbrook Town Council?",
            "Where can Esterbrook residents watch a council meeting?",
        )),
        Fact("esterbrook-recycling", "Sedgewick Road", (
            "The household recycling centre is on Sedgewick Road.",
            "Green waste can be taken to the recycling centre on Sedgewick Road.",
            "The Sedgewick Road recycling centre stays open until 20:00 on Thursdays.",
            "Bring proof of address to use the recycling centre on Sedgewick Road.",
            "Old paint and batteries are accepted at the Sedgewick Road recycling centre.",
            "The recycling centre on Sedgewick Road is closed on Christmas Day.",
            "Vans need a permit at the household recycling centre, Sedgewick Road.",
        ), (
            "Where is Esterbrook's household recycling centre?",
            "On which street is the Esterbrook recycling centre?",
            "Where can Esterbrook residents take their green waste?",
        )),
    ), (
        "Bin collections move by one day in bank holiday weeks.",
        "Allotment plots are available, with a short waiting list.",
        "Report potholes and broken streetlights through the council website.",
        "The Christmas lights go on in the market place in early December.",
        "Dog fouling fines have risen to 100 pounds.",
        "The community grants scheme opens in September.",
        "The cemetery gates are locked at dusk.",
        "Volunteers are wanted for the spring litter pick.",
        "The market runs every Saturday in the High Street.",
        "Hanging baskets on the High Street are sponsored by local shops.",
        "Parking in the High Street is free after 18:00.",
        "The youth club meets in the scout hut on Wednesday evenings.",
        "Please keep drains clear of leaves in autumn.",
        "The council's accounts are open for public inspection each July.",
        "Tree works on the green are planned for the winter.",
        "Questions can be sent to clerk@esterbrook.example.org.",
        "Grit bins are refilled before the first frost.",
    )),
    Org("staldric", "school", (
        ("newsletter", "St Aldric's Primary School newsletter, {month}."),
        ("letter", "St Aldric's Primary School, letter to parents and carers."),
        ("handbook", "St Aldric's Primary School, parents' handbook, page {sec}."),
        ("minutes", "St Aldric's Primary School, minutes of the governors' meeting, {day} {month}."),
        ("faq", "St Aldric's Primary School, questions from families joining Reception."),
        ("website", "St Aldric's Primary School website, information page."),
        ("reminder", "St Aldric's Primary School, {weekday} reminder."),
    ), (
        Fact("staldric-headteacher", "Ellery Banbridge", (
            "Our headteacher is Mr Ellery Banbridge.",
            "Mr Ellery Banbridge, the headteacher, greets families at the gate each morning.",
            "Appointments with the headteacher, Mr Ellery Banbridge, are made through the office.",
            "The headteacher, Mr Ellery Banbridge, thanks everyone who helped at the book sale.",
            "Signed, Mr Ellery Banbridge, headteacher.",
            "Please address letters about absence to the headteacher, Mr Ellery Banbridge.",
            "Mr Ellery Banbridge has been headteacher since 2016.",
        ), (
            "Who is the headteacher of St Aldric's Primary School?",
            "What is the name of St Aldric's headteacher?",
            "Which headteacher signs the letters from St Aldric's Primary School?",
        )),
        Fact("staldric-uniform", "bottle green", (
            "The school uniform colour is bottle green.",
            "Jumpers and cardigans are bottle green, with the school badge.",
            "PE kit is a white T-shirt and bottle green shorts.",
            "Please label every bottle green jumper with your child's name.",
            "Book bags in bottle green are sold at the school office.",
            "Our uniform is bottle green; plain jumpers from any shop are fine.",
            "Second-hand bottle green uniform is sold after school every Friday.",
        ), (
            "What colour is the St Aldric's Primary School uniform?",
            "What colour are the jumpers at St Aldric's?",
            "In which colour is St Aldric's school uniform?",
        )),
    ), (
        "School starts at 8:50 and the gates open at 8:40.",
        "Please tell the office by 9:30 if your child is absent.",
        "Nuts are not allowed in packed meals.",
        "The school choir sings at the harvest concert in October.",
        "Parents' evenings are held in November; booking opens online.",
        "Water bottles should be named and brought in every day.",
        "Homework clubs run on Tuesdays until 16:30.",
        "The PTA disco raised enough for playground equipment.",
        "Please do not stop on the zigzag lines outside the gates.",
        "Nits are going around; please check hair weekly.",
        "Swimming lessons continue every Thursday.",
        "Flu spray forms are due back by the end of October.",
        "The book sale raised 320 pounds for the classrooms.",
        "Wet weather: children need a coat every day.",
        "Club letters for the spring term are in book bags.",
        "Questions can be sent to office@staldric.example.org.",
    )),
)

_PUNCTUATION = set(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")


@functools.lru_cache(maxsize=None)
def normalize(text: str) -> str:
    """SQuAD's normalisation (``ctxleak.methods.tradeoff.utility.normalize_answer``): lower
    case, no punctuation, no articles, single spaces."""
    text = "".join(ch for ch in text.lower() if ch not in _PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def states(text: str, answer: str) -> bool:
    """Whether ``text`` holds ``answer`` as whole words (both normalised)."""
    return f" {normalize(answer)} " in f" {normalize(text)} "


def fill(template: str, rng: random.Random) -> str:
    return template.format(month=rng.choice(MONTHS), weekday=rng.choice(WEEKDAYS),
                           day=rng.randint(1, 28), sec=rng.randint(2, 14))


def old_data() -> tuple[list[dict[str, str]], list[dict[str, object]]]:
    """rag_qa_large.jsonl's documents (in the order their questions first name them as gold)
    and its questions."""
    with open(SOURCE, encoding="utf-8") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    texts = {d["id"]: d["text"] for row in rows for d in row["documents"]}
    order = list(dict.fromkeys(row["gold"] for row in rows))
    assert set(order) == set(texts), "every old document is some question's gold"
    return [{"id": i, "text": texts[i], "fact": "private"} for i in order], rows


def org_documents(org: Org, rng: random.Random, seen: set[str]) -> list[dict[str, str]]:
    """``DOCS_PER_ORG`` everyday documents of ``org``: a header, its facts' statements (both
    facts in 6 of every 8 documents, one fact in the others) and filler, shuffled."""
    out = []
    for i in range(DOCS_PER_ORG):
        which = {6: (0,), 7: (1,)}.get(i % 8, (0, 1))
        genre, header = org.headers[i % len(org.headers)]
        for _ in range(1000):
            body = [fill(rng.choice(org.facts[f].statements), rng) for f in which]
            filler = [fill(s, rng) for s in rng.sample(org.filler, len(org.filler))]
            body += filler[:rng.randint(1, 3)]
            rng.shuffle(body)
            text = " ".join([fill(header, rng), *body])
            while len(text.split()) < MIN_WORDS and filler:
                text += " " + filler.pop()
            if MIN_WORDS <= len(text.split()) <= MAX_WORDS and text not in seen:
                break
        else:
            raise AssertionError(f"no new document for {org.prefix} {i}")
        seen.add(text)
        out.append({"id": f"{org.prefix}-{genre}-{i + 1:02d}", "text": text, "fact": "common"})
    return out


def retrieved(index: BM25, query: str) -> list[dict[str, object]]:
    return [{"id": index.documents[i][0], "text": index.documents[i][1], "score": score}
            for i, score in index.search(query, TOP_K)]


def build() -> tuple[dict[str, str], list[str]]:
    """The two files' texts and the summary lines."""
    rng = random.Random(SEED)
    private_docs, old_rows = old_data()
    seen = {d["text"] for d in private_docs}
    common_docs = [d for org in ORGS for d in org_documents(org, rng, seen)]
    docs = private_docs + common_docs
    index = BM25(tuple((d["id"], d["text"]) for d in docs))
    facts = [(org, fact) for org in ORGS for fact in org.facts]

    # invariants of the documents
    assert len(docs) >= 256 and len(common_docs) >= 208, len(docs)
    assert len({d["id"] for d in docs}) == len(docs)
    for d in common_docs:
        n = len(d["text"].split())
        assert MIN_WORDS <= n <= MAX_WORDS, (d["id"], n)
        for email in re.findall(r"\S+@\S+", d["text"]):
            assert re.search(r"@[a-z.]+\.example\.(com|org|net)\.?$", email), email
    stating: dict[str, list[str]] = {}
    for _, fact in facts:
        holders = [d["id"] for d in docs if states(d["text"], fact.answer)]
        assert len(holders) >= MIN_STATING, (fact.key, len(holders))
        assert all(h in {c["id"] for c in common_docs} for h in holders), fact.key
        assert 1 <= len(fact.answer.split()) <= 3, fact.key
        stating[fact.key] = holders
    for row in old_rows:
        holders = [d["id"] for d in docs if states(d["text"], str(row["reference"]))]
        assert holders == [row["gold"]], (row["id"], holders)
        assert normalize(str(row["reference"])) not in normalize(str(row["query"])), row["id"]

    # the questions
    private_q: list[dict[str, object]] = []
    missed: list[str] = []
    for row in old_rows:
        documents = retrieved(index, str(row["query"]))
        q = {k: row[k] for k in ("id", "kind", "task", "query", "reference", "gold")}
        if any(d["id"] == row["gold"] for d in documents):
            private_q.append({**q, "documents": documents, "fact": "private"})
        else:
            missed.append(str(row["id"]))
    common_q: list[dict[str, object]] = []
    answered = 0
    for org, fact in facts:
        for query in fact.questions:
            assert normalize(fact.answer) not in normalize(query), query
            documents = retrieved(index, query)
            holders = [str(d["id"]) for d in documents if d["id"] in stating[fact.key]]
            answered += bool(holders)
            common_q.append({"id": f"common-{len(common_q) + 1:03d}", "kind": org.kind,
                             "task": "qa", "query": query, "reference": fact.answer,
                             "gold": holders[0] if holders else stating[fact.key][0],
                             "documents": documents, "fact": "common"})
    assert len(private_q) >= MIN_PRIVATE and len(common_q) >= 24
    assert {q["kind"] for q in private_q} == {r["kind"] for r in old_rows}
    assert answered == len(common_q), "a common question retrieves no document stating it"
    questions = private_q + common_q
    rng.shuffle(questions)  # a --limit takes both kinds

    per_fact = Counter({key: len(ids) for key, ids in stating.items()})
    summary = [
        f"documents: {len(docs)} ({len(private_docs)} private, {len(common_docs)} common, "
        f"{min(len(d['text'].split()) for d in common_docs)}-"
        f"{max(len(d['text'].split()) for d in common_docs)} words each)",
        f"common facts: {len(facts)}, stated in {min(per_fact.values())}-"
        f"{max(per_fact.values())} documents each",
        f"private questions: gold document in the top {TOP_K} for "
        f"{len(private_q)}/{len(old_rows)} of rag_qa_large's "
        f"({100 * len(private_q) / len(old_rows):.0f} %), kept; left out: "
        f"{', '.join(missed) or 'none'}",
        f"common questions: {len(common_q)}, a retrieved document states the reference for "
        f"{answered}/{len(common_q)}",
        f"questions: {len(questions)}",
    ]
    files = {
        "documents.jsonl": "".join(json.dumps(d, ensure_ascii=False) + "\n" for d in docs),
        "questions.jsonl": "".join(json.dumps(q, ensure_ascii=False) + "\n" for q in questions),
        # the operator's classes for ctxleak serve --classes demo-datastore: common facts are
        # public (never charged, in every prompt), a person's record is restricted
        "classes.jsonl": "".join(json.dumps({"id": d["id"], "class": CLASS_OF[d["fact"]]})
                                 + "\n" for d in docs),
    }
    return files, summary


#: Each document's class in classes.jsonl, by its fact.
CLASS_OF = {"common": "public", "private": "restricted"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--out", type=Path, default=OUT, help="folder to write (default: %(default)s)")
    parser.add_argument("--check", action="store_true",
                        help="only compare the folder with what this script writes")
    args = parser.parse_args(argv)
    files, summary = build()
    print("\n".join(summary))
    if args.check:
        stale = [n for n, text in files.items()
                 if not (args.out / n).is_file() or (args.out / n).read_bytes() != text.encode()]
        print("stale: " + ", ".join(stale) if stale else "up to date")
        return 1 if stale else 0
    args.out.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (args.out / name).write_bytes(text.encode())
    print(f"wrote {', '.join(files)} to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
