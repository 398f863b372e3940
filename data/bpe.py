"""A tiktoken encoder that gives the same ids as a byte-level BPE Hugging Face tokenizer, several times faster,
proven once per tokenizer and cached, so that encoding imports neither transformers nor torch.

tiktoken and the Rust `tokenizers` BPE agree when the tokenizer is a plain byte-level BPE whose
merges are ordered by the rank of the token they produce (true of tokenizers converted from
tiktoken ranks, Llama 3's and Qwen's). `twin_spec` checks that structure and gives the reason
otherwise; callers then use the Hugging Face tokenizer. Documents that contain the text of an added
token are left to the Hugging Face tokenizer too (it splits them out before BPE).

The proof loads the tokenizer with transformers' AutoTokenizer, as Megatron-LM's tool does (seconds:
transformers imports torch), checks that structure and compares the ids of both on the bundled
sample corpus and on texts where regular-expression engines tend to differ. What it finds is all
that encoding needs: the EOS id, the vocabulary size, tiktoken's ranks, pattern and added tokens,
and the Hugging Face tokenizer exactly as AutoTokenizer built it (its `tokenizers` JSON, which loads
without transformers). It is kept in ${XDG_CACHE_HOME:-~/.cache}/tprimat/tokenizer-proofs/KEY, KEY
being the sha256 of the tokenizer's files, of this module and of the versions of transformers,
tokenizers and tiktoken: a change to any of them proves again. tests/test_data_encode.py also checks
the identity on the test corpora.
"""

from __future__ import annotations

import errno
import gzip
import json
import os
import re
import shutil
import unicodedata
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import numpy as np

from utils.cli import UsageError
from utils.datafiles import tokenizer_sha256
from utils.files import atomic_open, read_json, sha256_file, sha256_listing, write_json

PROOF_CORPUS = Path(__file__).resolve().parent / "sample" / "sample.jsonl.gz"
PROOF_TEXTS = [  # scripts, marks and whitespace whose regex classes differ between engines and Unicode versions
    "Cafe\u0301 nai\u0308ve \ufb01n", "日本語の文章、句読点。", "한국어 문장입니다", "مرحبا بالعالم", "שלום עולם",
    "Привет, мир", "Γειά σου κόσμε", "नमस्ते दुनिया", "👩\u200d👩\u200d👧 🇫🇷 ✍🏽", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝟙𝟚𝟛",
    "  lead\ttab\u00a0nbsp\u2009thin\u200bzero ", "a\r\nb\rc\u2028d\u2029e\x0bf\x0cg\n\n\n", "1234567 3.14159 0x1F",
    "don't I'LL we'VE they'd", "ǅungla ʰmodifier ǂclick", "\U0001fae8 \U0001fabb new emoji",
]
LIBRARIES = ("transformers", "tokenizers", "tiktoken")  # their versions are part of the proof's key
PROOF_FILE, RANKS_FILE, HF_FILE = "proof.json", "ranks.npz", "tokenizer.json"


def _byte_decoder() -> dict[str, int]:
    """Inverse of GPT-2's bytes_to_unicode: the printable character standing for each byte."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) \
        + list(range(ord("®"), ord("ÿ") + 1))
    chars, extra = {}, 0
    for byte in range(256):
        if byte in printable:
            chars[chr(byte)] = byte
        else:
            chars[chr(256 + extra)] = byte
            extra += 1
    return chars


@dataclass
class TiktokenTwin:
    """tiktoken's encoder plus what the Hugging Face pipeline adds around BPE."""

    encoding: object  # tiktoken.Encoding
    nfc: bool  # the HF normalizer is NFC
    prefix: np.ndarray  # ids the post-processor puts before every text (BOS)
    suffix: np.ndarray
    added: re.Pattern  # any added token's text: such documents go to the HF tokenizer

    def encode(self, text: str) -> np.ndarray | None:
        """The ids of `text` as the HF tokenizer gives them, or None if the HF tokenizer must do it."""
        if self.added.search(text):
            return None
        if self.nfc:
            text = unicodedata.normalize("NFC", text)
        body = self.encoding.encode_to_numpy(text, disallowed_special=())
        return np.concatenate([self.prefix, body, self.suffix])


