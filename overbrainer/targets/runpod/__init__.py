"""A Runpod pod as a run's target.

- :mod:`~overbrainer.targets.runpod.provision`: creating the pod and waiting until it is
  ready (its keys, the GPU types in order, an ambiguous create reconciled);
- :mod:`~overbrainer.targets.runpod.delete`: deleting a pod, the one place that does, and
  why (:func:`~overbrainer.targets.runpod.delete.delete_pod`);
- :mod:`~overbrainer.targets.runpod.pods`: the context pod operations share, and knowing a
  pod is gone;
- :mod:`~overbrainer.targets.runpod.ending`: ending a run's pod once its job ended;
- :mod:`~overbrainer.targets.runpod.starting`: whether the command starting a pod is still
  there;
- :mod:`~overbrainer.targets.runpod.podrm`: ``pod ls`` and ``pod rm``.
"""
