"""POST Object (browser form uploads) on the real binary: forms signed by boto3's
generate_presigned_post (SigV4, and SigV2 with signature_version "s3"), sent as a browser
sends them (multipart/form-data, with requests), small files (in memory) and large ones
(streamed into stripes), the answers S3 gives (204, 201 with a PostResponse, 303 to a
redirect), the policy's refusals, and malformed forms. Nothing refused is stored."""
import base64
import hashlib
import http.client
import json
import os
import urllib.parse
import xml.etree.ElementTree as ET

import botocore
import pytest
import requests

KIB = 1024
MIB = 1024 * KIB


def code_of(res):
    text = res.content.decode(errors="replace")
    return text.split("<Code>", 1)[1].split("</Code>", 1)[0] if "<Code>" in text else ""


def post(presigned, data, filename="file.bin", extra=None, session=None, part_type=None):
    fields = dict(presigned["fields"])
    fields.update(extra or {})
    part = (filename, data, part_type) if part_type else (filename, data)
    return (session or requests).post(presigned["url"], data=fields, files={"file": part},
                                      timeout=60, allow_redirects=False)


def absent(s3, bucket, key):
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.head_object(Bucket=bucket, Key=key)
    return e.value.response["Error"]["Code"] == "404"


def test_small_file_with_fields_201(s3, bucket):
    body = b"field notes\n" * 100
    presigned = s3.generate_presigned_post(
        bucket, "uploads/${filename}",
        Fields={"Content-Type": "text/plain", "x-amz-meta-owner": "alice",
                "success_action_status": "201", "Cache-Control": "max-age=60"},
        Conditions=[{"Content-Type": "text/plain"}, {"x-amz-meta-owner": "alice"},
                    {"success_action_status": "201"}, {"Cache-Control": "max-age=60"},
                    ["content-length-range", 1, 10 * MIB]],
        ExpiresIn=600)
    res = post(presigned, body, filename="notes.txt")
    assert res.status_code == 201, res.text
    doc = ET.fromstring(res.content)
    assert doc.tag == "PostResponse"
    assert doc.findtext("Bucket") == bucket
    assert doc.findtext("Key") == "uploads/notes.txt"
    assert doc.findtext("ETag") == '"%s"' % hashlib.md5(body).hexdigest()
    assert doc.findtext("Location").endswith(f"/{bucket}/uploads/notes.txt")
    head = s3.head_object(Bucket=bucket, Key="uploads/notes.txt")
    assert head["ContentType"] == "text/plain"
    assert head["Metadata"] == {"owner": "alice"}
    assert head["CacheControl"] == "max-age=60"
    assert s3.get_object(Bucket=bucket, Key="uploads/notes.txt")["Body"].read() == body


@pytest.mark.parametrize("size", [200 * KIB, 3 * MIB + 17])
def test_large_file_is_streamed_204(s3, bucket, size):
    body = os.urandom(size)
    presigned = s3.generate_presigned_post(bucket, "big.bin")
    res = post(presigned, body, part_type="text/html")
    assert res.status_code == 204, res.text
    assert res.headers["ETag"] == '"%s"' % hashlib.md5(body).hexdigest()
    assert res.headers["Location"].endswith(f"/{bucket}/big.bin")
    assert s3.get_object(Bucket=bucket, Key="big.bin")["Body"].read() == body
    # The file part's own Content-Type is not the object's: only the Content-Type field,
    # which the policy controls, is (here there is none).
    assert s3.head_object(Bucket=bucket, Key="big.bin")["ContentType"] == "binary/octet-stream"


def test_sigv2_form(server, bucket):
    s3v2 = server.client(signature_version="s3")
    presigned = s3v2.generate_presigned_post(bucket, "v2.txt")
    assert "AWSAccessKeyId" in presigned["fields"] and "signature" in presigned["fields"]
    res = post(presigned, b"signed the old way")
    assert res.status_code == 204, res.text
    assert server.client().get_object(Bucket=bucket, Key="v2.txt")["Body"].read() == \
        b"signed the old way"


