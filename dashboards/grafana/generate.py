#!/usr/bin/env python3
"""Writes the ibprobe Grafana dashboards (ibprobe-*.json beside this script).

The JSON files are what users import; this script is their source, so that every panel gets the
same datasource variable, label selectors and layout rules. Edit here, run it, commit both.
Usage: generate.py [OUT_DIR]
"""
import json
import os
import sys

DS = {"type": "prometheus", "uid": "${datasource}"}
# Series of the probe mesh (scrape-ibprobe-probes.yml names its jobs ibprobe_probe_<module>).
MESH = 'job=~"ibprobe_probe_.+"'
PORT_JOIN = "on (job, instance, device, port)"
PORT_LEGEND = "{{instance}} {{device}}/{{port}}"
# Classes of the driver table (docs/metrics.md, "hw_counters classes") whose increase is a finding; a
# probe delta of a PortCounter in the error family has class "error".
HW_ERROR_CLASSES = 'class!~"informative|congestion"'
PAUSE_STATS = ('stat=~"rx_prio[0-7]_pause|tx_prio[0-7]_pause|rx_pfc_ena_frames_pri[0-7]'
               '|tx_pfc_ena_frames_pri[0-7]|rx_priority_[0-7]_xoff|tx_priority_[0-7]_xoff'
               '|rx_pause_ctrl_phy|tx_pause_ctrl_phy"')


# ---------------------------------------------------------------------------------------------
# variables

def datasource_var():
    return {
        "name": "datasource", "label": "Data source", "type": "datasource",
        "query": "prometheus", "current": {}, "hide": 0, "refresh": 1, "regex": "",
        "options": [], "includeAll": False, "multi": False,
    }


def query_var(name, label, query, multi=True):
    var = {
        "name": name, "label": label, "type": "query", "datasource": DS,
        "definition": query,
        "query": {"query": query, "refId": "PrometheusVariableQueryEditor-VariableQuery"},
        "refresh": 2, "sort": 1, "current": {}, "options": [], "hide": 0, "regex": "",
        "multi": multi, "includeAll": multi,
    }
    if multi:
        var["allValue"] = ".*"
    return var


def port_vars(multi=True):
    return [
        query_var("host", "Host", "label_values(rdma_port_state, instance)", multi),
        query_var("device", "Device",
                  'label_values(rdma_port_state{instance=~"$host"}, device)', multi),
        query_var("port", "Port",
                  'label_values(rdma_port_state{instance=~"$host",device=~"$device"}, port)',
                  multi),
    ]


PORT_SEL = 'instance=~"$host",device=~"$device",port=~"$port"'


# ---------------------------------------------------------------------------------------------
# panels

def target(expr, legend="", ref="A", instant=False):
    t = {"datasource": DS, "refId": ref, "expr": expr, "legendFormat": legend or "__auto",
         "range": not instant, "instant": instant, "editorMode": "code"}
    if instant:
        t["format"] = "table"
    return t


def table(title, description, expr, **layout):
    """A table of one instant query: each series with its latest value."""
    return panel("table", title, description, [target(expr, instant=True)], **layout)


def with_baseline(title, description, expr, baseline, legend, unit):
    """A timeseries of `expr` (A) and of the `baseline` an alert compares it against (B)."""
    return panel("timeseries", title, description,
                 [target(expr, legend, "A"), target(baseline, "baseline " + legend, "B")],
                 unit=unit)


def thresholds(*steps):
    out = [{"color": "green", "value": None}]
    out += [{"color": color, "value": value} for value, color in steps]
    return {"mode": "absolute", "steps": out}


def panel(kind, title, description, targets, w=12, h=8, unit="short", **extra):
    p = {
        "type": kind, "title": title, "description": description, "datasource": DS,
        "targets": targets, "gridPos": {"w": w, "h": h},
        "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
        "options": {},
    }
    defaults = p["fieldConfig"]["defaults"]
    if kind == "timeseries":
        defaults["custom"] = {"drawStyle": "line", "lineWidth": 1, "fillOpacity": 10,
                              "showPoints": "never", "spanNulls": False}
        p["options"] = {"legend": {"displayMode": "table", "placement": "bottom",
                                   "showLegend": True, "calcs": ["lastNotNull", "max"]},
                        "tooltip": {"mode": "multi", "sort": "desc"}}
    elif kind in ("stat", "bargauge"):
        p["options"] = {"reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
                        "orientation": "auto"}
        if kind == "stat":
            p["options"].update({"colorMode": "value", "graphMode": "none", "textMode": "auto",
                                 "justifyMode": "auto"})
        else:
            p["options"].update({"displayMode": "gradient", "orientation": "horizontal",
                                 "showUnfilled": True})
    elif kind == "table":
        p["options"] = {"showHeader": True, "cellHeight": "sm",
                        "footer": {"show": False, "reducer": ["sum"], "fields": ""}}
        p["transformations"] = [
            {"id": "merge", "options": {}},
            {"id": "organize", "options": {"excludeByName": {"Time": True, "__name__": True}}},
        ]
    for key, value in extra.items():
        if key == "thresholds":
            defaults["thresholds"] = value
        elif key == "mappings":
            defaults["mappings"] = value
        elif key == "overrides":
            p["fieldConfig"]["overrides"] = value
        elif key == "stack":
            defaults["custom"]["stacking"] = {"mode": "normal", "group": "A"}
        elif key == "max":
            defaults["max"] = value
        else:
            p[key] = value
    return p


def value_map(names):
    return [{"type": "value", "options": {str(k): {"text": v, "index": i}
                                           for i, (k, v) in enumerate(names.items())}}]


PORT_STATES = {1: "DOWN", 2: "INIT", 3: "ARMED", 4: "ACTIVE", 5: "ACTIVE_DEFER"}
PHYS_STATES = {1: "Sleep", 2: "Polling", 3: "Disabled", 4: "PortConfigurationTraining",
               5: "LinkUp", 6: "LinkErrorRecovery", 7: "PhyTest"}


def rename_series(names):
    return [{"matcher": {"id": "byName", "options": str(k)},
             "properties": [{"id": "displayName", "value": v}]} for k, v in names.items()]


