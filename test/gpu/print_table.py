#!/usr/bin/env python3
"""Prints the rows that test/gpu/run.sh's checkers wrote (ROWS_DIR/*.json, in name order) as one Markdown table.

    print_table.py ROWS_DIR [--out FILE]

Columns: case, expected, got, named rank, seconds to verdict, evidence after kill, what PyTorch's Flight Recorder
said, what NCCL RAS said, pass/fail. Ends with the plain 'N passed, N failed' line.
"""
import glob
import json
import os
import sys


def cell(x):
    return str(x if x is not None else "").replace("|", "\\|").replace("\n", " ")


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    rows = []
    for f in sorted(glob.glob(os.path.join(sys.argv[1], "*.json"))):
        try:
            with open(f) as fh:
                rows.append(json.load(fh))
        except (OSError, ValueError) as e:
            rows.append({"case": os.path.basename(f), "got": f"unreadable row: {e}", "pass": False})
    head = ["case", "expected", "got", "named rank", "s to verdict", "after kill", "FR said", "RAS said", "result"]
    keys = ["case", "expected", "got", "rank", "secs", "after_kill", "fr", "ras"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        res = "info" if r.get("pass") is None else ("PASS" if r["pass"] else "FAIL")
        lines.append("| " + " | ".join(cell(r.get(k)) for k in keys) + f" | {res} |")
    npass = sum(1 for r in rows if r.get("pass") is True)
    nfail = sum(1 for r in rows if r.get("pass") is False)
    lines.append("")
    for r in rows:
        for w in r.get("why") or []:
            lines.append(f"- {r['case']}: {w}")
    lines.append("")
    lines.append(f"{npass} passed, {nfail} failed")
    text = "\n".join(lines)
    print(text)
    if len(sys.argv) >= 4 and sys.argv[2] == "--out":
        with open(sys.argv[3], "w") as f:
            f.write(text + "\n")
    return 0 if nfail == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
