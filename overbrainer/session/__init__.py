"""What one command's run operations share.

- :mod:`overbrainer.session.journal`: the event log as trio code uses it (each store call in
  a worker thread, the projections rewritten after every append, every append shown to
  whoever listens).

It sits above the event store, the projections and the front end, and below the targets
and the run's lifecycle.
"""
