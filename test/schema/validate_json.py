#!/usr/bin/python3
"""Validates ncclwatch's JSON documents against the schemas in docs/schemas/ (JSON Schema draft 2020-12, with
python3-jsonschema: Debian's package, for /usr/bin/python3; scripts/setup.sh installs it).

Each document names its schema in its "schema" field ("ncclwatch.report/1"); the schema is the file of
docs/schemas/ whose "title" is that name, so a new schema needs no change here. Schemas refer to each other
(common.schema.json) by relative $ref, resolved among the files of docs/schemas/.

usage: validate_json.py FILE...        every FILE must parse and name a schema that exists, and follow it
       validate_json.py --scan DIR...  every *.json under each DIR that is an object naming an "ncclwatch.*"
                                       schema, as above; other JSON files are left alone, files that do not
                                       parse fail (our tools write whole files)
       validate_json.py --self-test    the schemas are valid, and documents that break them fail
       validate_json.py --fields FORMAT_FIELDS_H
                                       common.schema.json's header, comm, sig and record name every field of the
                                       lists in include/ncclwatch/format_fields.h as report_json.cpp shows it
Exit status: 0 all valid, 1 a document failed (each error printed: FILE: JSON path: message), 2 usage or setup.
"""
import copy
import glob
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SCHEMAS = os.path.normpath(os.path.join(HERE, "..", "..", "docs", "schemas"))

try:
    import jsonschema
except ImportError:
    print("validate_json.py: the jsonschema module is missing (Debian's python3-jsonschema, for /usr/bin/python3; "
          "scripts/setup.sh installs it)", file=sys.stderr)
    sys.exit(2)


def load_schemas():
    """{title: schema} and {$id: schema} of every docs/schemas/*.schema.json."""
    by_title, by_id = {}, {}
    for path in sorted(glob.glob(os.path.join(SCHEMAS, "*.schema.json"))):
        with open(path) as f:
            s = json.load(f)
        jsonschema.Draft202012Validator.check_schema(s)
        by_title[s["title"]] = (s, os.path.basename(path))
        by_id[s["$id"]] = s
    return by_title, by_id


BY_TITLE, BY_ID = load_schemas()


def errors_of(doc):
    """The errors of one parsed document, as (JSON path, message), [] when it is valid."""
    if not isinstance(doc, dict):
        return [("$", "not a JSON object")]
    name = doc.get("schema")
    if not isinstance(name, str):
        return [("$", 'no "schema" field naming the document\'s schema')]
    if name not in BY_TITLE:
        known = ", ".join(sorted(t for t in BY_TITLE if "/" in t))
        return [("$.schema", f"{name!r} names no schema in docs/schemas/ (known: {known})")]
    schema, _ = BY_TITLE[name]
    resolver = jsonschema.RefResolver.from_schema(schema, store=BY_ID)
    validator = jsonschema.Draft202012Validator(schema, resolver=resolver)
    out = []
    for e in sorted(validator.iter_errors(doc), key=lambda e: list(map(str, e.absolute_path))):
        path = "$" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in e.absolute_path)
        out.append((path, e.message[:300]))
    return out


def check_file(path, scan=False):
    """True when the file is valid (or, scanning, not one of ours); prints each error."""
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except (OSError, ValueError) as e:
        print(f"{path}: does not parse as JSON: {e}", file=sys.stderr)
        return False
    if scan and not (isinstance(doc, dict) and str(doc.get("schema", "")).startswith("ncclwatch.")):
        return True
    errs = errors_of(doc)
    for where, msg in errs[:20]:
        print(f"{path}: {where}: {msg}", file=sys.stderr)
    if len(errs) > 20:
        print(f"{path}: ... {len(errs) - 20} more errors", file=sys.stderr)
    if errs:
        print(f"{path}: does not follow {BY_TITLE.get(doc.get('schema'), (None, '?'))[1]} "
              f"({len(errs)} error{'s' if len(errs) != 1 else ''})", file=sys.stderr)
    return not errs


