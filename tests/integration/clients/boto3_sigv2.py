#!/usr/bin/env python3
"""SigV2 through whichever boto3 the running interpreter has: every request signed with
signature_version="s3" (HmacV1Auth), sub-resources included, and presigned URLs from a
client without a signature_version (SigV2 in us-east-1).

usage: boto3_sigv2.py ENDPOINT ACCESS_KEY SECRET_KEY

Prints one line per failed check and finally "boto3 <version>: N passed" (", M failed" when
any failed). Exits non-zero on any failure."""
import http.client
import io
import os
import sys
import traceback
import urllib.parse
import uuid

import boto3
import botocore
from boto3.s3.transfer import TransferConfig
from botocore.config import Config

MiB = 1024 * 1024


def fetch(url, method="GET", body=None):
    u = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=60)
    try:
        conn.request(method, u.path + "?" + u.query, body=body)
        r = conn.getresponse()
        return r.status, r.read()
    finally:
        conn.close()


def main(argv):
    endpoint, access, secret = argv[1:4]

    def client(**config):
        return boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                            aws_access_key_id=access, aws_secret_access_key=secret,
                            config=Config(s3={"addressing_style": "path"},
                                          retries={"max_attempts": 1}, **config))

    v2 = client(signature_version="s3")
    plain = client()
    bucket = "v2n-" + uuid.uuid4().hex[:12]
    big = os.urandom(6 * MiB + 7)
    passed, failures = 0, []

    def check(name, fn):
        nonlocal passed
        try:
            fn()
            passed += 1
        except Exception:  # noqa: BLE001 - every failure is reported, not raised
            failures.append(f"FAILED {name}: {traceback.format_exc().strip().splitlines()[-1]}")

    def expect(cond, what):
        if not cond:
            raise AssertionError(what)

    check("create bucket", lambda: v2.create_bucket(Bucket=bucket))
    check("bucket acl", lambda: expect(v2.get_bucket_acl(Bucket=bucket)["Grants"], "no grants"))
    check("bucket location", lambda: v2.get_bucket_location(Bucket=bucket))
    check("put", lambda: v2.put_object(Bucket=bucket, Key="a b/€.txt", Body=b"hello"))
    check("get", lambda: expect(
        v2.get_object(Bucket=bucket, Key="a b/€.txt")["Body"].read() == b"hello", "body"))
    check("multipart upload", lambda: v2.upload_fileobj(
        io.BytesIO(big), bucket, "multi.bin",
        Config=TransferConfig(multipart_threshold=5 * MiB, multipart_chunksize=5 * MiB)))
    check("multipart etag", lambda: expect(
        v2.head_object(Bucket=bucket, Key="multi.bin")["ETag"].endswith('-2"'), "not 2 parts"))
    check("ranged get", lambda: expect(v2.get_object(
        Bucket=bucket, Key="multi.bin", Range="bytes=5242870-5242889")["Body"].read() ==
        big[5242870:5242890], "range"))
    check("list parts of an open upload", lambda: (
        lambda up: (v2.list_parts(Bucket=bucket, Key="open", UploadId=up),
                    v2.abort_multipart_upload(Bucket=bucket, Key="open", UploadId=up)))(
        v2.create_multipart_upload(Bucket=bucket, Key="open")["UploadId"]))
    check("presigned get (default config: SigV2)", lambda: (
        lambda url: expect("AWSAccessKeyId=" in url and fetch(url) == (200, b"hello"), url))(
        plain.generate_presigned_url("get_object",
                                     Params={"Bucket": bucket, "Key": "a b/€.txt"})))
    check("presigned put", lambda: (
        lambda url: expect(fetch(url, "PUT", b"up")[0] == 200, url))(
        plain.generate_presigned_url("put_object", Params={"Bucket": bucket, "Key": "p"})))
    check("presigned get_object_tagging (sub-resource)", lambda: (
        lambda url: expect(fetch(url)[0] == 200, url))(
        plain.generate_presigned_url("get_object_tagging",
                                     Params={"Bucket": bucket, "Key": "a b/€.txt"})))
    check("presigned get_bucket_acl (sub-resource)", lambda: (
        lambda url: expect(b"FULL_CONTROL" in fetch(url)[1], url))(
        plain.generate_presigned_url("get_bucket_acl", Params={"Bucket": bucket})))
    check("list v2", lambda: expect([o["Key"] for o in v2.list_objects_v2(
        Bucket=bucket, Prefix="a b/", Delimiter="/")["Contents"]] == ["a b/€.txt"], "keys"))
    check("delete objects", lambda: expect(not v2.delete_objects(Bucket=bucket, Delete={
        "Objects": [{"Key": k} for k in ("a b/€.txt", "multi.bin", "p")]}).get("Errors"),
        "errors"))
    check("empty", lambda: expect(v2.list_objects_v2(Bucket=bucket)["KeyCount"] == 0, "keys"))
    check("delete bucket", lambda: v2.delete_bucket(Bucket=bucket))

    for f in failures:
        print(f)
    tail = f", {len(failures)} failed" if failures else ""
    print(f"botocore {botocore.__version__}")
    print(f"boto3 {boto3.__version__}: {passed} passed{tail}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
