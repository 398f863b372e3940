"""The files of one run directory, each named once: what the launcher, the trainers and the judge write there and
what evaluate/ reads back (a node other than the first writes its own under nodeN/; the run set's own files are
utils.runset's). Standard library only."""

REQUEST = "config.json"  # the run's request (utils.spec.request), written by the launcher on node 0
LAUNCH = "launch.json"  # the launcher's record of the command, its exit and the run's status
LOG = "train.log"  # the run's console, as the launcher captured it
STEPS = "steps.jsonl"  # one line per optimizer step (train/common/step_log.py)
EVALS = "evals.jsonl"  # one line per held-out evaluation (train/common/evaluation.py)
TELEMETRY = "telemetry.jsonl"  # the node's samples on the steps' clock (utils/machine/telemetry.py)
TRAINER = "trainer.json"  # a TPrimat trainer's account of its run: how it ended, what it read back (train/common/outcome.py)
RESULT = "result.json"  # the run's result (utils.spec.result): the judge (evaluate/judge.py) is its one writer
