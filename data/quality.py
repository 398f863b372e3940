"""Document quality rules (Gopher, Rae et al. 2021), each named with its threshold in this one place.

A document is dropped by the first rule it fails; the clean report counts drops per rule name.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

STOP_WORDS = frozenset({"the", "be", "to", "of", "and", "that", "have", "with"})
SYMBOLS = ("#", "...", "\u2026")


@dataclass(frozen=True)
class Rule:
    name: str
    threshold: float
    describe: str
    passes: Callable[["Stats", float], bool]


@dataclass(frozen=True)
class Stats:
    """What the rules look at, computed once per document."""

    words: int
    mean_word_length: float
    symbol_ratio: float
    alphabetic_fraction: float
    stop_words: int
    duplicate_line_fraction: float

    @classmethod
    def of(cls, text: str) -> "Stats":
        words = text.split()
        n = len(words) or 1
        lines = [line for line in text.split("\n") if line.strip()]
        duplicates = len(lines) - len(set(lines))
        return cls(
            words=len(words),
            mean_word_length=sum(map(len, words)) / n,
            symbol_ratio=sum(text.count(s) for s in SYMBOLS) / n,
            alphabetic_fraction=sum(any(c.isalpha() for c in w) for w in words) / n,
            stop_words=sum(w.strip(".,;:!?\"'()[]`").lower() in STOP_WORDS for w in words),
            duplicate_line_fraction=duplicates / (len(lines) or 1),
        )


RULES: tuple[Rule, ...] = (
    Rule("min_words", 50, "at least 50 words", lambda s, t: s.words >= t),
    Rule("max_words", 100_000, "at most 100,000 words", lambda s, t: s.words <= t),
    Rule("min_mean_word_length", 3, "mean word length at least 3 characters", lambda s, t: s.mean_word_length >= t),
    Rule("max_mean_word_length", 10, "mean word length at most 10 characters", lambda s, t: s.mean_word_length <= t),
    Rule("max_symbol_ratio", 0.1, "at most 0.1 '#' or ellipses per word", lambda s, t: s.symbol_ratio <= t),
    Rule("min_alphabetic_fraction", 0.8, "at least 80% of words contain a letter",
         lambda s, t: s.alphabetic_fraction >= t),
    Rule("min_stop_words", 2, "at least 2 English stop words (the, be, to, of, and, that, have, with)",
         lambda s, t: s.stop_words >= t),
    Rule("max_duplicate_line_fraction", 0.3, "at most 30% of lines repeat an earlier line",
         lambda s, t: s.duplicate_line_fraction <= t),
)


def failed_rule(text: str) -> str | None:
    """The name of the first rule the document fails, or None if it passes all."""
    stats = Stats.of(text)
    return next((rule.name for rule in RULES if not rule.passes(stats, rule.threshold)), None)
