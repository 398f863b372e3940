"""Reading training logs: the streaming parser (`parse`) of Megatron-LM, Primus, NeMo and TPrimat logs, over the
block reader (`files`), the line patterns of step records (`records`) and settings (`settings`), the state of a log
read line by line (`stream`), a run's settings from its log and request (`run_settings`), and what a log says when
torchrun lost a worker (`worker_failure`).
"""
