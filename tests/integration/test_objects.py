"""Object round trips, ranges, errors and auth through boto3 against the real server."""
import hashlib
import json
import os
import urllib.error
import urllib.request

import botocore.exceptions
import pytest

MiB = 1024 * 1024


def error_code(exc_info):
    return exc_info.value.response["Error"]["Code"]


def http_status(exc_info):
    return exc_info.value.response["ResponseMetadata"]["HTTPStatusCode"]


def test_health_answers_without_auth(server):
    with urllib.request.urlopen(server.endpoint + "/_granary/health", timeout=10) as r:
        assert r.status == 200
        assert r.read() == b"ok\n"


@pytest.mark.parametrize("size", [0, 1, 100 * 1024, 1 * MiB + 1, 64 * MiB])
def test_put_get_round_trip_is_byte_exact(s3, bucket, size):
    body = os.urandom(size)
    put = s3.put_object(Bucket=bucket, Key=f"obj-{size}", Body=body)
    assert put["ETag"] == '"%s"' % hashlib.md5(body).hexdigest()
    got = s3.get_object(Bucket=bucket, Key=f"obj-{size}")
    assert got["ContentLength"] == size
    assert got["ETag"] == put["ETag"]
    assert got["Body"].read() == body
    head = s3.head_object(Bucket=bucket, Key=f"obj-{size}")
    assert head["ContentLength"] == size


def test_metadata_and_content_type_are_returned(s3, bucket):
    s3.put_object(Bucket=bucket, Key="meta", Body=b"x", ContentType="text/plain",
                  Metadata={"origin": "crawler-7", "shard": "00042"},
                  ContentDisposition="attachment; filename=x.txt", CacheControl="no-cache")
    head = s3.head_object(Bucket=bucket, Key="meta")
    assert head["ContentType"] == "text/plain"
    assert head["Metadata"] == {"origin": "crawler-7", "shard": "00042"}
    assert head["ContentDisposition"] == "attachment; filename=x.txt"
    assert head["CacheControl"] == "no-cache"


