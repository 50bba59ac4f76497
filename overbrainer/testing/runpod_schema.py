"""Runpod's published REST API v2 schema, as the fake server and the tests use it.

``runpod_openapi.json`` beside this file is data copied from Runpod's published OpenAPI
description (``openapi-v2.json``): its ``openapi``/``info`` header, the component schemas
the pod and GPU catalog endpoints use (``CreatePodRequest``, ``Pod``, ``ListPodsResponse``,
``PodActionRequest``, ``ErrorResponse``, ``ListGpuTypesResponse``, ``GpuType`` and
everything they reference), the parameters of ``GET /catalog/gpus`` and
``GET /pods/{id}/logs``, and the data centers' listing (``ListDataCentersResponse`` and the
inline parameters of ``GET /catalog/datacenters``, under ``paths`` as published); for pod
billing, ``ListPodBillingResponse`` and the parameters of ``GET /billing/pods`` (under
``paths`` too, the ones it shares with the other billing endpoints as components); for
network volumes, ``CreateNetworkVolumeRequest``, ``NetworkVolume``,
``ListNetworkVolumesResponse``, ``ListNetworkVolumeBillingResponse`` and the parameters of
``GET /billing/network-volumes``; for clusters, ``CreateClusterRequest``, ``Cluster``,
``ListClustersResponse``, ``ListClusterBillingResponse`` and the parameters of
``GET /billing/clusters`` (a member pod's ``cluster`` is part of ``Pod``).
Regenerate it with

    python -m overbrainer.testing.runpod_schema /path/to/openapi-v2.json

The schema is JSON Schema 2020-12 (OpenAPI 3.1) and uses ``unevaluatedProperties``, so
validation uses a Draft 2020-12 validator.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from jsonschema import Draft202012Validator  # type: ignore[import-untyped]

SCHEMA_FILE = Path(__file__).with_name("runpod_openapi.json")
ROOTS = (
    "CreatePodRequest",
    "Pod",
    "ListPodsResponse",
    "PodActionRequest",
    "ErrorResponse",
    "ListGpuTypesResponse",
    "GpuType",
    "ListDataCentersResponse",
    "ListPodBillingResponse",
    "CreateNetworkVolumeRequest",
    "NetworkVolume",
    "ListNetworkVolumesResponse",
    "ListNetworkVolumeBillingResponse",
    "CreateClusterRequest",
    "Cluster",
    "ListClustersResponse",
    "ListClusterBillingResponse",
)
CATALOG_GPU_PARAMETERS = (
    "CatalogIncludeParam",
    "GpuProductFilter",
    "GpuCountFilter",
    "GpuCloudFilter",
    "CountryCodesFilter",
    "CudaVersionsFilter",
    "MinCudaVersionFilter",
)
"""The query parameters of ``GET /catalog/gpus`` and ``GET /catalog/gpus/{id}``."""
POD_LOG_PARAMETERS = ("LogSourceParam", "LogTail", "LogSince", "LogLastEventID")
"""The parameters of ``GET /pods/{id}/logs`` (``Last-Event-ID`` is a header)."""
OPERATIONS = (
    "/v2/catalog/datacenters",
    "/v2/billing/pods",
    "/v2/billing/network-volumes",
    "/v2/billing/clusters",
)
"""The paths whose ``GET`` parameters are copied as published (they are written inline)."""
_PREFIX = "#/components/schemas/"
_PARAMETERS = "#/components/parameters/"


def _refs(node: object) -> Iterator[str]:
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith(_PREFIX):
            yield ref[len(_PREFIX) :]
        for value in node.values():
            yield from _refs(value)
    elif isinstance(node, list):
        for value in node:
            yield from _refs(value)


def extract(published: dict[str, Any]) -> dict[str, Any]:
    """The part of the published description the pod and catalog endpoints need."""
    schemas = published["components"]["schemas"]
    paths = {
        path: {"get": {"parameters": published["paths"][path]["get"]["parameters"]}}
        for path in OPERATIONS
    }
    shared = [
        p["$ref"][len(_PARAMETERS) :]
        for path in paths.values()
        for p in path["get"]["parameters"]
        if "$ref" in p
    ]
    parameters = {
        name: published["components"]["parameters"][name]
        for name in (*CATALOG_GPU_PARAMETERS, *POD_LOG_PARAMETERS, *shared)
    }
    wanted: dict[str, Any] = {}
    todo = list(ROOTS) + [ref for p in parameters.values() for ref in _refs(p)]
    todo += list(_refs(paths))
    while todo:
        name = todo.pop()
        if name in wanted:
            continue
        wanted[name] = schemas[name]
        todo.extend(_refs(schemas[name]))
    return {
        "openapi": published["openapi"],
        "info": published["info"],
        "x-extracted-from": "Runpod REST API v2 published OpenAPI description (openapi-v2.json)",
        "paths": paths,
        "components": {
            "parameters": dict(sorted(parameters.items())),
            "schemas": dict(sorted(wanted.items())),
        },
    }


@cache
def document() -> dict[str, Any]:
    """The copied schema document."""
    data: dict[str, Any] = json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))
    return data


@cache
def validator(name: str) -> Draft202012Validator:
    """A Draft 2020-12 validator for one named component schema."""
    from jsonschema import Draft202012Validator

    doc = document()
    # $ref beside "components" in one root: the refs resolve against this very document.
    root = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$ref": _PREFIX + name,
        "components": doc["components"],
    }
    Draft202012Validator.check_schema(root)
    return Draft202012Validator(root)


def parameter(name: str) -> dict[str, Any]:
    """A query parameter's published description (``name``, ``schema``, ``description``)."""
    found: dict[str, Any] = document()["components"]["parameters"][name]
    return found


