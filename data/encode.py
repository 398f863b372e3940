"""Tokenize JSON lines into Megatron's .bin/.idx, byte-identical to Megatron-LM's preprocess_data.py.

    python3 -m data.encode --input FILE.jsonl [--json-keys text] --tokenizer-model TOKENIZER_DIR \\
        --output-prefix PREFIX --workers N --append-eod

writes PREFIX_text_document.{bin,idx}, the same bytes as `tools/preprocess_data.py --tokenizer-type
HuggingFaceTokenizer` with the same arguments: each document is the tokenizer's input_ids (BOS as the
tokenizer adds it), a list-valued field is a list of sentences each tokenized alone (empty ones
dropped), EOD (the tokenizer's eos id) is appended to every non-empty document, tokens are int32
for vocabularies of 65500 and more. It first removes the manifest (and remembered hashes) of each
prefix it writes, so that no `verified: true` stands beside data data.verify has not seen; an earlier
pair stays until the new one is complete and replaces it. SIGTERM is handled as Ctrl-C is: partial
files removed, one line, exit 143 (130 for Ctrl-C).

Why it is faster: the input is read in blocks of whole lines that worker processes parse and
tokenize (tiktoken where it reproduces the Hugging Face ids, else the Rust tokenizer in batches);
each block comes back as whole arrays of the output's dtype written in one call, and only a few
blocks are in flight, so memory does not grow with the input. Start-up is a fraction of a second:
the proof that tiktoken gives the Hugging Face ids, which needs transformers (and so torch), is made
once per tokenizer and cached (data/bpe.py); encoding itself imports only tokenizers and tiktoken.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import sys
import time
from collections import deque
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import numpy as np

from data.bpe import Proof, TiktokenTwin, load_proof
from utils.cli import Parser, UsageError, run, stop_if_signalled, worker_signals
from data.indexed import IndexedWriter, optimal_dtype, output_paths
from utils.datafiles import invalidate

BLOCK_BYTES = 1 << 20  # 1 MiB of JSON lines per task: enough blocks that no worker idles long at the end


@dataclass
class Encoder:
    """What a worker needs: the proven tokenizer, its tiktoken twin (or None), the EOD id, the token dtype."""

    keys: list[str]
    append_eod: bool
    eod: int | None  # None only without --append-eod
    dtype: np.dtype
    proof: Proof
    twin: TiktokenTwin | None
    backend: object = None  # the HF tokenizers.Tokenizer, loaded when first needed (see hf)

    def hf(self):
        """The HF tokenizer; loaded once per process, and only where tiktoken does not do the work."""
        if self.backend is None:
            self.backend = self.proof.hf_tokenizer()
        return self.backend

    def hf_ids(self, texts: list[str]) -> list[np.ndarray]:
        return [np.asarray(e.ids, dtype=self.dtype) for e in self.hf().encode_batch(texts, add_special_tokens=True)]

    def ids(self, texts: list[str]) -> list[np.ndarray]:
        """Token ids of each text, through tiktoken where it applies, the HF tokenizer (batched) elsewhere."""
        if self.twin is None:
            return self.hf_ids(texts)
        out: list[np.ndarray | None] = [self.twin.encode(t) for t in texts]
        left = [i for i, ids in enumerate(out) if ids is None]
        if left:  # only then is the HF tokenizer loaded
            for i, ids in zip(left, self.hf_ids([texts[i] for i in left])):
                out[i] = ids
        return out  # type: ignore[return-value]


@dataclass
class Block:
    """One block of documents, encoded: per JSON key, tokens, sequence lengths, sequences per document."""

    documents: int
    tokens: dict[str, np.ndarray] = field(default_factory=dict)
    lengths: dict[str, np.ndarray] = field(default_factory=dict)
    per_doc: dict[str, np.ndarray] = field(default_factory=dict)


class BadLine(ValueError):
    """A line of the block is not a JSON object with the requested keys: (line within block, reason)."""


_ENCODER: Encoder | None = None  # set in the parent before the pool forks


def parse_block(raw: bytes, keys: list[str]) -> tuple[dict[str, list[str]], dict[str, list[int]], int]:
    """Per key, every text (a list-valued field gives several) and the number of texts of each document."""
    lines = raw.split(b"\n")
    if lines and not lines[-1].strip():
        lines.pop()
    sentences: dict[str, list[str]] = {k: [] for k in keys}
    counts: dict[str, list[int]] = {k: [] for k in keys}
    for number, line in enumerate(lines):
        try:
            record = json.loads(line)
            for key in keys:
                value = record[key]
                parts = value if isinstance(value, list) else [value]
                if not all(isinstance(p, str) for p in parts):
                    raise TypeError(f"field {key!r} is neither text nor a list of texts")
                sentences[key].extend(parts)
                counts[key].append(len(parts))
        except (ValueError, KeyError, TypeError) as err:
            reason = f"no field {err}" if isinstance(err, KeyError) else str(err)
            raise BadLine(number, reason) from None
    return sentences, counts, len(lines)


def encode_block(raw: bytes) -> Block:
    """Parse and tokenize the JSON lines of one block (runs in a worker)."""
    encoder = _ENCODER
    assert encoder is not None
    sentences, counts, documents = parse_block(raw, encoder.keys)
    block = Block(documents=documents)
    for key in encoder.keys:
        block.tokens[key], block.lengths[key], block.per_doc[key] = _assemble(
            encoder.ids(sentences[key]), counts[key], encoder.append_eod, encoder.eod, encoder.dtype)
    return block


def _assemble(ids: list[np.ndarray], counts: list[int], append_eod: bool, eod: int, dtype: np.dtype
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Documents from sentence ids: empty sentences dropped, EOD after the last sentence of a non-empty one."""
    pieces: list[np.ndarray] = []
    lengths: list[int] = []
    per_doc = np.zeros(len(counts), dtype=np.int64)
    eod_piece = np.asarray([eod])
    start = 0
    for doc, count in enumerate(counts):
        kept = [a for a in ids[start:start + count] if a.size]
        start += count
        pieces.extend(kept)
        lengths.extend(a.size for a in kept)
        if kept and append_eod:
            pieces.append(eod_piece)
            lengths[-1] += 1
        per_doc[doc] = len(kept)
    # Ids are below the vocabulary size, which the dtype holds (optimal_dtype): the cast loses nothing.
    tokens = np.concatenate(pieces, dtype=dtype, casting="unsafe") if pieces else np.zeros(0, dtype=dtype)
    return tokens, np.asarray(lengths, dtype=np.int32), per_doc


