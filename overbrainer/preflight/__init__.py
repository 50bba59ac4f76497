"""Preflight: every check a run would fail on, before the run (and any pod) exists.

``overbrainer train --check`` prints each check and its verdict; ``overbrainer train`` runs
the same checks first and creates no run when one finds a problem.

- :mod:`overbrainer.preflight.checks`: the pure core, named checks turning gathered facts
  into verdicts, and the report;
- :mod:`overbrainer.preflight.probes`: what a machine target (this one, or one over SSH) is
  asked, through the small POSIX script ``probe.sh``, and how its answer reads;

The drivers that ask each outside world and run the checks on what it said live with what
they ask: ``targets/preflight.py`` (the files, the project's directories), and each
target's home (``targets/machine/preflight.py``: a local process, an SSH host;
``targets/runpod/preflight.py``: Runpod's API).
"""
