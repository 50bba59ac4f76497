"""The plain hashes are hashlib's, byte for byte, and loading them loads no hashlib."""

import hashlib
import json
import subprocess
import sys

from overbrainer.plain_hashes import sha1_digest, sha256_hex


def test_the_plain_hashes_are_hashlibs() -> None:
    for data in (b"", b"x", b"20260101-000000-aaaa", "ünïcödé".encode(), bytes(range(256)) * 99):
        assert sha1_digest(data) == hashlib.sha1(data).digest()
        assert sha256_hex(data) == hashlib.sha256(data).hexdigest()


def test_they_do_not_load_hashlib() -> None:
    code = (
        "import json, sys\n"
        "from overbrainer.plain_hashes import sha1_digest, sha256_hex\n"
        "sha1_digest(b'x'), sha256_hex(b'x')\n"
        "print(json.dumps(sorted(m for m in ('hashlib', '_hashlib') if m in sys.modules)))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(done.stdout) == []
