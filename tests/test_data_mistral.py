"""Mistral 7B v0.1's data through TPrimat's pipeline, offline: a tokenizer shaped like the real one (byte-fallback
SentencePiece BPE, 32,000 ids, BOS <s> 1, EOS </s> 2) encodes with data.encode, passes data.verify, and is proven
for mistral and refused for llama by utils.datafiles."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from data.encode import encode_file
from data.indexed import HEADER_SIZE, read_header
from data.verify import verify
from tests.fixtures.data.mistral_tokenizer import build
from utils.datafiles import DataProblem, prove
from utils.spec.models import get_model

CORPUS = Path(__file__).resolve().parent / "fixtures" / "data" / "encode_corpus.jsonl"


@pytest.fixture(scope="module")
def prepared(tmp_path_factory) -> tuple[Path, Path, object]:
    """DATA_DIR with the mistral-shaped tokenizer and the encode corpus encoded and verified with it."""
    root = tmp_path_factory.mktemp("mistral-data")
    tokenizer = build(root / "tokenizers" / "mistral")
    stats = encode_file(CORPUS, tokenizer, str(root / "corpus_mistral"), keys=["text"], workers=1, append_eod=True,
                        progress=False, cache=root / "proofs")
    prefix = root / "corpus_mistral_text_document"
    verify(prefix, tokenizer, clean_report=None, seq_length=64, samples=4, seed=1)
    return prefix, tokenizer, stats


def sequences(prefix: Path) -> tuple[list[np.ndarray], np.ndarray]:
    """The pair's sequences (uint16 tokens, as data.encode writes a 32,000-id vocabulary) and its document index."""
    raw = Path(f"{prefix}.idx").read_bytes()
    head = read_header(raw)
    n = head.sequences
    lengths = np.frombuffer(raw, np.int32, n, HEADER_SIZE)
    pointers = np.frombuffer(raw, np.int64, n, HEADER_SIZE + 4 * n)
    documents = np.frombuffer(raw, np.int64, head.documents, HEADER_SIZE + 12 * n)
    tokens = np.fromfile(f"{prefix}.bin", dtype=np.uint16)
    return [tokens[p // 2:p // 2 + length] for p, length in zip(pointers, lengths)], documents


def test_the_tokenizer_is_mistral_shaped(prepared):
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(str(prepared[1]))
    assert len(tok) == get_model("mistral").vocab_size == 32000
    assert (tok.unk_token_id, tok.bos_token_id, tok.eos_token_id) == (0, 1, 2)
    ids = tok("中").input_ids  # unseen: three UTF-8 bytes through byte fallback, after BOS
    assert ids[0] == 1 and ids[-3:] == [3 + 0xE4, 3 + 0xB8, 3 + 0xAD]


def test_encode_falls_back_to_the_hf_tokenizer_and_every_document_is_bos_to_eos(prepared):
    prefix, _, stats = prepared
    assert stats.backend.startswith("hf (")  # byte fallback is no plain BPE: tiktoken cannot stand in
    seqs, documents = sequences(prefix)
    assert max(int(s.max()) for s in seqs) < 32000 and len(documents) == 26  # the corpus's 25 documents
    assert {int(s[0]) for s in seqs} == {1}  # BOS before every text, as Mistral's tokenizer puts it
    assert {int(seqs[end - 1][-1]) for end in documents[1:]} == {2}  # EOD </s> closes every document


def test_the_verified_pair_is_proven_for_mistral_and_refused_for_llama(prepared):
    prefix, tokenizer, _ = prepared
    assert prove(prefix, tokenizer, "mistral", 32000).manifest["tokenizer"]["model"] == "mistral"
    with pytest.raises(DataProblem, match="encoded with the mistral tokenizer, not llama's"):
        prove(prefix, tokenizer, "llama", get_model("llama").vocab_size)
