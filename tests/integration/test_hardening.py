"""Bad and hostile input gets a clear S3 error or a closed connection: never a crash, a
hang, or a stored partial object. Raw sockets where clients would refuse to misbehave."""
import base64
import concurrent.futures
import hashlib
import json
import os
import re
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from urllib.parse import quote, urlsplit

import boto3
import botocore.config
import botocore.exceptions
import pytest
import urllib3
from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from conftest import Server, access_log_text, memory_mib, metric_value, signed

MiB = 1024 * 1024


@pytest.fixture(scope="module")
def hserver(granary_bin, tmp_path_factory):
    srv = Server(str(tmp_path_factory.mktemp("hard") / "granary-data"),
                 extra_args=["--idle-timeout", "2", "--io-timeout", "2"]).start()
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def hs3(hserver):
    c = hserver.client()
    c.create_bucket(Bucket="hardening")
    return c


def addr(server):
    u = urlsplit(server.endpoint)
    return u.hostname, u.port


def signed_head(server, method, path, body=b"", headers=None, sign=True,
                version="HTTP/1.1", connection=None, content_length=None):
    """A request head for a raw socket, SigV4-signed over `body` with the root user's key
    (unsigned when `sign` is false): the request line, Host, `connection` if given, the
    signed headers, and Content-Length (`content_length`, else the body's)."""
    req = AWSRequest(method=method, url=server.endpoint + path, data=body,
                     headers=dict(headers or {}))
    if sign:
        S3SigV4Auth(Credentials(server.access_key, server.secret_key), "s3",
                    "us-east-1").add_auth(req)
    prepared = req.prepare()
    host, port = addr(server)
    u = urlsplit(prepared.url)
    target = u.path + ("?" + u.query if u.query else "")
    lines = [f"{method} {target} {version}", f"Host: {host}:{port}"]
    if connection is not None:
        lines.append(f"Connection: {connection}")
    lines += [f"{k}: {v}" for k, v in prepared.headers.items()
              if k.lower() not in ("host", "content-length", "connection")]
    lines.append(f"Content-Length: {len(body) if content_length is None else content_length}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def healthy(server):
    with urllib.request.urlopen(server.endpoint + "/_granary/health", timeout=10) as r:
        return r.status == 200


def raw(server, data, read_timeout=10):
    """Sends raw bytes; returns everything the server sends until it closes (or timeout)."""
    s = socket.create_connection(addr(server), timeout=read_timeout)
    try:
        s.sendall(data)
        out = b""
        while True:
            try:
                chunk = s.recv(65536)
            except socket.timeout:
                break
            if not chunk:
                break
            out += chunk
        return out
    finally:
        s.close()


@pytest.mark.parametrize("size", [64 * 1024, 2 << 20])
def test_oversized_request_head_is_431_class_error_and_server_lives(hserver, hs3, size):
    # 2 MiB is more than the server reads before it refuses: the rest arrives after its
    # answer, which a plain close would turn into a reset (ECONNRESET, no answer read).
    head = (b"GET /hardening/k HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * size +
            b"\r\n\r\n")
    out = raw(hserver, head)
    assert out.startswith(b"HTTP/1.1 400"), out[:200]
    assert b"RequestHeaderSectionTooLarge" in out
    # Its own request id, in the header and the body, and an access-log line under it.
    request_id = re.search(rb"x-amz-request-id: ([0-9a-f]{16})\r\n", out, re.I).group(1)
    assert b"<RequestId>" + request_id + b"</RequestId>" in out
    # And the host's id (x-amz-id-2, <HostId>), as AWS gives them.
    host_id = re.search(rb"x-amz-id-2: ([0-9a-f]{64})\r\n", out, re.I).group(1)
    assert b"<HostId>" + host_id + b"</HostId>" in out
    log = access_log_text(hserver, request_id.decode())
    line = next(json.loads(x) for x in log.splitlines() if request_id.decode() in x)
    assert line["op"] == "BadRequest" and line["status"] == 400 and line["bytes_out"] > 0
    assert healthy(hserver)


@pytest.mark.parametrize("junk", [
    b"HELLO\r\n\r\n",
    b"GET / HTTP/9.9\r\n\r\n",
    b"\x00\x01\x02\x03\r\n\r\n",
    b"PUT /hardening/k HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n",
    b"GET /hardening/k HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
])
def test_malformed_http_gets_an_error_or_a_close_never_a_crash(hserver, junk):
    out = raw(hserver, junk)
    assert out == b"" or out.startswith(b"HTTP/1.1 4"), out[:200]
    assert healthy(hserver)


def test_idle_and_slowloris_connections_are_closed_by_the_server(hserver):
    start = time.time()
    assert raw(hserver, b"", read_timeout=15) == b""  # idle: closed after --idle-timeout
    assert raw(hserver, b"GET / HTTP/1.1\r\nHost: x\r\n", read_timeout=15) == b""
    assert time.time() - start < 12
    assert healthy(hserver)


def test_a_slow_but_steady_reader_gets_the_whole_body(granary_bin, tmp_path):
    # --io-timeout (2 s here) is for a client making no progress: one reading slowly but
    # steadily (~1.3 MB/s, 6 s in all) gets every byte. A whole stripe slice (4 MiB) went
    # in one write given the timeout at once, and a sendfile range (1 MiB) the same: once
    # the socket buffers (up to 4 MiB) were full, the client was cut off. (The kernel
    # wakes a writer once a third of a full send buffer drained: ~1 s here.)
    srv = Server(str(tmp_path / "granary-data"), extra_args=["--io-timeout", "2"]).start()
    try:
        s3 = srv.client()
        s3.create_bucket(Bucket="slow")
        body = os.urandom(8 * MiB)
        s3.put_object(Bucket="slow", Key="read", Body=body)
        u = urlsplit(s3.generate_presigned_url("get_object",
                                               Params={"Bucket": "slow", "Key": "read"}))
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 131072)  # before connect
        s.settimeout(10)
        s.connect(addr(srv))
        got = b""
        start = time.time()
        try:
            s.sendall(("GET %s?%s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n"
                       % (u.path, u.query, u.netloc)).encode())
            while True:
                chunk = s.recv(131072)
                if not chunk:
                    break
                got += chunk
                time.sleep(0.1)
        finally:
            s.close()
        head, _, received = got.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200"), head[:200]
        assert time.time() - start > 4  # longer than --io-timeout in all
        assert len(received) == len(body)
        assert received == body
    finally:
        srv.stop()


def test_an_anonymous_form_trickling_its_fields_is_cut_off(hserver, hs3):
    # A browser-form POST is not authenticated until its fields are read: a byte every
    # half second (each read within --io-timeout 2) must not hold the connection for more
    # than a request head may take (--idle-timeout 2).
    s = socket.create_connection(addr(hserver), timeout=10)
    start = time.time()
    closed_after = None
    try:
        s.sendall(b"POST /hardening HTTP/1.1\r\nHost: x\r\n"
                  b"Content-Type: multipart/form-data; boundary=b\r\n"
                  b"Content-Length: 60000\r\n\r\n--b\r\n")
        s.settimeout(0.5)
        for _ in range(40):  # up to 20 s of trickling
            try:
                s.sendall(b"x")
                got = s.recv(65536)
                if got == b"" or got.startswith(b"HTTP/1.1 4"):
                    closed_after = time.time() - start
                    break
            except socket.timeout:
                continue
            except OSError:
                closed_after = time.time() - start
                break
    finally:
        s.close()
    assert closed_after is not None and closed_after < 8, closed_after
    assert healthy(hserver)


