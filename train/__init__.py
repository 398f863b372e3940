"""TPrimat's trainers and launch helpers (run as modules or scripts from the repository root)."""
