# Lists what a restore needs to know about a bucket, as barman-cloud lays it
# out: the clusters (top-level prefixes), one cluster's WAL file names, and
# the cluster a restore made it from (`<cluster>/vfps-chain.json`). With
# `--set-parent PARENT`, records that chain link instead. Run by vfps-chaos
# with the system Python (the boto3 barman-cli-cloud uses); credentials and
# region come from the environment. Prints one JSON object; a bucket that
# cannot be read prints {"refusal": ...} (the bucket will not give what is
# asked: its name or key is wrong) or {"error": ...} (it cannot be reached
# now), never a traceback.
import json
import sys

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError

endpoint, bucket, cluster = sys.argv[1:4]
CHAIN = cluster + "/vfps-chain.json"


def say(**kind):
    json.dump(kind, sys.stdout)
    sys.exit(0)


try:
    s3 = boto3.client("s3", endpoint_url=endpoint, config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 2}))
    if len(sys.argv) == 6 and sys.argv[4] == "--set-parent":
        s3.put_object(Bucket=bucket, Key=CHAIN, Body=json.dumps({"parent": sys.argv[5]}).encode())
        say(chained=sys.argv[5])
    pages = s3.get_paginator("list_objects_v2")
    clusters = []
    for page in pages.paginate(Bucket=bucket, Delimiter="/"):
        clusters += [p["Prefix"].rstrip("/") for p in page.get("CommonPrefixes", [])]
    wals = []
    for page in pages.paginate(Bucket=bucket, Prefix=cluster + "/wals/"):
        wals += [o["Key"].rsplit("/", 1)[-1] for o in page.get("Contents", [])]
    parent = None
    try:
        parent = json.loads(s3.get_object(Bucket=bucket, Key=CHAIN)["Body"].read()).get("parent")
    except ClientError as e:
        if e.response.get("Error", {}).get("Code") not in ("NoSuchKey", "404"):
            raise
    say(clusters=clusters, wals=wals, parent=parent)
except ClientError as e:
    error = e.response.get("Error", {})
    code, message = error.get("Code", "?"), error.get("Message", "")
    if code in ("NoSuchBucket", "404"):
        say(refusal=f"bucket {bucket!r} does not exist at {endpoint}: a wrong bucket name, or another endpoint's bucket")
    if code in ("AccessDenied", "403", "InvalidAccessKeyId", "SignatureDoesNotMatch", "InvalidToken", "ExpiredToken"):
        say(refusal=f"bucket {bucket!r} at {endpoint} refuses the key ({code}): a wrong key, or one without rights on this bucket")
    say(error=f"bucket {bucket!r} at {endpoint} answered {code}: {message}")
except NoCredentialsError:
    say(refusal="no credentials for the bucket: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY")
except BotoCoreError as e:
    say(error=f"cannot read bucket {bucket!r} at {endpoint}: {e}")
