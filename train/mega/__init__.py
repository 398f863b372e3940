"""The mega framework's whole mapping onto megatron-core: the GPT model from TPrimat's specs (`model`), the training
loop (`trainer`) and the settings read back from the built run (`readback`). train/train_mega.py is the entry point;
what every TPrimat trainer takes from Megatron (the dataset, the CPU standing in for CUDA) is in train/common/.
"""
