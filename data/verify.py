"""Verify stage: prove a .bin/.idx pair is sound, then write its manifest.

    python3 -m data.verify --prefix DATA_DIR/<dataset>_<model>_text_document --tokenizer DIR \\
        [--clean-report CLEAN.report.json] [--seq-length SL] [--samples N] [--no-eod]

Checks, in order (exit 1 at the first broken one, naming the file, the check and the index):
header (magic, version, dtype code for the tokenizer's vocabulary), .idx size = 34 + 12 S + 8 D,
document index from 0 to S and increasing (an equal pair is an empty document), no empty
sequence, pointers = bytes of the lengths before them, .bin size = bytes of all tokens, every token
in [0, tokenizer size), EOD closing every document, the BOS the tokenizer adds opening every
document, megatron-core's IndexedDataset opens the pair,
and megatron-core's GPTDataset builds N samples of SL tokens from it (its C++ helpers compiled first
where a Megatron-LM source checkout lacks them); the files hashed must be those checked (a pair
written to during verification fails). Then PREFIX.manifest.json:
source dataset and revision, cleaning report, tokenizer identity, counts, token statistics, sha256
of both files and their fingerprint (sha256 of the two hashes joined by a newline), verified: true.
Verifying a prefix whose earlier manifest recorded other hashes says so, file by file: the data
changed, and so will every result's dataset fingerprint.
"""

from __future__ import annotations

import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from utils import missing_stacks
from utils.machine import compile_aside
from utils.cli import Parser, UsageError, WorkError, run
from utils.files import DiskError, disk_problem, read_json, write_json
from utils.datafiles import MANIFEST_SCHEMA, DataProblem, cache_path, forget_sample_indices, manifest_path, pair_fingerprint, \
    ensure_dataset_helpers, pair_hashes, stat_key
from data.indexed import CODE_OF, DTYPE_CODES, HEADER_SIZE, MAGIC, VERSION, optimal_dtype, read_header
from data.tokenizer import read_identity

SCAN_TOKENS = 1 << 24  # tokens checked per slice of the memory-mapped .bin


class Broken(WorkError):
    """A broken invariant: '<file>: <check>: <detail>'."""

    def __init__(self, path: Path, check: str, detail: str):
        super().__init__(f"{path}: {check}: {detail}")


@dataclass
class PairFacts:
    documents: int
    sequences: int
    tokens: int
    mean_document_tokens: float
    max_document_tokens: int
    min_token_id: int
    max_token_id: int
    dtype: str
    eod: int | None
    gpt_samples: int
    seq_length: int


