#!/usr/bin/env python3
"""Validates custom resources against the CRDs of the pinned operators, strictly.

Usage: check_crds.py CRD_DIR MANIFEST...
       check_crds.py --self-test CRD_DIR MANIFEST...

Every document of every MANIFEST whose apiVersion and kind a CRD in CRD_DIR
defines is validated against that CRD's schema of the served version it names,
as `kubectl apply` (strict field validation, the default) has the API server do
it: an unknown field is refused, not pruned — anywhere except under a node
marked x-kubernetes-preserve-unknown-fields. metadata is checked for the
ObjectMeta fields a manifest may set. The CEL rules (x-kubernetes-validations)
are not evaluated here; docs/kubernetes.md lists the ones that apply.
A document of a kind no CRD here defines is an error (a manifest must not
escape the check by a typo in its apiVersion).
The self-test feeds broken copies and requires each to be refused.
"""
import copy
import glob
import os
import sys

import jsonschema
import yaml

# ObjectMeta fields a manifest may carry (the server sets the rest).
METADATA = {"name", "generateName", "namespace", "labels", "annotations", "finalizers", "ownerReferences"}


def load_crds(directory):
    crds = {}
    for path in sorted(glob.glob(os.path.join(directory, "*.yaml"))):
        with open(path) as f:
            crd = yaml.safe_load(f)
        if crd.get("kind") != "CustomResourceDefinition":
            continue
        spec = crd["spec"]
        for version in spec["versions"]:
            key = (f"{spec['group']}/{version['name']}", spec["names"]["kind"])
            crds[key] = (version, os.path.basename(path))
    return crds


def strict(schema):
    """The schema with every object that lists its properties closed to others."""
    if isinstance(schema, list):
        return [strict(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {}
    for key, value in schema.items():
        if key in ("properties", "patternProperties", "definitions"):
            out[key] = {k: strict(v) for k, v in value.items()}
        elif key in ("items", "additionalProperties", "not", "allOf", "anyOf", "oneOf"):
            out[key] = strict(value)
        else:
            out[key] = value
    if "properties" in schema and "additionalProperties" not in schema \
            and not schema.get("x-kubernetes-preserve-unknown-fields"):
        out["additionalProperties"] = False
    return out


def problems_of(doc, crds):
    api, kind = doc.get("apiVersion"), doc.get("kind")
    name = (doc.get("metadata") or {}).get("name", "?")
    found = crds.get((api, kind))
    if found is None:
        return [f"{kind}/{name}: no CRD here serves {api} {kind}"]
    version, crd_file = found
    if not version.get("served"):
        return [f"{kind}/{name}: {api} is not served by {crd_file}"]
    schema = strict(version["schema"]["openAPIV3Schema"])
    # OpenAPI v3 schemas of CRDs follow JSON Schema draft 4 (boolean exclusiveMinimum).
    validator = jsonschema.Draft4Validator(schema)
    out = []
    for e in sorted(validator.iter_errors(doc), key=lambda e: list(e.absolute_path)):
        where = ".".join(str(p) for p in e.absolute_path) or "(root)"
        out.append(f"{kind}/{name}: {where}: {e.message} ({crd_file})")
    unknown = sorted(set(doc.get("metadata") or {}) - METADATA)
    if unknown:
        out.append(f"{kind}/{name}: metadata: unknown fields {unknown}")
    return out


def check(docs, crds):
    problems = []
    for doc in docs:
        problems.extend(problems_of(doc, crds))
    return problems


def load_docs(paths):
    docs = []
    for path in paths:
        with open(path) as f:
            docs.extend(d for d in yaml.safe_load_all(f) if d)
    return docs


def self_test(docs, crds):
    """Broken copies of the real documents; each must be refused."""
    def first(kind):
        return next(d for d in docs if d["kind"] == kind)

    def broken(kind, change):
        d = copy.deepcopy(first(kind))
        change(d)
        return d

    cases = {
        "an unknown field deep in the Cluster spec":
            broken("Cluster", lambda d: d["spec"]["postgresql"]["synchronous"].__setitem__("notAField", True)),
        "an unknown top-level spec field":
            broken("Cluster", lambda d: d["spec"].__setitem__("instancez", 3)),
        "a wrong type":
            broken("Cluster", lambda d: d["spec"].__setitem__("instances", "three")),
        "an unknown field inside a Schedule's template":
            broken("Schedule", lambda d: d["spec"][next(k for k in ("podChaos", "networkChaos") if k in d["spec"])]
                   .__setitem__("notAField", 1)),
        "a value outside an enum":
            broken("NetworkChaos", lambda d: d["spec"].__setitem__("direction", "sideways")),
        "an unknown metadata field":
            broken("PodChaos", lambda d: d["metadata"].__setitem__("labelz", {})),
        "a version no CRD serves":
            broken("PodChaos", lambda d: d.__setitem__("apiVersion", "chaos-mesh.org/v1")),
    }
    missed = [why for why, d in cases.items() if not problems_of(d, crds)]
    if missed:
        print("check_crds self-test: not refused:", missed)
        return False
    print(f"check_crds self-test: {len(cases)} broken documents refused")
    return True


def main(argv):
    test = argv[:1] == ["--self-test"]
    if test:
        argv = argv[1:]
    if len(argv) < 2:
        print(__doc__)
        return 2
    crds = load_crds(argv[0])
    docs = load_docs(argv[1:])
    if test and not self_test(docs, crds):
        return 1
    problems = check(docs, crds)
    for p in problems:
        print(p)
    if problems:
        return 1
    print(f"{len(docs)} custom resources valid against the pinned CRDs (unknown fields refused)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
