"""Stand-ins for what overbrainer talks to, for tests, the demo, the benchmarks and the
reliability campaigns; shipped with the package, as ``trio.testing`` ships with trio.

- :mod:`overbrainer.testing.sshd`: a real OpenSSH ``sshd`` on loopback, and the one
  ``sshd_config`` every test server uses;
- :mod:`overbrainer.testing.pg`: a throwaway PostgreSQL server (``PgCluster``), for the
  team store;
- :mod:`overbrainer.testing.faketime`: a process whose wall clock is set wrong, or jumps
  (libfaketime).

Nothing the ``overbrainer`` command runs imports this package. It needs the ``testing``
extra (``pip install 'overbrainer[testing]'``).
"""
