"""torchtitan (PyPI torchtitan 0.3.0) under its own entry point: `settings` (request -> torchtitan's settings, a pure
mapping), `launch` (its command: torchrun on torchtitan.train with TPrimat's config function), and what runs inside
torchtitan's process: `config_registry` (the config function `--module train.torchtitan --config tprimat` loads),
`data` (TPrimat's prepared data as a torchtitan dataloader), `moe` (Qwen3 30B-A3B as its qwen3 MoE model, with
megatron-core's load-balancing loss), `gpt_oss` (GPT-OSS-20B as its gpt_oss model, and the model features a built
model has) and `trainer` (torchtitan's Trainer with TPrimat's step timer and read-back).

train/ itself is never on sys.path (train/torchtitan/ would shadow torchtitan): the command runs from the repository
root, where `train.torchtitan` is this package and `torchtitan` the installed one.
"""
