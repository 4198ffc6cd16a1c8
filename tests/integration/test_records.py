"""The record index end to end (docs/record-index.md): containers uploaded with indexing
through boto3 and aws-cli-sized multipart uploads, records read back by key with the
Python client (clients/python), against real tar and WARC files."""
import gzip
import io
import json
import os
import random
import sys
import tarfile
import time

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "clients", "python"))
from granary_records import RecordClient, RecordError, index_uploads  # noqa: E402
from conftest import Server  # noqa: E402

TESTDATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "testdata")


def sample_file(*parts):
    path = os.path.join(TESTDATA, *parts)
    if not os.path.exists(path):
        raise RuntimeError(f"test data {path} is missing")
    with open(path, "rb") as f:
        return f.read()


@pytest.fixture(scope="module")
def rc(server):
    return RecordClient(server.endpoint, server.access_key, server.secret_key)


def tar_members(data):
    """{name: bytes} of the regular files of a tar, by Python's tarfile."""
    out = {}
    with tarfile.open(fileobj=io.BytesIO(data)) as tf:
        for m in tf.getmembers():
            if m.isfile():
                out[m.name] = tf.extractfile(m).read()
    return out


def make_tar(n, seed=7):
    """A tar of n small files, some with names over 100 bytes (GNU long names and pax
    headers) and pax attributes; returns (bytes, {name: content})."""
    rng = random.Random(seed)
    buf = io.BytesIO()
    files = {}
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tf:
        for i in range(n):
            if i % 10 == 0:
                name = f"deep/{'d' * 120}/sample{i:06d}.txt"  # > 100 bytes: pax path
            else:
                name = f"shard/sample{i:06d}.{['jpg', 'cls', 'json'][i % 3]}"
            content = rng.randbytes(rng.randint(0, 3000))
            info = tarfile.TarInfo(name)
            info.size = len(content)
            if i % 7 == 0:
                info.pax_headers = {"comment": "x" * 50}
            tf.addfile(info, io.BytesIO(content))
            files[name] = content
    return buf.getvalue(), files


def make_warc_gz(n, seed=11):
    """A .warc.gz of n response records (one gzip member per record, as Common Crawl
    writes them) plus a request record for every tenth URL; returns (bytes, {uri: record})."""
    rng = random.Random(seed)
    out = io.BytesIO()
    records = {}
    for i in range(n):
        uri = f"http://example.org/page/{i}?q={rng.randint(0, 1 << 30)}"
        payload = b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\n\r\n" + rng.randbytes(rng.randint(10, 2000))
        types = ["response"] + (["request"] if i % 10 == 0 else [])
        for t in types:
            block = payload if t == "response" else b"GET / HTTP/1.1\r\nHost: example.org\r\n\r\n"
            head = (f"WARC/1.0\r\nWARC-Type: {t}\r\nWARC-Target-URI: {uri}\r\n"
                    f"WARC-Record-ID: <urn:uuid:{i:08d}-{t}>\r\n"
                    f"Content-Type: application/http\r\nContent-Length: {len(block)}\r\n\r\n")
            rec = head.encode() + block + b"\r\n\r\n"
            if t == "response":
                records[uri] = rec
            out.write(gzip.compress(rec, compresslevel=6))
    return out.getvalue(), records


def test_tendata_tar_single_put_indexes_every_member(server, s3, rc, bucket):
    data = sample_file("webdataset", "tendata.tar")
    hdrs = rc.put_container(bucket, "tendata.tar", data)
    members = tar_members(data)
    assert hdrs["x-granary-record-index"] == "indexed"
    assert hdrs["x-granary-record-format"] == "tar"
    assert int(hdrs["x-granary-record-count"]) == len(members) == 100
    for name, content in members.items():
        assert rc.get_record(bucket, name) == content, name
    head = s3.head_object(Bucket=bucket, Key="tendata.tar")
    assert head["ResponseMetadata"]["HTTPHeaders"]["x-granary-record-count"] == "100"
    # Rows are counted and sized per container, and in the metrics.
    assert int(head["ResponseMetadata"]["HTTPHeaders"]["x-granary-record-index-bytes"]) > 100 * 50
    import urllib3
    metrics = urllib3.PoolManager().request("GET", f"{server.endpoint}/_granary/metrics").data.decode()
    assert 'granary_record_containers_total{status="indexed"}' in metrics
    rows = [l for l in metrics.splitlines() if l.startswith('granary_record_index{what="rows"}')]
    assert rows and float(rows[0].split()[-1]) >= 100
    # The object itself is unchanged.
    assert s3.get_object(Bucket=bucket, Key="tendata.tar")["Body"].read() == data


