#!/usr/bin/env python3
"""Standalone round trip through whichever boto3 the running interpreter has (written for the
newest one, whose defaults send x-amz-checksum-crc32 on PUT, may frame bodies as aws-chunked
with a checksum trailer, and send x-amz-checksum-mode: ENABLED on GET).

usage: boto3_roundtrip.py ENDPOINT ACCESS_KEY SECRET_KEY

Prints one line per failed check (with the server's status, code, message and the request
headers that were sent), one line per distinct request shape seen, and finally
"boto3 <version>: N passed" (", M failed" when any failed). Exits non-zero on any failure."""
import base64
import hashlib
import io
import os
import sys
import tempfile
import traceback
import uuid
import zlib

import boto3
import botocore
import botocore.exceptions
from botocore.config import Config

MiB = 1024 * 1024
INTERESTING = ("content-encoding", "content-length", "x-amz-content-sha256",
               "x-amz-decoded-content-length", "x-amz-trailer", "x-amz-checksum-crc32",
               "x-amz-checksum-mode", "x-amz-sdk-checksum-algorithm", "transfer-encoding",
               "range")
VARYING = ("content-length", "x-amz-decoded-content-length", "range", "x-amz-checksum-crc32")


class Runner:
    def __init__(self):
        self.passed = 0
        self.failures = []
        self.last_request = {}
        self.shapes = set()
        self.mode = ""

    def on_send(self, request, **kwargs):
        hdrs = {k.lower(): (v.decode() if isinstance(v, bytes) else v)
                for k, v in request.headers.items()}
        self.last_request = {"method": request.method, "url": request.url,
                             "headers": {k: hdrs[k] for k in INTERESTING if k in hdrs}}
        masked = {k: ("*" if k in VARYING or (k == "x-amz-content-sha256"
                                               and len(hdrs[k]) == 64) else hdrs[k])
                  for k in INTERESTING if k in hdrs}
        self.shapes.add((self.mode, request.method) + tuple(f"{k}={v}" for k, v in masked.items()))

    def check(self, name, cond, detail=""):
        if cond:
            self.passed += 1
        else:
            self.failures.append(
                f"FAIL [{self.mode}] {name}: {detail} last request={self.last_request}")

    def step(self, name, fn):
        """Runs fn(); an exception is one failure with the server's answer when there is one."""
        try:
            return fn()
        except botocore.exceptions.ClientError as e:
            r = e.response
            meta = r.get("ResponseMetadata", {})
            self.failures.append(
                f"FAIL [{self.mode}] {name}: ClientError status={meta.get('HTTPStatusCode')} "
                f"code={r.get('Error', {}).get('Code')!r} "
                f"message={r.get('Error', {}).get('Message')!r} "
                f"response headers={meta.get('HTTPHeaders')} last request={self.last_request}")
        except Exception as e:  # noqa: BLE001 - any client-side error is a failed check
            self.failures.append(f"FAIL [{self.mode}] {name}: {type(e).__name__}: {e} "
                                 f"last request={self.last_request}\n"
                                 + traceback.format_exc(limit=3))
        return None


def force_trailer(params, **kwargs):
    """before-call.s3.PutObject: send the CRC32 as an aws-chunked trailer, exactly as botocore
    does by itself on an https endpoint (STREAMING-UNSIGNED-PAYLOAD-TRAILER, Content-Encoding:
    aws-chunked, Transfer-Encoding: chunked, x-amz-trailer, x-amz-decoded-content-length)."""
    algorithm = params.get("context", {}).get("checksum", {}).get("request_algorithm")
    if isinstance(algorithm, dict) and algorithm.get("in") == "header":
        algorithm["in"] = "trailer"


def crc32_b64(data):
    return base64.b64encode((zlib.crc32(data) & 0xFFFFFFFF).to_bytes(4, "big")).decode()


