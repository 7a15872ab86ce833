#!/usr/bin/env python3
"""Runs every shipped query against a live Prometheus.

  run_queries.py adapt-rules OUT_DIR RULE_FILE... --window 2m --for 5s
      Writes the rule files with every range selector set to --window and every `for` to --for,
      so alerts and recordings act within the minutes a test runs (the shipped files keep
      production windows).
  run_queries.py check --prometheus URL --dashboards DIR --rules RULE_FILE... [--fire SPEC]...
                       [--quiet SPEC]... [--wait SECONDS] [--vars NAME=VALUE]...
      Every dashboard query (variables substituted: intervals to test values, other variables
      ".*" or --vars) must succeed and return data, every query variable must have values,
      every recording rule must have series, every rule must evaluate without error, and every
      alert expression with its comparisons turned into `bool` comparisons must return data
      (every series and join it needs exists). --fire Alertname or Alertname{label="value",...}:
      that alert must fire, with a rendered runbook; --quiet SPEC: it must not.
      --empty-ok METRIC=REASON: queries of METRIC (panels and alert expressions) must succeed
      but may return nothing, for a family the test's devices cannot produce (REASON is
      printed).
      --needs-hardware FILE/TITLE=REASON: that panel (TITLE `*`: every panel of the dashboard
      FILE; `variable NAME`: a variable) may return nothing, for hardware the test lacks (REASON
      is printed); one whose every query returns data fails, so that the list stays true.
      --panel-empty-ok FILE/TITLE[/REF]=REASON: that panel (or its query REF alone) may return
      nothing (a fault the test does not cause; REASON is printed).
      --panels-only: recording rules and alert expressions need not return data (their rules
      must still load and evaluate).
"""
import argparse
import json
import os
import re
import sys
import time
import urllib.parse
import urllib.request

import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dashboards as dash  # noqa: E402

RANGE_RE = re.compile(r"\[(\d+[smhdwy])((?::\d+[smhdwy])?)\]")
COMPARISON_RE = re.compile(r"==|!=|>=|<=|>|<")


def adapt_rules(out_dir, files, window, hold):
    for path in files:
        doc = yaml.safe_load(open(path))
        for group in doc["groups"]:
            group["interval"] = "1s"
            for rule in group["rules"]:
                rule["expr"] = RANGE_RE.sub(lambda m: f"[{window}{m.group(2)}]", rule["expr"])
                if "for" in rule:
                    rule["for"] = hold
        with open(os.path.join(out_dir, os.path.basename(path)), "w") as f:
            yaml.safe_dump(doc, f, sort_keys=False)


def with_bool(expr):
    """expr with every comparison operator (outside label matchers and strings) made a `bool`
    comparison: it then yields 0/1 for every series instead of filtering them out."""
    out, i, depth_brace, quote = [], 0, 0, None
    while i < len(expr):
        c = expr[i]
        if quote:
            out.append(c)
            if c == "\\":
                out.append(expr[i + 1])
                i += 1
            elif c == quote:
                quote = None
            i += 1
            continue
        if c in "\"'`":
            quote = c
        elif c == "{":
            depth_brace += 1
        elif c == "}":
            depth_brace -= 1
        elif depth_brace == 0:
            m = COMPARISON_RE.match(expr, i)
            if m:
                out.append(m.group(0))
                i = m.end()
                if not re.match(r"\s*bool\b", expr[i:]):
                    out.append(" bool")
                continue
        out.append(c)
        i += 1
    return "".join(out)


class Prometheus:
    def __init__(self, url):
        self.url = url.rstrip("/")

    def get(self, path, **params):
        query = urllib.parse.urlencode(params, doseq=True)
        try:
            with urllib.request.urlopen(f"{self.url}{path}?{query}", timeout=30) as r:
                body = json.load(r)
        except urllib.error.HTTPError as e:
            body = json.load(e)
        if body.get("status") != "success":
            raise RuntimeError(f"{body.get('errorType')}: {body.get('error')}")
        return body["data"]

    def instant(self, expr):
        return self.get("/api/v1/query", query=expr)["result"]

    def range(self, expr, seconds, step):
        end = time.time()
        return self.get("/api/v1/query_range", query=expr, start=end - seconds, end=end,
                        step=step)["result"]


