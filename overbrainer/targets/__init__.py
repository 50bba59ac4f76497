"""What a run runs on: one home per kind of target, each filling the lifecycle's
:class:`~overbrainer.lifecycle.target.Target` protocol (and, for a machine rented for the
run, its :class:`~overbrainer.lifecycle.target.Billed` side).

- :mod:`overbrainer.targets.choose`: the one place a kind is chosen (``target_for`` for a
  new run, ``target_of_run`` for a recorded one);
- :mod:`overbrainer.targets.machine`: this machine or a host over SSH, through the
  executors of ``overbrainer.exec``;
- :mod:`overbrainer.targets.runpod`: a Runpod pod per run, created, reached, bounded and
  deleted, through the API client of ``overbrainer.runpod``.

A new kind of target gets its home here, beside these two, and an entry in ``choose``.
"""
