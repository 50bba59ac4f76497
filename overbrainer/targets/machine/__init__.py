"""A machine as a run's target: this machine (``local``) or a host over SSH (``ssh``).

- :mod:`~overbrainer.targets.machine.target`: the target the lifecycle drives (its plan,
  its executor opened for a job, reached again to read).
"""
