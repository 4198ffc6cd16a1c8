"""`granary chunkserver` (docs/internal-api.md) driven with python requests: unsigned,
badly signed and stale requests are refused with 403, and requests signed by this file's
own implementation of the documented scheme work end to end."""
import hashlib
import hmac
import os
import subprocess
import time

import pytest
import requests

from conftest import ChunkServer
from test_checksums import crc32c

SECRET = "chunkserver-integration-secret"
BLOB = "18ea719287adb79e000000000000002a" + "00000003" + "0001"  # 22 bytes: version, stripe, fragment


def sign(method, path, query, body, secret=SECRET, date=None, headers=None):
    """Headers for a request, as docs/internal-api.md specifies."""
    date = int(time.time()) if date is None else date
    crc = "%08x" % crc32c(body)
    canonical_query = "&".join(sorted(s for s in query.split("&") if s))
    to_sign = "\n".join([method, path, canonical_query, str(date), str(len(body)), crc])
    for name, value in sorted((k.lower(), v) for k, v in (headers or {}).items()
                              if k.lower().startswith("x-granary-")):
        to_sign += "\n" + name + ":" + value
    signature = hmac.new(secret.encode(), to_sign.encode(), hashlib.sha256).hexdigest()
    return {"x-granary-date": str(date), "x-granary-content-crc32c": crc,
            "x-granary-signature": signature}


def call(server, method, path, query="", body=b"", headers=None, **sign_args):
    h = dict(headers or {})
    h.update(sign(method, path, query, body, headers=h, **sign_args))
    url = server.endpoint + path + ("?" + query if query else "")
    return requests.request(method, url, data=body, headers=h, timeout=10)


DESCRIPTOR = {"x-granary-ec": "4+2", "x-granary-stripe-len": "4096",
              "x-granary-bucket": "b%C3%BCcket", "x-granary-key": "dir%2Fkey%20one"}


@pytest.fixture(scope="module")
def chunkserver(granary_bin, tmp_path_factory):
    base = tmp_path_factory.mktemp("cs")
    srv = ChunkServer([str(base / "d0"), "second=" + str(base / "other")], secret=SECRET).start()
    yield srv
    assert srv.stop() == 0


def blob_path(drive="d0", blob=BLOB):
    return f"/internal/v1/drives/{drive}/blobs/{blob}"


UNSIGNED = [
    ("GET", "/internal/v1/health", b""),
    ("GET", "/internal/v1/drives", b""),
    ("GET", "/internal/v1/drives/d0/stats", b""),
    ("GET", "/internal/v1/drives/d0/blobs", b""),
    ("PUT", blob_path(), b"x" * 5000),
    ("GET", blob_path() + "?offset=0&length=1", b""),
    ("HEAD", blob_path(), b""),
    ("DELETE", blob_path(), b""),
]


@pytest.mark.parametrize("method,target,body", UNSIGNED)
def test_unsigned_requests_are_refused_with_403(chunkserver, method, target, body):
    headers = DESCRIPTOR if method == "PUT" else {}
    r = requests.request(method, chunkserver.endpoint + target, data=body, headers=headers,
                         timeout=10)
    assert r.status_code == 403
    assert r.headers["x-granary-error-code"] == "PermissionDenied"
    if method != "HEAD":
        assert r.json()["code"] == "PermissionDenied"
    # And nothing was stored.
    assert call(chunkserver, "HEAD", blob_path()).status_code == 404


def test_bad_signatures_and_stale_dates_are_refused(chunkserver):
    path = "/internal/v1/health"
    assert call(chunkserver, "GET", path).status_code == 200
    assert call(chunkserver, "GET", path, secret="wrong").status_code == 403
    assert call(chunkserver, "GET", path, date=int(time.time()) - 16 * 60).status_code == 403
    assert call(chunkserver, "GET", path, date=int(time.time()) + 16 * 60).status_code == 403
    assert call(chunkserver, "GET", path, date=int(time.time()) - 14 * 60).status_code == 200
    # A signature for another path does not carry over.
    h = sign("GET", "/internal/v1/drives", "", b"")
    assert requests.get(chunkserver.endpoint + path, headers=h, timeout=10).status_code == 403
    # Nor for another body: the CRC header is signed, and the body must match it.
    h = sign("PUT", blob_path(), "", b"a" * 100, headers=DESCRIPTOR)
    h.update(DESCRIPTOR)
    r = requests.put(chunkserver.endpoint + blob_path(), data=b"b" * 100, headers=h, timeout=10)
    assert r.status_code == 400
    assert "crc32c" in r.json()["message"].lower()
    assert call(chunkserver, "HEAD", blob_path()).status_code == 404
    # Nor for another descriptor: the x-granary-* headers are signed too.
    h = sign("PUT", blob_path(), "", b"a" * 100, headers=DESCRIPTOR)
    h.update(DESCRIPTOR)
    h["x-granary-key"] = "someone%20else"
    r = requests.put(chunkserver.endpoint + blob_path(), data=b"a" * 100, headers=h, timeout=10)
    assert r.status_code == 403
    assert call(chunkserver, "HEAD", blob_path()).status_code == 404


