"""evaluate.wrap: a secret is found in every form a file can hide it in, or the file is refused, naming it
(issue 33's class 9: each of these was packed into output.zip and the token recovered from it)."""

from __future__ import annotations

import base64
import bz2
import gzip
import io
import lzma
import tarfile
import zipfile
import zlib

import pytest

from evaluate import wrap
from tests.test_evaluate_wrap import TOKEN, output_dir, run_dir, secrets_env, wrap_refuses, zip_bytes  # noqa: F401

LOG = f"iteration 1 | token {TOKEN}\n".encode() * 20


def v7_tar(members: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.GNU_FORMAT) as archive:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    raw = bytearray(buffer.getvalue())
    raw[257:265] = b"\0" * 8  # no "ustar" magic: a v7 header, told by its checksum alone
    raw[148:156] = b" " * 8
    raw[148:156] = f"{sum(raw[:512]):06o}\0 ".encode()
    return bytes(raw)


def basic_auth(user: str) -> bytes:
    return f"Authorization: Basic {base64.b64encode(f'{user}:{TOKEN}'.encode()).decode()}\n".encode()


HIDDEN = {
    "v7 tar holding a gzip": ("logs.tar", v7_tar({"train.log.gz": gzip.compress(LOG)})),
    "legacy lzma": ("train.log.lzma", lzma.compress(LOG, format=lzma.FORMAT_ALONE)),
    "UTF-16LE text": ("notes.txt", LOG.decode().encode("utf-16-le")),
    "UTF-16 with its byte-order mark": ("notes16.txt", LOG.decode().encode("utf-16")),
    "UTF-32BE text": ("notes32.txt", LOG.decode().encode("utf-32-be")),
    "raw zlib": ("train.log.z", zlib.compress(LOG)),
    "a gzip appended to a shell script": ("run.sh", b"#!/bin/sh\ntail -n +3 $0 | gunzip\nexit\n" + gzip.compress(LOG)),
    "a bzip2 appended to a binary": ("blob.bin", bytes(range(256)) * 3 + bz2.compress(LOG)),
    "two zips concatenated, the first hidden": ("two.zip", zip_bytes({"secret.log": LOG}) + zip_bytes({"x": b"x"})),
    "base64 in a Basic authorization line (3 alignments)": ("curl.txt", basic_auth("u") + basic_auth("us")
                                                            + basic_auth("use")),
    "base64 at the second alignment only": ("h2.txt", basic_auth("us")),
    "base64 at the third alignment only": ("h3.txt", basic_auth("use")),
    "URL-safe base64": ("url.txt", base64.urlsafe_b64encode(b"x:" + TOKEN.encode())),
    "hex": ("dump.txt", TOKEN.encode().hex().encode()),
}


@pytest.mark.parametrize("name, data", HIDDEN.values(), ids=HIDDEN.keys())
def test_a_secret_in_a_hidden_form_stops_the_wrap_naming_the_file(output_dir, secrets_env, tmp_path, capsys, name,
                                                                  data):
    (run_dir(output_dir) / name).write_bytes(data)
    printed = wrap_refuses(output_dir, tmp_path, capsys, said=name)
    assert len(printed.strip().splitlines()) == 1


def test_an_encrypted_entry_of_a_hidden_zip_is_refused(output_dir, secrets_env, tmp_path, capsys):
    hidden = bytearray(zip_bytes({"secret.log": b"nothing"}))
    hidden[6] |= 0x1  # the local header's encrypted flag; the second zip is the one a zip reader lists
    (run_dir(output_dir) / "two.zip").write_bytes(bytes(hidden) + zip_bytes({"x": b"x"}))
    wrap_refuses(output_dir, tmp_path, capsys, said="encrypted")


def test_clean_files_in_those_forms_are_packed(output_dir, secrets_env, tmp_path):
    clean = b"iteration 1 | loss 10.5\n" * 20
    for name, data in (("a.lzma", lzma.compress(clean, format=lzma.FORMAT_ALONE)), ("b.z", zlib.compress(clean)),
                       ("c.sh", b"#!/bin/sh\n" + gzip.compress(clean)), ("d.tar", v7_tar({"e.log": clean})),
                       ("f.txt", clean.decode().encode("utf-16-le"))):
        (run_dir(output_dir) / name).write_bytes(data)
    assert wrap.main([str(output_dir), "--output", str(tmp_path / "output.zip")]) == 0
    with zipfile.ZipFile(tmp_path / "output.zip") as archive:
        assert {"output/20250501-120000-nvd/mega-llama/a.lzma", "output/20250501-120000-nvd/mega-llama/d.tar"} \
            <= set(archive.namelist())
