"""Fingerprints that prove two runs did the same work: dataset, tokenizer, workload configuration, code.

    python3 -m evaluate.fingerprint                     # every model of the configuration, as JSON
    python3 -m evaluate.fingerprint --data-prefix P     # one prepared dataset (P without .bin/.idx)
    python3 -m evaluate.fingerprint --compute ...       # hash the .bin/.idx even when a manifest exists

The dataset fingerprint comes from the manifest data.verify writes next to the data (its
"fingerprint" and "tokenizer.sha256"); without a manifest, or with --compute, it is computed as
sha256 over the hex sha256 of the .bin and of the .idx, joined by a newline.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
from pathlib import Path

from utils.files import sha256_file

ROOT = Path(__file__).resolve().parent.parent
# Knobs that define the workload (the same on every platform); layouts and paths are left out, so
# an AMD and an NVIDIA run of the same benchmark share this fingerprint.
WORKLOAD_KEYS = ("MODELS", "MODEL_SIZE", "DATASET", "DATA_SAMPLES", "MOCK_DATA", "SEED", "MBS", "SL", "GBS", "LR",
                 "MIN_LR", "WARMUP_STEPS", "TRAIN_ITERS", "WEIGHT_DECAY", "BETA1", "BETA2", "GRAD_CLIP",
                 "PRECISION", "WARMUP_SKIP")


def manifest_path(prefix: Path) -> Path:
    return prefix.with_name(prefix.name + ".manifest.json")


def dataset_fingerprint(prefix: Path, compute: bool = False) -> dict:
    """{"fingerprint", "tokenizer_fingerprint", "source": "manifest"|"computed", "verified"} of a dataset.

    Raises FileNotFoundError naming what is missing.
    """
    manifest = manifest_path(prefix)
    if manifest.is_file() and not compute:
        data = json.loads(manifest.read_text())
        return {"fingerprint": data.get("fingerprint"),
                "tokenizer_fingerprint": (data.get("tokenizer") or {}).get("sha256"),
                "source": "manifest", "verified": data.get("verified") is True}
    files = [prefix.with_name(prefix.name + suffix) for suffix in (".bin", ".idx")]
    missing = [str(p) for p in files if not p.is_file()]
    if missing:
        raise FileNotFoundError(f"{', '.join(missing)} missing and no manifest {manifest.name}; "
                                "prepare the data with ./shell/run_data.sh")
    combined = hashlib.sha256("\n".join(sha256_file(p) for p in files).encode()).hexdigest()
    tokenizer = None
    if manifest.is_file():
        tokenizer = (json.loads(manifest.read_text()).get("tokenizer") or {}).get("sha256")
    return {"fingerprint": combined, "tokenizer_fingerprint": tokenizer, "source": "computed", "verified": False}


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
    parser.add_argument("--compute", action="store_true", help="hash the .bin/.idx files even when a manifest exists")
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
        prefixes = [Path(values["DATA_DIR"]) / f"{values['DATASET']}_{m.key}_text_document" for m in cfg.models]
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
