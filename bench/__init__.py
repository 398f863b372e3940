"""TPrimat's self-benchmarks: each shows one of the suite's own speed or overhead targets on the machine it runs on.

A layer above the stages: a benchmark may run or import data/, train/ and evaluate/; nothing imports bench/.
Each is `python3 -m bench.NAME --help`; bench/README.md lists them with their last figures.
"""

from utils.cli import install_excepthook

install_excepthook()  # before any tool of the package imports a third-party library