def _tokenizer_facts(directory: Path) -> tuple[int, int | None, int | None]:
    """(tokenizer size with added tokens, as Megatron counts it; eos id; the BOS id its post-processor puts before
    every document, None when it adds none) read with `tokenizers` alone (fast)."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(directory / "tokenizer.json"))
    eos = read_json(directory / "tokenizer_config.json").get("eos_token")
    eos = eos.get("content") if isinstance(eos, dict) else eos
    added = tokenizer.encode("", add_special_tokens=True).ids
    return (tokenizer.get_vocab_size(with_added_tokens=True), tokenizer.token_to_id(eos) if eos else None,
            added[0] if len(added) == 1 else None)


def check_pair(bin_path: Path, idx_path: Path, vocab_size: int, eod: int | None, bos: int | None = None) -> PairFacts:
    """Every structural check of data.md on the pair; raises Broken at the first failure."""
    for path in (bin_path, idx_path):
        if not path.is_file():
            raise Broken(path, "missing", "no such file (run the encode stage)")
    raw = idx_path.read_bytes()
    try:
        head = read_header(raw)
    except ValueError as err:
        raise Broken(idx_path, "header", str(err)) from None
    if head.magic != MAGIC:
        raise Broken(idx_path, "wrong magic", f"{head.magic!r}, expected {MAGIC!r}")
    if head.version != VERSION:
        raise Broken(idx_path, "wrong version", f"{head.version}, expected {VERSION}")
    expected = optimal_dtype(vocab_size)
    if DTYPE_CODES.get(head.dtype_code) is None or np.dtype(DTYPE_CODES[head.dtype_code]) != expected:
        raise Broken(idx_path, "wrong dtype code", f"{head.dtype_code}, expected {CODE_OF[expected]} "
                     f"({expected.name} for a vocabulary of {vocab_size})")
    s, d = head.sequences, head.documents
    size = HEADER_SIZE + 12 * s + 8 * d
    if len(raw) != size:
        raise Broken(idx_path, "index size", f"{len(raw)} bytes, expected 34 + 12*{s} + 8*{d} = {size}")
    lengths = np.frombuffer(raw, np.int32, s, HEADER_SIZE)
    pointers = np.frombuffer(raw, np.int64, s, HEADER_SIZE + 4 * s)
    docs = np.frombuffer(raw, np.int64, d, HEADER_SIZE + 12 * s)
    if d < 2 or docs[0] != 0 or docs[-1] != s:
        raise Broken(idx_path, "document index", f"must run from 0 to {s} over at least one document, "
                     f"got {docs[:1].tolist()}...{docs[-1:].tolist()} ({d} entries)")
    steps = np.diff(docs)
    if (bad := np.flatnonzero(steps < 0)).size:
        raise Broken(idx_path, "document index out of order", f"entry {bad[0] + 1} ({docs[bad[0] + 1]}) < "
                     f"entry {bad[0]} ({docs[bad[0]]})")
    if (bad := np.flatnonzero(steps == 0)).size:
        raise Broken(idx_path, "empty document", f"document {bad[0]} has no sequence")
    if (bad := np.flatnonzero(lengths <= 0)).size:
        raise Broken(idx_path, "empty sequence", f"sequence {bad[0]} has length {lengths[bad[0]]}")
    itemsize = expected.itemsize
    want = np.zeros(s, np.int64)
    np.cumsum(lengths[:-1], dtype=np.int64, out=want[1:])
    want *= itemsize
    if (bad := np.flatnonzero(pointers != want)).size:
        raise Broken(idx_path, "pointer mismatch", f"sequence {bad[0]} points at byte {pointers[bad[0]]}, "
                     f"expected {want[bad[0]]}")
    tokens = int(lengths.sum(dtype=np.int64))
    if bin_path.stat().st_size != tokens * itemsize:
        raise Broken(bin_path, "truncated .bin" if bin_path.stat().st_size < tokens * itemsize else ".bin size",
                     f"{bin_path.stat().st_size} bytes, the index describes {tokens} tokens = {tokens * itemsize} bytes")
    data = np.memmap(bin_path, dtype=expected, mode="r") if tokens else np.zeros(0, expected)
    low, high = vocab_size, -1
    for start in range(0, tokens, SCAN_TOKENS):
        part = data[start:start + SCAN_TOKENS]
        low, high = min(low, int(part.min())), max(high, int(part.max()))
        if high >= vocab_size or low < 0:
            at = start + int(np.flatnonzero((part >= vocab_size) | (part < 0))[0])
            raise Broken(bin_path, "token id >= vocabulary" if high >= vocab_size else "negative token id",
                         f"token {at} is {int(data[at])}, the tokenizer has {vocab_size} ids")
    seq_ends = np.cumsum(lengths, dtype=np.int64)
    doc_tokens = np.diff(np.concatenate([[0], seq_ends[docs[1:] - 1]]))
    if eod is not None:
        last = np.asarray(data[seq_ends[docs[1:] - 1] - 1])
        if (bad := np.flatnonzero(last != eod)).size:
            raise Broken(bin_path, "missing EOD", f"document {bad[0]} ends with {int(last[bad[0]])}, not EOD {eod}")
    if bos is not None:
        first = np.asarray(data[np.concatenate([[0], seq_ends[docs[1:-1] - 1]])])
        if (bad := np.flatnonzero(first != bos)).size:
            raise Broken(bin_path, "missing BOS", f"document {bad[0]} starts with {int(first[bad[0]])}, not BOS {bos} (encoded "
                         "without the special tokens its tokenizer adds: encode it with data.encode, or Megatron-LM's "
                         "tool with --tokenizer-hf-include-special-tokens)")
    return PairFacts(documents=d - 1, sequences=s, tokens=tokens, mean_document_tokens=float(doc_tokens.mean()),
                   max_document_tokens=int(doc_tokens.max()), min_token_id=low, max_token_id=high,
                   dtype=expected.name, eod=eod, gpt_samples=0, seq_length=0)


class _Tokenizer:
    """The tokenizer facts GPTDataset reads."""

    def __init__(self, eod: int, vocab_size: int):
        self.eod, self.vocab_size = eod, vocab_size
        self.unique_identifiers = {"class": "tprimat-verify", "eod": eod, "vocab_size": vocab_size}


def build_with_megatron(prefix: Path, vocab_size: int, eod: int, seq_length: int, samples: int, seed: int) -> int:
    """Open the pair with megatron-core's IndexedDataset and build GPTDataset samples of seq_length tokens."""
    from megatron.core.datasets.blended_megatron_dataset_builder import BlendedMegatronDatasetBuilder
    from megatron.core.datasets.gpt_dataset import GPTDataset, GPTDatasetConfig
    from megatron.core.datasets.indexed_dataset import IndexedDataset

    try:
        opened = IndexedDataset(str(prefix))
        first = opened[0]
    except Exception as err:  # noqa: BLE001 - megatron-core raises assorted errors on bad files
        raise Broken(Path(str(prefix) + ".idx"), "IndexedDataset", f"megatron-core cannot read the pair: {err}") from None
    if len(opened) == 0 or len(first) == 0:
        raise Broken(Path(str(prefix) + ".idx"), "IndexedDataset", "megatron-core reads no tokens")
    with tempfile.TemporaryDirectory(prefix="tprimat-verify-") as cache:
        # Fields every megatron-core from 0.12 (nemo:25.04) has; the defaults stand for the rest (e.g. 0.13's
        # mid_level_dataset_surplus, which only weighted blends of several prefixes use).
        config = GPTDatasetConfig(random_seed=seed, sequence_length=seq_length, blend=([str(prefix)], None),
                                  split="100,0,0", path_to_cache=cache, tokenizer=_Tokenizer(eod, vocab_size),
                                  reset_position_ids=False, reset_attention_mask=False, eod_mask_loss=False)
        try:
            train, _, _ = BlendedMegatronDatasetBuilder(GPTDataset, [samples, 0, 0], lambda: True, config).build()
            sample = train[len(train) - 1]
        except Exception as err:  # noqa: BLE001
            if isinstance(err.__cause__, OSError):  # megatron-core's words for "cannot write its index cache"
                raise DiskError(_cache_problem(err.__cause__, Path(cache))) from None
            raise Broken(Path(str(prefix) + ".bin"), "GPTDataset",
                         f"megatron-core cannot build {samples} samples of {seq_length} tokens: {err}") from None
    if len(train) < samples or sample["tokens"].numel() != seq_length:
        raise Broken(Path(str(prefix) + ".bin"), "GPTDataset", f"built {len(train)} samples, {samples} requested")
    return len(train)


