"""overbrainer's version, as the installed package's metadata says: what ``--version``
prints, what every event's actor records and what the Runpod client sends as its agent.

``pyproject.toml`` is the only place the number is written; installing the package (from a
wheel, an sdist or a checkout) copies it into the metadata read here.
"""

import re
import sys
from functools import cache
from pathlib import Path

DISTRIBUTION = "overbrainer"

UNKNOWN = "0+unknown"
"""The version of code that was never installed (run from a copy of the sources on
``PYTHONPATH``): a local version below every release, so a log it wrote reads as old."""

# Where an installed distribution's metadata lives: ``overbrainer-0.3.0.dist-info/METADATA``
# (a wheel, an editable install) or ``overbrainer[-0.3.0[-py3.11]].egg-info/PKG-INFO``.
_METADATA_DIR = re.compile(r"overbrainer(-[^-]+(-py[\d.]+)?)?\.(dist-info|egg-info)", re.I)


@cache
def installed() -> str:
    """The version in the installed package's metadata, or :data:`UNKNOWN`.

    It reads the metadata file itself, the way ``importlib.metadata`` finds it (the first
    ``sys.path`` entry that holds it): that module imports the email package, which costs
    15–60 ms on every command that records an event.
    """
    for entry in sys.path:
        found = _version_in(Path(entry or "."))
        if found is not None:
            return found
    return UNKNOWN


def describe() -> str:
    """What ``overbrainer --version`` prints: ``overbrainer 0.3.0``."""
    return f"{DISTRIBUTION} {installed()}"


def _version_in(directory: Path) -> str | None:
    try:
        names = sorted(p.name for p in directory.iterdir() if _METADATA_DIR.fullmatch(p.name))
    except OSError:
        return None
    for name in names:
        meta = directory / name / ("METADATA" if name.endswith("dist-info") else "PKG-INFO")
        try:
            with meta.open(encoding="utf-8") as lines:
                for line in lines:
                    if not line.strip():
                        break  # the headers end at the first blank line
                    key, _, value = line.partition(":")
                    if key.strip().lower() == "version" and value.strip():
                        return value.strip()
        except (OSError, UnicodeDecodeError):
            continue
    return None


_RELEASE = re.compile(r"v?(\d+(?:\.\d+)*)")


def release(version: str) -> tuple[int, ...] | None:
    """The release numbers of ``version`` (``"0.4.1rc2"`` → ``(0, 4, 1)``), trailing zeros
    dropped so ``1.0`` equals ``1.0.0``; None when it does not start with one."""
    match = _RELEASE.match(version.strip())
    if match is None:
        return None
    numbers = [int(part) for part in match.group(1).split(".")]
    while len(numbers) > 1 and numbers[-1] == 0:
        numbers.pop()
    return tuple(numbers)


def is_newer(version: str, than: str) -> bool:
    """Whether release ``version`` comes after release ``than`` (unknown forms never do)."""
    mine, theirs = release(version), release(than)
    return mine is not None and theirs is not None and mine > theirs
