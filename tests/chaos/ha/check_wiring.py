#!/usr/bin/env python3
"""Asserts the HA wiring of the rendered Kubernetes assets.

Usage: check_wiring.py RENDERED_CHART CNPG_CLUSTER LOADGEN_JOB PLAN_JSON SETTLE_SECONDS [CHAOS...]
       check_wiring.py --self-test ...same arguments...
LOADGEN_JOB and PLAN_JSON are what `vfps-chaos kind render` writes; the
load window is recomputed here from the plan's durations and margin.
CHAOS are the Chaos Mesh objects the driver applies: each label selector must
select the pods it is meant for (vfps's API pods, or CloudNativePG's instance
pods) and none of the other pods those labels appear on.
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
    return problems


PLAN_SEED = None
CHAOS = []


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
    print(f"check_wiring self-test: {caught} violations caught")


if __name__ == "__main__":
    argv = sys.argv[1:]
    test = argv and argv[0] == "--self-test"
    if test:
        argv = argv[1:]
    chart_docs = load_all(argv[0])
    cnpg_doc = load_all(argv[1])[0]
    job_docs = load_all(argv[2])
    with open(argv[3]) as f:
        plan = json.load(f)
    LOADS = (sum(p["duration_seconds"] for p in plan["scenarios"]) + plan["margin_seconds"], int(argv[4]))
    PLAN_SEED = plan.get("seed")
    CHAOS = [d for path in argv[5:] for d in load_all(path)]
    if test:
        self_test((chart_docs, cnpg_doc, job_docs))
    found = check(chart_docs, cnpg_doc, job_docs, *LOADS) + check_selectors(chart_docs, cnpg_doc, CHAOS)
    for p in found:
        print(f"HA wiring: {p}", file=sys.stderr)
    sys.exit(1 if found else 0)