def test_a_signed_form_whose_small_file_comes_slowly_is_stored(hserver, hs3):
    # Once its fields are read and its policy allows it, a form has an upload's time
    # (--max-put-seconds), not a request head's (--idle-timeout 2): a small file sent in
    # pieces over 4.2 s (each within --io-timeout 2) is stored.
    post = hs3.generate_presigned_post("hardening", "slow-form", ExpiresIn=300)
    data = os.urandom(4096)
    parts = [(k.encode(), v.encode()) for k, v in post["fields"].items()]
    body = b""
    for name, value in parts:
        body += (b"--bnd\r\nContent-Disposition: form-data; name=\"%s\"\r\n\r\n" % name
                 + value + b"\r\n")
    body += b'--bnd\r\nContent-Disposition: form-data; name="file"; filename="f"\r\n\r\n'
    head = (b"POST /hardening HTTP/1.1\r\nHost: x\r\n"
            b"Content-Type: multipart/form-data; boundary=bnd\r\n"
            b"Content-Length: %d\r\n\r\n" % (len(body) + len(data) + len(b"\r\n--bnd--\r\n")))
    s = socket.create_connection(addr(hserver), timeout=20)
    try:
        s.sendall(head + body + data[:512])
        for i in range(1, 8):  # 7 gaps of 0.6 s: 4.2 s in all, each well under 2 s
            time.sleep(0.6)
            s.sendall(data[i * 512:(i + 1) * 512])
        s.sendall(b"\r\n--bnd--\r\n")
        out = s.recv(65536)
    finally:
        s.close()
    assert out.startswith(b"HTTP/1.1 204"), out[:400]
    assert hs3.get_object(Bucket="hardening", Key="slow-form")["Body"].read() == data


def test_a_transfer_encoding_other_than_chunked_is_refused_not_smuggled(hserver):
    # Without a length Beast would read no body, and the body's bytes would be taken for
    # the next request. One 400, and the connection closes.
    out = raw(hserver, b"PUT /hardening/te HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n"
                       b"GET /_granary/health HTTP/1.1\r\nHost: x\r\n\r\n", read_timeout=10)
    assert out.startswith(b"HTTP/1.1 400"), out[:200]
    assert out.count(b"HTTP/1.1 ") == 1, out[:600]
    assert healthy(hserver)


def test_stalled_body_times_out_and_nothing_is_stored(hserver, hs3):
    url = hs3.generate_presigned_url("put_object", Params={"Bucket": "hardening",
                                                           "Key": "stalled"})
    u = urlsplit(url)
    req = (f"PUT {u.path}?{u.query} HTTP/1.1\r\nHost: {u.netloc}\r\n"
           f"Content-Length: {4 * MiB}\r\n\r\n").encode() + os.urandom(300 * 1024)
    start = time.time()
    out = raw(hserver, req, read_timeout=15)
    assert time.time() - start < 12
    assert out == b"" or b"RequestTimeout" in out or b"IncompleteBody" in out
    with pytest.raises(botocore.exceptions.ClientError):
        hs3.head_object(Bucket="hardening", Key="stalled")
    assert healthy(hserver)


def test_truncated_body_then_close_stores_nothing(hserver, hs3):
    url = hs3.generate_presigned_url("put_object", Params={"Bucket": "hardening",
                                                           "Key": "truncated"})
    u = urlsplit(url)
    s = socket.create_connection(addr(hserver), timeout=10)
    s.sendall((f"PUT {u.path}?{u.query} HTTP/1.1\r\nHost: {u.netloc}\r\n"
               f"Content-Length: {9 * MiB}\r\n\r\n").encode() + os.urandom(5 * MiB))
    s.close()
    time.sleep(0.5)
    with pytest.raises(botocore.exceptions.ClientError):
        hs3.head_object(Bucket="hardening", Key="truncated")
    assert healthy(hserver)


def test_pipelined_puts_on_one_connection_each_get_their_own_bytes(hserver, hs3):
    # Request bodies are read from the socket straight into the stripe buffers, after the
    # bytes the header read buffered: no byte of one body may leak into the next request.
    import hashlib
    bodies = {"pipe-empty": b"", "pipe-striped": os.urandom(300 * 1024),
              "pipe-inline": os.urandom(5000)}
    wire = b""
    for key, body in bodies.items():
        u = urlsplit(hs3.generate_presigned_url("put_object", Params={"Bucket": "hardening",
                                                                      "Key": key}))
        wire += (f"PUT {u.path}?{u.query} HTTP/1.1\r\nHost: {u.netloc}\r\n"
                 f"Content-Length: {len(body)}\r\n\r\n").encode() + body
    out = raw(hserver, wire)  # all three in one send; the server closes when idle
    assert out.count(b"HTTP/1.1 200 OK") == 3, out[:2000]
    for key, body in bodies.items():
        got = hs3.get_object(Bucket="hardening", Key=key)
        assert got["Body"].read() == body, key
        assert got["ETag"].strip('"') == hashlib.md5(body).hexdigest(), key


@pytest.mark.parametrize("path,code", [
    ("/hardening/nul%00key", b"InvalidArgument"),
    ("/hardening/bad-utf8-%FF%FE", b"InvalidArgument"),
    ("/hardening/surrogate-%ED%A0%80", b"InvalidArgument"),       # U+D800
    ("/hardening/overlong-%E0%80%AF", b"InvalidArgument"),        # '/' in three bytes
    ("/hardening/past-unicode-%F4%90%80%80", b"InvalidArgument"),  # U+110000
    ("/hardening/" + "k" * 1025, b"KeyTooLongError"),
    ("/hardening/bad%zzescape", b"InvalidArgument"),
])
def test_hostile_keys_get_s3_errors(hserver, path, code):
    status, body = signed(hserver, "PUT", path, b"x")
    assert status == 400, body
    assert code in body


@pytest.mark.parametrize("method,path", [
    ("PUT", "/hardening-xml"),                          # CreateBucketConfiguration
    ("POST", "/hardening?delete"),                      # DeleteObjects
])
def test_malformed_xml_bodies_are_malformed_xml(hserver, hs3, method, path):
    for body in [b"<not-closed>", b"\x00\xff garbage", b"<Delete><Object></Object></Delete>"]:
        md5 = base64.b64encode(hashlib.md5(body).digest()).decode()
        status, out = signed(hserver, method, path, body, headers={"Content-MD5": md5})
        assert status == 400, out
        assert b"MalformedXML" in out, out
    assert healthy(hserver)


def test_complete_multipart_with_malformed_xml(hserver, hs3):
    up = hs3.create_multipart_upload(Bucket="hardening", Key="mp")
    status, out = signed(hserver, "POST", f"/hardening/mp?uploadId={up['UploadId']}",
                         b"<CompleteMultipartUpload><Part>")
    assert status == 400 and b"MalformedXML" in out


def test_oversized_metadata_is_metadata_too_large(hs3):
    with pytest.raises(botocore.exceptions.ClientError) as e:
        hs3.put_object(Bucket="hardening", Key="meta", Body=b"1",
                       Metadata={"big": "v" * 3000})
    assert e.value.response["Error"]["Code"] == "MetadataTooLarge"