def test_redirect_and_tags_and_a_kept_connection(server, s3, bucket):
    tagging = ("<Tagging><TagSet><Tag><Key>team</Key><Value>data eng</Value></Tag>"
               "</TagSet></Tagging>")
    presigned = s3.generate_presigned_post(
        bucket, "tagged.txt",
        Fields={"success_action_redirect": "https://app.example.com/done?x=1",
                "tagging": tagging},
        Conditions=[{"success_action_redirect": "https://app.example.com/done?x=1"},
                    {"tagging": tagging}])
    # Two forms on one connection: the server keeps it (the socket stays the same).
    u = urllib.parse.urlsplit(server.endpoint)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
    try:
        def send(presigned, data):
            prepared = requests.Request("POST", presigned["url"], data=presigned["fields"],
                                        files={"file": ("f", data)}).prepare()
            conn.request("POST", f"/{bucket}", body=prepared.body,
                         headers={"Content-Type": prepared.headers["Content-Type"]})
            res = conn.getresponse()
            res.read()
            return res
        res = send(presigned, b"hello")
        assert res.status == 303
        sock = conn.sock
        assert sock is not None
        location = urllib.parse.urlsplit(res.getheader("Location"))
        query = urllib.parse.parse_qs(location.query)
        assert location.netloc == "app.example.com" and query["x"] == ["1"]
        assert query["bucket"] == [bucket] and query["key"] == ["tagged.txt"]
        assert query["etag"] == ['"%s"' % hashlib.md5(b"hello").hexdigest()]
        res = send(s3.generate_presigned_post(bucket, "second.txt"), b"2")
        assert res.status == 204
        assert conn.sock is sock
    finally:
        conn.close()
    assert s3.get_object_tagging(Bucket=bucket, Key="tagged.txt")["TagSet"] == \
        [{"Key": "team", "Value": "data eng"}]
    assert s3.get_object(Bucket=bucket, Key="second.txt")["Body"].read() == b"2"


def test_policy_refusals_store_nothing(server, s3, bucket):
    cases = []
    # Expired.
    cases.append((s3.generate_presigned_post(bucket, "k1", ExpiresIn=-60), {}, b"x",
                  403, "AccessDenied"))
    # The key outside the policy's prefix.
    p = s3.generate_presigned_post(bucket, "up/${filename}")
    cases.append((p, {"key": "elsewhere/k2"}, b"x", 403, "AccessDenied"))
    # A field the policy does not name.
    cases.append((s3.generate_presigned_post(bucket, "k3"), {"x-amz-meta-extra": "1"}, b"x",
                  403, "AccessDenied"))
    # Over the policy's size range, and under it.
    big = s3.generate_presigned_post(bucket, "k4", Conditions=[["content-length-range", 0, 1000]])
    cases.append((big, {}, b"y" * 1001, 400, "EntityTooLarge"))
    cases.append((big, {}, os.urandom(2 * MIB), 400, "EntityTooLarge"))
    small = s3.generate_presigned_post(bucket, "k5",
                                       Conditions=[["content-length-range", 10, 1000]])
    cases.append((small, {}, b"y", 400, "EntityTooSmall"))
    # A policy changed after it was signed.
    tampered = s3.generate_presigned_post(bucket, "k6")
    doc = json.loads(base64.b64decode(tampered["fields"]["policy"]))
    doc["expiration"] = "2099-01-01T00:00:00Z"
    tampered["fields"]["policy"] = base64.b64encode(json.dumps(doc).encode()).decode()
    cases.append((tampered, {}, b"x", 403, "SignatureDoesNotMatch"))
    # Signed with a key the server does not know.
    stranger = server.client(access="AKIDNOBODY", secret="nope").generate_presigned_post(
        bucket, "k7")
    cases.append((stranger, {}, b"x", 403, "InvalidAccessKeyId"))
    # Signed with the right key id and the wrong secret.
    wrong = server.client(secret="not-the-secret").generate_presigned_post(bucket, "k8")
    cases.append((wrong, {}, b"x", 403, "SignatureDoesNotMatch"))
    for presigned, extra, data, status, code in cases:
        res = post(presigned, data, extra=extra)
        assert (res.status_code, code_of(res)) == (status, code), (presigned["fields"], res.text)
    for key in ("k1", "elsewhere/k2", "up/file.bin", "k3", "k4", "k5", "k6", "k7", "k8"):
        assert absent(s3, bucket, key), key
    # No signature at all: an anonymous form, which a bucket without a policy refuses.
    res = requests.post(f"{server.endpoint}/{bucket}", data={"key": "anon"},
                        files={"file": ("a", b"a")}, timeout=30)
    assert (res.status_code, code_of(res)) == (403, "AccessDenied")
    assert absent(s3, bucket, "anon")
    # A bucket that does not exist.
    res = post(s3.generate_presigned_post("no-such-bucket-here", "k"), b"x")
    assert (res.status_code, code_of(res)) == (404, "NoSuchBucket")
    # A bucket field that names another bucket than the one posted to.
    other = s3.generate_presigned_post(bucket, "k9", Fields={"bucket": "elsewhere"},
                                       Conditions=[{"bucket": "elsewhere"}])
    res = post(other, b"x")
    assert (res.status_code, code_of(res)) == (400, "InvalidArgument")
    # ${filename} that leaves the key empty: no key, not a bucket-level request.
    res = post(s3.generate_presigned_post(bucket, "${filename}"), b"x", filename="")
    assert (res.status_code, code_of(res)) == (400, "InvalidArgument")
    assert absent(s3, bucket, "k9")


