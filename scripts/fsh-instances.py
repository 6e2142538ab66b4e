#!/usr/bin/env python3
"""The example instances of FHIR Shorthand files, as FHIR JSON.

SUSHI (the reference FSH compiler) needs the FHIR package server to load the
core definitions; this reads the subset of FSH the MII pseudonymization IG's
examples use, which needs none: `Instance:` / `InstanceOf:` / `Usage:`, rules
`* path = value` with soft indices (`[+]`, `[=]`, `[n]`), indented rules under
a path, strings, codes (`#code`), booleans, integers, codings
(`system#code`) and references to other instances (inlined). OperationDefinition
instances (`Usage: #definition`) are left out.

    scripts/fsh-instances.py FSH_DIR OUT.json          # write
    scripts/fsh-instances.py --check FSH_DIR OUT.json  # fail if OUT.json differs
"""
import json
import re
import sys
from pathlib import Path

# Elements that are lists in FHIR JSON (of the resources the examples use).
ARRAYS = {"parameter", "part", "entry", "issue", "coding", "profile", "expression", "extension"}

STEP = re.compile(r"^([A-Za-z][A-Za-z0-9]*)(?:\[(\+|=|\d+)\])?$")


def parse_value(raw):
    raw = raw.strip()
    if raw.startswith('"'):
        return ("value", json.loads(raw))
    if raw.startswith("#"):
        return ("value", raw[1:])
    if raw in ("true", "false"):
        return ("value", raw == "true")
    if re.fullmatch(r"-?\d+", raw):
        return ("value", int(raw))
    if "#" in raw:
        system, code = raw.split("#", 1)
        return ("value", {"system": system, "code": code})
    return ("reference", raw)


class Instance:
    def __init__(self, name):
        self.name = name
        self.of = None
        self.usage = None
        self.rules = []  # (absolute steps, value)
        self.counters = {}

    def resolve(self, parent, path):
        steps = list(parent)
        for part in path.split("."):
            m = STEP.match(part)
            if not m:
                raise ValueError(f"{self.name}: cannot read path step {part!r}")
            element, index = m.group(1), m.group(2)
            if element in ARRAYS or index is not None:
                key = "/".join(f"{e}[{i}]" if i is not None else e for e, i in steps) + "/" + element
                last = self.counters.get(key, -1)
                if index == "+":
                    n = last + 1
                elif index == "=" or index is None:
                    n = max(last, 0)
                else:
                    n = int(index)
                self.counters[key] = n
                steps.append((element, n))
            else:
                steps.append((element, None))
        return steps


def read(files):
    instances = {}
    current = None
    for f in files:
        context = []  # (indent, steps)
        for line in Path(f).read_text(encoding="utf-8").splitlines():
            if not line.strip() or line.lstrip().startswith("//"):
                continue
            if not line.startswith(" ") and not line.startswith("*"):
                key, _, value = line.partition(":")
                value = value.strip()
                if key == "Instance":
                    current = Instance(value)
                    instances[value] = current
                    context = []
                elif key == "InstanceOf":
                    current.of = value
                elif key == "Usage":
                    current.usage = value
                continue
            indent = len(line) - len(line.lstrip())
            body = line.strip()
            if not body.startswith("* ") or current is None:
                continue
            rule = body[2:]
            path, eq, value = rule.partition(" = ")
            while context and context[-1][0] >= indent:
                context.pop()
            parent = context[-1][1] if context else []
            steps = current.resolve(parent, path.strip())
            if eq:
                current.rules.append((steps, parse_value(value)))
            context.append((indent, steps))
    return instances


def build(instances, name, seen=()):
    inst = instances[name]
    if name in seen:
        raise ValueError(f"{name} refers to itself")
    out = {"resourceType": inst.of}
    for steps, (kind, value) in inst.rules:
        if kind == "reference":
            value = build(instances, value, seen + (name,))
        node = out
        for i, (element, index) in enumerate(steps):
            last = i == len(steps) - 1
            if index is None:
                if last:
                    node[element] = value
                else:
                    node = node.setdefault(element, {})
            else:
                items = node.setdefault(element, [])
                while len(items) <= index:
                    items.append({})
                if last:
                    items[index] = value
                else:
                    node = items[index]
    return out


def main(argv):
    check = "--check" in argv
    args = [a for a in argv if a != "--check"]
    if len(args) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    fsh_dir, out = Path(args[0]), Path(args[1])
    instances = read(sorted(fsh_dir.glob("*.fsh")))
    examples = {
        name: build(instances, name)
        for name, inst in sorted(instances.items())
        if inst.usage != "#definition" and inst.of in ("Parameters", "Bundle", "OperationOutcome")
    }
    text = json.dumps(examples, indent=1, ensure_ascii=False, sort_keys=True) + "\n"
    if check:
        if not out.exists() or out.read_text(encoding="utf-8") != text:
            print(f"{out} is not what {fsh_dir} gives: run scripts/fsh-instances.py {fsh_dir} {out}", file=sys.stderr)
            return 1
        return 0
    out.write_text(text, encoding="utf-8")
    print(f"{len(examples)} example instances written to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
