"""TPrimat's data pipeline: fetch -> clean -> encode -> verify, into Megatron .bin/.idx files."""