@pytest.mark.parametrize("size", [50 * 1024, 9 * MiB + 12345])
def test_ranged_gets_match_slices(s3, bucket, size):
    body = os.urandom(size)
    s3.put_object(Bucket=bucket, Key="ranged", Body=body)
    cases = [(0, 0), (0, 99), (size - 1, size - 1), (4095, 4097), (size // 3, 2 * size // 3),
             (size - 10, size + 1000)]
    for first, last in cases:
        r = s3.get_object(Bucket=bucket, Key="ranged", Range=f"bytes={first}-{last}")
        assert r["ResponseMetadata"]["HTTPStatusCode"] == 206
        want = body[first:last + 1]
        assert r["Body"].read() == want, (first, last)
        assert r["ContentRange"] == f"bytes {first}-{first + len(want) - 1}/{size}"
    assert s3.get_object(Bucket=bucket, Key="ranged", Range="bytes=-1000")["Body"].read() \
        == body[-1000:]
    assert s3.get_object(Bucket=bucket, Key="ranged", Range=f"bytes={size - 7}-")["Body"].read() \
        == body[-7:]
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.get_object(Bucket=bucket, Key="ranged", Range=f"bytes={size}-")
    assert error_code(e) == "InvalidRange"
    assert http_status(e) == 416


def test_if_range_sends_the_range_only_of_the_same_object(s3, bucket):
    # A download resumed with If-Range (curl -C -, browsers) must get the whole new object,
    # not a range of it spliced onto the old one's bytes (RFC 9110 13.1.5).
    body = os.urandom(10000)
    s3.put_object(Bucket=bucket, Key="resumed", Body=body)
    head = s3.head_object(Bucket=bucket, Key="resumed")
    url = s3.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": "resumed"})

    def get(if_range):
        req = urllib.request.Request(url, headers={"Range": "bytes=100-199",
                                                   "If-Range": if_range})
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.read()

    date = head["ResponseMetadata"]["HTTPHeaders"]["last-modified"]
    assert get(head["ETag"]) == (206, body[100:200])
    assert get(date) == (206, body[100:200])
    assert get('"0123456789abcdef0123456789abcdef"') == (200, body)
    assert get("W/" + head["ETag"]) == (200, body)  # weak tags never match for ranges
    assert get("Thu, 01 Jan 2015 00:00:00 GMT") == (200, body)
    assert get("not a validator") == (200, body)


def test_a_tail_read_of_an_empty_object_is_an_empty_200(s3, bucket):
    # Parquet readers fetch a footer with a suffix range from any object: on an empty one
    # S3 answers 200 and no bytes; any other range of it is 416.
    s3.put_object(Bucket=bucket, Key="empty", Body=b"")
    r = s3.get_object(Bucket=bucket, Key="empty", Range="bytes=-512")
    assert r["ResponseMetadata"]["HTTPStatusCode"] == 200
    assert r["Body"].read() == b"" and "ContentRange" not in r
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.get_object(Bucket=bucket, Key="empty", Range="bytes=0-")
    assert http_status(e) == 416


def test_overwrite_returns_newest_version(s3, bucket):
    s3.put_object(Bucket=bucket, Key="k", Body=os.urandom(3 * MiB))
    newest = os.urandom(2 * MiB + 5)
    s3.put_object(Bucket=bucket, Key="k", Body=newest)
    assert s3.get_object(Bucket=bucket, Key="k")["Body"].read() == newest


def test_missing_bucket_and_key_are_404_with_s3_codes(s3, bucket):
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.get_object(Bucket=bucket, Key="nope")
    assert error_code(e) == "NoSuchKey" and http_status(e) == 404
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.get_object(Bucket="no-such-bucket-xyz", Key="k")
    assert error_code(e) == "NoSuchBucket" and http_status(e) == 404
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.put_object(Bucket="no-such-bucket-xyz", Key="k", Body=b"1")
    assert error_code(e) == "NoSuchBucket"
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.head_object(Bucket=bucket, Key="nope")
    assert http_status(e) == 404


def test_delete_object_then_get_is_no_such_key(s3, bucket):
    s3.put_object(Bucket=bucket, Key="gone", Body=os.urandom(2 * MiB))
    assert s3.delete_object(Bucket=bucket, Key="gone")["ResponseMetadata"]["HTTPStatusCode"] == 204
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.get_object(Bucket=bucket, Key="gone")
    assert error_code(e) == "NoSuchKey"
    # Deleting a missing key succeeds, as in S3.
    s3.delete_object(Bucket=bucket, Key="gone")


def test_bucket_lifecycle_and_errors(s3):
    s3.create_bucket(Bucket="lifecycle-bucket")
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.create_bucket(Bucket="lifecycle-bucket")
    assert error_code(e) == "BucketAlreadyOwnedByYou" and http_status(e) == 409
    s3.head_bucket(Bucket="lifecycle-bucket")
    assert "lifecycle-bucket" in [b["Name"] for b in s3.list_buckets()["Buckets"]]
    s3.put_object(Bucket="lifecycle-bucket", Key="x", Body=b"1")
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.delete_bucket(Bucket="lifecycle-bucket")
    assert error_code(e) == "BucketNotEmpty" and http_status(e) == 409
    s3.delete_object(Bucket="lifecycle-bucket", Key="x")
    s3.delete_bucket(Bucket="lifecycle-bucket")
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.head_bucket(Bucket="lifecycle-bucket")
    assert http_status(e) == 404
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.create_bucket(Bucket="Bad_Name")
    assert error_code(e) == "InvalidBucketName"


def test_wrong_secret_is_signature_does_not_match(server, bucket):
    bad = server.client(secret="not-the-secret-" + "x" * 25)
    with pytest.raises(botocore.exceptions.ClientError) as e:
        bad.get_object(Bucket=bucket, Key="k")
    assert error_code(e) == "SignatureDoesNotMatch" and http_status(e) == 403
    unknown = server.client(access="AKIDONTKNOWYOU000000")
    with pytest.raises(botocore.exceptions.ClientError) as e:
        unknown.list_buckets()
    assert error_code(e) == "InvalidAccessKeyId" and http_status(e) == 403


def test_anonymous_request_is_access_denied(server, bucket):
    req = urllib.request.Request(f"{server.endpoint}/{bucket}/k")
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(req, timeout=10)
    assert e.value.code == 403
    assert b"<Code>AccessDenied</Code>" in e.value.read()


def test_presigned_get_and_put_over_plain_http(s3, bucket):
    body = os.urandom(300 * 1024)
    put_url = s3.generate_presigned_url("put_object", Params={"Bucket": bucket, "Key": "pre"},
                                        ExpiresIn=300)
    req = urllib.request.Request(put_url, data=body, method="PUT")
    with urllib.request.urlopen(req, timeout=30) as r:
        assert r.status == 200
    get_url = s3.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": "pre"},
                                        ExpiresIn=300)
    with urllib.request.urlopen(get_url, timeout=30) as r:
        assert r.read() == body
    # A tampered signature is refused.
    bad = get_url.replace("X-Amz-Signature=", "X-Amz-Signature=0")
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(bad[:len(get_url)], timeout=10)
    assert e.value.code == 403


