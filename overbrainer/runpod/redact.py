"""Keeping secrets and hostile text out of messages.

Two tools: :class:`Redactor` replaces a secret -- and any long enough piece of it, since a
server may echo a key only in part -- and :func:`one_line` turns account-provided text
into a single printable line of bounded length.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["MIN_FRAGMENT", "REDACTED", "Redactor", "one_line"]

REDACTED = "[redacted]"

MIN_FRAGMENT = 6
"""The shortest piece of a secret that is redacted on its own (shorter pieces are noise)."""


class Redactor:
    """Replaces every secret, and every piece of one of at least ``min_fragment`` characters.

    Secrets shorter than ``min_fragment`` are only redacted whole.
    """

    def __init__(self, secrets: Iterable[str], *, min_fragment: int = MIN_FRAGMENT) -> None:
        self._secrets = tuple(sorted({s for s in secrets if s}, key=len, reverse=True))
        self._min = max(1, min_fragment)
        # Every window of min_fragment characters of every secret: a piece of a secret
        # must start with one of them, so scanning the text for these finds every piece.
        self._windows: dict[str, list[str]] = {}
        for secret in self._secrets:
            size = min(self._min, len(secret))
            for start in range(len(secret) - size + 1):
                self._windows.setdefault(secret[start : start + size], []).append(secret)

    def __call__(self, text: str) -> str:
        """Return ``text`` with every secret and every long enough piece of one replaced."""
        if not self._secrets or not text:
            return text
        hidden = [False] * len(text)
        sizes = sorted({len(w) for w in self._windows}, reverse=True)
        for start in range(len(text)):
            for size in sizes:
                if start + size > len(text):
                    continue
                owners = self._windows.get(text[start : start + size])
                if not owners:
                    continue
                end = start + size
                # Grow the match while it is still a piece of one of its secrets.
                for secret in owners:
                    stop = end
                    while stop < len(text) and text[start : stop + 1] in secret:
                        stop += 1
                    end = max(end, stop)
                for i in range(start, end):
                    hidden[i] = True
                break
        if not any(hidden):
            return text
        out: list[str] = []
        i = 0
        while i < len(text):
            if hidden[i]:
                while i < len(text) and hidden[i]:
                    i += 1
                out.append(REDACTED)
            else:
                out.append(text[i])
                i += 1
        return "".join(out)

    def __repr__(self) -> str:
        return f"Redactor(<{len(self._secrets)} secrets>)"


def one_line(text: str, limit: int = 300) -> str:
    """Return ``text`` as one printable line of at most ``limit`` characters.

    Line breaks, control and format characters (bidi overrides included) become spaces,
    runs of spaces collapse, and a longer text is cut with an ellipsis.
    """
    cleaned = "".join(ch if ch.isprintable() else " " for ch in text)
    cleaned = " ".join(cleaned.split())
    if len(cleaned) > limit:
        cleaned = cleaned[: max(0, limit - 1)].rstrip() + "…"
    return cleaned
