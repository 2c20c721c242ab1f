#!/usr/bin/env python3
"""docs/monitoring/ against the live collector's metrics (meson test 'monitoring').

  check_monitoring.py SOURCE_ROOT [--promtool PATH]

1. `promtool check rules` and `promtool test rules` on docs/monitoring/alerts.yml and alerts_test.yml;
2. every PromQL expression of docs/monitoring/grafana-dashboard.json parses (`promtool check rules` on them as
   recording rules, Grafana's $variables replaced);
3. every ncclwatch_* name that the alerts, their tests, the dashboard and the docs use is one that
   lib/report/metrics.cpp writes (a family typed Counter is written NAME_total, Info NAME_info).
Exit 77 (skipped) without promtool for 1 and 2; 3 runs anyway.
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile


def written_names(metrics_cpp):
    src = open(metrics_cpp).read()
    names = set()
    for name, kind in re.findall(r'"(ncclwatch_[a-z0-9_]+)",\s*Type::(Gauge|Counter|Info)', src):
        names.add(name + {"Gauge": "", "Counter": "_total", "Info": "_info"}[kind])
    return names


def dashboard_exprs(dash):
    out = []
    for p in dash.get("panels", []):
        for t in p.get("targets", []):
            if t.get("expr"):
                out.append((p.get("title", "?"), t["expr"]))
    return out


def main():
    args = sys.argv[1:]
    if not args:
        print(__doc__)
        return 2
    root = args[0]
    promtool = args[args.index("--promtool") + 1] if "--promtool" in args else shutil.which("promtool")
    mon = os.path.join(root, "docs", "monitoring")
    problems = []

    names = written_names(os.path.join(root, "lib", "report", "metrics.cpp"))
    if len(names) < 10:
        problems.append("lib/report/metrics.cpp: found only %d metric names (the pattern no longer matches?)" % len(names))
    dash = json.load(open(os.path.join(mon, "grafana-dashboard.json")))
    users = ["alerts.yml", "alerts_test.yml", "grafana-dashboard.json", "README.md"]
    extra = [os.path.join(root, p) for p in ("README.md", "docs/ARCHITECTURE.md")]
    for path in [os.path.join(mon, u) for u in users] + extra:
        text = open(path).read()
        for used in sorted(set(re.findall(r"\bncclwatch_[a-z0-9_]*[a-z0-9]\b", text))):
            # Names of things that are not metrics: the project's own words.
            if used in ("ncclwatch_version", "ncclwatch_note_exception") or used.startswith("ncclwatch_collector_") and used + "_total" in names:
                continue
            if used not in names:
                problems.append("%s: %s is not a metric the collector writes" % (os.path.relpath(path, root), used))
    if problems:
        print("\n".join(problems))
        return 1
    print("names: %d used across %s, all written by lib/report/metrics.cpp" % (len(names), ", ".join(users)))

    if not promtool:
        print("SKIP: promtool not installed (Debian's prometheus package)")
        return 77
    for cmd in (["check", "rules", "alerts.yml"], ["test", "rules", "alerts_test.yml"]):
        r = subprocess.run([promtool] + cmd, cwd=mon, capture_output=True, text=True)
        print("promtool %s: exit %d" % (" ".join(cmd), r.returncode))
        if r.returncode != 0:
            print(r.stdout + r.stderr)
            return 1
    with tempfile.TemporaryDirectory() as tmp:
        rules = ["groups:", "  - name: dashboard", "    rules:"]
        for i, (title, expr) in enumerate(dashboard_exprs(dash)):
            e = expr.replace("$__rate_interval", "5m").replace("$job_id", ".*")
            rules += ["      - record: dashboard:panel_%d" % i, "        expr: %s" % json.dumps(e)]
        path = os.path.join(tmp, "dashboard_rules.yml")
        open(path, "w").write("\n".join(rules) + "\n")
        r = subprocess.run([promtool, "check", "rules", path], capture_output=True, text=True)
        print("promtool check rules (the dashboard's %d expressions): exit %d" % (len(dashboard_exprs(dash)), r.returncode))
        if r.returncode != 0:
            print(r.stdout + r.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
