"""The forms a secret can take in a file evaluate.wrap packs, and the containers it can hide in.

A secret is searched for as its bytes in every encoding a text can be saved in (UTF-8, UTF-16 and UTF-32 of either
byte order), as JSON writes it, URL-encoded (%XX in either case, as a query string or a userinfo carries it), as
base64 (standard and URL-safe, at each of the three alignments it can start at inside a longer encoded text, such as
"Authorization: Basic" of user:token) and hex. Containers are told by
their first bytes, including those without a magic string at a fixed place: a v7 tar (its header's checksum), a
legacy .lzma (its header's properties) and raw zlib (its header's check). A compressed stream or a zip entry can also
sit inside another file (a gzip appended to a shell script, two zips concatenated, whose first one no zip reader
lists): `embedded` finds each by its signature anywhere in the bytes and decodes it from there.
"""

from __future__ import annotations

import base64
import bz2
import io
import lzma
import re
import struct
import tarfile
import zlib
from typing import Callable, Iterator
from urllib.parse import quote_from_bytes

TEXT_ENCODINGS = ("utf-16-le", "utf-16-be", "utf-32-le", "utf-32-be")
EMBEDDED_SIGNATURES = re.compile(rb"\x1f\x8b\x08|BZh[1-9]1AY&SY|\xfd7zXZ\x00|PK\x03\x04")
MAX_EMBEDDED = 4096  # signatures followed per file: more is no honest file, and the search stays bounded
LOCAL_HEADER = struct.Struct("<4s5H3I2H")  # a zip entry's local header


def forms(value: bytes) -> list[bytes]:
    """Every byte string that holds the value when it is saved or encoded as this module's docstring lists."""
    text = value.decode("utf-8", "replace")
    found = [text.encode(encoding) for encoding in TEXT_ENCODINGS]
    found += [value.hex().encode(), value.hex().upper().encode()]
    encoded_url = quote_from_bytes(value, safe="").encode()
    found += [encoded_url, re.sub(rb"%[0-9A-F]{2}", lambda escape: escape.group().lower(), encoded_url)]
    for shift in range(3):  # base64 of the value after `shift` other bytes: the part no neighbour changes
        encoded = base64.b64encode(b"\0" * shift + value)
        start = 4 if shift else 0
        middle = encoded[start:start + (len(value) - (3 - shift) % 3) // 3 * 4]
        if len(middle) >= 8:
            found += [middle, middle.translate(bytes.maketrans(b"+/", b"-_"))]
    return list(dict.fromkeys(found))


def is_tar(head: bytes) -> bool:
    """A tar header of any format (v7 has no "ustar" magic; its checksum is what tells it)."""
    if len(head) < 512:
        return False
    try:
        tarfile.TarInfo.frombuf(head[:512], "utf-8", "surrogateescape")
    except (tarfile.HeaderError, ValueError):
        return False
    return True


def _decodes(decompressor, head: bytes) -> bool:
    try:
        decompressor.decompress(head)
    except (lzma.LZMAError, zlib.error, EOFError, ValueError):
        return False
    return True


def is_lzma_alone(head: bytes) -> bool:
    """A legacy .lzma (xz --format=lzma): properties, dictionary size and length that decode."""
    if len(head) < 13 or head[0] >= 225:
        return False
    dictionary, size = struct.unpack("<IQ", head[1:13])
    return dictionary >= 4096 and (size == 2 ** 64 - 1 or size < 2 ** 48) and \
        _decodes(lzma.LZMADecompressor(lzma.FORMAT_ALONE), head)


def is_zlib(head: bytes) -> bool:
    """Raw zlib: deflate with a window of at most 32 KiB, the header's check, and bytes that inflate."""
    return len(head) >= 2 and head[0] & 0x0F == 8 and head[0] >> 4 <= 7 and (head[0] << 8 | head[1]) % 31 == 0 \
        and _decodes(zlib.decompressobj(), head)


class Decoded(io.RawIOBase):
    """A stream read through an incremental decompressor (zlib, raw deflate, lzma alone, bzip2)."""

    def __init__(self, source, decompressor, limit: int | None = None):
        self.source, self.decompressor, self.left = source, decompressor, limit
        self.pending = b""

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        while not self.pending:
            if getattr(self.decompressor, "eof", False) or self.left == 0:
                return 0
            chunk = self.source.read(1 << 16 if self.left is None else min(1 << 16, self.left))
            if not chunk:
                return 0
            if self.left is not None:
                self.left -= len(chunk)
            self.pending = self.decompressor.decompress(chunk)
        data, self.pending = self.pending[:len(buffer)], self.pending[len(buffer):]
        buffer[:len(data)] = data
        return len(data)


def zlib_reader(raw) -> io.BufferedReader:
    return io.BufferedReader(Decoded(raw, zlib.decompressobj()))


def lzma_alone_reader(raw) -> io.BufferedReader:
    return io.BufferedReader(Decoded(raw, lzma.LZMADecompressor(lzma.FORMAT_ALONE)))


ZIP_METHODS: dict[int, Callable[[], object] | None] = {0: None, 8: lambda: zlib.decompressobj(-15),
                                                     12: bz2.BZ2Decompressor}


def embedded(data, start: int = 1) -> Iterator[tuple[int, str, Callable[[], io.RawIOBase] | str]]:
    """Each compressed stream or zip entry whose signature is in data at or after `start`: (offset, kind, a
    function that opens its decoded bytes), or (offset, kind, why it cannot be searched) for an entry that is
    encrypted or packed in a way TPrimat cannot undo."""
    seen = 0
    for match in EMBEDDED_SIGNATURES.finditer(data, start):
        seen += 1
        if seen > MAX_EMBEDDED:
            return
        offset, signature = match.start(), match.group()
        if signature.startswith(b"PK"):
            entry = _zip_entry(data, offset)
            if entry is not None:
                yield offset, "zip entry", entry
            continue
        kind = {0x1F: "gzip", 0x42: "bzip2", 0xFD: "xz"}[signature[0]]
        make = {"gzip": lambda: zlib.decompressobj(31), "bzip2": bz2.BZ2Decompressor,
                "xz": lzma.LZMADecompressor}[kind]
        yield offset, kind, (lambda offset=offset, make=make: Decoded(io.BytesIO(data[offset:]), make()))


def _zip_entry(data, offset: int):
    """A zip entry from its local header: an opener of its bytes, the reason it cannot be searched, or None where
    the signature starts no plausible entry."""
    if offset + LOCAL_HEADER.size > len(data):
        return None
    _, version, flags, method, _, _, _, compressed, _, name_length, extra_length = LOCAL_HEADER.unpack_from(data,
                                                                                                          offset)
    begin = offset + LOCAL_HEADER.size + name_length + extra_length
    if begin > len(data) or version > 63 or not 0 < name_length <= 4096:  # no entry a zip writer makes
        return None
    if flags & 0x1:
        return "encrypted"
    if method not in ZIP_METHODS:
        return f"packed with zip method {method}"
    end = begin + compressed if compressed and not flags & 0x8 else len(data)
    make = ZIP_METHODS[method]
    if make is None:
        return lambda: io.BytesIO(data[begin:end])
    return lambda: Decoded(io.BytesIO(data[begin:end]), make())
