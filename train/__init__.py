"""TPrimat's training stage, run as modules or scripts from the repository root.

The commands: `plan` (the run list), `matrix` (every run of it into one run set), `launch.sh` (one run), and the
trainers `train_mega.py`, `train_fsdp.py`, `train_autotp.py`, `train_nemo.py` with the thin
`train_<platform>_<framework>_<model>.sh` wrappers. The subpackages, one per concern: `launch/` (one run's command,
process, settling, summary), `common/` (what TPrimat's own trainers share), and one per framework's mapping:
`mega/` (megatron-core), `native/` (fsdp and autotp), `nemo/`, `prim/`, `torchtitan/`.
"""

from utils.cli import install_excepthook

install_excepthook()  # before any tool of the package imports a third-party library
