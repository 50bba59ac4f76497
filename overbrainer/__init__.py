"""overbrainer: fine-tune language models with Axolotl on a bounded target."""


def __getattr__(name: str) -> str:
    # ``overbrainer.__version__`` is read from the installed package's metadata on first use.
    if name == "__version__":
        from overbrainer.version import installed

        return installed()
    raise AttributeError(f"module 'overbrainer' has no attribute {name!r}")
