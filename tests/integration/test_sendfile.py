"""GET bodies whose fragments are in the page cache go out with sendfile: the bytes are the
object's (whole and ranged), a fragment range collected while it is being sent keeps its
bytes until its send is done, and a client that stops reading is dropped."""
import os
import socket
import time
from urllib.parse import urlsplit

import pytest

from conftest import Server, server_metric

MiB = 1024 * 1024


@pytest.fixture(scope="module")
def fserver(granary_bin, tmp_path_factory):
    # The suite's servers collect deleted fragments after 1 s (--gc-grace 1).
    srv = Server(str(tmp_path_factory.mktemp("sendfile") / "granary-data"),
                 extra_args=["--io-timeout", "3"]).start()
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def fs3(fserver):
    c = fserver.client()
    c.create_bucket(Bucket="sendfile")
    return c


def sent_from_cache(server):
    return server_metric(server, "granary_get_sent_from_cache_bytes_total")


def slow_get(server, s3, key, rcvbuf=64 * 1024):
    """A raw GET with a small receive buffer; returns the socket once the head is in."""
    url = urlsplit(s3.generate_presigned_url(
        "get_object", Params={"Bucket": "sendfile", "Key": key}, ExpiresIn=600))
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    s.settimeout(30)
    s.connect((url.hostname, url.port))
    s.sendall(f"GET {url.path}?{url.query} HTTP/1.1\r\nHost: {url.netloc}\r\n\r\n".encode())
    got = b""
    while b"\r\n\r\n" not in got:
        chunk = s.recv(4096)
        assert chunk, "closed before the response head"
        got += chunk
    head, _, body = got.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200"), head
    return s, body


def read_all(s, body, want):
    while len(body) < want:
        try:
            chunk = s.recv(1 << 20)
        except ConnectionResetError:
            break
        if not chunk:
            break
        body += chunk
    return body


def test_cached_gets_whole_and_ranged_are_the_objects_bytes(fserver, fs3):
    data = os.urandom(9 * MiB + 4321)  # three stripes, the last one short
    fs3.put_object(Bucket="sendfile", Key="obj", Body=data)
    # Written with O_DIRECT: the first GET reads through buffers and fills the page cache.
    assert fs3.get_object(Bucket="sendfile", Key="obj")["Body"].read() == data
    before = sent_from_cache(fserver)
    assert fs3.get_object(Bucket="sendfile", Key="obj")["Body"].read() == data
    assert sent_from_cache(fserver) - before == len(data)
    for first, last in ((0, 0), (1, 4 * MiB), (4 * MiB - 7, 8 * MiB + 9), (len(data) - 10,
                                                                            len(data) - 1)):
        got = fs3.get_object(Bucket="sendfile", Key="obj",
                             Range=f"bytes={first}-{last}")["Body"].read()
        assert got == data[first:last + 1], (first, last)


def test_a_blob_collected_during_its_send_keeps_its_bytes(fserver, fs3):
    """The range a stalled send is in is pinned: the collector's punch waits for it, and the
    client gets the range's bytes, not the zeros of a hole. Ranges not pinned yet when the
    fragments went are not sent: the body is cut short (the connection closes), as for a
    GET whose object is collected under it on the buffered path."""
    data = os.urandom(6 * MiB + 12345)
    fs3.put_object(Bucket="sendfile", Key="doomed", Body=data)
    assert fs3.get_object(Bucket="sendfile", Key="doomed")["Body"].read() == data
    blobs = server_metric(fserver, "granary_drive_blobs")
    before = sent_from_cache(fserver)
    s, body = slow_get(fserver, fs3, "doomed")
    try:
        body = read_all(s, body, 256 * 1024)
        fs3.delete_object(Bucket="sendfile", Key="doomed")
        # The collector removes the fragments 1 s after the delete (the suite's --gc-grace).
        deadline = time.monotonic() + 2.5  # under the server's 3 s write timeout

        def collected():
            return server_metric(fserver, "granary_drive_blobs") <= blobs - 12
        while not collected() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert collected(), "fragments not collected"
        stalled_at = len(body)
        body = read_all(s, body, len(data))
    finally:
        s.close()
    assert len(body) > stalled_at + 256 * 1024, "the range being sent did not go on"
    assert body == data[:len(body)], "bytes that are not the object's"
    assert sent_from_cache(fserver) > before  # the pinned path sent it
    with pytest.raises(fs3.exceptions.NoSuchKey):
        fs3.get_object(Bucket="sendfile", Key="doomed")


def test_a_client_that_stops_reading_is_dropped_and_the_server_goes_on(fserver, fs3):
    data = os.urandom(24 * MiB)
    fs3.put_object(Bucket="sendfile", Key="big", Body=data)
    assert fs3.get_object(Bucket="sendfile", Key="big")["Body"].read() == data
    s, body = slow_get(fserver, fs3, "big")
    try:
        time.sleep(5)  # past the 3 s write timeout, reading nothing
        body = read_all(s, body, len(data))
    finally:
        s.close()
    assert len(body) < len(data), "the server kept sending to a client that stopped reading"
    assert body == data[:len(body)]
    assert fs3.get_object(Bucket="sendfile", Key="big")["Body"].read() == data

