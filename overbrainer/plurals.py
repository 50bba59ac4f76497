"""Words that agree with a count: ``1 setting differs``, ``2 settings differ``, ``(1
line)``. One place for every message, so none says ``1 lines``. Pure; imports nothing."""


def word(count: float, one: str, many: str | None = None) -> str:
    """``one`` for a count of 1, else ``many`` (by default ``one + "s"``): the noun, verb or
    pronoun that agrees with ``count`` (``word(n, "differs", "differ")``, ``word(n, "it",
    "them")``)."""
    if count == 1:
        return one
    return many if many is not None else one + "s"


def plural(count: int, one: str, many: str | None = None) -> str:
    """The count and its noun: ``1 file``, ``2 files``, ``0 files`` (``many`` when the
    plural is not ``one + "s"``: ``plural(n, "entry", "entries")``)."""
    return f"{count} {word(count, one, many)}"
