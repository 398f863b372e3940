"""TPrimat's evaluation tools: extract, judge (a run once it has ended), validate, probe, fingerprint, compare, wrap.

Run as modules from the repository root (python3 -m evaluate.extract ...). The name shadows
Hugging Face's `evaluate` library on purpose; TPrimat never needs that library.
"""
