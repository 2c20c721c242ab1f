#!/usr/bin/env python3
"""Keeps the includes pointing one way: include/ncclwatch <- lib/read <- lib/engine <- lib/report <- lib/live <- the
collector (collector/) and the shim (shim/), and inside the shim its rooms in the order of the data flow:

  include/ncclwatch/  includes only "ncclwatch/..."
  lib/read/           "ncclwatch/...", "read/..."
  lib/engine/         + "engine/..."
  lib/report/         + "report/..."
  lib/live/           + "live/..."
  collector/          "ncclwatch/...", any lib folder, and its own headers by bare name
  shim/<room>/        "ncclwatch/...", any lib folder, and "shim/<room>/..." of its own room or one below it:
                      base <- record <- complete <- watch <- live <- start <- intercept

Code in lib/, include/ and shim/ names the folder of every header it includes ("engine/verdict.h",
"shim/record/recorder.h", never "verdict.h"), and nothing names a path with "..". A file directly in shim/ or in a
folder of shim/ or lib/ that is no room or layer is refused. Angle-bracket includes are checked only when they name
one of these folders.

  scripts/check_includes.py [SOURCE_ROOT]   exit 0: clean; 1: violations, one line each (file:line: why)
  scripts/check_includes.py --self-test     plants violations in a scratch tree and checks that each is caught
"""
import os
import re
import sys
import tempfile

LAYERS = ["read", "engine", "report", "live"]  # lib/, bottom to top
ROOMS = ["base", "record", "complete", "watch", "live", "start", "intercept"]  # shim/, bottom to top
# Folder scanned -> the include folders it may name (its own bare headers aside). A shim room's entries are
# "shim/<room>" prefixes.
ALLOWED = {"include/ncclwatch": {"ncclwatch"}}
for i, layer in enumerate(LAYERS):
    ALLOWED["lib/" + layer] = {"ncclwatch", *LAYERS[: i + 1]}
ALLOWED["collector"] = {"ncclwatch", *LAYERS}
for i, room in enumerate(ROOMS):
    ALLOWED["shim/" + room] = {"ncclwatch", *LAYERS, *("shim/" + r for r in ROOMS[: i + 1])}
BARE_OWN = {"collector"}  # may include its own headers by bare name
OURS = {"ncclwatch", *LAYERS, "lib", "include", "collector", "shim"}
SOURCE_EXT = (".h", ".hpp", ".cpp", ".cc", ".c")
INCLUDE_RE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]')


def header_exists(root, name):
    top = name.split("/", 1)[0]
    if top == "shim":
        return os.path.isfile(os.path.join(root, name))
    base = os.path.join(root, "include") if top == "ncclwatch" else os.path.join(root, "lib")
    return os.path.isfile(os.path.join(base, name))


def folder_of(name):
    """The include folder an include names: "shim/<room>" for the shim's, else its first part."""
    parts = name.split("/")
    if parts[0] == "shim":
        return "/".join(parts[:2]) if len(parts) > 2 else "shim"
    return parts[0]


def order_words(folder):
    if folder.startswith("shim/"):
        return "the shim's rooms, bottom to top: " + " <- ".join(ROOMS)
    return "allowed: " + ", ".join(sorted(ALLOWED[folder]))


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
                elif folder.startswith("shim/"):
                    problems.append(f'{where}: "{name}": name the room ("shim/record/...", "read/...")')
                else:
                    problems.append(f'{where}: "{name}": name the folder ("read/...", "ncclwatch/...")')
                continue
            top = folder_of(name)
            if top not in ALLOWED[folder]:
                known = top in LAYERS or top == "ncclwatch" or top in ("shim/" + r for r in ROOMS)
                if known:
                    problems.append(f'{where}: "{name}": {folder}/ may not include {top}/ ({order_words(folder)})')
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
    # Folders that are no layer or room escape the rules: refuse them, and code outside the shim's rooms.
    for top, known in (("lib", LAYERS), ("shim", ROOMS)):
        d = os.path.join(root, top)
        if not os.path.isdir(d):
            continue
        for entry in sorted(os.listdir(d)):
            p = os.path.join(d, entry)
            if os.path.isdir(p) and entry not in known:
                what = "layer" if top == "lib" else "room"
                problems.append(f"{top}/{entry}/: not a known {what}; add it to scripts/check_includes.py")
            elif top == "shim" and os.path.isfile(p) and entry.endswith(SOURCE_EXT):
                problems.append(f"shim/{entry}: code outside the shim's rooms ({', '.join(ROOMS)})")
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
        "shim/base/log.h": "#pragma once\n",
        "shim/record/recorder.h": '#include "shim/base/log.h"\n#include "ncclwatch/format.h"\n',
        "shim/watch/watchdog.cpp": '#include "shim/base/log.h"\n#include "shim/record/recorder.h"\n'
                                   '#include "engine/verdict.h"\n',
        "shim/live/digest_client.cpp": '#include "live/live_server.h"\n#include "shim/watch/watchdog.h"\n',
        "shim/watch/watchdog.h": "#pragma once\n",
    }
    bad = [
        ("lib/read/rank_file.cpp", '#include "engine/verdict.h"\n'),  # reader knows the engine
        ("lib/engine/cascade.cpp", '#include "report/report_json.h"\n'),  # engine knows a renderer
        ("lib/report/metrics.cpp", '#include "live/live_server.h"\n'),  # renderer knows the server
        ("lib/engine/job_view.cpp", '#include "verdict.h"\n'),  # bare name in lib/
        ("include/ncclwatch/wire.h", '#include "read/rank_file.h"\n'),  # include/ reaching into lib/
        ("lib/live/x.cpp", '#include "../../shim/base/log.h"\n'),  # lib/ reaching into the shim
        ("lib/report/y.cpp", '#include <engine/verdict.h>\n#include "shim/base/log.h"\n'),  # a shim header in lib/
        ("shim/live/z.cpp", '#include "live_server.h"\n'),  # bare name in the shim
        ("shim/record/ring.cpp", '#include "shim/watch/watchdog.h"\n'),  # an arrow back up the rooms
        ("shim/base/clock.cpp", '#include "shim/record/recorder.h"\n'),  # base knows the recorder
        ("shim/stray.cpp", '#include "shim/base/log.h"\n'),  # code outside the rooms
        ("collector/cmd_y.cpp", '#include "shim/base/log.h"\n'),  # the collector reaching into the shim
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
            if not any(g.startswith(rel) for g in got):
                print(f"self-test: not caught: {rel}: {text.strip()}")
                failures += 1
            if before:
                write(root, rel, clean[rel])
            else:
                os.remove(os.path.join(root, rel))
        for top in ("lib/util", "shim/misc"):
            os.makedirs(os.path.join(root, top))
            if not any(g.startswith(top + "/") for g in check_tree(root)):
                print(f"self-test: an unknown folder {top}/ is not caught")
                failures += 1
            os.rmdir(os.path.join(root, top))
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
