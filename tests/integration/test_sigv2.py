"""Signature Version 2 (HMAC-SHA1): what boto3 and aws-cli v1 presign with by default, and
what clients configured for it sign every request with (boto3 signature_version="s3", s3cmd
signature_v2). Real clients against the real server. The virtual-hosted form and the time
rules: test_virtual_host.py."""
import http.client
import os
import re
import subprocess
import time
import urllib.parse
import uuid

import boto3
import botocore.exceptions
import pytest
from botocore.config import Config

from conftest import run_newest_boto3_script

MiB = 1024 * 1024
PYENV_AWS = "/root/.pyenv/versions/3.11.7/bin/aws"
S3CMD = "/usr/bin/s3cmd"


def error_code(body):
    m = re.search(rb"<Code>([^<]*)</Code>", body)
    return m.group(1).decode() if m else None


def v2_client(server, secret=None, **config):
    """boto3 signing every request with SigV2 (HmacV1Auth)."""
    cfg = Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1},
                 signature_version="s3", **config)
    return boto3.client("s3", endpoint_url=server.endpoint, region_name="us-east-1",
                        aws_access_key_id=server.access_key,
                        aws_secret_access_key=secret or server.secret_key, config=cfg)


def default_client(server):
    """boto3 as a user makes it: no signature_version. It presigns with SigV2."""
    return boto3.client("s3", endpoint_url=server.endpoint, region_name="us-east-1",
                        aws_access_key_id=server.access_key,
                        aws_secret_access_key=server.secret_key,
                        config=Config(s3={"addressing_style": "path"}))


def fetch(url, method="GET", body=None, headers=None):
    """(status, body) of one request to `url`, sending exactly `headers` (no Content-Type
    added, unlike urllib)."""
    u = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=60)
    try:
        conn.request(method, u.path + ("?" + u.query if u.query else ""), body=body,
                     headers=headers or {})
        r = conn.getresponse()
        return r.status, r.read()
    finally:
        conn.close()


@pytest.fixture(scope="module")
def v2(server):
    return v2_client(server)


def test_boto3_signing_with_sigv2_puts_gets_lists_copies_and_deletes(server, s3, v2):
    bucket = "v2-" + uuid.uuid4().hex[:12]
    v2.create_bucket(Bucket=bucket)
    assert bucket in [b["Name"] for b in v2.list_buckets()["Buckets"]]
    small = os.urandom(1000)
    big = os.urandom(3 * MiB + 17)
    keys = {"a.txt": small, "dir/big.bin": big, "odd $key (1)+€.bin": small,
            "empty": b""}
    for key, body in keys.items():
        v2.put_object(Bucket=bucket, Key=key, Body=body, ContentType="text/x-test",
                      Metadata={"who": "v2"})
    for key, body in keys.items():
        got = v2.get_object(Bucket=bucket, Key=key)
        assert got["Body"].read() == body, key
        assert got["Metadata"] == {"who": "v2"}
        assert s3.get_object(Bucket=bucket, Key=key)["Body"].read() == body, key
    part = v2.get_object(Bucket=bucket, Key="dir/big.bin", Range="bytes=1048570-1048589")
    assert part["Body"].read() == big[1048570:1048590]
    # Debian's botocore (1.29) signs sub-resources of path-style requests twice
    # ("/b/k?uploads?uploads"), which S3 refuses too: multipart uploads, ?acl, ?delete and
    # ListObjectsV2 with SigV2 headers are tested with the newest boto3
    # (test_newest_boto3_signing_with_sigv2).
    v2.copy_object(Bucket=bucket, Key="copy.txt", CopySource={"Bucket": bucket, "Key": "a.txt"})
    assert s3.get_object(Bucket=bucket, Key="copy.txt")["Body"].read() == small
    # ListObjects (v1): Debian's botocore also signs V2 listings' "?list-type=2", which is
    # no sub-resource (the newest botocore does not).
    listed = v2.list_objects(Bucket=bucket, Prefix="dir/", Delimiter="/")
    assert [o["Key"] for o in listed["Contents"]] == ["dir/big.bin"]
    for key in list(keys) + ["copy.txt"]:
        v2.delete_object(Bucket=bucket, Key=key)
    assert s3.list_objects_v2(Bucket=bucket)["KeyCount"] == 0
    v2.delete_bucket(Bucket=bucket)


def test_newest_boto3_signing_with_sigv2(server):
    """Multipart uploads, ACLs, DeleteObjects and presigned URLs, signed by the newest
    botocore's HmacV1Auth."""
    _, last = run_newest_boto3_script(server, "boto3_sigv2.py")
    assert int(last.split(": ")[1].split()[0]) >= 12, last


