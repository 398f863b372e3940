"""One run, start to end: its command per framework (`command`), run supervised with its console in train.log
(`process`), the wait for its processes and GPU memory to settle (`settle`), and the run set's summary table
(`summary`). `run` is what train/launch.sh starts (`python3 -m train.launch.run`).
"""
