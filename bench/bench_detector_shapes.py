"""Detectors on adversarial text shapes: each shape's detection time as a ratio to prose of the
same size (the reliability bar: at most 10x on any 20 KB input).

About 25 shapes made up for this bench (held out from the tests, which build their own): long
digit runs, repeated separators, e-mail-like and base64-like runs, plus signs, spaced digits,
dotted numbers, IBAN-like runs, repeated titles, key=value chains, nested brackets, digits of
other scripts, zero-width characters, CJK text, and so on. Each text is new to the process (the
detectors cache per text), the engines are loaded before timing, and each time is the least of
``--repeat`` runs of processor time.

    python bench/bench_detector_shapes.py [--size 20000] [--repeat 1] [--only NAME ...]
        [--unit TEXT ...] [--detector find_sensitive|find_pii]

``--unit`` adds shapes of your own (a unit repeated to the size; ``\n`` for a line break), so
that shapes made up after the detectors changed can be timed beside these. In a unit, ``{n}``
is drawn anew at each repetition as a number of 1 to 5 digits, ``{z}`` as five digits and
``{S}`` as a US state's two letters (``"{n} N {S} "``: random street numbers and states, which
no cache of repeated text can serve).

Prints, per shape, seconds and the ratio to prose for :func:`ctxleak.sensitive.find_sensitive`
(the audit's and ``--redact``'s detectors) and :func:`ctxleak.sensitive.detect.find_pii` (the
e-mail, phone and address finders that build the PII-extraction attack's records), then the
worst and the median ratio.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from collections.abc import Callable

PROSE = ("The quarterly review went well overall. Our team shipped the new onboarding flow, and "
         "customers in three regions reported fewer support tickets than last spring. Marketing "
         "wants a shorter launch checklist, while finance asked that travel be booked at least "
         "two weeks ahead. Please read the attached notes before the planning meeting on "
         "Thursday, and bring any questions about the roadmap or the hiring plan. ")

#: name -> a unit repeated to the size (or a function of the size)
SHAPES: dict[str, str | Callable[[int], str]] = {
    "digit run": "7",
    "digits, one space": "4 ",
    "one-dash chain": "1-",
    "dotted numbers": "12.",
    "at-sign chain": "a@",
    "e-mail-like dots": "x.",
    "plus signs": "+",
    "plus and digits": "+1 ",
    "base64-like run": "Qm9vayBvZiBrZXlz",
    "hex run": "9f8e7d6c5b4a",
    "IBAN-like run": "DE12 3456 ",
    "letters and digits": "AB12",
    "repeated title": "Mr. ",
    "title and capital": "Dr Ann ",
    "key=value chain": "k=v;",
    "colon chain": "password: ",
    "nested brackets": lambda n: "(" * (n // 2) + ")" * (n // 2),
    "square brackets, digits": "[1]",
    "Arabic-Indic digits": "\u0661\u0662\u0663 ",
    "full-width digits": "\uff11\uff12\uff13\uff14-",
    "zero-width between letters": "a\u200b",
    "CJK without spaces": "\u5c71\u7530\u592a\u90ce\u69d8",
    "Hangul and honorific": "\uae40\ubbfc\uc900 \uc528 ",
    "money signs": "$1,",
    "comma and spaces": ", ",
    "slash dates": "1/2/",
    "newlines and digits": "12\n",
    "single letters spaced": "a b ",
    "ZIP-like": "94043 CA ",
}


STATES = ("AL AK AZ AR CA CO CT DE FL GA HI ID IL IN IA KS KY LA ME MD MA MI MN MS MO MT NE NV "
          "NH NJ NM NY NC ND OH OK OR PA RI SC SD TN TX UT VT VA WA WV WI WY DC").split()


def draw(unit: str, rng: random.Random) -> str:
    """One repetition of ``unit``: each ``{n}``, ``{z}`` and ``{S}`` drawn anew."""
    parts = unit.split("{")
    out = [parts[0]]
    for part in parts[1:]:
        key, _, rest = part.partition("}")
        value = {"n": lambda: str(rng.randint(1, 10 ** rng.randint(1, 5) - 1)),
                 "z": lambda: f"{rng.randrange(100_000):05d}",
                 "S": lambda: rng.choice(STATES)}.get(key)
        out.append((value() if value else "{" + part.partition("}")[0] + "}") + rest)
    return "".join(out)


def build(shape: str | Callable[[int], str], size: int, salt: int) -> str:
    """``size`` characters of the shape, a unique tag at the end (each text new to caches)."""
    tag = f" #{salt}"
    if callable(shape):
        return shape(size - len(tag)) + tag
    if any(key in shape for key in ("{n}", "{z}", "{S}")):
        rng, units, length = random.Random(salt), [], 0
        while length < size:
            units.append(draw(shape, rng))
            length += len(units[-1])
        return "".join(units)[:size - len(tag)] + tag
    return (shape * (size // len(shape) + 1))[:size - len(tag)] + tag


def seconds(detect: Callable[[str], object], text: str, repeat: int, salt: list[int]) -> float:
    best = float("inf")
    for _ in range(repeat):
        salt[0] += 1
        fresh = text + f"{salt[0]}"
        start = time.process_time()
        detect(fresh)
        best = min(best, time.process_time() - start)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=20_000, help="characters per text")
    parser.add_argument("--repeat", type=int, default=1, help="runs per text (least shown)")
    parser.add_argument("--only", nargs="*", help="shapes to run (default: all)")
    parser.add_argument("--unit", nargs="*", default=[], help="more shapes: units to repeat")
    parser.add_argument("--detector", nargs="*", choices=["find_sensitive", "find_pii"],
                        help="detectors to time (default: both)")
    args = parser.parse_args()
    shapes = dict(SHAPES)
    for unit in args.unit:
        shapes[f"unit {unit!r}"] = unit.replace("\\n", "\n")

    from ctxleak.sensitive import find_sensitive
    from ctxleak.sensitive.detect import find_pii

    detectors: dict[str, Callable[[str], object]] = {
        name: fn for name, fn in (("find_sensitive", find_sensitive), ("find_pii", find_pii))
        if not args.detector or name in args.detector}
    find_pii("warm up: 12 Main St, Springfield, IL 62701")
    find_sensitive("warm up: Ann Lee, ann@example.org, +1 415 555 0142, password: x7Y!q2")
    salt = [0]
    prose = build(PROSE, args.size, 0)
    base = {name: seconds(fn, prose, max(2, args.repeat), salt) for name, fn in detectors.items()}
    print(f"{args.size} characters; prose: " + ", ".join(
        f"{name} {s:.2f} s" for name, s in base.items()))
    ratios: dict[str, list[float]] = {name: [] for name in detectors}
    print(f"{'shape':32s}" + "".join(f"{name:>28s}" for name in detectors))
    for shape_name, shape in shapes.items():
        if args.only and shape_name not in args.only and shape_name not in (
                f"unit {u!r}" for u in args.unit):
            continue
        text = build(shape, args.size, 1)
        cells = []
        for name, fn in detectors.items():
            s = seconds(fn, text, args.repeat, salt)
            ratios[name].append(s / base[name])
            cells.append(f"{s:10.2f} s {s / base[name]:8.2f}x")
        print(f"{shape_name:32s}" + "".join(f"{c:>28s}" for c in cells), flush=True)
    for name, rs in ratios.items():
        if rs:
            print(f"{name}: worst {max(rs):.2f}x, median {statistics.median(rs):.2f}x "
                  f"over {len(rs)} shapes")


if __name__ == "__main__":
    main()
