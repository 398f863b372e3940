"""Megatron's indexed dataset format (.bin tokens + .idx index), written streaming and read for checks.

Layout of the .idx (little-endian), as megatron-core's IndexedDatasetBuilder writes it: magic
`MMIDIDX\\x00\\x00`, u64 version 1, u8 dtype code, u64 sequence count S, u64 document count D,
int32 lengths[S], int64 byte pointers[S], int64 document indices[D] (0 ... S).
"""

from __future__ import annotations

import os
import struct
from array import array
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from utils.datafiles import document_prefix, sibling
from utils.files import tmp_path, writing

MAGIC = b"MMIDIDX\x00\x00"
VERSION = 1
HEADER_SIZE = 34  # 9 magic + 8 version + 1 dtype + 8 S + 8 D
DTYPE_CODES: dict[int, type] = {1: np.uint8, 2: np.int8, 3: np.int16, 4: np.int32, 5: np.int64,
                                6: np.float64, 7: np.float32, 8: np.uint16}
CODE_OF = {np.dtype(t): code for code, t in DTYPE_CODES.items()}
SMALL_VOCAB_LIMIT = 65500  # below it Megatron stores tokens as uint16, else int32


def optimal_dtype(vocab_size: int) -> np.dtype:
    """The token dtype Megatron's tools choose for a vocabulary of this size."""
    return np.dtype(np.uint16 if vocab_size < SMALL_VOCAB_LIMIT else np.int32)


def output_paths(prefix: str, key: str) -> tuple[Path, Path]:
    """PREFIX_<key>_document.{bin,idx}, the names Megatron's preprocess_data.py uses."""
    stem = document_prefix(prefix, key)
    return sibling(stem, ".bin"), sibling(stem, ".idx")


class IndexedWriter:
    """Appends whole arrays of tokens; writes the index at the end; renames both only when complete.

    An earlier pair at the same names stays until the new one replaces it. Memory grows with the number of
    sequences (12 bytes each), never with the tokens.
    """

    def __init__(self, bin_path: Path, idx_path: Path, dtype: np.dtype):
        self.bin_path, self.idx_path, self.dtype = bin_path, idx_path, np.dtype(dtype)
        for path in (tmp_path(bin_path), tmp_path(idx_path)):
            path.unlink(missing_ok=True)  # what a killed run left behind
        bin_path.parent.mkdir(parents=True, exist_ok=True)
        self._bin = open(tmp_path(bin_path), "wb")
        self._lengths = array("i")  # int32 per sequence
        self._doc_ends = array("q", [0])  # int64 per document, plus the leading 0
        self.tokens = 0

    def add(self, tokens: np.ndarray, lengths: np.ndarray, sequences_per_doc: np.ndarray) -> None:
        """Append documents: their tokens, each sequence's length, each document's sequence count."""
        with writing(self.bin_path, partial=tmp_path(self.bin_path)):
            self._bin.write(np.ascontiguousarray(tokens, dtype=self.dtype).tobytes())
        self._lengths.frombytes(np.ascontiguousarray(lengths, dtype=np.int32).tobytes())
        ends = self._doc_ends[-1] + np.cumsum(sequences_per_doc, dtype=np.int64)
        self._doc_ends.frombytes(ends.tobytes())
        self.tokens += int(tokens.size)

    def finish(self) -> None:
        """Write the .idx, then rename .bin and, last, .idx: a pair without .idx is never finished."""
        with writing(self.bin_path, partial=tmp_path(self.bin_path)):
            self._bin.close()
        lengths = np.frombuffer(self._lengths, dtype=np.int32)
        pointers = np.zeros(len(lengths), dtype=np.int64)
        np.cumsum(lengths[:-1], dtype=np.int64, out=pointers[1:])
        pointers *= self.dtype.itemsize
        with writing(self.idx_path, partial=tmp_path(self.idx_path)), open(tmp_path(self.idx_path), "wb") as idx:
            idx.write(MAGIC + struct.pack("<Q", VERSION) + struct.pack("<B", CODE_OF[self.dtype]))
            idx.write(struct.pack("<Q", len(lengths)) + struct.pack("<Q", len(self._doc_ends)))
            idx.write(lengths.tobytes())
            idx.write(pointers.tobytes())
            idx.write(np.frombuffer(self._doc_ends, dtype=np.int64).tobytes())
        os.replace(tmp_path(self.bin_path), self.bin_path)
        os.replace(tmp_path(self.idx_path), self.idx_path)

    def abandon(self) -> None:
        """Remove the partial files (on error or interrupt; closing may fail again when the disk stopped a write)."""
        try:
            self._bin.close()
        except OSError:
            pass
        for path in (tmp_path(self.bin_path), tmp_path(self.idx_path)):
            path.unlink(missing_ok=True)


@dataclass
class IndexHeader:
    """The fixed-size head of an .idx file."""

    magic: bytes
    version: int
    dtype_code: int
    sequences: int
    documents: int  # entries of the document index: number of documents + 1


def read_header(raw: bytes) -> IndexHeader:
    if len(raw) < HEADER_SIZE:
        raise ValueError(f"{len(raw)} bytes, shorter than the {HEADER_SIZE}-byte header")
    version, = struct.unpack_from("<Q", raw, 9)
    code, = struct.unpack_from("<B", raw, 17)
    sequences, documents = struct.unpack_from("<QQ", raw, 18)
    return IndexHeader(raw[:9], version, code, sequences, documents)
