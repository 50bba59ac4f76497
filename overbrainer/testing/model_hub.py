"""A Hugging Face model hub on loopback: one local directory served as one model
repository, with what ``huggingface_hub``'s download path asks of a hub, and a record of
every request, so a test can say what a run fetched (and that a later one fetched nothing).

What it answers (the routes and headers ``huggingface_hub`` 1.x uses, read from its source):

- ``HEAD``/``GET /{repo}/resolve/{revision}/{path}``: a file. ``X-Repo-Commit`` (the
  commit), ``ETag`` (the file's SHA-256, quoted: the client names the cached blob by it)
  and ``Content-Length`` (the client checks the bytes it got against it);
- ``GET /api/models/{repo}`` and ``/api/models/{repo}/revision/{revision}``: the model's
  info (``model_info``, ``snapshot_download``): ``id``, ``sha`` and ``siblings``;
- ``GET /api/models/{repo}/tree/{revision}[/{path}]``: a folder's entries
  (``list_repo_tree``, ``list_repo_files``), all of them below it with ``recursive=true``.

A revision is ``main`` or the commit. Errors are marked as the hub marks them: a 404 with
``X-Error-Code`` ``RepoNotFound``, ``RevisionNotFound`` or ``EntryNotFound``; a missing
file's 404 carries ``X-Repo-Commit``, so the client records in its cache that the file does
not exist and, offline, does not look for it again.

The commit is a hash of the files' names and contents: the same directory is the same
commit. Files whose name (or a folder's) starts with ``.`` are not part of the repository.

Run it as a program (``python -m overbrainer.testing.model_hub DIR --repo ID --ready FILE
--log FILE``) to serve from another process or network namespace: it writes its URL to
``--ready`` once it listens and appends each request to ``--log`` as a JSON line.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import FrameType
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

__all__ = ["HubFile", "HubRequest", "ModelHub", "main", "read_log"]

_CHUNK = 1 << 20


@dataclass(frozen=True)
class HubFile:
    """One file of the repository."""

    path: str  # relative, with "/"
    size: int
    sha256: str
    git_oid: str  # the git blob id, as the hub lists it


@dataclass(frozen=True)
class HubRequest:
    """One request the hub answered: ``file`` is the repository file a ``resolve`` named
    (None for any other request), ``sent`` the bytes of it the answer carries. Recorded as
    the answer starts: a client that has its answer finds it recorded."""

    method: str
    path: str
    status: int
    file: str | None = None
    sent: int = 0


def _hash_file(path: Path, relative: str) -> HubFile:
    sha256 = hashlib.sha256()
    size = path.stat().st_size
    git = hashlib.sha1(f"blob {size}\0".encode(), usedforsecurity=False)
    with path.open("rb") as source:
        while chunk := source.read(_CHUNK):
            sha256.update(chunk)
            git.update(chunk)
    return HubFile(relative, size, sha256.hexdigest(), git.hexdigest())


def _index(root: Path) -> dict[str, HubFile]:
    files = {}
    for path in sorted(root.rglob("*")):
        relative = path.relative_to(root)
        if path.is_file() and not any(part.startswith(".") for part in relative.parts):
            files[relative.as_posix()] = _hash_file(path, relative.as_posix())
    return files


def _commit_of(files: dict[str, HubFile]) -> str:
    # 40 hex digits, as a git commit: huggingface_hub treats such a revision as a commit.
    listing = "".join(f"{f.path}\0{f.sha256}\n" for f in files.values())
    return hashlib.sha1(listing.encode(), usedforsecurity=False).hexdigest()


class ModelHub:
    """Serve ``root`` as the model repository ``repo_id`` on ``host``:``port`` (0: any
    free port), from :meth:`start` (or ``with``) to :meth:`stop`.

    ``requests`` records every request answered; ``on_request`` is called with each."""

    def __init__(
        self,
        root: Path,
        repo_id: str,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        on_request: Callable[[HubRequest], None] | None = None,
    ) -> None:
        self.root = root
        self.repo_id = repo_id
        self.files = _index(root)
        self.commit = _commit_of(self.files)
        self.requests: list[HubRequest] = []
        self._on_request = on_request
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer((host, port), _handler_for(self))
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """The endpoint, for ``HF_ENDPOINT``."""
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def downloads(self) -> list[str]:
        """The repository files that ``GET`` answers carried, once per answer, in order."""
        with self._lock:
            return [r.file for r in self.requests if r.file and r.method == "GET" and r.sent]

    def start(self) -> ModelHub:
        """Serve in a thread of this process."""
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the socket."""
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join()
            self._thread = None
        self._server.server_close()

    def __enter__(self) -> ModelHub:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def record(self, request: HubRequest) -> None:
        """Note an answered request."""
        with self._lock:  # one at a time: on_request may write to a file
            self.requests.append(request)
            if self._on_request is not None:
                self._on_request(request)

    def revision_ok(self, revision: str) -> bool:
        """Whether ``revision`` names the one commit (``main``, or the commit itself)."""
        return revision in ("main", self.commit)

    def tree(self, folder: str, *, recursive: bool) -> list[dict[str, Any]] | None:
        """The entries below ``folder`` ("" for the top), as the tree API lists them; None
        when there is no such folder."""
        prefix = f"{folder.strip('/')}/" if folder.strip("/") else ""
        below = [f for f in self.files.values() if f.path.startswith(prefix)]
        if prefix and not below:
            return None
        entries: dict[str, dict[str, Any]] = {}
        for f in below:
            rest = f.path.removeprefix(prefix).split("/")
            # Each folder on the way to the file, as far down as the listing reaches.
            depth = len(rest) - 1 if recursive else min(len(rest) - 1, 1)
            for level in range(1, depth + 1):
                sub = prefix + "/".join(rest[:level])
                oid = hashlib.sha1(sub.encode(), usedforsecurity=False).hexdigest()
                entries.setdefault(sub, {"type": "directory", "oid": oid, "size": 0, "path": sub})
            if recursive or len(rest) == 1:
                entries[f.path] = {"type": "file", "oid": f.git_oid, "size": f.size, "path": f.path}
        return [entries[key] for key in sorted(entries)]

    def info(self) -> dict[str, Any]:
        """The model's info, as ``/api/models/{repo}`` gives it."""
        return {
            "id": self.repo_id,
            "modelId": self.repo_id,
            "sha": self.commit,
            "private": False,
            "gated": False,
            "disabled": False,
            "tags": [],
            "siblings": [{"rfilename": f.path, "size": f.size} for f in self.files.values()],
        }


