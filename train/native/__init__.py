"""What the torch-native frameworks (fsdp, autotp) share: one training loop (`trainer`) over a seam (`engine`) whose
implementations are each framework's own (train/fsdp/engine.py: FSDP2 with DTensor tensor parallelism or DDP;
train/autotp/engine.py: DeepSpeed AutoTP with ZeRO), the tensor-parallel plan of a Hugging Face model
(`tensor_parallel`), that model built from TPrimat's specs (`model`), and what the loop reads back from the built run
(`readback`). train/train_fsdp.py and train/train_autotp.py are the entry points.
"""
