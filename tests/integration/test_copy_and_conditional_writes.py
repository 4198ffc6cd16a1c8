"""CopyObject (within and across buckets, metadata directives, source conditions) and
conditional writes (If-None-Match: *, If-Match) through boto3 and aws-cli."""
import concurrent.futures
import hashlib
import os

import botocore.exceptions
import pytest

from conftest import Server

MiB = 1024 * 1024


def code(e):
    return e.value.response["Error"]["Code"]


def status(e):
    return e.value.response["ResponseMetadata"]["HTTPStatusCode"]


@pytest.mark.parametrize("size", [10, 200 * 1024, 9 * MiB + 5])
def test_copy_within_and_across_buckets_is_byte_exact(s3, bucket, size):
    body = os.urandom(size)
    s3.put_object(Bucket=bucket, Key="src", Body=body, ContentType="text/x-src",
                  Metadata={"a": "1"})
    other = bucket + "-dst"
    s3.create_bucket(Bucket=other)
    r = s3.copy_object(Bucket=other, Key="dst copy", CopySource={"Bucket": bucket, "Key": "src"})
    assert r["CopyObjectResult"]["ETag"] == '"%s"' % hashlib.md5(body).hexdigest()
    got = s3.get_object(Bucket=other, Key="dst copy")
    assert got["Body"].read() == body
    assert got["ContentType"] == "text/x-src" and got["Metadata"] == {"a": "1"}
    # The copy owns its bytes: deleting the source (and letting GC run) leaves it intact.
    s3.delete_object(Bucket=bucket, Key="src")
    import time
    time.sleep(2.5)  # --gc-grace 1 --gc-interval 1 in the test server
    assert s3.get_object(Bucket=other, Key="dst copy")["Body"].read() == body


def test_copy_with_replace_directive_and_onto_itself(s3, bucket):
    s3.put_object(Bucket=bucket, Key="k", Body=b"data", Metadata={"old": "x"})
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.copy_object(Bucket=bucket, Key="k", CopySource={"Bucket": bucket, "Key": "k"})
    assert code(e) == "InvalidRequest"
    s3.copy_object(Bucket=bucket, Key="k", CopySource={"Bucket": bucket, "Key": "k"},
                   MetadataDirective="REPLACE", Metadata={"new": "y"}, ContentType="a/b")
    head = s3.head_object(Bucket=bucket, Key="k")
    assert head["Metadata"] == {"new": "y"} and head["ContentType"] == "a/b"
    assert s3.get_object(Bucket=bucket, Key="k")["Body"].read() == b"data"
    # A storage class or encryption named is a change too (S3's rule; Granary ignores both,
    # so the object is rewritten as it was, metadata included).
    for extra in ({"StorageClass": "STANDARD_IA"}, {"ServerSideEncryption": "AES256"}):
        s3.copy_object(Bucket=bucket, Key="k", CopySource={"Bucket": bucket, "Key": "k"},
                       **extra)
        head = s3.head_object(Bucket=bucket, Key="k")
        assert head["Metadata"] == {"new": "y"} and head["ContentType"] == "a/b"
        assert s3.get_object(Bucket=bucket, Key="k")["Body"].read() == b"data"
    # So are tags replaced (AWS, MinIO): the object keeps its metadata, gets the tags.
    s3.copy_object(Bucket=bucket, Key="k", CopySource={"Bucket": bucket, "Key": "k"},
                   TaggingDirective="REPLACE", Tagging="t=1")
    assert s3.get_object_tagging(Bucket=bucket, Key="k")["TagSet"] == [{"Key": "t", "Value": "1"}]
    assert s3.head_object(Bucket=bucket, Key="k")["Metadata"] == {"new": "y"}
    assert s3.get_object(Bucket=bucket, Key="k")["Body"].read() == b"data"


def test_aws_cli_changes_an_objects_storage_class_in_place(server, s3, bucket):
    s3.put_object(Bucket=bucket, Key="tier", Body=b"bytes")
    r = server.aws("s3", "cp", f"s3://{bucket}/tier", f"s3://{bucket}/tier",
                   "--storage-class", "STANDARD_IA")
    assert r.returncode == 0, r.stderr
    assert s3.get_object(Bucket=bucket, Key="tier")["Body"].read() == b"bytes"


