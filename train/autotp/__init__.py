"""The autotp framework's engine under the torch-native loop (train/native/): DeepSpeed AutoTP with ZeRO 0-2 (`engine`).
train/train_autotp.py is the entry point."""
