#!/usr/bin/env bash
# The deployment files as a newcomer uses them: `cmake --install` into a staging root puts the
# binaries, the systemd unit, the defaults and the monitoring files where docs/deployment.md says; the
# installed unit passes systemd-analyze verify and its security review; the installed exporter
# starts with the installed defaults and probe configuration; the example prometheus.yml is
# valid and carries exactly the shipped scrape jobs; the Kubernetes manifests hang together
# (selectors, ports, mounts, hardening) and carry the shipped probe configuration and rules.
# Usage: check_deploy.sh BUILD_DIR INSTALL_PREFIX FIXTURE_BINARY
set -euo pipefail

build=$1
prefix=$2
fixture=$3
root_dir=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/../.." && pwd)
# shellcheck source=tests/lib/scratch.sh
source "$root_dir/tests/lib/scratch.sh"
scratch_begin ibprobe-deploy

fail() {
  echo "FAIL: $*" >&2
  exit 1
}

stage=$work/root
DESTDIR=$stage cmake --install "$build" >"$work/install.log" 2>&1 ||
  fail "cmake --install: $(tail -5 "$work/install.log")"
# /etc for the usual prefixes, PREFIX/etc otherwise (deploy/CMakeLists.txt).
etc=/etc
[[ $prefix =~ ^/usr(/local)?$ ]] || etc=$prefix/etc
for file in "$prefix/bin/ibprobe_exporter" "$prefix/bin/ibprobe_probe" \
  "$prefix/lib/systemd/system/ibprobe-exporter.service" "$etc/default/ibprobe-exporter" \
  "$etc/ibprobe/ibprobe.yml" "$prefix/share/ibprobe/prometheus/ibprobe-alerts.rules.yml" \
  "$prefix/share/ibprobe/prometheus/ibprobe-recording.rules.yml" \
  "$prefix/share/ibprobe/prometheus/scrape-ibprobe-probes.yml" \
  "$prefix/share/ibprobe/examples/prometheus.yml" \
  "$prefix/share/ibprobe/examples/alertmanager.yml" \
  "$prefix/share/ibprobe/kubernetes/ibprobe.yaml"; do
  [[ -s $stage$file ]] || fail "cmake --install did not install $file"
done
dashboards=$(find "$stage$prefix/share/ibprobe/grafana" -name 'ibprobe-*.json' | wc -l)
((dashboards == 6)) || fail "$dashboards dashboards installed, want 6"
echo "install: binaries, unit, defaults, probe config, rules, scrape configs, $dashboards dashboards"

unit=$stage$prefix/lib/systemd/system/ibprobe-exporter.service
grep -qx "ExecStart=$prefix/bin/ibprobe_exporter \$ARGS" "$unit" ||
  fail "unit does not start the installed binary: $(grep ExecStart "$unit")"
grep -qx "EnvironmentFile=-$etc/default/ibprobe-exporter" "$unit" ||
  fail "unit does not read the installed defaults: $(grep EnvironmentFile "$unit")"
# verify resolves ExecStart on the real root: point it at the staged binary for the check.
sed "s|^ExecStart=$prefix/bin/|ExecStart=$stage$prefix/bin/|" "$unit" >"$work/ibprobe-exporter.service"
verify=$(systemd-analyze verify "$work/ibprobe-exporter.service" 2>&1) ||
  fail "systemd-analyze verify: $verify"
[[ -z $verify ]] || fail "systemd-analyze verify reported: $verify"
# Exposure 0.0 (locked down) to 10.0 (unsafe); the unit must stay in the "OK" band.
security=$(systemd-analyze security --offline=yes --threshold=25 "$work/ibprobe-exporter.service" 2>&1) ||
  fail "systemd-analyze security above 2.5: $(tail -n 1 <<<"$security")"
echo "systemd: verify clean, $(tail -n 1 <<<"$security" | sed 's/.*exposure level for //')"

# The installed exporter with the installed defaults and probe configuration.
"$fixture" "$work/sys" >/dev/null
# shellcheck disable=SC1090  # the installed defaults file
ARGS=$(source "$stage$etc/default/ibprobe-exporter" && echo "$ARGS")
[[ $ARGS == *"--config.file=$etc/ibprobe/ibprobe.yml"* ]] ||
  fail "defaults do not name the installed probe config: $ARGS"
port=$(free_port)
read -ra defaults <<<"${ARGS//$etc\//$stage$etc/}"
args=()
for arg in "${defaults[@]}"; do  # the test listens on a free loopback port instead
  [[ $arg == --web.listen-address=* ]] || args+=("$arg")
done
"$stage$prefix/bin/ibprobe_exporter" "${args[@]}" --web.listen-address="127.0.0.1:$port" \
  --probe.responder-address=127.0.0.1:0 --path.sysfs="$work/sys" 2>"$work/exporter.log" &
