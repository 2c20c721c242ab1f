#!/usr/bin/env python3
"""Prints the rows that test/gpu/run.sh's checkers wrote (ROWS_DIR/*.json, in name order) as one Markdown table.

    print_table.py ROWS_DIR [--out FILE] [--max-cell N]

Columns: case, expected, got, named rank, seconds to verdict, evidence after kill, what PyTorch's Flight Recorder
said, what NCCL RAS said, pass/fail ("info": a measurement, or a budget the runs could not resolve). Ends with the
plain 'N passed, N failed' line. --out FILE gets the full table; with --max-cell, the table printed has each cell cut
to N characters (the device tool returns only the output's end).
"""
import glob
import json
import os
import sys


def cell(x, limit=0):
    s = str(x if x is not None else "").replace("|", "\\|").replace("\n", " ")
    return s[: limit - 1] + "~" if limit and len(s) > limit else s


def render(rows, limit):
    head = ["case", "expected", "got", "named rank", "s to verdict", "after kill", "FR said", "RAS said", "result"]
    keys = ["case", "expected", "got", "rank", "secs", "after_kill", "fr", "ras"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        res = "info" if r.get("pass") is None else ("PASS" if r["pass"] else "FAIL")
        lines.append("| " + " | ".join(cell(r.get(k), limit) for k in keys) + f" | {res} |")
    lines.append("")
    for r in rows:
        for w in r.get("why") or []:
            lines.append(cell(f"- {r.get('case')}: {w}", 2 * limit))
    npass = sum(1 for r in rows if r.get("pass") is True)
    nfail = sum(1 for r in rows if r.get("pass") is False)
    lines.append("")
    ninfo = sum(1 for r in rows if r.get("pass") is None)
    lines.append(f"{npass} passed, {nfail} failed" + (f", {ninfo} measured or not resolved" if ninfo else ""))
    return "\n".join(lines), nfail


def main():
    args = sys.argv[1:]
    if not args:
        print(__doc__)
        return 2
    out = args[args.index("--out") + 1] if "--out" in args else ""
    limit = int(args[args.index("--max-cell") + 1]) if "--max-cell" in args else 0
    rows = []
    for f in sorted(glob.glob(os.path.join(args[0], "*.json"))):
        try:
            with open(f) as fh:
                rows.append(json.load(fh))
        except (OSError, ValueError) as e:
            rows.append({"case": os.path.basename(f), "got": f"unreadable row: {e}", "pass": False})
    full, nfail = render(rows, 0)
    if out:
        with open(out, "w") as f:
            f.write(full + "\n")
    print(render(rows, limit)[0] if limit else full)
    return 0 if nfail == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
