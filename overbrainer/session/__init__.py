"""What one command's run operations share.

- :mod:`overbrainer.session.journal`: the event log as trio code uses it, the only door async
  code has to the store (each store call through the journal's runner, by default a worker
  thread; the projections rewritten after every append, every append shown to whoever
  listens);
- :mod:`overbrainer.session.session`: :class:`~overbrainer.session.session.Session`, the
  journal with the front end, the Ctrl-C controller and the project; and who recorded what;
- :mod:`overbrainer.session.limits`: how long each shielded step of a run may take.

It sits above the event store, the projections and the front end, and below the targets
and the run's lifecycle, which all take a session.
"""