def test_ten_thousand_member_tar_multipart_upload_is_indexed_at_complete(server, s3, rc, bucket,
                                                                         tmp_path):
    data, files = make_tar(10000)
    assert len(data) > 16 << 20  # boto3 uploads it as a multipart upload
    path = tmp_path / "big.tar"
    path.write_bytes(data)
    client = index_uploads(server.client())
    client.upload_file(str(path), bucket, "big.tar")
    head = s3.head_object(Bucket=bucket, Key="big.tar")
    h = head["ResponseMetadata"]["HTTPHeaders"]
    assert head["ETag"].strip('"').endswith("-" + str(-(-len(data) // (8 << 20))))  # multipart
    assert h["x-granary-record-index"] == "indexed"
    assert int(h["x-granary-record-count"]) == 10000

    # Every record by key, in one streamed batch, equals the source bytes.
    names = sorted(files)
    got = list(rc.batch_get(bucket, names))
    assert [hdr["key"] for hdr, _ in got] == names
    for hdr, body in got:
        assert hdr["status"] == 200, hdr
        assert body == files[hdr["key"]], hdr["key"]
    # Single GETs of a sample agree, and list agrees with batch-get's locations.
    for name in random.Random(3).sample(names, 200):
        body, loc = rc.get_record(bucket, name, with_location=True)
        assert body == files[name]
        assert loc["container"] == "big.tar"
    listed = {r["key"]: r for r in rc.list_records(bucket, page_size=997)}
    assert sorted(listed) == names
    for hdr, _ in got:
        assert (listed[hdr["key"]]["offset"], listed[hdr["key"]]["length"]) == \
            (hdr["offset"], hdr["length"])
    # A ranged GET of the container at a row's location gives the same bytes.
    r = listed[names[1234]]
    rng = f"bytes={r['offset']}-{r['offset'] + r['length'] - 1}"
    assert s3.get_object(Bucket=bucket, Key="big.tar", Range=rng)["Body"].read() == \
        files[names[1234]]
    # Prefix listing (pax long names).
    deep = list(rc.list_records(bucket, prefix="deep/"))
    assert len(deep) == 1000
    assert all(len(d["key"]) > 100 for d in deep)
    # The container's rows in offset order.
    ordered = list(rc.container_records(bucket, "big.tar", page_size=3000))
    assert len(ordered) == 10000
    assert [o["offset"] for o in ordered] == sorted(o["offset"] for o in ordered)


def test_warc_gz_of_a_thousand_records_serves_inflated_and_raw_records(rc, bucket):
    data, records = make_warc_gz(1000)
    hdrs = rc.put_container(bucket, "crawl/CC-0001.warc.gz", data)
    assert hdrs["x-granary-record-index"] == "indexed"
    assert hdrs["x-granary-record-format"] == "warc.gz"
    assert int(hdrs["x-granary-record-count"]) == 1100  # responses + every tenth request
    uris = sorted(records)
    got = list(rc.batch_get(bucket, uris))
    assert len(got) == 1000
    for hdr, body in got:
        assert hdr["status"] == 200 and hdr["type"] == "response"
        assert body == records[hdr["key"]]
    for uri in uris[:50]:
        assert rc.get_record(bucket, uri) == records[uri]
        raw = rc.get_record(bucket, uri, raw=True)
        assert raw[:2] == b"\x1f\x8b" and gzip.decompress(raw) == records[uri]
    # Default lookups are for the response; other types on request.
    first = [u for u in uris if u.startswith("http://example.org/page/0?")][0]
    req = rc.get_record(bucket, first, type="request")
    assert req.startswith(b"WARC/1.0\r\nWARC-Type: request\r\n")
    locations = list(rc.list_records(bucket, key=first))
    assert sorted(loc["type"] for loc in locations) == ["request", "response"]
    second = [u for u in uris if u.startswith("http://example.org/page/1?")][0]
    with pytest.raises(RecordError) as e:
        rc.get_record(bucket, second, type="request")  # no request record for it
    assert e.value.status == 404 and e.value.code == "NoSuchKey"


def test_real_warc_files_index_like_a_cdx(rc, bucket):
    # Plain WARC: the record bytes; warc.gz: one gzip member per record, inflated.
    plain = sample_file("warc", "example.warc")
    hdrs = rc.put_container(bucket, "example.warc", plain)
    assert hdrs["x-granary-record-index"] == "indexed"
    assert hdrs["x-granary-record-format"] == "warc"
    body, loc = rc.get_record(bucket, "http://example.com/", with_location=True,
                              container="example.warc")
    assert body.startswith(b"WARC/1.0\r\n") and b"WARC-Type: response" in body
    assert body.endswith(b"\r\n\r\n")
    assert plain[loc["offset"]:loc["offset"] + loc["length"]] == body

    gz = sample_file("warc", "example.warc.gz")
    hdrs = rc.put_container(bucket, "example.warc.gz", gz)
    assert hdrs["x-granary-record-format"] == "warc.gz"
    body, loc = rc.get_record(bucket, "http://example.com/", container="example.warc.gz",
                              with_location=True)
    member = gz[loc["offset"]:loc["offset"] + loc["length"]]
    assert gzip.decompress(member) == body
    assert b"WARC-Type: response" in body
    # The same URL is in both containers: a GET by key alone returns the newest.
    assert rc.head_record(bucket, "http://example.com/")["container"] == "example.warc.gz"
    # Keys by WARC-Record-ID on request.
    hdrs = rc.put_container(bucket, "by-id.warc.gz", gz, index_key="record-id")
    # The independent generator's rows for this file (tests/unit/index_kv/testdata).
    expected_path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "unit",
                                 "index_kv", "testdata", "example.warc.gz.record-id.expected")
    with open(expected_path) as f:
        expected_ids = sorted(line.split("\t")[0] for line in f if line.strip())
    assert int(hdrs["x-granary-record-count"]) == len(expected_ids) == 6
    ids = sorted(r["key"] for r in rc.list_records(bucket, prefix="<urn:uuid:")
                 if r["container"] == "by-id.warc.gz")
    assert ids == expected_ids
    # wget's and other real crawlers' files index too.
    for name in ("example-wget-bad-target-uri.warc.gz", "post-test.warc.gz",
                 "example-resource.warc.gz", "example-iana.org-chunked.warc",
                 "example-space-in-target-uri.warc.gz"):
        hdrs = rc.put_container(bucket, name, sample_file("warc", name))
        assert hdrs["x-granary-record-index"] == "indexed", (name, hdrs)
        rows = list(rc.container_records(bucket, name))
        assert len(rows) == int(hdrs["x-granary-record-count"]) > 0, name
        for row in rows[:5]:
            body = rc.get_record(bucket, row["key"], container=name, type=row.get("type", "*"))
            assert body.startswith(b"WARC/1."), name


@pytest.mark.parametrize("name,content,status", [
    ("trunc.warc", ("warc", "example-trunc.warc"), "malformed"),
    ("bad.warc.gz", ("warc", "example-bad-non-chunked.warc.gz"), "not-indexable"),
    ("sample.tgz", ("webdataset", "sample.tgz"), "not-indexable"),
    ("short.tar", None, "malformed"),
    ("noise.bin", b"this is neither a tar nor a WARC file" * 100, "not-indexable"),
])
def test_bad_containers_are_stored_plainly_with_no_rows(s3, rc, bucket, name, content, status):
    if content is None:
        data = sample_file("webdataset", "tendata.tar")[:50000]  # cut inside a member
    elif isinstance(content, tuple):
        data = sample_file(*content)
    else:
        data = content
    hdrs = rc.put_container(bucket, name, data)
    assert hdrs["x-granary-record-index"] == status, hdrs
    assert "x-granary-record-index-message" in hdrs
    assert s3.get_object(Bucket=bucket, Key=name)["Body"].read() == data
    assert list(rc.list_records(bucket, prefix="")) == []
    assert list(rc.container_records(bucket, name)) == []


def test_overwrite_and_delete_clear_rows(s3, rc, bucket):
    data = sample_file("webdataset", "tendata.tar")
    rc.put_container(bucket, "s.tar", data)
    names = sorted(tar_members(data))
    assert len(list(rc.list_records(bucket))) == 100
    # Overwrite with a different tar: only its rows are visible, at once.
    other, files = make_tar(30, seed=99)
    rc.put_container(bucket, "s.tar", other)
    listed = sorted(r["key"] for r in rc.list_records(bucket))
    assert listed == sorted(files)
    with pytest.raises(RecordError) as e:
        rc.get_record(bucket, names[0])
    assert e.value.code == "NoSuchKey"
    # Overwrite without indexing: no rows.
    s3.put_object(Bucket=bucket, Key="s.tar", Body=other)
    assert list(rc.list_records(bucket)) == []
    rc.put_container(bucket, "s.tar", data)
    assert len(list(rc.list_records(bucket))) == 100
    s3.delete_object(Bucket=bucket, Key="s.tar")
    assert list(rc.list_records(bucket)) == []
    with pytest.raises(RecordError) as e:
        rc.get_record(bucket, names[0])
    assert e.value.status == 404


def test_batch_get_reports_a_status_per_record(rc, bucket):
    data = sample_file("webdataset", "tendata.tar")
    rc.put_container(bucket, "s.tar", data)
    files = tar_members(data)
    names = sorted(files)
    asked = [names[0], "no/such/record", {"key": names[1], "container": "s.tar"},
             {"key": names[2], "container": "other.tar"}]
    got = list(rc.batch_get(bucket, asked))
    assert [h["status"] for h, _ in got] == [200, 404, 200, 404]
    assert got[0][1] == files[names[0]] and got[2][1] == files[names[1]]
    assert got[1][0]["code"] == "NoSuchKey" and got[1][1] == b""


def test_batch_insert_of_external_rows(s3, rc, bucket):
    # A container stored without indexing, rows built by the client (a CDX-like list).
    parts = [b"alpha record", b"", b"gamma" * 1000]
    blob = b"HEADER" + b"".join(parts)
    s3.put_object(Bucket=bucket, Key="packed.bin", Body=blob)
    rows, off = [], 6
    for i, p in enumerate(parts):
        rows.append({"key": f"doc/{i}", "offset": off, "length": len(p)})
        off += len(p)
    out = rc.insert_rows(bucket, "packed.bin", rows)
    assert out["inserted"] == 3 and out["rows"] == 3
    for i, p in enumerate(parts):
        assert rc.get_record(bucket, f"doc/{i}") == p
    # More rows later add to the same set.
    out = rc.insert_rows(bucket, "packed.bin", [{"key": "whole", "offset": 0, "length": len(blob)}])
    assert out["rows"] == 4
    assert rc.get_record(bucket, "whole") == blob
    # Two keys at one offset ("whole" and "start"), listed a row a page in container order:
    # neither is skipped where a page ends between them.
    rc.insert_rows(bucket, "packed.bin", [{"key": "start", "offset": 0, "length": 6}])
    listed = [(r["offset"], r["key"]) for r in rc.container_records(bucket, "packed.bin",
                                                                    page_size=1)]
    assert listed == [(0, "start"), (0, "whole"), (6, "doc/0"), (18, "doc/1"), (18, "doc/2")]
    # next_after: the bare offset where the next page starts at another one (as before),
    # a key cursor where it ends inside an offset.
    def next_after(n):
        q = [("records", None), ("max-records", n)]
        return json.loads(rc._request("GET", bucket, "packed.bin", q).data)["next_after"]
    assert next_after(2) == 0
    assert isinstance(next_after(1), str) and next_after(1).startswith("0~")
    # CRCs computed over striped bytes, a stripe at a time (rows over several stripes).
    big = os.urandom(3 * 1024 * 1024 + 123)
    s3.put_object(Bucket=bucket, Key="big.bin", Body=big)
    rc.insert_rows(bucket, "big.bin", [{"key": "big/all", "offset": 0, "length": len(big)},
                                       {"key": "big/mid", "offset": 1000, "length": 2 << 20}])
    assert rc.get_record(bucket, "big/all") == big
    assert rc.get_record(bucket, "big/mid") == big[1000:1000 + (2 << 20)]
    # Rows are validated against the container's size; nothing is inserted on error.
    with pytest.raises(RecordError) as e:
        rc.insert_rows(bucket, "packed.bin", [{"key": "ok", "offset": 0, "length": 1},
                                              {"key": "bad", "offset": len(blob), "length": 1}])
    assert e.value.status == 400 and e.value.code == "InvalidArgument"
    assert "line 2" in e.value.message
    assert [r["key"] for r in rc.list_records(bucket, prefix="ok")] == []
    with pytest.raises(RecordError) as e:
        rc.insert_rows(bucket, "missing.bin", rows)
    assert e.value.code == "NoSuchKey"
    # A wrong client CRC32C is caught when the record is read.
    rc.insert_rows(bucket, "packed.bin", [{"key": "lie", "offset": 0, "length": 4,
                                           "crc32c": "12345678"}])
    with pytest.raises(RecordError) as e:
        rc.get_record(bucket, "lie")
    assert e.value.status == 500


def test_batch_insert_into_a_container_whose_indexing_failed_takes_its_format(rc, bucket):
    # A .warc.gz indexed as a tar (a bucket default, a wrong header): stored, "malformed".
    # Rows inserted with format=warc.gz are then served inflated, as that format says.
    data, records = make_warc_gz(3, seed=5)
    hdrs = rc.put_container(bucket, "mislabelled.warc.gz", data, index="tar")
    assert hdrs["x-granary-record-index"] == "malformed"
    import zlib
    rows, off = [], 0
    while off < len(data):
        d = zlib.decompressobj(wbits=31)
        d.decompress(data[off:])
        length = len(data) - off - len(d.unused_data)
        rows.append({"key": f"member/{len(rows)}", "offset": off, "length": length})
        off += length
    assert len(rows) == 4  # three responses and the first URL's request
    rc.insert_rows(bucket, "mislabelled.warc.gz", rows, format="warc.gz")
    assert rc.get_record(bucket, "member/0").startswith(b"WARC/1.0\r\n")
    assert rc.get_record(bucket, "member/0") in records.values()


def test_presigned_put_asks_for_indexing_in_its_query(server, s3, rc, bucket):
    # A presigned URL carries no headers of its own: ?x-granary-index=tar asks as the
    # header does (docs/record-index.md).
    import urllib3
    from botocore.auth import S3SigV4QueryAuth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials
    data, files = make_tar(30, seed=23)
    url = (f"{server.endpoint}/{bucket}/presigned.tar"
           "?x-granary-index=tar&x-granary-index-key=uri")
    req = AWSRequest(method="PUT", url=url)
    S3SigV4QueryAuth(Credentials(server.access_key, server.secret_key), "s3", "us-east-1",
                     expires=300).add_auth(req)
    resp = urllib3.PoolManager().request("PUT", req.url, body=data)
    assert resp.status == 200, resp.data
    assert resp.headers["x-granary-record-index"] == "indexed"
    assert int(resp.headers["x-granary-record-count"]) == len(files)
    name, content = next(iter(files.items()))
    assert rc.get_record(bucket, name, container="presigned.tar") == content
    assert s3.get_object(Bucket=bucket, Key="presigned.tar")["Body"].read() == data


def test_record_requests_are_authenticated_and_validated(server, rc, bucket):
    bad = RecordClient(server.endpoint, server.access_key, "wrong-secret")
    with pytest.raises(RecordError) as e:
        list(bad.list_records(bucket))
    assert e.value.status == 403 and e.value.code == "SignatureDoesNotMatch"
    import urllib3
    resp = urllib3.PoolManager().request("GET", f"{server.endpoint}/{bucket}?records")
    assert resp.status == 403 and b"<Code>AccessDenied</Code>" in resp.data
    with pytest.raises(RecordError) as e:
        rc.put_container(bucket, "x.tar", b"x", index="zip")
    assert e.value.status == 400 and e.value.code == "InvalidArgument"
    with pytest.raises(RecordError) as e:
        list(rc.list_records("no-such-bucket-here"))
    assert e.value.code == "NoSuchBucket"
    with pytest.raises(RecordError) as e:
        rc.get_record(bucket, "")
    assert e.value.code == "InvalidArgument"
    with pytest.raises(RecordError) as e:
        list(rc.list_records(bucket, prefix="a", key="b"))
    assert e.value.code == "InvalidArgument"


def test_python_client_errors_limits_and_names(server, rc, bucket):
    """The Python client (clients/python): a batch get's error keeps its S3 code, a batch
    over the server's limits goes in several requests, a container that was not indexed
    is an error rather than no rows, HEAD errors have a code, and a container name that is
    not ASCII comes back as sent."""
    import granary_records
    bad = RecordClient(server.endpoint, server.access_key, "wrong-secret")
    with pytest.raises(RecordError) as e:
        list(bad.batch_get(bucket, ["a"]))
    assert e.value.status == 403 and e.value.code == "SignatureDoesNotMatch", e.value
    with pytest.raises(RecordError) as e:
        list(rc.batch_get("no-such-bucket-here", ["a"]))
    assert e.value.code == "NoSuchBucket", e.value

    data, files = make_tar(20, seed=11)
    name = "données/s.tar"
    rc.put_container(bucket, name, data)
    member = sorted(files)[3]
    body, loc = rc.get_record(bucket, member, with_location=True)
    assert body == files[member] and loc["container"] == name
    assert rc.head_record(bucket, member)["container"] == name
    with pytest.raises(RecordError) as e:
        rc.head_record(bucket, "no-such-record")
    assert e.value.status == 404 and e.value.code == "404"

    # One over the keys a request may carry: two requests, one stream of answers.
    keys = [member] + [f"missing-{i}" for i in range(granary_records.MAX_BATCH_GET_KEYS)]
    got = list(rc.batch_get(bucket, keys))
    assert [h["index"] for h, _ in got] == list(range(len(keys)))
    assert got[0] == (got[0][0], files[member]) and got[0][0]["status"] == 200
    assert {h["status"] for h, _ in got[1:]} == {404}
    assert got[-1][0]["key"] == keys[-1]

    rc.put_container(bucket, "plain.tar", data, index="off")
    assert list(rc.container_records(bucket, "plain.tar")) == []
    with pytest.raises(RecordError) as e:
        list(rc.container_records(bucket, "plain.tar", require_rows=True))
    assert e.value.code == "NotIndexed", e.value
    assert len(list(rc.container_records(bucket, name))) == len(files)


def test_a_container_page_of_long_keys_ends_before_its_row_count(rc, bucket):
    # 600 rows of 8 KiB keys: more than the 4 MiB of keys a container page holds, so a
    # page of max-records=10000 ends early, truncated, and the pages together hold all.
    data, _ = make_tar(5, seed=12)
    rc.put_container(bucket, "long.tar", data, index="off")
    keys = [f"{i:05d}" + "k" * 8187 for i in range(600)]
    rc.insert_rows(bucket, "long.tar", [{"key": k, "offset": 512, "length": 4} for k in keys])
    page = json.loads(rc._request("GET", bucket, "long.tar",
                                  [("records", None), ("max-records", "10000")]).data)
    assert page["is_truncated"] and 0 < len(page["records"]) < 600
    assert sum(len(r["key"]) for r in page["records"]) <= 4 << 20
    assert [r["key"] for r in rc.container_records(bucket, "long.tar", page_size=10000)] == keys


def test_bucket_default_indexes_aws_cli_multipart_uploads(server, s3, rc, bucket, tmp_path):
    assert rc.get_bucket_index(bucket)["index"] == "off"
    assert rc.set_bucket_index(bucket, "auto")["index"] == "auto"
    data, files = make_tar(6000, seed=5)
    assert len(data) > 8 << 20  # aws-cli's multipart threshold
    path = tmp_path / "shard-000000.tar"
    path.write_bytes(data)
    server.aws("s3", "cp", str(path), f"s3://{bucket}/shards/shard-000000.tar")
    head = s3.head_object(Bucket=bucket, Key="shards/shard-000000.tar")
    assert "-" in head["ETag"]  # it was a multipart upload
    assert head["ResponseMetadata"]["HTTPHeaders"]["x-granary-record-count"] == "6000"
    for name in random.Random(1).sample(sorted(files), 100):
        assert rc.get_record(bucket, name) == files[name]
    # A request can opt out; "off" clears the default.
    s3.put_object(Bucket=bucket, Key="plain.tar", Body=sample_file("webdataset", "tendata.tar"))
    assert "x-granary-record-index" in s3.head_object(
        Bucket=bucket, Key="plain.tar")["ResponseMetadata"]["HTTPHeaders"]
    hdrs = rc.put_container(bucket, "optout.tar", sample_file("webdataset", "tendata.tar"),
                            index="off")
    assert "x-granary-record-index" not in hdrs
    rc.set_bucket_index(bucket, "off")
    s3.put_object(Bucket=bucket, Key="plain2.tar", Body=b"x")
    assert "x-granary-record-index" not in s3.head_object(
        Bucket=bucket, Key="plain2.tar")["ResponseMetadata"]["HTTPHeaders"]
    with pytest.raises(RecordError) as e:
        rc.set_bucket_index(bucket, "zip")
    assert e.value.code == "InvalidArgument"


def test_a_complete_that_indexes_is_kept_alive_and_aws_cli_reads_its_answer(granary_bin,
                                                                           tmp_path_factory,
                                                                           tmp_path):
    # --keepalive-ms 0: the Complete answers 200 at once and sends spaces while it indexes
    # the tar, then its result; aws-cli (botocore) must take that for the answer it is.
    srv = Server(str(tmp_path_factory.mktemp("eager") / "granary-data"),
                 extra_args=["--keepalive-ms", "0"]).start()
    try:
        s3 = srv.client()
        s3.create_bucket(Bucket="shards")
        erc = RecordClient(srv.endpoint, srv.access_key, srv.secret_key)
        erc.set_bucket_index("shards", "auto")
        data, files = make_tar(6000, seed=6)
        assert len(data) > 8 << 20  # aws-cli's multipart threshold
        path = tmp_path / "shard-000001.tar"
        path.write_bytes(data)
        r = srv.aws("s3", "cp", str(path), "s3://shards/shard-000001.tar")
        assert r.returncode == 0, r.stderr
        head = s3.head_object(Bucket="shards", Key="shard-000001.tar")
        assert "-" in head["ETag"]
        assert head["ResponseMetadata"]["HTTPHeaders"]["x-granary-record-count"] == "6000"
        for name in random.Random(2).sample(sorted(files), 20):
            assert erc.get_record("shards", name) == files[name]
        # The same through boto3, with the answer as it went on the wire.
        raw = []
        s3.meta.events.register("after-call.s3.CompleteMultipartUpload",
                                lambda http_response, **kw: raw.append(http_response))
        s3.upload_file(str(path), "shards", "shard-000002.tar")
        text = raw[0].content.decode()
        assert raw[0].status_code == 200
        assert text.startswith('<?xml version="1.0" encoding="UTF-8"?>\n '), text[:80]
        assert "<CompleteMultipartUploadResult" in text
        head = s3.head_object(Bucket="shards", Key="shard-000002.tar")
        assert head["ResponseMetadata"]["HTTPHeaders"]["x-granary-record-count"] == "6000"
    finally:
        srv.stop()


def test_records_of_one_name_are_read_one_by_one_by_offset(rc, bucket):
    # A tar appended to (tar -r) holds a name twice; without an offset the last wins,
    # with the listed offset each row is its own record, by GET and by batch get.
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tf:
        for content in (b"first version", b"second, longer version", b"other"):
            info = tarfile.TarInfo("other.txt" if content == b"other" else "a.txt")
            info.size = len(content)
            tf.addfile(info, io.BytesIO(content))
    rc.put_container(bucket, "twice.tar", buf.getvalue())
    rows = [r for r in rc.container_records(bucket, "twice.tar") if r["key"] == "a.txt"]
    assert len(rows) == 2
    assert rc.get_record(bucket, "a.txt") == b"second, longer version"
    got = [rc.get_record(bucket, "a.txt", container="twice.tar", offset=r["offset"])
           for r in rows]
    assert got == [b"first version", b"second, longer version"]
    assert rc.head_record(bucket, "a.txt", container="twice.tar",
                          offset=rows[0]["offset"])["size"] == len(b"first version")
    batch = [{"key": "a.txt", "container": "twice.tar", "offset": r["offset"]} for r in rows]
    batch.append({"key": "a.txt", "container": "twice.tar", "offset": rows[0]["offset"] + 1})
    answers = list(rc.batch_get(bucket, batch, type="*"))
    assert [body for _, body in answers[:2]] == got
    assert answers[2][0]["status"] == 404  # no row of that key there
    with pytest.raises(RecordError) as e:
        rc.get_record(bucket, "a.txt", offset=rows[0]["offset"])  # no container
    assert e.value.code == "InvalidArgument"
    with pytest.raises(RecordError) as e:
        rc.get_record(bucket, "a.txt", container="twice.tar", offset="-1")
    assert e.value.code == "InvalidArgument"


def test_pytorch_iterable_dataset_streams_shuffled_samples(server, rc, bucket):
    import torch  # noqa: F401  python3-torch, installed by scripts/install-deps.sh
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "clients", "python",
                                    "examples"))
    from torch_records import RecordShardDataset
    from torch.utils.data import DataLoader

    expected = {}
    shards = []
    for s in range(4):
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tf:
            for i in range(50):
                key = f"s{s}/{i:06d}"
                for field, content in (("jpg", os.urandom(100 + i)), ("cls", str(i % 7).encode())):
                    info = tarfile.TarInfo(f"{key}.{field}")
                    info.size = len(content)
                    tf.addfile(info, io.BytesIO(content))
                    expected.setdefault(key, {})[field] = content
        name = f"shards/shard-{s:06d}.tar"
        rc.put_container(bucket, name, buf.getvalue())
        shards.append(name)
    ds = RecordShardDataset(server.endpoint, server.access_key, server.secret_key, bucket,
                            shards, shuffle_buffer=64, batch=32, seed=1)
    orders = []
    for epoch in range(2):
        ds.set_epoch(epoch)
        got = list(DataLoader(ds, batch_size=None, num_workers=2))
        assert len(got) == 200
        for sample in got:
            assert sample["jpg"] == expected[sample["__key__"]]["jpg"]
            assert sample["cls"] == expected[sample["__key__"]]["cls"]
        keys = [s["__key__"] for s in got]
        assert sorted(keys) == sorted(expected)
        orders.append(keys)
    assert orders[0] != sorted(orders[0])  # shuffled
    assert orders[0] != orders[1]          # reshuffled per epoch


