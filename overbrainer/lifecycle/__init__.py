"""A run's life, from ``train`` to its end: create, prepare, start, follow, settle, end the
target, report — and ``train attach`` and ``train cancel`` of a run that lives on.

- :mod:`overbrainer.lifecycle.run`: the one lifecycle, ``train``, ``attach`` and ``cancel``
  on any target;
- :mod:`overbrainer.lifecycle.target`: what differs between kinds of target (the
  :class:`~overbrainer.lifecycle.target.Target` protocol);
- :mod:`overbrainer.lifecycle.machine`: this machine or a host over SSH as a target;
- :mod:`overbrainer.lifecycle.runpod`: a Runpod pod per run as a target;
- :mod:`overbrainer.lifecycle.service`: the job's steps on a target (start, follow, settle,
  collect, cancel), every transition appended to the run's log;
- :mod:`overbrainer.lifecycle.outcome`: what a job's end means for its run (pure);
- :mod:`overbrainer.lifecycle.report`: what a command says of a run once done with it;
- :mod:`overbrainer.lifecycle.recover`: a run left ``preparing`` by a command that died;
- :mod:`overbrainer.lifecycle.elsewhere`: a run whose files live in another checkout.

It drives the targets (the executors of ``overbrainer.exec``, the pods of
``overbrainer.targets.runpod``) through a :class:`~overbrainer.session.session.Session`;
only the command line is above it.
"""