def _cache_problem(err: OSError, cache: Path) -> str:
    """The line for GPTDataset's index cache (in the temporary folder) not written: numpy's short writes carry no
    errno, so a write refused for an unknown reason is named as such, with the likely fix."""
    return disk_problem(err, err.filename or cache, knob="TMPDIR") or (
        f"cannot write GPTDataset's index cache in {cache}: {err}; free space in the temporary folder or set TMPDIR "
        "to a folder on a larger disk (or raise the file-size limit, ulimit -f)")


def _ensure_process_group() -> None:
    """megatron-core's cached dataset build needs torch.distributed: a gloo group of one is enough."""
    import os
    import torch.distributed as dist
    if not dist.is_initialized():
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        store = dist.HashStore()
        dist.init_process_group("gloo", store=store, rank=0, world_size=1)


def _ensure_dataset_helpers() -> None:
    """GPTDataset's compiled index builder, compiled first in a source checkout (as the trainer does)."""
    missing_stacks.silence()  # megatron-core's first import: its kernel libraries do not touch the data checked
    missing_stacks.quiet_notes()
    compile_aside.megatron_core()  # nor do its fusion kernels: torch's compiler stays unloaded
    try:
        ensure_dataset_helpers()
    except DataProblem as err:
        raise UsageError(str(err)) from None


def verify(prefix: Path, tokenizer_dir: Path, *, clean_report: Path | None, seq_length: int, samples: int,
           seed: int, append_eod: bool = True) -> dict:
    """Check the pair and write its manifest; returns the manifest."""
    identity = read_identity(tokenizer_dir)
    vocab_size, eos, bos = _tokenizer_facts(tokenizer_dir)
    bin_path, idx_path = Path(str(prefix) + ".bin"), Path(str(prefix) + ".idx")
    if append_eod and eos is None:
        raise UsageError(f"{tokenizer_dir}: the tokenizer names no eos_token, so EOD cannot be checked; give --no-eod "
                         "if the pair was encoded without --append-eod")
    before = {path: stat_key(path) for path in (bin_path, idx_path) if path.is_file()}
    summary = check_pair(bin_path, idx_path, vocab_size, eos if append_eod else None, bos)
    needed = samples * seq_length + 1
    if summary.tokens < needed:
        raise Broken(bin_path, "too few tokens", f"{summary.tokens} tokens, {samples} samples of {seq_length} need "
                     f"{needed}; raise DATA_SAMPLES or lower the samples requested")
    _ensure_process_group()
    _ensure_dataset_helpers()
    summary.gpt_samples = build_with_megatron(prefix, vocab_size, eos if eos is not None else 0, seq_length,
                                              samples, seed)
    summary.seq_length = seq_length
    cache_path(prefix).unlink(missing_ok=True)  # hashed in full here, whatever was remembered
    hashes, _ = pair_hashes(prefix)
    for path, key in before.items():  # what was hashed is what was checked
        if stat_key(path) != key:
            raise Broken(path, "changed during verification", "another process wrote it; verify again once it is done")
    bin_sha, idx_sha = hashes[".bin"], hashes[".idx"]
    report = read_json(clean_report) if clean_report else {}
    source = report.get("source") or {}
    manifest = {
        "schema": MANIFEST_SCHEMA,
        "prefix": str(prefix),
        "dataset": source.get("dataset"),
        "source": source or None,
        "cleaning": {k: v for k, v in report.items() if k != "source"} or None,
        "tokenizer": {"name": identity.name, "model": identity.model, "source": identity.source,
                      "fallback": identity.fallback, "sha256": identity.sha256, "vocab_size": vocab_size, "eos_id": eos},
        "counts": {"documents": summary.documents, "sequences": summary.sequences, "tokens": summary.tokens},
        "statistics": {k: v for k, v in asdict(summary).items() if k not in ("documents", "sequences", "tokens")},
        "files": {"bin": {"path": str(bin_path), "sha256": bin_sha, "bytes": bin_path.stat().st_size},
                  "idx": {"path": str(idx_path), "sha256": idx_sha, "bytes": idx_path.stat().st_size}},
        "fingerprint": pair_fingerprint(bin_sha, idx_sha),
        "verified": True,
    }
    write_json(manifest_path(prefix), manifest)
    return manifest