def test_member_names_that_are_not_utf8_round_trip_through_the_client_and_loader(
        server, rc, bucket):
    # Latin-1 member names (an old tar, a Windows crawl): the JSON answers carry them as
    # key_b64; the client turns them into str with surrogate escapes and back.
    buf = io.BytesIO()
    names = ["caf\udce9/000001.txt", "caf\udce9/000001.cls", "plain/000002.txt"]
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT, encoding="utf-8",
                      errors="surrogateescape") as tf:
        for n in names:
            content = n.encode("utf-8", "surrogateescape")
            info = tarfile.TarInfo(n)
            info.size = len(content)
            tf.addfile(info, io.BytesIO(content))
    assert b"caf\xe9/000001.txt" in buf.getvalue()
    rc.put_container(bucket, "latin1/shard-0.tar", buf.getvalue())
    rows = list(rc.container_records(bucket, "latin1/shard-0.tar"))
    assert [r["key"] for r in rows] == names
    assert all("key_b64" not in r for r in rows)  # "key" is exact: surrogate escapes
    # Rows as the server sends them (key_b64 wins over the lossy key) go back as well.
    raw = {"key": "caf\ufffd/000001.txt", "key_b64": "Y2Fm6S8wMDAwMDEudHh0",
           "container": "latin1/shard-0.tar", "offset": rows[0]["offset"]}
    assert [h["status"] for h, _ in rc.batch_get(bucket, [raw])] == [200]
    assert [r["key"] for r in rc.list_records(bucket, prefix="caf\udce9/")] == sorted(names[:2])
    assert rc.get_record(bucket, names[0]) == names[0].encode("utf-8", "surrogateescape")
    got = list(rc.batch_get(bucket, [{"key": r["key"], "container": "latin1/shard-0.tar",
                                      "offset": r["offset"]} for r in rows] + [b"caf\xe9/none"]))
    assert [h["key"] for h, _ in got] == names + ["caf\udce9/none"]
    assert [h["status"] for h, _ in got] == [200, 200, 200, 404]
    assert [b for _, b in got[:3]] == [n.encode("utf-8", "surrogateescape") for n in names]
    import torch  # noqa: F401  python3-torch, installed by scripts/install-deps.sh
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "clients", "python",
                                    "examples"))
    from torch_records import RecordShardDataset
    ds = RecordShardDataset(server.endpoint, server.access_key, server.secret_key, bucket,
                            ["latin1/shard-0.tar"], shuffle_buffer=1)
    samples = sorted(ds, key=lambda s: s["__key__"])
    assert [s["__key__"] for s in samples] == ["caf\udce9/000001", "plain/000002"]
    assert samples[0]["cls"] == names[1].encode("utf-8", "surrogateescape")
    # Rows inserted with such keys (bytes here).
    rc.insert_rows(bucket, "latin1/shard-0.tar", [{"key": b"raw\xff", "offset": 512,
                                                  "length": 3}])
    assert rc.get_record(bucket, b"raw\xff") == b"caf"


