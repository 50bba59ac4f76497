"""Stand-ins for what overbrainer talks to, for tests, the demo, the benchmarks and the
reliability campaigns; shipped with the package, as ``trio.testing`` ships with trio.

- :mod:`overbrainer.testing.runpod_api`: :class:`~overbrainer.testing.runpod_api.FakeRunpod`,
  Runpod's REST API v2 in-process (an httpx transport, on trio's clock) or on loopback
  (hypercorn; ``python -m overbrainer.testing.runpod_api --port 0 --print-url``), validating
  what it is sent against Runpod's published schema (:mod:`~overbrainer.testing.runpod_schema`
  and the copy ``runpod_openapi.json``);
- :mod:`overbrainer.testing.fake_pod`: :func:`~overbrainer.testing.fake_pod.fake_pods`
  brings the fake API's pods to life on this machine: the real bootstrap and watchdog, an
  SSH server per pod on loopback (``python -m overbrainer.testing.fake_pod --print-url``
  serves both);
- :mod:`overbrainer.testing.fake_executor`: a pod's machine in memory for trio's
  MockClock (``FakeMachine``, ``FakeExecutor``, ``FakeNetwork``), ``run_inline`` (the
  journal's runner there: the store called in the task, not a worker thread) and
  ``pod_rig``, the fake API in-process with those machines behind it and a real event store;
- :mod:`overbrainer.testing.pod_training`: ``training``, whole ``train``/``attach``/
  ``cancel`` runs on that rig with scripted jobs (hours in milliseconds);
- :mod:`overbrainer.testing.stand_in`: the stand-in trainer, an ``axolotl`` command that
  trains nothing and behaves like a run (:data:`~overbrainer.testing.stand_in.AXOLOTL`);
- :mod:`overbrainer.testing.sshd`: a real OpenSSH ``sshd`` on loopback, and the one
  ``sshd_config`` every test server uses;
- :mod:`overbrainer.testing.pg`: a throwaway PostgreSQL server (``PgCluster``), for the
  team store;
- :mod:`overbrainer.testing.faketime`: a process whose wall clock is set wrong, or jumps
  (libfaketime).

Nothing the ``overbrainer`` command runs imports this package. It needs the ``testing``
extra: ``pip install -e '.[testing]'`` in a checkout, or the wheel's
(``pipx install 'dist/overbrainer-….whl[testing]'``).
"""
