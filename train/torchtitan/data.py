"""TPrimat's prepared data as a torchtitan dataloader: the same tokens in the same order as every other framework.

torchtitan's own loaders read Hugging Face datasets and tokenize them as they go; this one is the mega, fsdp and
autotp trainers' data (train/common/megatron_data.py: the verified .bin/.idx through megatron-core's GPTDataset, or
MOCK_DATA's synthetic tokens, in Megatron-LM's sample order). torchtitan's Trainer builds it with its DP rank and
takes GA microbatches of it per step (trainer.py, Trainer.train_step), each a pair ({"input": tokens, "positions":
positions}, labels): the positions are GPTDataset's (0..SL-1 in every row, as reset_position_ids is off), so
torchtitan's block-causal attention mask is the plain causal mask the other frameworks train with, and a token the
loss mask leaves out is labelled IGNORE_INDEX, which torchtitan's loss skips.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import torch
from torchtitan.components.dataloader import BaseDataLoader
from torchtitan.components.loss import IGNORE_INDEX

from train.common.megatron_data import build_dataset, locate, microbatches
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
        self.source = locate(req.data, req.model)
        self.dataset = build_dataset(self.source, t.seq_len, t.steps * t.gbs, t.seed,
                                     Path(req.data.data_dir) / "index_cache")
        self.steps, self.mbs, self.dp, self.dp_rank, self.ga = t.steps, t.mbs, lay.dp, dp_rank, lay.ga

    def __iter__(self) -> Iterator[tuple[dict[str, torch.Tensor], torch.Tensor]]:
        for batch in microbatches(self.dataset, steps=self.steps, mbs=self.mbs, dp=self.dp, dp_rank=self.dp_rank,
                                  ga=self.ga, device=torch.device("cpu")):
            labels = batch["labels"].masked_fill(batch["loss_mask"] == 0, IGNORE_INDEX)
            yield {"input": batch["tokens"], "positions": batch["position_ids"]}, labels

    def state_dict(self) -> dict[str, Any]:
        return {}  # TPrimat's runs write no checkpoint (settings: checkpoint.enable false)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if state_dict:
            raise ValueError("TPrimat's torchtitan runs do not resume from a checkpoint")
