"""What the torch-native trainer reads back from its built run for the result's `effective` (the engine adds its
own: mesh, sharding, precision, compile, checkpointing), keyed like the result's parallelism and training fields
so that evaluate can compare them with the request."""

from __future__ import annotations

import torch

import transformers


def run_settings(trainer, model: torch.nn.Module, dataset) -> dict:
    """The optimizer and schedule as built, the model's architecture as its Hugging Face config holds it, the
    data read, and the versions that ran it."""
    scheduler, optimizer, config = trainer.scheduler, trainer.engine.optimizer, model.config
    decayed = [g for g in optimizer.param_groups if g.get("wd_mult", 1.0) > 0]
    beta1, beta2 = optimizer.param_groups[0]["betas"]
    # transformers 5 gathers the RoPE settings in rope_parameters; 4 (the vendor images') keeps theta and scaling apart
    rope = dict(getattr(config, "rope_parameters", None) or {"rope_theta": config.rope_theta,
                                                             **(config.rope_scaling or {})})
    return {
        "fairness_profile": trainer.request.fairness.profile,
        "optimizer": type(optimizer).__name__,
        "steps": scheduler.lr_decay_steps,
        "lr": scheduler.max_lr, "min_lr": scheduler.min_lr, "warmup_steps": scheduler.lr_warmup_steps,
        "lr_decay_steps": scheduler.lr_decay_steps, "lr_decay_style": scheduler.lr_decay_style,
        "weight_decay": decayed[0]["weight_decay"] if decayed else 0.0,
        "beta1": beta1, "beta2": beta2, "adam_eps": optimizer.param_groups[0]["eps"],
        "grad_clip": trainer.request.training.grad_clip,
        "seed": trainer.request.training.seed,
        "mock_data": type(dataset).__name__ == "MockGPTDataset",
        "dataset_class": type(dataset).__name__, "dataset_samples": len(dataset),
        "data_path": getattr(dataset, "dataset_path", None),
        "hf_model_class": type(model).__name__,
        "num_layers": config.num_hidden_layers, "hidden_size": config.hidden_size,
        "ffn_hidden_size": config.intermediate_size, "num_attention_heads": config.num_attention_heads,
        "num_kv_heads": config.num_key_value_heads,
        "head_dim": getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads,
        "vocab_size": config.vocab_size, "norm_eps": config.rms_norm_eps,
        "rope_theta": rope.get("rope_theta"), "rope_type": rope.get("rope_type"),
        "untied_embeddings": not config.tie_word_embeddings,
        "sliding_window": getattr(config, "sliding_window", None),
        "attn_impl": config._attn_implementation,
        "init_method_std": config.initializer_range, "padded_vocab_size": config.vocab_size,
        "eod_mask_loss": bool(dataset.config.eod_mask_loss), "check_for_nan_in_grad": False,
        "torch_version": torch.__version__, "transformers_version": transformers.__version__,
    }


def read_back_batch(effective: dict, batch: dict[str, torch.Tensor], ga: int) -> None:
    """MBS and SL as the first step's first microbatch really had them, GA as the loop ran it."""
    mbs, seq_len = batch["tokens"].shape
    effective.update(mbs=int(mbs), seq_len=int(seq_len), ga=ga, gbs=int(mbs) * ga * effective["dp"])
