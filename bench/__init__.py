"""overbrainer's benchmarks: ``python -m bench`` (or ``just bench``)."""