def test_sigv2_with_a_wrong_secret_or_unknown_key_is_refused(server, bucket):
    bad = v2_client(server, secret="not-the-secret")
    with pytest.raises(botocore.exceptions.ClientError) as e:
        bad.put_object(Bucket=bucket, Key="k", Body=b"x")
    assert e.value.response["Error"]["Code"] == "SignatureDoesNotMatch"
    assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403
    stranger = boto3.client("s3", endpoint_url=server.endpoint, region_name="us-east-1",
                            aws_access_key_id="NOBODY", aws_secret_access_key="x",
                            config=Config(s3={"addressing_style": "path"},
                                          signature_version="s3"))
    with pytest.raises(botocore.exceptions.ClientError) as e:
        stranger.list_buckets()
    assert e.value.response["Error"]["Code"] == "InvalidAccessKeyId"
    v2 = v2_client(server)
    with pytest.raises(botocore.exceptions.ClientError) as e:
        v2.get_object(Bucket=bucket, Key="k")
    assert e.value.response["Error"]["Code"] == "NoSuchKey"  # the signature was fine


def test_default_boto3_presigned_urls_get_and_put(server, s3, bucket):
    c = default_client(server)
    body = os.urandom(200 * 1024 + 3)
    put_url = c.generate_presigned_url("put_object", Params={"Bucket": bucket, "Key": "pre v2"},
                                       ExpiresIn=300)
    assert "AWSAccessKeyId=" in put_url and "X-Amz-" not in put_url, put_url  # SigV2
    status, _ = fetch(put_url, "PUT", body)
    assert status == 200
    get_url = c.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": "pre v2"},
                                       ExpiresIn=300)
    assert fetch(get_url) == (200, body)
    assert s3.get_object(Bucket=bucket, Key="pre v2")["Body"].read() == body
    # A response override is signed with the URL.
    url = c.generate_presigned_url("get_object", Params={
        "Bucket": bucket, "Key": "pre v2", "ResponseContentType": "text/plain"}, ExpiresIn=300)
    u = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=60)
    conn.request("GET", u.path + "?" + u.query)
    r = conn.getresponse()
    assert r.status == 200 and r.getheader("Content-Type") == "text/plain"
    assert r.read() == body
    conn.close()
    status, err = fetch(url.replace("text%2Fplain", "text%2Fhtml"))
    assert status == 403 and error_code(err) == "SignatureDoesNotMatch"
    # Tampered: another key, or a longer life than signed.
    status, err = fetch(get_url.replace("pre%20v2", "pre%20v3"))
    assert status == 403 and error_code(err) == "SignatureDoesNotMatch", err
    expires = int(re.search(r"Expires=(\d+)", get_url).group(1))
    status, err = fetch(get_url.replace(f"Expires={expires}", f"Expires={expires + 60}"))
    assert status == 403 and error_code(err) == "SignatureDoesNotMatch", err
    # A PUT URL does not sign a body's Content-Type it was not given.
    status, err = fetch(put_url, "PUT", body, {"Content-Type": "text/html"})
    assert status == 403 and error_code(err) == "SignatureDoesNotMatch", err


def test_expired_sigv2_presigned_url_is_refused(server, s3, bucket):
    s3.put_object(Bucket=bucket, Key="soon", Body=b"1")
    url = default_client(server).generate_presigned_url(
        "get_object", Params={"Bucket": bucket, "Key": "soon"}, ExpiresIn=1)
    time.sleep(2.2)
    status, err = fetch(url)
    assert status == 403 and error_code(err) == "AccessDenied", err
    assert b"Request has expired" in err


def test_aws_cli_v1_presign(server, s3, bucket):
    if not os.access(PYENV_AWS, os.X_OK):
        pytest.skip(f"aws-cli v1 ({PYENV_AWS}) is not installed on this machine")
    s3.put_object(Bucket=bucket, Key="shared/doc.txt", Body=b"shared with a link")
    url = server.aws("s3", "presign", f"s3://{bucket}/shared/doc.txt", aws_bin=PYENV_AWS)
    url = url.stdout.strip()
    assert "Signature=" in url and "AWSAccessKeyId=" in url, url
    assert fetch(url) == (200, b"shared with a link")