def dashboard(uid, title, description, variables, panels, tags=()):
    y = x = row_h = 0
    for i, p in enumerate(panels, start=1):
        p["id"] = i
        w, h = p["gridPos"]["w"], p["gridPos"]["h"]
        if x + w > 24:
            x, y, row_h = 0, y + row_h, 0
        p["gridPos"].update({"x": x, "y": y})
        x += w
        row_h = max(row_h, h)
    return {
        "uid": uid, "title": title, "description": description,
        "tags": ["ibprobe", "rdma", "infiniband", *tags],
        "editable": True, "graphTooltip": 1, "timezone": "browser",
        "schemaVersion": 39, "version": 1, "refresh": "1m",
        "time": {"from": "now-6h", "to": "now"}, "timepicker": {},
        "annotations": {"list": [{
            "builtIn": 1, "datasource": {"type": "grafana", "uid": "-- Grafana --"},
            "enable": True, "hide": True, "iconColor": "rgba(0, 211, 255, 1)",
            "name": "Annotations & Alerts", "type": "dashboard"}]},
        "links": [{"title": "ibprobe dashboards", "type": "dashboards", "tags": ["ibprobe"],
                   "asDropdown": True, "includeVars": True, "keepTime": True}],
        "templating": {"list": [datasource_var(), *variables]},
        "panels": panels,
    }


# ---------------------------------------------------------------------------------------------
# dashboards

def fabric_overview():
    host = 'instance=~"$host"'
    below = (f"rdma_port_rate_bytes_per_second{{{host}}} < {PORT_JOIN} "
             f"ibprobe:port_expected_rate_bytes_per_second")
    panels = [
        panel("stat", "Ports ACTIVE", "Ports whose logical state is ACTIVE or ACTIVE_DEFER.",
              [target(f"count(rdma_port_state{{{host}}} >= 4) or vector(0)")], w=4, h=4),
        panel("stat", "Ports not ACTIVE",
              "Ports DOWN, INIT (waiting for the subnet manager) or ARMED.",
              [target(f"count(rdma_port_state{{{host}}} < 4) or vector(0)")], w=4, h=4,
              thresholds=thresholds((1, "red"))),
        panel("stat", "Ports below expected rate",
              "Ports running slower than the fastest port of the same HCA model and link layer, "
              "or than their own 7-day maximum (ibprobe:port_expected_rate_bytes_per_second).",
              [target(f"count({below}) or vector(0)")], w=4, h=4,
              thresholds=thresholds((1, "orange"))),
        panel("stat", "Saturated counters",
              "Fixed-width PortCounters stuck at all-ones: they no longer count until reset.",
              [target(f"count(rdma_port_pma_saturated{{{host}}} == 1) or vector(0)")], w=4, h=4,
              thresholds=thresholds((1, "orange"))),
        panel("stat", "Error counter increase",
              "All error-class PortCounters together, over the dashboard's time range.",
              [target(f"sum(increase(rdma_port_errors_total{{{host}}}[$__range])) or vector(0)")],
              w=4, h=4, thresholds=thresholds((1, "orange"))),
        panel("stat", "Probe success",
              "Share of successful probe-mesh runs from the selected hosts over the time range.",
              [target(f"avg(avg_over_time(probe_success{{{MESH},{host}}}[$__range]))")],
              w=4, h=4, unit="percentunit",
              thresholds={"mode": "absolute", "steps": [{"color": "red", "value": None},
                                                        {"color": "orange", "value": 0.9},
                                                        {"color": "green", "value": 0.99}]}),
        panel("bargauge", "Ports by state", "Number of ports in each logical state.",
              [target(f"count_values(\"state\", rdma_port_state{{{host}}})", "{{state}}")],
              w=8, h=7, overrides=rename_series(PORT_STATES)),
        panel("bargauge", "Ports by physical state",
              "Number of ports in each physical state (LinkUp is healthy; Polling: no partner).",
              [target(f"count_values(\"state\", rdma_port_physical_state{{{host}}})",
                      "{{state}}")],
              w=8, h=7, overrides=rename_series(PHYS_STATES)),
        panel("timeseries", "Rate vs expected",
              "Port rate divided by the expected rate: 100 % when the link trained at full width "
              "and speed.",
              [target(f"rdma_port_rate_bytes_per_second{{{host}}} / {PORT_JOIN} "
                      "ibprobe:port_expected_rate_bytes_per_second", PORT_LEGEND)],
              w=8, h=7, unit="percentunit"),
        panel("table", "Ports: state, rate and expected rate",
              "Current state, physical state, rate, expected rate and width of every port.",
              [target(f"rdma_port_state{{{host}}}", ref="A", instant=True),
               target(f"rdma_port_physical_state{{{host}}}", ref="B", instant=True),
               target(f"rdma_port_rate_bytes_per_second{{{host}}}", ref="C", instant=True),
               target(f"ibprobe:port_expected_rate_bytes_per_second{{{host}}}", ref="D",
                      instant=True),
               target(f"rdma_port_link_width_lanes{{{host}}}", ref="E", instant=True)],
              w=24, h=8,
              overrides=[
                  {"matcher": {"id": "byName", "options": "Value #A"},
                   "properties": [{"id": "displayName", "value": "state"},
                                  {"id": "mappings", "value": value_map(PORT_STATES)}]},
                  {"matcher": {"id": "byName", "options": "Value #B"},
                   "properties": [{"id": "displayName", "value": "physical state"},
                                  {"id": "mappings", "value": value_map(PHYS_STATES)}]},
                  {"matcher": {"id": "byName", "options": "Value #C"},
                   "properties": [{"id": "displayName", "value": "rate"},
                                  {"id": "unit", "value": "Bps"}]},
                  {"matcher": {"id": "byName", "options": "Value #D"},
                   "properties": [{"id": "displayName", "value": "expected rate"},
                                  {"id": "unit", "value": "Bps"}]},
                  {"matcher": {"id": "byName", "options": "Value #E"},
                   "properties": [{"id": "displayName", "value": "width (lanes)"}]},
              ]),
        panel("timeseries", "Top talkers: transmitted bytes/s",
              "The 10 ports sending the most (PortXmitData x 4, in bytes).",
              [target(f"topk(10, rate(rdma_port_data_transmitted_bytes_total{{{host}}}"
                      "[$__rate_interval]))", PORT_LEGEND)], unit="Bps"),
        panel("timeseries", "Top talkers: received bytes/s",
              "The 10 ports receiving the most (PortRcvData x 4, in bytes).",
              [target(f"topk(10, rate(rdma_port_data_received_bytes_total{{{host}}}"
                      "[$__rate_interval]))", PORT_LEGEND)], unit="Bps"),
        panel("timeseries", "Fabric traffic",
              "Bytes/s summed over the selected hosts' ports, per direction.",
              [target(f"sum(rate(rdma_port_data_transmitted_bytes_total{{{host}}}"
                      "[$__rate_interval]))", "transmitted", "A"),
               target(f"sum(rate(rdma_port_data_received_bytes_total{{{host}}}"
                      "[$__rate_interval]))", "received", "B")], unit="Bps"),
        panel("timeseries", "Top link utilization (5m)",
              "Transmit bytes/s over the port's signalling rate (SDR/DDR/QDR links top out at "
              "80 %).",
              [target(f"topk(10, ibprobe:port_transmit_utilization:ratio_rate5m{{{host}}})",
                      PORT_LEGEND)], unit="percentunit"),
        panel("timeseries", "Top transmit wait (ticks/s)",
              "PortXmitWait: data queued but nothing sent (no credits or no arbitration). Rising "
              "with low bandwidth points at the fabric.",
              [target(f"topk(10, rate(rdma_port_transmit_wait_ticks_total{{{host}}}"
                      "[$__rate_interval]))", PORT_LEGEND)]),
        panel("timeseries", "Packets/s from driver counters (rxe, siw)",
              "Soft-RoCE and siw have no PortCounters; their hw_counters count packets instead.",
              [target(f"topk(10, rate(rdma_port_hw_stat_total{{{host},"
                      "counter=~\"sent_pkts|rcvd_pkts\"}[$__rate_interval]))",
                      PORT_LEGEND + " {{counter}}")], unit="pps"),
    ]
    return dashboard("ibprobe-fabric", "ibprobe / Fabric overview",
                     "Port states, rates against expectation, top talkers and error totals.",
                     [query_var("host", "Host", "label_values(rdma_port_state, instance)")],
                     panels)


