"""A Runpod pod as a run's target.

- :mod:`~overbrainer.targets.runpod.provision`: creating the pod and waiting until it is
  ready (its keys, the GPU types in order, an ambiguous create reconciled);
- :mod:`~overbrainer.targets.runpod.pods`: deleting a pod and knowing it is gone
  (:func:`~overbrainer.targets.runpod.pods.delete_pod`), and the context pod operations
  share;
- :mod:`~overbrainer.targets.runpod.ending`: ending a run's pod once its job ended;
- :mod:`~overbrainer.targets.runpod.starting`: whether the command starting a pod is still
  there;
- :mod:`~overbrainer.targets.runpod.podrm`: ``pod ls`` and ``pod rm``.
"""