def test_s3cmd_with_signature_v2(server, s3, tmp_path):
    assert os.access(S3CMD, os.X_OK), f"{S3CMD} missing: scripts/install-deps.sh installs it"
    hostport = server.endpoint.split("://", 1)[1]
    cfg = tmp_path / "s3cfg"
    cfg.write_text(
        "[default]\n"
        f"access_key = {server.access_key}\nsecret_key = {server.secret_key}\n"
        f"host_base = {hostport}\nhost_bucket = {hostport}\n"
        "bucket_location = us-east-1\nuse_https = False\nsignature_v2 = True\n"
        "progress_meter = False\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}

    def s3cmd(*args):
        res = subprocess.run([S3CMD, "-c", str(cfg), "--no-progress", *args],
                             capture_output=True, text=True, timeout=300, env=env)
        assert res.returncode == 0, f"s3cmd {args}:\n{res.stdout}\n{res.stderr}"
        return res.stdout

    name = "s3cmd-v2-" + uuid.uuid4().hex[:10]
    s3cmd("mb", f"s3://{name}")
    src = tmp_path / "up.bin"
    src.write_bytes(os.urandom(6 * MiB + 5))  # multipart: s3cmd's parts are 15 MiB; force 5
    s3cmd("put", "--multipart-chunk-size-mb=5", str(src), f"s3://{name}/d/up.bin")
    s3cmd("put", "--disable-multipart", str(src), f"s3://{name}/d/single.bin")
    assert s3.get_object(Bucket=name, Key="d/up.bin")["Body"].read() == src.read_bytes()
    dst = tmp_path / "down.bin"
    s3cmd("get", "--force", f"s3://{name}/d/single.bin", str(dst))
    assert dst.read_bytes() == src.read_bytes()
    listing = s3cmd("ls", "--recursive", f"s3://{name}/")
    assert f"s3://{name}/d/up.bin" in listing and f"s3://{name}/d/single.bin" in listing
    s3cmd("del", "--recursive", "--force", f"s3://{name}/")
    s3cmd("rb", f"s3://{name}")


def test_presigned_sub_resource_requests(server, s3, bucket):
    """A presigned URL's own parameters do not count against a sub-resource that is routed
    only when alone (?tagging, ?acl). SigV4 here; SigV2 with the newest boto3
    (clients/boto3_sigv2.py: Debian's botocore signs a V2 sub-resource twice)."""
    s3.put_object(Bucket=bucket, Key="tagged", Body=b"1", Tagging="k=v")
    url = s3.generate_presigned_url("get_object_tagging",
                                    Params={"Bucket": bucket, "Key": "tagged"})
    status, body = fetch(url)
    assert status == 200 and b"<Key>k</Key><Value>v</Value>" in body, (url, body)
    url = s3.generate_presigned_url("get_bucket_acl", Params={"Bucket": bucket})
    status, body = fetch(url)
    assert status == 200 and b"FULL_CONTROL" in body, (url, body)


def test_the_admin_api_takes_sigv4_and_signed_bodies_only(server):
    # SigV2 signs neither the query (?dry-run) nor the body (a user's secret key); an
    # unsigned payload may be swapped on the way. Both are refused, for the root user too.
    from botocore.auth import HmacV1Auth, S3SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials
    creds = Credentials(server.access_key, server.secret_key)
    url = server.endpoint + "/_granary/admin/stats"
    req = AWSRequest(method="GET", url=url)
    HmacV1Auth(creds).add_auth(req)
    status, body = fetch(url, headers=dict(req.headers))
    assert status == 403 and error_code(body) == "AccessDenied", body
    assert b"Signature Version 4" in body

    url = server.endpoint + "/_granary/admin/users/unsigned-body"
    payload = b'{"secret_key": "chosen-by-whoever-swapped-the-body"}'
    req = AWSRequest(method="PUT", url=url, data=payload)
    auth = S3SigV4Auth(creds, "s3", "us-east-1")
    auth._should_sha256_sign_payload = lambda request: False  # UNSIGNED-PAYLOAD
    auth.add_auth(req)
    assert req.headers["X-Amz-Content-SHA256"] == "UNSIGNED-PAYLOAD"
    status, body = fetch(url, "PUT", payload, dict(req.headers))
    assert status == 403 and error_code(body) == "AccessDenied", body
    # SigV4 with a signed payload hash (an empty body here) is served.
    req = AWSRequest(method="GET", url=server.endpoint + "/_granary/admin/stats")
    S3SigV4Auth(creds, "s3", "us-east-1").add_auth(req)
    status, body = fetch(server.endpoint + "/_granary/admin/stats", headers=dict(req.headers))
    assert status == 200, body
