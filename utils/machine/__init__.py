"""The machine behind a number: `hardware` (device specs and the peak table); the GPU readers that the probe, node
health and telemetry share, `vendor_tools` (the vendors' command-line tools run and parsed, the platform) and
`gpu_libraries` (NVML and amdsmi opened once); `probe` (what the machine is), `node_health` + `health_readers`
(the checks before the first run), `telemetry` + `telemetry_backends` + `telemetry_tools` (the node's sampler),
`energy` (samples over the steady state), `energy_cost` (energy per token, cost), `stragglers`, and the
environment a run starts with (`platform_env`, `netenv`, and `pyenvs`: the Python environments built on this machine
for a framework whose pins are not the host's, and for tests)."""