def test_signed_requests_store_read_list_and_delete_blobs(chunkserver):
    drives = call(chunkserver, "GET", "/internal/v1/drives").json()["drives"]
    assert {d["id"] for d in drives} == {"d0", "second"}
    assert all(d["writable"] for d in drives)

    body = os.urandom(10000)
    path = blob_path("second")
    r = call(chunkserver, "PUT", path, body=body, headers=DESCRIPTOR)
    assert r.status_code == 200, r.text
    r = call(chunkserver, "PUT", path, body=body, headers=DESCRIPTOR)
    assert r.status_code == 409 and r.json()["code"] == "AlreadyExists"

    r = call(chunkserver, "GET", path, query="offset=100&length=5000")
    assert r.status_code == 200 and r.content == body[100:5100]
    assert int(r.headers["x-granary-content-crc32c"], 16) == crc32c(body[100:5100])
    # Query parameters are signed in canonical (sorted) order, whatever order they are sent in.
    r = call(chunkserver, "GET", path, query="length=10&offset=0")
    assert r.content == body[:10]
    r = call(chunkserver, "GET", path, query="offset=9999&length=2")
    assert r.status_code == 400 and r.json()["code"] == "InvalidArgument"

    r = call(chunkserver, "HEAD", path)
    assert r.status_code == 200 and r.headers["x-granary-blob-length"] == "10000"
    listed = call(chunkserver, "GET", "/internal/v1/drives/second/blobs", query="limit=10").json()
    assert [b["id"] for b in listed["blobs"]] == [BLOB]
    stats = call(chunkserver, "GET", "/internal/v1/drives/second/stats").json()
    assert stats["blobs"] == 1 and stats["payload_bytes"] == 10000

    assert call(chunkserver, "DELETE", path).status_code == 200
    r = call(chunkserver, "GET", path, query="offset=0&length=1")
    assert r.status_code == 404 and r.json()["code"] == "NotFound"
    # A drive this server does not serve: out of reach, not lost (a --dir left out).
    r = call(chunkserver, "GET", "/internal/v1/drives/nope/stats")
    assert r.status_code == 503 and r.json()["code"] == "Unavailable"


def test_refuses_to_start_without_a_cluster_secret(granary_bin, tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "GRANARY_CLUSTER_SECRET"}
    res = subprocess.run([granary_bin, "chunkserver", "--dir", str(tmp_path / "d0"),
                          "--listen", "127.0.0.1:0"],
                         env=env, capture_output=True, text=True, timeout=30)
    assert res.returncode != 0
    assert "cluster secret" in res.stderr
    assert not (tmp_path / "d0").exists()  # refused before touching the drive


def test_sigterm_stops_it_and_a_restart_serves_the_same_blobs(granary_bin, tmp_path):
    srv = ChunkServer([str(tmp_path / "d0")], secret=SECRET).start()
    body = b"kept across restarts"
    assert call(srv, "PUT", blob_path(), body=body, headers=DESCRIPTOR).status_code == 200
    started = time.monotonic()
    assert srv.stop() == 0
    assert time.monotonic() - started < 10
    srv.restart()
    try:
        r = call(srv, "GET", blob_path(), query=f"offset=0&length={len(body)}")
        assert r.content == body
    finally:
        assert srv.stop() == 0


def test_a_drive_that_does_not_open_is_left_out_and_the_others_serve(granary_bin, tmp_path):
    # One failing drive must not take the server's other drives offline: it is listed not
    # writable, and calls on it are 503 Unavailable (retryable: its fragments are not
    # lost, as 404 would say). Only when no drive opens does the server refuse to start.
    (tmp_path / "broken").write_text("a file where a drive directory should be")
    srv = ChunkServer([str(tmp_path / "d0"), "bad=" + str(tmp_path / "broken")],
                      secret=SECRET).start()
    try:
        drives = {d["id"]: d["writable"]
                  for d in call(srv, "GET", "/internal/v1/drives").json()["drives"]}
        assert drives == {"d0": True, "bad": False}
        assert call(srv, "PUT", blob_path(), body=b"x" * 5000,
                    headers=DESCRIPTOR).status_code == 200
        r = call(srv, "PUT", blob_path("bad"), body=b"x" * 5000, headers=DESCRIPTOR)
        assert r.status_code == 503 and "did not open" in r.text
        r = call(srv, "GET", "/internal/v1/drives/bad/stats")
        assert r.status_code == 503
    finally:
        assert srv.stop() == 0
    with open(srv.log_path) as log:
        assert "drive bad" in log.read()

    res = subprocess.run([granary_bin, "chunkserver", "--dir", "bad=" + str(tmp_path / "broken"),
                          "--listen", "127.0.0.1:0"],
                         env=dict(os.environ, GRANARY_CLUSTER_SECRET=SECRET),
                         capture_output=True, text=True, timeout=30)
    assert res.returncode != 0
    assert "no drive could be opened" in res.stderr