def test_payload_hash_that_is_not_hex_is_rejected(hserver):
    import sigv4_chunked as sig
    host = urlsplit(hserver.endpoint).netloc
    amz_date = sig.amz_now()
    headers = {"host": host, "x-amz-date": amz_date, "x-amz-content-sha256": "not-a-hash",
               "content-length": "3"}
    _, auth = sig.seed_signature("PUT", "/hardening/h", "", headers, "not-a-hash",
                                 hserver.access_key, hserver.secret_key, amz_date, "us-east-1")
    headers["Authorization"] = auth
    r = sig._send(hserver.endpoint, "PUT", "/hardening/h", headers, [b"abc"])
    assert r.status == 400, r
    assert b"InvalidArgument" in r.body


def test_many_idle_connections_do_not_stop_service(hserver, hs3):
    socks = [socket.create_connection(addr(hserver), timeout=10) for _ in range(300)]
    try:
        hs3.put_object(Bucket="hardening", Key="busy", Body=b"still serving")
        assert hs3.get_object(Bucket="hardening", Key="busy")["Body"].read() == \
            b"still serving"
    finally:
        for s in socks:
            s.close()
    assert healthy(hserver)


def test_connection_cap_answers_slow_down_and_recovers(granary_bin, tmp_path):
    """--max-connections: one connection over the cap gets 503 SlowDown (an S3 error the
    SDKs retry), not a hang; a freed slot is usable again."""
    srv = Server(str(tmp_path / "granary-data"), extra_args=["--max-connections", "3"]).start()
    host, port = srv.endpoint.removeprefix("http://").rsplit(":", 1)
    held = []
    try:
        for _ in range(3):
            held.append(socket.create_connection((host, int(port)), timeout=10))
        # Each is accepted and counted once it has been served (a sleep was a guess: on a
        # busy machine the next connection could be accepted before these).
        for s in held:
            s.sendall(b"GET /_granary/health HTTP/1.1\r\nHost: x\r\n\r\n")
            assert s.recv(65536).startswith(b"HTTP/1.1 200")
        extra = socket.create_connection((host, int(port)), timeout=10)
        extra.sendall(b"GET /_granary/health HTTP/1.1\r\nHost: x\r\n\r\n")
        answer = b""
        while chunk := extra.recv(65536):
            answer += chunk
        extra.close()
        assert answer.startswith(b"HTTP/1.1 503"), answer[:200]
        assert b"<Code>SlowDown</Code>" in answer
        request_id = re.search(rb"x-amz-request-id: ([0-9a-f]{16})\r\n", answer).group(1)
        assert b"<RequestId>" + request_id + b"</RequestId>" in answer
        host_id = re.search(rb"x-amz-id-2: ([0-9a-f]{64})\r\n", answer).group(1)
        assert b"<HostId>" + host_id + b"</HostId>" in answer
        assert re.search(rb"\r\nDate: [A-Z][a-z]{2}, \d\d [A-Z][a-z]{2} \d{4} ", answer)
        assert b"\r\nServer: Granary\r\n" in answer
        # A held connection still works, and once one closes a new one is served.
        held[0].sendall(b"GET /_granary/health HTTP/1.1\r\nHost: x\r\n\r\n")
        assert held[0].recv(65536).startswith(b"HTTP/1.1 200")
        held.pop().close()
        deadline = time.monotonic() + 10
        while True:
            try:
                with urllib.request.urlopen(srv.endpoint + "/_granary/metrics",
                                            timeout=10) as resp:
                    status, body = resp.status, resp.read()
            except urllib.error.HTTPError as e:
                status, body = e.code, e.read()
            if status == 200 or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert status == 200
        refused = [l for l in body.decode().splitlines()
                   if l.startswith('granary_s3_connections_refused_total{cap="total"}')]
        assert refused and float(refused[0].split()[-1]) >= 1
    finally:
        for s in held:
            s.close()
        srv.stop()


def test_a_flood_of_refused_connections_holds_a_bounded_number_of_descriptors(granary_bin,
                                                                             tmp_path):
    """Each refused connection is answered 503 and held up to 2 s, outside the caps: a
    host flooding connects must not use up the server's descriptors that way. Past 64
    refusals at once, the others are closed at once."""
    srv = Server(str(tmp_path / "granary-data"), extra_args=["--max-connections", "1"]).start()
    host, port = srv.endpoint.removeprefix("http://").rsplit(":", 1)
    fd_dir = f"/proc/{srv.proc.pid}/fd"
    held = socket.create_connection((host, int(port)), timeout=10)
    flood = []
    try:
        held.sendall(b"GET /_granary/health HTTP/1.1\r\nHost: x\r\n\r\n")
        assert held.recv(65536).startswith(b"HTTP/1.1 200")  # accepted and counted
        before = len(os.listdir(fd_dir))
        for _ in range(200):  # none sends a request: each 503 waits for one, up to 1 s
            flood.append(socket.create_connection((host, int(port)), timeout=10))
        time.sleep(0.3)  # accepted and refused by now
        during = len(os.listdir(fd_dir))
        assert during - before <= 64 + 8, (before, during)
        # The refusals end; the held connection is still served.
        held.sendall(b"GET /_granary/health HTTP/1.1\r\nHost: x\r\n\r\n")
        assert held.recv(65536).startswith(b"HTTP/1.1 200")
    finally:
        for s in flood:
            s.close()
        held.close()
        srv.stop()


