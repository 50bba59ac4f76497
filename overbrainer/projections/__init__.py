"""What a run's events fold to for reading: caches and stories, always rebuildable from the
log.

- :mod:`overbrainer.projections.files`: ``runs/<id>/run.json`` and ``pod.json``, rewritten
  after every append;
- :mod:`overbrainer.projections.view`: the runs view behind ``runs ls``, one row per run,
  caught up from the store's notification log;
- :mod:`overbrainer.projections.summary`: a run's state in a few lines (``runs show``);
- :mod:`overbrainer.projections.timeline`: one sentence per event (``train`` as it goes,
  ``events RUN`` afterwards).
"""
