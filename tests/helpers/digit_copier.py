"""The digit-copying tiny Llama now ships with the conformance checks
(:mod:`ctxleak.testing.digit_copier`); the tests import it from here as before."""

from ctxleak.testing.digit_copier import DIGITS, SPECIAL, WORDS, digit_copier, digit_tokenizer

__all__ = ["DIGITS", "SPECIAL", "WORDS", "digit_copier", "digit_tokenizer"]
