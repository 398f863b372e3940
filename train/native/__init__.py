"""The torch-native frameworks (fsdp, autotp): one training loop (`trainer`) over a seam (`engine`) with two
implementations, FSDP2 with DTensor tensor parallelism or DDP (`fsdp`) and DeepSpeed AutoTP with ZeRO (`autotp`),
on a Hugging Face model built from TPrimat's specs (`model`), and what the loop reads back from the built run
(`readback`). train/train_fsdp.py and train/train_autotp.py are the entry points.
"""
