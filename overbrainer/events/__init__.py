"""The record of every run: what happened to it and to its pod, as typed events in a store.

- :mod:`overbrainer.events.types`: the event catalogue, every transition of a run and its
  pod; :mod:`overbrainer.events.aggregate`: their fold into the run's state (pure), which
  refuses an event that does not follow from it;
- :mod:`overbrainer.events.store`: the store, SQLite in the project or a team's PostgreSQL
  (:mod:`~overbrainer.events.pg`, :mod:`~overbrainer.events.pg_recorder`), through
  eventsourcing (:mod:`~overbrainer.events.stream`); :mod:`~overbrainer.events.migrate`
  copies a checkout's history into a team store;
- :mod:`overbrainer.events.actor`: who appended an event; :mod:`overbrainer.events.home`:
  where a run lives; :mod:`overbrainer.events.ids`: run IDs;
  :mod:`overbrainer.events.sqlite_files`: what an SQLite failure means.

The store is synchronous; trio code reaches it only through
:class:`overbrainer.session.journal.Journal`.
"""