def suite(s3, run, mode):
    bucket = "b3-" + mode[:3] + "-" + uuid.uuid4().hex[:16]
    run.step("create_bucket", lambda: s3.create_bucket(Bucket=bucket))

    # Tags: PutObjectTagging's body goes with whatever checksum this botocore sends.
    run.step("put_object tagged", lambda: s3.put_object(Bucket=bucket, Key="tagged", Body=b"t",
                                                        Tagging="a=1"))
    run.step("put_object_tagging", lambda: s3.put_object_tagging(
        Bucket=bucket, Key="tagged", Tagging={"TagSet": [{"Key": "b", "Value": "2"}]}))
    tags = run.step("get_object_tagging",
                    lambda: s3.get_object_tagging(Bucket=bucket, Key="tagged"))
    run.check("tags replaced", tags is not None and
              tags["TagSet"] == [{"Key": "b", "Value": "2"}], f"{tags}")
    run.step("delete_object", lambda: s3.delete_object(Bucket=bucket, Key="tagged"))

    bodies = {}
    for size in (0, 1, 200 * 1024, 9 * MiB + 1):
        key = f"put/obj-{size}"
        body = os.urandom(size)
        bodies[key] = body
        put = run.step(f"put_object {size}", lambda: s3.put_object(Bucket=bucket, Key=key,
                                                                    Body=body))
        if mode == "https-trailer":
            sent = run.last_request.get("headers", {})
            run.check(f"put_object {size} went as aws-chunked with a trailer",
                      sent.get("content-encoding") == "aws-chunked"
                      and sent.get("x-amz-trailer") == "x-amz-checksum-crc32",
                      "botocore internals changed: force_trailer no longer applies")
        if put is None:
            continue
        run.check(f"put_object {size} etag",
                  put.get("ETag") == '"%s"' % hashlib.md5(body).hexdigest(),
                  f"ETag={put.get('ETag')!r}")
        if "ChecksumCRC32" in put:
            run.check(f"put_object {size} echoed crc32", put["ChecksumCRC32"] == crc32_b64(body),
                      f"ChecksumCRC32={put['ChecksumCRC32']!r} want {crc32_b64(body)!r}")
        got = run.step(f"get_object {size}", lambda: s3.get_object(Bucket=bucket, Key=key))
        if got is not None:
            data = run.step(f"get_object {size} body", lambda: got["Body"].read())
            run.check(f"get_object {size} bytes", data == body,
                      f"got {None if data is None else len(data)} bytes, want {size}")
            run.check(f"get_object {size} length", got.get("ContentLength") == size,
                      f"ContentLength={got.get('ContentLength')!r}")
            if "ChecksumCRC32" in got:
                run.check(f"get_object {size} crc32", got["ChecksumCRC32"] == crc32_b64(body),
                          f"ChecksumCRC32={got['ChecksumCRC32']!r} want {crc32_b64(body)!r}")
        if size == 0:
            continue
        ranges = [(0, 0), (size // 2, size - 1), (size - 1, size - 1)]
        if size > 100000:
            ranges += [(4095, 70000), (size - 1000, size + 5000)]
        for first, last in ranges:
            want = body[first:last + 1]
            r = run.step(f"ranged get {size} {first}-{last}",
                         lambda: s3.get_object(Bucket=bucket, Key=key,
                                               Range=f"bytes={first}-{last}"))
            if r is None:
                continue
            data = run.step(f"ranged get {size} {first}-{last} body", lambda: r["Body"].read())
            run.check(f"ranged get {size} {first}-{last} bytes", data == want,
                      f"got {None if data is None else len(data)} bytes, want {len(want)}")
            run.check(f"ranged get {size} {first}-{last} status",
                      r["ResponseMetadata"]["HTTPStatusCode"] == 206,
                      f"status={r['ResponseMetadata']['HTTPStatusCode']}")
            run.check(f"ranged get {size} {first}-{last} content-range",
                      r.get("ContentRange") == f"bytes {first}-{first + len(want) - 1}/{size}",
                      f"ContentRange={r.get('ContentRange')!r}")

    # upload_fileobj below the 8 MiB multipart threshold: one PutObject through s3transfer.
    big = os.urandom(7 * MiB)
    with tempfile.TemporaryFile() as f:
        f.write(big)
        f.seek(0)
        run.step("upload_fileobj 7MiB", lambda: s3.upload_fileobj(f, bucket, "transfer/seven"))
    bodies["transfer/seven"] = big
    head = run.step("head_object 7MiB", lambda: s3.head_object(Bucket=bucket,
                                                               Key="transfer/seven"))
    if head is not None:
        run.check("head_object 7MiB length", head.get("ContentLength") == len(big),
                  f"ContentLength={head.get('ContentLength')!r}")
        run.check("head_object 7MiB etag",
                  head.get("ETag") == '"%s"' % hashlib.md5(big).hexdigest(),
                  f"ETag={head.get('ETag')!r}")
    got = run.step("get 7MiB", lambda: s3.get_object(Bucket=bucket, Key="transfer/seven"))
    if got is not None:
        data = run.step("get 7MiB body", lambda: got["Body"].read())
        run.check("get 7MiB bytes", data == big,
                  f"got {None if data is None else len(data)} bytes, want {len(big)}")
    down = io.BytesIO()
    run.step("download_fileobj 7MiB", lambda: s3.download_fileobj(bucket, "transfer/seven", down))
    run.check("download_fileobj 7MiB bytes", down.getvalue() == big,
              f"got {len(down.getvalue())} bytes")

    # Listing with a delimiter across several small pages.
    for k in ("list/a", "list/b", "list/d1/x", "list/d1/y", "list/d2/z", "list/e"):
        bodies[k] = k.encode()
        run.step(f"put {k}", lambda: s3.put_object(Bucket=bucket, Key=k, Body=k.encode()))
    pages = run.step("list_objects_v2 paginate", lambda: list(
        s3.get_paginator("list_objects_v2").paginate(
            Bucket=bucket, Prefix="list/", Delimiter="/", PaginationConfig={"PageSize": 2})))
    if pages is not None:
        keys = [o["Key"] for p in pages for o in p.get("Contents", [])]
        prefixes = [c["Prefix"] for p in pages for c in p.get("CommonPrefixes", [])]
        run.check("list delimiter keys", keys == ["list/a", "list/b", "list/e"], f"keys={keys}")
        run.check("list delimiter prefixes", prefixes == ["list/d1/", "list/d2/"],
                  f"prefixes={prefixes}")
        run.check("list paginated", len(pages) >= 3, f"{len(pages)} pages")
    pages = run.step("list_objects_v2 all", lambda: list(
        s3.get_paginator("list_objects_v2").paginate(Bucket=bucket,
                                                     PaginationConfig={"PageSize": 3})))
    if pages is not None:
        keys = [o["Key"] for p in pages for o in p.get("Contents", [])]
        run.check("list all keys", keys == sorted(bodies), f"keys={keys}")

    for k in sorted(bodies):
        r = run.step(f"delete {k}", lambda: s3.delete_object(Bucket=bucket, Key=k))
        if r is not None:
            run.check(f"delete {k} status", r["ResponseMetadata"]["HTTPStatusCode"] == 204,
                      f"status={r['ResponseMetadata']['HTTPStatusCode']}")
    left = run.step("list after delete", lambda: s3.list_objects_v2(Bucket=bucket))
    if left is not None:
        run.check("bucket empty after delete",
                  left.get("KeyCount") == 0 and not left.get("Contents"),
                  f"left={[o['Key'] for o in left.get('Contents', [])]}")
    try:
        s3.get_object(Bucket=bucket, Key="put/obj-1")
        run.check("get deleted is NoSuchKey", False, "object still readable")
    except botocore.exceptions.ClientError as e:
        run.check("get deleted is NoSuchKey", e.response["Error"]["Code"] == "NoSuchKey",
                  f"code={e.response['Error']['Code']!r}")
    run.step("delete_bucket", lambda: s3.delete_bucket(Bucket=bucket))



def main(argv):
    if len(argv) != 4:
        print(__doc__, file=sys.stderr)
        return 2
    endpoint, access, secret = argv[1:4]
    run = Runner()
    modes = ["default"]
    # Only a botocore with the new default checksum behaviour has trailers to force.
    if "request_checksum_calculation" in getattr(Config, "OPTION_DEFAULTS", {}):
        modes.append("https-trailer")
    else:
        print(f"note: botocore {botocore.__version__} predates default checksums; "
              "https-trailer pass not run")
    for mode in modes:
        s3 = boto3.client(
            "s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id=access,
            aws_secret_access_key=secret,
            config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1},
                          signature_version="s3v4"))
        s3.meta.events.register("before-send.s3", run.on_send)
        if mode == "https-trailer":
            s3.meta.events.register("before-call.s3.PutObject", force_trailer)
        run.mode = mode
        suite(s3, run, mode)

    for shape in sorted(run.shapes):
        print("request shape:", " ".join(shape))
    for f in run.failures:
        print(f)
    tail = f", {len(run.failures)} failed" if run.failures else ""
    print(f"botocore {botocore.__version__}")
    print(f"boto3 {boto3.__version__}: {run.passed} passed{tail}")
    return 1 if run.failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
