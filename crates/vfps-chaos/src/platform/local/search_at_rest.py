# P11's search: every byte the platform keeps at rest, for the originals the
# harness sent. Run by vfps-chaos with the system Python (the boto3
# barman-cli-cloud uses). Reads one JSON object on stdin:
#   {"originals": [...],
#    "files":   [{"class": ..., "place": ..., "paths": [file or folder, ...]}],
#    "buckets": [{"class": ..., "place": ..., "endpoint": ..., "bucket": ...,
#                 "key_id": ..., "secret": ..., "region": ...}]}
# and prints one JSON object: {"places": [{"class", "place", "bytes",
# "objects", "found": [original, ...]}], "notes": [...]}. Gzip and bzip2
# bodies (barman-cloud's WAL, compressed logs) are searched decompressed.
# An original is found where its exact bytes are; the search looks only at
# spots where one of the originals' prefixes (up to their first '-') starts.
import bz2
import gzip
import json
import os
import re
import sys

config = json.load(sys.stdin)
originals = {o.encode() for o in config["originals"] if "-" in o}
lengths = sorted({len(o) for o in originals})
prefixes = sorted({o.split(b"-", 1)[0] + b"-" for o in originals})
notes = []
if len(originals) < len(config["originals"]):
    notes.append(f"{len(config['originals']) - len(originals)} originals without a '-' were not searched")
pattern = re.compile(b"|".join(re.escape(p) for p in prefixes)) if prefixes else None


def found_in(data, found):
    if pattern is None:
        return
    for m in pattern.finditer(data):
        start = m.start()
        for n in lengths:
            candidate = data[start:start + n]
            if candidate in originals:
                found.add(candidate)


def opened(data):
    if data[:2] == b"\x1f\x8b":
        try:
            return gzip.decompress(data)
        except (OSError, EOFError):
            return data
    if data[:3] == b"BZh":
        try:
            return bz2.decompress(data)
        except (OSError, ValueError):
            return data
    return data


places = []
for group in config.get("files", []):
    found, size, count = set(), 0, 0
    for root in group["paths"]:
        walk = [(root, [], [os.path.basename(root)])] if os.path.isfile(root) else os.walk(root)
        for folder, _, names in walk:
            for name in names:
                path = os.path.join(folder, name) if not os.path.isfile(root) else root
                try:
                    with open(path, "rb") as f:
                        data = f.read()
                except OSError as e:
                    notes.append(f"{group['place']}: {path} unread: {e.strerror}")
                    continue
                size += len(data)
                count += 1
                found_in(opened(data), found)
    places.append({"class": group["class"], "place": group["place"], "bytes": size,
                   "objects": count, "found": sorted(o.decode() for o in found)})

for b in config.get("buckets", []):
    found, size, count = set(), 0, 0
    try:
        import boto3
        from botocore.config import Config
        s3 = boto3.client("s3", endpoint_url=b["endpoint"], region_name=b["region"],
                          aws_access_key_id=b["key_id"], aws_secret_access_key=b["secret"],
                          config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 3}))
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=b["bucket"]):
            for obj in page.get("Contents", []):
                data = s3.get_object(Bucket=b["bucket"], Key=obj["Key"])["Body"].read()
                size += len(data)
                count += 1
                found_in(opened(data), found)
    except Exception as e:  # a bucket that cannot be read is a note, not a traceback
        notes.append(f"{b['place']}: {type(e).__name__}: {e}")
    places.append({"class": b["class"], "place": b["place"], "bytes": size,
                   "objects": count, "found": sorted(o.decode() for o in found)})

json.dump({"places": places, "notes": notes}, sys.stdout)
