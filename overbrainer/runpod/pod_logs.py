"""A pod's own logs (``GET /pods/{id}/logs``), read as Runpod streams them: Server-Sent
Events whose ``data`` is ``{"ts", "source", "line"}`` and whose ``id`` is a resume cursor;
and what the ``system`` source says of an image being pulled. Pure: no I/O.

The ``system`` source carries the host's side of a pod's life (the image pull, the
container's start); ``container`` what the container printed. Neither is ours: every line
is made printable (no control character reaches a terminal) and bounded in length.
"""

import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from overbrainer.runpod.redact import one_line
from overbrainer.utc import parse_utc

LogSource = Literal["system", "container"]
SOURCES: tuple[LogSource, ...] = ("system", "container")
MAX_LINE = 2000
"""The longest line shown (longer ones are cut)."""
MAX_EVENT_BYTES = 1 << 20
"""An event longer than this without its end is dropped (a runaway stream cannot grow the
parser's buffer without bound)."""
TAIL_MAX = 5000
"""The most backfilled lines Runpod gives (its ``tail`` parameter's maximum)."""


@dataclass(frozen=True)
class LogLine:
    """One line of a pod's log: when Runpod stamped it, from which source, and the text."""

    ts: datetime | None
    source: str
    line: str
    cursor: str = ""

    def text(self, *, with_source: bool = False) -> str:
        """``2026-06-01 12:02:03Z [system] Pulling fs layer`` (the source only when asked)."""
        when = self.ts.strftime("%Y-%m-%d %H:%M:%SZ") if self.ts is not None else "-"
        source = f" [{self.source}]" if with_source else ""
        return f"{when}{source} {self.line}"


def _time(text: object) -> datetime | None:
    return parse_utc(text)


class SseReader:
    """Server-Sent Events from the bytes of a stream, fed as they come."""

    def __init__(self) -> None:
        self._buffer = b""
        self._cr = False  # the last byte fed was a CR, whose LF may come next

    def feed(self, data: bytes) -> list[tuple[str, str]]:
        """The ``(id, data)`` of every event completed by ``data``."""
        if self._cr and data.startswith(b"\n"):
            data = data[1:]  # the rest of a CRLF split between two reads
        self._cr = data.endswith(b"\r")
        self._buffer += data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        events: list[tuple[str, str]] = []
        while True:
            end = self._buffer.find(b"\n\n")
            if end < 0:
                if len(self._buffer) > MAX_EVENT_BYTES:
                    self._buffer = b""
                return events
            block, self._buffer = self._buffer[:end], self._buffer[end + 2 :]
            event_id, lines = "", []
            for raw in block.decode("utf-8", "replace").split("\n"):
                if raw.startswith(":"):
                    continue  # a comment (keep-alive)
                name, _, value = raw.partition(":")
                value = value.removeprefix(" ")
                if name == "data":
                    lines.append(value)
                elif name == "id":
                    event_id = value
            if lines:
                events.append((event_id, "\n".join(lines)))


def log_line(event_id: str, data: str) -> LogLine | None:
    """The log line an event carries (None: not one, e.g. malformed JSON)."""
    try:
        record = json.loads(data)
    except ValueError:
        return None
    if not isinstance(record, dict) or not isinstance(record.get("line"), str):
        return None
    source = record.get("source")
    return LogLine(
        ts=_time(record.get("ts")),
        source=source if isinstance(source, str) and source in SOURCES else "?",
        line=one_line(record["line"], MAX_LINE),
        cursor=one_line(event_id, 200),
    )


def log_lines(events: Iterable[tuple[str, str]]) -> Iterator[LogLine]:
    """The log lines of ``events``, malformed ones left out."""
    for event_id, data in events:
        found = log_line(event_id, data)
        if found is not None:
            yield found


# --- an image being pulled -------------------------------------------------------------

_UNITS = {"b": 1, "kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12, "kib": 1024, "mib": 1024**2,
          "gib": 1024**3}  # fmt: skip
_SIZE = r"(\d+(?:\.\d+)?)\s*([kmgt]i?b|b)"
_LAYER = r"(?P<layer>[0-9a-f]{6,64})"
_DOWNLOADING = re.compile(
    _LAYER + r":\s*Downloading\b.*?" + _SIZE + r"\s*/\s*" + _SIZE, re.IGNORECASE
)
_LAYER_STEP = re.compile(_LAYER + r":\s*(?P<what>Pulling fs layer|Waiting|Download complete|"
                         r"Verifying Checksum|Extracting|Pull complete|Already exists)",
                         re.IGNORECASE)  # fmt: skip
_PULLED = re.compile(r"\b(Status: Downloaded newer image|Status: Image is up to date|"
                     r"image pulled|pulled image)\b", re.IGNORECASE)  # fmt: skip
_STARTED = re.compile(r"\b(start(ed|ing)? container|container (is )?(started|running))\b",
                      re.IGNORECASE)  # fmt: skip


def _bytes(number: str, unit: str) -> float:
    return float(number) * _UNITS[unit.lower()]


@dataclass(frozen=True)
class Pull:
    """What a pod's system log told so far of its image pull and its container's start."""

    layers: tuple[str, ...] = ()
    done: frozenset[str] = frozenset()
    sizes: tuple[tuple[str, float, float], ...] = ()  # layer, bytes so far, layer's bytes
    pulled: bool = False
    started: bool = False
    last: str = ""

    def seen(self, line: str) -> "Pull":
        """This pull after one more system line."""
        layers, done, pulled, started = list(self.layers), set(self.done), self.pulled, self.started
        sizes = {layer: (have, total) for layer, have, total in self.sizes}
        if (match := _DOWNLOADING.search(line)) is not None:
            layer = match["layer"]
            if layer not in layers:
                layers.append(layer)
            have = _bytes(match.group(2), match.group(3))
            total = _bytes(match.group(4), match.group(5))
            sizes[layer] = (min(have, total), total)
        elif (match := _LAYER_STEP.search(line)) is not None:
            layer, what = match["layer"], match["what"].lower()
            if layer not in layers:
                layers.append(layer)
            if what in ("pull complete", "already exists"):
                done.add(layer)
            if what in ("download complete", "pull complete") and layer in sizes:
                sizes[layer] = (sizes[layer][1], sizes[layer][1])
        if _PULLED.search(line):
            pulled = True
        if _STARTED.search(line):
            started = True
        return Pull(
            layers=tuple(layers),
            done=frozenset(done),
            sizes=tuple((layer, have, total) for layer, (have, total) in sizes.items()),
            pulled=pulled,
            started=started,
            last=line,
        )

    def text(self) -> str:
        """``pulling the image: 3 of 7 layers, 1.2 GB of 4.8 GB`` — or, when the lines are
        not a pull's as this knows them, the latest line."""
        if self.started:
            return "the container started"
        if self.pulled:
            return "image pulled; starting the container"
        if not self.layers:
            return self.last
        text = f"pulling the image: {len(self.done)} of {len(self.layers)} layers"
        if self.sizes:
            have = sum(h for _, h, _ in self.sizes)
            total = sum(t for _, _, t in self.sizes)
            text += f", {_size(have)} of {_size(total)} seen so far"
        return text


def _size(count: float) -> str:
    for unit in ("bytes", "kB", "MB", "GB"):
        if count < 1000:
            return f"{count:.0f} {unit}" if unit == "bytes" else f"{count:.1f} {unit}"
        count /= 1000
    return f"{count:.1f} TB"