def self_test():
    """Minimal documents of each schema pass; each one broken in one way fails."""
    version = "0.1.0 (1a2b3c4)"
    process = {"global_rank": 0, "local_rank": 0, "world_size": 2, "host": "h", "pid": 7, "job_id": "j",
               "launcher": "torchrun", "rank_file": "/tmp/x.ncw"}
    op = {"seq": 3, "op": "AllReduce", "dtype": "float32", "count": 4, "redop": "sum", "root": None, "stream": "0x0",
          "tid": 7, "t_issue_ns": 1, "description": "AllReduce #3"}
    verdict = {"kind": "NOT_JOINED", "job_id": "j", "comm_id": "0x" + "0" * 15 + "1", "role": "none",
               "caused_by_comm": None, "seq": 3, "culprits": [1], "waiting": [0], "missing": [], "op": op,
               "stalled_for_s": 1.5, "summary": "s", "evidence": ["e"], "suspected": False, "headline": "h"}
    stall = {"type": "stall", "time": "2026-12-01T18:23:56.609+00:00", "comm_id": verdict["comm_id"],
             "no_comm_slot": False, "waiting_in_seq": 3, "stalled_for_s": 1.5, "completion_poller_stuck": False,
             "suspected_at_s": None, "missing_ranks": [], "verdicts": [verdict], "collector_verdict": None}
    report = {"schema": "ncclwatch.report/1", "ncclwatch_version": version, "process": process, "events": [stall]}
    live = {"schema": "ncclwatch.live/1", "ncclwatch_version": version, "job_id": "j",
            "time": "2026-12-01T18:23:56.609-05:30", "timeout_s": 5, "dead_after_s": 5, "verdicts": [verdict],
            "ranks": [], "comms": [], "warnings": []}
    good = [report, live]
    bad = [
        ("an undocumented top-level key", lambda d: d.update(extra=1), report),
        ("an undocumented key in a verdict", lambda d: d["events"][0]["verdicts"][0].update(extra=1), report),
        ("an undocumented key in an event", lambda d: d["events"][0].update(extra=1), report),
        ("a required key gone", lambda d: d["events"][0].pop("waiting_in_seq"), report),
        ("an unknown event type", lambda d: d["events"][0].update(type="nap"), report),
        ("a time without its zone", lambda d: d["events"][0].update(time="2026-12-01 18:23:56.609"), report),
        ("a time with the old format", lambda d: d.update(time="2026-12-01 18:23:56.609 +0000"), live),
        ("a number as a string", lambda d: d["events"][0].update(stalled_for_s="1.5"), report),
        ("an unknown verdict kind", lambda d: d["verdicts"][0].update(kind="NAP"), live),
        ("no version", lambda d: d.pop("ncclwatch_version"), live),
        ("an unknown schema", lambda d: d.update(schema="ncclwatch.nap/1"), live),
        ("no schema field", lambda d: d.pop("schema"), live),
    ]
    failed = False
    for d in good:
        for where, msg in errors_of(d):
            print(f"self-test: a valid {d['schema']} document fails: {where}: {msg}", file=sys.stderr)
            failed = True
    for what, change, base in bad:
        d = copy.deepcopy(base)
        change(d)
        if not errors_of(d):
            print(f"self-test: {base['schema']} with {what} passes", file=sys.stderr)
            failed = True
    # Every schema but the shared one is named by some document, and each title is a schema name.
    for title, (s, fname) in BY_TITLE.items():
        if title != "ncclwatch.common" and fname != title.split(".", 1)[1].split("/")[0] + ".schema.json":
            print(f"self-test: {fname}: its title {title!r} does not match its file name", file=sys.stderr)
            failed = True
    if not failed:
        print(f"ok: {len(BY_TITLE)} schemas valid; {len(good)} documents pass, {len(bad)} broken ones fail")
    return 1 if failed else 0


# format_fields.h: which lists make each shape, and the keys report_json.cpp adds of its own.
SHAPES = {
    "header": (["NCW_HEADER_LAYOUT_FIELDS", "NCW_HEADER_WRITER_FIELDS", "NCW_HEADER_LIVE_FIELDS",
                "NCW_HEADER_PY_STACKS_FIELDS", "NCW_HEADER_TAIL_FIELDS", "NCW_HEADER_PY_HELD_FIELDS",
                "NCW_HEADER_LAST_WORDS_FIELDS", "NCW_HEADER_TEARDOWN_FIELDS",
                "NCW_HEADER_END_CAUSE_FIELDS", "NCW_HEADER_ABSORBED_FIELDS", "NCW_HEADER_NOTES_FIELDS"],
               {"format", "actual_size", "heartbeat_ms", "py_stacks_ms", "py_held_ms"}),
    "comm": (["NCW_COMM_FIELDS_1_5", "NCW_COMM_FIELDS_1_6"], {"slot", "recent"}),
    "sig": (["NCW_SIG_FIELDS_1_9", "NCW_SIG_FIELDS_1_10"], set()),
    "record": (["NCW_RECORD_FIELDS"], {"ticket", "backtrace"}),
}


def ms_key(name):
    """report_json.cpp's key of a mono field: t_init_start_ns -> init_start_ms."""
    if name.startswith("t_"):
        name = name[2:]
    if name.endswith("_ns"):
        name = name[:-3]
    return name + "_ms"


def check_fields(header_path):
    import re
    text = open(header_path).read()
    common = BY_TITLE["ncclwatch.common"][0]["$defs"]
    failed = False
    for shape, (lists, extra) in SHAPES.items():
        want = set(extra)
        for lst in lists:
            m = re.search(r"#define " + lst + r"\(X\)(.*?)(?:\n\n|\n#|\n//)", text, re.S)
            if not m:
                print(f"{header_path}: no {lst}", file=sys.stderr)
                return 1
            for _, name, show in re.findall(r"X\(\s*(\w+)\s*,\s*(\w+)\s*,\s*[^,]+,\s*(\w+)", m.group(1)):
                if show != "hidden":
                    want.add(ms_key(name) if show == "mono" else name)
        have = set(common[shape]["properties"])
        for k in sorted(want - have):
            print(f"common.schema.json: $defs.{shape} lacks {k!r} (format_fields.h shows it)", file=sys.stderr)
            failed = True
        for k in sorted(have - want):
            print(f"common.schema.json: $defs.{shape} has {k!r}, which format_fields.h does not show", file=sys.stderr)
            failed = True
    if not failed:
        print("ok: the schema's header, comm, sig and record are format_fields.h's fields")
    return 1 if failed else 0


def main(argv):
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    if argv[0] == "--self-test":
        return self_test()
    if argv[0] == "--fields" and len(argv) == 2:
        return check_fields(argv[1])
    ok = True
    if argv[0] == "--scan":
        n = 0
        for d in argv[1:]:
            for path in sorted(glob.glob(os.path.join(d, "**", "*.json"), recursive=True)):
                n += 1
                ok = check_file(path, scan=True) and ok
        return 0 if ok else 1
    for path in argv:
        ok = check_file(path) and ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
