"""A 5 GiB object streams through the server in bounded memory (PUT and GET)."""
import hashlib
import http.client
import os
import time
import urllib.parse

from conftest import memory_mib

GiB = 1024 ** 3
MiB = 1024 ** 2


def test_5gib_put_and_get_stream_in_bounded_memory(server, s3, tmp_path):
    s3.create_bucket(Bucket="large-objects")
    size = 5 * GiB
    block = os.urandom(4 * MiB + 4099)  # odd length: stripes and blocks never line up

    def chunks():
        sent = 0
        i = 0
        while sent < size:
            n = min(len(block), size - sent)
            piece = block[:n] if i % 2 == 0 else block[-n:]
            yield piece
            sent += n
            i += 1

    want = hashlib.md5()
    for c in chunks():
        want.update(c)

    url = urllib.parse.urlsplit(s3.generate_presigned_url(
        "put_object", Params={"Bucket": "large-objects", "Key": "5gib"}, ExpiresIn=3600))
    put_started = time.monotonic()
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=600)
    conn.putrequest("PUT", url.path + "?" + url.query, skip_accept_encoding=True)
    conn.putheader("Content-Length", str(size))
    conn.endheaders()
    for c in chunks():
        conn.send(c)
    resp = conn.getresponse()
    body = resp.read()
    assert resp.status == 200, body
    assert resp.getheader("ETag") == '"%s"' % want.hexdigest()
    conn.close()
    put_seconds = time.monotonic() - put_started

    url = urllib.parse.urlsplit(s3.generate_presigned_url(
        "get_object", Params={"Bucket": "large-objects", "Key": "5gib"}, ExpiresIn=3600))
    get_started = time.monotonic()
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=600)
    conn.request("GET", url.path + "?" + url.query)
    resp = conn.getresponse()
    assert resp.status == 200
    assert int(resp.getheader("Content-Length")) == size
    got = hashlib.md5()
    total = 0
    while True:
        piece = resp.read(8 * MiB)
        if not piece:
            break
        got.update(piece)
        total += len(piece)
    conn.close()
    assert total == size
    assert got.hexdigest() == want.hexdigest()

    get_seconds = time.monotonic() - get_started
    rss = memory_mib(server.proc.pid, "VmHWM")
    # Client-side Python MD5 and send loops are included: an end-to-end figure, not a
    # benchmark of the server alone.
    print(f"5 GiB PUT {put_seconds:.1f} s ({size / put_seconds / 1e6:.0f} MB/s), "
          f"GET {get_seconds:.1f} s ({size / get_seconds / 1e6:.0f} MB/s), "
          f"granary peak RSS {rss:.0f} MiB")
    assert rss < 400, f"server peak RSS {rss:.0f} MiB: objects are not streamed"
    s3.delete_object(Bucket="large-objects", Key="5gib")