def error_counters():
    sel = PORT_SEL + ',counter=~"$counter"'
    legend = PORT_LEGEND + " {{counter}}"
    panels = [
        panel("timeseries", "Error increase per class",
              "Increase of each error-class PortCounter, summed over the selected ports.",
              [target(f"sum by (counter) (increase(rdma_port_errors_total{{{sel}}}"
                      "[$__rate_interval]))", "{{counter}}")], w=24, stack=True),
        panel("timeseries", "Error increase per port and counter",
              "Every error counter of every selected port; flat zero is healthy.",
              [target(f"increase(rdma_port_errors_total{{{sel}}}[$__rate_interval])", legend)],
              w=24, h=9),
        table("Ports with rising errors",
              "Ports and counters that rose within the dashboard's time range, most first.",
              f"sort_desc(sum by (instance, device, port, counter) "
              f"(increase(rdma_port_errors_total{{{sel}}}[$__range])) > 0)", w=12, h=9),
        table("Saturated counters",
              "Counters stuck at their maximum: reset them (perfquery -R) to see new errors.",
              f"rdma_port_pma_saturated{{{PORT_SEL}}} == 1", w=12, h=9),
        panel("timeseries", "Link downed vs link error recovery",
              "link_error_recovery: the link retrained and recovered. link_downed: recovery "
              "failed and the link went down. They are different findings.",
              [target(f"sum by (instance, device, port) (increase(rdma_port_errors_total"
                      f"{{{PORT_SEL},counter=\"link_downed\"}}[$__rate_interval]))",
                      "downed " + PORT_LEGEND, "A"),
               target(f"sum by (instance, device, port) (increase(rdma_port_errors_total"
                      f"{{{PORT_SEL},counter=\"link_error_recovery\"}}[$__rate_interval]))",
                      "recovered " + PORT_LEGEND, "B")]),
        panel("timeseries", "Symbol errors",
              "Bit errors the PHY could not correct: cable, transceiver or port.",
              [target(f"increase(rdma_port_errors_total{{{PORT_SEL},counter=\"symbol_error\"}}"
                      "[$__rate_interval])", PORT_LEGEND)]),
        panel("timeseries", "Buffer overruns and VL15 drops",
              "Often a credit/VL misconfiguration, or a probe that was too aggressive.",
              [target(f"increase(rdma_port_errors_total{{{PORT_SEL},counter=~"
                      "\"excessive_buffer_overrun_errors|VL15_dropped\"}[$__rate_interval])",
                      legend)]),
        panel("timeseries", "Receive errors and discards",
              "port_rcv_errors, remote physical errors, switch relay errors, transmit discards.",
              [target(f"increase(rdma_port_errors_total{{{PORT_SEL},counter=~"
                      "\"port_rcv_errors|port_rcv_remote_physical_errors|"
                      "port_rcv_switch_relay_errors|port_xmit_discards\"}[$__rate_interval])",
                      legend)]),
        panel("timeseries", "Driver error counters (hw_counters) per class",
              "Error-class driver hardware counters, classified per driver (retransmission, "
              "sequence_error, ack_timeout, rnr_nak, rnr_retry_exceeded, remote_error, "
              "out_of_buffer): on RoCE ports the evidence of loss is here, PortCounters errors "
              "never move.",
              [target(f"sum by (instance, device, port, class) (increase(rdma_port_hw_stat_total"
                      f"{{{PORT_SEL},{HW_ERROR_CLASSES}}}[$__rate_interval]))",
                      PORT_LEGEND + " {{class}}")], w=24),
        panel("timeseries", "RoCE retransmissions per port",
              "Retransmission and ACK-timeout hw_counters per second (rxe completer_retry_err, "
              "duplicate_request; mlx5 duplicate_request, local_ack_timeout_err; bnxt_re "
              "to_retransmits...). A lossless fabric retransmits next to nothing.",
              [target(f"sum by (instance, device, port) (rate(rdma_port_hw_stat_total"
                      f"{{{PORT_SEL},class=~\"retransmission|ack_timeout\"}}[$__rate_interval]))",
                      PORT_LEGEND)]),
        panel("timeseries", "RoCE sequence errors per port",
              "Out-of-sequence packets and sequence-error NAKs per second: a packet before them "
              "was lost, or the path reorders.",
              [target(f"sum by (instance, device, port) (rate(rdma_port_hw_stat_total"
                      f"{{{PORT_SEL},class=\"sequence_error\"}}[$__rate_interval]))",
                      PORT_LEGEND)]),
        panel("timeseries", "Congestion notifications (CNP) per second",
              "CNPs sent and handled, ECN-marked packets (mlx5 np_cnp_sent, rp_cnp_handled, "
              "np_ecn_marked_roce_packets; irdma cnpSent; bnxt_re tx_cnp_pkts...): congestion "
              "control at work, not errors.",
              [target(f"rate(rdma_port_hw_stat_total{{{PORT_SEL},class=\"congestion\"}}"
                      "[$__rate_interval])", legend)]),
        panel("timeseries", "Pause frames per priority",
              "Pause (PFC) frames received and sent per second by each RoCE port's netdev "
              "(ethtool collector). A priority receiving pauses without a break is a pause "
              "storm.",
              [target(f"rate(rdma_port_ethtool_stat_total{{{PORT_SEL},{PAUSE_STATS}}}"
                      "[$__rate_interval])", PORT_LEGEND + " {{netdev}} {{stat}}")]),
        table("Error counter values",
              "Current value of every error counter (not reset by ibprobe; 16-bit counters stop "
              "at 65535, 8-bit at 255, 4-bit at 15).",
              f"rdma_port_errors_total{{{sel}}}", w=24, h=9),
    ]
    return dashboard("ibprobe-errors", "ibprobe / Error counters",
                     "Error-counter trends per class and per counter, rising ports, saturation.",
                     [*port_vars(),
                      query_var("counter", "Counter",
                                "label_values(rdma_port_errors_total, counter)")],
                     panels)


