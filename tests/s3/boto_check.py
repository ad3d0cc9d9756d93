#!/usr/bin/env python3
"""tests/s3/boto_check.py - what boto3 sees in a bucket, for the S3 client's
tests: a second, independent reader of what lib/s3.c wrote.

    python3 tests/s3/boto_check.py --bucket B [--prefix P] [--uploads]

Credentials and endpoint from the environment (AWS_ACCESS_KEY_ID,
AWS_SECRET_ACCESS_KEY, AWS_REGION, S3_ENDPOINT; as tests/s3/moto_server.py
writes them). Prints one line per object under the prefix, sorted by key:
KEY<TAB>SIZE<TAB>SHA-256 of the bytes boto3 reads back (UTF-8). With
--uploads, prints instead one line per multipart upload still in progress:
KEY<TAB>UPLOAD-ID.
"""
import argparse
import hashlib
import os
import sys

import boto3
from botocore.config import Config


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bucket", required=True)
    ap.add_argument("--prefix", default="")
    ap.add_argument("--uploads", action="store_true")
    a = ap.parse_args()
    s3 = boto3.client("s3", endpoint_url=os.environ["S3_ENDPOINT"],
                      region_name=os.environ.get("AWS_REGION", "us-east-1"),
                      config=Config(s3={"addressing_style": "path"}))
    out = sys.stdout.buffer
    if a.uploads:
        r = s3.list_multipart_uploads(Bucket=a.bucket, Prefix=a.prefix)
        for u in r.get("Uploads", []):
            out.write(f"{u['Key']}\t{u['UploadId']}\n".encode())
        return 0
    rows = []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=a.bucket, Prefix=a.prefix):
        for o in page.get("Contents", []):
            body = s3.get_object(Bucket=a.bucket, Key=o["Key"])["Body"].read()
            if len(body) != o["Size"]:
                print(f"{o['Key']}: listed {o['Size']} bytes, read {len(body)}", file=sys.stderr)
                return 1
            rows.append((o["Key"].encode(), len(body), hashlib.sha256(body).hexdigest()))
    for k, n, h in sorted(rows):
        out.write(k + f"\t{n}\t{h}\n".encode())
    return 0


if __name__ == "__main__":
    sys.exit(main())
