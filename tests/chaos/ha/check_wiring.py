#!/usr/bin/env python3
"""Asserts the HA wiring of the rendered Kubernetes assets.

Usage: check_wiring.py [--objects GARAGE] RENDERED_CHART CNPG_CLUSTER LOADGEN_JOB PLAN_JSON SETTLE_SECONDS [CHAOS...]
       check_wiring.py --self-test ...same arguments...
LOADGEN_JOB and PLAN_JSON are what `vfps-chaos kind render` writes; the
load window is recomputed here from the plan's durations and margin.
CHAOS are the Chaos Mesh objects the driver applies: each label selector must
select the pods it is meant for (vfps's API pods, or CloudNativePG's instance
pods) and none of the other pods those labels appear on.
GARAGE is the object store's manifest as the driver applies it: one node per
zone holding every object, its volume and RPC secret, and vfps's S3 settings
naming its Service, port and region, the credentials from a Secret. A plan
that faults CSV jobs or their store has the load Job submit jobs, and no
NetworkPolicy keeps the Job's pod from the store its presigned URLs name.
The self-test feeds the checker broken copies and requires each to be caught.
"""
import copy
import json
import re
import sys

import yaml


def load_all(path):
    with open(path) as f:
        return [d for d in yaml.safe_load_all(f) if d]


def find(docs, kind, name_part=""):
    for d in docs:
        if d.get("kind") == kind and name_part in d["metadata"]["name"]:
            return d
    return None


def env_of(container):
    return {e["name"]: e.get("value") for e in container.get("env", [])}


def check(chart, cnpg, job_docs, load_seconds, settle_seconds):
    problems = []
    dep = find(chart, "Deployment")
    if dep is None:
        return ["no Deployment rendered"]
    spec = dep["spec"]["template"]["spec"]
    tsc = spec.get("topologySpreadConstraints") or []
    if not any(c.get("topologyKey") == "topology.kubernetes.io/zone" for c in tsc):
        problems.append("no zone topologySpreadConstraint rendered")
    pdb = find(chart, "PodDisruptionBudget")
    if pdb is None or pdb["spec"].get("maxUnavailable") != 1:
        problems.append("PodDisruptionBudget with maxUnavailable 1 missing")
    container = spec["containers"][0]
    grace = spec.get("terminationGracePeriodSeconds", 30)
    pre_stop = container.get("lifecycle", {}).get("preStop", {}).get("sleep", {}).get("seconds", 0)
    if not pre_stop < grace:
        problems.append(f"preStop sleep {pre_stop}s is not below the grace period {grace}s")
    env = env_of(container)
    shutdown = int(str(env.get("VFPS_SHUTDOWN_TIMEOUT", "0s")).rstrip("s"))
    if not shutdown < grace:
        problems.append(f"server shutdown timeout {shutdown}s is not below the grace period {grace}s")
    cs = env.get("ConnectionStrings__PostgreSQL") or ""
    pool = re.search(r"Maximum Pool Size=(\d+)", cs)
    replicas = dep["spec"]["replicas"]
    max_conn = int(cnpg["spec"]["postgresql"]["parameters"]["max_connections"])
    if pool is None or int(pool.group(1)) * replicas > max_conn:
        problems.append(f"pool x replicas exceeds max_connections {max_conn} ({cs!r}, {replicas} replicas)")
    host = re.search(r"Host=([^;]+)", cs)
    if host is None or not host.group(1).split(":")[0].endswith("-rw"):
        problems.append(f"the database host is not the -rw Service: {cs!r}")
    user = re.search(r"Username=([^;]+)", cs)
    owner = cnpg["spec"]["bootstrap"]["initdb"]["owner"]
    if user is None or user.group(1) != owner:
        problems.append(f"database username {user and user.group(1)!r} differs from the initdb owner {owner!r}")
    sync = cnpg["spec"]["postgresql"].get("synchronous", {})
    if (sync.get("method"), sync.get("number"), sync.get("dataDurability")) != ("any", 1, "required"):
        problems.append(f"CNPG synchronous replication is not ANY 1 with required durability: {sync}")
    # CloudNativePG 1.27 takes the failover quorum as an annotation (the field
    # spec.postgresql.synchronous.failoverQuorum arrives in 1.28); the webhook
    # parses it with strconv.ParseBool, so it is the string "true".
    quorum = (cnpg["metadata"].get("annotations") or {}).get("alpha.cnpg.io/failoverQuorum")
    if quorum != "true":
        problems.append(f"the failover quorum is not on (annotation alpha.cnpg.io/failoverQuorum: {quorum!r})")
    job = find(job_docs, "Job")
    jspec = job["spec"]
    pod = jspec["template"]["spec"]
    if "node-role.kubernetes.io/control-plane" not in (pod.get("nodeSelector") or {}):
        problems.append("the load generator Job is not pinned to the control-plane node")
    if jspec.get("backoffLimit") != 0:
        problems.append("the load generator Job must not retry (backoffLimit 0)")
    jenv = env_of(pod["containers"][0])
    if int(jenv.get("RESILIENCE_LOAD_SECONDS", -1)) != load_seconds:
        problems.append(f"load window {jenv.get('RESILIENCE_LOAD_SECONDS')} differs from the scenario durations plus margin {load_seconds}")
    if int(jspec.get("activeDeadlineSeconds", 0)) < load_seconds + settle_seconds:
        problems.append("the Job deadline is shorter than load + settle")
    if "dns:///" not in jenv.get("VFPS_GRPC_ADDRESS", ""):
        problems.append("the load generator does not use client-side load balancing (dns:///)")
    if PLAN_SEED is not None and jenv.get("RESILIENCE_SEED") != str(PLAN_SEED):
        problems.append(f"the Job's seed {jenv.get('RESILIENCE_SEED')!r} is not the plan's {PLAN_SEED}: one seed must replay both")
    rows = jenv.get("RESILIENCE_JOB_ROWS")
    if rows is None or not rows.isdigit():
        problems.append(f"the load generator's RESILIENCE_JOB_ROWS {rows!r} is not a number of rows")
    elif JOB_FAULTS & set(PLAN_KINDS) and int(rows) == 0:
        problems.append(f"the plan faults CSV jobs ({sorted(JOB_FAULTS & set(PLAN_KINDS))}) but the load submits none (RESILIENCE_JOB_ROWS 0)")
    # The MII side (P8) runs as on the local platform: every one of its
    # operations weighed, its FHIR calls through the vfps Service's HTTP port.
    mix = dict(p.split("=", 1) for p in (jenv.get("RESILIENCE_MIX") or "").split(",") if "=" in p)
    unweighed = [op for op in MII_OPERATIONS if not mix.get(op, "0").isdigit() or int(mix.get(op, "0")) == 0]
    if unweighed:
        problems.append(f"the load generator's mix {jenv.get('RESILIENCE_MIX')!r} leaves out {unweighed}: no P8 on kind")
    if not (jenv.get("RESILIENCE_HTTP_ADDRESS") or "").startswith("http://vfps.vfps.svc"):
        problems.append(f"the load generator's RESILIENCE_HTTP_ADDRESS {jenv.get('RESILIENCE_HTTP_ADDRESS')!r} is not the vfps Service")
    return problems