pids+=($!)
deadline=$((SECONDS + 20))
until curl -fsS -o /dev/null "http://127.0.0.1:$port/-/ready" 2>/dev/null; do
  kill -0 "${pids[-1]}" 2>/dev/null || fail "exporter exited: $(cat "$work/exporter.log")"
  ((SECONDS < deadline)) || fail "exporter not ready: $(cat "$work/exporter.log")"
  sleep 0.2
done
reload=$(curl -fsS -XPOST "http://127.0.0.1:$port/-/reload") || fail "POST /-/reload failed"
python3 - "$reload" "$stage$etc/ibprobe/ibprobe.yml" <<'PY' || fail "reload did not load the shipped modules"
import json, sys, yaml
got = sorted(json.loads(sys.argv[1])["modules"])
want = sorted(yaml.safe_load(open(sys.argv[2]))["modules"])
print(f"exporter: installed defaults and probe config accepted, modules {got}")
sys.exit(got != want)
PY

# The example alertmanager.yml routes ibprobe's alerts to an exporter's alert receiver.
amtool check-config "$stage$prefix/share/ibprobe/examples/alertmanager.yml" >"$work/amtool.log" 2>&1 ||
  fail "amtool check-config on the example alertmanager.yml: $(cat "$work/amtool.log")"
grep -q '/api/v1/alerts' "$stage$prefix/share/ibprobe/examples/alertmanager.yml" ||
  fail "the example alertmanager.yml sends nothing to the alert receiver"
# An alert goes to the receiver and to people; a verdict the receiver pushed back goes to people
# only (to the receiver it would be dropped as no_rule, once per verdict).
route_of() { # ALERTNAME
  amtool config routes test --config.file="$stage$prefix/share/ibprobe/examples/alertmanager.yml" \
    "alertname=$1" 2>/dev/null
}
[[ $(route_of IbprobeRetransmissions) == "ibprobe-probes,oncall" ]] ||
  fail "IbprobeRetransmissions routes to '$(route_of IbprobeRetransmissions)', not the receiver and people"
[[ $(route_of IbprobeProbeVerdict) == "oncall" ]] ||
  fail "IbprobeProbeVerdict routes to '$(route_of IbprobeProbeVerdict)': a verdict goes to people only"