def twin_spec(backend) -> tuple[dict | None, dict[bytes, int], str]:
    """(spec, ranks, "") for a tokenizers.Tokenizer whose structure tiktoken reproduces, else (None, {}, reason)."""
    spec = json.loads(backend.to_str())
    model, normalizer, pre = spec["model"], spec.get("normalizer"), spec.get("pre_tokenizer") or {}
    if model.get("type") != "BPE" or model.get("byte_fallback") or model.get("dropout") \
            or model.get("continuing_subword_prefix") or model.get("end_of_word_suffix"):
        return None, {}, "not a plain BPE model"
    if normalizer not in (None, {"type": "NFC"}):
        return None, {}, f"normalizer {normalizer.get('type')} is not reproduced"
    steps = pre.get("pretokenizers", [])
    if pre.get("type") != "Sequence" or len(steps) != 2 or steps[0].get("type") != "Split" \
            or steps[0].get("behavior") != "Isolated" or steps[0].get("invert") \
            or "Regex" not in steps[0].get("pattern", {}) or steps[1].get("type") != "ByteLevel" \
            or steps[1].get("add_prefix_space") or steps[1].get("use_regex"):
        return None, {}, "pre-tokenizer is not Split(regex) + ByteLevel"
    decode = _byte_decoder()
    try:
        ranks = {bytes(decode[c] for c in token): rank for token, rank in model["vocab"].items()}
    except KeyError:
        return None, {}, "vocabulary is not byte-level"
    merges = [m.split(" ") if isinstance(m, str) else m for m in model["merges"]]
    merged = [model["vocab"].get(a + b, -1) for a, b in merges]
    if min(merged, default=0) < 0 or any(x > y for x, y in zip(merged, merged[1:])):
        return None, {}, "merges are not ordered by the rank of their result"
    with_specials = backend.encode("a", add_special_tokens=True).ids
    plain = backend.encode("a", add_special_tokens=False).ids
    at = next((i for i in range(len(with_specials)) if with_specials[i:i + len(plain)] == plain), None)
    if at is None:
        return None, {}, "post-processor does more than add tokens around the text"
    return {"pattern": steps[0]["pattern"]["Regex"], "nfc": normalizer == {"type": "NFC"},
            "prefix": with_specials[:at], "suffix": with_specials[at + len(plain):],
            "added_tokens": {t["content"]: t["id"] for t in spec.get("added_tokens", [])}}, ranks, ""


def make_twin(spec: dict, ranks: dict[bytes, int]) -> TiktokenTwin:
    """The twin of a spec. tiktoken gets the added tokens as special tokens although it never sees them (their
    documents go to the HF tokenizer): tiktoken 0.14 encodes 1.7x faster with them than with none."""
    import tiktoken

    added = spec["added_tokens"]
    encoding = tiktoken.Encoding(name="hf-twin", pat_str=spec["pattern"], mergeable_ranks=ranks, special_tokens=added)
    pattern = re.compile("|".join(map(re.escape, sorted(added, key=len, reverse=True)))) if added \
        else re.compile(r"(?!x)x")
    return TiktokenTwin(encoding, spec["nfc"], np.asarray(spec["prefix"], np.uint32),
                        np.asarray(spec["suffix"], np.uint32), pattern)


def write_ranks(path: Path, ranks: dict[bytes, int]) -> None:
    """The tokens' bytes end to end, where each ends, and each one's rank: read back 4x faster than tiktoken's
    own base64 lines, a tenth of a second less start-up with Llama's 128,000 tokens."""
    tokens = list(ranks)
    with atomic_open(path, "wb") as out:
        np.savez(out, blob=np.frombuffer(b"".join(tokens), np.uint8),
                 ends=np.cumsum([len(t) for t in tokens], dtype=np.int64),
                 ranks=np.fromiter(ranks.values(), np.int64, len(ranks)))


def read_ranks(path: Path) -> dict[bytes, int]:
    with np.load(path) as saved:
        blob, ends, ranks = saved["blob"].tobytes(), saved["ends"].tolist(), saved["ranks"].tolist()
    return dict(zip([blob[start:end] for start, end in zip([0] + ends[:-1], ends)], ranks))


@dataclass(frozen=True)
class Proof:
    """A tokenizer as proven: what encoding needs of it, read from the cache without transformers."""

    entry: Path  # the cache directory holding it
    eos_id: int | None
    vocab_size: int  # len() of the AutoTokenizer, as Megatron-LM counts it
    tiktoken: dict | None  # twin_spec's spec; None when tiktoken does not reproduce the tokenizer
    why_not_tiktoken: str

    def twin(self) -> TiktokenTwin:
        assert self.tiktoken is not None
        return make_twin(self.tiktoken, read_ranks(self.entry / RANKS_FILE))

    def hf_tokenizer(self):
        """The tokenizers.Tokenizer AutoTokenizer built (about 0.5 s for Llama's)."""
        from tokenizers import Tokenizer
        return Tokenizer.from_file(str(self.entry / HF_FILE))


def cache_root() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "tprimat" / "tokenizer-proofs"


