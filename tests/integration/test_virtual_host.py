"""Virtual-hosted-style addressing (`serve --domain`): the bucket is the first label of the
Host header, the whole path is the key. The test connects to 127.0.0.1 and only sets the
Host header (<bucket>.s3.localtest does not resolve here), signing it as sent."""
import base64
import email.utils
import hashlib
import hmac
import http.client
import os
import time
import urllib.parse
import uuid
import xml.etree.ElementTree as ET

import pytest

from conftest import Server
from sigv4_chunked import amz_now, canonical_query, canonical_uri, seed_signature

DOMAIN = "s3.localtest"
NS = "{http://s3.amazonaws.com/doc/2006-03-01/}"


@pytest.fixture(scope="module")
def vserver(granary_bin, tmp_path_factory):
    srv = Server(str(tmp_path_factory.mktemp("vsrv") / "granary-data"),
                 extra_args=["--domain", DOMAIN]).start()
    yield srv
    srv.stop()


def send(server, method, host, path, query=None, body=b"", headers=None):
    """A SigV4-signed request to `server` with Host `host`. Returns (status, headers, body)."""
    u = urllib.parse.urlsplit(server.endpoint)
    amz_date = amz_now()
    payload_hash = hashlib.sha256(body).hexdigest()
    h = {"Host": host, "x-amz-date": amz_date, "x-amz-content-sha256": payload_hash}
    h.update(headers or {})
    _, auth = seed_signature(method, path, query or {}, h, payload_hash, server.access_key,
                             server.secret_key, amz_date, "us-east-1")
    h["Authorization"] = auth
    if body or method == "PUT":
        h["Content-Length"] = str(len(body))
    target = canonical_uri(path)
    if query:
        target += "?" + canonical_query(query)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=60)
    try:
        conn.putrequest(method, target, skip_host=True, skip_accept_encoding=True)
        for name, value in h.items():
            conn.putheader(name, value)
        conn.endheaders()
        if body:
            conn.send(body)
        r = conn.getresponse()
        return r.status, dict(r.getheaders()), r.read()
    finally:
        conn.close()


def test_object_and_bucket_requests_by_host(vserver):
    port = urllib.parse.urlsplit(vserver.endpoint).port
    s3 = vserver.client()
    bucket = "v-" + uuid.uuid4().hex[:16]
    s3.create_bucket(Bucket=bucket)  # path style on the same server
    host = f"{bucket}.{DOMAIN}:{port}"
    data = os.urandom(300 * 1024)  # striped

    status, hdrs, _ = send(vserver, "PUT", host, "/dir/a b.bin", body=data,
                           headers={"Content-Type": "application/x-test"})
    assert status == 200
    assert hdrs["ETag"] == '"%s"' % hashlib.md5(data).hexdigest()

    status, hdrs, body = send(vserver, "GET", host, "/dir/a b.bin")
    assert status == 200 and body == data
    assert hdrs["Content-Type"] == "application/x-test"
    # The host's case and a missing port do not matter.
    status, _, body = send(vserver, "GET", f"{bucket.upper()}.S3.LocalTest", "/dir/a b.bin")
    assert status == 200 and body == data

    status, hdrs, body = send(vserver, "HEAD", host, "/dir/a b.bin")
    assert status == 200 and body == b""
    assert hdrs["Content-Length"] == str(len(data))

    status, _, body = send(vserver, "GET", host, "/", query={"list-type": "2"})
    assert status == 200
    root = ET.fromstring(body)
    assert root.find(NS + "Name").text == bucket
    assert [k.text for k in root.iter(NS + "Key")] == ["dir/a b.bin"]

    # Path style still works on the same server, for the same object.
    assert s3.get_object(Bucket=bucket, Key="dir/a b.bin")["Body"].read() == data
    status, _, body = send(vserver, "GET", f"{DOMAIN}:{port}", f"/{bucket}/dir/a b.bin")
    assert status == 200 and body == data

    status, _, _ = send(vserver, "DELETE", host, "/dir/a b.bin")
    assert status == 204
    status, _, body = send(vserver, "GET", host, "/dir/a b.bin")
    assert status == 404 and b"<Code>NoSuchKey</Code>" in body
    status, _, body = send(vserver, "GET", f"nope-{bucket}.{DOMAIN}", "/k")
    assert status == 404 and b"<Code>NoSuchBucket</Code>" in body

    status, _, _ = send(vserver, "DELETE", host, "/")
    assert status == 204
    status, _, _ = send(vserver, "HEAD", host, "/")
    assert status == 404


