#!/usr/bin/env python3
"""tests/s3/s3ctl.py - what the checkpoint tests do to a store behind the
worker's back, through boto3 (an independent S3 client): list, remove a
prefix, put or test for an object, flip a byte, and check every object boto3 reads
against the worker's own listing.

Owns: nothing the worker runs; a test tool. Must not: be used by the
worker or the operator.

Usage (credentials and endpoint from AWS_* and S3_ENDPOINT in the environment):
  s3ctl.py ls URI                    key and size of every object under URI
  s3ctl.py rm URI                    delete every object under URI
  s3ctl.py exists URI                exit 0 when the object exists, 1 when not
  s3ctl.py put URI TEXT              store TEXT as the object URI
  s3ctl.py flip URI OFFSET           xor the byte at OFFSET with 0x5a
  s3ctl.py readall URI               read every object under URI, print key size sha256
  s3ctl.py verify URI                every step's manifest.json under URI, read by boto3:
                                     its shards exist with its sizes and CRC-32 per block;
                                     prints one line per step, exit 1 on a mismatch
"""
import hashlib
import json
import os
import zlib
import sys

import boto3
from botocore.config import Config


def split(uri):
    assert uri.startswith("s3://"), uri
    bucket, _, key = uri[5:].partition("/")
    return bucket, key


def client():
    return boto3.client("s3", endpoint_url=os.environ["S3_ENDPOINT"],
                        region_name=os.environ.get("AWS_REGION", "us-east-1"),
                        config=Config(s3={"addressing_style": "path"}))


def objects(s3, bucket, prefix):
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        for o in page.get("Contents", []):
            yield o["Key"], o["Size"]


def main(argv):
    cmd, uri = argv[1], argv[2]
    bucket, key = split(uri)
    s3 = client()
    if cmd == "ls":
        for k, size in objects(s3, bucket, key):
            print(k[len(key):].lstrip("/"), size)
    elif cmd == "rm":
        for k, _ in list(objects(s3, bucket, key)):
            s3.delete_object(Bucket=bucket, Key=k)
    elif cmd == "exists":
        try:
            s3.head_object(Bucket=bucket, Key=key)
        except s3.exceptions.ClientError:
            return 1
    elif cmd == "put":
        s3.put_object(Bucket=bucket, Key=key, Body=argv[3].encode())
    elif cmd == "flip":
        off = int(argv[3])
        body = bytearray(s3.get_object(Bucket=bucket, Key=key)["Body"].read())
        body[off] ^= 0x5A
        s3.put_object(Bucket=bucket, Key=key, Body=bytes(body))
    elif cmd == "readall":
        for k, size in objects(s3, bucket, key):
            body = s3.get_object(Bucket=bucket, Key=k)["Body"].read()
            assert len(body) == size, (k, len(body), size)
            print(k[len(key):].lstrip("/"), size, hashlib.sha256(body).hexdigest())
    elif cmd == "verify":
        keys = dict(objects(s3, bucket, key))
        steps = sorted(k for k in keys if k.endswith("/manifest.json"))
        for mk in steps:
            man = json.loads(s3.get_object(Bucket=bucket, Key=mk)["Body"].read())
            d = mk[: -len("manifest.json")]
            block = man["blockBytes"]
            for sh in man["shards"]:
                body = s3.get_object(Bucket=bucket, Key=d + sh["name"])["Body"].read()
                crcs = [zlib.crc32(body[o:o + block]) for o in range(0, len(body), block)]
                if len(body) != sh["bytes"] or crcs != sh["crc32"] or keys[d + sh["name"]] != len(body):
                    print("%s%s: does not match its manifest" % (d, sh["name"]))
                    return 1
            print("step %d: manifest and %d shards read by boto3, sizes and CRCs match"
                  % (man["step"], len(man["shards"])))
        if not steps:
            print("no manifests under " + uri)
            return 1
    else:
        print("s3ctl.py: unknown command " + cmd, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
