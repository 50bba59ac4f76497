"""Running jobs on a target — this machine or a host reached over SSH — and moving their
files there and back, verified.

- `overbrainer.exec.base`: the `Executor` protocol, `JobStatus` / `JobState` / `JobHandle`,
  runtimes (`NativeRuntime`, `ContainerRuntime`) and the errors (`TargetUnreachable`, …).
- `overbrainer.exec.local`: `LocalExecutor`.
- `overbrainer.exec.ssh`: `open_ssh` with `UserHost` or `PinnedHost` (imports asyncssh and
  trio-asyncio: import it only where SSH is needed).
- `overbrainer.exec.manifest`: SHA-256 manifests and `verify`.
- `overbrainer.exec.shell`: quoting and validation of everything that reaches a shell.
- `scripts/job.sh`, `scripts/ctl.sh`: the POSIX sh job wrapper and job control.

Importing this package imports nothing heavy.
"""