def port_detail():
    sel = 'instance=~"$host",device=~"$device",port=~"$port"'
    dev = 'instance=~"$host",device=~"$device"'
    panels = [
        panel("stat", "State", "Logical port state.", [target(f"rdma_port_state{{{sel}}}")],
              w=4, h=4, mappings=value_map(PORT_STATES),
              thresholds={"mode": "absolute", "steps": [{"color": "red", "value": None},
                                                        {"color": "green", "value": 4}]}),
        panel("stat", "Physical state", "Physical port state.",
              [target(f"rdma_port_physical_state{{{sel}}}")], w=4, h=4,
              mappings=value_map(PHYS_STATES)),
        panel("stat", "Rate", "Signalling rate (active width x speed).",
              [target(f"rdma_port_rate_bytes_per_second{{{sel}}}")], w=4, h=4, unit="Bps"),
        panel("stat", "Expected rate", "Fastest port of this model, or this port's 7-day max.",
              [target(f"ibprobe:port_expected_rate_bytes_per_second{{{sel}}}")], w=4, h=4,
              unit="Bps"),
        panel("stat", "Width (lanes)", "Active link width.",
              [target(f"rdma_port_link_width_lanes{{{sel}}}")], w=4, h=4),
        panel("stat", "LID / SM LID", "Port LID and subnet manager LID (0 on RoCE).",
              [target(f"rdma_port_lid{{{sel}}}", "LID", "A"),
               target(f"rdma_port_sm_lid{{{sel}}}", "SM LID", "B")], w=4, h=4),
        table("Identity",
              "Device and port identity: HCA model, firmware, GUID, link layer, netdev.",
              f"rdma_port_info{{{sel}}} * on (job, instance, device) group_left "
              "(hca_type, fw_ver, board_id, node_guid, numa_node) "
              f"rdma_device_info{{{dev}}}", w=24, h=5),
        panel("timeseries", "Throughput",
              "Bytes/s per direction (PortXmitData/PortRcvData x 4) against the port rate.",
              [target(f"rate(rdma_port_data_transmitted_bytes_total{{{sel}}}[$__rate_interval])",
                      "transmitted " + PORT_LEGEND, "A"),
               target(f"rate(rdma_port_data_received_bytes_total{{{sel}}}[$__rate_interval])",
                      "received " + PORT_LEGEND, "B"),
               target(f"rdma_port_rate_bytes_per_second{{{sel}}}", "rate " + PORT_LEGEND, "C")],
              unit="Bps"),
        panel("timeseries", "Packets/s", "PortXmitPkts / PortRcvPkts.",
              [target(f"rate(rdma_port_packets_transmitted_total{{{sel}}}[$__rate_interval])",
                      "transmitted " + PORT_LEGEND, "A"),
               target(f"rate(rdma_port_packets_received_total{{{sel}}}[$__rate_interval])",
                      "received " + PORT_LEGEND, "B")], unit="pps"),
        panel("timeseries", "Transmit wait (ticks/s)",
              "Data queued but nothing sent: no credits or no arbitration.",
              [target(f"rate(rdma_port_transmit_wait_ticks_total{{{sel}}}[$__rate_interval])",
                      PORT_LEGEND)]),
        panel("timeseries", "Error counters",
              "Increase of every error-class PortCounter of the port.",
              [target(f"increase(rdma_port_errors_total{{{sel}}}[$__rate_interval])",
                      PORT_LEGEND + " {{counter}}")]),
        panel("timeseries", "Flaps and port events",
              "Down/up cycles of the port and its verbs async events by event, counted as they "
              "happened however short (port_events collector; IbprobePortFlapping fires at 3 "
              "flaps in 10 minutes).",
              [target(f"increase(rdma_port_flaps_total{{{sel}}}[$__rate_interval])",
                      "flaps " + PORT_LEGEND, "A"),
               target(f"increase(rdma_port_events_total{{{sel}}}[$__rate_interval])",
                      PORT_LEGEND + " {{event}}", "B")]),
        panel("timeseries", "Driver counters (hw_counters)",
              "The 15 fastest-moving driver hardware counters of the port, per second.",
              [target(f"topk(15, rate(rdma_port_hw_stat_total{{{sel}}}[$__rate_interval]))",
                      PORT_LEGEND + " {{counter}}")]),
        table("Counter saturation",
              "1: the counter sits at its maximum and has stopped counting.",
              f"rdma_port_pma_saturated{{{sel}}}"),
        # Below the counters of a RoCE port (the link_health collector and its rules).
        with_baseline("Pre-FEC BER",
                      "Bits the FEC corrected per bit of the line (RoCE ports), against the "
                      "threshold IbprobePreFecBerHigh fires above.",
                      f"ibprobe:port_pre_fec_ber:rate5m{{{sel}}}",
                      f"ibprobe:port_pre_fec_ber_threshold{{{sel}}}", PORT_LEGEND, "sci"),
        panel("timeseries", "Transceiver receive power (dBm)",
              "Optical power each lane of the module receives, against the module's own low "
              "warning threshold.",
              [target(f"ibprobe:port_module_rx_power_dbm{{{sel}}}", "lane {{lane}}", "A"),
               target(f"ibprobe:port_module_rx_power_threshold_dbm{{{sel},threshold=\"low_warning\"}}",
                      "low warning", "B")], unit="dBm"),
        panel("timeseries", "Transceiver temperature",
              "Module temperature against the module's own high warning threshold.",
              [target(f"rdma_port_module_temperature_celsius{{{sel}}}", "{{netdev}}", "A"),
               target(f"rdma_port_module_temperature_threshold_celsius"
                      f"{{{sel},threshold=\"high_warning\"}}", "high warning", "B")],
              unit="celsius"),
        panel("table", "Transceiver and FEC",
              "Whether the module and the FEC statistics of the port's netdev were read (0 with "
              "the reason when not), and the module's identity.",
              [target(f"rdma_port_module_up{{{sel}}}", ref="A", instant=True),
               target(f"rdma_port_fec_up{{{sel}}}", ref="B", instant=True),
               target(f"rdma_port_module_info{{{sel}}}", ref="C", instant=True)]),
        panel("timeseries", "Probes from this host: BW average",
              "Probe-mesh bandwidth runs started on this host, per peer and module.",
              [target(f"rdma_probe_bandwidth_bytes_per_second{{{MESH},instance=~\"$host\"}}",
                      "{{module}} to {{target}}")], w=12, unit="Bps"),
        panel("timeseries", "Probes from this host: t_typical",
              "Probe-mesh latency runs started on this host: median latency (t_typical).",
              [target(f"rdma_probe_latency_seconds{{{MESH},instance=~\"$host\",quantile=\"0.5\"}}",
                      "{{module}} to {{target}}")], w=12, unit="s"),
    ]
    return dashboard("ibprobe-port", "ibprobe / Port detail",
                     "One port: state, identity, traffic, errors, driver counters, transceiver "
                     "and FEC, and probes.",
                     port_vars(multi=False), panels)


