"""runpod."""
