"""What TPrimat's own trainers (mega, fsdp, autotp) share: the command line (`cli`), how a run ends, always with a
result (`outcome`), the per-step record (`step_log`) and the forward/backward/optimizer marks (`step_marks`).
"""