def test_expired_presigned_url_is_refused(s3, bucket):
    s3.put_object(Bucket=bucket, Key="exp", Body=b"1")
    url = s3.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": "exp"},
                                    ExpiresIn=1)
    import time
    time.sleep(2.5)
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(url, timeout=10)
    assert e.value.code == 403
    assert b"AccessDenied" in e.value.read()


def test_hostile_keys(s3, bucket):
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.put_object(Bucket=bucket, Key="k" * 1025, Body=b"1")
    assert error_code(e) == "KeyTooLongError"
    s3.put_object(Bucket=bucket, Key="k" * 1024, Body=b"max")
    assert s3.get_object(Bucket=bucket, Key="k" * 1024)["Body"].read() == b"max"
    for key in ["..", "../escape", "a/../../b", "./x", "with space", "plus+sign", "per%cent",
                "uni-\u00e9\u4e2d\U0001F600", "q?x=1&y", "#hash"]:
        s3.put_object(Bucket=bucket, Key=key, Body=key.encode())
        assert s3.get_object(Bucket=bucket, Key=key)["Body"].read() == key.encode(), key


def test_delete_objects_batch_and_quiet_mode(s3, bucket):
    keys = [f"batch/{i:04d}" for i in range(1000)]
    for k in keys[:20]:
        s3.put_object(Bucket=bucket, Key=k, Body=k.encode())
    r = s3.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": k} for k in keys]})
    assert sorted(d["Key"] for d in r["Deleted"]) == keys  # missing keys count as deleted
    assert "Errors" not in r
    assert s3.list_objects_v2(Bucket=bucket, Prefix="batch/")["KeyCount"] == 0
    s3.put_object(Bucket=bucket, Key="q1", Body=b"1")
    r = s3.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": "q1"}], "Quiet": True})
    assert "Deleted" not in r and "Errors" not in r
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.delete_objects(Bucket=bucket,
                          Delete={"Objects": [{"Key": f"x{i}"} for i in range(1001)]})
    assert error_code(e) == "MalformedXML"


def test_aws_cli_recursive_rm_uses_delete_objects(server, s3, bucket):
    for i in range(30):
        s3.put_object(Bucket=bucket, Key=f"rr/{i}", Body=b"z")
    server.aws("s3", "rm", "--recursive", f"s3://{bucket}/rr/")
    assert s3.list_objects_v2(Bucket=bucket, Prefix="rr/")["KeyCount"] == 0