def test_copy_source_conditions_and_missing_source(s3, bucket):
    etag = s3.put_object(Bucket=bucket, Key="s", Body=b"x")["ETag"]
    s3.copy_object(Bucket=bucket, Key="d1", CopySource={"Bucket": bucket, "Key": "s"},
                   CopySourceIfMatch=etag)
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.copy_object(Bucket=bucket, Key="d2", CopySource={"Bucket": bucket, "Key": "s"},
                       CopySourceIfMatch='"nope"')
    assert status(e) == 412
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.copy_object(Bucket=bucket, Key="d3", CopySource={"Bucket": bucket, "Key": "s"},
                       CopySourceIfNoneMatch=etag)
    assert status(e) == 412
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.copy_object(Bucket=bucket, Key="d4", CopySource={"Bucket": bucket, "Key": "absent"})
    assert code(e) == "NoSuchKey"


def test_copy_of_a_multipart_object(s3, bucket):
    up = s3.create_multipart_upload(Bucket=bucket, Key="mp")
    parts = []
    data = b""
    for n, size in [(1, 5 * MiB), (2, 1 * MiB + 3)]:
        chunk = os.urandom(size)
        data += chunk
        r = s3.upload_part(Bucket=bucket, Key="mp", UploadId=up["UploadId"], PartNumber=n,
                           Body=chunk)
        parts.append({"PartNumber": n, "ETag": r["ETag"]})
    s3.complete_multipart_upload(Bucket=bucket, Key="mp", UploadId=up["UploadId"],
                                 MultipartUpload={"Parts": parts})
    r = s3.copy_object(Bucket=bucket, Key="mp-copy", CopySource={"Bucket": bucket, "Key": "mp"})
    assert r["CopyObjectResult"]["ETag"] == '"%s"' % hashlib.md5(data).hexdigest()
    assert s3.get_object(Bucket=bucket, Key="mp-copy")["Body"].read() == data


def test_aws_cli_cp_and_mv_between_buckets(server, s3, bucket, tmp_path):
    f = tmp_path / "f.bin"
    f.write_bytes(os.urandom(3 * MiB))
    other = bucket + "-cli"
    s3.create_bucket(Bucket=other)
    server.aws("s3", "cp", str(f), f"s3://{bucket}/a.bin")
    server.aws("s3", "cp", f"s3://{bucket}/a.bin", f"s3://{other}/b.bin")
    server.aws("s3", "mv", f"s3://{other}/b.bin", f"s3://{other}/c.bin")
    assert s3.get_object(Bucket=other, Key="c.bin")["Body"].read() == f.read_bytes()
    with pytest.raises(botocore.exceptions.ClientError):
        s3.head_object(Bucket=other, Key="b.bin")


def put_conditional(s3, **kw):
    """PutObject with raw If-None-Match / If-Match headers (boto3 1.26 has no parameters)."""
    headers = {}
    if "if_none_match" in kw:
        headers["If-None-Match"] = kw.pop("if_none_match")
    if "if_match" in kw:
        headers["If-Match"] = kw.pop("if_match")

    def add(request, **_):
        for name, value in headers.items():
            request.headers[name] = value

    s3.meta.events.register_first("before-sign.s3.PutObject", add)
    try:
        return s3.put_object(**kw)
    finally:
        s3.meta.events.unregister("before-sign.s3.PutObject", add)


def test_if_none_match_star_creates_once(s3, bucket):
    put_conditional(s3, Bucket=bucket, Key="once", Body=b"first", if_none_match="*")
    with pytest.raises(botocore.exceptions.ClientError) as e:
        put_conditional(s3, Bucket=bucket, Key="once", Body=b"second", if_none_match="*")
    assert status(e) == 412 and code(e) == "PreconditionFailed"
    assert s3.get_object(Bucket=bucket, Key="once")["Body"].read() == b"first"


