"""Where prepared data lives, proof that a pair is the one data.verify verified, and the fingerprint of what is read.

    python3 -m utils.datafiles layout DATA_DIR DATASET MODEL   # the tokenizer directory, data.encode's
                                                               # --output-prefix and the pair's prefix, one per line

The layout (DATA_DIR/tokenizers/<model>, DATA_DIR/<dataset>_<model>_text_document.{bin,idx}) is written here
alone: shell/data.sh asks this command, the planner and the trainers call the functions. <model> is the model's
data key (utils.spec.models.ModelSpec.data_key): a model that uses another's tokenizer (llama70b: llama's) reads that
model's data, so one preparation serves both.

The one check every consumer makes before it trusts a prefix: the plan check and the launcher
(train.plan.data_problems, once per run, whatever the framework), the Megatron trainer on each rank
(train.common.megatron_data.locate) and the results' dataset fingerprint (evaluate.fingerprint). It proves:
the manifest is one data.verify wrote and says verified; each file has the size and the sha256 the
manifest records (so a flipped byte, a truncated file, an .idx swapped with another pair's all fail);
with a tokenizer directory and a model, the tokenizer files are those that encoded the pair, and
every token id (the manifest's max_token_id, proven by the hash) fits the model's vocabulary.

Hashing is the cost (bench/proof.py measures it), so a full hash is remembered in
PREFIX.hashed.json with each file's inode, size, mtime and ctime at that moment. While all four are
unchanged the file has not been written since: `touch` can restore an mtime, but every write,
touch, chmod or rename sets ctime to the present, which only the system clock's owner can move back.
A file whose ctime is within RACY_NS of the hash's start could still change unseen in the same clock
tick, so it is not remembered and is hashed in full again next time (git's "racily clean" rule).
"""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import shutil
import struct
import sys
import time
from array import array
from dataclasses import dataclass
from pathlib import Path

from utils.cli import Parser
from utils.files import read_json, sha256_file, sha256_listing, unique_tmp_path
from utils.spec.models import MODEL_KEYS, get_model

PREPARE = "./shell/run_data.sh"
FIX = f"prepare it again with {PREPARE}"
MANIFEST_SCHEMA = "tprimat.data-manifest/1"
CACHE_SCHEMA = "tprimat.data-hashes/1"
RACY_NS = 2_000_000_000  # a ctime this close to the hash's start is not trusted to prove "unchanged"
SUFFIXES = (".bin", ".idx")
IDENTITY_FILE = "tprimat_tokenizer.json"
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".gguf", ".h5", ".msgpack", ".onnx")


class DataProblem(Exception):
    """The prefix is not the verified data: one line naming the file, what differs and the fix."""


def document_prefix(output_prefix: str | Path, key: str = "text") -> Path:
    """OUTPUT_PREFIX_<key>_document: the pair Megatron's preprocess_data.py (and data.encode) writes for one JSON
    key, without its .bin/.idx suffix."""
    return Path(f"{output_prefix}_{key}_document")


def data_key(model: str) -> str:
    """The name of the model's tokenizer and prepared data: its own key, or the key of the model whose tokenizer it
    uses (ValueError for a name that is no model key)."""
    return get_model(model).data_key


def encode_prefix(data_dir: str, dataset: str, model: str) -> Path:
    """data.encode's --output-prefix for one model's tokenization of a dataset."""
    return Path(data_dir) / f"{dataset}_{data_key(model)}"


def data_prefix(data_dir: str, dataset: str, model: str) -> Path:
    """Megatron's dataset prefix (no .bin/.idx suffix) of one model's tokenization of a dataset."""
    return document_prefix(encode_prefix(data_dir, dataset, model))


def tokenizer_dir(data_dir: str, model: str) -> Path:
    """Where data.fetch puts one model's tokenizer files."""
    return Path(data_dir) / "tokenizers" / data_key(model)


def tokenizer_sha256(directory: Path) -> tuple[str, dict[str, str]]:
    """sha256 over the sorted (name, sha256) of every file of the directory but the identity file and model
    weights (a model directory given as the tokenizer: gigabytes that are no part of it)."""
    files = {p.name: sha256_file(p) for p in sorted(directory.iterdir())
             if p.is_file() and p.name != IDENTITY_FILE and not p.name.endswith(WEIGHT_SUFFIXES)}
    return sha256_listing(files.items()), files


def sibling(prefix: Path, suffix: str) -> Path:
    return prefix.with_name(prefix.name + suffix)


def manifest_path(prefix: Path) -> Path:
    return sibling(prefix, ".manifest.json")


def cache_path(prefix: Path) -> Path:
    return sibling(prefix, ".hashed.json")


