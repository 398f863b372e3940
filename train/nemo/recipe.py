"""TPrimat request (config.json) -> NeMo 2.0 recipe settings: a pure mapping, testable without NeMo.

The result is plain JSON that train/train_nemo.py applies to `llm.<recipe>.pretrain_recipe(...)`:
`set` holds attribute paths on the recipe (every one of them overrides a recipe default that
would otherwise differ from the request), the other sections name the objects train_nemo.py
builds (data module, DDP config, precision plugin, callbacks).
"""

from __future__ import annotations

from train.common.megatron_settings import DDP_KEYS, architecture, fairness_paths, precision_settings
from utils.frameworks import TABLE
from utils.spec.precision import switch_key
from utils.spec.request import Request

# nemo.collections.llm.<recipe> (NeMo 2.3): each model's own recipe, whose architecture TPrimat then sets from its
# spec (a MODEL_LAYERS proxy's layer count included). mistral_7b's MistralConfig7B attends through a sliding
# window (window_size [4096, 0]), which megatron-core hands to Transformer Engine's attention.
# NeMo 2.3's precision plugins (...recipes.precision.mixed_precision) by utils.spec.precision.switch_key; no FP4 and
# no blockwise FP8 there (its megatron-core 0.12 has neither)
PRECISION_PLUGINS = {"bf16": "bf16_mixed", "delayed": "bf16_with_fp8_mixed",
                     "tensorwise": "bf16_with_fp8_current_scaling_mixed", "mxfp8": "bf16_with_mxfp8_mixed"}

# TPrimat's fairness names -> NeMo's attribute paths on the recipe.
FAIRNESS_PATHS = fairness_paths({"model": "model.config.", "optimizer": "optim.config.",
                                  "parallel": "trainer.strategy."})


def recipe_settings(req: Request, run_dir: str) -> dict:
    """Everything train_nemo.py sets on the recipe for one run, from the run's request."""
    lay, train, who = req.parallelism, req.training, req.identity
    tp, pp, steps = lay.tp, lay.pp, train.steps
    fairness, applied = req.fairness.table, req.fairness.workload
    evaluation = req.evaluation
    settings: dict[str, object] = {
        # parallelism
        "trainer.strategy.tensor_model_parallel_size": tp,
        "trainer.strategy.pipeline_model_parallel_size": pp,
        "trainer.strategy.virtual_pipeline_model_parallel_size": None,
        "trainer.strategy.sequence_parallel": lay.sequence_parallel,
        "trainer.num_nodes": lay.nnodes,
        "trainer.devices": lay.gpus_per_node,
        "trainer.accumulate_grad_batches": 1,  # NeMo derives GA from GBS / (MBS x DP)
        # steps, logging every step, no checkpoints; held-out validation (utils/spec/evaluation.py) through
        # Lightning's loop, a global batch per validation batch: every EVAL_INTERVAL steps over its batches, else none
        "trainer.max_steps": steps,
        "trainer.log_every_n_steps": 1,
        "trainer.val_check_interval": evaluation.interval_steps if evaluation.enabled else steps,
        "trainer.limit_val_batches": evaluation.iters(train.gbs, train.seq_len) if evaluation.enabled else 0,
        "trainer.limit_test_batches": 0,
        "trainer.num_sanity_val_steps": 0,
        "trainer.enable_checkpointing": False,
        "log.ckpt": None,
        "log.tensorboard": None,
        "log.log_dir": f"{run_dir}/nemo",
        "resume": None,
        # optimizer and schedule
        "optim.config.lr": train.lr,
        "optim.config.weight_decay": train.weight_decay,
        "optim.config.adam_beta1": train.beta1,
        "optim.config.adam_beta2": train.beta2,
        "optim.config.clip_grad": train.grad_clip,
        "optim.config.bf16": True,
        "optim.config.fp16": False,
        "optim.lr_scheduler.warmup_steps": train.warmup_steps,
        "optim.lr_scheduler.constant_steps": 0,
        "optim.lr_scheduler.min_lr": train.min_lr,
        "optim.lr_scheduler.max_steps": steps,
        # model
        "model.config.seq_length": train.seq_len,
        "model.config.init_method_std": applied["init_method_std"],
        **architecture(req.model, applied["padded_vocab_size"], "model.config."),
    }
    for name, path in FAIRNESS_PATHS.items():
        settings[path] = fairness[name]
    return {
        "recipe": TABLE["nemo"].model_name(who.model),
        "name": who.run_id,
        "num_nodes": lay.nnodes,
        "num_gpus_per_node": lay.gpus_per_node,
        "set": settings,
        "pipeline_dtype": "bfloat16" if pp > 1 else None,
        "attention_backend": fairness["attention_backend"],
        "ddp": {key: fairness[key] for key in DDP_KEYS},
        "precision": {"plugin": PRECISION_PLUGINS[switch_key(train.precision, str(fairness["fp8_recipe"]))],
                      "set": precision_settings(req)},
        # What NeMo applies of the workload conventions, for the record: its sampler is Megatron's
        # sequential one (MegatronDataSampler's default), its warm-up its own (utils.spec.fairness).
        "workload": applied,
        "data": _data(req, run_dir),
        "callbacks": _callbacks(req),
        # TPrimat's timer (train/nemo/timer.py) also reports each evaluation and stops the run at TARGET_LOSS
        "step_timer": {"target_loss": evaluation.target_loss, "tokens_per_step": train.gbs * train.seq_len},
        # NeMo's own switches; the platform's (attention kernels, device connections) come from
        # utils/machine/platform_env.py through the launcher.
        "env": {"NEMO_LOG_MEMORY_USAGE": "1", "TORCH_NCCL_AVOID_RECORD_STREAMS": "1",
                "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"},
    }


def _data(req: Request, run_dir: str) -> dict:
    """Real data through PreTrainingDataModule (prefix without suffix), or mock data; both with the model's
    local tokenizer (without one, NeMo's MockDataModule downloads GPT-2's, whose vocabulary is not the model's)."""
    train, data = req.training, req.data
    common = {"seq_length": train.seq_len, "global_batch_size": train.gbs, "micro_batch_size": train.mbs,
              "tokenizer_dir": data.tokenizer_dir}
    if data.mock_data:
        return {"module": "MockDataModule", **common}
    return {
        "module": "PreTrainingDataModule",
        "paths": [data.prefix],
        "split": req.evaluation.megatron_split(),
        "seed": train.seed,
        "index_mapping_dir": f"{run_dir}/nemo/index_mapping",
        "eod_mask_loss": req.fairness.workload["eod_mask_loss"],
        **common,
    }


def _callbacks(req: Request) -> list[dict]:
    """Step timing always; NeMo's own profiler switch (nsys capture range) when PROFILING is on."""
    callbacks: list[dict] = [{"class": "TimingCallback"}]
    env = req.environment
    if env.profiling:
        # NeMo's steps are 0-based; TPrimat's are 1-based.
        callbacks.append({"class": "NsysCallback", "start_step": env.profile_start_step - 1,
                          "end_step": env.profile_end_step - 1, "ranks": [0]})
    return callbacks