def test_if_none_match_star_racing_writers_exactly_one_wins(server, s3, bucket):
    clients = [server.client() for _ in range(8)]  # boto3 event hooks are per client

    def attempt(i):
        try:
            put_conditional(clients[i], Bucket=bucket, Key="race", Body=b"%d" % i * 70000,
                            if_none_match="*")
            return i
        except botocore.exceptions.ClientError as e:
            # 412 when the winner's object was there at the check; 409 when it came
            # between the check and the commit (ConditionalRequestConflict, as S3 answers).
            answer = (e.response["ResponseMetadata"]["HTTPStatusCode"],
                      e.response["Error"]["Code"])
            assert answer in ((412, "PreconditionFailed"),
                              (409, "ConditionalRequestConflict")), e.response
            return None

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        winners = [w for w in pool.map(attempt, range(8)) if w is not None]
    assert len(winners) == 1
    assert s3.get_object(Bucket=bucket, Key="race")["Body"].read() == b"%d" % winners[0] * 70000


def test_if_match_updates_only_the_expected_version(s3, bucket):
    etag = s3.put_object(Bucket=bucket, Key="cas", Body=b"v1")["ETag"]
    etag2 = put_conditional(s3, Bucket=bucket, Key="cas", Body=b"v2", if_match=etag)["ETag"]
    with pytest.raises(botocore.exceptions.ClientError) as e:
        put_conditional(s3, Bucket=bucket, Key="cas", Body=b"v3", if_match=etag)
    assert status(e) == 412
    assert s3.get_object(Bucket=bucket, Key="cas")["Body"].read() == b"v2"
    assert etag2 != etag
    with pytest.raises(botocore.exceptions.ClientError) as e:
        put_conditional(s3, Bucket=bucket, Key="absent", Body=b"x", if_match=etag)
    assert code(e) == "NoSuchKey"


@pytest.fixture(scope="module")
def eager(granary_bin, tmp_path_factory):
    """A server whose copies and Completes keep their answers alive from the first stripe
    (--keepalive-ms 0): a 200 head, the XML declaration and spaces, then the result."""
    srv = Server(str(tmp_path_factory.mktemp("eager") / "granary-data"),
                 extra_args=["--keepalive-ms", "0"]).start()
    yield srv
    srv.stop()


def test_kept_alive_copies_parse_in_boto3_and_aws_cli(eager):
    s3 = eager.client()
    s3.create_bucket(Bucket="kept")
    body = os.urandom(20 * MiB + 123)  # five stripes and more
    s3.put_object(Bucket="kept", Key="src", Body=body)
    r = s3.copy_object(Bucket="kept", Key="copy", CopySource={"Bucket": "kept", "Key": "src"})
    assert r["CopyObjectResult"]["ETag"] == '"%s"' % hashlib.md5(body).hexdigest()
    assert s3.get_object(Bucket="kept", Key="copy")["Body"].read() == body
    # The answer as it went on the wire: 200, the declaration, whitespace, the result.
    raw = []
    s3.meta.events.register("after-call.s3.CopyObject",
                            lambda http_response, **kw: raw.append(http_response))
    s3.copy_object(Bucket="kept", Key="copy2", CopySource={"Bucket": "kept", "Key": "src"})
    assert raw[0].status_code == 200
    text = raw[0].content.decode()
    assert text.startswith('<?xml version="1.0" encoding="UTF-8"?>\n ')
    assert text.lstrip().split("?>", 1)[1].lstrip().startswith("<CopyObjectResult")
    # A header known before the copy (the source's version) goes with the early head.
    r = s3.copy_object(Bucket="kept", Key="copy3",
                       CopySource={"Bucket": "kept", "Key": "src", "VersionId": "null"})
    assert r["CopySourceVersionId"] == "null"
    assert raw[-1].content.decode().startswith('<?xml version="1.0" encoding="UTF-8"?>\n ')
    # aws-cli copies a 20 MiB object as a multipart upload of UploadPartCopy parts.
    r = eager.aws("s3", "cp", "s3://kept/src", "s3://kept/cli-copy")
    assert r.returncode == 0, r.stderr
    assert s3.get_object(Bucket="kept", Key="cli-copy")["Body"].read() == body