def parse_spec(spec):
    m = re.fullmatch(r"(\w+)(?:\{(.*)\})?", spec.strip())
    if not m:
        raise SystemExit(f"bad alert spec {spec!r}")
    labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2) or ""))
    return m.group(1), labels


def matches(alert, name, labels):
    return alert["labels"].get("alertname") == name and all(
        alert["labels"].get(k) == v for k, v in labels.items())


def check(args):
    prom = Prometheus(args.prometheus)
    boards = dash.load(args.dashboards)
    values = dict(v.split("=", 1) for v in args.vars)
    intervals = {"__rate_interval": args.rate_interval, "__interval": "2s",
                 "__range": args.range, "__range_s": "0", "__interval_ms": "2000"}
    failures, passed = [], 0

    def ok(what):
        nonlocal passed
        passed += 1
        if args.verbose:
            print(f"ok   {what}")

    def fail(what):
        failures.append(what)
        print(f"FAIL {what}")

    empty_ok = dict(e.split("=", 1) for e in args.empty_ok)

    def expect_data(what, q, run):
        """Reports `what`, the query `q`: ok when run() returns data; a failure when it raises or
        returns none, unless --empty-ok gives a reason for a metric `q` reads."""
        try:
            result = run()
        except RuntimeError as e:
            fail(f"{what}: {e}")
            return
        allowed = next((reason for metric, reason in empty_ok.items()
                        if re.search(rf"\b{re.escape(metric)}\b", q)), None)
        if not result and allowed is not None:
            print(f"skip {what}: no data, allowed: {allowed}")
            return
        (ok if result else fail)(f"{what}" + ("" if result else ": no data"))

    needs_hardware = {}
    for entry in args.needs_hardware:
        panel, reason = entry.split("=", 1)
        needs_hardware[tuple(panel.split("/", 1))] = reason
    panel_empty_ok = {}
    for entry in args.panel_empty_ok:
        panel, reason = entry.split("=", 1)
        name, title = panel.split("/", 1)
        ref = None
        # A query's refId is a capital letter or two; a title may hold "/" itself ("ticks/s").
        if re.fullmatch(r".+/[A-Z]{1,2}", title):
            title, ref = title.rsplit("/", 1)
        panel_empty_ok[(name, title, ref)] = reason
    listed = set()

    def hardware_reason(name, title):
        for key in ((name, title), (name, "*")):
            if key in needs_hardware:
                listed.add(key)
                return needs_hardware[key]
        return None

    panel_results = {}
    for name, title, ref, expr, instant in dash.queries(boards):
        q = dash.substitute(expr, values, intervals)
        reason = hardware_reason(name, title)
        empty_key = next((key for key in ((name, title, ref), (name, title, None))
                          if key in panel_empty_ok), None)
        if reason is None and empty_key:
            listed.add(empty_key)
            try:
                got = prom.instant(q) if instant else prom.range(q, args.range_seconds, 2)
            except RuntimeError as e:
                fail(f"{name} / {title} / {ref}: {e}")
                continue
            if got:
                ok(f"{name} / {title} / {ref}: {q}")
            else:
                print(f"skip {name} / {title} / {ref}: no data, allowed: "
                      f"{panel_empty_ok[empty_key]}")
            continue
        if reason is None:
            expect_data(f"{name} / {title} / {ref}: {q}", q,
                        lambda: prom.instant(q) if instant else prom.range(q, args.range_seconds, 2))
            continue
        try:
            got = prom.instant(q) if instant else prom.range(q, args.range_seconds, 2)
        except RuntimeError as e:
            fail(f"{name} / {title} / {ref}: {e}")
            continue
        panel_results.setdefault((name, title), []).append((ref, q, got))
    for (name, title), results in panel_results.items():
        with_data = [(ref, q) for ref, q, got in results if got]
        if len(with_data) == len(results):
            fail(f"{name} / {title}: listed as needing hardware, but returns data: {with_data}")
        else:
            print(f"skip {name} / {title}: no data, needs hardware: {hardware_reason(name, title)}")

    for name, var, q in dash.variable_queries(boards):
        m = re.fullmatch(r"label_values\((.*),\s*(\w+)\)", dash.substitute(q, values, intervals))
        what = f"{name} / variable {var}: {q}"
        if not m:
            fail(f"{what}: not label_values(SELECTOR, LABEL)")
            continue
        series = prom.get("/api/v1/series", **{"match[]": m.group(1), "start": time.time() - 600})
        got = sorted({s[m.group(2)] for s in series if s.get(m.group(2))})
        if hardware_reason(name, f"variable {var}") is not None:
            (fail if got else ok)(f"{what}" + (f": listed as needing hardware, but has values {got}"
                                              if got else ": no values, needs hardware"))
            continue
        (ok if got else fail)(f"{what}" + (f" -> {got}" if got else ": no values"))
    for key in (needs_hardware.keys() | panel_empty_ok.keys()) - listed:
        fail(f"--needs-hardware or --panel-empty-ok {'/'.join(k for k in key if k)}: no such panel")

    rules = []
    for path in args.rules:
        for group in yaml.safe_load(open(path))["groups"]:
            rules += group["rules"]
    for r in rules if not args.panels_only else []:
        if "record" in r:
            got = prom.instant(r["record"])
            (ok if got else fail)(f"recording rule {r['record']}" + ("" if got else ": no series"))
        else:
            q = with_bool(r["expr"])
            expect_data(f"alert {r['alert']} ({q})", q, lambda: prom.instant(q))

    loaded = [r for g in prom.get("/api/v1/rules")["groups"] for r in g["rules"]]
    names = {r.get("name") for r in loaded}
    for r in rules:
        name = r.get("record") or r.get("alert")
        if name not in names:
            fail(f"rule {name} not loaded by Prometheus")
    for r in loaded:
        (ok if r.get("health") == "ok" else fail)(
            f"rule {r['name']} health {r.get('health')}" +
            (f": {r.get('lastError')}" if r.get("lastError") else ""))

    fire = [parse_spec(s) for s in args.fire]
    quiet = [parse_spec(s) for s in args.quiet]
    deadline = time.time() + args.wait
    while True:
        alerts = [a for a in prom.get("/api/v1/alerts")["alerts"] if a["state"] == "firing"]
        missing = [s for s in fire if not any(matches(a, *s) for a in alerts)]
        if not missing or time.time() > deadline:
            break
        time.sleep(2)
    for name, labels in fire:
        found = [a for a in alerts if matches(a, name, labels)]
        if not found:
            fail(f"alert {name}{labels or ''} not firing (firing: "
                 f"{sorted({a['labels']['alertname'] for a in alerts})})")
            continue
        runbook = found[0]["annotations"].get("runbook", "")
        rendered = "{{" not in runbook and "<no value>" not in runbook and \
            "curl -s -XPOST http://" in runbook and "/api/v1/probes" in runbook
        (ok if rendered else fail)(f"alert {name}{labels or ''} firing" +
                                   ("" if rendered else f" but runbook not rendered: {runbook}"))
        if args.verbose:
            print("     summary: " + found[0]["annotations"].get("summary", ""))
    for name, labels in quiet:
        found = [a for a in alerts if matches(a, name, labels)]
        (fail if found else ok)(f"alert {name}{labels or ''} quiet" +
                                (f": fires {found[0]['labels']}" if found else ""))

    print(f"{passed} checks passed, {len(failures)} failed")
    return 1 if failures else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("adapt-rules")
    a.add_argument("out_dir")
    a.add_argument("files", nargs="+")
    a.add_argument("--window", default="2m")
    a.add_argument("--for", dest="hold", default="0s")
    c = sub.add_parser("check")
    c.add_argument("--prometheus", required=True)
    c.add_argument("--dashboards", required=True)
    c.add_argument("--rules", nargs="+", required=True)
    c.add_argument("--fire", action="append", default=[])
    c.add_argument("--quiet", action="append", default=[])
    c.add_argument("--vars", action="append", default=[])
    c.add_argument("--empty-ok", action="append", default=[])
    c.add_argument("--needs-hardware", action="append", default=[])
    c.add_argument("--panel-empty-ok", action="append", default=[])
    c.add_argument("--panels-only", action="store_true")
    c.add_argument("--rate-interval", default="10s")
    c.add_argument("--range", default="5m")
    c.add_argument("--range-seconds", type=int, default=300)
    c.add_argument("--wait", type=int, default=30)
    c.add_argument("--verbose", "-v", action="store_true")
    args = ap.parse_args()
    if args.cmd == "adapt-rules":
        adapt_rules(args.out_dir, args.files, args.window, args.hold)
        return 0
    return check(args)


if __name__ == "__main__":
    sys.exit(main())
