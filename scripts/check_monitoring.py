#!/usr/bin/env python3
"""docs/monitoring/ against the live collector's metrics (meson test 'monitoring').

  check_monitoring.py SOURCE_ROOT [--promtool PATH]

1. `promtool check rules` and `promtool test rules` on docs/monitoring/alerts.yml and alerts_test.yml;
2. every PromQL expression of docs/monitoring/grafana-dashboard.json parses (`promtool check rules` on them as
   recording rules, Grafana's $variables replaced);
3. every ncclwatch_* name that the alerts, their tests, the dashboard and the docs use is one that
   lib/report/metrics.cpp writes (a family typed Counter is written NAME_total, Info NAME_info), and every label the
   alerts, their tests' input series and the dashboard use (in by/on/group_left, matchers, $labels.X, {{X}}) is one
   it writes (or Prometheus's own: instance, job);
4. the dashboard's dcgm-exporter join on its real query, under `promtool test rules`: a rank's GPU found by UUID,
   and by Hostname and pci_bus_id where the UUID meets none (an old shim without one, MIG).
Exit 77 (skipped) without promtool for 1, 2 and 4; 3 runs anyway.
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


def written_labels(metrics_cpp):
    """The label names lib/report/metrics.cpp writes: NAME="{}" (or NAME=\\"{}\\") in its format strings."""
    src = open(metrics_cpp).read()
    return set(re.findall(r'\b([A-Za-z_][A-Za-z0-9_]*)=\\?"(?:0x)?\{', src))


# Labels a query may use that the collector does not write: the scrape's target labels, and an alert rule's own.
OWN_LABELS = {"instance", "job", "alertname", "severity", "__name__"}


def used_labels(text, legend=False):
    """Label names a PromQL expression or an annotation uses: grouping and matching lists, selectors' matchers and
    $labels.X; in a Grafana legend, {{X}}."""
    used = set()
    for group in re.findall(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^()]*)\)", text):
        used.update(x.strip() for x in group.split(",") if x.strip())
    for sel in re.findall(r"\{([^{}]*)\}", text):
        used.update(re.findall(r"([A-Za-z_][A-Za-z0-9_]*)\s*(?:=~|!~|!=|=)\s*\"", sel))
    used.update(re.findall(r"\$labels\.([A-Za-z_][A-Za-z0-9_]*)", text))
    if legend:
        used.update(re.findall(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}", text))
    return used


def label_problems(root, mon, dash, labels):
    problems = []
    rules = "\n".join(l for l in open(os.path.join(mon, "alerts.yml")).read().splitlines()
                      if not l.lstrip().startswith("#"))
    tests = open(os.path.join(mon, "alerts_test.yml")).read()
    series = "\n".join(re.findall(r"series:\s*'([^']*)'", tests))
    checked = [("alerts.yml", rules, False), ("alerts_test.yml (input series)", series, False)]
    checked += [("grafana-dashboard.json (%s)" % title, expr, False) for title, expr in dashboard_exprs(dash)]
    checked += [("grafana-dashboard.json (%s, legend)" % p.get("title", "?"), t.get("legendFormat", ""), True)
                for p in dash.get("panels", []) for t in p.get("targets", [])]
    for where, text, legend in checked:
        for label in sorted(used_labels(text, legend) - labels - OWN_LABELS):
            problems.append("%s: label %s is not one lib/report/metrics.cpp writes" % (where, label))
    return problems


# The dashboard's GPU panel joins dcgm-exporter's series: rank 0 by its UUID (dcgm-exporter's Hostname differs: a
# Kubernetes node name), rank 1 without a UUID (a shim of format 1.5) and rank 2 whose UUID meets none (MIG) by
# Hostname and pci_bus_id. Each rank once, with its own GPU's utilization.
DCGM_JOIN_TEST = """rule_files: []
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:
      - series: 'ncclwatch_alive{job_id="t",rank="0",Hostname="node-a",comm="0x00000000000000aa",comm_rank="0",pci_bus_id="00000000:0D:00.0",UUID="GPU-aaaa"}'
        values: '1 1'
      - series: 'ncclwatch_alive{job_id="t",rank="1",Hostname="node-b",comm="0x00000000000000aa",comm_rank="1",pci_bus_id="00000000:0D:00.0"}'
        values: '1 1'
      - series: 'ncclwatch_alive{job_id="t",rank="2",Hostname="node-c",comm="0x00000000000000aa",comm_rank="2",pci_bus_id="00000000:B4:00.0",UUID="MIG-cccc"}'
        values: '1 1'
      - series: 'DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-aaaa",Hostname="k8s-node-a",pci_bus_id="00000000:0D:00.0"}'
        values: '50 50'
      - series: 'DCGM_FI_DEV_GPU_UTIL{gpu="3",UUID="GPU-bbbb",Hostname="node-b",pci_bus_id="00000000:0D:00.0"}'
        values: '70 70'
      - series: 'DCGM_FI_DEV_GPU_UTIL{gpu="1",UUID="GPU-cccc",Hostname="node-c",pci_bus_id="00000000:B4:00.0"}'
        values: '90 90'
      - series: 'DCGM_FI_DEV_GPU_UTIL{gpu="2",UUID="GPU-dddd",Hostname="node-c",pci_bus_id="00000000:0D:00.0"}'
        values: '10 10'
    promql_expr_test:
      - expr: %s
        eval_time: 1m
        exp_samples:
          - labels: '{job_id="t",rank="0",Hostname="node-a",UUID="GPU-aaaa",pci_bus_id="00000000:0D:00.0"}'
            value: 50
          - labels: '{job_id="t",rank="1",Hostname="node-b",pci_bus_id="00000000:0D:00.0"}'
            value: 70
          - labels: '{job_id="t",rank="2",Hostname="node-c",UUID="MIG-cccc",pci_bus_id="00000000:B4:00.0"}'
            value: 90
"""


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
            if used in ("ncclwatch_version", "ncclwatch_note_exception", "ncclwatch_note_torch_timeout",
                        "ncclwatch_torch_timeout") or used.startswith("ncclwatch_collector_") and used + "_total" in names:
                continue
            if used not in names:
                problems.append("%s: %s is not a metric the collector writes" % (os.path.relpath(path, root), used))
    labels = written_labels(os.path.join(root, "lib", "report", "metrics.cpp"))
    if not {"job_id", "rank", "Hostname", "comm", "UUID", "pci_bus_id", "culprit_rank"} <= labels:
        problems.append("lib/report/metrics.cpp: found only labels %s (the pattern no longer matches?)" % sorted(labels))
    problems += label_problems(root, mon, dash, labels)
    if problems:
        print("\n".join(problems))
        return 1
    print("names: %d used across %s, all written by lib/report/metrics.cpp; labels: all %d written or Prometheus's"
          % (len(names), ", ".join(users), len(labels)))

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
        gpu = [expr for _, expr in dashboard_exprs(dash) if "DCGM_FI_DEV_GPU_UTIL" in expr]
        if len(gpu) != 1:
            print("grafana-dashboard.json: want one query joining DCGM_FI_DEV_GPU_UTIL, found %d" % len(gpu))
            return 1
        path = os.path.join(tmp, "dcgm_join_test.yml")
        open(path, "w").write(DCGM_JOIN_TEST % json.dumps(gpu[0].replace("$job_id", ".*")))
        r = subprocess.run([promtool, "test", "rules", path], capture_output=True, text=True)
        print("promtool test rules (the dashboard's dcgm-exporter join: by UUID, else Hostname and pci_bus_id): exit %d"
              % r.returncode)
        if r.returncode != 0:
            print(r.stdout + r.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
