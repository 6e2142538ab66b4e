#!/usr/bin/env python3
"""Splits a server profile into the parts of a call, and the allocator's share.

Input: `perf script --no-inline -F comm,tid,ip,sym` of a DWARF profile of the
vfps server, e.g.

    perf record -F 499 --call-graph dwarf,16384 -p <vfps pid> -o server.data -- sleep 8
    perf script -i server.data --no-inline -F comm,tid,ip,sym > server.txt
    scripts/profile-split.py server.txt

Each sample is charged to the innermost frame that belongs to one of the
parts below (docs/performance.md, "Inside the server"); samples whose leaf is
in the allocator are counted again by allocator and by first caller outside it.
"""
import collections
import sys

PARTS = [
    ("PostgreSQL client (tokio-postgres, pool, statements)",
     ["tokio_postgres", "postgres_protocol", "vfps_store::postgres"]),
    ("coalescer", ["vfps_store::coalesce"]),
    ("service (validation, generation, caches, retries)", ["vfps_server::service", "vfps_core::"]),
    ("metrics", ["prometheus", "vfps_server::metrics"]),
    ("kernel: socket sends and receives, epoll", ["entry_SYSCALL", "do_syscall"]),
    ("handlers and the generated service glue", ["vfps_server::grpc", "vfps_proto::"]),
    ("tonic (codec, routing)", ["tonic::"]),
    ("HTTP/2 (h2, hyper)", ["h2::", "hyper::", "hyper_util"]),
    ("tokio's scheduler", ["tokio::runtime"]),
]

ALLOCATOR = (
    "malloc", "_int_malloc", "_int_free", "cfree@GLIBC_2.2.5", "malloc_consolidate",
    "unlink_chunk.constprop.0", "realloc", "_int_realloc", "free", "_int_memalign",
    "__libc_calloc",
)


def function(line):
    return line.strip().split(" ", 1)[-1].split("+0x")[0]


def main(path):
    samples = [s for s in open(path).read().split("\n\n") if s.strip()]
    if not samples:
        sys.exit(f"{path}: no samples")
    n = len(samples)
    parts = collections.Counter()
    allocator = collections.Counter()
    callers = collections.Counter()
    for sample in samples:
        frames = sample.split("\n")[1:]
        part = next(
            (name for line in frames for name, keys in PARTS if any(k in line for k in keys)),
            "rest",
        )
        parts[part] += 1
        names = [function(line) for line in frames]
        if names and (names[0] in ALLOCATOR or names[0].startswith(("mi_", "_mi_"))):
            allocator[names[0]] += 1
            caller = next(
                (f for f in names
                 if f not in ALLOCATOR and not f.startswith(("alloc::", "<alloc::", "mi_", "_mi_"))
                 and "drop_in_place" not in f and "RawVec" not in f),
                "?",
            )
            callers[caller[:140]] += 1
    print(f"{n} samples")
    print("| part of the server | share of its samples |")
    print("|---|---|")
    for name, count in parts.most_common():
        print(f"| {name} | {count * 100 / n:.2f} % |")
    print(f"\nallocator: {sum(allocator.values()) * 100 / n:.1f} % of the samples")
    for name, count in allocator.most_common():
        print(f"  {count * 100 / n:5.2f} % {name}")
    print("first callers outside the allocator:")
    for name, count in callers.most_common(10):
        print(f"  {count * 100 / n:5.2f} % {name}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: profile-split.py <perf script output>")
    main(sys.argv[1])