def test_kill9_mid_indexing_keeps_every_acknowledged_record(granary_bin, tmp_path):
    """Writers upload indexed tar shards (single PUTs and multipart); the server is killed
    with SIGKILL mid-load. After restart every acknowledged shard's records read back by
    key, and no record of an unacknowledged or half-indexed shard is visible."""
    import threading
    from conftest import Server

    srv = Server(str(tmp_path / "granary-data")).start()
    s3 = srv.client()
    s3.create_bucket(Bucket="crash-records")
    acked = {}  # shard -> {name: bytes}
    attempted = set()
    lock = threading.Lock()
    stop = threading.Event()

    def writer(wid):
        client = index_uploads(srv.client())
        rng = random.Random(wid)
        i = 0
        while not stop.is_set():
            n = rng.choice([20, 200, 3000])  # 3000 members: ~7 MB, 6 MiB parts when multipart
            data, files = make_tar(n, seed=wid * 1000 + i)
            files = {f"w{wid}-{i}/{k}": v for k, v in files.items()}
            buf = io.BytesIO()
            with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tf:
                for name, content in files.items():
                    info = tarfile.TarInfo(name)
                    info.size = len(content)
                    tf.addfile(info, io.BytesIO(content))
            shard = f"w{wid}/shard-{i}.tar"
            i += 1
            with lock:
                attempted.add(shard)
            try:
                if n == 3000 and wid % 2 == 0:
                    from boto3.s3.transfer import TransferConfig
                    client.upload_fileobj(io.BytesIO(buf.getvalue()), "crash-records", shard,
                                          Config=TransferConfig(multipart_threshold=5 << 20,
                                                                multipart_chunksize=5 << 20))
                else:
                    client.put_object(Bucket="crash-records", Key=shard, Body=buf.getvalue())
            except Exception:
                continue  # not acknowledged
            with lock:
                acked[shard] = files

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    time.sleep(8)
    srv.kill()
    stop.set()
    for t in threads:
        t.join()
    assert len(acked) >= 8, f"only {len(acked)} shards acknowledged"
    print(f"kill -9 after {len(acked)} acknowledged indexed shards "
          f"({sum(len(f) for f in acked.values())} records) of {len(attempted)} attempted")

    srv2 = Server(str(tmp_path / "granary-data")).start()
    try:
        rc2 = RecordClient(srv2.endpoint, srv2.access_key, srv2.secret_key)
        for shard, files in acked.items():
            names = sorted(files)
            got = list(rc2.batch_get("crash-records",
                                     [{"key": k, "container": shard} for k in names]))
            assert [hdr["key"] for hdr, _ in got] == names, shard  # every record, in order
            for hdr, body in got:
                assert hdr["status"] == 200, (shard, hdr)
                assert body == files[hdr["key"]]
        # Every visible row belongs to a shard whose upload committed (acknowledged, or
        # committed just before the kill without its answer getting out): never a partial
        # set of rows for a shard.
        visible = {}
        for r in rc2.list_records("crash-records"):
            visible.setdefault(r["container"], 0)
            visible[r["container"]] += 1
        assert set(acked) <= set(visible)  # every acknowledged shard is indexed
        for shard, count in visible.items():
            assert shard in attempted
            head = srv2.client().head_object(Bucket="crash-records", Key=shard)
            assert int(head["ResponseMetadata"]["HTTPHeaders"]["x-granary-record-count"]) == count
    finally:
        srv2.stop()