def test_fields_that_become_headers_are_checked(s3, bucket):
    loose = s3.generate_presigned_post(
        bucket, "h.html", Conditions=[["starts-with", "$Content-Type", "image/"],
                                      ["starts-with", "$Content-Disposition", ""]])
    # A policy that allows images only: a list with another type in it is refused (a
    # browser would take the last type of the list).
    res = post(loose, b"<html>", extra={"Content-Type": "image/png, text/html",
                                        "Content-Disposition": "inline"})
    assert (res.status_code, code_of(res)) == (403, "AccessDenied")
    # A field whose value would split the header it becomes (the policy allows any value).
    res = post(loose, b"<html>", extra={"Content-Type": "image/png",
                                        "Content-Disposition": "inline\r\nSet-Cookie: a=b"})
    assert (res.status_code, code_of(res)) == (400, "InvalidArgument")
    assert absent(s3, bucket, "h.html")
    # ${filename} in other fields too; Content-MD5 is verified.
    named = s3.generate_presigned_post(
        bucket, "files/${filename}",
        Fields={"Content-Disposition": 'attachment; filename="${filename}"',
                "x-amz-meta-original": "${filename}"},
        Conditions=[["starts-with", "$key", "files/"],
                    ["starts-with", "$Content-Disposition", "attachment"],
                    ["starts-with", "$x-amz-meta-original", ""],
                    ["starts-with", "$Content-MD5", ""]])
    data = b"report body"
    md5 = base64.b64encode(hashlib.md5(data).digest()).decode()
    res = post(named, data, filename="report.pdf", extra={"Content-MD5": md5})
    assert res.status_code == 204, res.text
    head = s3.head_object(Bucket=bucket, Key="files/report.pdf")
    assert head["ContentDisposition"] == 'attachment; filename="report.pdf"'
    assert head["Metadata"] == {"original": "report.pdf"}
    wrong = base64.b64encode(hashlib.md5(b"other").digest()).decode()
    res = post(named, data, filename="second.pdf", extra={"Content-MD5": wrong})
    assert (res.status_code, code_of(res)) == (400, "BadDigest")
    assert absent(s3, bucket, "files/second.pdf")


def raw_post(server, path, body, content_type):
    u = urllib.parse.urlsplit(server.endpoint)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
    try:
        conn.request("POST", path, body=body, headers={"Content-Type": content_type})
        res = conn.getresponse()
        text = res.read().decode(errors="replace")
        code = text.split("<Code>", 1)[1].split("</Code>", 1)[0] if "<Code>" in text else ""
        return res.status, code
    finally:
        conn.close()