def test_without_domain_every_host_is_path_style(server):
    port = urllib.parse.urlsplit(server.endpoint).port
    s3 = server.client()
    bucket = "v-" + uuid.uuid4().hex[:16]
    s3.create_bucket(Bucket=bucket)
    s3.put_object(Bucket=bucket, Key="k", Body=b"path")
    status, _, body = send(server, "GET", f"{bucket}.{DOMAIN}:{port}", f"/{bucket}/k")
    assert status == 200 and body == b"path"


def sign_v2(secret, string_to_sign):
    mac = hmac.new(secret.encode(), string_to_sign.encode(), hashlib.sha1).digest()
    return base64.b64encode(mac).decode()


def test_hand_signed_sigv2_virtual_hosted_and_time_rules(vserver):
    """The canonical resource names the bucket although the path does not (the S3 guide's
    virtual-hosted example), and the Date must be within 15 minutes."""
    bucket = "v2h-" + uuid.uuid4().hex[:10]
    vserver.client().create_bucket(Bucket=bucket)
    u = urllib.parse.urlsplit(vserver.endpoint)

    def put(key, body, date, resource=None):
        resource = resource or f"/{bucket}/{key}"
        sts = f"PUT\n\ntext/plain\n{date}\n{resource}"
        conn = http.client.HTTPConnection(u.hostname, u.port, timeout=60)
        try:
            conn.putrequest("PUT", "/" + key, skip_host=True, skip_accept_encoding=True)
            for name, value in (("Host", f"{bucket}.{DOMAIN}:{u.port}"), ("Date", date),
                                ("Content-Type", "text/plain"),
                                ("Content-Length", str(len(body))),
                                ("Authorization",
                                 f"AWS {vserver.access_key}:{sign_v2(vserver.secret_key, sts)}")):
                conn.putheader(name, value)
            conn.endheaders()
            conn.send(body)
            r = conn.getresponse()
            return r.status, r.read()
        finally:
            conn.close()

    now = email.utils.formatdate(usegmt=True)
    assert put("hello.txt", b"hi", now) == (200, b"")
    assert vserver.client().get_object(Bucket=bucket, Key="hello.txt")["Body"].read() == b"hi"
    status, err = put("hello.txt", b"hi", now, resource="/hello.txt")  # bucket left out
    assert status == 403 and b"<Code>SignatureDoesNotMatch</Code>" in err, err
    stale = email.utils.formatdate(time.time() - 3600, usegmt=True)
    status, err = put("late.txt", b"hi", stale)
    assert status == 403 and b"<Code>RequestTimeTooSkewed</Code>" in err, err


def test_a_form_posted_to_a_virtual_hosted_bucket_is_located_there(vserver):
    # The Location of a form upload is the object's URL in the form's own style: posted to
    # https://bucket.domain/, the object is at https://bucket.domain/key (it was given the
    # path-style path under the bucket's host: the key "bucket/key").
    import requests
    s3 = vserver.client()
    bucket = "vform-" + uuid.uuid4().hex[:8]
    s3.create_bucket(Bucket=bucket)
    form = s3.generate_presigned_post(bucket, "docs/a b.txt",
                                      Fields={"success_action_status": "201"},
                                      Conditions=[{"success_action_status": "201"}])
    u = urllib.parse.urlsplit(vserver.endpoint)
    host = f"{bucket}.{DOMAIN}:{u.port}"
    res = requests.post(f"http://127.0.0.1:{u.port}/", data=form["fields"],
                        files={"file": ("f", b"posted")}, headers={"Host": host}, timeout=30)
    assert res.status_code == 201, res.text
    location = f"http://{host}/docs/a%20b.txt"
    assert res.headers["Location"] == location
    assert ET.fromstring(res.content).find("Location").text == location
    status, _, body = send(vserver, "GET", host, "/docs/a b.txt")
    assert status == 200 and body == b"posted"
