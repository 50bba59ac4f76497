"""AWS Signature V4 as written in overbrainer.runpod.sigv4: the specification's published
examples, and agreement with botocore's independent implementation (moto's dependency) on
requests of the kinds the S3 client sends. That a real server accepts these signatures is
shown in test_s3.py."""

import hashlib
import hmac
from datetime import UTC, datetime

import pytest
from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials as BotoCredentials

from overbrainer.runpod.sigv4 import (
    EMPTY_SHA256,
    Credentials,
    canonical_query,
    canonical_request,
    encode_path,
    sign,
    signing_key,
    string_to_sign,
)

# The example key of AWS's documentation and signature test suite.
EXAMPLE = Credentials("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY")


def test_signing_key_matches_the_documented_example() -> None:
    key = signing_key(EXAMPLE.secret, "20120215", "us-east-1", "iam")
    assert key.hex() == "f4780e2d9f65fa895f9c67b32ce1baf0b0d8a43505a000a1a9e090d414db404d"


def test_get_vanilla_of_the_test_suite_signs_as_published() -> None:
    canonical, signed = canonical_request(
        "GET",
        "/",
        "",
        {"Host": "example.amazonaws.com", "X-Amz-Date": "20150830T123600Z"},
        EMPTY_SHA256,
    )
    assert signed == "host;x-amz-date"
    text = string_to_sign("20150830T123600Z", "20150830/us-east-1/service/aws4_request", canonical)
    key = signing_key(EXAMPLE.secret, "20150830", "us-east-1", "service")
    signature = hmac.new(key, text.encode(), hashlib.sha256).hexdigest()
    assert signature == "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31"


def test_header_values_are_trimmed_and_inner_spaces_collapsed() -> None:
    canonical, _ = canonical_request("GET", "/", "", {"My-Header1": "  a   b   c  "}, "x")
    assert "my-header1:a b c\n" in canonical


def test_paths_and_queries_encode_everything_but_unreserved_characters() -> None:
    assert encode_path("/vol/a b/é~x-_.y") == "/vol/a%20b/%C3%A9~x-_.y"
    assert canonical_query([("prefix", "a/b c"), ("list-type", "2"), ("empty", "")]) == (
        "empty=&list-type=2&prefix=a%2Fb%20c"
    )


def test_the_secret_is_not_in_credentials_repr() -> None:
    assert EXAMPLE.secret not in repr(EXAMPLE) and EXAMPLE.access_key not in repr(EXAMPLE)


def _botocore_signature(
    method: str, url: str, headers: dict[str, str], region: str, when: datetime
) -> str:
    request = AWSRequest(method=method, url=url, headers=headers)
    request.context["timestamp"] = when.strftime("%Y%m%dT%H%M%SZ")
    auth = S3SigV4Auth(BotoCredentials(EXAMPLE.access_key, EXAMPLE.secret), "s3", region)
    canonical = auth.canonical_request(request)
    return str(auth.signature(auth.string_to_sign(request, canonical), request))


@pytest.mark.parametrize(
    ("method", "key", "params", "extra"),
    [
        ("PUT", "data/train.jsonl", [], {"x-amz-meta-sha256": "ab" * 32}),
        ("HEAD", "checkpoints/run 1/step-10/model.safetensors", [], {}),
        ("DELETE", "cache/ünïcode~name(1).bin", [], {}),
        (
            "GET",
            "",
            [("list-type", "2"), ("prefix", "data/a b"), ("continuation-token", "t/1=")],
            {},
        ),
    ],
)
def test_signatures_agree_with_botocore(
    method: str, key: str, params: list[tuple[str, str]], extra: dict[str, str]
) -> None:
    when = datetime(2026, 12, 3, 1, 2, 3, tzinfo=UTC)
    payload = hashlib.sha256(b"body").hexdigest() if method == "PUT" else EMPTY_SHA256
    path = encode_path("/vol-abc123" + (f"/{key}" if key else ""))
    query = canonical_query(params)
    signed = sign(
        EXAMPLE,
        method=method,
        host="s3api-eu-ro-1.runpod.io",
        encoded_path=path,
        query=query,
        headers=extra,
        payload_sha256=payload,
        region="EU-RO-1",
        now=when,
    )
    ours = signed.headers["authorization"].rpartition("Signature=")[2]
    url = f"https://s3api-eu-ro-1.runpod.io{path}" + (f"?{query}" if query else "")
    headers = {k: v for k, v in signed.headers.items() if k != "authorization"}
    assert ours == _botocore_signature(method, url, headers, "EU-RO-1", when)
    assert signed.headers["authorization"].startswith(
        "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20261203/EU-RO-1/s3/aws4_request, "
    )
