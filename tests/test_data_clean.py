"""data.clean: repaired, normalised text; BookCorpus sentences grouped into documents; every quality rule
and exact deduplication counted in the report; the same bytes whatever the worker count."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from data.clean import TARGET_WORDS, clean_file, group_sentences, normalise
from data.quality import RULES, failed_rule

PROSE = ("The cat sat on the mat and looked at the garden with a patient and quiet interest, waiting for "
         "the birds to come back to the old tree that stood by the wall. ") * 3  # 90 ordinary words


def test_normalise_repairs_mojibake_composes_nfc_and_tidies_whitespace():
    assert normalise("caf\u00c3\u00a9 cre\u0300me") == "caf\u00e9 cr\u00e8me"  # mojibake repaired, NFD -> NFC
    assert normalise("a\x00b\x07c\x1bd") == "abcd"  # control characters removed
    assert normalise("  one\t\ttwo\u00a0 three  \r\nfour\r\n\r\n\r\n\r\nfive \n") == "one two three\nfour\n\nfive"
    assert normalise("\u201cquoted\u201d \U0001F468\u200D\U0001F469") == "\u201cquoted\u201d \U0001F468\u200D\U0001F469"


def test_sentences_become_documents_of_the_target_word_count():
    sentences = [f"word{i} " * 10 for i in range(130)]  # 1,300 words
    docs = group_sentences([s.strip() for s in sentences])
    assert [len(d.split()) for d in docs] == [TARGET_WORDS + 8, TARGET_WORDS + 8, 1300 - 2 * (TARGET_WORDS + 8)]
    assert group_sentences(["a b", "", "c"]) == ["a b c"]
    tail = group_sentences(["w " * TARGET_WORDS, "short tail"])
    assert len(tail) == 1  # a tail under half the target joins the last document


RULE_BREAKERS = {
    "min_words": "Too short to keep, with the and of.",
    "max_words": None,
    "min_mean_word_length": "a b c d e f the of and to " * 10,
    "max_mean_word_length": "the of " + "incomprehensibilities " * 60,
    "max_symbol_ratio": PROSE + "# " * 20,
    "min_alphabetic_fraction": PROSE + " 123 " * 40,
    "min_stop_words": "Cats sit quietly near gardens watching birds return " * 10,
    "max_duplicate_line_fraction": "\n".join([PROSE] + ["Buy now and save with the offer."] * 5),
}


@pytest.mark.parametrize("rule", [r.name for r in RULES])
def test_each_quality_rule_drops_what_it_names(rule):
    text = RULE_BREAKERS[rule] if RULE_BREAKERS[rule] is not None else "the cat of " * 34_000
    assert failed_rule(normalise(text)) == rule
    assert failed_rule(normalise(PROSE)) is None


def _write(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def test_report_counts_kept_and_dropped_per_rule_and_duplicates(tmp_path):
    raw = _write(tmp_path / "raw.jsonl", [
        {"text": PROSE}, {"text": "  " + PROSE.replace(" ", "  ")},  # the same once normalised: a duplicate
        {"text": RULE_BREAKERS["min_words"]}, {"text": RULE_BREAKERS["min_stop_words"]},
        {"sentences": [f"Part {i}. " + PROSE for i in range(12)]},
    ])
    (tmp_path / "raw.source.json").write_text(json.dumps({"dataset": "bc", "revision": "abc"}))
    report = clean_file(raw, tmp_path / "clean.jsonl", workers=1, progress=False)
    kept = [json.loads(line)["text"] for line in (tmp_path / "clean.jsonl").read_text().splitlines()]
    assert report["records"] == 5 and report["documents"] == 4 + 2 and report["kept"] == len(kept) == 3
    assert report["dropped"]["duplicate"] == 1 and report["dropped"]["min_words"] == 1
    assert report["dropped"]["min_stop_words"] == 1
    assert report["rules"]["max_symbol_ratio"]["threshold"] == 0.1
    assert report["source"] == {"dataset": "bc", "revision": "abc"}
    assert json.loads((tmp_path / "clean.report.json").read_text()) == report


def test_output_is_the_same_bytes_with_one_or_two_workers(tmp_path, monkeypatch):
    monkeypatch.setattr("data.clean.BATCH_RECORDS", 3)
    raw = _write(tmp_path / "raw.jsonl", [{"text": f"Document {i}. " + PROSE} for i in range(20)] + [{"text": PROSE}] * 3)
    clean_file(raw, tmp_path / "one.jsonl", workers=1, progress=False)
    clean_file(raw, tmp_path / "two.jsonl", workers=2, progress=False)
    assert (tmp_path / "one.jsonl").read_bytes() == (tmp_path / "two.jsonl").read_bytes()
    assert len((tmp_path / "one.jsonl").read_text().splitlines()) == 21