@cache
def parameter_validator(name: str) -> Draft202012Validator:
    """A Draft 2020-12 validator for the value of one named query parameter."""
    from jsonschema import Draft202012Validator

    root = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$ref": f"{_PARAMETERS}{name}/schema",
        "components": document()["components"],
    }
    Draft202012Validator.check_schema(root)
    return Draft202012Validator(root)


def parameter_errors(name: str, value: object) -> list[str]:
    """Every violation of a query parameter's schema by ``value`` (an array parameter's
    value is the list its comma-separated text stands for), as ``query NAME: message``."""
    key = parameter(name)["name"]
    found = [
        f"query {key}{error.json_path[1:]}: {error.message}"
        for error in parameter_validator(name).iter_errors(value)
    ]
    return sorted(found)


def operation_parameters(path: str) -> dict[str, dict[str, Any]]:
    """The published parameters of ``GET path`` (one of :data:`OPERATIONS`, without its
    ``/v2``) by name, a shared one (``$ref``) resolved."""
    found: dict[str, dict[str, Any]] = {}
    for param in document()["paths"]["/v2" + path]["get"]["parameters"]:
        ref = param.get("$ref")
        if isinstance(ref, str):
            param = parameter(ref[len(_PARAMETERS) :])
        found[param["name"]] = param
    return found


def query_errors(path: str, query: dict[str, str]) -> list[str]:
    """Every violation of ``GET path``'s published query parameters by ``query`` (an
    unknown parameter included), as ``query NAME: message``; an array parameter's value is
    its comma-separated text split, an integer's its number."""
    from jsonschema import Draft202012Validator

    params = operation_parameters(path)
    found: list[str] = []
    for key, raw in query.items():
        param = params.get(key)
        if param is None:
            found.append(f"query {key}: not a parameter of GET {path}")
            continue
        schema = param["schema"]
        value: object = raw
        if schema.get("type") == "array":  # style form, explode false
            value = raw.split(",") if raw else []
        elif schema.get("type") == "boolean":
            value = {"true": True, "false": False}.get(raw, raw)
        elif schema.get("type") == "integer" and raw.lstrip("-").isdigit():
            value = int(raw)
        root = {
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            **schema,
            "components": document()["components"],
        }
        for error in Draft202012Validator(root).iter_errors(value):
            found.append(f"query {key}{error.json_path[1:]}: {error.message}")
    return sorted(found)


def errors(name: str, instance: object) -> list[str]:
    """Every violation of the named schema, Runpod style (``$.path: message``), sorted."""
    found = [
        f"{error.json_path}: {error.message}" for error in validator(name).iter_errors(instance)
    ]
    return sorted(found)


if __name__ == "__main__":
    source = Path(sys.argv[1])
    extracted = extract(json.loads(source.read_text(encoding="utf-8")))
    SCHEMA_FILE.write_text(json.dumps(extracted, indent=1, ensure_ascii=False) + "\n", "utf-8")
    print(f"wrote {SCHEMA_FILE} ({len(extracted['components']['schemas'])} schemas)")
