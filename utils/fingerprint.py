"""Fingerprints that prove two runs did the same work: dataset, tokenizer, workload configuration, code.

    python3 -m evaluate.fingerprint                     # every model of the configuration, as JSON
    python3 -m evaluate.fingerprint --data-prefix P     # one prepared dataset (P without .bin/.idx)
    python3 -m evaluate.fingerprint --compute ...       # hash the .bin/.idx in full, whatever was remembered

The dataset fingerprint is always that of the files as they are: sha256 over the hex sha256 of the
.bin and of the .idx, joined by a newline. It says "verified" only when the files are proven to be
those data.verify verified (utils.datafiles); the tokenizer fingerprint is the manifest's.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
from pathlib import Path

from utils import ROOT
from utils.datafiles import PREPARE, SUFFIXES, DataProblem, cache_path, data_prefix, manifest_path, pair_fingerprint, \
    pair_hashes, prove_pair, sibling
from utils.files import read_json

# Knobs that define the workload (the same on every platform); layouts and paths are left out, so
# an AMD and an NVIDIA run of the same benchmark share this fingerprint.
WORKLOAD_KEYS = ("MODELS", "MODEL_SIZE", "MODEL_LAYERS", "DATASET", "DATA_SAMPLES", "MOCK_DATA", "SEED", "MBS", "SL", "GBS", "LR",
                 "MIN_LR", "WARMUP_STEPS", "TRAIN_ITERS", "WEIGHT_DECAY", "BETA1", "BETA2", "GRAD_CLIP",
                 "PRECISION", "WARMUP_SKIP")


def dataset_fingerprint(prefix: Path, compute: bool = False) -> dict:
    """{"fingerprint", "tokenizer_fingerprint", "source", "verified"} of a dataset: always of the files as they are.

    source "verified": the files are proven to be those data.verify verified (utils.datafiles.prove_pair, from
    remembered hashes where they still hold, or --compute: hashed in full); "computed": they are not (the reason
    under "problem"), or there is no manifest. Raises FileNotFoundError naming the files that are missing."""
    files = [sibling(prefix, suffix) for suffix in SUFFIXES]
    missing = [str(p) for p in files if not p.is_file()]
    if missing:
        manifest = manifest_path(prefix)
        also = "" if manifest.is_file() else f" and no manifest {manifest.name}"
        raise FileNotFoundError(f"{', '.join(missing)} missing{also}; prepare the data with {PREPARE}")
    if compute:
        cache_path(prefix).unlink(missing_ok=True)
    try:
        verified = prove_pair(prefix)
    except DataProblem as err:
        hashes, _ = pair_hashes(prefix)
        try:
            tokenizer = (read_json(manifest_path(prefix)).get("tokenizer") or {}).get("sha256")
        except (OSError, ValueError, AttributeError):
            tokenizer = None
        return {"fingerprint": pair_fingerprint(hashes[".bin"], hashes[".idx"]), "tokenizer_fingerprint": tokenizer,
                "source": "computed", "verified": False, "problem": str(err)}
    return {"fingerprint": verified.fingerprint, "tokenizer_fingerprint": verified.tokenizer_fingerprint,
            "source": "verified", "verified": True}


def config_fingerprint(values: dict) -> str:
    """sha256 of the workload knobs (canonical JSON); a missing knob counts as null."""
    workload = {key: values.get(key) for key in WORKLOAD_KEYS}
    return hashlib.sha256(json.dumps(workload, sort_keys=True, default=str).encode()).hexdigest()


def project_commit(root: Path = ROOT) -> str | None:
    """HEAD of the project's git checkout, with "-dirty" when tracked files differ; None without git.

    The checkout is trusted explicitly: in a container, root reads a repository mounted from a user's
    home, which git's ownership check ("dubious ownership") refuses otherwise."""
    git = ["git", "-c", f"safe.directory={Path(root).resolve()}", "-C", str(root)]
    try:
        head = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run([*git, "diff", "--quiet", "HEAD", "--"], capture_output=True).returncode
    except (OSError, subprocess.CalledProcessError):
        return None
    return head + ("-dirty" if dirty else "")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m evaluate.fingerprint", description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-prefix", type=Path, action="append",
                        help="dataset prefix (repeatable); default: each model of the configuration")
    parser.add_argument("--compute", action="store_true", help="hash the .bin/.idx files in full, not from remembered hashes")
    args = parser.parse_args(argv)
    out: dict = {"commit": project_commit(), "datasets": {}}
    prefixes = args.data_prefix
    if not prefixes:
        from utils.config import ConfigError, load_config
        try:
            cfg = load_config()
        except ConfigError as err:
            err.report("evaluate.fingerprint")
            return 2
        values = cfg.as_dict()
        out["config"] = config_fingerprint(values)
        # llama70b reads llama's data (utils.spec.models data_key): each prepared pair once
        prefixes = list(dict.fromkeys(data_prefix(values["DATA_DIR"], values["DATASET"], m.key) for m in cfg.models))
    failed = False
    for prefix in prefixes:
        try:
            out["datasets"][str(prefix)] = dataset_fingerprint(prefix, compute=args.compute)
        except FileNotFoundError as err:
            out["datasets"][str(prefix)] = {"error": str(err)}
            failed = True
    print(json.dumps(out, indent=2))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