def test_large_members_and_mixed_sizes_in_batch_and_single_gets(server, rc, bucket, tmp_path):
    rng = random.Random(17)
    files = {}
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tf:
        for i, size in enumerate([3 << 20, 10, 70000, 0, 5 << 20, 1, 65536, 65537]):
            name = f"mixed/{i:02d}-" + "n" * (150 if i % 2 else 5)  # GNU long names too
            content = rng.randbytes(size)
            info = tarfile.TarInfo(name)
            info.size = size
            tf.addfile(info, io.BytesIO(content))
            files[name] = content
    data = buf.getvalue()
    path = tmp_path / "mixed.tar"
    path.write_bytes(data)
    client = index_uploads(server.client())
    client.upload_file(str(path), bucket, "mixed.tar")  # > 8 MiB: multipart, indexed at Complete
    names = sorted(files)
    got = list(rc.batch_get(bucket, names * 3))  # windows split by bytes, repeated records
    assert len(got) == 3 * len(names)
    for hdr, body in got:
        assert hdr["status"] == 200 and body == files[hdr["key"]], hdr["key"]
    for name in names:
        assert rc.get_record(bucket, name) == files[name]
    # More rows for an indexed container go into its own set.
    out = rc.insert_rows(bucket, "mixed.tar", [{"key": "alias/big", "offset": got[0][0]["offset"],
                                                "length": got[0][0]["length"]}])
    assert out["rows"] == len(names) + 1
    assert rc.get_record(bucket, "alias/big") == files[got[0][0]["key"]]


