#!/usr/bin/env python3
"""The tally of a repeated series (scripts/repeat-scenario.sh).

  repeat-tally.py row DIR SCENARIOS STATUS RUN   one run's rows, one per scenario
  repeat-tally.py total OUT                      the series: totals, each failover
                                                 step's median and maximum per
                                                 scenario, and the targets

`total` reads OUT/tally.txt (the rows, for which runs passed) and every
OUT/run-*/summary.json (the failover breakdown); it can tally a kept series
again. Its exit status is 1 when a run failed or a scenario missed its target
(docs/performance.md, "From fault to first write"), 2 on bad arguments.

The targets, from the fault to the first acknowledged write through vfps, with
Patroni's leader key TTL read from the local platform's configuration:
a kill, median <= TTL + 2 s and max <= TTL + 4 s; a pause or an isolation,
the same plus Patroni's fixed 2 s wait for the silent member's status before
any standby may take the leader key (a killed member's closed port answers at
once).
"""
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STEPS = [
    ("leader key expired", "leader_key_expired_seconds"),
    ("promotion started", "promotion_started_seconds"),
    ("promoted", "promoted_seconds"),
    ("synchronous standby attached", "standby_attached_seconds"),
    ("first acknowledged write", "first_write_seconds"),
]
# Patroni's timeout for a member's status (`fetch_node_status`), fixed in its
# code: a paused or isolated former leader costs it before a promotion.
MEMBER_STATUS_TIMEOUT = 2.0
SILENT_FAULTS = ("db-primary-pause", "db-primary-isolation")


def fmt_row(run, result, scenario, failovers, outage, changed, lost, seed, to_write):
    return (
        f"{run:<4} {result:<6} {scenario:<22} {failovers:<10} {outage:<14} "
        f"{changed:<10} {lost:<10} {seed:<20} {to_write}"
    )


def row(d, scenarios, status, run):
    try:
        s = json.load(open(f"{d}/summary.json"))
        per = {x["scenario"]: x for x in json.load(open(f"{d}/scenarios.json"))}
    except (OSError, ValueError):
        for scenario in scenarios:
            print(fmt_row(run, "ERROR", scenario, "-", "-", "-", "-", "-", "-"))
        return
    v = {x["property"]: x for x in s["verdicts"]}

    def count(p):
        return int(v[p]["summary"].split()[0]) if p in v else -1

    result = "PASS" if status == 0 and s["passed"] else "FAIL"
    for scenario in scenarios:
        failovers = [f for f in s.get("failovers") or [] if f["scenario"] == scenario]
        outage = per[scenario]["availability"]["longest_outage_seconds"] if scenario in per else -1
        # A failover whose first write the breakdown did not see counts as "?".
        to_write = [
            f"{f['first_write_seconds'] - f['fault_seconds']:.1f}" if f.get("first_write_seconds") else "?"
            for f in failovers
        ]
        print(fmt_row(run, result, scenario, len(failovers), f"{outage}s",
                      count("P2-pseudonym-stability"), count("P3-reverse-lookup"), s["seed"],
                      ",".join(to_write) or "-"))


def ttl_seconds():
    """Patroni's leader key TTL as the local platform configures it."""
    text = (ROOT / "crates/vfps-chaos/src/platform/local/patroni.rs").read_text()
    m = re.search(r"^\s*ttl: (\d+)$", text, re.M)
    if not m:
        raise SystemExit("repeat-tally: no `ttl:` in the local platform's Patroni configuration")
    return float(m.group(1))


def target(scenario, ttl):
    """(median, max) bound from the fault to the first write, if the scenario has one."""
    if scenario == "db-primary-kill":
        return ttl + 2, ttl + 4
    if scenario in SILENT_FAULTS:
        return ttl + MEMBER_STATUS_TIMEOUT + 2, ttl + MEMBER_STATUS_TIMEOUT + 4
    return None


def n(count, noun):
    return f"{count} {noun}{'' if count == 1 else 's'}"


