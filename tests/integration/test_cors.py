"""CORS: a bucket's rules set with boto3 and aws-cli, and a browser's requests answered by
them on the real binary: the unauthenticated OPTIONS preflight, and the Access-Control-*
headers on the real request that follows (sent here over plain HTTP, as a browser sends
them, with a presigned URL or SigV4 headers). The JS SDK v3 and s3cmd set the same rules
in test_js_sdk.py and test_clients.py."""
import http.client
import json
import urllib.parse

import botocore
import pytest

from conftest import Server

APP = "https://app.example.com"
RULES = [
    {"ID": "app", "AllowedOrigins": ["https://*.example.com"],
     "AllowedMethods": ["GET", "PUT", "HEAD"],
     "AllowedHeaders": ["content-type", "x-amz-*", "authorization"],
     "ExposeHeaders": ["ETag", "x-amz-request-id"], "MaxAgeSeconds": 600},
    {"AllowedOrigins": ["*"], "AllowedMethods": ["GET"]},
]


def raw(server, method, path, headers=None, body=None):
    """One HTTP request as a browser would send it; (status, headers (lower-case), body)."""
    u = urllib.parse.urlsplit(server.endpoint)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        res = conn.getresponse()
        return res.status, {k.lower(): v for k, v in res.getheaders()}, res.read()
    finally:
        conn.close()


def preflight(server, path, origin=APP, method="PUT", headers=None):
    h = {"Origin": origin, "Access-Control-Request-Method": method}
    if headers:
        h["Access-Control-Request-Headers"] = headers
    return raw(server, "OPTIONS", path, h)


def code_of(body):
    text = body.decode()
    return text.split("<Code>", 1)[1].split("</Code>", 1)[0] if "<Code>" in text else ""


def test_boto3_sets_reads_and_deletes_the_rules(s3, bucket):
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.get_bucket_cors(Bucket=bucket)
    assert e.value.response["Error"]["Code"] == "NoSuchCORSConfiguration"
    s3.put_bucket_cors(Bucket=bucket, CORSConfiguration={"CORSRules": RULES})
    assert s3.get_bucket_cors(Bucket=bucket)["CORSRules"] == RULES
    res = s3.delete_bucket_cors(Bucket=bucket)
    assert res["ResponseMetadata"]["HTTPStatusCode"] == 204
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.get_bucket_cors(Bucket=bucket)
    assert e.value.response["Error"]["Code"] == "NoSuchCORSConfiguration"
    # Refused as S3 refuses them; nothing stored.
    for rules, code in (
            ([{"AllowedOrigins": ["*"], "AllowedMethods": ["PATCH"]}], "InvalidRequest"),
            ([{"AllowedOrigins": ["https://*.*.example"], "AllowedMethods": ["GET"]}],
             "InvalidRequest"),
            ([{"AllowedOrigins": ["*"], "AllowedMethods": ["GET"]}] * 101, "InvalidRequest")):
        with pytest.raises(botocore.exceptions.ClientError) as e:
            s3.put_bucket_cors(Bucket=bucket, CORSConfiguration={"CORSRules": rules})
        assert e.value.response["Error"]["Code"] == code
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.get_bucket_cors(Bucket=bucket)
    assert e.value.response["Error"]["Code"] == "NoSuchCORSConfiguration"


