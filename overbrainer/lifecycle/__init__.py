"""A run's life, from ``train`` to its end: create, prepare, start, follow, settle, end the
target, report — and ``train attach`` and ``train cancel`` of a run that lives on.

- :mod:`overbrainer.lifecycle.run`: the one lifecycle, ``train``, ``attach`` and ``cancel``
  on any target;
- :mod:`overbrainer.lifecycle.target`: what differs between kinds of target (the
  :class:`~overbrainer.lifecycle.target.Target` protocol, and the
  :class:`~overbrainer.lifecycle.target.Billed` side of a machine rented for the run);
- :mod:`overbrainer.lifecycle.bounds`: when following must stop for a target's bound;
- :mod:`overbrainer.lifecycle.logs`: reading a job's log, wherever it is reached;
- :mod:`overbrainer.lifecycle.service`: the job's steps on a target (start, follow, settle,
  collect, cancel), every transition appended to the run's log;
- :mod:`overbrainer.lifecycle.outcome`: what a job's end means for its run (pure);
- :mod:`overbrainer.lifecycle.report`: what a command says of a run once done with it;
- :mod:`overbrainer.lifecycle.recover`: a run left ``preparing`` by a command that died;
- :mod:`overbrainer.lifecycle.elsewhere`: a run whose files live in another checkout.

It knows no kind of target: the kinds live above it, in ``overbrainer.targets`` (this
machine or a host over SSH, a Runpod pod), and the command line hands it the one
``targets.choose`` chose. It works through a
:class:`~overbrainer.session.session.Session`.
"""
