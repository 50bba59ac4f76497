"""A stand-in for ``huggingface_hub`` (:mod:`overbrainer.testing.hub.huggingface_hub`):
put this folder (:data:`PATH`) first on a job's ``PYTHONPATH`` and ``import
huggingface_hub`` finds it, in the fake world where the real library and the Hub are not
there."""

from pathlib import Path

PATH = Path(__file__).parent
"""The folder to put on ``PYTHONPATH``."""

MODULE = PATH / "huggingface_hub" / "__init__.py"
"""The stand-in module's file (the stand-in trainer loads it from there)."""
