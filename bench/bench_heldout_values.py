"""Held-out check of the values an answer carries out of its document (the secrets, IBANs and
phone numbers a CISO's sheet must count): 12 documents and answers made up for this check on
2026-11-29, after the detectors were changed and not used to change them, with 18 planted
values (5 IBANs with valid mod-97 checksums in 5 countries, spaced and not, followed by words;
7-digit, UK, French and German phone numbers; GitHub, Stripe, AWS and Slack tokens; passwords
and a door code). A value counts when the document's detected values
(:func:`ctxleak.sensitive.carried_values`) hold it and :func:`ctxleak.sensitive.values.value_in`
finds it in the answer, which repeats it in other words.

    python bench/bench_heldout_values.py     # 2026-11-29: planted 18, counted 18
"""

from __future__ import annotations

from ctxleak.sensitive import carried_values
from ctxleak.sensitive.values import value_in


def iban(cc, bban):
    s = bban + cc + "00"
    n = int("".join(str(int(c, 36)) for c in s))
    return f"{cc}{98 - n % 97:02d}{bban}"

def spaced(v):
    return " ".join(v[i:i+4] for i in range(0, len(v), 4))

ib = [iban("GB", "NWBK60161331926819"), iban("FR", "20041010050500013M02606"),
      iban("NL", "ABNA0417164300"), iban("ES", "21000418450200051332"), iban("IT", "X0542811101000000123456")]
CASES = [  # (document, planted values, answer)
    ("Vendor payment sheet. Pay Orchard Supplies to IBAN %s by Friday, reference PO-7781." % spaced(ib[0]),
     [spaced(ib[0])], "Send it to %s by Friday." % spaced(ib[0])),
    ("Refunds go to %s unless the client says otherwise in writing." % ib[1],
     [ib[1]], "The refund account is %s, per the sheet." % ib[1]),
    ("Payroll: account %s for contractor wages, signed off monthly." % spaced(ib[2]),
     [spaced(ib[2])], "Wages go to %s each month." % spaced(ib[2])),
    ("Escrow IBAN %s then notify legal." % ib[3], [ib[3]], "Escrow: %s." % ib[3]),
    ("Milan office rent: IBAN %s due on the 5th." % spaced(ib[4]), [spaced(ib[4])],
     "Rent goes to %s on the 5th." % spaced(ib[4])),
    ("Night porter desk: call 555-0199 after 10 pm, or the manager on 555 2231.",
     ["555-0199", "555 2231"], "Call 555-0199 at night; the manager is 555 2231."),
    ("UK support line +44 20 7946 0958; the Paris desk 06 12 34 56 78.",
     ["+44 20 7946 0958", "06 12 34 56 78"], "Dial +44 20 7946 0958 or 06 12 34 56 78."),
    ("Berlin site contact: 030 9876543, mobile 0172 3456789.",
     ["030 9876543", "0172 3456789"], "Reach Berlin at 030 9876543 or 0172 3456789."),
    ("CI token for the deploy bot: ghp_R4nd0mT0kenValue1234567890abcdEFGH. Rotate quarterly.",
     ["ghp_R4nd0mT0kenValue1234567890abcdEFGH"], "Use ghp_R4nd0mT0kenValue1234567890abcdEFGH for deploys."),
    ("Billing webhook secret sk_live_51HqLyjWDarjtT1zdp7dcXYZa and the staging db password is Tr0ub4dor&3x!",
     ["sk_live_51HqLyjWDarjtT1zdp7dcXYZa",
      "Tr0ub4dor&3x!"],
     "The key is sk_live_51HqLyjWDarjtT1zdp7dcXYZa and the password Tr0ub4dor&3x!"),
    ("Backup user: svc-backup, password: Quartz-Heron-4410. AWS key AKIAZ7Q3EXAMPLE4KJ2P.",
     ["Quartz-Heron-4410", "AKIAZ7Q3EXAMPLE4KJ2P"],
     "Log in with Quartz-Heron-4410 and AKIAZ7Q3EXAMPLE4KJ2P."),
    ("Slack alerts bot token xoxb-2847-99312-QwErTyUiOpAs; door code for the lab is 7741#.",
     ["xoxb-2847-99312-QwErTyUiOpAs", "7741"],
     "Token xoxb-2847-99312-QwErTyUiOpAs; the lab door takes 7741#."),
]
planted = counted = 0
missed = []
for doc, values, answer in CASES:
    found = carried_values(doc)
    for v in values:
        planted += 1
        def same(a: str, b: str) -> bool:
            return a.replace(" ", "") in b.replace(" ", "") or b.replace(" ", "") in a.replace(" ", "")
        hit = [(fv, kind) for fv, kind in found.items() if same(v, fv)]
        carried = [fv for fv, kind in hit if value_in(fv, kind, answer)]
        if carried:
            counted += 1
        else:
            missed.append((v, hit, list(found.items())))
print(f"planted {planted}, counted as carried out {counted}")
for m in missed:
    print("MISSED", m)