def test_multipart_upload_of_a_non_container_stops_indexing_early(server, s3, rc, bucket,
                                                                  tmp_path):
    rc.set_bucket_index(bucket, "auto")
    path = tmp_path / "noise.bin"
    path.write_bytes(os.urandom(20 << 20))
    server.aws("s3", "cp", str(path), f"s3://{bucket}/noise.bin")
    h = s3.head_object(Bucket=bucket, Key="noise.bin")["ResponseMetadata"]["HTTPHeaders"]
    assert h["x-granary-record-index"] == "not-indexable"
    assert s3.get_object(Bucket=bucket, Key="noise.bin")["Body"].read() == path.read_bytes()


def test_admin_stats_counts_record_index_rows(server, rc, bucket):
    import json as _json
    import subprocess
    import urllib3
    from conftest import GRANARY
    rc.put_container(bucket, "s.tar", sample_file("webdataset", "tendata.tar"))
    env = dict(os.environ, AWS_ACCESS_KEY_ID=server.access_key,
               AWS_SECRET_ACCESS_KEY=server.secret_key, GRANARY_ENDPOINT=server.endpoint)
    res = subprocess.run([GRANARY, "admin", "stats"], env=env, capture_output=True, text=True,
                         timeout=60)
    assert res.returncode == 0, res.stderr
    stats = _json.loads(res.stdout)
    assert stats["record_index"]["rows"] >= 100
    assert stats["record_index"]["bytes"] > 0
    assert stats["buckets"] >= 1 and len(stats["drives"]) == 6
    assert all(d["capacity_bytes"] > 0 for d in stats["drives"])
    # Root only, signed: a wrong key or no signature is refused.
    env["AWS_SECRET_ACCESS_KEY"] = "wrong"
    res = subprocess.run([GRANARY, "admin", "stats"], env=env, capture_output=True, text=True,
                         timeout=60)
    assert res.returncode == 1 and "SignatureDoesNotMatch" in res.stderr
    resp = urllib3.PoolManager().request("GET", f"{server.endpoint}/_granary/admin/stats")
    assert resp.status == 403 and b"<Code>AccessDenied</Code>" in resp.data


