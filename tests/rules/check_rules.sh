#!/usr/bin/env bash
# The shipped Prometheus rules: promtool check rules; promtool test rules with the unit tests
# beside this script (every alert must have a test where it fires and one where it does not);
# and every alert's annotations: a summary, a description, and a runbook that names a probe and
# shows the one-line command that triggers it.
# Usage: check_rules.sh [RULES_DIR]   (default: dashboards/prometheus of this tree)
set -euo pipefail

here=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)
rules_dir=${1:-$here/../../dashboards/prometheus}
# shellcheck source=tests/lib/scratch.sh
source "$here/../lib/scratch.sh"
scratch_begin ibprobe-rules

rule_files=("$rules_dir"/*.rules.yml)
((${#rule_files[@]} >= 2)) || { echo "FAIL: no rule files in $rules_dir" >&2; exit 1; }

promtool check rules "${rule_files[@]}"

# promtool compares the annotations of a firing alert verbatim; the unit tests are about when
# alerts fire and with which labels, so they run against a copy without annotations.
python3 - "$work" "${rule_files[@]}" <<'PY'
import os, sys, yaml
out = sys.argv[1]
for path in sys.argv[2:]:
    doc = yaml.safe_load(open(path))
    for group in doc["groups"]:
        for rule in group["rules"]:
            rule.pop("annotations", None)
    with open(os.path.join(out, os.path.basename(path)), "w") as f:
        yaml.safe_dump(doc, f, sort_keys=False)
PY
test_files=("$here"/*.test.yml)
cp "${test_files[@]}" "$work/"
for test_file in "${test_files[@]}"; do
  promtool test rules "$work/$(basename "$test_file")"
done

# The test files, colon-separated, then the rule files.
python3 - "$(IFS=:; echo "${test_files[*]}")" "${rule_files[@]}" <<'PY'
import re, sys, yaml
tests = [t for path in sys.argv[1].split(":") for t in yaml.safe_load(open(path))["tests"]]
alerts = []
for path in sys.argv[2:]:
    for group in yaml.safe_load(open(path))["groups"]:
        alerts += [r for r in group["rules"] if "alert" in r]
problems = []

fires, quiet = set(), set()
for test in tests:
    for case in test.get("alert_rule_test", []):
        (fires if case.get("exp_alerts") else quiet).add(case["alertname"])
names = [a["alert"] for a in alerts]
if len(set(names)) != len(names):
    problems.append("duplicate alert names")
for name in names:
    if name not in fires:
        problems.append(f"{name}: no unit test where it fires")
    if name not in quiet:
        problems.append(f"{name}: no unit test where it stays quiet")
for name in (fires | quiet) - set(names):
    problems.append(f"{name}: tested but not defined")

modules = "write_bw|write_lat|read_bw|read_lat|send_bw|send_lat"
# The one-line command: POST a run, then wait for its result on the same exporter.
command = re.compile(
    r"^id=\$\(curl -s -XPOST http://(?P<host>"
    # The alert's exporter: its instance, with :9470 where the instance has no port.
    r"""\{\{ reReplaceAll "\^\(\[\^:\]\+\)\$" "\$\{1\}:9470" \$labels\.instance \}\}"""
    r"|\{\{ \$watcher \}\}:9470|[\w.-]+:9470)/api/v1/probes -d "
    r"""'\{"target":"[^"']+","module":"(?P<module>""" + modules + r"""|\{\{ \$labels\.module \}\})"\}' """
    r"\| jq -r \.id\) && curl -s \"http://(?P=host)/api/v1/probes/\$id\?wait=\d+s\"$",
    re.M)
for alert in alerts:
    name, ann = alert["alert"], alert.get("annotations", {})
    for key in ("summary", "description", "runbook"):
        if not ann.get(key, "").strip():
            problems.append(f"{name}: no {key} annotation")
    runbook = ann.get("runbook", "")
    match = command.search(runbook)
    if not match:
        problems.append(f"{name}: runbook has no one-line probe command")
    elif match["module"] not in runbook.replace(match.group(0), ""):
        if not match["module"].startswith("{{"):
            problems.append(f"{name}: runbook does not say in words which probe ({match['module']}) to run")
    if alert.get("labels", {}).get("severity") not in ("critical", "warning", "info"):
        problems.append(f"{name}: severity label missing or unknown")

for p in problems:
    print("FAIL", p)
if problems:
    sys.exit(1)
print(f"rules: {len(alerts)} alerts, each tested firing and quiet, each runbook with its probe command")
PY
