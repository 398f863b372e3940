"""What the torch-native frameworks (fsdp, autotp) share: one training loop (`trainer`) over a seam (`engine`) whose
implementations are each framework's own (train/fsdp/engine.py: FSDP2 with DTensor tensor parallelism or DDP;
train/autotp/engine.py: DeepSpeed AutoTP with ZeRO), the tensor-parallel plan of a Hugging Face model
(`tensor_parallel`), that model built from TPrimat's specs (`model`), and what the loop reads back from the built run
(`readback`). train/train_fsdp.py and train/train_autotp.py are the entry points.
"""


def lazy_start(engine: str):
    """An entry point's start(req, source, run_dir, inject_nan_step) for train/common/cli.py, with the loop
    (trainer.starter) and the engine ("package.module:NAME") imported only when a run starts, so that the command
    line (--help, a bad argument) is read without torch."""
    def start(*args):
        from train.native import trainer
        from utils.frameworks import resolve

        return trainer.starter(resolve(engine))(*args)
    return start
