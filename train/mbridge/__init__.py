"""The mbridge framework's whole mapping: TPrimat's request as Megatron-Bridge recipe settings (`recipe`, testable
without Megatron-Bridge), its command (`launch`) and the settings read back from the built ConfigContainer
(`readback`). train/train_mbridge.py is the entry point, run inside the NVIDIA image.
"""
