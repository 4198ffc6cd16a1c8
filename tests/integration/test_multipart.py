"""Multipart uploads against the real server: boto3 low-level calls, boto3's and aws-cli's
transfer managers, the S3 errors, listing, abort and space reclamation."""
import hashlib
import os
import time
import urllib.request

import pytest
from boto3.s3.transfer import TransferConfig
from botocore.exceptions import ClientError

from conftest import signed

MiB = 1024 * 1024


def error_code(excinfo):
    return excinfo.value.response["Error"]["Code"]


def blob_count(server):
    text = urllib.request.urlopen(server.endpoint + "/_granary/metrics", timeout=10).read().decode()
    total = 0.0
    found = False
    for line in text.splitlines():
        if line.startswith("granary_drive_blobs") and line[len("granary_drive_blobs")] in " {":
            total += float(line.rsplit(" ", 1)[1])
            found = True
    assert found, "granary_drive_blobs not exported"
    return total


def multipart_etag(parts):
    digests = b"".join(hashlib.md5(p).digest() for p in parts)
    return '"%s-%d"' % (hashlib.md5(digests).hexdigest(), len(parts))


def upload(s3, bucket, key, parts, **create_args):
    """Creates an upload, uploads `parts` as 1..n and completes it; returns the response."""
    up = s3.create_multipart_upload(Bucket=bucket, Key=key, **create_args)["UploadId"]
    done = []
    for i, data in enumerate(parts, start=1):
        r = s3.upload_part(Bucket=bucket, Key=key, UploadId=up, PartNumber=i, Body=data)
        assert r["ETag"] == '"%s"' % hashlib.md5(data).hexdigest()
        done.append({"PartNumber": i, "ETag": r["ETag"]})
    return s3.complete_multipart_upload(Bucket=bucket, Key=key, UploadId=up,
                                        MultipartUpload={"Parts": done})


@pytest.fixture(scope="module")
def three_parts():
    return [os.urandom(5 * MiB), os.urandom(5 * MiB), os.urandom(MiB + 7)]


def test_three_parts_round_trip_with_md5_of_md5s_etag(s3, bucket, three_parts):
    r = upload(s3, bucket, "big/obj", three_parts, ContentType="application/x-test",
               Metadata={"color": "blue"})
    want = multipart_etag(three_parts)
    assert r["ETag"] == want
    assert r["Key"] == "big/obj"
    assert r["Bucket"] == bucket
    body = b"".join(three_parts)
    got = s3.get_object(Bucket=bucket, Key="big/obj")
    assert got["ETag"] == want
    assert got["ContentLength"] == len(body)
    assert got["ContentType"] == "application/x-test"
    assert got["Metadata"] == {"color": "blue"}
    assert got["Body"].read() == body
    head = s3.head_object(Bucket=bucket, Key="big/obj")
    assert head["ETag"] == want
    assert head["ContentLength"] == len(body)
    listed = s3.list_objects_v2(Bucket=bucket)["Contents"]
    assert [(o["Key"], o["ETag"], o["Size"]) for o in listed] == [("big/obj", want, len(body))]


