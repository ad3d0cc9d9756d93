#!/usr/bin/env python3
"""tests/s3/moto_server.py - moto's S3 server with signature checking on, for
the S3 client's tests (tests/test_s3.c, bats).

    python3 tests/s3/moto_server.py --port PORT --env-out FILE [--bucket NAME ...]

Starts moto on 127.0.0.1:PORT (0 = a free port). Only the first four requests
go unauthenticated (INITIAL_NO_AUTH_ACTION_COUNT=4): the launcher spends them
itself on IAM (a user, an s3:* policy attached to it, an access key); every
later request must be signed with that key. Creates the buckets (signed),
writes FILE atomically as shell-sourceable lines (AWS_ACCESS_KEY_ID,
AWS_SECRET_ACCESS_KEY, AWS_REGION, S3_ENDPOINT), prints "ready" and serves
until SIGTERM or SIGINT, or until its parent dies.

moto 5.2.1 recomputes the signature over the URL as werkzeug re-quotes it,
which rejects correctly signed requests whose key or query holds characters
such as + = , : @ (the client signed %2B, the server signs +). Patched here,
in this process only: the signature is checked against the raw request URI.
moto also never checks x-amz-content-sha256 against the body, as S3 does
(400 XAmzContentSHA256Mismatch); added here the same way.
"""
import argparse
import ctypes
import hashlib
import json
import logging
import os
import signal
import sys
import threading
import time

NO_AUTH_CALLS = 4  # create_user, create_policy, attach_user_policy, create_access_key
os.environ["INITIAL_NO_AUTH_ACTION_COUNT"] = str(NO_AUTH_CALLS)  # read when moto is imported
os.environ.setdefault("MOTO_ALLOW_NONEXISTENT_REGION", "false")

import boto3  # noqa: E402
from botocore.config import Config  # noqa: E402
from moto.core import responses as moto_responses  # noqa: E402
from moto.core.authorization import ActionAuthenticatorMixin  # noqa: E402
from moto.s3.exceptions import S3ClientError  # noqa: E402
from moto.server import ThreadedMotoServer  # noqa: E402

REGION = "us-east-1"


def patch_raw_uri():
    """Verify signatures over the request URI as the client sent it."""
    base = moto_responses.BaseResponse
    orig_setup = base.setup_class
    orig_auth = ActionAuthenticatorMixin._authenticate_and_authorize_action

    def setup_class(self, request, full_url, headers, *a, **kw):
        r = orig_setup(self, request, full_url, headers, *a, **kw)
        env = getattr(request, "environ", None) or {}
        self._vj_raw_uri = env.get("RAW_URI") or env.get("REQUEST_URI")
        return r

    def authenticate(self, *a, **kw):
        raw = getattr(self, "_vj_raw_uri", None)
        if not raw:
            return orig_auth(self, *a, **kw)
        saved = self.uri
        self.uri = "http://raw" + (raw if raw.startswith("/") else "/" + raw)
        try:
            r = orig_auth(self, *a, **kw)
        finally:
            self.uri = saved
        check_payload_hash(self)
        return r

    base.setup_class = setup_class
    ActionAuthenticatorMixin._authenticate_and_authorize_action = authenticate


def check_payload_hash(resp):
    """S3 refuses a body whose SHA-256 is not the one signed for."""
    sha = resp.headers.get("x-amz-content-sha256")
    if not sha or sha == "UNSIGNED-PAYLOAD" or sha.startswith("STREAMING-"):
        return
    body = getattr(resp, "raw_body", None) or b""
    if isinstance(body, str):
        body = body.encode()
    if hashlib.sha256(body).hexdigest() != sha.lower():
        raise S3ClientError("XAmzContentSHA256Mismatch",
                            "The provided 'x-amz-content-sha256' header does not match what "
                            "was computed.")


def die_with_parent():
    """SIGTERM when the parent exits (Linux), so a killed test leaves no server."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    ppid = os.getppid()

    def watch():  # also covers a parent that died before prctl
        while True:
            if os.getppid() != ppid:
                os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.5)

    threading.Thread(target=watch, daemon=True).start()


def client(service, endpoint, key=None, secret=None):
    return boto3.client(
        service, endpoint_url=endpoint, region_name=REGION,
        aws_access_key_id=key or "bootstrap", aws_secret_access_key=secret or "bootstrap",
        config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--address", default="127.0.0.1",
                    help="listen address (0.0.0.0: also for pods of the local cluster, through its bridge)")
    ap.add_argument("--env-out", required=True)
    ap.add_argument("--bucket", action="append", default=[])
    args = ap.parse_args()

    die_with_parent()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())

    patch_raw_uri()
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # no line per request
    server = ThreadedMotoServer(ip_address=args.address, port=args.port, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://127.0.0.1:{port}"

    iam = client("iam", endpoint)
    iam.create_user(UserName="vitjob-test")
    policy = iam.create_policy(PolicyName="vitjob-s3-all", PolicyDocument=json.dumps({
        "Version": "2012-10-17",
        "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]}))
    iam.attach_user_policy(UserName="vitjob-test", PolicyArn=policy["Policy"]["Arn"])
    ak = iam.create_access_key(UserName="vitjob-test")["AccessKey"]
    key, secret = ak["AccessKeyId"], ak["SecretAccessKey"]

    s3 = client("s3", endpoint, key, secret)
    for b in args.bucket:
        s3.create_bucket(Bucket=b)

    tmp = f"{args.env_out}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        f.write(f"AWS_ACCESS_KEY_ID={key}\nAWS_SECRET_ACCESS_KEY={secret}\n"
                f"AWS_REGION={REGION}\nS3_ENDPOINT={endpoint}\n")
    os.replace(tmp, args.env_out)
    print("ready", flush=True)

    while not stop.wait(0.2):
        pass
    server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