def recorded_hashes(prefix: Path) -> dict[str, str]:
    """{"bin": sha256, "idx": sha256} an earlier manifest of the prefix recorded (empty without one)."""
    try:
        files = read_json(manifest_path(prefix)).get("files") or {}
    except (OSError, ValueError, AttributeError):
        return {}
    return {key: files[key]["sha256"] for key in ("bin", "idx") if (files.get(key) or {}).get("sha256")}


def render(manifest: dict, earlier: dict[str, str] | None = None) -> str:
    """The one-screen summary; with the hashes an earlier manifest recorded, the files that changed since."""
    c, s, t = manifest["counts"], manifest["statistics"], manifest["tokenizer"]
    origin = manifest["source"] or {}
    changed = [f"  CHANGED since the last verification: .{key} sha256 {old} -> {manifest['files'][key]['sha256']}"
               for key, old in (earlier or {}).items() if old != manifest["files"][key]["sha256"]]
    return "\n".join([
        f"data.verify: OK {manifest['prefix']}",
        f"  documents {c['documents']:,}   tokens {c['tokens']:,}   mean/max document "
        f"{s['mean_document_tokens']:,.1f}/{s['max_document_tokens']:,} tokens",
        f"  token ids {s['min_token_id']}..{s['max_token_id']} ({s['dtype']}), EOD {s['eod']}, "
        f"GPTDataset {s['gpt_samples']:,} samples of {s['seq_length']} tokens",
        f"  source {origin.get('repo', '?')} @ {origin.get('revision', '?')}",
        f"  tokenizer {t['source']}{'  [OFFLINE FALLBACK]' if t['fallback'] else ''}",
        f"  tokenizer sha256 {t['sha256']}",
        f"  .bin sha256 {manifest['files']['bin']['sha256']}",
        f"  .idx sha256 {manifest['files']['idx']['sha256']}",
        f"  fingerprint {manifest['fingerprint']}",
        *changed,
    ])


def main(argv: list[str] | None = None) -> int:
    parser = Parser(prog="python3 -m data.verify", description=__doc__.split("\n\n")[0])
    parser.add_argument("--prefix", type=Path, required=True, help="the pair without .bin/.idx")
    parser.add_argument("--tokenizer", type=Path, required=True, help="the tokenizer directory that encoded it")
    parser.add_argument("--clean-report", type=Path, help="data.clean's report (carries the source)")
    parser.add_argument("--seq-length", type=int, default=2048, help="GPTDataset sample length (SL)")
    parser.add_argument("--samples", type=int, default=1, help="GPTDataset samples to build (e.g. TRAIN_ITERS x GBS)")
    parser.add_argument("--seed", type=int, default=42, help="GPTDataset shuffle seed")
    parser.add_argument("--no-eod", action="store_true", help="the pair was encoded without --append-eod")
    args = parser.parse_args(argv)
    if args.seq_length < 1 or args.samples < 1:
        parser.error("--seq-length and --samples must be positive")
    if args.clean_report and not args.clean_report.is_file():
        raise UsageError(f"--clean-report {args.clean_report}: no such file")
    earlier = recorded_hashes(args.prefix)
    manifest = verify(args.prefix, args.tokenizer, clean_report=args.clean_report, seq_length=args.seq_length,
                      samples=args.samples, seed=args.seed, append_eod=not args.no_eod)
    if earlier and earlier != recorded_hashes(args.prefix):
        forget_sample_indices(args.prefix)
    print(render(manifest, earlier), file=sys.stderr)
    return 0


if __name__ == "__main__":
    run(main, "data.verify")
