"""A Runpod pod as a run's target, and its operations.

- :mod:`~overbrainer.targets.runpod.target`: the pod target the lifecycle drives
  (:class:`~overbrainer.targets.runpod.target.PodTarget`, both of its sides);
- :mod:`~overbrainer.targets.runpod.logs`: a run's pod read for ``runs logs`` (its job's
  log over SSH, the pod's own log through the API);

- :mod:`~overbrainer.targets.runpod.provision`: creating the pod and waiting until it is
  ready (its keys, the GPU types in order, an ambiguous create reconciled);
- :mod:`~overbrainer.targets.runpod.delete`: deleting a pod, the one place that does, and
  why (:func:`~overbrainer.targets.runpod.delete.delete_pod`);
- :mod:`~overbrainer.targets.runpod.pods`: the context pod operations share, and knowing a
  pod is gone;
- :mod:`~overbrainer.targets.runpod.reach`: reaching a run's pod again (a fresh look, its
  endpoint, an SSH connection with its pinned host key), and a pod found gone;
- :mod:`~overbrainer.targets.runpod.following`: what bounds following a job on its pod (its
  deadline, the pod lost);
- :mod:`~overbrainer.targets.runpod.ending`: ending a run's pod once its job ended;
- :mod:`~overbrainer.targets.runpod.starting`: whether the command starting a pod is still
  there;
- :mod:`~overbrainer.targets.runpod.podrm`: ``pod ls`` and ``pod rm``.
"""