# The example prometheus.yml: valid with the rules beside it, and the shipped jobs verbatim.
cp "$root_dir"/dashboards/prometheus/*.rules.yml "$root_dir/deploy/config/prometheus.yml" "$work/"
promtool check config "$work/prometheus.yml" >"$work/promtool.log" 2>&1 ||
  fail "promtool check config deploy/config/prometheus.yml: $(cat "$work/promtool.log")"
for f in "$root_dir"/dashboards/prometheus/scrape-*.yml; do
  promtool check config "$f" >"$work/promtool.log" 2>&1 ||
    fail "promtool check config $f: $(cat "$work/promtool.log")"
done

python3 - "$root_dir" <<'PY'
import glob, os, sys, yaml
root = sys.argv[1]
problems = []

def load(path):
    with open(os.path.join(root, path)) as f:
        return yaml.safe_load(f)

shipped_jobs = []
for path in sorted(glob.glob(os.path.join(root, "dashboards/prometheus/scrape-*.yml"))):
    shipped_jobs += yaml.safe_load(open(path))["scrape_configs"]
example = load("deploy/config/prometheus.yml")
key = lambda j: j["job_name"]
if sorted(example["scrape_configs"], key=key) != sorted(shipped_jobs, key=key):
    problems.append("deploy/config/prometheus.yml: scrape_configs differ from dashboards/prometheus/scrape-*.yml")
for job in shipped_jobs:
    if job["job_name"] != "ibprobe" and not job["job_name"].startswith(("ibprobe_probe_", "ibprobe_fabric")):
        problems.append(f"job {job['job_name']}: rules and dashboards expect ibprobe, ibprobe_probe_* or ibprobe_fabric*")
    if job.get("metrics_path") == "/probe":
        interval, timeout = (int(job[k][:-1]) * {"s": 1, "m": 60}[job[k][-1]]
                             for k in ("scrape_interval", "scrape_timeout"))
        if timeout >= interval:
            problems.append(f"job {job['job_name']}: a probe may run into the next one")

probe_config = load("deploy/config/ibprobe.yml")
docs = {d["kind"]: d for d in yaml.safe_load_all(open(os.path.join(root, "deploy/kubernetes/ibprobe.yaml")))}
for kind in ("Namespace", "ConfigMap", "DaemonSet", "Service", "ServiceMonitor"):
    if kind not in docs:
        problems.append(f"kubernetes: no {kind}")
ds, svc, sm, cm = docs["DaemonSet"], docs["Service"], docs["ServiceMonitor"], docs["ConfigMap"]
namespaces = {d["metadata"].get("namespace") for d in docs.values() if d["kind"] != "Namespace"}
if namespaces != {docs["Namespace"]["metadata"]["name"]}:
    problems.append(f"kubernetes: objects spread over namespaces {namespaces}")
if yaml.safe_load(cm["data"]["ibprobe.yml"]) != probe_config:
    problems.append("kubernetes ConfigMap ibprobe.yml differs from deploy/config/ibprobe.yml")
pod = ds["spec"]["template"]
pod_labels = pod["metadata"]["labels"]
if ds["spec"]["selector"]["matchLabels"].items() - pod_labels.items():
    problems.append("DaemonSet selector does not match its pods")
if svc["spec"]["selector"].items() - pod_labels.items():
    problems.append("Service selector does not match the DaemonSet's pods")
if sm["spec"]["selector"]["matchLabels"].items() - svc["metadata"]["labels"].items():
    problems.append("ServiceMonitor selector does not match the Service")
if svc["metadata"]["name"] != "ibprobe":
    problems.append("Service must be named ibprobe: it becomes the job label the rules select")
(container,) = pod["spec"]["containers"]
port_names = {p["name"] for p in container["ports"]}
for p in svc["spec"]["ports"]:
    if p["targetPort"] not in port_names:
        problems.append(f"Service port {p['name']} targets unknown container port {p['targetPort']}")
for e in sm["spec"]["endpoints"]:
    if e["port"] not in {p["name"] for p in svc["spec"]["ports"]}:
        problems.append(f"ServiceMonitor endpoint port {e['port']} not on the Service")
if not pod["spec"].get("hostNetwork"):
    problems.append("DaemonSet needs hostNetwork: peers probe node addresses")
sc = container["securityContext"]
if sc.get("privileged") or not sc.get("readOnlyRootFilesystem") or \
        sc.get("allowPrivilegeEscalation") is not False or sc["capabilities"]["drop"] != ["ALL"] or \
        set(sc["capabilities"].get("add", [])) - {"IPC_LOCK"}:
    problems.append(f"container securityContext not hardened: {sc}")
if not any(k.startswith("rdma/") for k in container["resources"]["limits"]):
    problems.append("container requests no RDMA device resource: it would see no /dev/infiniband")
mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
args = dict(a[2:].split("=", 1) for a in container["args"])
config_dir = os.path.dirname(args["config.file"])
if config_dir not in mounts or volumes[mounts[config_dir]["name"]].get("configMap", {}).get("name") \
        != cm["metadata"]["name"]:
    problems.append("--config.file is not on the ConfigMap's mount")
if args["path.sysfs"] not in mounts or not mounts[args["path.sysfs"]].get("readOnly") or \
        volumes[mounts[args["path.sysfs"]]["name"]]["hostPath"]["path"] != "/sys":
    problems.append("--path.sysfs is not the host's /sys mounted read-only")
for probe in ("readinessProbe", "livenessProbe"):
    if container[probe]["httpGet"]["port"] not in port_names:
        problems.append(f"{probe} on an unknown port")

rules = load("deploy/kubernetes/prometheusrule.yaml")
shipped_groups = []
for path in sorted(glob.glob(os.path.join(root, "dashboards/prometheus/*.rules.yml"))):
    shipped_groups += yaml.safe_load(open(path))["groups"]
names = [g["name"] for g in shipped_groups]
if len(set(names)) != len(names):
    problems.append(f"rule group names repeat across files ({names}): one PrometheusRule needs them unique")
elif sorted(rules["spec"]["groups"], key=lambda g: g["name"]) != sorted(shipped_groups, key=lambda g: g["name"]):
    problems.append("deploy/kubernetes/prometheusrule.yaml differs from the rules: run "
                    "deploy/kubernetes/generate-prometheusrule.py")
kustomization = load("deploy/kubernetes/kustomization.yaml")
for resource in kustomization["resources"]:
    if not os.path.exists(os.path.join(root, "deploy/kubernetes", resource)):
        problems.append(f"kustomization names missing {resource}")
for path in glob.glob(os.path.join(root, "deploy/config/grafana/*.yml")):
    if yaml.safe_load(open(path)).get("apiVersion") != 1:
        problems.append(f"{path}: not a Grafana provisioning file")

for p in problems:
    print("FAIL", p)
if problems:
    sys.exit(1)
print("configs: example prometheus.yml = shipped jobs; kubernetes manifests consistent, "
      "ConfigMap = deploy/config/ibprobe.yml, PrometheusRule = shipped rules")
PY