def test_preflight_and_the_request_after_it(server, s3, bucket):
    s3.put_object(Bucket=bucket, Key="page/data.json", Body=b'{"ok": true}')
    path = f"/{bucket}/page/data.json"
    # No rules: the preflight is refused and nothing says the origin may read.
    status, headers, body = preflight(server, path)
    assert status == 403 and code_of(body) == "AccessForbidden"
    assert "access-control-allow-origin" not in headers

    s3.put_bucket_cors(Bucket=bucket, CORSConfiguration={"CORSRules": RULES})
    status, headers, body = preflight(server, path, headers="Content-Type, X-Amz-Date")
    assert status == 200, body
    assert headers["access-control-allow-origin"] == APP
    assert headers["access-control-allow-credentials"] == "true"
    assert headers["access-control-allow-methods"] == "GET, PUT, HEAD"
    assert headers["access-control-allow-headers"] == "content-type, x-amz-date"
    assert headers["access-control-max-age"] == "600"
    assert "Origin" in headers["vary"]
    assert body == b""
    # The second rule lets any origin GET, without credentials.
    status, headers, _ = preflight(server, path, origin="https://else.test", method="GET")
    assert status == 200 and headers["access-control-allow-origin"] == "*"
    assert "access-control-allow-credentials" not in headers
    # Refused: PUT from another origin; a header no rule names; no Origin at all.
    status, _, body = preflight(server, path, origin="https://else.test", method="PUT")
    assert status == 403 and code_of(body) == "AccessForbidden"
    status, _, body = preflight(server, path, headers="x-custom-header")
    assert status == 403 and code_of(body) == "AccessForbidden"
    status, _, body = raw(server, "OPTIONS", path, {"Access-Control-Request-Method": "GET"})
    assert status == 400 and code_of(body) == "BadRequest"
    # A missing bucket has no rules (and an anonymous preflight learns nothing more).
    status, _, body = preflight(server, f"/{bucket}-missing/k")
    assert status == 403 and code_of(body) == "AccessForbidden"

    # The real request: a presigned GET from the page, and a PUT signed in headers.
    url = s3.generate_presigned_url("get_object", Params={"Bucket": bucket,
                                                          "Key": "page/data.json"})
    target = url.split(server.endpoint, 1)[1]
    status, headers, body = raw(server, "GET", target, {"Origin": APP})
    assert status == 200 and body == b'{"ok": true}'
    assert headers["access-control-allow-origin"] == APP
    assert headers["access-control-expose-headers"] == "ETag, x-amz-request-id"
    # An error carries them too, so the page can read it.
    missing = s3.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": "none"})
    status, headers, body = raw(server, "GET", missing.split(server.endpoint, 1)[1],
                                {"Origin": APP})
    assert status == 404 and code_of(body) == "NoSuchKey"
    assert headers["access-control-allow-origin"] == APP
    # So does a key refused for its form, before any route is chosen.
    status, headers, body = raw(server, "GET", f"/{bucket}/{'k' * 1025}", {"Origin": APP})
    assert status == 400 and code_of(body) == "KeyTooLongError"
    assert headers["access-control-allow-origin"] == APP and "Origin" in headers["vary"]

    def add_origin(request, **_):
        request.headers["Origin"] = APP
    s3.meta.events.register("before-sign.s3.PutObject", add_origin)
    try:
        res = s3.put_object(Bucket=bucket, Key="page/upload.txt", Body=b"from the page")
    finally:
        s3.meta.events.unregister("before-sign.s3.PutObject", add_origin)
    h = res["ResponseMetadata"]["HTTPHeaders"]
    assert h["access-control-allow-origin"] == APP
    assert s3.get_object(Bucket=bucket, Key="page/upload.txt")["Body"].read() == b"from the page"
    # Without an Origin (not a browser) nothing is added.
    plain = s3.get_object(Bucket=bucket, Key="page/data.json")["ResponseMetadata"]["HTTPHeaders"]
    assert "access-control-allow-origin" not in plain and "vary" not in plain


def test_aws_cli_sets_and_reads_the_rules(server, bucket, tmp_path):
    cfg = tmp_path / "cors.json"
    cfg.write_text(json.dumps({"CORSRules": RULES}))
    server.aws("s3api", "put-bucket-cors", "--bucket", bucket,
               "--cors-configuration", f"file://{cfg}")
    out = json.loads(server.aws("s3api", "get-bucket-cors", "--bucket", bucket).stdout)
    assert out["CORSRules"] == RULES
    server.aws("s3api", "delete-bucket-cors", "--bucket", bucket)
    res = server.aws("s3api", "get-bucket-cors", "--bucket", bucket, check=False)
    assert res.returncode != 0 and "NoSuchCORSConfiguration" in res.stderr, res.stderr


def test_rules_survive_a_restart(granary_bin, tmp_data):
    srv = Server(tmp_data).start()
    try:
        c = srv.client()
        c.create_bucket(Bucket="cors-kept")
        c.put_bucket_cors(Bucket="cors-kept", CORSConfiguration={"CORSRules": RULES})
        srv.stop()
        srv.start()
        assert srv.client().get_bucket_cors(Bucket="cors-kept")["CORSRules"] == RULES
        status, headers, _ = preflight(srv, "/cors-kept/k")
        assert status == 200 and headers["access-control-allow-origin"] == APP
    finally:
        srv.stop()
