"""The prim framework's whole mapping: TPrimat's request laid over Primus's shipped experiment YAML (`config`).
Primus trains with its own entry point inside its image; TPrimat generates the experiment and reads the log.
"""
