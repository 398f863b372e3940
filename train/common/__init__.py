"""What TPrimat's own trainers (mega, fsdp, autotp) share: the command line (`cli`), how a run ends, always with a
result (`outcome`), the per-step record (`step_log`), the forward/backward/optimizer marks (`step_marks`), and what
they take from Megatron: the prepared dataset in its sample order (`megatron_data`) and a CPU standing in for CUDA
device 0 (`cpu_compat`). The in-image entry points of the recipe frameworks (nemo, mbridge) share their settings
file's reader (`settings_file`) and torchtitan's and NeMo's timers the step timer (`step_timer`).
"""