def pair_fingerprint(bin_sha: str, idx_sha: str) -> str:
    """The dataset fingerprint: sha256 of the two files' hex sha256 joined by a newline."""
    return hashlib.sha256(f"{bin_sha}\n{idx_sha}".encode()).hexdigest()


def stat_key(path: Path) -> dict:
    """What changes whenever the file is written: inode, size, mtime, ctime."""
    st = os.stat(path)
    return {"inode": st.st_ino, "bytes": st.st_size, "mtime_ns": st.st_mtime_ns, "ctime_ns": st.st_ctime_ns}


def _read_cache(prefix: Path) -> dict:
    try:
        cache = read_json(cache_path(prefix))
    except (OSError, ValueError):
        return {}
    files = cache.get("files") if cache.get("schema") == CACHE_SCHEMA else None
    return {k: v for k, v in files.items() if isinstance(v, dict)} if isinstance(files, dict) else {}


def _write_cache(prefix: Path, files: dict) -> None:
    """Best effort (a read-only DATA_DIR only means hashing in full each time); a unique temporary name, so
    that ranks and nodes writing at once never trip over each other."""
    path = cache_path(prefix)
    tmp = unique_tmp_path(path)
    try:
        tmp.write_text(json.dumps({"schema": CACHE_SCHEMA, "files": files}, indent=2, sort_keys=True) + "\n")
        os.replace(tmp, path)
    except OSError:
        tmp.unlink(missing_ok=True)


def pair_hashes(prefix: Path) -> tuple[dict[str, str], bool]:
    """({".bin": sha256, ".idx": sha256}, whether any file was hashed in full now) of the files as they are.

    A file whose inode, size, mtime and ctime match the remembered hash is not read again."""
    cache = _read_cache(prefix)
    hashes, hashed, changed = {}, False, False
    for suffix in SUFFIXES:
        path = sibling(prefix, suffix)
        key = stat_key(path)
        entry = cache.get(suffix) or {}
        if entry.get("sha256") and {k: entry.get(k) for k in key} == key:
            hashes[suffix] = entry["sha256"]
            continue
        start = time.time_ns()
        sha = sha256_file(path)
        after = stat_key(path)
        hashes[suffix], hashed = sha, True
        if after == key and after["ctime_ns"] < start - RACY_NS:
            cache[suffix], changed = {**after, "sha256": sha}, True
        elif suffix in cache:
            del cache[suffix]
            changed = True
    if changed:
        _write_cache(prefix, cache)
    return hashes, hashed


@dataclass(frozen=True)
class Verified:
    """A prefix proven to hold the files data.verify verified."""

    prefix: Path
    fingerprint: str  # of the files as read now (equal to the manifest's, or the proof fails)
    tokenizer_fingerprint: str
    manifest: dict
    hashed: bool  # True when the files were hashed in full now, False when proven unchanged since their last hash


def _field(data, *keys):
    """data[k1][k2]..., or None where a level is missing or not an object (a manifest edited by hand)."""
    for key in keys:
        data = data.get(key) if isinstance(data, dict) else None
    return data


def read_manifest(prefix: Path) -> dict:
    """The manifest data.verify wrote, saying verified; DataProblem otherwise."""
    path = manifest_path(prefix)
    if not path.is_file():
        raise DataProblem(f"{path}: no data manifest, the dataset is not prepared (or was re-encoded since it was "
                          f"verified); {FIX}")
    try:
        manifest = read_json(path)
    except (OSError, ValueError) as err:
        raise DataProblem(f"{path}: unreadable ({err}); {FIX}") from None
    if not isinstance(manifest, dict) or manifest.get("verified") is not True:
        raise DataProblem(f"{path}: does not say verified (data.verify did not pass); {FIX}")
    needed = {"schema": manifest.get("schema") == MANIFEST_SCHEMA,
              "files.bin.sha256": isinstance(_field(manifest, "files", "bin", "sha256"), str),
              "files.idx.sha256": isinstance(_field(manifest, "files", "idx", "sha256"), str),
              "files.*.bytes": all(isinstance(_field(manifest, "files", k, "bytes"), int) for k in ("bin", "idx")),
              "tokenizer.sha256": isinstance(_field(manifest, "tokenizer", "sha256"), str),
              "statistics.max_token_id": isinstance(_field(manifest, "statistics", "max_token_id"), int)}
    if missing := [name for name, ok in needed.items() if not ok]:
        raise DataProblem(f"{path}: not a manifest data.verify ({MANIFEST_SCHEMA}) wrote: {', '.join(missing)} "
                          f"missing or wrong (edited by hand, or from an older TPrimat); {FIX}")
    files = manifest["files"]
    if manifest.get("fingerprint") != pair_fingerprint(files["bin"]["sha256"], files["idx"]["sha256"]):
        raise DataProblem(f"{path}: its fingerprint is not that of the file hashes it records (edited by hand); {FIX}")
    return manifest


