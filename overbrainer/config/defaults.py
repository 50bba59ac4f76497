"""Default values the settings and the ``init`` template share (no imports: cheap)."""

RUNPOD_DEFAULT_IMAGE = (
    "axolotlai/axolotl-cloud-term:0.19.0-py3.12-cu130-2.12.1"
    "@sha256:f7b94da82913920a003e28e091d8528f57f76da7360fca87e95faf62fa32a680"
)
"""The image of a Runpod target that names none: Axolotl 0.19.0's cloud image (Axolotl in
``/workspace/axolotl-venv``, the target's default venv), pinned by digest."""
