#!/usr/bin/env python3
"""Keeps the includes pointing one way: include/ncclwatch <- lib/read <- lib/engine <- lib/report <- lib/live <- the
collector (collector/) and the shim (shim/).

  include/ncclwatch/  includes only "ncclwatch/..."
  lib/read/           "ncclwatch/...", "read/..."
  lib/engine/         + "engine/..."
  lib/report/         + "report/..."
  lib/live/           + "live/..."
  collector/, shim/   "ncclwatch/...", any lib folder, and their own headers by bare name

Code in lib/ and include/ names the folder of every header it includes ("engine/verdict.h", never "verdict.h"), and
nothing names a path with "..". Angle-bracket includes are checked only when they name one of these folders.

  scripts/check_includes.py [SOURCE_ROOT]   exit 0: clean; 1: violations, one line each (file:line: why)
  scripts/check_includes.py --self-test     plants violations in a scratch tree and checks that each is caught
"""
import os
import re
import sys
import tempfile

LAYERS = ["read", "engine", "report", "live"]  # bottom to top
# Folder scanned -> the include folders it may name (its own bare headers aside).
ALLOWED = {"include/ncclwatch": {"ncclwatch"}}
for i, layer in enumerate(LAYERS):
    ALLOWED["lib/" + layer] = {"ncclwatch", *LAYERS[: i + 1]}
for top in ("collector", "shim"):
    ALLOWED[top] = {"ncclwatch", *LAYERS}
BARE_OWN = {"collector", "shim"}  # may include their own headers by bare name
OURS = {"ncclwatch", *LAYERS, "lib", "include", "collector", "shim"}
SOURCE_EXT = (".h", ".hpp", ".cpp", ".cc", ".c")
INCLUDE_RE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]')


def header_exists(root, name):
    top = name.split("/", 1)[0]
    base = os.path.join(root, "include") if top == "ncclwatch" else os.path.join(root, "lib")
    return os.path.isfile(os.path.join(base, name))


def check_file(root, folder, path):
    problems = []
    own = set(os.listdir(os.path.join(root, folder)))
    with open(path, encoding="utf-8", errors="replace") as f:
        for lineno, line in enumerate(f, 1):
            m = INCLUDE_RE.match(line)
            if not m:
                continue
            quote, name = m.groups()
            where = f"{os.path.relpath(path, root)}:{lineno}"
            parts = name.split("/")
            if quote == "<" and parts[0] not in OURS:
                continue  # a system or third-party header
            if ".." in parts:
                problems.append(f'{where}: "{name}": no ".." in include paths; name the folder')
                continue
            if len(parts) == 1:
                if folder in BARE_OWN and name in own:
                    continue
                if folder in BARE_OWN:
                    problems.append(f'{where}: "{name}": not a header of {folder}/; lib headers are named by folder')
                else:
                    problems.append(f'{where}: "{name}": name the folder ("read/...", "ncclwatch/...")')
                continue
            top = parts[0]
            if top not in ALLOWED[folder]:
                if top in LAYERS or top == "ncclwatch":
                    problems.append(
                        f'{where}: "{name}": {folder}/ may not include {top}/ (allowed: '
                        f'{", ".join(sorted(ALLOWED[folder]))})')
                else:
                    problems.append(f'{where}: "{name}": {folder}/ may not include {top}/')
                continue
            if not header_exists(root, name):
                problems.append(f'{where}: "{name}": no such header')
    return problems


def check_tree(root):
    problems = []
    for folder in ALLOWED:
        d = os.path.join(root, folder)
        if not os.path.isdir(d):
            continue
        for entry in sorted(os.listdir(d)):
            p = os.path.join(d, entry)
            if os.path.isfile(p) and entry.endswith(SOURCE_EXT):
                problems += check_file(root, folder, p)
    # Folders of lib/ that are no layer escape the rules: refuse them.
    lib = os.path.join(root, "lib")
    if os.path.isdir(lib):
        for entry in sorted(os.listdir(lib)):
            if os.path.isdir(os.path.join(lib, entry)) and entry not in LAYERS:
                problems.append(f"lib/{entry}/: not a known layer; add it to scripts/check_includes.py")
    return problems


def self_test():
    def write(root, rel, text):
        p = os.path.join(root, rel)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "w") as f:
            f.write(text)

    clean = {
        "include/ncclwatch/format.h": "#include <cstdint>\n",
        "lib/read/rank_file.h": '#include "ncclwatch/format.h"\n#include <vector>\n',
        "lib/engine/verdict.h": '#include "read/rank_file.h"\n',
        "lib/report/report_json.h": '#include "engine/verdict.h"\n#include <nlohmann/json.hpp>\n',
        "lib/live/live_server.h": '#include "report/report_json.h"\n#include "read/rank_file.h"\n',
        "collector/cli.h": '#include "report/report_json.h"\n',
        "collector/main.cpp": '#include "cli.h"\n#include "live/live_server.h"\n',
        "shim/log.h": "#pragma once\n",
        "shim/watchdog.cpp": '#include "log.h"\n#include "engine/verdict.h"\n#include "ncclwatch/format.h"\n',
    }
    bad = [
        ("lib/read/rank_file.cpp", '#include "engine/verdict.h"\n'),  # reader knows the engine
        ("lib/engine/cascade.cpp", '#include "report/report_json.h"\n'),  # engine knows a renderer
        ("lib/report/metrics.cpp", '#include "live/live_server.h"\n'),  # renderer knows the server
        ("lib/engine/job_view.cpp", '#include "verdict.h"\n'),  # bare name in lib/
        ("include/ncclwatch/wire.h", '#include "read/rank_file.h"\n'),  # include/ reaching into lib/
        ("lib/live/x.cpp", '#include "../../shim/log.h"\n'),  # lib/ reaching into the shim
        ("lib/report/y.cpp", '#include <engine/verdict.h>\n#include "shim/log.h"\n'),  # allowed, then a shim header
        ("shim/digest_client.cpp", '#include "live_server.h"\n'),  # bare name of another folder's header
        ("collector/cmd_x.cpp", '#include "engine/no_such.h"\n'),  # a header that does not exist
    ]
    failures = 0
    with tempfile.TemporaryDirectory() as root:
        for rel, text in clean.items():
            write(root, rel, text)
        got = check_tree(root)
        if got:
            print("self-test: the clean tree is flagged:\n  " + "\n  ".join(got))
            failures += 1
        for rel, text in bad:
            before = os.path.exists(os.path.join(root, rel))
            write(root, rel, text)
            got = check_tree(root)
            if not any(g.startswith(rel + ":") for g in got):
                print(f"self-test: not caught: {rel}: {text.strip()}")
                failures += 1
            if before:
                write(root, rel, clean[rel])
            else:
                os.remove(os.path.join(root, rel))
        os.makedirs(os.path.join(root, "lib", "util"))
        if not any(g.startswith("lib/util/") for g in check_tree(root)):
            print("self-test: an unknown lib/ folder is not caught")
            failures += 1
    print("self-test: " + ("ok" if not failures else f"{failures} failure(s)"))
    return 1 if failures else 0


def main(argv):
    if len(argv) > 1 and argv[1] == "--self-test":
        return self_test()
    root = os.path.abspath(argv[1] if len(argv) > 1 else os.path.join(os.path.dirname(__file__), ".."))
    problems = check_tree(root)
    for p in problems:
        print(p)
    if problems:
        print(f"check_includes: {len(problems)} include(s) against the layering (see scripts/check_includes.py)")
        return 1
    print("check_includes: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