def prove_pair(prefix: Path) -> Verified:
    """The manifest, then each file's size, then each file's sha256, against what data.verify recorded."""
    manifest = read_manifest(prefix)
    for suffix in SUFFIXES:
        path, recorded = sibling(prefix, suffix), manifest["files"][suffix[1:]]
        if not path.is_file():
            raise DataProblem(f"{path}: missing although {manifest_path(prefix).name} exists; {FIX}")
        size = path.stat().st_size
        if size != recorded["bytes"]:
            raise DataProblem(f"{path}: {size} bytes, data.verify verified {recorded['bytes']} (the file changed "
                              f"after verification); {FIX}")
    hashes, hashed = pair_hashes(prefix)
    for suffix in SUFFIXES:
        recorded = manifest["files"][suffix[1:]]["sha256"]
        if hashes[suffix] != recorded:
            raise DataProblem(f"{sibling(prefix, suffix)}: sha256 {hashes[suffix][:12]}... is not the "
                              f"{recorded[:12]}... data.verify verified (the file changed after verification); {FIX}")
    return Verified(prefix, pair_fingerprint(hashes[".bin"], hashes[".idx"]), manifest["tokenizer"]["sha256"],
                    manifest, hashed)


def check_tokenizer(verified: Verified, tokenizer_dir: Path, model: str) -> None:
    """The tokenizer directory holds the files that encoded the pair, and they are the model's."""

    recorded = verified.manifest["tokenizer"]
    key = data_key(model)
    if recorded.get("model") and recorded["model"] != key:
        uses = f", {model} uses {key}'s" if key != model else ""
        raise DataProblem(f"{verified.prefix}: encoded with the {recorded['model']} tokenizer, not {model}'s"
                          f"{uses} (a pair renamed or copied from another model); {FIX}")
    if not tokenizer_dir.is_dir():
        raise DataProblem(f"{tokenizer_dir}: tokenizer directory missing; {FIX}")
    if tokenizer_sha256(tokenizer_dir)[0] != recorded["sha256"]:
        raise DataProblem(f"{tokenizer_dir}: the tokenizer files are not those that encoded {verified.prefix.name} "
                          f"(changed or replaced after verification); {FIX}")


def check_vocabulary(verified: Verified, model: str, vocab_size: int) -> None:
    """Every token id fits the model's embedding rows (a larger one fails inside the model at step 1)."""
    top = verified.manifest["statistics"]["max_token_id"]
    if top >= vocab_size:
        raise DataProblem(f"{sibling(verified.prefix, '.bin')}: token ids up to {top}, beyond {model}'s vocabulary "
                          f"of {vocab_size} (data of another tokenizer); {FIX}")


def prove(prefix: Path, tokenizer_dir: Path, model: str, vocab_size: int) -> Verified:
    """Everything a run needs proven about its data before a model is built; raises DataProblem."""
    verified = prove_pair(prefix)
    check_tokenizer(verified, tokenizer_dir, model)
    check_vocabulary(verified, model, vocab_size)
    return verified


def validation_split_size(prefix: Path, split: str) -> tuple[int, int]:
    """(documents, tokens) of the validation part of a megatron-core split string ("90,10,0") over the pair's
    documents, counted as the trainer's builder counts them (train/common/megatron_data.py: bounds rounded from the
    normalised weights, each document's sequence length), from the .idx alone, so that a run set that could not
    evaluate is refused before it exists (data/indexed.py: the header, then int32 lengths, then document ends)."""
    weights = [float(weight) for weight in split.split(",")]
    normal = [weight / sum(weights) for weight in weights]
    with open(sibling(prefix, ".idx"), "rb") as idx:
        idx.seek(18)  # past the magic, the version and the dtype code
        sequences, document_ends = struct.unpack("<QQ", idx.read(16))
        lengths = array("i")
        lengths.fromfile(idx, sequences)
    if sys.byteorder == "big":
        lengths.byteswap()
    documents = document_ends - 1  # the ends start with a 0
    begin, end = (int(round(sum(normal[:bound]) * float(documents))) for bound in (1, 2))
    return end - begin, sum(lengths[begin:end])