def median(xs):
    xs = sorted(xs)
    return (xs[(len(xs) - 1) // 2] + xs[len(xs) // 2]) / 2


def total(out, ttl):
    rows = [l.split() for l in (out / "tally.txt").read_text().splitlines()[1:] if l.strip()]
    runs = {}
    for r in rows:
        runs.setdefault(r[0], r)
    ok = [r for r in runs.values() if r[1] == "PASS"]
    # P2 and P3 are the run's: counted once per run.
    lost = sum(int(r[6]) for r in runs.values() if r[6].lstrip("-").isdigit() and int(r[6]) > 0)
    changed = sum(int(r[5]) for r in runs.values() if r[5].lstrip("-").isdigit() and int(r[5]) > 0)
    scenarios = list(dict.fromkeys(r[2] for r in rows))
    failovers = {s: [] for s in scenarios}
    for summary in sorted(out.glob("run-*/summary.json")):
        try:
            for f in json.load(open(summary)).get("failovers") or []:
                failovers.setdefault(f["scenario"], []).append(f)
        except (OSError, ValueError):
            continue
    print(
        f"tally: {len(ok)}/{len(runs)} runs passed, {sum(len(f) for f in failovers.values())} failovers, "
        f"{lost} acknowledged writes lost (P3), {changed} pseudonyms changed (P2)"
    )
    missed = []
    for scenario in scenarios:
        mine = failovers.get(scenario, [])
        outages = sorted(int(r[4].rstrip("s")) for r in rows
                         if r[2] == scenario and r[4].rstrip("s").lstrip("-").isdigit())
        span = f"{outages[0]}-{outages[-1]} s" if outages else "-"
        print(f"{scenario}: {n(len(mine), 'failover')}; longest outage per run {span}")
        for name, key in STEPS:
            seen = [f[key] - f["fault_seconds"] for f in mine if f.get(key) is not None]
            if seen:
                print(f"  fault to {name:<29} median {median(seen):5.1f} s, max {max(seen):5.1f} s"
                      f" over {len(seen)}" + (f" ({len(mine) - len(seen)} not seen)" if len(seen) < len(mine) else ""))
            else:
                print(f"  fault to {name:<29} not seen")
        bound = target(scenario, ttl)
        writes = [f["first_write_seconds"] - f["fault_seconds"] for f in mine if f.get("first_write_seconds")]
        if bound is None:
            continue
        if not writes:
            print(f"  target: median <= {bound[0]:.0f} s, max <= {bound[1]:.0f} s: NOT MET (no first write seen)")
            missed.append(scenario)
            continue
        met = median(writes) <= bound[0] and max(writes) <= bound[1] and len(writes) == len(mine)
        why = "" if len(writes) == len(mine) else f" ({n(len(mine) - len(writes), 'failover')} without a write seen)"
        print(f"  target (TTL {ttl:.0f} s): median <= {bound[0]:.0f} s, max <= {bound[1]:.0f} s: "
              f"{'met' if met else 'NOT MET'}{why}")
        if not met:
            missed.append(scenario)
    failed = len(runs) - len(ok)
    if failed or missed:
        print(f"tally: {n(failed, 'run')} failed; targets missed: {', '.join(missed) or 'none'}")
        return 1
    return 0


def main(argv):
    if len(argv) == 6 and argv[1] == "row":
        if not argv[4].lstrip("-").isdigit():
            print(f"repeat-tally: STATUS must be a number, got '{argv[4]}'", file=sys.stderr)
            return 2
        row(argv[2], argv[3].split(","), int(argv[4]), argv[5])
        return 0
    if len(argv) == 3 and argv[1] == "total":
        out = Path(argv[2])
        if not (out / "tally.txt").is_file():
            print(f"repeat-tally: no tally.txt in '{out}'", file=sys.stderr)
            return 2
        return total(out, ttl_seconds())
    print(__doc__.split("\n\n")[1], file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
