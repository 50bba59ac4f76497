"""A run's life, from ``train`` to its end: create, prepare, start, follow, settle, end the
target, report — and ``train attach`` and ``train cancel`` of a run that lives on.

- :mod:`overbrainer.lifecycle.service`: the steps on a target that runs jobs (start,
  follow, settle, collect, cancel), every transition appended to the run's log;
- :mod:`overbrainer.lifecycle.outcome`: what a job's end means for its run (pure);
- :mod:`overbrainer.lifecycle.recover`: a run left ``preparing`` by a command that died;
- :mod:`overbrainer.lifecycle.elsewhere`: a run whose files live in another checkout;
- :mod:`overbrainer.lifecycle.machine`: the commands on a machine target (local, ssh);
- :mod:`overbrainer.lifecycle.runpod`: the commands on a Runpod target (a pod per run).

It drives the targets (the executors of ``overbrainer.exec``, the pods of
``overbrainer.targets.runpod``) through a :class:`~overbrainer.session.session.Session`;
only the command line is above it.
"""
