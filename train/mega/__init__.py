"""The mega framework's whole mapping onto megatron-core: the GPT model from TPrimat's specs (`model`), the training
loop (`trainer`), the settings read back from the built run (`readback`), and what every TPrimat trainer takes from
Megatron: its prepared dataset in its sample order (`data`) and a CPU standing in for CUDA device 0 (`cpu_compat`).
train/train_mega.py is the entry point.
"""
