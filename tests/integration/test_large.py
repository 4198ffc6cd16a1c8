"""A 5 GiB object streams through the server in bounded memory (PUT and GET), and many
extent files are served through a bounded number of open descriptors."""
import hashlib
import http.client
import os
import time
import urllib.parse

from conftest import Server, memory_mib, server_metric

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


def extent_descriptors(pid):
    """How many descriptors process `pid` has open on extent files."""
    n = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}").endswith(".ext"):
                n += 1
        except OSError:  # closed meanwhile
            pass
    return n


def test_extent_descriptors_stay_within_their_bound(granary_bin, tmp_path):
    # 1 MiB extents and 4 MiB objects (4+2 on 6 drives): each fragment fills most of an
    # extent, so 40 objects make about 40 extents a drive, and --extent-descriptors 96 is
    # 16 a drive. Reads and writes go on, reopening what was closed.
    srv = Server(str(tmp_path / "granary-data"),
                 extra_args=["--extent-size", "1", "--extent-descriptors", "96"]).start()
    try:
        s3 = srv.client()
        s3.create_bucket(Bucket="many-extents")
        bodies = {f"obj-{i}": os.urandom(4 * MiB) for i in range(40)}
        for key, body in bodies.items():
            s3.put_object(Bucket="many-extents", Key=key, Body=body)
        for _ in range(2):  # the second pass reopens what the first one's end closed
            for key, body in bodies.items():
                got = s3.get_object(Bucket="many-extents", Key=key)["Body"].read()
                assert hashlib.md5(got).digest() == hashlib.md5(body).digest(), key
                ranged = s3.get_object(Bucket="many-extents", Key=key,
                                       Range="bytes=1000000-1000999")["Body"].read()
                assert ranged == body[1000000:1001000], key
        extent_files = sum(1 for _, _, files in os.walk(srv.data_dir)
                           for f in files if f.endswith(".ext"))
        assert extent_files >= 6 * 30, extent_files  # far more than the bound
        assert extent_descriptors(srv.proc.pid) <= 96
        assert 0 < server_metric(srv, "granary_drive_open_descriptors") <= 96
        assert server_metric(srv, "granary_drive_descriptors_closed_total") > 0
    finally:
        srv.stop()