def test_conditional_get_and_head_follow_s3_precedence(s3, bucket):
    import datetime
    put = s3.put_object(Bucket=bucket, Key="cond", Body=b"conditional body",
                        CacheControl="max-age=60", Expires=datetime.datetime(2030, 1, 1))
    etag = put["ETag"]
    mtime = s3.head_object(Bucket=bucket, Key="cond")["LastModified"]
    before = mtime - datetime.timedelta(hours=1)
    after = mtime + datetime.timedelta(hours=1)

    assert s3.get_object(Bucket=bucket, Key="cond", IfMatch=etag)["Body"].read() == \
        b"conditional body"
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.get_object(Bucket=bucket, Key="cond", IfMatch='"0123"')
    assert http_status(e) == 412 and error_code(e) == "PreconditionFailed"
    # If-Match compares strongly: a weak tag never matches; If-None-Match weakly.
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.get_object(Bucket=bucket, Key="cond", IfMatch="W/" + etag)
    assert http_status(e) == 412
    for none_match in (etag, "W/" + etag):
        with pytest.raises(botocore.exceptions.ClientError) as e:
            s3.get_object(Bucket=bucket, Key="cond", IfNoneMatch=none_match)
        assert http_status(e) == 304
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.head_object(Bucket=bucket, Key="cond", IfNoneMatch=etag)
    assert http_status(e) == 304
    # A 304 carries the caching headers a 200 would (a cache refreshes them from it), and
    # a HEAD's no Content-Length (it could only be the object's size).
    for method in ("GET", "HEAD"):
        url = s3.generate_presigned_url(method.lower() + "_object",
                                        Params={"Bucket": bucket, "Key": "cond"})
        req = urllib.request.Request(url, method=method, headers={"If-None-Match": etag})
        with pytest.raises(urllib.error.HTTPError) as raised:
            urllib.request.urlopen(req, timeout=30)
        assert raised.value.code == 304
        headers = raised.value.headers
        assert headers["Cache-Control"] == "max-age=60", method
        assert headers["Expires"] == "Tue, 01 Jan 2030 00:00:00 GMT", method
        if method == "HEAD":
            assert headers["Content-Length"] is None
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.get_object(Bucket=bucket, Key="cond", IfModifiedSince=after)
    assert http_status(e) == 304
    assert s3.get_object(Bucket=bucket, Key="cond", IfModifiedSince=before)["ContentLength"] == 16
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.get_object(Bucket=bucket, Key="cond", IfUnmodifiedSince=before)
    assert http_status(e) == 412
    # A passing If-Match wins over a failing If-Unmodified-Since (AWS's documented rule).
    r = s3.get_object(Bucket=bucket, Key="cond", IfMatch=etag, IfUnmodifiedSince=before)
    assert r["ResponseMetadata"]["HTTPStatusCode"] == 200
    # If-None-Match decides alone: no match means 200 even if not modified since.
    r = s3.get_object(Bucket=bucket, Key="cond", IfNoneMatch='"other"', IfModifiedSince=after)
    assert r["ResponseMetadata"]["HTTPStatusCode"] == 200


def test_response_header_overrides_on_get(s3, bucket):
    s3.put_object(Bucket=bucket, Key="ovr", Body=b"x", ContentType="text/plain")
    r = s3.get_object(Bucket=bucket, Key="ovr", ResponseContentType="application/json",
                      ResponseContentDisposition="attachment; filename=\"a.json\"",
                      ResponseCacheControl="max-age=60")
    assert r["ContentType"] == "application/json"
    assert r["ContentDisposition"] == "attachment; filename=\"a.json\""
    assert r["CacheControl"] == "max-age=60"