def probes():
    sel = MESH + ',instance=~"$prober",target=~"$target",module=~"$module"'
    legend = "{{instance}} to {{target}} {{module}}"
    panels = [
        panel("stat", "Success ratio", "Share of successful runs over the time range.",
              [target(f"avg(avg_over_time(probe_success{{{sel}}}[$__range]))")], w=6, h=4,
              unit="percentunit",
              thresholds={"mode": "absolute", "steps": [{"color": "red", "value": None},
                                                        {"color": "orange", "value": 0.9},
                                                        {"color": "green", "value": 0.99}]}),
        panel("stat", "Failed runs", "Runs that failed over the time range.",
              [target(f"sum(sum_over_time(rdma_probe_failure{{{sel}}}[$__range])) or vector(0)")],
              w=6, h=4, thresholds=thresholds((1, "red"))),
        panel("stat", "Runs started (exporter counter)",
              "ibprobe_probes_total of the probing hosts: mesh and runbook runs together.",
              [target("sum by (result) (increase(ibprobe_probes_total{instance=~\"$prober\","
                      "module=~\"$module\"}[$__range]))", "{{result}}")], w=6, h=4),
        panel("stat", "Median setup time",
              "Request to first posted work request, median over the time range.",
              [target(f"quantile(0.5, quantile_over_time(0.5, rdma_probe_setup_seconds{{{sel}}}"
                      "[$__range]))")], w=6, h=4,
              unit="s"),
        panel("timeseries", "Probe success", "1: the run succeeded; 0: it failed.",
              [target(f"probe_success{{{sel}}}", legend)], w=12, max=1),
        table("Failed probes with reasons",
              "Failed runs in the time range by prober, peer, module and reason (unreachable, "
              "rejected, timeout, peer_lost, busy...).",
              f"sort_desc(sum by (instance, target, module, reason) "
              f"(sum_over_time(rdma_probe_failure{{{sel}}}[$__range])))", w=12),
        with_baseline("BW average",
                      "perftest's BW average (bytes / (last completion - first post)) with the "
                      "1-day median the bandwidth alert compares against.",
                      f"rdma_probe_bandwidth_bytes_per_second{{{sel}}}",
                      f"ibprobe:probe_bandwidth_bytes_per_second:median1d{{{sel}}}", legend,
                      unit="Bps"),
        panel("timeseries", "Peak BW and message rate",
              "Peak bandwidth (bytes/s) and messages per second of bandwidth runs.",
              [target(f"rdma_probe_bandwidth_peak_bytes_per_second{{{sel}}}", "peak " + legend,
                      "A"),
               target(f"rdma_probe_message_rate_per_second{{{sel}}}", "msg/s " + legend, "B")],
              overrides=[{"matcher": {"id": "byFrameRefID", "options": "A"},
                          "properties": [{"id": "unit", "value": "Bps"}]}]),
        with_baseline("Latency t_typical",
                      "Median one-way latency (RTT/2 for write and send), with its 1-day median "
                      "baseline.",
                      f"rdma_probe_latency_seconds{{{sel},quantile=\"0.5\"}}",
                      f"ibprobe:probe_latency_seconds:median1d{{{sel},quantile=\"0.5\"}}", legend,
                      unit="s"),
        panel("timeseries", "Latency p99 and p99.9",
              "Tail latency of latency runs (after dropping the two largest samples).",
              [target(f"rdma_probe_latency_seconds{{{sel},quantile=~\"0.99|0.999\"}}",
                      legend + " p{{quantile}}")], unit="s"),
        panel("timeseries", "Latency min / average / max / stdev",
              "The other perftest latency figures.",
              [target(f"rdma_probe_latency_min_seconds{{{sel}}}", "min " + legend, "A"),
               target(f"rdma_probe_latency_average_seconds{{{sel}}}", "avg " + legend, "B"),
               target(f"rdma_probe_latency_max_seconds{{{sel}}}", "max " + legend, "C"),
               target(f"rdma_probe_latency_stdev_seconds{{{sel}}}", "stdev " + legend, "D")],
              unit="s"),
        panel("timeseries", "Ratio to line rate",
              "Link bytes/s seen in the counters during the run over the port's line rate.",
              [target(f"rdma_probe_line_rate_ratio{{{sel}}}", legend)], unit="percentunit"),
        panel("timeseries", "Link bytes/s during runs",
              "The data-counter delta over the run window; higher than BW average means other "
              "traffic or retransmissions on the port.",
              [target(f"rdma_probe_link_bytes_per_second{{{sel}}}", legend)], unit="Bps"),
        panel("timeseries", "Error counter deltas during runs",
              "Error-class PortCounters and classified driver counters (retransmission, "
              "sequence_error, ack_timeout, rnr_nak...) that moved during runs, per side and "
              "class. Non-zero is a finding once an over-aggressive probe is ruled out.",
              [target(f"rdma_probe_counter_delta{{{sel},{HW_ERROR_CLASSES}}}",
                      legend + " {{side}} {{class}} {{counter}}")]),
        table("Error-class deltas of the last runs",
              "Error-class counters of the latest runs with side and class, the ones that moved "
              "first: what errors_clean 0 is about.",
              f"sort_desc(last_over_time(rdma_probe_counter_delta{{{sel},"
              f"{HW_ERROR_CLASSES}}}[$__range]))", w=24, h=7),
        table("Counter deltas of the last run",
              "Every counter delta of the latest successful run per prober, peer and module, "
              "both sides "
              "(bytes for port_xmit_data/port_rcv_data).",
              f"last_over_time(rdma_probe_counter_delta{{{sel}}}[$__range])", w=24, h=9),
        table("Diagnoses",
              "What each run's figure and the sending port's counters said together (link "
              "saturated, host-side bottleneck, credits/arbitration, ...), runs per diagnosis.",
              f"sum by (instance, target, module, diagnosis) "
              f"(count_over_time(rdma_probe_diagnosis{{{sel}}}[$__range]))"),
        table("Pre-flight checks",
              "Lowest result of each check over the selected runs and time range: 1 passed "
              "every time, 0 failed at least once.",
              f"min by (side, check) (min_over_time(rdma_probe_check{{{sel}}}[$__range]))"),
        table("Alert-started probes: verdicts",
              "The last probe each alert started through the alert receiver (POST "
              "/api/v1/alerts), on the exporter that ran it: the alert's labels, module, peer, "
              "state, failure reason and diagnosis. The same verdict reaches Alertmanager as "
              "IbprobeProbeVerdict when --alerts.alertmanager-url is set.",
              'ibprobe_alert_probe_info{instance=~"$prober"}', w=24, h=7),
        table("Alert-started probes: error counters that moved",
              "Error-class counters that rose during the last probe each alert started, by "
              "side: what the verdict errors_moved is about.",
              'ibprobe_alert_probe_error_counter_delta{instance=~"$prober"}', w=12, h=7),
        panel("timeseries", "Alerts answered by a probe, and dropped",
              "Probes started by firing alerts, and alerts that started none by reason "
              "(repeat: answered within the repeat window; in_flight_limit: a storm; no_peer: "
              "no usable peer, ...).",
              [target('sum by (instance) (increase(ibprobe_alert_probes_started_total'
                      '{instance=~"$prober"}[$__rate_interval]))', "started {{instance}}", "A"),
               target('sum by (instance, reason) (increase(ibprobe_alert_probes_dropped_total'
                      '{instance=~"$prober"}[$__rate_interval]))',
                      "dropped {{reason}} {{instance}}", "B")], w=12, h=7),
        panel("timeseries", "Run duration and setup time",
              "Whole probe (probe_duration_seconds) and request-to-first-post setup.",
              [target(f"probe_duration_seconds{{{sel}}}", "duration " + legend, "A"),
               target(f"rdma_probe_setup_seconds{{{sel}}}", "setup " + legend, "B")], unit="s"),
    ]
    return dashboard("ibprobe-probes", "ibprobe / Probe results",
                     "Probe mesh results over time: bandwidth, latency, line-rate ratio, counter "
                     "deltas, checks and failures.",
                     [query_var("prober", "Probing host",
                                f"label_values(probe_success{{{MESH}}}, instance)"),
                      query_var("target", "Peer",
                                f"label_values(probe_success{{{MESH},instance=~\"$prober\"}}, "
                                "target)"),
                      query_var("module", "Module",
                                f"label_values(probe_success{{{MESH}}}, module)")],
                     panels, tags=("probes",))