def proof_key(tokenizer_dir: Path) -> str:
    """sha256 over the tokenizer's files, this module and the libraries' versions."""
    return sha256_listing([("tokenizer", tokenizer_sha256(tokenizer_dir)[0]),
                           ("data/bpe.py", sha256_file(Path(__file__))),
                           *((name, metadata.version(name)) for name in LIBRARIES)])


def read_proof(entry: Path) -> Proof:
    """A cached proof; OSError or ValueError if it is damaged."""
    recorded = read_json(entry / PROOF_FILE)
    try:
        proof = Proof(entry, recorded["eos_id"], recorded["vocab_size"], recorded["tiktoken"],
                      recorded["why_not_tiktoken"])
    except (KeyError, TypeError) as err:
        raise ValueError(f"{entry / PROOF_FILE}: {err}") from None
    needed = [HF_FILE] + ([RANKS_FILE] if proof.tiktoken is not None else [])
    if missing := [name for name in needed if not (entry / name).is_file()]:
        raise ValueError(f"{entry}: {', '.join(missing)} missing")
    return proof


def load_proof(tokenizer_dir: Path, root: Path | None = None) -> tuple[Proof, bool]:
    """The tokenizer's proof and whether it was made now (cache miss) rather than read from the cache."""
    entry = (root or cache_root()) / proof_key(tokenizer_dir)
    if entry.is_dir():
        try:
            return read_proof(entry), False
        except (OSError, ValueError):  # damaged by hand: prove again
            shutil.rmtree(entry, ignore_errors=True)
    return prove(tokenizer_dir, entry), True


def disagreement(twin: TiktokenTwin, backend) -> str:
    """'' when tiktoken gives the HF tokenizer's ids on the proof texts, else the first text where it does not."""
    texts = PROOF_TEXTS + [json.loads(line)["text"] for line in gzip.open(PROOF_CORPUS, "rt", encoding="utf-8")]
    for text, slow in zip(texts, backend.encode_batch(texts, add_special_tokens=True)):
        fast = twin.encode(text)
        if fast is not None and not np.array_equal(fast, slow.ids):
            return f"tiktoken and the HF tokenizer disagree on {text[:40]!r}"
    return ""


def prove(tokenizer_dir: Path, entry: Path) -> Proof:
    """Load the tokenizer as Megatron-LM does, prove the tiktoken twin, and cache the result at `entry`."""
    staging = entry.with_name(f".{entry.name}.{os.getpid()}.tmp")
    try:
        staging.mkdir(parents=True)
    except OSError as err:
        if err.errno == errno.ENOSPC:
            raise
        raise UsageError(f"cannot write the tokenizer proof cache {entry.parent} ({err.strerror}); "
                         "set XDG_CACHE_HOME to a writable directory") from None
    try:
        hf = _auto_tokenizer(tokenizer_dir)
        spec, ranks, why = twin_spec(hf.backend_tokenizer)
        if spec is not None and (why := disagreement(make_twin(spec, ranks), hf.backend_tokenizer)):
            spec = None
        # Written by Python, not the Rust library's save(), so that a full disk is an OSError (utils.files).
        with atomic_open(staging / HF_FILE, encoding="utf-8") as out:
            out.write(hf.backend_tokenizer.to_str(pretty=True))
        if spec is not None:
            write_ranks(staging / RANKS_FILE, ranks)
        write_json(staging / PROOF_FILE, {
            "tokenizer": str(tokenizer_dir.resolve()), "eos_id": hf.eos_token_id, "vocab_size": len(hf),
            "tiktoken": spec, "why_not_tiktoken": why,
            "libraries": {name: metadata.version(name) for name in LIBRARIES}})
        try:
            os.rename(staging, entry)  # the whole entry at once
        except OSError as err:
            if err.errno not in (errno.EEXIST, errno.ENOTEMPTY):
                raise  # else another process proved the same tokenizer meanwhile: its entry is as good
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return read_proof(entry)


def _auto_tokenizer(tokenizer_dir: Path):
    """transformers' AutoTokenizer of the directory, the tokenizer Megatron-LM's tool encodes with."""
    from transformers import AutoTokenizer

    try:
        hf = AutoTokenizer.from_pretrained(str(tokenizer_dir))
    except (OSError, ValueError) as err:
        reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise UsageError(f"--tokenizer-model {tokenizer_dir}: transformers cannot load it ({reason})") from None
    if not getattr(hf, "is_fast", False):
        raise UsageError(f"--tokenizer-model {tokenizer_dir}: transformers loads it as a slow tokenizer; "
                         "give a directory with a tokenizer.json")
    return hf
