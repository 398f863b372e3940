"""Clean stage: repaired, normalised, filtered and deduplicated documents, and a report of what was dropped.

    python3 -m data.clean --input RAW.jsonl --output CLEAN.jsonl [--workers N]

Per record: Unicode repair (ftfy: mojibake, HTML entities in plain text, C1 controls, width and
ligature variants) and NFC; line breaks unified; control characters removed; runs of horizontal
whitespace collapsed to one space, lines stripped, at most one blank line in a row. BookCorpus
passages ({"sentences": [...]}) are grouped into documents of at least TARGET_WORDS words, never
across passages (passages are not contiguous after the shuffle). Then the quality rules of
data/quality.py and exact deduplication by a 64-bit hash of the cleaned text. Same input, same
output, byte for byte, whatever --workers is. The report (CLEAN.report.json) carries the fetch
provenance (RAW.source.json) on to the manifest.
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
import unicodedata
from collections import Counter, deque
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Iterator

from utils.cli import Parser, UsageError, run, stop_if_signalled, worker_signals
from data.fetch import source_meta_path
from utils.files import atomic_open, read_json, write_json
from data.quality import RULES, failed_rule

TARGET_WORDS = 512  # BookCorpus: sentences per document until this many words
BATCH_RECORDS = 2_000  # records per worker task
DUPLICATE = "duplicate"

_FIXER = None
_SPACES = re.compile(r"[^\S\n]+")  # horizontal whitespace, Unicode spaces included
_BLANK_RUNS = re.compile(r"\n{3,}")
_LINE_BREAKS = re.compile(r"\r\n|\r")


def _fixer():
    """ftfy's configuration: everything on but quote uncurling (typographic quotes are real text)."""
    global _FIXER
    if _FIXER is None:
        import ftfy
        _FIXER = ftfy.TextFixerConfig(uncurl_quotes=False, normalization="NFC", explain=False)
    return _FIXER


def repair(text: str) -> str:
    """ftfy's repair; ASCII text without '&' or ESC skips it, as ftfy would only unify its line breaks."""
    if text.isascii() and "&" not in text and "\x1b" not in text:
        return _LINE_BREAKS.sub("\n", text)
    import ftfy
    return ftfy.fix_text(text, _fixer())


def normalise(text: str) -> str:
    """Repaired, NFC, no control characters, whitespace normalised."""
    text = repair(text)
    text = "".join(c for c in text if c in "\n\t" or unicodedata.category(c) != "Cc")
    lines = (_SPACES.sub(" ", line).strip() for line in text.split("\n"))
    return _BLANK_RUNS.sub("\n\n", "\n".join(lines)).strip()


def group_sentences(sentences: list[str], target_words: int = TARGET_WORDS) -> list[str]:
    """Consecutive sentences joined into documents of >= target_words; a short tail joins the last one."""
    docs: list[list[str]] = [[]]
    words = 0
    for sentence in sentences:
        if not sentence:
            continue
        if words >= target_words:
            docs.append([])
            words = 0
        docs[-1].append(sentence)
        words += len(sentence.split())
    if len(docs) > 1 and words < target_words // 2:
        docs[-2].extend(docs.pop())
    return [" ".join(doc) for doc in docs if doc]


def clean_records(lines: list[str]) -> list[tuple[str, str | None]]:
    """(document, failed rule or None) for every document the records hold (runs in a worker)."""
    out: list[tuple[str, str | None]] = []
    for line in lines:
        record = json.loads(line)
        if "sentences" in record:
            docs = group_sentences([normalise(s) for s in record["sentences"]])
        else:
            docs = [normalise(record["text"])]
        out.extend((doc, failed_rule(doc)) for doc in docs)
    return out


def _batches(path: Path) -> Iterator[list[str]]:
    batch: list[str] = []
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            if line.strip():
                batch.append(line)
            if len(batch) >= BATCH_RECORDS:
                yield batch
                batch = []
    if batch:
        yield batch


def clean_file(input_path: Path, output: Path, workers: int = 1, progress: bool = True) -> dict:
    """Clean `input_path` into `output`; returns (and writes beside it) the report."""
    from tqdm import tqdm

    if not input_path.is_file():
        raise UsageError(f"--input {input_path}: no such file")
    meta_path = source_meta_path(input_path)
    source = read_json(meta_path) if meta_path.exists() else None
    dropped: Counter = Counter()
    seen: set[bytes] = set()
    records = documents = kept = words = 0
    with atomic_open(output, encoding="utf-8") as handle, \
            ProcessPoolExecutor(workers, initializer=worker_signals) as pool, \
            tqdm(unit="record", desc="clean", disable=not progress, file=sys.stderr, mininterval=1.0) as bar:
        pending: deque = deque()

        def drain() -> None:
            nonlocal records, documents, kept, words
            stop_if_signalled()
            size, future = pending.popleft()
            records += size
            for doc, rule in future.result():
                documents += 1
                if rule is None:
                    key = hashlib.blake2b(doc.encode(), digest_size=8).digest()
                    rule = DUPLICATE if key in seen else None
                    seen.add(key)
                if rule:
                    dropped[rule] += 1
                    continue
                handle.write(json.dumps({"text": doc}, ensure_ascii=False) + "\n")
                kept += 1
                words += len(doc.split())
            bar.update(size)

        for batch in _batches(input_path):
            pending.append((len(batch), pool.submit(clean_records, batch)))
            if len(pending) >= 2 * workers:
                drain()
        while pending:
            drain()
        stop_if_signalled()  # before atomic_open puts the output in place
    report = {
        "input": str(input_path), "records": records, "documents": documents, "kept": kept, "words_kept": words,
        "dropped": {name: dropped.get(name, 0) for name in [r.name for r in RULES] + [DUPLICATE]},
        "rules": {r.name: {"threshold": r.threshold, "keeps": r.describe} for r in RULES},
        "target_words_per_grouped_document": TARGET_WORDS, "source": source,
    }
    write_json(report_path(output), report)
    return report


def report_path(output: Path) -> Path:
    return output.with_name(output.name.removesuffix(".jsonl") + ".report.json")


def summary(report: dict) -> str:
    lines = [f"data.clean: {report['records']:,} records -> {report['documents']:,} documents, "
             f"kept {report['kept']:,} ({report['words_kept']:,} words)"]
    lines += [f"  dropped {count:>8,}  {name}" for name, count in report["dropped"].items() if count]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = Parser(prog="python3 -m data.clean", description=__doc__.split("\n\n")[0])
    parser.add_argument("--input", type=Path, required=True, help="JSON lines from data.fetch")
    parser.add_argument("--output", type=Path, required=True, help="cleaned JSON lines ({'text': ...})")
    parser.add_argument("--workers", type=int, default=1, help="worker processes")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    args = parser.parse_args(argv)
    if args.workers < 1:
        parser.error("--workers must be at least 1")
    print(summary(clean_file(args.input, args.output, args.workers, not args.quiet)), file=sys.stderr)
    return 0


if __name__ == "__main__":
    run(main, "data.clean")