def switch_ports():
    # Switch-port series (fabric discovery) carry node_description; host ports do not.
    sw = 'node_description=~"$switch"'
    cable = "{{node_description}} port {{port}}"
    panels = [
        table("Top erroring switch ports",
              "Switch ports whose error counters rose within the time range, with both ends of "
              "the cable: switch and port, far end and its port.",
              f"topk(20, sum by (node_description, port, remote_description, "
              f"remote_port, counter) (increase(rdma_port_errors_total{{{sw}}}"
              "[$__range])) > 0)", w=24, h=9),
        panel("timeseries", "Switch port errors",
              "Increase of every error-class counter of the selected switches' ports.",
              [target(f"sum by (node_description, port, counter) (increase("
                      f"rdma_port_errors_total{{{sw}}}[$__rate_interval])) > 0",
                      cable + " {{counter}}")], w=24),
        table("Flapping links",
              "Switch ports whose link went down within the time range (LinkDownedCounter), with "
              "the cable's far end: the port keeps the far end's labels while it is down.",
              f"sum by (node_description, port, remote_description, remote_port) (increase("
              f"rdma_port_errors_total{{{sw},counter=\"link_downed\"}}[$__range])) > 0",
              w=12, h=9),
        panel("timeseries", "Transmit wait by virtual lane",
              "Ticks per second each VL of a switch port had data to send and no credits "
              "(PortVLXmitWaitCounters): which VL of which cable is congested.",
              [target(f"topk(20, rate(rdma_port_vl_transmit_wait_ticks_total{{{sw}}}"
                      "[$__rate_interval]))", cable + " VL{{vl}}")], w=12, h=9),
        table("Cables below capability",
              "Cables running narrower (width) or slower (speed) than the best both ends "
              "support (iblinkinfo's \"Could be\").",
              f"rdma_fabric_port_link_below_capability{{{sw}}} == 1", w=12, h=9),
        table("Missing cables",
              "Cables an earlier discovery found that the latest one did not, with their "
              "former far end.",
              f"rdma_fabric_link_missing{{{sw}}} == 1", w=12, h=9),
        # Not filtered by $switch: a switch that vanished is in no variable value, and its
        # planned cables are what this table must show.
        table("Cables not as planned",
              "Every cable of the topology file (--fabric.topology-file) that differs from the "
              "latest discovery: missing, miswired (node_found_* and remote_found_*: where each "
              "planned end really goes), downgraded below the plan's width or speed, and cables "
              "the plan lacks (unexpected).",
              'rdma_fabric_cable_status{status!="ok"} == 1', w=24, h=9),
        # Below the counters (--fabric.extended-speeds-counters and the link-health rules).
        with_baseline("Pre-FEC BER, worst switch ports",
                      "Corrected RS-FEC symbols (else FEC-corrected blocks) per bit of the line "
                      "of the 20 worst switch ports (PortExtendedSpeedsCounters), against the "
                      "threshold IbprobePreFecBerHigh fires above.",
                      f"topk(20, ibprobe:port_pre_fec_ber:rate5m{{{sw}}})",
                      'ibprobe:port_pre_fec_ber_threshold{node_guid!=""} and on (node_guid, port) '
                      f"topk(20, ibprobe:port_pre_fec_ber:rate5m{{{sw}}})", cable, "sci"),
        table("Switches without FEC counters",
              "Switches whose PMA is not asked for PortExtendedSpeedsCounters, and why: "
              "not_supported (it said so), no_answer (it answers PortCounters but not this), "
              "no_extended_speed_port (no port runs FDR or faster: nothing to ask).",
              f"rdma_fabric_fec_counters_up{{{sw}}} == 0", w=12, h=9),
        panel("timeseries", "Switch port traffic",
              "Data octets transmitted per switch port (PortXmitData x 4).",
              [target(f"topk(20, rate(rdma_port_data_transmitted_bytes_total{{{sw}}}"
                      "[$__rate_interval]))", cable)], unit="Bps"),
        panel("timeseries", "Link width and lane speed",
              "Active lanes and Gb/s per lane of each cable of the selected switches.",
              [target(f"rdma_fabric_port_link_width_lanes{{{sw}}}", "lanes " + cable, "A"),
               target(f"rdma_fabric_port_link_lane_speed_gigabits{{{sw}}}", "Gb/s " + cable,
                      "B")]),
        panel("stat", "Discovery",
              "Whether each exporter's last fabric discovery succeeded (0: it serves its last "
              "good model), and that model's age.",
              [target("ibprobe_fabric_discovery_success", "{{instance}} success", "A"),
               target("time() - ibprobe_fabric_model_timestamp_seconds", "{{instance}} age",
                      "B")], w=8),
        panel("stat", "Fabric size",
              "Nodes by type and cables in each exporter's model.",
              [target("ibprobe_fabric_nodes", "{{instance}} {{type}}", "A"),
               target("ibprobe_fabric_links", "{{instance}} cables", "B")], w=8),
        panel("timeseries", "Lost MAD queries by reason",
              "PerfMgt queries of switch ports that got no usable answer (timeout: all retries "
              "lost; budget_exceeded: the scrape's time ran out).",
              [target("sum by (instance, reason) (rate(ibprobe_fabric_mad_failures_total"
                      "[$__rate_interval]))", "{{instance}} {{reason}}")], w=8),
    ]
    return dashboard("ibprobe-switch-ports", "ibprobe / Switch ports",
                     "Every switch port of the InfiniBand fabric: errors with both cable ends, "
                     "cables below capability, missing or not as planned, discovery health.",
                     [query_var("switch", "Switch",
                                "label_values(rdma_fabric_port_state, node_description)")],
                     panels, tags=("fabric",))


