"""Reading the shipped Grafana dashboards the way Grafana and Prometheus will: their panels, their
queries, and the queries with Grafana's variables replaced by concrete values."""
import glob
import json
import os
import re

GRID_COLUMNS = 24
PANEL_TYPES = {"timeseries", "stat", "table", "bargauge", "gauge", "text", "heatmap", "piechart"}
DATASOURCE_VAR = "${datasource}"
BUILTIN_VARS = {"__rate_interval", "__interval", "__range", "__range_s", "__interval_ms"}
VAR_RE = re.compile(r"\$(?:\{(\w+)(?::\w+)?\}|(\w+))")


def load(directory):
    """{file name: dashboard} for every ibprobe-*.json in directory."""
    out = {}
    for path in sorted(glob.glob(os.path.join(directory, "*.json"))):
        with open(path) as f:
            out[os.path.basename(path)] = json.load(f)
    return out


def panels(dashboard):
    """Every panel, rows' nested panels included."""
    for p in dashboard.get("panels", []):
        yield p
        yield from p.get("panels", [])


def queries(dashboards):
    """(file, panel title, refId, expr, instant) of every panel target."""
    for name, d in dashboards.items():
        for p in panels(d):
            for t in p.get("targets", []):
                yield (name, p.get("title", ""), t.get("refId"), t.get("expr", ""),
                       bool(t.get("instant")))


def variable_queries(dashboards):
    """(file, variable name, label_values query) of every query variable."""
    for name, d in dashboards.items():
        for v in d.get("templating", {}).get("list", []):
            if v.get("type") == "query":
                q = v.get("query")
                yield name, v["name"], q.get("query") if isinstance(q, dict) else q


def substitute(expr, values, intervals):
    """expr with $var / ${var} replaced: Grafana's built-in intervals from `intervals`, dashboard
    variables from `values` (default: ".*", what "All" sends for a regex matcher)."""
    def repl(m):
        var = m.group(1) or m.group(2)
        if var in intervals:
            return intervals[var]
        return values.get(var, ".*")
    return VAR_RE.sub(repl, expr)


def validate(dashboards):
    """Problems found in the dashboards' structure, as strings."""
    problems = []
    uids = {}
    for name, d in dashboards.items():
        def bad(msg):
            problems.append(f"{name}: {msg}")

        for key in ("uid", "title", "panels", "templating", "schemaVersion", "time"):
            if key not in d:
                bad(f"no {key}")
        if "__inputs" in d or "DS_" in json.dumps(d):
            bad("exported with a fixed datasource input instead of the datasource variable")
        uid = d.get("uid", "")
        if not uid or len(uid) > 40:
            bad(f"uid {uid!r} empty or longer than 40 characters")
        if uid in uids:
            bad(f"uid {uid} also used by {uids[uid]}")
        uids[uid] = name

        variables = d.get("templating", {}).get("list", [])
        var_names = [v.get("name") for v in variables]
        if len(set(var_names)) != len(var_names):
            bad("duplicate variable names")
        ds = [v for v in variables if v.get("name") == "datasource"]
        if not ds or ds[0].get("type") != "datasource" or ds[0].get("query") != "prometheus":
            bad("no datasource variable of type datasource for prometheus")
        for v in variables:
            if v.get("type") == "query":
                if v.get("datasource", {}).get("uid") != DATASOURCE_VAR:
                    bad(f"variable {v.get('name')} does not query ${{datasource}}")
                q = v.get("query")
                q = q.get("query") if isinstance(q, dict) else q
                if not q or not q.startswith("label_values("):
                    bad(f"variable {v.get('name')}: query {q!r} is not label_values(...)")
                if v.get("includeAll") and v.get("allValue") != ".*":
                    bad(f"variable {v.get('name')}: All must send .* to regex matchers")
        defined = set(var_names) | BUILTIN_VARS

        ids = []
        boxes = []
        for p in panels(d):
            title = p.get("title") or f"panel {p.get('id')}"
            ids.append(p.get("id"))
            if not isinstance(p.get("id"), int) or p["id"] <= 0:
                bad(f"{title}: id {p.get('id')!r} is not a positive integer")
            if not p.get("title"):
                bad(f"panel {p.get('id')}: no title")
            g = p.get("gridPos", {})
            if not all(isinstance(g.get(k), int) for k in ("x", "y", "w", "h")):
                bad(f"{title}: gridPos incomplete: {g}")
            else:
                if g["x"] < 0 or g["w"] <= 0 or g["x"] + g["w"] > GRID_COLUMNS:
                    bad(f"{title}: gridPos {g} outside the {GRID_COLUMNS}-column grid")
                for other_title, o in boxes:
                    if (g["x"] < o["x"] + o["w"] and o["x"] < g["x"] + g["w"]
                            and g["y"] < o["y"] + o["h"] and o["y"] < g["y"] + g["h"]):
                        bad(f"{title}: overlaps {other_title}")
                boxes.append((title, g))
            if p.get("type") == "row":
                continue
            if p.get("type") not in PANEL_TYPES:
                bad(f"{title}: unknown panel type {p.get('type')!r}")
            if p.get("datasource") != {"type": "prometheus", "uid": DATASOURCE_VAR}:
                bad(f"{title}: datasource is {p.get('datasource')!r}, not the datasource variable")
            targets = p.get("targets") or []
            if not targets:
                bad(f"{title}: no queries")
            refs = [t.get("refId") for t in targets]
            if len(set(refs)) != len(refs) or not all(refs):
                bad(f"{title}: refIds missing or repeated: {refs}")
            for t in targets:
                if t.get("datasource", p.get("datasource")) != p.get("datasource"):
                    bad(f"{title} {t.get('refId')}: query datasource differs from the panel's")
                expr = t.get("expr", "")
                if not expr.strip():
                    bad(f"{title} {t.get('refId')}: empty expr")
                for m in VAR_RE.finditer(expr):
                    if (m.group(1) or m.group(2)) not in defined:
                        bad(f"{title} {t.get('refId')}: undefined variable {m.group(0)}")
                if p.get("type") == "table" and not t.get("instant"):
                    bad(f"{title} {t.get('refId')}: a table query should be instant")
        if len(set(ids)) != len(ids):
            bad(f"duplicate panel ids: {sorted(i for i in ids if ids.count(i) > 1)}")
    return problems
