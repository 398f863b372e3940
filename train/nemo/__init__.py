"""The nemo framework's whole mapping: TPrimat's request as NeMo 2.0 recipe settings (`recipe`, testable without
NeMo), TPrimat's own step timer inside NeMo's loop (`timer`) and the settings NeMo really trains with, read from live
objects (`readback`). train/train_nemo.py is the entry point, run inside the NeMo image.
"""