def forget_sample_indices(prefix: Path) -> None:
    """Remove the sample indices megatron-core cached for the prefix's old contents where NeMo and Primus keep them
    (PREFIX/cache/GPTDataset_indices, its default): they are named after the path, not the contents, and would be
    reused for new data. TPrimat's own trainer names its cache after the dataset fingerprint instead."""
    shutil.rmtree(prefix / "cache" / "GPTDataset_indices", ignore_errors=True)


def invalidate(prefix: Path) -> None:
    """Forget that the prefix was verified (manifest, remembered hashes, cached sample indices): called first by
    whatever rewrites its files."""
    for path in (manifest_path(prefix), cache_path(prefix)):
        path.unlink(missing_ok=True)
    forget_sample_indices(prefix)


# --- Megatron's compiled sample-index builder, which data.verify and the trainer read the pair with --

def _helpers_importable() -> bool:
    importlib.invalidate_caches()  # a module compiled since the last look must be found
    try:
        importlib.import_module("megatron.core.datasets.helpers_cpp")
    except ImportError:
        return False
    return True


def ensure_dataset_helpers() -> None:
    """megatron-core's compiled sample-index builder (helpers_cpp), compiled first where it is missing.

    A megatron-core wheel ships it compiled; a Megatron-LM source checkout (Primus's, on the AMD image's
    PYTHONPATH) has only helpers.cpp, which Megatron-LM compiles at start-up (initialize._compile_dependencies):
    megatron-core's compile_helpers() (make) on global rank 0 while the other ranks wait. A node that still
    lacks it after that has its own copy of the checkout (a container per node): its local rank 0 compiles
    it there. Raises DataProblem with one line when it cannot be compiled. Call on every rank.
    """
    import torch.distributed as dist
    from megatron.core.datasets import utils

    distributed = dist.is_initialized()
    rank = dist.get_rank() if distributed else 0
    for compiles in (rank == 0, rank != 0 and os.environ.get("LOCAL_RANK", "0") == "0"):
        if compiles and not _helpers_importable():
            try:
                utils.compile_helpers()
            except (SystemExit, OSError):  # make failed (megatron-core exits 1) or is not installed
                pass
        if distributed:
            dist.barrier()
    if not _helpers_importable():
        where = os.path.dirname(utils.__file__)
        raise DataProblem(f"{where}: megatron-core's dataset helpers (helpers_cpp) are not compiled and `make -C "
                        f"{where}` failed (its output is above); install a C++ compiler and pybind11 and run that "
                        f"make, or install a megatron-core wheel, which ships them compiled")


# Where Megatron-LM's and Megatron-Bridge's start-up call compile_helpers() (make) unconditionally on (local) rank 0:
# Megatron-LM f8837c04 megatron/training/initialize.py:173-178 (imported inside the function) and Megatron-Bridge
# 0.6.2 src/megatron/bridge/training/initialize.py:28 (imported at module level) and 143-147 (utils/upstream/table.py).
COMPILE_HELPERS_CALLERS = ("megatron.core.datasets.utils", "megatron.bridge.training.initialize")


def answer_compile_helpers(callers: tuple[str, ...] = COMPILE_HELPERS_CALLERS) -> list[str]:
    """Where helpers_cpp is already compiled, compile_helpers() answered without make in each named module that is
    installed; returns those answered (none where it is not compiled, so that upstream's make builds it).

    A megatron-core wheel ships helpers_cpp compiled, with helpers.cpp but without the Makefile, yet megatron-core
    0.19.2's compile_helpers (datasets/utils.py:20-30) runs `make -C` on that folder and exits 1 when make fails
    there: "No targets specified and no makefile found" stopped both Megatron-LM's pretrain_gpt.py and
    Megatron-Bridge's pretrain() on a lent H200 (2026-11-28). In a source checkout, which has the Makefile and no
    compiled module until it runs, nothing changes."""
    if not _helpers_importable():
        return []
    answered = []
    for name in callers:
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        if hasattr(module, "compile_helpers"):
            module.compile_helpers = _helpers_compiled
            answered.append(name)
    return answered


def _helpers_compiled() -> None:
    """compile_helpers' answer where helpers_cpp is compiled: make would find it up to date."""
    importlib.import_module("megatron.core.datasets.helpers_cpp")


def main(argv: list[str] | None = None) -> int:
    parser = Parser(prog="python3 -m utils.datafiles", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    layout = commands.add_parser("layout", help="the tokenizer directory, encode prefix and pair prefix")
    layout.add_argument("data_dir")
    layout.add_argument("dataset")
    layout.add_argument("model", choices=MODEL_KEYS)
    args = parser.parse_args(argv)
    print(tokenizer_dir(args.data_dir, args.model), encode_prefix(args.data_dir, args.dataset, args.model),
          data_prefix(args.data_dir, args.dataset, args.model), sep="\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
