#!/usr/bin/python3
"""Validates JSON documents against docs/schemas/analysis.schema.json.

Uses the jsonschema package when it is installed; otherwise a small validator for the keywords the schema uses
(type, required, properties, items, enum, const, $ref within the schema, oneOf, pattern, minimum). Also checks that every
property the document has is described by the schema, so a new field cannot slip in undocumented.

With --kinds, checks instead that the schema's verdict kinds are the one list of them,
include/ncclwatch/verdict_kinds.h: the "kind" enum names every kind in the list's order, and the verdicts'
description ranks them by the list's importance.

usage: check_schema.py SCHEMA DOCUMENT...
       check_schema.py --kinds SCHEMA VERDICT_KINDS_H
"""
import json
import re
import sys

TYPES = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
}


def validate(doc, schema, root, path, errors):
    if "$ref" in schema:
        target = root
        for part in schema["$ref"].lstrip("#/").split("/"):
            target = target[part]
        return validate(doc, target, root, path, errors)
    if "oneOf" in schema:
        ok = [s for s in schema["oneOf"] if not validate(doc, s, root, path, [])]
        if len(ok) != 1:
            errors.append(f"{path}: matches {len(ok)} of oneOf, want 1")
    if "type" in schema:
        types = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        if not any(TYPES[t](doc) for t in types):
            errors.append(f"{path}: {doc!r:.60} is not {types}")
            return errors
    if "const" in schema and doc != schema["const"]:
        errors.append(f"{path}: {doc!r} != {schema['const']!r}")
    if "enum" in schema and doc not in schema["enum"]:
        errors.append(f"{path}: {doc!r} not in {schema['enum']}")
    if "pattern" in schema and isinstance(doc, str) and not re.search(schema["pattern"], doc):
        errors.append(f"{path}: {doc!r} does not match {schema['pattern']}")
    if "minimum" in schema and TYPES["number"](doc) and doc < schema["minimum"]:
        errors.append(f"{path}: {doc} < {schema['minimum']}")
    if isinstance(doc, dict):
        for k in schema.get("required", []):
            if k not in doc:
                errors.append(f"{path}: required key '{k}' missing")
        props = schema.get("properties", {})
        for k, v in doc.items():
            if k in props:
                validate(v, props[k], root, f"{path}.{k}", errors)
            elif props:
                errors.append(f"{path}: key '{k}' is not described by the schema")
    if isinstance(doc, list) and "items" in schema:
        for i, v in enumerate(doc):
            validate(v, schema["items"], root, f"{path}[{i}]", errors)
    return errors


KIND_RE = re.compile(r'X\(\s*(\w+)\s*,\s*"([A-Z_]+)"\s*,\s*(\d+)\s*,')


def check_kinds(schema_path, header_path):
    kinds = KIND_RE.findall(open(header_path).read())  # (enum name, name, importance) in list order
    if not kinds:
        print(f"{header_path}: no X(...) entries found", file=sys.stderr)
        return 1
    schema = json.load(open(schema_path))
    errors = []
    names = [name for _, name, _ in kinds]
    enum = schema["$defs"]["kind"]["enum"]
    if enum != names:
        errors.append(f"$defs.kind.enum {enum} != the list {names}")
    by_importance = [name for _, name, _ in sorted(kinds, key=lambda k: int(k[2]))]
    description = schema["properties"]["verdicts"]["description"]
    m = re.search(r"most important first: ([A-Z_, ]+)\.", description)
    ranked = [k.strip() for k in m.group(1).split(",")] if m else None
    if ranked != by_importance:
        errors.append(f"verdicts.description ranks {ranked}, the list's importance {by_importance}")
    for e in errors:
        print(f"{schema_path}: {e}", file=sys.stderr)
    return 1 if errors else 0


def main():
    if sys.argv[1] == "--kinds":
        sys.exit(check_kinds(sys.argv[2], sys.argv[3]))
    schema = json.load(open(sys.argv[1]))
    failed = False
    for name in sys.argv[2:]:
        doc = json.load(open(name))
        errors = validate(doc, schema, schema, "$", [])
        try:
            import jsonschema

            jsonschema.Draft202012Validator(schema).validate(doc)
        except ImportError:
            pass
        except Exception as e:  # jsonschema.ValidationError
            errors.append(str(e).splitlines()[0])
        for e in errors:
            print(f"{name}: {e}", file=sys.stderr)
        failed |= bool(errors)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