def test_object_tags_with_boto3_and_aws_cli(server, s3, bucket):
    s3.put_object(Bucket=bucket, Key="tags", Body=b"1",
                  Tagging="project=granary&stage=raw%20data")
    tag_set = s3.get_object_tagging(Bucket=bucket, Key="tags")["TagSet"]
    assert tag_set == [{"Key": "project", "Value": "granary"},
                       {"Key": "stage", "Value": "raw data"}]
    before = s3.head_object(Bucket=bucket, Key="tags")
    assert s3.get_object(Bucket=bucket, Key="tags")["TagCount"] == 2
    # PutObjectTagging replaces the set and keeps the object's ETag and Last-Modified.
    s3.put_object_tagging(Bucket=bucket, Key="tags", Tagging={"TagSet": [
        {"Key": "owner", "Value": "data-team"}]})
    after = s3.head_object(Bucket=bucket, Key="tags")
    assert after["ETag"] == before["ETag"] and after["LastModified"] == before["LastModified"]
    assert s3.get_object(Bucket=bucket, Key="tags")["Body"].read() == b"1"
    # aws-cli v2 (Debian) reads and writes the same tags.
    out = json.loads(server.aws("s3api", "get-object-tagging", "--bucket", bucket,
                                "--key", "tags").stdout)
    assert out["TagSet"] == [{"Key": "owner", "Value": "data-team"}]
    server.aws("s3api", "put-object-tagging", "--bucket", bucket, "--key", "tags",
               "--tagging", "TagSet=[{Key=a,Value=1},{Key=b,Value=2}]")
    assert len(s3.get_object_tagging(Bucket=bucket, Key="tags")["TagSet"]) == 2
    # Copies keep the tags unless the request replaces them.
    s3.copy_object(Bucket=bucket, Key="copy", CopySource={"Bucket": bucket, "Key": "tags"})
    assert len(s3.get_object_tagging(Bucket=bucket, Key="copy")["TagSet"]) == 2
    s3.copy_object(Bucket=bucket, Key="copy2", CopySource={"Bucket": bucket, "Key": "tags"},
                   TaggingDirective="REPLACE", Tagging="fresh=yes")
    assert s3.get_object_tagging(Bucket=bucket, Key="copy2")["TagSet"] == [
        {"Key": "fresh", "Value": "yes"}]
    # A multipart upload's tags apply at completion.
    up = s3.create_multipart_upload(Bucket=bucket, Key="mp", Tagging="shard=000")["UploadId"]
    part = s3.upload_part(Bucket=bucket, Key="mp", UploadId=up, PartNumber=1, Body=b"x" * 100)
    s3.complete_multipart_upload(Bucket=bucket, Key="mp", UploadId=up, MultipartUpload={
        "Parts": [{"PartNumber": 1, "ETag": part["ETag"]}]})
    assert s3.get_object_tagging(Bucket=bucket, Key="mp")["TagSet"] == [
        {"Key": "shard", "Value": "000"}]
    # DeleteObjectTagging leaves the object untagged.
    s3.delete_object_tagging(Bucket=bucket, Key="tags")
    assert s3.get_object_tagging(Bucket=bucket, Key="tags")["TagSet"] == []
    assert "TagCount" not in s3.get_object(Bucket=bucket, Key="tags")
    # What S3 refuses.
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.get_object_tagging(Bucket=bucket, Key="no-such-key")
    assert error_code(e) == "NoSuchKey"
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.put_object(Bucket=bucket, Key="tagged", Body=b"1", Tagging="aws:reserved=1")
    assert error_code(e) == "InvalidTag"
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.put_object_tagging(Bucket=bucket, Key="tags", Tagging={"TagSet": [
            {"Key": f"k{i}", "Value": ""} for i in range(11)]})
    assert error_code(e) == "InvalidTag"
    with pytest.raises(botocore.exceptions.ClientError):
        s3.head_object(Bucket=bucket, Key="tagged")