def read_blocks(path: Path, size: int = BLOCK_BYTES) -> Iterator[bytes]:
    """Blocks of whole lines, about `size` bytes each."""
    with open(path, "rb") as handle:
        rest = b""
        while chunk := handle.read(size):
            chunk = rest + chunk
            cut = chunk.rfind(b"\n") + 1
            if cut == 0:
                rest = chunk
                continue
            rest = chunk[cut:]
            yield chunk[:cut]
        if rest.strip():
            yield rest


def load_encoder(tokenizer_dir: Path, keys: list[str], append_eod: bool, backend: str,
                 cache: Path | None = None) -> tuple[Encoder, str]:
    """The encoder (from the tokenizer's cached proof, made now if missing) and the name of the backend used."""
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")  # the workers are the parallelism
    if not (tokenizer_dir / "tokenizer_config.json").exists() and not (tokenizer_dir / "tokenizer.json").exists():
        raise UsageError(f"--tokenizer-model {tokenizer_dir}: not a Hugging Face tokenizer directory; "
                         "prepare one with: python3 -m data.fetch tokenizer --model MODEL --output-dir DIR")
    proof, fresh = load_proof(tokenizer_dir, cache)
    if fresh:
        print(f"data.encode: proved tiktoken against the Hugging Face tokenizer of {tokenizer_dir} once; "
              f"cached in {proof.entry}", file=sys.stderr)
    if append_eod and proof.eos_id is None:
        raise UsageError(f"--append-eod: the tokenizer in {tokenizer_dir} has no eos_token to use as EOD")
    why = "HF tokenizer requested" if backend == "hf" else proof.why_not_tiktoken
    if backend == "tiktoken" and proof.tiktoken is None:
        raise UsageError(f"--backend tiktoken: {why}; use --backend auto or hf")
    twin = proof.twin() if backend != "hf" and proof.tiktoken is not None else None
    encoder = Encoder(keys, append_eod, proof.eos_id, optimal_dtype(proof.vocab_size), proof, twin)
    if twin is None:
        encoder.hf()  # before the workers fork, so that they share it
    return encoder, "tiktoken" if twin else f"hf ({why})"


@dataclass
class EncodeStats:
    documents: int
    tokens: int
    seconds: float
    backend: str
    outputs: list[str]


