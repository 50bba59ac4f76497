"""What a person sees and does while a command runs: its output, and its Ctrl-C.

- :mod:`overbrainer.front.console`: the front end, results on stdout and progress, events,
  warnings and notices on stderr; :mod:`overbrainer.front.progress`: training progress as
  one line; :mod:`overbrainer.front.streams`: stdout and stderr whose failure (a reader
  gone, a full disk) never aborts a command;
- :mod:`overbrainer.front.interrupts`: Ctrl-C, SIGTERM and SIGHUP for a whole command, and
  ``shield``, ``race`` and ``stoppable``;
- :mod:`overbrainer.front.exiting`: whether the process exits once its command ends (late
  signals are then only counted);
- :mod:`overbrainer.front.fault_injection`: every place a command can be interrupted, for the
  reliability campaigns to act at (inert unless ``OVERBRAINER_FAULT_PLAN`` is set).
"""
