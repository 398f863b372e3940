"""The fsdp framework's engine under the torch-native loop (train/native/): FSDP2 with DTensor tensor parallelism, or
DDP (`engine`). train/train_fsdp.py is the entry point."""