def test_ranged_gets_across_part_boundaries(s3, bucket, three_parts):
    upload(s3, bucket, "ranged", three_parts)
    body = b"".join(three_parts)
    b1, b2 = 5 * MiB, 10 * MiB
    ranges = [(b1 - 10, b1 + 10), (b1 - 1, b1), (b1, b1), (b2 - 4096, b2 + 4096),
              (b1 - 3 * MiB, b2 + MiB // 2), (0, len(body) - 1), (b2, len(body) - 1),
              (len(body) - 7, len(body) - 1), (123457, b2 + 99)]
    for first, last in ranges:
        got = s3.get_object(Bucket=bucket, Key="ranged", Range=f"bytes={first}-{last}")
        assert got["ContentRange"] == f"bytes {first}-{last}/{len(body)}"
        assert got["Body"].read() == body[first:last + 1], (first, last)
    got = s3.get_object(Bucket=bucket, Key="ranged", Range="bytes=-1048580")
    assert got["Body"].read() == body[-1048580:]


def test_parts_read_by_number(server, s3, bucket, three_parts):
    """GET and HEAD ?partNumber=N (what multipart downloaders and MinIO's warp use): each
    part's bytes as a range of the object, with the object's ETag and its parts' count."""
    upload(s3, bucket, "numbered", three_parts)
    body = b"".join(three_parts)
    first = 0
    for n, data in enumerate(three_parts, start=1):
        got = s3.get_object(Bucket=bucket, Key="numbered", PartNumber=n)
        assert got["ResponseMetadata"]["HTTPStatusCode"] == 206
        assert got["PartsCount"] == 3
        assert got["ContentLength"] == len(data)
        assert got["ContentRange"] == f"bytes {first}-{first + len(data) - 1}/{len(body)}"
        assert got["ETag"] == multipart_etag(three_parts)
        assert got["Body"].read() == data
        head = s3.head_object(Bucket=bucket, Key="numbered", PartNumber=n)
        assert (head["ContentLength"], head["PartsCount"]) == (len(data), 3)
        first += len(data)
    with pytest.raises(ClientError) as e:
        s3.get_object(Bucket=bucket, Key="numbered", PartNumber=4)
    assert error_code(e) == "InvalidPartNumber"
    assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 416
    # An upload completed with an empty last part: that part is empty, at the end.
    up = s3.create_multipart_upload(Bucket=bucket, Key="empty-last")["UploadId"]
    parts = []
    for n, data in ((1, three_parts[0]), (2, b"")):
        r = s3.upload_part(Bucket=bucket, Key="empty-last", UploadId=up, PartNumber=n,
                           Body=data)
        parts.append({"PartNumber": n, "ETag": r["ETag"]})
    s3.complete_multipart_upload(Bucket=bucket, Key="empty-last", UploadId=up,
                                 MultipartUpload={"Parts": parts})
    got = s3.get_object(Bucket=bucket, Key="empty-last", PartNumber=1)
    assert (got["PartsCount"], got["Body"].read()) == (2, three_parts[0])
    got = s3.get_object(Bucket=bucket, Key="empty-last", PartNumber=2)
    assert (got["PartsCount"], got["ContentLength"], got["Body"].read()) == (2, 0, b"")
    # A single PUT's object is its one part.
    s3.put_object(Bucket=bucket, Key="single", Body=b"one part")
    got = s3.get_object(Bucket=bucket, Key="single", PartNumber=1)
    assert got["Body"].read() == b"one part" and "PartsCount" not in got
    # aws-cli asks the parts' count this way before a download.
    out = server.aws("s3api", "head-object", "--bucket", bucket, "--key", "numbered",
                     "--part-number", "2").stdout
    assert '"PartsCount": 3' in out and f'"ContentLength": {5 * MiB}' in out, out


def test_aws_cli_cp_40_mib_both_ways(server, bucket, tmp_path):
    src = tmp_path / "forty.bin"
    data = os.urandom(40 * MiB)
    src.write_bytes(data)
    server.aws("s3", "cp", str(src), f"s3://{bucket}/cli/forty.bin")
    head = server.client().head_object(Bucket=bucket, Key="cli/forty.bin")
    assert head["ContentLength"] == len(data)
    assert head["ETag"].endswith('-5"')  # 8 MiB parts
    dst = tmp_path / "back.bin"
    server.aws("s3", "cp", f"s3://{bucket}/cli/forty.bin", str(dst))
    assert dst.read_bytes() == data


def test_aws_cli_sync_20_mib(server, bucket, tmp_path):
    up = tmp_path / "up"
    up.mkdir()
    data = os.urandom(20 * MiB)
    (up / "twenty.bin").write_bytes(data)
    (up / "small.txt").write_bytes(b"hello")
    server.aws("s3", "sync", str(up), f"s3://{bucket}/tree")
    again = server.aws("s3", "sync", str(up), f"s3://{bucket}/tree").stdout
    assert "upload" not in again
    down = tmp_path / "down"
    server.aws("s3", "sync", f"s3://{bucket}/tree", str(down))
    assert (down / "twenty.bin").read_bytes() == data
    assert (down / "small.txt").read_bytes() == b"hello"


def test_boto3_transfer_manager_30_mib(s3, bucket, tmp_path):
    src = tmp_path / "thirty.bin"
    data = os.urandom(30 * MiB)
    src.write_bytes(data)
    cfg = TransferConfig(multipart_threshold=8 * MiB, multipart_chunksize=8 * MiB)
    s3.upload_file(str(src), bucket, "xfer/thirty.bin", Config=cfg)
    head = s3.head_object(Bucket=bucket, Key="xfer/thirty.bin")
    assert head["ContentLength"] == len(data)
    assert head["ETag"].endswith('-4"')
    dst = tmp_path / "thirty.out"
    s3.download_file(bucket, "xfer/thirty.bin", str(dst), Config=cfg)
    assert dst.read_bytes() == data


def test_a_retried_complete_gets_the_same_answer(s3, bucket):
    # SDKs retry a Complete whose answer they lost (timeout, reset, 5xx): the retry must
    # not be NoSuchUpload for an object that is in place.
    key = "retried"
    up = s3.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"]
    p1, p2 = os.urandom(5 * MiB), os.urandom(1000)
    parts = [{"PartNumber": n, "ETag": s3.upload_part(Bucket=bucket, Key=key, UploadId=up,
                                                      PartNumber=n, Body=b)["ETag"]}
             for n, b in ((1, p1), (2, p2))]
    first = s3.complete_multipart_upload(Bucket=bucket, Key=key, UploadId=up,
                                         MultipartUpload={"Parts": parts})
    again = s3.complete_multipart_upload(Bucket=bucket, Key=key, UploadId=up,
                                         MultipartUpload={"Parts": parts})
    assert again["ETag"] == first["ETag"] and first["ETag"].endswith('-2"')
    assert s3.get_object(Bucket=bucket, Key=key)["Body"].read() == p1 + p2
    # Another part list is not that Complete: NoSuchUpload, as before.
    with pytest.raises(ClientError) as ei:
        s3.complete_multipart_upload(Bucket=bucket, Key=key, UploadId=up,
                                     MultipartUpload={"Parts": parts[:1]})
    assert error_code(ei) == "NoSuchUpload"


def test_complete_errors(s3, bucket):
    key = "errs"
    up = s3.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"]
    p1 = os.urandom(MiB)
    p2 = os.urandom(1000)
    e1 = s3.upload_part(Bucket=bucket, Key=key, UploadId=up, PartNumber=1, Body=p1)["ETag"]
    e2 = s3.upload_part(Bucket=bucket, Key=key, UploadId=up, PartNumber=2, Body=p2)["ETag"]

    def complete(parts):
        with pytest.raises(ClientError) as ei:
            s3.complete_multipart_upload(Bucket=bucket, Key=key, UploadId=up,
                                         MultipartUpload={"Parts": parts})
        return error_code(ei)

    assert complete([{"PartNumber": 2, "ETag": e2}, {"PartNumber": 1, "ETag": e1}]) == \
        "InvalidPartOrder"
    assert complete([{"PartNumber": 1, "ETag": e1}, {"PartNumber": 1, "ETag": e1}]) == \
        "InvalidPartOrder"
    assert complete([{"PartNumber": 1, "ETag": e2}, {"PartNumber": 2, "ETag": e2}]) == \
        "InvalidPart"
    assert complete([{"PartNumber": 1, "ETag": e1}, {"PartNumber": 3, "ETag": e2}]) == \
        "InvalidPart"
    # Part 1 is 1 MiB and not the last part.
    assert complete([{"PartNumber": 1, "ETag": e1}, {"PartNumber": 2, "ETag": e2}]) == \
        "EntityTooSmall"
    with pytest.raises(ClientError) as ei:
        s3.get_object(Bucket=bucket, Key=key)
    assert error_code(ei) == "NoSuchKey"
    # A single small part is fine (the last part has no minimum); ETags unquoted work too.
    r = s3.complete_multipart_upload(
        Bucket=bucket, Key=key, UploadId=up,
        MultipartUpload={"Parts": [{"PartNumber": 2, "ETag": e2.strip('"')}]})
    assert r["ETag"] == multipart_etag([p2])
    assert s3.get_object(Bucket=bucket, Key=key)["Body"].read() == p2
    # The upload is gone once completed.
    with pytest.raises(ClientError) as ei:
        s3.upload_part(Bucket=bucket, Key=key, UploadId=up, PartNumber=1, Body=b"x")
    assert error_code(ei) == "NoSuchUpload"


def test_malformed_complete_body(server, s3, bucket):
    up = s3.create_multipart_upload(Bucket=bucket, Key="m")["UploadId"]
    with pytest.raises(ClientError) as ei:
        s3.complete_multipart_upload(Bucket=bucket, Key="m", UploadId=up,
                                     MultipartUpload={"Parts": []})
    assert error_code(ei) == "MalformedXML"
    s3.abort_multipart_upload(Bucket=bucket, Key="m", UploadId=up)


def test_part_number_range_and_unknown_upload(server, bucket):
    s3 = server.client(parameter_validation=False)
    up = s3.create_multipart_upload(Bucket=bucket, Key="pn")["UploadId"]
    for n in (0, 10001):
        with pytest.raises(ClientError) as ei:
            s3.upload_part(Bucket=bucket, Key="pn", UploadId=up, PartNumber=n, Body=b"x")
        assert error_code(ei) == "InvalidArgument", n
    s3.upload_part(Bucket=bucket, Key="pn", UploadId=up, PartNumber=10000, Body=b"x")
    for bad in ("nope", "0" * 32, up[:-1] + ("0" if up[-1] != "0" else "1")):
        with pytest.raises(ClientError) as ei:
            s3.upload_part(Bucket=bucket, Key="pn", UploadId=bad, PartNumber=1, Body=b"x")
        assert error_code(ei) == "NoSuchUpload", bad
    # The upload id belongs to its key.
    with pytest.raises(ClientError) as ei:
        s3.upload_part(Bucket=bucket, Key="other", UploadId=up, PartNumber=1, Body=b"x")
    assert error_code(ei) == "NoSuchUpload"
    with pytest.raises(ClientError) as ei:
        s3.create_multipart_upload(Bucket="no-such-bucket-mp", Key="k")
    assert error_code(ei) == "NoSuchBucket"
    s3.abort_multipart_upload(Bucket=bucket, Key="pn", UploadId=up)


def test_list_parts_and_pagination(s3, bucket):
    up = s3.create_multipart_upload(Bucket=bucket, Key="lp")["UploadId"]
    datas = {n: os.urandom(100 + n) for n in (1, 2, 5)}
    for n, d in datas.items():
        s3.upload_part(Bucket=bucket, Key="lp", UploadId=up, PartNumber=n, Body=d)
    r = s3.list_parts(Bucket=bucket, Key="lp", UploadId=up)
    assert r["IsTruncated"] is False
    assert r["UploadId"] == up
    assert [(p["PartNumber"], p["Size"], p["ETag"]) for p in r["Parts"]] == \
        [(n, len(d), '"%s"' % hashlib.md5(d).hexdigest()) for n, d in datas.items()]
    assert all(p["LastModified"] for p in r["Parts"])

    r = s3.list_parts(Bucket=bucket, Key="lp", UploadId=up, MaxParts=2)
    assert r["IsTruncated"] is True
    assert [p["PartNumber"] for p in r["Parts"]] == [1, 2]
    assert r["NextPartNumberMarker"] == 2
    assert r["MaxParts"] == 2
    # None asked for: none listed, and not truncated (a truncated answer would have no
    # marker to go on from).
    r = s3.list_parts(Bucket=bucket, Key="lp", UploadId=up, MaxParts=0)
    assert "Parts" not in r and r["IsTruncated"] is False
    r = s3.list_multipart_uploads(Bucket=bucket, MaxUploads=0)
    assert "Uploads" not in r and r["IsTruncated"] is False
    r = s3.list_parts(Bucket=bucket, Key="lp", UploadId=up, MaxParts=2, PartNumberMarker=2)
    assert r["IsTruncated"] is False
    assert [p["PartNumber"] for p in r["Parts"]] == [5]
    assert r["PartNumberMarker"] == 2

    # The paginator walks it all.
    pages = s3.get_paginator("list_parts").paginate(
        Bucket=bucket, Key="lp", UploadId=up, PaginationConfig={"PageSize": 1})
    assert [p["PartNumber"] for page in pages for p in page.get("Parts", [])] == [1, 2, 5]
    s3.abort_multipart_upload(Bucket=bucket, Key="lp", UploadId=up)


def test_list_multipart_uploads_and_pagination(s3, bucket):
    ids = []
    for key in ("a/1", "b/1", "b/1", "b/2", "c"):
        ids.append((key, s3.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"]))
    r = s3.list_multipart_uploads(Bucket=bucket)
    assert r["IsTruncated"] is False
    got = [(u["Key"], u["UploadId"]) for u in r["Uploads"]]
    assert sorted(got) == sorted(ids)
    assert [k for k, _ in got] == sorted(k for k, _ in got)
    assert all(u["Initiated"] and u["StorageClass"] == "STANDARD" for u in r["Uploads"])

    r = s3.list_multipart_uploads(Bucket=bucket, Prefix="b/")
    assert sorted((u["Key"], u["UploadId"]) for u in r["Uploads"]) == \
        sorted(i for i in ids if i[0].startswith("b/"))

    seen = []
    kwargs = {}
    for _ in range(10):
        r = s3.list_multipart_uploads(Bucket=bucket, MaxUploads=2, **kwargs)
        assert r["MaxUploads"] == 2
        assert len(r.get("Uploads", [])) <= 2
        seen += [(u["Key"], u["UploadId"]) for u in r.get("Uploads", [])]
        if not r["IsTruncated"]:
            break
        kwargs = {"KeyMarker": r["NextKeyMarker"], "UploadIdMarker": r["NextUploadIdMarker"]}
    assert seen == got

    for key, up in ids:
        s3.abort_multipart_upload(Bucket=bucket, Key=key, UploadId=up)
    assert s3.list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []


def test_list_multipart_uploads_with_a_delimiter(server, s3, bucket):
    # S3 rolls keys into common prefixes here as in ListObjects; pages resume after them.
    ids = {key: s3.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"]
           for key in ("a/1", "a/2", "b/x/1", "c", "d/1", "sp ace+/1")}
    r = s3.list_multipart_uploads(Bucket=bucket, Delimiter="/")
    assert r["Delimiter"] == "/" and r["IsTruncated"] is False
    assert [u["Key"] for u in r["Uploads"]] == ["c"]
    assert [p["Prefix"] for p in r["CommonPrefixes"]] == ["a/", "b/", "d/", "sp ace+/"]
    r = s3.list_multipart_uploads(Bucket=bucket, Delimiter="/", Prefix="b/")
    assert "Uploads" not in r
    assert [p["Prefix"] for p in r["CommonPrefixes"]] == ["b/x/"]

    entries, kwargs = [], {}
    for _ in range(10):
        r = s3.list_multipart_uploads(Bucket=bucket, Delimiter="/", MaxUploads=2, **kwargs)
        page = [u["Key"] for u in r.get("Uploads", [])] + \
            [p["Prefix"] for p in r.get("CommonPrefixes", [])]
        assert len(page) <= 2
        entries += page
        if not r["IsTruncated"]:
            break
        kwargs = {"KeyMarker": r["NextKeyMarker"],
                  "UploadIdMarker": r.get("NextUploadIdMarker", "")}
    assert sorted(entries) == ["a/", "b/", "c", "d/", "sp ace+/"]
    # A marker inside a prefix resumes after it.
    r = s3.list_multipart_uploads(Bucket=bucket, Delimiter="/", KeyMarker="a/1",
                                  UploadIdMarker=ids["a/1"])
    assert [p["Prefix"] for p in r["CommonPrefixes"]][0] == "b/"

    # encoding-type=url encodes keys and prefixes; another encoding is refused.
    status, body = signed(server, "GET", f"/{bucket}?uploads=&encoding-type=url&delimiter=%2F")
    assert status == 200
    assert b"<Prefix>sp%20ace%2B/</Prefix>" in body
    assert b"<EncodingType>url</EncodingType>" in body
    status, body = signed(server, "GET", f"/{bucket}?uploads=&encoding-type=base64")
    assert status == 400 and b"<Code>InvalidArgument</Code>" in body
    for key, up in ids.items():
        s3.abort_multipart_upload(Bucket=bucket, Key=key, UploadId=up)


def test_list_parts_names_the_checksum_and_the_missing_bucket(s3, bucket):
    up = s3.create_multipart_upload(Bucket=bucket, Key="ck", ChecksumAlgorithm="CRC32")
    s3.upload_part(Bucket=bucket, Key="ck", UploadId=up["UploadId"], PartNumber=1,
                   Body=b"x" * 100, ChecksumAlgorithm="CRC32")
    r = s3.list_parts(Bucket=bucket, Key="ck", UploadId=up["UploadId"])
    assert r["ChecksumAlgorithm"] == "CRC32"
    assert r["Parts"][0]["ChecksumCRC32"]
    s3.abort_multipart_upload(Bucket=bucket, Key="ck", UploadId=up["UploadId"])
    with pytest.raises(ClientError) as e:
        s3.list_parts(Bucket="no-such-bucket-for-parts", Key="k", UploadId=up["UploadId"])
    assert e.value.response["Error"]["Code"] == "NoSuchBucket"


def test_abort_reclaims_the_parts_space(server, s3, bucket):
    before = blob_count(server)
    up = s3.create_multipart_upload(Bucket=bucket, Key="ab")["UploadId"]
    for n in (1, 2):
        s3.upload_part(Bucket=bucket, Key="ab", UploadId=up, PartNumber=n,
                       Body=os.urandom(5 * MiB))
    assert blob_count(server) > before
    s3.abort_multipart_upload(Bucket=bucket, Key="ab", UploadId=up)
    for call in (lambda: s3.list_parts(Bucket=bucket, Key="ab", UploadId=up),
                 lambda: s3.abort_multipart_upload(Bucket=bucket, Key="ab", UploadId=up),
                 lambda: s3.upload_part(Bucket=bucket, Key="ab", UploadId=up, PartNumber=1,
                                        Body=b"x"),
                 lambda: s3.complete_multipart_upload(
                     Bucket=bucket, Key="ab", UploadId=up,
                     MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": '"x"'}]})):
        with pytest.raises(ClientError) as ei:
            call()
        assert error_code(ei) == "NoSuchUpload"
        assert ei.value.response["ResponseMetadata"]["HTTPStatusCode"] == 404
    deadline = time.time() + 60
    while time.time() < deadline and blob_count(server) > before:
        time.sleep(0.5)
    assert blob_count(server) <= before


def test_reuploading_a_part_replaces_it(s3, bucket):
    up = s3.create_multipart_upload(Bucket=bucket, Key="re")["UploadId"]
    old = os.urandom(5 * MiB)
    new = os.urandom(5 * MiB + 3)
    tail = b"tail"
    e_old = s3.upload_part(Bucket=bucket, Key="re", UploadId=up, PartNumber=1, Body=old)["ETag"]
    e_new = s3.upload_part(Bucket=bucket, Key="re", UploadId=up, PartNumber=1, Body=new)["ETag"]
    e_tail = s3.upload_part(Bucket=bucket, Key="re", UploadId=up, PartNumber=2, Body=tail)["ETag"]
    parts = s3.list_parts(Bucket=bucket, Key="re", UploadId=up)["Parts"]
    assert [(p["PartNumber"], p["ETag"], p["Size"]) for p in parts] == \
        [(1, e_new, len(new)), (2, e_tail, len(tail))]
    with pytest.raises(ClientError) as ei:
        s3.complete_multipart_upload(
            Bucket=bucket, Key="re", UploadId=up,
            MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": e_old},
                                       {"PartNumber": 2, "ETag": e_tail}]})
    assert error_code(ei) == "InvalidPart"
    r = s3.complete_multipart_upload(
        Bucket=bucket, Key="re", UploadId=up,
        MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": e_new},
                                   {"PartNumber": 2, "ETag": e_tail}]})
    assert r["ETag"] == multipart_etag([new, tail])
    assert s3.get_object(Bucket=bucket, Key="re")["Body"].read() == new + tail


def test_complete_over_an_existing_key_replaces_it(s3, bucket):
    s3.put_object(Bucket=bucket, Key="over", Body=os.urandom(3 * MiB))
    parts = [os.urandom(5 * MiB), b"end"]
    r = upload(s3, bucket, "over", parts)
    assert s3.get_object(Bucket=bucket, Key="over")["Body"].read() == b"".join(parts)
    assert s3.head_object(Bucket=bucket, Key="over")["ETag"] == r["ETag"]
    # And a plain PUT replaces the multipart object.
    s3.put_object(Bucket=bucket, Key="over", Body=b"small")
    assert s3.get_object(Bucket=bucket, Key="over")["Body"].read() == b"small"


def test_unlisted_parts_are_dropped(s3, bucket):
    up = s3.create_multipart_upload(Bucket=bucket, Key="sel")["UploadId"]
    a = os.urandom(5 * MiB)
    b = os.urandom(1000)
    c = os.urandom(2000)
    ea = s3.upload_part(Bucket=bucket, Key="sel", UploadId=up, PartNumber=1, Body=a)["ETag"]
    s3.upload_part(Bucket=bucket, Key="sel", UploadId=up, PartNumber=2, Body=b)
    ec = s3.upload_part(Bucket=bucket, Key="sel", UploadId=up, PartNumber=3, Body=c)["ETag"]
    s3.complete_multipart_upload(
        Bucket=bucket, Key="sel", UploadId=up,
        MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": ea},
                                   {"PartNumber": 3, "ETag": ec}]})
    assert s3.get_object(Bucket=bucket, Key="sel")["Body"].read() == a + c
    # The object's parts are the listed ones, numbered in order (as MinIO numbers them).
    for n, data in ((1, a), (2, c)):
        got = s3.get_object(Bucket=bucket, Key="sel", PartNumber=n)
        assert (got["PartsCount"], got["Body"].read()) == (2, data)
    with pytest.raises(ClientError) as ei:  # the number it was uploaded as is not kept
        s3.get_object(Bucket=bucket, Key="sel", PartNumber=3)
    assert error_code(ei) == "InvalidPartNumber"
