"""Preflight: every check a run would fail on, before the run (and any pod) exists.

``overbrainer train --check`` prints each check and its verdict; ``overbrainer train`` runs
the same checks first and creates no run when one finds a problem.

- :mod:`overbrainer.preflight.checks`: the pure core, named checks turning gathered facts
  into verdicts, and the report;
- :mod:`overbrainer.preflight.probes`: what a machine target (this one, or one over SSH) is
  asked, through the small POSIX script ``probe.sh``, and how its answer reads;
- :mod:`overbrainer.preflight.gather`: the drivers that ask each outside world (the files,
  a local process, an SSH host, Runpod's API) and run the checks on what they said.
"""
