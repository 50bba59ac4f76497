"""AWS Signature Version 4, as S3-compatible services (Runpod's network volumes) check it.

Written from the published specification ("Signature Version 4 signing process"): a
canonical request, a string to sign over its hash, a signing key derived from the secret by
a chain of HMAC-SHA256 over the date, the region, the service and ``aws4_request``, and an
``Authorization`` header naming the access key, the scope and the signed headers. For S3
the path is encoded once (not twice, as other services want) and the payload's SHA-256 is
sent in ``x-amz-content-sha256`` and signed.

Pure functions, no I/O: :func:`sign` returns the headers to add to a request. Nothing here
logs or keeps the secret; :class:`Credentials` keeps it out of ``repr``.
"""

from __future__ import annotations

import hashlib
import hmac
import urllib.parse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

__all__ = [
    "ALGORITHM",
    "EMPTY_SHA256",
    "UNSIGNED_PAYLOAD",
    "Credentials",
    "SignedRequest",
    "canonical_query",
    "canonical_request",
    "encode_path",
    "sign",
    "signing_key",
    "string_to_sign",
]

ALGORITHM = "AWS4-HMAC-SHA256"
EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()
UNSIGNED_PAYLOAD = "UNSIGNED-PAYLOAD"

# RFC 3986's unreserved characters: the only ones the specification leaves unencoded.
_UNRESERVED = "-_.~"


@dataclass(frozen=True)
class Credentials:
    """An access key and its secret (Runpod's ``user_…`` and ``rps_…``)."""

    access_key: str
    secret: str = field(repr=False)

    def __repr__(self) -> str:
        return "Credentials(<hidden>)"


@dataclass(frozen=True)
class SignedRequest:
    """What a signature adds to a request: its headers (``authorization`` among them), and
    the intermediate texts, for tests and for debugging a refusal without the secret."""

    headers: dict[str, str]
    canonical_request: str = field(repr=False)
    string_to_sign: str = field(repr=False)


def _uri_encode(text: str, *, keep_slash: bool) -> str:
    # quote() encodes UTF-8 bytes as %XX in upper case, as the specification wants.
    return urllib.parse.quote(text, safe=_UNRESERVED + ("/" if keep_slash else ""))


def encode_path(path: str) -> str:
    """``path`` (decoded, starting with ``/``) as sent and signed: each byte outside the
    unreserved set percent-encoded, ``/`` kept."""
    if not path.startswith("/"):
        raise ValueError("a request path starts with /")
    return _uri_encode(path, keep_slash=True)


def canonical_query(params: Sequence[tuple[str, str]]) -> str:
    """The query string as sent and signed: names and values encoded (``/`` too), sorted
    by encoded name then value, ``name=`` for an empty value."""
    pairs = sorted(
        (_uri_encode(name, keep_slash=False), _uri_encode(value, keep_slash=False))
        for name, value in params
    )
    return "&".join(f"{name}={value}" for name, value in pairs)


def _header_value(value: str) -> str:
    # Trimmed, and inner runs of spaces collapsed to one, as the specification asks.
    return " ".join(value.strip().split())


def canonical_request(
    method: str,
    encoded_path: str,
    query: str,
    headers: Mapping[str, str],
    payload_sha256: str,
) -> tuple[str, str]:
    """The canonical request and its signed-headers list (names in lower case, sorted,
    joined by ``;``). ``headers`` are exactly the headers to sign."""
    lowered: dict[str, str] = {}
    for name, value in headers.items():
        key = name.strip().lower()
        if key in lowered:
            raise ValueError(f"header {key} given twice")
        lowered[key] = _header_value(value)
    names = sorted(lowered)
    canonical_headers = "".join(f"{name}:{lowered[name]}\n" for name in names)
    signed = ";".join(names)
    text = "\n".join(
        [method.upper(), encoded_path, query, canonical_headers, signed, payload_sha256]
    )
    return text, signed


def _scope(day: str, region: str, service: str) -> str:
    return f"{day}/{region}/{service}/aws4_request"


def string_to_sign(amz_date: str, scope: str, canonical: str) -> str:
    """The text the signature is over: the algorithm, the time, the scope and the
    canonical request's SHA-256 (hex)."""
    digest = hashlib.sha256(canonical.encode("utf-8")).hexdigest()
    return "\n".join([ALGORITHM, amz_date, scope, digest])


def _hmac(key: bytes, text: str) -> bytes:
    return hmac.new(key, text.encode("utf-8"), hashlib.sha256).digest()


def signing_key(secret: str, day: str, region: str, service: str) -> bytes:
    """The key derived from ``secret`` for one day (``YYYYMMDD``), region and service."""
    key = _hmac(("AWS4" + secret).encode("utf-8"), day)
    key = _hmac(key, region)
    key = _hmac(key, service)
    return _hmac(key, "aws4_request")


def sign(
    credentials: Credentials,
    *,
    method: str,
    host: str,
    encoded_path: str,
    query: str = "",
    headers: Mapping[str, str] | None = None,
    payload_sha256: str = EMPTY_SHA256,
    region: str,
    service: str = "s3",
    now: datetime | None = None,
) -> SignedRequest:
    """Sign a request: returns the headers to send with it (``host``, ``x-amz-date``,
    ``x-amz-content-sha256``, ``authorization`` and the given ``headers``, all signed).

    ``encoded_path`` and ``query`` are sent exactly as given (see :func:`encode_path`,
    :func:`canonical_query`); ``host`` is the request's host with its port when not the
    scheme's default. ``now`` is the signing time (UTC); the server refuses one too far
    from its own clock.
    """
    moment = (now or datetime.now(UTC)).astimezone(UTC)
    amz_date = moment.strftime("%Y%m%dT%H%M%SZ")
    day = amz_date[:8]
    to_sign: dict[str, str] = {
        "host": host,
        "x-amz-date": amz_date,
        "x-amz-content-sha256": payload_sha256,
    }
    for name, value in (headers or {}).items():
        key = name.lower()
        if key in to_sign or key == "authorization":
            raise ValueError(f"header {key} is set by the signature")
        to_sign[key] = value
    canonical, signed = canonical_request(method, encoded_path, query, to_sign, payload_sha256)
    scope = _scope(day, region, service)
    text = string_to_sign(amz_date, scope, canonical)
    signature = hmac.new(
        signing_key(credentials.secret, day, region, service),
        text.encode("utf-8"),
        hashlib.sha256,
    ).hexdigest()
    authorization = (
        f"{ALGORITHM} Credential={credentials.access_key}/{scope}, "
        f"SignedHeaders={signed}, Signature={signature}"
    )
    return SignedRequest(
        headers={**to_sign, "authorization": authorization},
        canonical_request=canonical,
        string_to_sign=text,
    )
