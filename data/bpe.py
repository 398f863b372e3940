"""A tiktoken encoder that gives the same ids as a byte-level BPE Hugging Face tokenizer, several times faster.

tiktoken and the Rust `tokenizers` BPE agree when the tokenizer is a plain byte-level BPE whose
merges are ordered by the rank of the token they produce (true of tokenizers converted from
tiktoken ranks, Llama 3's and Qwen's). `build_twin` checks that structure and returns None with
the reason otherwise; callers then use the Hugging Face tokenizer. Documents that contain the text
of an added token are left to the Hugging Face tokenizer too (it splits them out before BPE).
Identity is proven on the test corpora (tests/test_data_encode.py) and spot-checked on every input
by data.encode.
"""

from __future__ import annotations

import json
import re
import unicodedata
from dataclasses import dataclass

import numpy as np


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
    prefix: list[int]  # ids the post-processor puts before every text (BOS)
    suffix: list[int]
    added: re.Pattern  # any added token's text: such documents go to the HF tokenizer

    def encode(self, text: str) -> np.ndarray | None:
        """The ids of `text` as the HF tokenizer gives them, or None if the HF tokenizer must do it."""
        if self.added.search(text):
            return None
        if self.nfc:
            text = unicodedata.normalize("NFC", text)
        body = self.encoding.encode_to_numpy(text, disallowed_special=())
        return np.concatenate([np.asarray(self.prefix, np.uint32), body, np.asarray(self.suffix, np.uint32)])


def build_twin(backend) -> tuple[TiktokenTwin | None, str]:
    """(twin, "") for a tokenizers.Tokenizer whose structure tiktoken reproduces, else (None, reason)."""
    import tiktoken

    spec = json.loads(backend.to_str())
    model, normalizer, pre = spec["model"], spec.get("normalizer"), spec.get("pre_tokenizer") or {}
    if model.get("type") != "BPE" or model.get("byte_fallback") or model.get("dropout") \
            or model.get("continuing_subword_prefix") or model.get("end_of_word_suffix"):
        return None, "not a plain BPE model"
    if normalizer not in (None, {"type": "NFC"}):
        return None, f"normalizer {normalizer.get('type')} is not reproduced"
    steps = pre.get("pretokenizers", [])
    if pre.get("type") != "Sequence" or len(steps) != 2 or steps[0].get("type") != "Split" \
            or steps[0].get("behavior") != "Isolated" or steps[0].get("invert") \
            or "Regex" not in steps[0].get("pattern", {}) or steps[1].get("type") != "ByteLevel" \
            or steps[1].get("add_prefix_space") or steps[1].get("use_regex"):
        return None, "pre-tokenizer is not Split(regex) + ByteLevel"
    decode = _byte_decoder()
    try:
        ranks = {bytes(decode[c] for c in token): rank for token, rank in model["vocab"].items()}
    except KeyError:
        return None, "vocabulary is not byte-level"
    merges = [m.split(" ") if isinstance(m, str) else m for m in model["merges"]]
    merged = [model["vocab"].get(a + b, -1) for a, b in merges]
    if min(merged, default=0) < 0 or any(x > y for x, y in zip(merged, merged[1:])):
        return None, "merges are not ordered by the rank of their result"
    added = [t["content"] for t in spec.get("added_tokens", [])]
    specials = {t["content"]: t["id"] for t in spec.get("added_tokens", [])}
    encoding = tiktoken.Encoding(name="hf-twin", pat_str=steps[0]["pattern"]["Regex"], mergeable_ranks=ranks,
                                 special_tokens=specials)
    with_specials = backend.encode("a", add_special_tokens=True).ids
    plain = backend.encode("a", add_special_tokens=False).ids
    at = next((i for i in range(len(with_specials)) if with_specials[i:i + len(plain)] == plain), None)
    if at is None:
        return None, "post-processor does more than add tokens around the text"
    pattern = re.compile("|".join(map(re.escape, sorted(added, key=len, reverse=True)))) if added \
        else re.compile(r"(?!x)x")
    return TiktokenTwin(encoding, normalizer == {"type": "NFC"}, with_specials[:at],
                        with_specials[at + len(plain):], pattern), ""
