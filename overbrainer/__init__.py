"""overbrainer: fine-tune language models with Axolotl on a bounded target."""

__version__ = "0.3.0"
