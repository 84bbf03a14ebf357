"""A real S3-compatible server on loopback for PatchSync's upload tests: moto's server with request
authentication on (AWS SigV4, checked against an IAM user it creates), one bucket whose objects
anyone may read (a bucket policy, as a bucket behind a CDN has), and nothing else.

Usage: s3_server.py BUCKET
Prints one line "READY <endpoint> <access key id> <secret access key>" once it serves, then serves
until its standard input closes (the test that started it went away) or SIGTERM. A line on standard
input "deny KEY" forbids the user to write that key (as a store that fails one request would), "allow"
lifts it; "delete KEY" deletes the key (as another machine would); each answers "OK".

moto 5 answers an unsigned request with 500 once authentication is on, whatever the bucket policy;
the patch below sends unsigned object GET/HEAD through moto's own policy check instead, as S3 does,
and refuses every other unsigned request with 403.
"""
import json
import os
import sys
import threading

os.environ["INITIAL_NO_AUTH_ACTION_COUNT"] = "3"  # the three IAM calls that create the user and its key
os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")

import boto3  # noqa: E402
from moto.core.authorization import ActionAuthenticatorMixin  # noqa: E402
from moto.s3.exceptions import S3AccessDeniedError  # noqa: E402
from moto.server import ThreadedMotoServer  # noqa: E402

_authorize = ActionAuthenticatorMixin._authenticate_and_authorize_s3_action


def _authorize_anonymous_reads(self, bucket_name=None, key_name=None):
    if "Authorization" not in self.headers and "X-Amz-Signature" not in self.querystring:
        if key_name and self.method in ("GET", "HEAD"):
            return  # moto's key response has applied the bucket policy already
        raise S3AccessDeniedError()
    return _authorize(self, bucket_name=bucket_name, key_name=key_name)


ActionAuthenticatorMixin._authenticate_and_authorize_s3_action = _authorize_anonymous_reads

# S3 decides a conditional write (If-None-Match: *, If-Match) atomically; moto checks, then writes, and
# its threaded server could let two writers through between the two. One lock makes its check and write
# one step, as S3's are.
from moto.s3.responses import S3Response  # noqa: E402

_put_object = S3Response.put_object
_conditional = threading.Lock()


def _put_object_atomically(self):
    if "If-None-Match" in self.headers or "If-Match" in self.headers:
        with _conditional:
            return _put_object(self)
    return _put_object(self)


S3Response.put_object = _put_object_atomically


def main():
    bucket = sys.argv[1]
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    boot = dict(endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="boot", aws_secret_access_key="boot")
    iam = boto3.client("iam", **boot)
    iam.create_user(UserName="publisher")
    allow = {"Effect": "Allow", "Action": ["s3:*", "iam:PutUserPolicy"], "Resource": "*"}
    iam.put_user_policy(UserName="publisher", PolicyName="s3", PolicyDocument=json.dumps(
        {"Version": "2012-10-17", "Statement": [allow]}))
    key = iam.create_access_key(UserName="publisher")["AccessKey"]
    admin = boto3.client("iam", endpoint_url=endpoint, region_name="us-east-1",
                         aws_access_key_id=key["AccessKeyId"], aws_secret_access_key=key["SecretAccessKey"])
    s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                      aws_access_key_id=key["AccessKeyId"], aws_secret_access_key=key["SecretAccessKey"])
    s3.create_bucket(Bucket=bucket)
    s3.put_bucket_policy(Bucket=bucket, Policy=json.dumps({"Version": "2012-10-17", "Statement": [
        {"Effect": "Allow", "Principal": "*", "Action": "s3:GetObject", "Resource": f"arn:aws:s3:::{bucket}/*"}]}))
    print(f"READY {endpoint} {key['AccessKeyId']} {key['SecretAccessKey']}", flush=True)
    for line in sys.stdin:
        words = line.split()
        if words[:1] == ["delete"]:
            s3.delete_object(Bucket=bucket, Key=words[1])
            print("OK", flush=True)
            continue
        statements = [allow]
        if words[:1] == ["deny"]:
            statements.append({"Effect": "Deny", "Action": "s3:PutObject", "Resource": f"arn:aws:s3:::{bucket}/{words[1]}"})
        admin.put_user_policy(UserName="publisher", PolicyName="s3", PolicyDocument=json.dumps(
            {"Version": "2012-10-17", "Statement": statements}))
        print("OK", flush=True)
    server.stop()


if __name__ == "__main__":
    main()
