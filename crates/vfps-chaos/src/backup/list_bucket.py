# Lists what a restore needs to know about a bucket, as barman-cloud lays it
# out: the clusters (top-level prefixes) and one cluster's WAL file names.
# Run by vfps-chaos with the system Python (the boto3 barman-cli-cloud uses);
# credentials and region come from the environment. Prints one JSON object.
import json
import sys

import boto3
from botocore.config import Config

endpoint, bucket, cluster = sys.argv[1:4]
s3 = boto3.client("s3", endpoint_url=endpoint, config=Config(s3={"addressing_style": "path"}))
pages = s3.get_paginator("list_objects_v2")
clusters = []
for page in pages.paginate(Bucket=bucket, Delimiter="/"):
    clusters += [p["Prefix"].rstrip("/") for p in page.get("CommonPrefixes", [])]
wals = []
for page in pages.paginate(Bucket=bucket, Prefix=cluster + "/wals/"):
    wals += [o["Key"].rsplit("/", 1)[-1] for o in page.get("Contents", [])]
json.dump({"clusters": clusters, "wals": wals}, sys.stdout)
