#!/usr/bin/env python3
"""Validates the shipped Grafana dashboards without Grafana: structure (uids, unique panel ids,
grid, every panel and query on the ${datasource} variable, defined variables), that the JSON is
what dashboards/grafana/generate.py writes, and that every query, variables substituted, is
PromQL that Prometheus parses (promtool check rules on a scratch rule file).
Usage: validate_dashboards.py [DASHBOARD_DIR]"""
import os
import subprocess
import sys
import tempfile

import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dashboards as dash  # noqa: E402

INTERVALS = {"__rate_interval": "1m", "__interval": "15s", "__range": "6h", "__range_s": "21600",
             "__interval_ms": "15000"}


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    directory = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "../../dashboards/grafana")
    boards = dash.load(directory)
    problems = []
    if len(boards) < 4:
        problems.append(f"expected the 4 ibprobe dashboards in {directory}, found {sorted(boards)}")
    problems += dash.validate(boards)

    with tempfile.TemporaryDirectory() as tmp:
        generator = os.path.join(directory, "generate.py")
        subprocess.run([sys.executable, generator, tmp], check=True)
        for name in sorted(set(os.listdir(tmp)) | set(boards)):
            if not name.endswith(".json"):
                continue
            shipped = os.path.join(directory, name)
            fresh = os.path.join(tmp, name)
            if not os.path.exists(fresh) or not os.path.exists(shipped) or \
                    open(fresh).read() != open(shipped).read():
                problems.append(f"{name}: differs from what generate.py writes (run it and commit)")

        rules = [{"record": f"dashboard_query_{i}", "expr": dash.substitute(expr, {}, INTERVALS)}
                 for i, (_, _, _, expr, _) in enumerate(dash.queries(boards))]
        rule_file = os.path.join(tmp, "queries.rules.yml")
        with open(rule_file, "w") as f:
            yaml.safe_dump({"groups": [{"name": "dashboard-queries", "rules": rules}]}, f)
        check = subprocess.run(["promtool", "check", "rules", rule_file],
                               capture_output=True, text=True)
        if check.returncode != 0:
            problems.append("promtool cannot parse dashboard queries:\n" + check.stdout +
                            check.stderr)

    for p in problems:
        print("FAIL", p)
    if problems:
        return 1
    n_panels = sum(1 for d in boards.values() for p in dash.panels(d) if p.get("type") != "row")
    print(f"dashboards: {len(boards)} files, {n_panels} panels, {len(rules)} queries: "
          "structure valid, generated, every query parses")
    return 0


if __name__ == "__main__":
    sys.exit(main())