# The operations of the MII interface in the mix (erasure, Bundles: P8).
MII_OPERATIONS = ["mii", "bundle", "erase"]


# Scenarios that prove nothing without CSV jobs beside the load.
JOB_FAULTS = {"vfps-job-runner-kill", "vfps-job-runner-pause", "objects-node-kill"}


PLAN_SEED = None
PLAN_KINDS = []
CHAOS = []
OBJECTS = []


def toml_value(text, key):
    """A top-level or section value of garage.toml, as written there (a string unquoted)."""
    for line in text.splitlines():
        k, _, v = line.partition("=")
        if k.strip() == key:
            return v.strip().strip('"')
    return None


def check_objects(chart, garage):
    """The object store is three nodes, one per zone, every object on each, a
    node that is killed keeps its identity (a volume), the RPC secret comes from
    a Secret; vfps talks to its Service's S3 port in its region, with the
    credentials from a Secret."""
    problems = []
    sts, conf = find(garage, "StatefulSet"), find(garage, "ConfigMap")
    services = {d["metadata"]["name"]: d for d in garage if d["kind"] == "Service"}
    if sts is None or conf is None:
        return ["the object store has no StatefulSet or ConfigMap"]
    spec = sts["spec"]
    pod = spec["template"]["spec"]
    toml = next(iter(conf["data"].values()))
    if spec.get("replicas") != 3 or toml_value(toml, "replication_factor") != "3":
        problems.append("the object store is not three nodes with every object on each (replication_factor 3)")
    spread = [c for c in pod.get("topologySpreadConstraints") or []
              if c.get("topologyKey") == "topology.kubernetes.io/zone" and c.get("maxSkew") == 1
              and c.get("whenUnsatisfiable") == "DoNotSchedule"]
    if not spread:
        problems.append("the object store's nodes are not spread one per zone (DoNotSchedule)")
    if not spec.get("volumeClaimTemplates"):
        problems.append("the object store's nodes keep no volume: a killed node would come back as a stranger to the layout")
    genv = {e["name"]: e for e in pod["containers"][0].get("env", [])}
    rpc = genv.get("GARAGE_RPC_SECRET", {})
    if "value" in rpc or "secretKeyRef" not in rpc.get("valueFrom", {}) or "rpc_secret" in toml:
        problems.append("the object store's RPC secret is not taken from a Secret")
    container = find(chart, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    venv = {e["name"]: e for e in container.get("env", [])}
    value = lambda k: venv.get(k, {}).get("value")
    if value("S3__IsEnabled") != "true":
        return problems + ["vfps's CSV jobs do not use the object store (S3__IsEnabled)"]
    url = re.match(r"^https?://([^.:/]+)(?:\.([^.:/]+)\.svc[^:/]*)?:(\d+)$", value("S3__ServiceUrl") or "")
    svc = url and services.get(url.group(1))
    ports = [p["port"] for p in (svc or {}).get("spec", {}).get("ports", [])]
    if not url or not svc or url.group(2) != svc["metadata"]["namespace"] or int(url.group(3)) not in ports \
            or svc["spec"].get("clusterIP") == "None":
        problems.append(f"S3__ServiceUrl {value('S3__ServiceUrl')!r} is not the object store's Service, namespace and port")
    if value("S3__Region") != toml_value(toml, "s3_region"):
        problems.append(f"S3__Region {value('S3__Region')!r} is not the store's s3_region {toml_value(toml, 's3_region')!r}")
    for key in ("S3__AccessKey", "S3__SecretKey"):
        if "secretKeyRef" not in venv.get(key, {}).get("valueFrom", {}):
            problems.append(f"{key} does not come from a Secret")
    problems += check_store_reachable(chart + garage, sts)
    return problems


def check_store_reachable(docs, sts):
    """The load Job's pod follows presigned URLs to the store's S3 port: a
    NetworkPolicy selecting the store's pods for ingress must admit the load
    generator's namespace (an empty ingress rule admits everyone)."""
    problems = []
    labels = sts["spec"]["template"]["metadata"]["labels"]
    ns = sts["metadata"]["namespace"]
    for pol in (d for d in docs if d.get("kind") == "NetworkPolicy"):
        spec = pol["spec"]
        if pol["metadata"].get("namespace", ns) != ns:
            continue
        sel = (spec.get("podSelector") or {}).get("matchLabels") or {}
        if not all(labels.get(k) == v for k, v in sel.items()):
            continue
        if "Ingress" not in spec.get("policyTypes", ["Ingress"]):
            continue
        loadgen = {"kubernetes.io/metadata.name": LOADGEN_NAMESPACE}
        def admits_peer(p):
            # Only a namespaceSelector reaches another namespace; any pod
            # there (an empty podSelector) and labels the namespace has.
            ns_sel = p.get("namespaceSelector")
            if ns_sel is None or "ipBlock" in p or (p.get("podSelector") or {}) != {}:
                return False
            return not ns_sel.get("matchExpressions") and \
                all(loadgen.get(k) == v for k, v in (ns_sel.get("matchLabels") or {}).items())
        def admits(rule):
            peers = rule.get("from")
            return not peers or any(admits_peer(p) for p in peers)
        if not any(admits(r) for r in spec.get("ingress") or []):
            problems.append(f"NetworkPolicy {pol['metadata']['name']} keeps the load generator ({LOADGEN_NAMESPACE}) "
                            "from the object store its jobs' presigned URLs name")
    return problems


LOADGEN_NAMESPACE = "vfps-loadgen"


def cnpg_pods(cnpg):
    """The labels of the pods CloudNativePG 1.27.1 makes for a Cluster: its
    instances (pkg/specs/pods.go, and the role from SetInstanceRole in
    pkg/utils/labels_annotations.go) and its Jobs' pods (pkg/specs/jobs.go:
    initdb, join, ...; deleted only once the cluster is healthy)."""
    name = cnpg["metadata"]["name"]
    instances = [{"cnpg.io/cluster": name, "cnpg.io/instanceName": f"{name}-{i}", "cnpg.io/podRole": "instance",
                  "cnpg.io/instanceRole": role, "role": role}
                 for i, role in ((1, "primary"), (2, "replica"), (3, "replica"))]
    jobs = [{"cnpg.io/cluster": name, "cnpg.io/instanceName": f"{name}-{i}", "cnpg.io/jobRole": role}
            for i, role in ((1, "initdb"), (2, "join"), (3, "join"))]
    return instances, jobs


def selectors(doc):
    """(where, labelSelectors) of a chaos object's pod selectors."""
    spec = doc["spec"]
    for kind in ("podChaos", "networkChaos"):
        spec = spec.get(kind, spec)
    found = []
    for where, sel in (("selector", spec.get("selector")), ("target", (spec.get("target") or {}).get("selector"))):
        if sel and sel.get("labelSelectors"):
            found.append((where, sel["labelSelectors"]))
    return found


def check_selectors(chart, cnpg, chaos_docs):
    """Every label selector selects some of vfps's API pods or CloudNativePG's
    instance pods, and no other pod carrying those labels: a chaos object that
    also selects a finished Job's pod or a helm test pod waits for an injection
    that cannot happen there (Chaos Mesh 2.7.2 filters no pod phase by default),
    or kills the wrong pod."""
    problems = []
    api = find(chart, "Deployment")["spec"]["template"]["metadata"]["labels"]
    others = [d["spec"]["template"]["metadata"]["labels"] for d in chart if d["kind"] == "Job"]
    others += [d["metadata"]["labels"] for d in chart if d["kind"] == "Pod"]
    instances, jobs = cnpg_pods(cnpg)
    def matches(sel, labels):
        return all(labels.get(k) == v for k, v in sel.items())
    for doc in chaos_docs:
        for where, sel in selectors(doc):
            name = f"{doc['kind']} {doc['metadata']['name']} {where}"
            if not any(matches(sel, p) for p in [api] + instances):
                problems.append(f"{name} {sel} selects neither vfps's API pods nor a database instance")
            wrong = [p for p in others + jobs if matches(sel, p)]
            if wrong:
                problems.append(f"{name} {sel} also selects pods labelled {wrong}")
    return problems


def self_test(args):
    chart, cnpg, job = args
    base = check(chart, cnpg, job, *LOADS)
    assert not base, f"the real assets must pass before mutating them: {base}"

    def broken(mutate):
        c, n, j = copy.deepcopy(chart), copy.deepcopy(cnpg), copy.deepcopy(job)
        mutate(c, n, j)
        return check(c, n, j, *LOADS)

    def dep(c):
        return find(c, "Deployment")["spec"]

    def env(c):
        return find(c, "Deployment")["spec"]["template"]["spec"]["containers"][0]["env"]

    def set_cs(c, f):
        for e in env(c):
            if e["name"] == "ConnectionStrings__PostgreSQL":
                e["value"] = f(e["value"])

    cases = {
        "ro host": lambda c, n, j: set_cs(c, lambda v: v.replace("vfps-db-rw", "vfps-db-ro")),
        "too many replicas": lambda c, n, j: dep(c).__setitem__("replicas", 9),
        "other owner": lambda c, n, j: n["spec"]["bootstrap"]["initdb"].__setitem__("owner", "app"),
        "no spread": lambda c, n, j: dep(c)["template"]["spec"].pop("topologySpreadConstraints"),
        "async": lambda c, n, j: n["spec"]["postgresql"].pop("synchronous"),
        "no failover quorum": lambda c, n, j: n["metadata"]["annotations"].pop("alpha.cnpg.io/failoverQuorum"),
        "unpinned job": lambda c, n, j: find(j, "Job")["spec"]["template"]["spec"].pop("nodeSelector"),
        "long preStop": lambda c, n, j: dep(c)["template"]["spec"]["containers"][0]["lifecycle"]["preStop"]["sleep"].__setitem__("seconds", 99),
    }
    def set_job_env(j, name, value):
        for e in find(j, "Job")["spec"]["template"]["spec"]["containers"][0]["env"]:
            if e["name"] == name:
                e["value"] = value

    cases["load window off by one"] = lambda c, n, j: set_job_env(j, "RESILIENCE_LOAD_SECONDS", str(LOADS[0] + 1))
    cases["short Job deadline"] = lambda c, n, j: find(j, "Job")["spec"].__setitem__("activeDeadlineSeconds", LOADS[0])
    cases["another seed"] = lambda c, n, j: set_job_env(j, "RESILIENCE_SEED", str((PLAN_SEED or 0) + 1))
    cases["no job rows"] = lambda c, n, j: set_job_env(j, "RESILIENCE_JOB_ROWS", "")
    cases["no erasures in the mix"] = lambda c, n, j: set_job_env(j, "RESILIENCE_MIX", "create=60,get=14,mii=4,bundle=1")
    cases["FHIR calls to no address"] = lambda c, n, j: set_job_env(j, "RESILIENCE_HTTP_ADDRESS", "")
    if JOB_FAULTS & set(PLAN_KINDS):
        cases["no CSV jobs though the plan faults them"] = lambda c, n, j: set_job_env(j, "RESILIENCE_JOB_ROWS", "0")
    for name, mutate in cases.items():
        assert broken(mutate), f"the checker missed: {name}"
    caught = len(cases)
    if CHAOS:
        assert not check_selectors(chart, cnpg, CHAOS), "the real chaos objects must pass before mutating them"
        def loosened(label, kind):
            docs = copy.deepcopy(CHAOS)
            for d in docs:
                for _, sel in selectors(d):
                    if label in sel:
                        sel.pop(kind, None)
            return check_selectors(chart, cnpg, docs)
        selector_cases = {
            "vfps pods by name only (the helm test pod too)": loosened("app.kubernetes.io/name", "app.kubernetes.io/component"),
            "database pods by cluster only (its Jobs' pods too)": loosened("cnpg.io/podRole", "cnpg.io/podRole"),
        }
        for name, found in selector_cases.items():
            assert found, f"the checker missed: {name}"
        caught += len(selector_cases)
    if OBJECTS:
        assert not check_objects(chart, OBJECTS), "the real object store must pass before mutating it"
        def objects_broken(mutate):
            c, g = copy.deepcopy(chart), copy.deepcopy(OBJECTS)
            mutate(c, g)
            return check_objects(c, g)
        sts = lambda g: find(g, "StatefulSet")["spec"]
        def venv(c, name, value):
            for e in find(c, "Deployment")["spec"]["template"]["spec"]["containers"][0]["env"]:
                if e["name"] == name:
                    e.clear()
                    e.update({"name": name, "value": value})
        def plain_rpc(g):
            sts(g)["template"]["spec"]["containers"][0]["env"][0] = {"name": "GARAGE_RPC_SECRET", "value": "00" * 32}
        objects_cases = {
            "two nodes": lambda c, g: sts(g).__setitem__("replicas", 2),
            "no zone spread": lambda c, g: sts(g)["template"]["spec"].pop("topologySpreadConstraints"),
            "no volume": lambda c, g: sts(g).pop("volumeClaimTemplates"),
            "RPC secret in plain": lambda c, g: plain_rpc(g),
            "another region": lambda c, g: venv(c, "S3__Region", "us-east-1"),
            "another port": lambda c, g: venv(c, "S3__ServiceUrl", "http://garage.vfps.svc:9000"),
            "the headless Service": lambda c, g: venv(c, "S3__ServiceUrl", "http://garage-headless.vfps.svc:3901"),
            "secret key in plain": lambda c, g: venv(c, "S3__SecretKey", "plain"),
            "the store closed to the load generator": lambda c, g: g.append({
                "kind": "NetworkPolicy", "metadata": {"name": "garage-deny", "namespace": "vfps"},
                "spec": {"podSelector": {"matchLabels": {"app.kubernetes.io/name": "garage"}},
                         "policyTypes": ["Ingress"],
                         "ingress": [{"from": [{"podSelector": {"matchLabels": {"app.kubernetes.io/name": "vfps"}}}]}]}}),
        }
        for name, mutate in objects_cases.items():
            assert objects_broken(mutate), f"the checker missed: {name}"
        caught += len(objects_cases)
    print(f"check_wiring self-test: {caught} violations caught")


if __name__ == "__main__":
    argv = sys.argv[1:]
    test = "--self-test" in argv
    if test:
        argv.remove("--self-test")
    if "--objects" in argv:
        i = argv.index("--objects")
        OBJECTS = load_all(argv[i + 1])
        del argv[i:i + 2]
    chart_docs = load_all(argv[0])
    cnpg_doc = load_all(argv[1])[0]
    job_docs = load_all(argv[2])
    with open(argv[3]) as f:
        plan = json.load(f)
    LOADS = (sum(p["duration_seconds"] for p in plan["scenarios"]) + plan["margin_seconds"], int(argv[4]))
    PLAN_SEED = plan.get("seed")
    PLAN_KINDS = [s["kind"] for s in plan["scenarios"]]
    CHAOS = [d for path in argv[5:] for d in load_all(path)]
    if test:
        self_test((chart_docs, cnpg_doc, job_docs))
    found = check(chart_docs, cnpg_doc, job_docs, *LOADS) + check_selectors(chart_docs, cnpg_doc, CHAOS)
    if OBJECTS:
        found += check_objects(chart_docs, OBJECTS)
    for p in found:
        print(f"HA wiring: {p}", file=sys.stderr)
    sys.exit(1 if found else 0)