def mesh():
    """The continuous probe mesh (mesh: in --config.file): the three fault levels, the heatmaps
    (loss by ToR pair, RTT by ToR and path class), per-peer loss and per-class RTT of the
    selected hosts."""
    tors = 'local_tor=~"$local_tor",peer_tor=~"$peer_tor"'
    sel = f'job="ibprobe",instance=~"$host",{tors}'
    host_sel = 'job="ibprobe",instance=~"$host",local_tor=~"$local_tor"'
    heat = {"calculate": False, "yAxis": {"axisPlacement": "left"},
            "color": {"mode": "scheme", "scheme": "Reds", "steps": 64},
            "cellGap": 1, "legend": {"show": True}, "tooltip": {"show": True, "yHistogram": False}}
    pair_legend = "{{local_tor}} to {{peer_tor}}"
    panels = [
        panel("stat", "Hosts unreachable",
              "Hosts unreachable over RDMA from most of their watchers, in their own ToR too "
              "(IbprobeMeshHostUnreachable: the host or its RNIC).",
              [target("count(ibprobe:mesh_host_unreachable == 1) or vector(0)")], w=6, h=4,
              thresholds=thresholds((1, "red"))),
        panel("stat", "ToR pairs losing pings",
              "ToR pairs where most host pairs lose pings, host faults set aside "
              "(IbprobeMeshTorPairLoss: the fabric between the two ToRs).",
              [target("count(ibprobe:mesh_tor_pair_lossy_pairs:ratio5m >= 0.5 and "
                      "ibprobe:mesh_tor_pair_lossy_pairs:count5m >= 2) or vector(0)")],
              w=6, h=4, thresholds=thresholds((1, "red"))),
        panel("stat", "Lossy host pairs",
              "Host pairs losing 5% or more of their pings that no host fault explains "
              "(IbprobeMeshPathLoss unless their ToR pair is lossy as a whole).",
              [target("count(ibprobe:mesh_pair_unexplained_loss_ratio:rate5m >= 0.05) "
                      "or vector(0)")], w=6, h=4, thresholds=thresholds((1, "orange"))),
        panel("stat", "Highest budget use",
              "The plan's ping rate over the host budget (mesh.host_budget), highest host.",
              [target("max(rdma_mesh_plan_rate_pings_per_second{job=\"ibprobe\"} / on "
                      "(instance) rdma_mesh_budget_pings_per_second{job=\"ibprobe\"})")],
              w=6, h=4, unit="percentunit", max=1),
        panel("heatmap", "Loss by ToR pair",
              "Share of mesh pings lost per (local ToR, remote ToR), all host pairs together.",
              [target(f"ibprobe:mesh_tor_pair_loss_ratio:rate5m{{{tors}}}", pair_legend)],
              w=12, h=10, unit="percentunit", options=heat),
        panel("heatmap", "RTT p99 by ToR and path class",
              "0.99 quantile of the mesh RTT per local ToR, to its own ToR (same_tor) and to the "
              "others (cross_tor), responder turnaround subtracted. The exporters keep RTT "
              "histograms per path class, not per peer (mesh.per_peer_rtt adds those).",
              [target("ibprobe:mesh_tor_class_rtt_seconds:p99_5m{local_tor=~\"$local_tor\"}",
                      "{{local_tor}} {{reason}}")],
              w=12, h=10, unit="s", options=heat),
        table("Unreachable hosts",
              "Hosts and the share of their watchers that lose pings to them.",
              "ibprobe:mesh_peer_lossy_watchers:ratio5m and on (peer_instance, peer_tor) "
              "(ibprobe:mesh_host_unreachable == 1)", w=8),
        table("Lossy ToR pairs",
              "Share of host pairs losing pings per ToR pair, host faults set aside.",
              "ibprobe:mesh_tor_pair_lossy_pairs:ratio5m > 0", w=8),
        table("Lossy host pairs",
              "Pairs losing pings that no host fault explains, worst first.",
              "sort_desc(ibprobe:mesh_pair_unexplained_loss_ratio:rate5m > 0)", w=8),
        panel("timeseries", "RTT percentiles of the selected hosts",
              "Median and 0.99 quantile over the pings of the selected hosts, to their own ToR "
              "(same_tor) and to others (cross_tor), from the path classes' histograms.",
              [target("histogram_quantile(0.5, sum by (reason, le) "
                      f"(rate(rdma_mesh_class_rtt_seconds_bucket{{{host_sel}}}[$__rate_interval])))",
                      "median {{reason}}", "A"),
               target("histogram_quantile(0.99, sum by (reason, le) "
                      f"(rate(rdma_mesh_class_rtt_seconds_bucket{{{host_sel}}}[$__rate_interval])))",
                      "p99 {{reason}}", "B")], unit="s"),
        panel("timeseries", "Loss per host pair",
              "Share of pings lost from the selected hosts to each of their peers.",
              [target(f"sum by (instance, peer) "
                      f"(rate(rdma_mesh_pings_lost_total{{{sel}}}[$__rate_interval])) / "
                      f"sum by (instance, peer) "
                      f"(rate(rdma_mesh_pings_sent_total{{{sel}}}[$__rate_interval]))",
                      "{{instance}} to {{peer}}")], unit="percentunit"),
        panel("timeseries", "Plan size",
              "Peers in each selected host's current plan, same ToR and cross ToR.",
              [target(f"rdma_mesh_plan_peers{{job=\"ibprobe\",instance=~\"$host\"}}",
                      "{{instance}} {{reason}}")], stack=True),
        panel("timeseries", "Ping rate and budget",
              "Pings per second each selected host's plan sends, and its budget.",
              [target("rdma_mesh_plan_rate_pings_per_second{job=\"ibprobe\",instance=~\"$host\"}",
                      "{{instance}}", "A"),
               target("rdma_mesh_budget_pings_per_second{job=\"ibprobe\",instance=~\"$host\"}",
                      "{{instance}} budget", "B")]),
    ]
    return dashboard("ibprobe-mesh", "ibprobe / Probe mesh",
                     "Continuous RDMA ping mesh between ibprobe exporters: host vs ToR pair vs "
                     "path, heatmaps of loss by ToR pair and RTT by ToR and path class, per-peer "
                     "loss and RTT.",
                     [query_var("host", "Host",
                                'label_values(rdma_mesh_plan_peers{job="ibprobe"}, instance)'),
                      query_var("local_tor", "Local ToR",
                                'label_values(rdma_mesh_pings_sent_total{job="ibprobe"}, local_tor)'),
                      query_var("peer_tor", "Remote ToR",
                                'label_values(rdma_mesh_pings_sent_total{job="ibprobe"}, peer_tor)')],
                     panels, tags=("mesh",))


DASHBOARDS = {
    "ibprobe-fabric-overview.json": fabric_overview,
    "ibprobe-error-counters.json": error_counters,
    "ibprobe-port-detail.json": port_detail,
    "ibprobe-probes.json": probes,
    "ibprobe-switch-ports.json": switch_ports,
    "ibprobe-mesh.json": mesh,
}


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
    for name, build in DASHBOARDS.items():
        with open(os.path.join(out, name), "w") as f:
            json.dump(build(), f, indent=2)
            f.write("\n")


if __name__ == "__main__":
    main()
