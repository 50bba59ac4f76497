"""exec."""
