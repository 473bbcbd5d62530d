#!/usr/bin/env python3
"""Fails when docs/API.md's endpoint tables and the OpenAPI document disagree (issue 39): every
operation of docs/openapi.json (which a test keeps equal to what the members serve) must have a
row in docs/API.md, and every row must name an operation the document has. A row is a table line
whose first cell is one operation in backticks: "| `GET /v1/kv/{key}` | ...".

`--self-test` first shows the check catching planted faults in a scratch pair of files: an
operation without a row, and a row without an operation. Standard library only.
"""

import json
import pathlib
import re
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
METHODS = ("get", "put", "post", "delete", "patch")
ROW = re.compile(r"^\|\s*`(GET|PUT|POST|DELETE|PATCH) (/[^`\s]*)`\s*\|", re.M)


def operations(openapi_path):
    """Every operation of an OpenAPI document, as "METHOD /path"."""
    document = json.loads(openapi_path.read_text())
    return {
        f"{method.upper()} {path}"
        for path, item in document.get("paths", {}).items()
        for method in item
        if method in METHODS
    }


def rows(reference_path):
    """Every operation docs/API.md's tables name, as "METHOD /path"."""
    return {f"{method} {path}" for method, path in ROW.findall(reference_path.read_text())}


def disagreements(openapi_path, reference_path):
    """(operations without a row, rows without an operation), each sorted."""
    served, documented = operations(openapi_path), rows(reference_path)
    return sorted(served - documented), sorted(documented - served)


def self_test():
    with tempfile.TemporaryDirectory() as scratch:
        openapi = pathlib.Path(scratch) / "openapi.json"
        reference = pathlib.Path(scratch) / "API.md"
        paths = {"/v1/kv/{key}": {"get": {}, "put": {}}, "/v1/status": {"get": {}}}
        openapi.write_text(json.dumps({"paths": paths}))
        reference.write_text(
            "| operation | what |\n|---|---|\n| `GET /v1/kv/{key}` | one key |\n"
            "| `GET /v1/status` | status |\n| `DELETE /v1/planted` | nothing serves it |\n"
        )
        expected = (["PUT /v1/kv/{key}"], ["DELETE /v1/planted"])
        if disagreements(openapi, reference) != expected:
            print(f"check-api-doc: the self-test's planted faults went unreported: "
                  f"{disagreements(openapi, reference)}", file=sys.stderr)
            return False
    print("check-api-doc: the self-test caught the planted missing and extra rows")
    return True


def main():
    if "--self-test" in sys.argv[1:] and not self_test():
        return 1
    undocumented, unknown = disagreements(ROOT / "docs" / "openapi.json", ROOT / "docs" / "API.md")
    for operation in undocumented:
        print(f"check-api-doc: {operation} is served but has no row in docs/API.md", file=sys.stderr)
    for operation in unknown:
        print(f"check-api-doc: docs/API.md has a row for {operation}, which is not served",
              file=sys.stderr)
    if undocumented or unknown:
        return 1
    print(f"check-api-doc: docs/API.md has a row for each of the {len(rows(ROOT / 'docs' / 'API.md'))} operations")
    return 0


if __name__ == "__main__":
    sys.exit(main())
