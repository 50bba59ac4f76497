"""Runpod's REST API and what a pod is made of, with the pure decisions about them.

- :mod:`~overbrainer.runpod.client`: the API client; :mod:`~overbrainer.runpod.models`:
  its answers, typed and validated; :mod:`~overbrainer.runpod.redact`: secrets and hostile
  text kept out of messages;
- :mod:`~overbrainer.runpod.s3`: a network volume through Runpod's S3-compatible API (no
  pod), signed by :mod:`~overbrainer.runpod.sigv4`;
- :mod:`~overbrainer.runpod.clocks`: Runpod's clock as this machine sees it;
  :mod:`~overbrainer.runpod.timing`: how long pod operations wait, poll and retry;
- :mod:`~overbrainer.runpod.keys`: a run's SSH keys; :mod:`~overbrainer.runpod.pod_scripts`:
  a pod's environment and container command (``scripts/*.sh``);
- :mod:`~overbrainer.runpod.decide`, :mod:`~overbrainer.runpod.orphans`,
  :mod:`~overbrainer.runpod.messages`: pure decisions and messages about pods.

Creating, reaching and deleting a run's pod is a target's work: ``overbrainer.targets.runpod``.
"""
