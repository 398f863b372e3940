"""TPrimat's prepared data as a torchtitan dataloader: the same tokens in the same order as every other framework.

torchtitan's own loaders read Hugging Face datasets and tokenize them as they go; this one is the mega, fsdp and
autotp trainers' data (train/common/megatron_data.py: the verified .bin/.idx through megatron-core's GPTDataset, or
MOCK_DATA's synthetic tokens, in Megatron-LM's sample order). torchtitan's Trainer builds it with its DP rank and
takes GA microbatches of it per step (trainer.py, Trainer.train_step), each a pair ({"input": tokens, "positions":
positions}, labels): the positions are GPTDataset's (0..SL-1 in every row, as reset_position_ids is off), so
torchtitan's block-causal attention mask is the plain causal mask the other frameworks train with, and a token the
loss mask leaves out is labelled IGNORE_INDEX, which torchtitan's loss skips.

With EVAL_INTERVAL the data is cut as every framework cuts it (train.common.megatron_data.build_splits): the loader
trains on the training split only and holds the validation split, which TPrimat's evaluation in trainer.py reads.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import torch
from torchtitan.components.dataloader import BaseDataLoader
from torchtitan.components.loss import IGNORE_INDEX

from train.common.megatron_data import build_splits, locate, microbatches
from utils.spec.request import Request


class PreparedDataLoader(BaseDataLoader):
    """One DP rank's microbatches of the request's data, on the host (torchtitan moves each to the device)."""

    @dataclass(kw_only=True, slots=True)
    class Config(BaseDataLoader.Config):
        request: str = ""
        """The run's config.json (TPrimat's request): its data, model, batch, steps and seed."""

    def __init__(self, config: Config, *, dp_world_size: int, dp_rank: int, tokenizer: Any = None, seq_len: int,
                 local_batch_size: int, snapshot_every_n_steps: int | None = None) -> None:
        req = Request.read(Path(config.request))
        t, lay = req.training, req.parallelism
        asked = {"DP": (dp_world_size, lay.dp), "SL": (seq_len, t.seq_len), "MBS": (local_batch_size, t.mbs)}
        wrong = [f"{name} {got} (the request says {want})" for name, (got, want) in asked.items() if got != want]
        if wrong:
            raise ValueError(f"torchtitan built its dataloader with {', '.join(wrong)}: {config.request} and the "
                             "settings disagree; rerun the launcher")
        self.request, self.source = req, locate(req.data, req.model)
        # the fingerprint is hashed on the first DP rank, whose global rank 0 prints it (trainer.py)
        self.dataset, self.validation = build_splits(
            self.source, t.seq_len, t.steps * t.gbs, t.seed, Path(req.data.data_dir) / "index_cache",
            evaluation=req.evaluation, gbs=t.gbs, fingerprint=dp_rank == 0)
        self.dp_rank = dp_rank

    def __iter__(self) -> Iterator[tuple[dict[str, torch.Tensor], torch.Tensor]]:
        return self.pairs(self.dataset, self.request.training.steps)

    def validation_pairs(self) -> Iterator[tuple[dict[str, torch.Tensor], torch.Tensor]]:
        """One evaluation's microbatches of this DP rank: the validation split's first samples, the same each time."""
        return self.pairs(self.validation.dataset, self.validation.iters)

    def pairs(self, dataset, steps: int) -> Iterator[tuple[dict[str, torch.Tensor], torch.Tensor]]:
        """This DP rank's microbatches of `steps` global batches of `dataset`, as torchtitan's (inputs, labels)."""
        t, lay = self.request.training, self.request.parallelism
        for batch in microbatches(dataset, steps=steps, mbs=t.mbs, dp=lay.dp, dp_rank=self.dp_rank, ga=lay.ga,
                                  device=torch.device("cpu")):
            labels = batch["labels"].masked_fill(batch["loss_mask"] == 0, IGNORE_INDEX)
            yield {"input": batch["tokens"], "positions": batch["position_ids"]}, labels

    def state_dict(self) -> dict[str, Any]:
        return {}  # TPrimat's runs write no checkpoint (settings: checkpoint.enable false)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if state_dict:
            raise ValueError("TPrimat's torchtitan runs do not resume from a checkpoint")
