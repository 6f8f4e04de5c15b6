"""Fails when an operation of an OpenAPI document was never reached with a valid credential.

usage: fuzz-reached.py DOC.json SKIP_IDS HAR [HAR...]

Reads the HAR reports of every schemathesis pass over the document and, for each operation
(method and path template) of the document whose operationId is not in SKIP_IDS (comma-separated,
left out of the fuzzing on purpose), counts the answers other than 401. An operation that only
ever answered 401, or was never called, was not tested at all: the pass's credential was not
accepted (a revoked key) and the fuzzing of it was hollow.
"""
import json
import re
import sys
from urllib.parse import urlsplit


def main():
    doc = json.load(open(sys.argv[1]))
    skip = {s for s in sys.argv[2].split(",") if s}
    entries = []
    for har in sys.argv[3:]:
        entries += json.load(open(har))["log"]["entries"]
    base = urlsplit(doc.get("servers", [{}])[0].get("url", "")).path.rstrip("/") if doc.get("servers") else ""
    ops = []
    for path, item in doc["paths"].items():
        for method, op in item.items():
            if not isinstance(op, dict) or "operationId" not in op or op["operationId"] in skip:
                continue
            # The document's own route: schemathesis reads it to load the schema, never fuzzes it.
            if path.endswith("/openapi.json"):
                continue
            pattern = re.compile("^" + re.sub(r"\\{[^}/]+\\}", "[^/]+", re.escape(base + path)) + "$")
            ops.append((op["operationId"], method.upper(), pattern))
    reached = {op_id: 0 for op_id, _, _ in ops}
    only_401 = {op_id: 0 for op_id, _, _ in ops}
    for e in entries:
        method = e["request"]["method"].upper()
        path = urlsplit(e["request"]["url"]).path
        status = e["response"]["status"]
        for op_id, m, pattern in ops:
            if m == method and pattern.match(path):
                if status == 401:
                    only_401[op_id] += 1
                else:
                    reached[op_id] += 1
                break
    bad = sorted(op_id for op_id, n in reached.items() if n == 0)
    print(f"{sys.argv[1]}: {len(ops) - len(bad)} of {len(ops)} operations reached with a valid credential "
          f"({len(entries)} requests)")
    for op_id in bad:
        print(f"  never reached with a valid credential: {op_id} ({only_401[op_id]} answers, all 401)")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
