"""What the training job is made of: Axolotl's config and commands, the data, the metrics.

- :mod:`overbrainer.train.axolotl`: ``axolotl.yaml``, the trainer commands, the job's
  environment and the run directory;
- :mod:`overbrainer.train.data`: checking ``data/train.jsonl`` and ``data/eval.jsonl``;
- :mod:`overbrainer.train.overbrainer_metrics`: the Axolotl plugin copied into every run
  directory, which writes ``metrics.jsonl`` from inside the job (it imports nothing of
  overbrainer);
- :mod:`overbrainer.train.metrics`: reading ``metrics.jsonl`` into progress and a summary.
"""