def form(boundary, parts, close=True):
    out = b""
    for name, value in parts:
        out += b"--" + boundary + b"\r\n"
        if name == "file":
            out += b'Content-Disposition: form-data; name="file"; filename="f"\r\n\r\n'
        else:
            out += b'Content-Disposition: form-data; name="%s"\r\n\r\n' % name.encode()
        out += value + b"\r\n"
    return out + (b"--" + boundary + b"--\r\n" if close else b"")


def test_malformed_forms_get_s3_errors(server, s3, bucket):
    presigned = s3.generate_presigned_post(bucket, "m")
    signed = [(k, v.encode()) for k, v in presigned["fields"].items()]
    b = b"XyZzY"
    ct = "multipart/form-data; boundary=XyZzY"
    path = f"/{bucket}"
    cases = [
        # Not a form.
        (b"just bytes", "application/octet-stream", 412, "PreconditionFailed"),
        (form(b, signed + [("file", b"x")]), "multipart/form-data", 412,
         "PreconditionFailed"),
        # No file.
        (form(b, signed), ct, 400, "IncorrectNumberOfFilesInPostRequest"),
        # The form never ends.
        (form(b, signed, close=False)[:-2], ct, 400, "MalformedPOSTRequest"),
        (form(b, signed + [("file", b"x")], close=False), ct, 400, "MalformedPOSTRequest"),
        # A part without a name.
        (b"--XyZzY\r\nContent-Disposition: form-data\r\n\r\nv\r\n--XyZzY--\r\n", ct, 400,
         "MalformedPOSTRequest"),
        # Fields before the file beyond 64 KiB.
        (form(b, [("x-ignore-pad", b"p" * (70 * KIB))] + signed + [("file", b"x")]), ct, 400,
         "MaxPostPreDataLengthExceededError"),
        # A field twice.
        (form(b, signed + [("key", b"m2"), ("file", b"x")]), ct, 400, "InvalidArgument"),
        # A large file followed by another field: its size cannot be known in advance.
        (form(b, signed + [("file", os.urandom(300 * KIB)), ("x-ignore-after", b"1")]), ct,
         400, "MalformedPOSTRequest"),
    ]
    for body, content_type, status, code in cases:
        assert raw_post(server, path, body, content_type) == (status, code), body[:200]
    assert absent(s3, bucket, "m") and absent(s3, bucket, "m2")
    # A small file followed by another field: S3 ignores what follows the file.
    assert raw_post(server, path, form(b, signed + [("file", b"ok"), ("x-ignore-after", b"1")]),
                    ct)[0] == 204
    assert s3.get_object(Bucket=bucket, Key="m")["Body"].read() == b"ok"


def test_checksum_field_is_verified_and_stored(s3, bucket):
    body = os.urandom(300 * KIB)
    good = base64.b64encode(hashlib.sha256(body).digest()).decode()
    bad = base64.b64encode(hashlib.sha256(b"other").digest()).decode()
    for key, value, status in (("sum-good", good, 204), ("sum-bad", bad, 400)):
        presigned = s3.generate_presigned_post(
            bucket, key, Fields={"x-amz-checksum-sha256": value},
            Conditions=[{"x-amz-checksum-sha256": value}])
        res = post(presigned, body)
        assert res.status_code == status, res.text
    assert code_of(res) == "BadDigest"
    assert absent(s3, bucket, "sum-bad")
    head = s3.head_object(Bucket=bucket, Key="sum-good", ChecksumMode="ENABLED")
    assert head["ChecksumSHA256"] == good


def test_a_page_reads_the_answer_through_cors(s3, bucket):
    s3.put_bucket_cors(Bucket=bucket, CORSConfiguration={"CORSRules": [
        {"AllowedOrigins": ["https://app.example.com"], "AllowedMethods": ["POST"],
         "ExposeHeaders": ["ETag", "Location"]}]})
    presigned = s3.generate_presigned_post(bucket, "from-page.txt")
    fields = dict(presigned["fields"])
    res = requests.post(presigned["url"], data=fields, files={"file": ("f", b"page")},
                        headers={"Origin": "https://app.example.com"}, timeout=30)
    assert res.status_code == 204, res.text
    assert res.headers["Access-Control-Allow-Origin"] == "https://app.example.com"
    assert "ETag" in res.headers["Access-Control-Expose-Headers"]
