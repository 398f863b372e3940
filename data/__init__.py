"""TPrimat's data pipeline: fetch -> clean -> encode -> verify, into Megatron .bin/.idx files."""

from utils.cli import install_excepthook

install_excepthook()  # before any tool of the package imports a third-party library