def encode_file(input_path: Path, tokenizer_dir: Path, output_prefix: str, *, keys: list[str], workers: int,
                append_eod: bool, backend: str = "auto", block_bytes: int = BLOCK_BYTES,
                progress: bool = True, cache: Path | None = None) -> EncodeStats:
    """Encode one JSON-lines file into PREFIX_<key>_document.{bin,idx} for every key."""
    global _ENCODER
    from tqdm import tqdm

    if not input_path.is_file():
        raise UsageError(f"--input {input_path}: no such file")
    encoder, backend_name = load_encoder(tokenizer_dir, keys, append_eod, backend, cache)
    for key in keys:  # first: whatever happens next, no manifest vouches for these names any more
        invalidate(output_paths(output_prefix, key)[0].with_suffix(""))
    writers = {k: IndexedWriter(*output_paths(output_prefix, k), encoder.dtype) for k in keys}
    _ENCODER = encoder
    start, documents, line_offset = time.perf_counter(), 0, 0
    bar = tqdm(total=input_path.stat().st_size, unit="B", unit_scale=True, disable=not progress,
               desc=f"encode {Path(output_prefix).name}", mininterval=1.0, file=sys.stderr)
    try:
        with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork"), initializer=worker_signals) as pool:
            pending: deque = deque()

            def drain_one() -> None:
                nonlocal documents, line_offset
                future, raw_size, line_count = pending.popleft()
                try:
                    block = future.result()
                except BadLine as err:
                    number, reason = err.args
                    raise UsageError(f"--input {input_path}: line {line_offset + number + 1} is not a JSON object "
                                     f"with {', '.join(keys)} ({reason})") from None
                stop_if_signalled()
                for key in keys:
                    writers[key].add(block.tokens[key], block.lengths[key], block.per_doc[key])
                documents += block.documents
                line_offset += line_count
                elapsed = max(time.perf_counter() - start, 1e-9)
                bar.set_postfix_str(f"{documents / elapsed:,.0f} docs/s, "
                                    f"{writers[keys[0]].tokens / elapsed:,.0f} tokens/s", refresh=False)
                bar.update(raw_size)

            for raw in read_blocks(input_path, block_bytes):
                pending.append((pool.submit(encode_block, raw), len(raw), raw.count(b"\n")))
                if len(pending) >= 2 * workers:
                    drain_one()
            while pending:
                drain_one()
        stop_if_signalled()
        for writer in writers.values():
            writer.finish()
    except BaseException:
        for writer in writers.values():
            writer.abandon()
        raise
    finally:
        bar.close()
        _ENCODER = None
    seconds = time.perf_counter() - start
    outputs = [str(p) for k in keys for p in output_paths(output_prefix, k)]
    return EncodeStats(documents, writers[keys[0]].tokens, seconds, backend_name, outputs)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = Parser(
        prog="python3 -m data.encode", description=__doc__.split("\n\n")[0],
        epilog="Same arguments and output as Megatron-LM's tools/preprocess_data.py "
               "--tokenizer-type HuggingFaceTokenizer; swap one for the other freely.")
    parser.add_argument("--input", type=Path, required=True, help="JSON-lines file, one document per line")
    parser.add_argument("--json-keys", nargs="+", default=["text"], help="fields to encode (default: text)")
    parser.add_argument("--tokenizer-model", type=Path, required=True, help="Hugging Face tokenizer directory")
    parser.add_argument("--tokenizer-type", default="HuggingFaceTokenizer", choices=["HuggingFaceTokenizer"],
                        help="accepted for compatibility with Megatron's tool; only HuggingFaceTokenizer")
    parser.add_argument("--tokenizer-hf-include-special-tokens", action="store_true",
                        help="accepted so that commands written for Megatron-LM core_v0.16.1 run unchanged; it "
                             "changes nothing. TPrimat always encodes a document as the tokenizer's input_ids, with "
                             "the special tokens its post-processor adds (Llama 3's BOS 128000 first; Qwen 2.5 adds "
                             "none), as Megatron-LM's main branch does by default; core_v0.16.1 does so only with "
                             "this flag and drops the BOS without it (TPrimat has no such mode)")
    parser.add_argument("--output-prefix", required=True, help="writes PREFIX_<key>_document.{bin,idx}")
    parser.add_argument("--workers", type=int, required=True, help="worker processes (use the core count)")
    parser.add_argument("--append-eod", action="store_true", help="append the tokenizer's EOS id to each document")
    parser.add_argument("--backend", choices=["auto", "tiktoken", "hf"], default="auto",
                        help="auto: tiktoken where its ids are proven identical to the HF tokenizer's, else hf "
                             "(the proof is made once per tokenizer and cached in "
                             "${XDG_CACHE_HOME:-~/.cache}/tprimat/tokenizer-proofs)")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    args = parser.parse_args(argv)
    if args.workers < 1:
        parser.error(f"--workers {args.workers}: must be at least 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    stats = encode_file(args.input, args.tokenizer_model, args.output_prefix, keys=args.json_keys,
                        workers=args.workers, append_eod=args.append_eod, backend=args.backend,
                        progress=not args.quiet)
    print(f"data.encode: {stats.documents:,} documents, {stats.tokens:,} tokens in {stats.seconds:.1f} s "
          f"({stats.tokens / max(stats.seconds, 1e-9):,.0f} tokens/s, backend {stats.backend}) -> "
          + ", ".join(stats.outputs), file=sys.stderr)
    return 0


if __name__ == "__main__":
    run(main, "data.encode")
