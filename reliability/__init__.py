"""The reliability campaigns: Ctrl-C everywhere, crash everywhere, faults and bad input.

``python -m reliability`` (``just reliability``) runs them against the real ``overbrainer``
command and prints one summary table; see ``reliability/__main__.py``.
"""