def test_get_object_attributes(server, s3, bucket):
    body = b"attributes" * 1000
    put = s3.put_object(Bucket=bucket, Key="one", Body=body, ChecksumAlgorithm="SHA256")
    got = s3.get_object_attributes(
        Bucket=bucket, Key="one",
        ObjectAttributes=["ETag", "Checksum", "ObjectParts", "StorageClass", "ObjectSize"])
    assert got["ETag"] == put["ETag"].strip('"')
    assert got["ObjectSize"] == len(body)
    assert got["StorageClass"] == "STANDARD"
    assert got["Checksum"]["ChecksumSHA256"] == put["ChecksumSHA256"]
    assert "ObjectParts" not in got  # a single PUT has no parts
    only_size = s3.get_object_attributes(Bucket=bucket, Key="one", ObjectAttributes=["ObjectSize"])
    assert only_size["ObjectSize"] == len(body) and "ETag" not in only_size

    up = s3.create_multipart_upload(Bucket=bucket, Key="mp")["UploadId"]
    parts = []
    for n, chunk in enumerate((b"a" * (5 << 20), b"b" * 1000), start=1):
        etag = s3.upload_part(Bucket=bucket, Key="mp", UploadId=up, PartNumber=n,
                              Body=chunk)["ETag"]
        parts.append({"PartNumber": n, "ETag": etag})
    s3.complete_multipart_upload(Bucket=bucket, Key="mp", UploadId=up,
                                 MultipartUpload={"Parts": parts})
    mp = s3.get_object_attributes(Bucket=bucket, Key="mp",
                                  ObjectAttributes=["ObjectParts", "ObjectSize", "ETag"])
    assert mp["ObjectParts"]["TotalPartsCount"] == 2
    assert mp["ObjectSize"] == (5 << 20) + 1000 and mp["ETag"].endswith("-2")

    # aws-cli's spelling, and the errors.
    cli = json.loads(server.aws("s3api", "get-object-attributes", "--bucket", bucket, "--key",
                                "one", "--object-attributes", "ObjectSize").stdout)
    assert cli["ObjectSize"] == len(body)
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.get_object_attributes(Bucket=bucket, Key="missing", ObjectAttributes=["ETag"])
    assert e.value.response["Error"]["Code"] == "NoSuchKey"
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.get_object_attributes(Bucket=bucket, Key="one", ObjectAttributes=["Colour"])
    assert e.value.response["Error"]["Code"] == "InvalidArgument"


def test_delete_objects_keeps_whitespace_only_keys(s3, bucket):
    """<Key> </Key> names the key " ": an XML parser that drops whitespace-only text would
    delete "" (nothing) and leave it."""
    for key in (" ", "  ", "\t"):
        s3.put_object(Bucket=bucket, Key=key, Body=b"w")
    s3.put_object(Bucket=bucket, Key="x", Body=b"kept")
    res = s3.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": " "}, {"Key": "  "},
                                                              {"Key": "\t"}]})
    assert sorted(d["Key"] for d in res["Deleted"]) == sorted([" ", "  ", "\t"])
    assert [o["Key"] for o in s3.list_objects_v2(Bucket=bucket).get("Contents", [])] == ["x"]


def thread_nices(pid, prefix):
    """Niceness of each thread of `pid` whose name starts with `prefix`."""
    nices = []
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/comm") as f:
                name = f.read().strip()
            with open(f"/proc/{pid}/task/{task}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue  # the thread ended
        if name.startswith(prefix):
            nices.append(int(fields[16]))  # field 19 of stat: nice
    return nices


def test_uploads_hash_and_encode_at_a_lower_priority(server, s3, bucket):
    # --bulk-nice (default 10): the threads that hash and erasure-code uploads yield the
    # CPUs to reads and index calls; the rest of the server keeps the process's niceness,
    # and theirs is 10 more.
    body = os.urandom(20 * MiB)
    s3.put_object(Bucket=bucket, Key="bulk", Body=body)
    assert s3.get_object(Bucket=bucket, Key="bulk")["Body"].read() == body
    io = thread_nices(server.proc.pid, "granary-io")
    assert len(set(io)) == 1, io  # the process's niceness
    bulk = thread_nices(server.proc.pid, "granary-bulk")
    assert bulk and set(bulk) == {min(19, io[0] + 10)}, bulk