def test_batch_get_left_early_does_not_hand_its_connection_to_the_next_request():
    """A loader that stops reading a batch (a break, an exception) leaves the rest of the
    stream on its connection: the client must not reuse that connection. A scripted peer
    (not granary: it pauses where the client's read stops, which a real server does only by
    chance) sends the first 64 KiB frame, waits, then the rest; the next request made
    during the wait must get its own answer, not the old stream's leftovers."""
    import socket
    import threading

    first_body = b"x" * 1000
    # The client reads 64 KiB at a time: a first frame of exactly that leaves the rest unread.
    first = json.dumps({"key": "a", "status": 200, "size": len(first_body)}).encode()
    pad = (64 << 10) - len(first) - 1 - len(first_body)
    frame1 = first[:-1] + b" " * pad + b"}\n" + first_body
    assert len(frame1) == 64 << 10
    rest = json.dumps({"key": "b", "status": 200, "size": 2}).encode() + b"\nbb" + \
        json.dumps({"end": True}).encode() + b"\n"

    def chunk(data):
        return b"%x\r\n" % len(data) + data + b"\r\n"

    def read_request(conn, buf):
        while b"\r\n\r\n" not in buf:
            got = conn.recv(65536)
            if not got:
                return None
            buf += got
        head, buf = buf.split(b"\r\n\r\n", 1)
        length = 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        while len(buf) < length:
            buf += conn.recv(65536)
        return buf[length:]

    def serve(conn):
        with conn:
            buf = b""
            try:
                while True:
                    buf = read_request(conn, buf)
                    if buf is None:
                        return
                    conn.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" +
                                 chunk(frame1))
                    time.sleep(1.0)
                    conn.sendall(chunk(rest) + b"0\r\n\r\n")
            except OSError:  # the client closed the connection it left early
                return

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)

    def accept():
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    try:
        rc = RecordClient(f"http://127.0.0.1:{listener.getsockname()[1]}", "AK", "SK")
        for header, body in rc.batch_get("bucket", ["a", "b"]):
            assert header["key"] == "a" and body == first_body
            break  # the loader stops here; the rest of the stream is not yet sent
        got = [(h["key"], body) for h, body in rc.batch_get("bucket", ["a", "b"])]
        assert got == [("a", first_body), ("b", b"bb")]
    finally:
        listener.close()


def test_container_keys_with_dot_segments_go_as_they_are(s3, rc, bucket):
    # urllib3 resolves "." and ".." path segments of a URL after botocore signed it: such
    # a key was SignatureDoesNotMatch, or would have named another object.
    tar = sample_file("webdataset", "tendata.tar")
    for key in ("a/./b.tar", "a/../c.tar", "./d.tar", ".."):
        assert rc.put_container(bucket, key, tar)["x-granary-record-index"] == "indexed", key
        rows = list(rc.container_records(bucket, key))
        assert len(rows) == 100, key
        assert rc.get_record(bucket, rows[0]["key"], container=key) == \
            s3.get_object(Bucket=bucket, Key=key,
                          Range=f"bytes={rows[0]['offset']}-"
                                f"{rows[0]['offset'] + rows[0]['length'] - 1}")["Body"].read()
    keys = {o["Key"] for o in s3.list_objects_v2(Bucket=bucket)["Contents"]}
    assert keys == {"a/./b.tar", "a/../c.tar", "./d.tar", ".."}
