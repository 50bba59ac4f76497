"""The suite's test doubles and the stand-ins it runs, used by the tests only.

What the demo, the benchmarks, the campaigns and users run (the fake Runpod world, the fake
pod, the stand-in trainer, the sshd and PostgreSQL launchers, faketime) ships in
``overbrainer.testing``; this package holds the suite's side: the pytest fixtures around
those launchers (`sshd`, `pg`), the headless browser (`browser`), the command confiner
(`confine`), the command on another host (`as_host`) and the package-manager stand-ins
(``apt/``). It imports nothing from the test modules (tests/test_layout.py).
"""