def _handler_for(hub: ModelHub) -> type[BaseHTTPRequestHandler]:
    class Handler(_Handler):
        pass

    Handler.hub = hub
    return Handler


class _Handler(BaseHTTPRequestHandler):
    hub: ModelHub
    server_version = "overbrainer-model-hub"

    def log_message(self, format: str, *args: Any) -> None:
        return None  # the record is hub.requests, not stderr

    def do_HEAD(self) -> None:
        self._answer(body=False)

    def do_GET(self) -> None:
        self._answer(body=True)

    def _answer(self, *, body: bool) -> None:
        split = urlsplit(self.path)
        route = unquote(split.path)
        query = parse_qs(split.query)
        hub = self.hub
        api = f"/api/models/{hub.repo_id}"
        resolve = f"/{hub.repo_id}/resolve/"
        if route.startswith(resolve):
            revision, _, name = route.removeprefix(resolve).partition("/")
            self._resolve(revision, name, body=body)
        elif route in (api, f"{api}/revision/main", f"{api}/revision/{hub.commit}"):
            self._json(hub.info(), body=body)
        elif route.startswith(f"{api}/revision/"):
            self._error(404, "RevisionNotFound", body=body)
        elif route.startswith(f"{api}/tree/"):
            revision, _, folder = route.removeprefix(f"{api}/tree/").partition("/")
            recursive = query.get("recursive", ["false"])[0].lower() in ("true", "1")
            if not hub.revision_ok(revision):
                self._error(404, "RevisionNotFound", body=body)
            elif (entries := hub.tree(folder, recursive=recursive)) is None:
                self._error(404, "EntryNotFound", body=body, commit=True)
            else:
                self._json(entries, body=body)
        elif route.startswith("/api/"):
            self._error(404, "RepoNotFound", body=body)
        else:
            # Another repository's resolve, or nothing the hub knows.
            self._error(404, "RepoNotFound", body=body)

    def _resolve(self, revision: str, name: str, *, body: bool) -> None:
        hub = self.hub
        if not hub.revision_ok(revision):
            self._error(404, "RevisionNotFound", body=body)
            return
        found = hub.files.get(name)
        if found is None:
            self._error(404, "EntryNotFound", body=body, commit=True, file=name)
            return
        hub.record(HubRequest(self.command, self.path, 200, found.path, found.size if body else 0))
        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(found.size))
        self.send_header("ETag", f'"{found.sha256}"')
        self.send_header("X-Repo-Commit", hub.commit)
        self.end_headers()
        if body:
            with (hub.root / found.path).open("rb") as source:
                while chunk := source.read(_CHUNK):
                    self.wfile.write(chunk)

    def _json(self, data: object, *, body: bool) -> None:
        payload = json.dumps(data).encode()
        self.hub.record(HubRequest(self.command, self.path, 200))
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.send_header("X-Repo-Commit", self.hub.commit)
        self.end_headers()
        if body:
            self.wfile.write(payload)

    def _error(
        self, status: int, code: str, *, body: bool, commit: bool = False, file: str | None = None
    ) -> None:
        payload = json.dumps({"error": code}).encode()
        self.hub.record(HubRequest(self.command, self.path, status, file))
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.send_header("X-Error-Code", code)
        if commit:
            self.send_header("X-Repo-Commit", self.hub.commit)
        self.end_headers()
        if body:
            self.wfile.write(payload)


def read_log(path: Path) -> Iterator[HubRequest]:
    """The requests a hub run as a program appended to its ``--log``."""
    if path.exists():
        for line in path.read_text().splitlines():
            yield HubRequest(**json.loads(line))


def main(argv: list[str] | None = None) -> int:
    """Serve a directory until SIGTERM or SIGINT (see the module's docstring)."""
    parser = argparse.ArgumentParser(prog="python -m overbrainer.testing.model_hub")
    parser.add_argument("root", type=Path, help="the directory served as the repository")
    parser.add_argument("--repo", required=True, help="its repository id, owner/name")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--ready", type=Path, required=True, help="gets the URL once serving")
    parser.add_argument("--log", type=Path, required=True, help="gets each request, a JSON line")
    args = parser.parse_args(argv)

    log = args.log.open("a", buffering=1)

    def note(request: HubRequest) -> None:
        log.write(json.dumps(asdict(request)) + "\n")

    stopping = threading.Event()

    def stop(signum: int, frame: FrameType | None) -> None:
        stopping.set()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    with ModelHub(args.root, args.repo, host=args.host, port=args.port, on_request=note) as hub:
        ready = args.ready.with_name(args.ready.name + ".tmp")
        ready.write_text(hub.url + "\n")
        ready.rename(args.ready)  # whole or absent: a reader never sees half a URL
        while not stopping.wait(1.0):
            pass
    log.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
