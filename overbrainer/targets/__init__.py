"""What a run runs on, as the lifecycle drives it.

- :mod:`overbrainer.targets.runpod`: a Runpod pod per run, created, reached, bounded and
  deleted.

The machine targets (this machine, a host over SSH) are the executors of
``overbrainer.exec``, which the lifecycle opens directly.
"""