def _answer_to_health(conn):
    conn.sendall(b"GET /_granary/health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    answer = b""
    while chunk := conn.recv(65536):
        answer += chunk
    conn.close()
    return answer


def test_connection_cap_per_address_leaves_room_for_other_hosts(granary_bin, tmp_path):
    """--max-connections-per-address: one host holding its share of connections (a slow or
    hostile client) gets 503 SlowDown for one more, while another host is still served."""
    srv = Server(str(tmp_path / "granary-data"),
                 extra_args=["--max-connections-per-address", "2"]).start()
    host, port = srv.endpoint.removeprefix("http://").rsplit(":", 1)
    assert host == "127.0.0.1"
    held = []
    try:
        for _ in range(2):
            held.append(socket.create_connection((host, int(port)), timeout=10))
        time.sleep(0.2)  # let the server accept them
        answer = _answer_to_health(socket.create_connection((host, int(port)), timeout=10))
        assert answer.startswith(b"HTTP/1.1 503"), answer[:200]
        assert b"<Code>SlowDown</Code>" in answer
        # Another address on the loopback network is another host to the gateway.
        other = socket.create_connection((host, int(port)), timeout=10,
                                         source_address=("127.0.0.2", 0))
        assert _answer_to_health(other).startswith(b"HTTP/1.1 200")
        # Once one of the first host's connections closes, it is served again.
        held.pop().close()
        deadline = time.monotonic() + 10
        while True:
            answer = _answer_to_health(socket.create_connection((host, int(port)), timeout=10))
            if answer.startswith(b"HTTP/1.1 200") or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert answer.startswith(b"HTTP/1.1 200"), answer[:200]
        # The slots of the connections just closed come back once the server sees them go.
        for s in held:
            s.close()
        held.clear()
        deadline = time.monotonic() + 10
        while True:
            try:
                with urllib.request.urlopen(srv.endpoint + "/_granary/metrics",
                                            timeout=10) as resp:
                    metrics = resp.read().decode()
                break
            except urllib.error.HTTPError as e:
                if e.code != 503 or time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        by_cap = {l.split("{")[1].split("}")[0]: float(l.split()[-1])
                  for l in metrics.splitlines()
                  if l.startswith("granary_s3_connections_refused_total{")}
        assert by_cap['cap="address"'] >= 1 and by_cap['cap="total"'] == 0, by_cap
    finally:
        for s in held:
            s.close()
        srv.stop()


def test_unknown_subresources_are_not_implemented_never_the_plain_operation(server, s3, bucket):
    """A subresource this gateway does not know must not fall through to the plain
    operation: DELETE ?metadataTable is not DeleteBucket, PUT ?renameObject is not a
    PutObject of an empty body."""
    s3.put_object(Bucket=bucket, Key="k", Body=b"kept")
    s3.put_object(Bucket=bucket, Key="target", Body=b"target bytes")
    for method, path in (("DELETE", f"/{bucket}?metadataTable"),
                         ("DELETE", f"/{bucket}?metadataConfiguration"),
                         ("PUT", f"/{bucket}/target?renameObject"),
                         ("GET", f"/{bucket}?session"),
                         ("GET", f"/{bucket}?abac"),
                         ("GET", f"/{bucket}/k?tagging&versionId=null"),
                         ("DELETE", f"/{bucket}?metadataTable=1"),
                         ("PUT", f"/{bucket}/target?renameObject=yes")):
        status, body = signed(server, method, path)
        assert status == 501, (method, path, status, body)
        assert b"<Code>NotImplemented</Code>" in body
    # PUT ?versioning is PutBucketVersioning: without a body, MalformedXML, never CreateBucket.
    status, body = signed(server, "PUT", f"/{bucket}?versioning")
    assert status == 400 and b"<Code>MalformedXML</Code>" in body, (status, body)
    s3.head_bucket(Bucket=bucket)
    assert s3.get_object(Bucket=bucket, Key="target")["Body"].read() == b"target bytes"
    # versionId: "null" is the one version an unversioned object has; any other is invalid.
    assert s3.get_object(Bucket=bucket, Key="k", VersionId="null")["Body"].read() == b"kept"
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.get_object(Bucket=bucket, Key="k", VersionId="3HL4kqtJlcpXroDTDmJ+rmSpXd3dIbrHY")
    assert e.value.response["Error"]["Code"] == "InvalidArgument"


def test_small_bodies_must_match_their_signed_hash(server, s3, bucket):
    """A body swapped under a signature (x-amz-content-sha256 of another body) is refused
    for every request whose body the gateway reads whole: lifecycle, ACL, admin users,
    DeleteObjects."""
    s3.put_object(Bucket=bucket, Key="keep", Body=b"k")
    signed_body = (b"<LifecycleConfiguration><Rule><ID>a</ID><Filter><Prefix>none/</Prefix>"
                   b"</Filter><Status>Enabled</Status><Expiration><Days>30</Days></Expiration>"
                   b"</Rule></LifecycleConfiguration>")
    evil_body = signed_body.replace(b"none/", b"").replace(b"30", b"1")
    cases = ((f"/{bucket}?lifecycle", signed_body, evil_body),
             (f"/{bucket}?delete", b"<Delete><Object><Key>nothing</Key></Object></Delete>",
              b"<Delete><Object><Key>keep</Key></Object></Delete>"),
             ("/_granary/admin/users/swapped", b"{}",
              b'{"access_key": "GKATTACKER000000001", "secret_key": "attacker-secret"}'))
    for path, good, evil in cases:
        method = "POST" if path.endswith("?delete") else "PUT"
        # DeleteObjects needs a checksum value (of the signed body, as the signer sent it).
        sha = base64.b64encode(hashlib.sha256(good).digest()).decode()
        headers = {"x-amz-checksum-sha256": sha} if method == "POST" else None
        status, body = signed(server, method, path, good, headers=headers, send_body=evil)
        assert status == 400 and b"XAmzContentSHA256Mismatch" in body, (path, status, body)
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.get_bucket_lifecycle_configuration(Bucket=bucket)
    assert e.value.response["Error"]["Code"] == "NoSuchLifecycleConfiguration"
    assert s3.get_object(Bucket=bucket, Key="keep")["Body"].read() == b"k"
    status, body = signed(server, "GET", "/_granary/admin/users")
    assert status == 200 and b'"swapped"' not in body


def test_a_second_server_on_a_taken_port_refuses_to_start(granary_bin, hserver, tmp_path):
    # The gateway's acceptors share their port with SO_REUSEPORT; without a check a second
    # `granary serve` on the same address would start and take part of the connections.
    host, port = addr(hserver)
    res = subprocess.run(
        [granary_bin, "serve", "--data", str(tmp_path / "second"), "--listen",
         f"{host}:{port}"],
        capture_output=True, text=True, timeout=60)
    out = res.stdout + res.stderr
    assert res.returncode != 0, out
    assert f"cannot listen on {host}:{port}" in out and "in use" in out, out
    assert healthy(hserver)


def refused_with(argv, args, message, env=None):
    """Runs `argv` + a loopback --listen (unless `args` has one) + `args`: it must exit 1
    saying `message`."""
    listen = [] if "--listen" in args else ["--listen", "127.0.0.1:0"]
    res = subprocess.run(argv + listen + args, env=env, capture_output=True, text=True,
                         timeout=60)
    out = res.stdout + res.stderr
    assert res.returncode == 1, out
    assert message in out, out


@pytest.mark.parametrize("args,message", [
    (["--orphan-grace", "0"], "--orphan-grace must be >= 60"),
    (["--orphan-grace", "604801"], "--orphan-grace must be <= 604800"),
    (["--gc-grace", "-1"], "--gc-grace must be >= 0"),
    (["--log-level", "verbose"], "--log-level must be"),
    (["--listen", "127.0.0.1:9000x"], "bad port in --listen"),
    (["--ec-k", "260"], "--ec-k must be 1-255"),
    (["--access-log", "/nonexistent-dir/access.log"], "opening the access log"),
    # Infinity and NaN passed `< 0` and were converted to integers (undefined); a huge
    # --workers aborted creating threads; --drives 0 made a store with no drive.
    (["--scrub-rate", "inf"], "--scrub-rate must be 0-1e9"),
    (["--scrub-interval", "nan"], "--scrub-interval 0-876000"),
    (["--workers", "100000"], "--workers must be 0-4096"),
    (["--drives", "0"], "--drives must be 1-4096"),
    (["--crc-cache", "99999999999999"], "--crc-cache and --index-cache must be 0-"),
])
def test_serve_refuses_bad_options_with_a_message(granary_bin, tmp_path, args, message):
    # --orphan-grace 0 let the sweep delete the fragments of PUTs still in flight; the
    # others were taken as something else (EC 4+2, info, port 9000) or ignored.
    refused_with([granary_bin, "serve", "--data", str(tmp_path / "d")], args, message)


@pytest.mark.parametrize("args,message", [
    (["--body-memory", "8"], "--body-memory must be >= 16"),
    (["--scrub-rate", "inf"], "--scrub-rate must be 0-1e9"),
    (["--extent-descriptors", "-2"], "--extent-descriptors must be >= 0"),
    (["--workers", "100000"], "--workers must be 0-4096"),
    (["--listen", "127.0.0.1:x"], "bad port in --listen"),
])
def test_chunkserver_refuses_bad_options_before_opening_its_drives(granary_bin, tmp_path,
                                                                   args, message):
    data = tmp_path / "d0"
    refused_with([granary_bin, "chunkserver", "--dir", str(data)], args, message,
                 env={**os.environ, "GRANARY_CLUSTER_SECRET": "s"})
    assert not data.exists()


@pytest.mark.parametrize("args", [["--listen", "foo"], ["--bulk-nice", "25"],
                                  ["--orphan-grace", "0"], ["--scrub-rate", "inf"],
                                  ["--spare-zero-rate", "nan"], ["--extent-size", "0"],
                                  ["--crc-cache", "-1"]])
def test_a_bad_option_is_refused_before_the_data_directory_is_touched(
        granary_bin, tmp_path, args):
    # They were checked once the drives were open and recovered and the index open: a
    # typo cost a full recovery (and created the data directory) before its message.
    # (--spare-zero-rate nan also passed its `< 0` check.)
    listen = [] if "--listen" in args else ["--listen", "127.0.0.1:0"]
    data = tmp_path / "d"
    res = subprocess.run([granary_bin, "serve", "--data", str(data)] + listen + args,
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 1, res.stdout + res.stderr
    assert not data.exists()


def test_an_unreadable_data_directory_is_an_error_not_an_abort(granary_bin):
    # A directory that exists but cannot be searched: looking for its cluster.json threw
    # (std::filesystem), and serve aborted with SIGABRT. Root reads everything, so as root
    # the server runs as nobody.
    locked = tempfile.mkdtemp(prefix="granary-locked-", dir="/tmp")
    os.chmod(locked, 0o000)
    as_nobody = (["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
                 if os.geteuid() == 0 else [])
    try:
        res = subprocess.run(as_nobody + [granary_bin, "serve", "--data", locked, "--listen",
                                          "127.0.0.1:0"],
                             capture_output=True, text=True, timeout=60)
    finally:
        os.chmod(locked, 0o700)
        os.rmdir(locked)
    assert res.returncode == 1, res.stdout + res.stderr
    assert "Permission denied" in res.stderr, res.stderr


def test_uploads_share_the_buffer_budget_and_a_spent_one_answers_503(granary_bin, tmp_path):
    """Upload stripe buffers are charged to --buffer-memory, uploads together to half of
    it: uploads that stall mid-body hold theirs, the next upload waits --buffer-wait and is
    answered 503 (which SDKs retry), nothing is stored for it, GETs are served meanwhile
    without waiting for it, and once the stalled ones go, uploads run within the budget
    again."""
    srv = Server(str(tmp_path / "granary-data"),
                 extra_args=["--buffer-memory", "24", "--buffer-wait", "2"]).start()
    stalled = []
    try:
        s3 = srv.client()
        s3.create_bucket(Bucket="budget")
        existing = os.urandom(8 * MiB)
        s3.put_object(Bucket="budget", Key="existing", Body=existing)

        def scrape():
            with urllib.request.urlopen(srv.endpoint + "/_granary/metrics", timeout=10) as r:
                return r.read().decode()

        # Two uploads of 16 MiB each send 1 MiB and stop: each holds a stripe buffer of
        # 6 MiB (4+2 fragments of 1 MiB), the 12 MiB uploads may hold of the 24.
        for i in range(2):
            url = s3.generate_presigned_url("put_object",
                                            Params={"Bucket": "budget", "Key": f"stalled{i}"})
            u = urlsplit(url)
            sock = socket.create_connection(addr(srv), timeout=30)
            sock.sendall((f"PUT {u.path}?{u.query} HTTP/1.1\r\nHost: {u.netloc}\r\n"
                          f"Content-Length: {16 * MiB}\r\n\r\n").encode() + os.urandom(MiB))
            stalled.append(sock)
        deadline = time.monotonic() + 10
        while metric_value(scrape(), "granary_buffer_budget_bytes", what="used") < 12 * MiB:
            assert time.monotonic() < deadline, "the stalled uploads never took their buffers"
            time.sleep(0.05)

        def refused_put():
            start = time.monotonic()
            with pytest.raises(botocore.exceptions.ClientError) as refused:
                srv.client().put_object(Bucket="budget", Key="refused", Body=os.urandom(8 * MiB))
            return refused.value.response, time.monotonic() - start

        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            waiting = pool.submit(refused_put)
            while metric_value(scrape(), "granary_buffer_budget_waiting_streams") < 1:
                assert not waiting.done(), waiting.result()
                time.sleep(0.05)
            # A GET meanwhile goes before the waiting upload: no wait, no overdraft.
            start = time.monotonic()
            assert s3.get_object(Bucket="budget", Key="existing")["Body"].read() == existing
            assert time.monotonic() - start < 1.5
            assert not waiting.done()
            response, waited = waiting.result()
        assert response["ResponseMetadata"]["HTTPStatusCode"] == 503
        assert response["Error"]["Code"] in ("SlowDown", "ServiceUnavailable")
        assert waited >= 1.9  # it waited --buffer-wait first
        with pytest.raises(botocore.exceptions.ClientError):
            s3.head_object(Bucket="budget", Key="refused")
        assert metric_value(scrape(), "granary_buffer_budget_refusals_total") >= 1

        for sock in stalled:
            sock.close()
        stalled.clear()
        # Six concurrent uploads through 12 MiB: they take turns, all land, every byte right.
        bodies = {f"k{i}": os.urandom(10 * MiB + i) for i in range(6)}
        retrying = srv.client(retries={"max_attempts": 5, "mode": "standard"})

        def put(key):
            retrying.put_object(Bucket="budget", Key=key, Body=bodies[key])

        with concurrent.futures.ThreadPoolExecutor(6) as pool:
            list(pool.map(put, bodies))
        for key, data in bodies.items():
            assert s3.get_object(Bucket="budget", Key=key)["Body"].read() == data
        metrics = scrape()
        assert metric_value(metrics, "granary_buffer_budget_bytes", what="peak") <= 24 * MiB
        assert metric_value(metrics, "granary_buffer_budget_bytes", what="used") == 0
        assert metric_value(metrics, "granary_buffer_budget_overdrafts_total") == 0
    finally:
        for sock in stalled:
            sock.close()
        srv.stop()


@pytest.mark.parametrize("flood", ["chunk-extension", "trailer"])
def test_a_chunked_body_cannot_grow_the_servers_memory(hserver, flood):
    # Boost 1.74's parser puts no limit of its own on a chunk-size line or the trailer
    # section: it reads on until their end arrives. The server's buffer is bounded.
    head = b"GET / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
    head += b"1;x=" if flood == "chunk-extension" else b"0\r\nx-a: b\r\n"
    filler = (b"a" if flood == "chunk-extension" else b"x-trailer: b\r\n") * (64 * 1024)
    before = memory_mib(hserver.proc.pid)
    s = socket.create_connection(addr(hserver), timeout=10)
    try:
        s.sendall(head)
        try:
            for _ in range(32 * MiB // len(filler)):  # 32 MiB, or until the server closes
                s.sendall(filler)
        except (BrokenPipeError, ConnectionResetError):
            pass
        grown = memory_mib(hserver.proc.pid) - before  # measured with the connection open
        s.settimeout(5)
        try:
            answer = s.recv(65536)
        except (socket.timeout, ConnectionResetError):
            answer = b""
    finally:
        s.close()
    assert grown < 8, f"the server grew by {grown:.1f} MiB"
    assert answer == b"" or answer.startswith(b"HTTP/1.1 4"), answer[:200]
    assert healthy(hserver)


def test_a_trickled_body_after_a_refusal_does_not_hold_the_connection(hserver):
    # Refused before its body (no credentials): the server drains the body to keep the
    # connection, but for 5 s at most, however slowly the client sends.
    s = socket.create_connection(addr(hserver), timeout=15)
    try:
        s.sendall(b"PUT /hardening/trickle HTTP/1.1\r\nHost: x\r\n"
                  b"Content-Length: 1048576\r\n\r\n")
        start = time.time()
        out = b""
        s.settimeout(0.5)
        while time.time() - start < 15:
            try:
                s.sendall(b"a")  # one byte every half second: within the 2 s I/O timeout
            except (BrokenPipeError, ConnectionResetError):
                break
            try:
                chunk = s.recv(65536)
            except socket.timeout:
                continue
            except ConnectionResetError:
                break
            if not chunk:
                break
            out += chunk
            if b"</Error>" in out:
                break
        elapsed = time.time() - start
    finally:
        s.close()
    assert elapsed < 10, f"the answer took {elapsed:.1f} s"
    assert b"AccessDenied" in out, out[:300]
    assert b"Connection: close" in out, out[:300]
    assert healthy(hserver)


def read_head(s, timeout):
    """Reads from `s` until a blank line ends a response head; returns what came."""
    s.settimeout(timeout)
    out = b""
    while b"\r\n\r\n" not in out:
        chunk = s.recv(65536)
        if not chunk:
            break
        out += chunk
    return out


def test_expect_100_continue_invites_only_bodies_that_will_be_read(hserver, hs3):
    # Refused for its signature (an unknown key): the final answer comes at once, without
    # a 100 Continue, and the body never has to be sent (aws-cli, boto3 and curl send
    # Expect: 100-continue with large uploads). The connection closes: the server cannot
    # know whether the client will send the body anyway.
    now = time.gmtime()
    s = socket.create_connection(addr(hserver), timeout=10)
    try:
        s.sendall(("PUT /hardening/uninvited HTTP/1.1\r\nHost: x\r\n"
                   f"x-amz-date: {time.strftime('%Y%m%dT%H%M%SZ', now)}\r\n"
                   "x-amz-content-sha256: UNSIGNED-PAYLOAD\r\n"
                   "Authorization: AWS4-HMAC-SHA256 Credential=NOSUCHKEY/"
                   f"{time.strftime('%Y%m%d', now)}/us-east-1/s3/aws4_request, "
                   "SignedHeaders=host;x-amz-date, Signature=" + "0" * 64 + "\r\n"
                   "Expect: 100-continue\r\nContent-Length: 67108864\r\n\r\n").encode())
        start = time.time()
        head = read_head(s, 10)
        elapsed = time.time() - start
    finally:
        s.close()
    assert head.startswith(b"HTTP/1.1 403"), head[:200]
    assert b"Connection: close" in head, head[:300]
    assert elapsed < 1.5, f"the answer took {elapsed:.1f} s"

    # Refused after the signature: anonymous (authorization), and the root user's PUT to a
    # bucket that does not exist (its headers): no 100 either.
    def first_answer(path, sign):
        head = signed_head(hserver, "PUT", path, sign=sign, content_length=64 * MiB,
                           headers={"Expect": "100-continue",
                                    "x-amz-content-sha256": "UNSIGNED-PAYLOAD"})
        s = socket.create_connection(addr(hserver), timeout=10)
        try:
            s.sendall(head)
            return read_head(s, 10)
        finally:
            s.close()

    head = first_answer("/hardening/anonymous", sign=False)
    assert head.startswith(b"HTTP/1.1 403"), head[:200]
    head = first_answer("/no-such-bucket-expect/k", sign=True)
    assert head.startswith(b"HTTP/1.1 404"), head[:200]
    assert b"Connection: close" in head  # no 100 went out: the body may still come
    head = first_answer("/hardening/k?partNumber=1&uploadId=" + "0" * 32, sign=True)
    assert head.startswith(b"HTTP/1.1 404"), head[:200]  # NoSuchUpload

    # Accepted: 100 Continue, then the body, then 200; the connection stays open.
    body = os.urandom(256 * 1024)
    head = signed_head(hserver, "PUT", "/hardening/invited", body,
                       headers={"Expect": "100-continue"})
    s = socket.create_connection(addr(hserver), timeout=10)
    try:
        s.sendall(head)
        assert read_head(s, 10).startswith(b"HTTP/1.1 100 Continue")
        s.sendall(body)
        final = read_head(s, 10)
        assert final.startswith(b"HTTP/1.1 200"), final[:300]
        assert b"Connection: close" not in final
    finally:
        s.close()
    assert healthy(hserver)


def test_an_empty_upload_with_expect_continue_leaves_its_connection_usable(hserver, hs3):
    # botocore sends Expect: 100-continue with every PutObject, an empty one too. A final
    # answer that comes without a 100 Continue stays on botocore's connection as the status
    # of every later Expect request on it (it then reads the next real status line as a
    # header: urllib3's MissingHeaderBodySeparatorDefect, a response without headers). So an
    # empty body is invited like any other, and a connection whose request got no 100
    # closes.
    import hashlib
    c = hserver.client()
    body = os.urandom(1000)
    for i in range(3):
        c.put_object(Bucket="hardening", Key=f"empty-{i}", Body=b"")
        start = time.time()
        got = c.put_object(Bucket="hardening", Key=f"after-empty-{i}", Body=body)
        elapsed = time.time() - start
        assert got["ETag"].strip('"') == hashlib.md5(body).hexdigest()
        assert elapsed < 1.5, f"the PUT after an empty one took {elapsed:.1f} s"
    assert c.get_object(Bucket="hardening", Key="after-empty-2")["Body"].read() == body
    assert c.head_object(Bucket="hardening", Key="empty-0")["ContentLength"] == 0


def test_no_stored_or_requested_text_splits_a_response(server, s3, bucket):
    """Values that end up in response headers: a record's type and a CORS ExposeHeader are
    checked when set, response-* parameters when asked; an object key with a control
    character, named as a record's container, is sent percent-encoded."""
    key = "line\nbreak.bin"
    s3.put_object(Bucket=bucket, Key=key, Body=b"0123456789")
    path = f"/{bucket}/{quote(key, safe='')}?records"
    status, body = signed(server, "POST", path,
                          b'{"key": "r1", "offset": 0, "length": 4, '
                          b'"type": "x\\r\\nSet-Cookie: a=b"}\n')
    assert status == 400 and b"InvalidArgument" in body, body
    status, body = signed(server, "POST", path, b'{"key": "r1", "offset": 0, "length": 4}\n')
    assert status == 200, body
    req = AWSRequest(method="HEAD", url=f"{server.endpoint}/{bucket}?record&key=r1")
    S3SigV4Auth(Credentials(server.access_key, server.secret_key), "s3",
                "us-east-1").add_auth(req)
    prepared = req.prepare()
    resp = urllib3.PoolManager().request("HEAD", prepared.url, headers=dict(prepared.headers))
    assert resp.status == 200
    assert resp.headers["x-granary-record-container"] == "line%0Abreak.bin"
    assert "set-cookie" not in {k.lower() for k in resp.headers}

    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.put_bucket_cors(Bucket=bucket, CORSConfiguration={"CORSRules": [{
            "AllowedOrigins": ["*"], "AllowedMethods": ["GET"],
            "ExposeHeaders": ["x\r\nSet-Cookie: a=b"]}]})
    assert e.value.response["Error"]["Code"] == "InvalidRequest"

    url = s3.generate_presigned_url("get_object", Params={
        "Bucket": bucket, "Key": key, "ResponseContentType": "text/plain\r\nSet-Cookie: a=b"})
    resp = urllib3.PoolManager().request("GET", url)
    assert resp.status == 400 and b"InvalidArgument" in resp.data, resp.data


def test_presigned_query_headers_are_headers_and_elsewhere_refused(hserver, hs3):
    from botocore.auth import S3SigV4QueryAuth

    def presigned_put(key, query, headers=None):
        req = AWSRequest(method="PUT", url=f"{hserver.endpoint}/hardening/{key}?{query}",
                         headers=headers or {})
        S3SigV4QueryAuth(Credentials(hserver.access_key, hserver.secret_key), "s3",
                         "us-east-1", expires=300).add_auth(req)
        prepared = req.prepare()
        return urllib3.PoolManager().request("PUT", prepared.url, body=b"data",
                                             headers=dict(prepared.headers))

    resp = presigned_put("hoisted", "x-amz-meta-colour=blue&X-Amz-Meta-Size=big")
    assert resp.status == 200, resp.data
    head = hs3.head_object(Bucket="hardening", Key="hoisted")
    assert head["Metadata"] == {"colour": "blue", "size": "big"}
    # Given both ways (or twice) with different values, which would count is not guessed;
    # the same value both ways is what was signed.
    resp = presigned_put("both", "x-amz-meta-colour=blue", {"x-amz-meta-colour": "red"})
    assert resp.status == 400 and b"<Code>InvalidArgument</Code>" in resp.data, resp.data
    resp = presigned_put("both", "x-amz-meta-colour=blue", {"x-amz-meta-colour": "blue"})
    assert resp.status == 200, resp.data
    assert hs3.head_object(Bucket="hardening", Key="both")["Metadata"] == {"colour": "blue"}
    # Decoded, a name or value must still be what an HTTP parser takes: CR LF in a stored
    # metadata name would split every later answer.
    resp = presigned_put("split", "x-amz-meta-a%0D%0ASet-Cookie%3A%20s%3D1=v")
    assert resp.status == 400 and b"<Code>InvalidArgument</Code>" in resp.data, resp.data
    resp = presigned_put("split", "x-amz-meta-a=1%0D%0ASet-Cookie%3A%20s%3D1")
    assert resp.status == 400 and b"<Code>InvalidArgument</Code>" in resp.data, resp.data
    # Outside a SigV4 presigned URL the query signs no header (SigV2 signs only known
    # sub-resources): such a parameter is refused as any unknown one, never applied.
    status, body = signed(hserver, "PUT", "/hardening/plain?x-amz-meta-colour=blue", b"data")
    assert status == 501 and b"NotImplemented" in body, body
    v2 = boto3.client("s3", endpoint_url=hserver.endpoint, region_name="us-east-1",
                      aws_access_key_id=hserver.access_key,
                      aws_secret_access_key=hserver.secret_key,
                      config=botocore.config.Config(signature_version="s3",
                                                    s3={"addressing_style": "path"}))
    url = v2.generate_presigned_url("put_object", Params={"Bucket": "hardening", "Key": "v2"})
    # A SigV2 URL signs the x-amz-* parameters it carries: one added afterwards is not
    # signed, and never applied.
    for extra in ("x-amz-meta-colour=blue", "X-Amz-Meta-Colour=blue",
                  "X-Amz-Copy-Source=hardening%2Fhoisted", "content-type=text%2Fhtml"):
        resp = urllib3.PoolManager().request("PUT", f"{url}&{extra}", body=b"data")
        assert resp.status == 403 and b"SignatureDoesNotMatch" in resp.data, (extra, resp.data)
    with pytest.raises(botocore.exceptions.ClientError):
        hs3.head_object(Bucket="hardening", Key="v2")
    # What botocore signed into the query (Content-Type, metadata, ACL) is the request's,
    # whether the uploader sends it again as headers or not.
    url = v2.generate_presigned_url("put_object", Params={
        "Bucket": "hardening", "Key": "v2", "ContentType": "text/csv",
        "Metadata": {"colour": "green"}, "ACL": "private"})
    assert "x-amz-meta-colour=green" in url and "content-type=text%2Fcsv" in url, url
    for headers in ({}, {"Content-Type": "text/csv", "x-amz-meta-colour": "green"}):
        resp = urllib3.PoolManager().request("PUT", url, body=b"v2 data", headers=headers)
        assert resp.status == 200, (headers, resp.data)
        head = hs3.head_object(Bucket="hardening", Key="v2")
        assert head["ContentType"] == "text/csv" and head["Metadata"] == {"colour": "green"}
        hs3.delete_object(Bucket="hardening", Key="v2")
    resp = urllib3.PoolManager().request("PUT", url, body=b"v2 data",
                                         headers={"Content-Type": "text/html"})
    assert resp.status == 400 and b"InvalidArgument" in resp.data, resp.data


def test_sigterm_lets_a_request_in_flight_finish_and_refuses_new_ones(granary_bin, tmp_path):
    # A rolling restart: SIGTERM stops new connections at once, and a PUT whose body is
    # still arriving is finished, answered (Connection: close) and durable; then exit 0.
    import signal
    srv = Server(str(tmp_path / "granary-data")).start()
    try:
        c = srv.client()
        c.create_bucket(Bucket="drain")
        url = c.generate_presigned_url("put_object", Params={"Bucket": "drain", "Key": "k"})
        u = urlsplit(url)
        body = os.urandom(2 * MiB)
        s = socket.create_connection(addr(srv), timeout=10)
        s.sendall((f"PUT {u.path}?{u.query} HTTP/1.1\r\nHost: {u.netloc}\r\n"
                   f"Content-Length: {len(body)}\r\n\r\n").encode() + body[:MiB])
        time.sleep(0.3)
        srv.proc.send_signal(signal.SIGTERM)
        time.sleep(0.5)
        with pytest.raises(OSError):
            socket.create_connection(addr(srv), timeout=2).close()
        s.sendall(body[MiB:])
        head = read_head(s, 10)
        s.close()
        assert head.startswith(b"HTTP/1.1 200"), head[:300]
        assert b"Connection: close" in head, head[:300]
        assert srv.proc.wait(timeout=15) == 0
    finally:
        srv.stop()
    srv.start()
    try:
        got = srv.client().get_object(Bucket="drain", Key="k")["Body"].read()
        assert got == body
    finally:
        srv.stop()


def test_a_second_sigterm_during_the_shutdown_exits_at_once_and_sighup_shuts_down(
        granary_bin, tmp_path):
    # The stop signals stayed blocked after the first: a shutdown waiting on a request
    # that did not finish could be ended only by SIGKILL. And SIGHUP (a closed terminal)
    # killed the process without its shutdown.
    import signal
    srv = Server(str(tmp_path / "granary-data"), extra_args=["--shutdown-grace", "60"]).start()
    try:
        c = srv.client()
        c.create_bucket(Bucket="drain")
        url = c.generate_presigned_url("put_object", Params={"Bucket": "drain", "Key": "k"})
        u = urlsplit(url)
        s = socket.create_connection(addr(srv), timeout=10)
        s.sendall((f"PUT {u.path}?{u.query} HTTP/1.1\r\nHost: {u.netloc}\r\n"
                   f"Content-Length: {2 * MiB}\r\n\r\n").encode() + b"x" * MiB)
        time.sleep(0.3)
        srv.proc.send_signal(signal.SIGTERM)  # waits for the PUT, up to 60 s
        time.sleep(1)
        assert srv.proc.poll() is None
        start = time.monotonic()
        srv.proc.send_signal(signal.SIGTERM)
        assert srv.proc.wait(timeout=15) == 1
        assert time.monotonic() - start < 10
        s.close()
    finally:
        srv.stop()
    srv.start()
    try:
        srv.proc.send_signal(signal.SIGHUP)
        assert srv.proc.wait(timeout=30) == 0
    finally:
        srv.stop()


def test_an_http10_client_gets_a_streamed_answer_without_chunked_coding(hserver, hs3):
    """HTTP/1.0 has no chunked transfer coding (RFC 9112 6.1: a server must not send
    Transfer-Encoding to such a client). A streamed answer of unknown length, a batch GET
    of records, goes to it plain and ends when the server closes the connection; an
    HTTP/1.1 client on the same server still gets it chunked."""
    import sys
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__)))), "clients", "python"))
    from granary_records import RecordClient
    tar = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "testdata",
                       "webdataset", "tendata.tar")
    hs3.create_bucket(Bucket="http10")
    rc = RecordClient(hserver.endpoint, hserver.access_key, hserver.secret_key)
    rc.put_container("http10", "d.tar", open(tar, "rb").read())
    keys = [r["key"] for r in rc.list_records("http10", container="d.tar")][:3]
    assert len(keys) == 3
    body = json.dumps({"records": keys}).encode()

    def batch(version, connection):
        head = signed_head(hserver, "POST", "/http10?records-batch", body, version=version,
                           connection=connection)
        s = socket.create_connection(addr(hserver), timeout=10)
        try:
            s.sendall(head + body)
            out = b""
            while True:  # until the server closes (or, for HTTP/1.1, the last chunk)
                chunk = s.recv(65536)
                if not chunk:
                    return out, True
                out += chunk
                if version == "HTTP/1.1" and out.endswith(b"\r\n0\r\n\r\n"):
                    return out, False
        finally:
            s.close()

    # Asked to keep the connection: it is closed all the same, the body's end.
    got, closed = batch("HTTP/1.0", "keep-alive")
    head, _, stream = got.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200"), head
    assert b"transfer-encoding" not in head.lower(), head
    assert b"content-length" not in head.lower(), head
    assert b"Connection: close" in head, head
    assert closed
    # The stream itself (a JSON line, then that many bytes, per record; an end line), as
    # the Python client reads it over HTTP/1.1.
    frames, pos = [], 0
    while True:
        nl = stream.index(b"\n", pos)
        header = json.loads(stream[pos:nl])
        pos = nl + 1
        if header.get("end"):
            break
        frames.append((header, stream[pos:pos + header["size"]]))
        pos += header["size"]
    assert pos == len(stream)
    expected = list(rc.batch_get("http10", keys))
    assert [(h["key"], h["status"], b) for h, b in frames] == \
        [(h["key"], h["status"], b) for h, b in expected]
    assert all(h["status"] == 200 for h, _ in frames)

    got, closed = batch("HTTP/1.1", "keep-alive")
    head = got.partition(b"\r\n\r\n")[0]
    assert b"Transfer-Encoding: chunked" in head, head
    assert not closed

    # An answer of known length to HTTP/1.0 with keep-alive says it keeps the connection
    # (an HTTP/1.0 client takes silence as close), and does.
    s = socket.create_connection(addr(hserver), timeout=10)
    try:
        for _ in range(2):
            s.sendall(b"GET /_granary/health HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
            answer = b""
            while not answer.endswith(b"ok\n"):
                chunk = s.recv(65536)
                assert chunk, answer
                answer += chunk
            assert b"Connection: keep-alive" in answer, answer
    finally:
        s.close()
    assert healthy(hserver)


def test_an_http10_streamed_answer_cut_by_the_write_timeout_ends_in_a_reset(hserver, hs3):
    """A streamed answer to HTTP/1.0 ends where the connection closes: one cut short because
    the client stopped reading (--io-timeout 2 s) must not be closed in order, which would
    look like the whole body to the client. It is reset."""
    import io
    import sys
    import tarfile
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__)))), "clients", "python"))
    from granary_records import RecordClient
    # One 16 MiB record: its batch GET is larger than the socket buffers of both ends.
    data = os.urandom(16 * MiB)
    tar = io.BytesIO()
    with tarfile.open(fileobj=tar, mode="w") as t:
        info = tarfile.TarInfo("big.bin")
        info.size = len(data)
        t.addfile(info, io.BytesIO(data))
    hs3.create_bucket(Bucket="http10-cut")
    rc = RecordClient(hserver.endpoint, hserver.access_key, hserver.secret_key)
    rc.put_container("http10-cut", "big.tar", tar.getvalue())
    body = json.dumps({"records": ["big.bin"]}).encode()
    head = signed_head(hserver, "POST", "/http10-cut?records-batch", body,
                       version="HTTP/1.0")
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
    s.settimeout(10)
    got, reset = 0, False
    try:
        s.connect(addr(hserver))
        s.sendall(head + body)
        first = s.recv(65536)
        assert first.startswith(b"HTTP/1.1 200"), first[:300]
        got = len(first)
        time.sleep(5)  # reads nothing for longer than the server's write timeout
        while True:
            chunk = s.recv(1 << 20)
            if not chunk:
                break
            got += len(chunk)
    except ConnectionResetError:
        reset = True
    finally:
        s.close()
    assert got < len(data), got  # cut short indeed
    assert reset, f"an orderly close after {got} bytes of {len(data)}: it looks whole"
    assert healthy(hserver)


def test_generated_credentials_are_owner_only_even_over_a_crashed_temp_file(granary_bin,
                                                                            tmp_path):
    # The credentials are written to a temp file and renamed; one left by a crash kept its
    # mode through O_CREAT, so the secret could land world-readable.
    data = tmp_path / "d"
    data.mkdir()
    stale = data / "root-credentials.json.tmp"
    stale.write_text("{}")
    stale.chmod(0o644)
    from conftest import _PDEATHSIG  # killed with pytest, should it be
    proc = subprocess.Popen(_PDEATHSIG + [granary_bin, "serve", "--data", str(data), "--listen",
                                          "127.0.0.1:0"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        for line in proc.stdout:
            if "Granary is serving S3" in line:
                break
        creds = data / "root-credentials.json"
        assert creds.exists()
        assert creds.stat().st_mode & 0o777 == 0o600
    finally:
        proc.terminate()
        proc.wait(timeout=60)
