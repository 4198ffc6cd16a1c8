"""UploadPartCopy against the real server: boto3's upload_part_copy with ranges, aws-cli's
S3-to-S3 copy of an object above its multipart threshold, and the errors."""
import hashlib
import os

import pytest
from botocore.exceptions import ClientError

from conftest import access_log_text

MiB = 1024 * 1024


def error_code(excinfo):
    return excinfo.value.response["Error"]["Code"]


def multipart_etag(parts):
    digests = b"".join(hashlib.md5(p).digest() for p in parts)
    return '"%s-%d"' % (hashlib.md5(digests).hexdigest(), len(parts))


def test_copied_ranges_and_an_uploaded_part_complete_byte_exact(s3, bucket):
    # Parts other than the last must be >= 5 MiB, so the uploaded part sits between the
    # two copied ranges of the 6 MiB source and the 1 MiB rest is the last part.
    source = os.urandom(6 * MiB)
    s3.put_object(Bucket=bucket, Key="src", Body=source)
    up = s3.create_multipart_upload(Bucket=bucket, Key="dst")["UploadId"]
    head, rest = source[:5 * MiB], source[5 * MiB:]
    middle = os.urandom(5 * MiB)
    parts = []
    for n, rng, want in ((1, "bytes=0-%d" % (5 * MiB - 1), head),
                         (3, "bytes=%d-%d" % (5 * MiB, len(source) - 1), rest)):
        r = s3.upload_part_copy(Bucket=bucket, Key="dst", UploadId=up, PartNumber=n,
                                CopySource={"Bucket": bucket, "Key": "src"},
                                CopySourceRange=rng)
        assert r["CopyPartResult"]["ETag"] == '"%s"' % hashlib.md5(want).hexdigest()
        assert r["CopyPartResult"]["LastModified"]
        parts.append({"PartNumber": n, "ETag": r["CopyPartResult"]["ETag"]})
    r = s3.upload_part(Bucket=bucket, Key="dst", UploadId=up, PartNumber=2, Body=middle)
    parts.insert(1, {"PartNumber": 2, "ETag": r["ETag"]})
    listed = s3.list_parts(Bucket=bucket, Key="dst", UploadId=up)["Parts"]
    assert [p["Size"] for p in listed] == [5 * MiB, 5 * MiB, MiB]
    done = s3.complete_multipart_upload(Bucket=bucket, Key="dst", UploadId=up,
                                        MultipartUpload={"Parts": parts})
    assert done["ETag"] == multipart_etag([head, middle, rest])
    body = s3.get_object(Bucket=bucket, Key="dst")["Body"].read()
    assert body == head + middle + rest


def test_a_whole_small_source_without_range_is_one_part(s3, bucket):
    source = os.urandom(1000)  # stored inline
    s3.put_object(Bucket=bucket, Key="small", Body=source)
    up = s3.create_multipart_upload(Bucket=bucket, Key="one")["UploadId"]
    r = s3.upload_part_copy(Bucket=bucket, Key="one", UploadId=up, PartNumber=1,
                            CopySource="%s/small" % bucket)
    etag = r["CopyPartResult"]["ETag"]
    assert etag == '"%s"' % hashlib.md5(source).hexdigest()
    s3.complete_multipart_upload(Bucket=bucket, Key="one", UploadId=up,
                                 MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": etag}]})
    assert s3.get_object(Bucket=bucket, Key="one")["Body"].read() == source


def test_aws_cli_copies_a_large_object_with_upload_part_copy(server, s3, bucket):
    data = os.urandom(20 * MiB)
    s3.put_object(Bucket=bucket, Key="big", Body=data)
    # Plain `aws s3 cp` (copy-props "default") first reads the source's tags with
    # GetObjectTagging, then copies with UploadPartCopy.
    server.aws("s3", "cp", "s3://%s/big" % bucket, "s3://%s/big-copy" % bucket)
    head = s3.head_object(Bucket=bucket, Key="big-copy")
    assert head["ContentLength"] == len(data)
    assert head["ETag"].endswith('-3"')  # 8 MiB chunks: copied as a multipart upload
    assert s3.get_object(Bucket=bucket, Key="big-copy")["Body"].read() == data
    assert '"UploadPartCopy"' in access_log_text(server, '"UploadPartCopy"')


def test_errors(s3, bucket):
    s3.put_object(Bucket=bucket, Key="src", Body=b"x" * 100)
    up = s3.create_multipart_upload(Bucket=bucket, Key="dst")["UploadId"]
    src = {"Bucket": bucket, "Key": "src"}
    for rng in ("bytes=0-100", "bytes=50-10", "bytes=a-b"):
        with pytest.raises(ClientError) as ei:
            s3.upload_part_copy(Bucket=bucket, Key="dst", UploadId=up, PartNumber=1,
                                CopySource=src, CopySourceRange=rng)
        assert error_code(ei) == "InvalidArgument"
        # S3's two messages: a range off the source, a value of the wrong form.
        assert ei.value.response["Error"]["Message"] == (
            "Range specified is not valid for source object of size: 100"
            if rng != "bytes=a-b" else
            "The x-amz-copy-source-range value must be of the form bytes=first-last where "
            "first and last are the zero-based offsets of the first and last bytes to copy")
    with pytest.raises(ClientError) as ei:
        s3.upload_part_copy(Bucket=bucket, Key="dst", UploadId=up, PartNumber=1,
                            CopySource={"Bucket": bucket, "Key": "missing"})
    assert error_code(ei) == "NoSuchKey"
    with pytest.raises(ClientError) as ei:
        s3.upload_part_copy(Bucket=bucket, Key="dst", UploadId=up, PartNumber=1,
                            CopySource=src, CopySourceIfMatch='"0123"')
    assert ei.value.response["ResponseMetadata"]["HTTPStatusCode"] == 412
    s3.abort_multipart_upload(Bucket=bucket, Key="dst", UploadId=up)
    with pytest.raises(ClientError) as ei:
        s3.upload_part_copy(Bucket=bucket, Key="dst", UploadId=up, PartNumber=1,
                            CopySource=src)
    assert error_code(ei) == "NoSuchUpload"
