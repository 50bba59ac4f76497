"""The stand-in trainer: an ``axolotl`` command that trains nothing and behaves like a run.

:data:`AXOLOTL` is the script (any ``python3``; PyYAML when importable): its metrics lines come
from the run directory's copy of overbrainer's Axolotl plugin, its outputs are small files
where Axolotl writes its own, and ``FAKE_AXOLOTL_*`` variables set its steps, pace, exit
code and behaviour under SIGTERM (its docstring lists them). Link it as ``bin/axolotl`` of
a target's venv, or run it with a Python interpreter.

:data:`TORCHRUN` launches it as several ranks on one machine, or on each node of a
cluster joined by a static rendezvous (each node's ranks writing only their own part of a
checkpoint), as ``torchrun`` launches Axolotl (link it as ``bin/torchrun`` beside the
stand-in).
"""

from pathlib import Path

AXOLOTL = Path(__file__).with_name("axolotl")
"""The stand-in's script, shipped beside this module."""

TORCHRUN = Path(__file__).with_name("torchrun")
"""The stand-in ``torchrun``, shipped beside the stand-in trainer."""
