"""Stored additional checksums (docs/api.md "Checksums"): PutObject stores the verified (or
x-amz-sdk-checksum-algorithm computed) checksum; GET/HEAD with x-amz-checksum-mode:
ENABLED return it for the whole object and never for a Range; multipart uploads keep part
checksums and produce COMPOSITE ("<b64>-N") or FULL_OBJECT (combined CRC) object checksums.
Debian boto3 1.26 drives most of it (CRC32C/CRC64NVME values computed here and sent as
headers: it lacks awscrt); the newest boto3 runs clients/boto3_checksums.py."""
import base64
import hashlib
import os
import zlib

import botocore.exceptions
import pytest

from conftest import run_newest_boto3_script

MiB = 1024 * 1024


# --- reference checksums --------------------------------------------------------------

def _table(poly, width):
    out = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ poly if c & 1 else c >> 1
        out.append(c)
    return out


_CRC64 = _table(0x9A6C9329AC4BC9B5, 64)
_CRC32C = _table(0x82F63B78, 32)


def _crc(table, mask, data):
    c = mask
    for b in data:
        c = table[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ mask


def crc64nvme(data):
    return _crc(_CRC64, (1 << 64) - 1, data)


def crc32c(data):
    return _crc(_CRC32C, 0xFFFFFFFF, data)


def raw_checksum(alg, data):
    if alg == "CRC32":
        return zlib.crc32(data).to_bytes(4, "big")
    if alg == "CRC32C":
        return crc32c(data).to_bytes(4, "big")
    if alg == "CRC64NVME":
        return crc64nvme(data).to_bytes(8, "big")
    return hashlib.new(alg.lower(), data).digest()


def b64(alg, data):
    return base64.b64encode(raw_checksum(alg, data)).decode()


ALGS = ["CRC32", "CRC32C", "CRC64NVME", "SHA1", "SHA256"]


def test_reference_checksums_match_published_check_values():
    assert crc64nvme(b"123456789") == 0xAE8B14860A799888
    assert crc32c(b"123456789") == 0xE3069283


# --- helpers ----------------------------------------------------------------------------

def with_headers(s3, event, headers):
    """Sets `headers` on the next requests of operation `event` (e.g. "PutObject"),
    replacing any botocore set (its headers object appends on assignment)."""
    def add(request, **_):
        for k, v in headers.items():
            del request.headers[k]
            request.headers[k] = v
    s3.meta.events.register(f"before-sign.s3.{event}", add)
    return lambda: s3.meta.events.unregister(f"before-sign.s3.{event}", add)


def put_with_checksum(s3, bucket, key, body, alg):
    if alg in ("CRC32", "SHA1", "SHA256"):
        return s3.put_object(Bucket=bucket, Key=key, Body=body, ChecksumAlgorithm=alg)
    undo = with_headers(s3, "PutObject", {f"x-amz-checksum-{alg.lower()}": b64(alg, body)})
    try:
        return s3.put_object(Bucket=bucket, Key=key, Body=body)
    finally:
        undo()


def headers_of(resp):
    return resp["ResponseMetadata"]["HTTPHeaders"]


def checksum_headers(resp):
    return {k: v for k, v in headers_of(resp).items() if k.startswith("x-amz-checksum-")}


# --- PutObject / GetObject / HeadObject -----------------------------------------------------

@pytest.mark.parametrize("alg", ALGS)
@pytest.mark.parametrize("size", [0, 100, 700 * 1024])
def test_put_stores_checksum_and_full_get_returns_it(s3, bucket, alg, size):
    body = bytes((i * 31 + size) % 256 for i in range(size))
    put = put_with_checksum(s3, bucket, "k", body, alg)
    want = b64(alg, body)
    assert headers_of(put)[f"x-amz-checksum-{alg.lower()}"] == want

    got = s3.get_object(Bucket=bucket, Key="k", ChecksumMode="ENABLED")
    assert got["Body"].read() == body
    assert checksum_headers(got) == {f"x-amz-checksum-{alg.lower()}": want,
                                     "x-amz-checksum-type": "FULL_OBJECT"}
    if alg in ("CRC32", "CRC32C", "SHA1", "SHA256"):
        assert got["Checksum" + alg] == want
    head = s3.head_object(Bucket=bucket, Key="k", ChecksumMode="ENABLED")
    assert checksum_headers(head) == checksum_headers(got)

    # Without checksum mode: nothing.
    plain = s3.get_object(Bucket=bucket, Key="k")
    assert plain["Body"].read() == body
    assert checksum_headers(plain) == {}
    if size:
        # Ranged GET: never a checksum, even for a range covering the whole object.
        for rng in ("bytes=0-0", f"bytes=0-{size - 1}", "bytes=0-"):
            r = s3.get_object(Bucket=bucket, Key="k", Range=rng, ChecksumMode="ENABLED")
            r["Body"].read()
            assert checksum_headers(r) == {}, rng
        hr = s3.head_object(Bucket=bucket, Key="k", Range="bytes=0-", ChecksumMode="ENABLED")
        assert checksum_headers(hr) == {}


@pytest.mark.parametrize("alg", ["CRC32C", "CRC64NVME", "SHA256"])
def test_sdk_algorithm_without_value_is_computed_and_stored(s3, bucket, alg):
    body = b"compute me " * 5000
    undo = with_headers(s3, "PutObject", {"x-amz-sdk-checksum-algorithm": alg})
    try:
        put = s3.put_object(Bucket=bucket, Key="k", Body=body)
    finally:
        undo()
    assert headers_of(put)[f"x-amz-checksum-{alg.lower()}"] == b64(alg, body)
    got = s3.get_object(Bucket=bucket, Key="k", ChecksumMode="ENABLED")
    assert headers_of(got)[f"x-amz-checksum-{alg.lower()}"] == b64(alg, body)


def test_unknown_sdk_algorithm_is_refused(s3, bucket):
    undo = with_headers(s3, "PutObject", {"x-amz-sdk-checksum-algorithm": "MD4"})
    try:
        with pytest.raises(botocore.exceptions.ClientError) as e:
            s3.put_object(Bucket=bucket, Key="k", Body=b"x")
    finally:
        undo()
    assert e.value.response["Error"]["Code"] == "InvalidRequest"


def test_object_without_checksum_returns_none(s3, bucket):
    s3.put_object(Bucket=bucket, Key="k", Body=b"plain")
    got = s3.get_object(Bucket=bucket, Key="k", ChecksumMode="ENABLED")
    assert got["Body"].read() == b"plain"
    assert checksum_headers(got) == {}


def test_overwrite_replaces_checksum(s3, bucket):
    put_with_checksum(s3, bucket, "k", b"one", "SHA256")
    s3.put_object(Bucket=bucket, Key="k", Body=b"two")
    got = s3.get_object(Bucket=bucket, Key="k", ChecksumMode="ENABLED")
    assert checksum_headers(got) == {}


# --- multipart ---------------------------------------------------------------------------

PART1 = bytes(i % 249 for i in range(5 * MiB))
PART2 = b"second part " * 3000


def create(s3, bucket, key, alg, ctype=None):
    headers = {"x-amz-checksum-algorithm": alg}
    if ctype:
        headers["x-amz-checksum-type"] = ctype
    undo = with_headers(s3, "CreateMultipartUpload", headers)
    try:
        up = s3.create_multipart_upload(Bucket=bucket, Key=key)
    finally:
        undo()
    assert headers_of(up)["x-amz-checksum-algorithm"] == alg
    return up["UploadId"]


def upload_parts(s3, bucket, key, upload_id, alg, send_value=True):
    parts = []
    for n, data in ((1, PART1), (2, PART2)):
        undo = with_headers(s3, "UploadPart",
                            {f"x-amz-checksum-{alg.lower()}": b64(alg, data)} if send_value
                            else {})
        try:
            r = s3.upload_part(Bucket=bucket, Key=key, UploadId=upload_id, PartNumber=n,
                               Body=data)
        finally:
            undo()
        value = headers_of(r)[f"x-amz-checksum-{alg.lower()}"]
        assert value == b64(alg, data)
        parts.append({"PartNumber": n, "ETag": r["ETag"], "value": value})
    return parts


@pytest.mark.parametrize("alg", ["CRC32", "CRC32C", "SHA1", "SHA256"])
def test_multipart_composite_checksum(s3, bucket, alg):
    upload_id = create(s3, bucket, "mp", alg)
    parts = upload_parts(s3, bucket, "mp", upload_id, alg)
    listed = s3.list_parts(Bucket=bucket, Key="mp", UploadId=upload_id)
    if alg in ("CRC32", "SHA1", "SHA256", "CRC32C"):
        assert [p.get("Checksum" + alg) for p in listed["Parts"]] == [p["value"] for p in parts]
    want = base64.b64encode(raw_checksum(
        alg, raw_checksum(alg, PART1) + raw_checksum(alg, PART2))).decode() + "-2"
    # The client may name the composite value it expects ("value-N"): it is compared.
    undo = with_headers(s3, "CompleteMultipartUpload", {f"x-amz-checksum-{alg.lower()}": want})
    try:
        done = s3.complete_multipart_upload(
            Bucket=bucket, Key="mp", UploadId=upload_id,
            MultipartUpload={"Parts": [{"PartNumber": p["PartNumber"], "ETag": p["ETag"],
                                        "Checksum" + alg: p["value"]} for p in parts]})
    finally:
        undo()
    assert done["Checksum" + alg] == want
    got = s3.get_object(Bucket=bucket, Key="mp", ChecksumMode="ENABLED")
    assert got["Body"].read() == PART1 + PART2
    assert checksum_headers(got) == {f"x-amz-checksum-{alg.lower()}": want,
                                     "x-amz-checksum-type": "COMPOSITE"}
    r = s3.get_object(Bucket=bucket, Key="mp", Range="bytes=0-", ChecksumMode="ENABLED")
    r["Body"].read()
    assert checksum_headers(r) == {}


@pytest.mark.parametrize("alg,ctype", [("CRC64NVME", None), ("CRC32", "FULL_OBJECT"),
                                       ("CRC32C", "FULL_OBJECT")])
def test_multipart_full_object_crc(s3, bucket, alg, ctype):
    upload_id = create(s3, bucket, "mp", alg, ctype)
    # Parts sent without a value: the upload's algorithm is computed for them.
    parts = upload_parts(s3, bucket, "mp", upload_id, alg, send_value=False)
    done = s3.complete_multipart_upload(
        Bucket=bucket, Key="mp", UploadId=upload_id,
        MultipartUpload={"Parts": [{"PartNumber": p["PartNumber"], "ETag": p["ETag"]}
                                   for p in parts]})
    want = b64(alg, PART1 + PART2)
    if alg != "CRC64NVME":
        assert done["Checksum" + alg] == want
    got = s3.get_object(Bucket=bucket, Key="mp", ChecksumMode="ENABLED")
    assert got["Body"].read() == PART1 + PART2
    assert checksum_headers(got) == {f"x-amz-checksum-{alg.lower()}": want,
                                     "x-amz-checksum-type": "FULL_OBJECT"}


def test_complete_checks_the_whole_objects_claimed_checksum_and_size(s3, bucket):
    """A Complete that names the whole object's checksum or size (x-amz-mp-object-size)
    is refused when the parts make another: nothing is stored, and the upload can still
    be completed (they were accepted unchecked before)."""
    upload_id = create(s3, bucket, "mp", "CRC32", "FULL_OBJECT")
    parts = upload_parts(s3, bucket, "mp", upload_id, "CRC32", send_value=False)
    listed = {"Parts": [{"PartNumber": p["PartNumber"], "ETag": p["ETag"]} for p in parts]}
    whole = PART1 + PART2

    def complete(headers):
        undo = with_headers(s3, "CompleteMultipartUpload", headers)
        try:
            return s3.complete_multipart_upload(Bucket=bucket, Key="mp", UploadId=upload_id,
                                                MultipartUpload=listed)
        finally:
            undo()

    for headers, code in (({"x-amz-checksum-crc32": b64("CRC32", PART1)}, "BadDigest"),
                          ({"x-amz-mp-object-size": str(len(whole) + 1)}, "InvalidRequest")):
        with pytest.raises(botocore.exceptions.ClientError) as e:
            complete(headers)
        assert e.value.response["Error"]["Code"] == code, headers
        with pytest.raises(botocore.exceptions.ClientError):
            s3.head_object(Bucket=bucket, Key="mp")
    # A type other than the upload's is refused; the upload's in any case is not (Create
    # takes it in any case too).
    with pytest.raises(botocore.exceptions.ClientError) as e:
        complete({"x-amz-checksum-type": "COMPOSITE"})
    assert e.value.response["Error"]["Code"] == "InvalidRequest"
    done = complete({"x-amz-checksum-crc32": b64("CRC32", whole),
                     "x-amz-mp-object-size": str(len(whole)),
                     "x-amz-checksum-type": "full_object"})
    assert done["ChecksumCRC32"] == b64("CRC32", whole)
    assert s3.get_object(Bucket=bucket, Key="mp")["Body"].read() == whole


def test_complete_with_wrong_part_checksum_is_invalid_part(s3, bucket):
    upload_id = create(s3, bucket, "mp", "CRC32")
    parts = upload_parts(s3, bucket, "mp", upload_id, "CRC32")
    for bad in ({"ChecksumCRC32": "AAAAAA=="}, {"ChecksumSHA256": b64("SHA256", PART1)}):
        with pytest.raises(botocore.exceptions.ClientError) as e:
            s3.complete_multipart_upload(
                Bucket=bucket, Key="mp", UploadId=upload_id,
                MultipartUpload={"Parts": [dict({"PartNumber": 1, "ETag": parts[0]["ETag"]},
                                                **bad),
                                           {"PartNumber": 2, "ETag": parts[1]["ETag"]}]})
        assert e.value.response["Error"]["Code"] == "InvalidPart"
    s3.abort_multipart_upload(Bucket=bucket, Key="mp", UploadId=upload_id)


def test_part_with_another_algorithm_is_refused(s3, bucket):
    upload_id = create(s3, bucket, "mp", "CRC32")
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.upload_part(Bucket=bucket, Key="mp", UploadId=upload_id, PartNumber=1, Body=b"x",
                       ChecksumAlgorithm="SHA256")
    assert e.value.response["Error"]["Code"] == "InvalidRequest"
    # Naming another algorithm without a value (the server would compute it) is refused too.
    undo = with_headers(s3, "UploadPart", {"x-amz-sdk-checksum-algorithm": "SHA256"})
    try:
        with pytest.raises(botocore.exceptions.ClientError) as e:
            s3.upload_part(Bucket=bucket, Key="mp", UploadId=upload_id, PartNumber=1, Body=b"x")
    finally:
        undo()
    assert e.value.response["Error"]["Code"] == "InvalidRequest"
    assert "expected checksum Type: CRC32" in e.value.response["Error"]["Message"]
    s3.abort_multipart_upload(Bucket=bucket, Key="mp", UploadId=upload_id)


@pytest.mark.parametrize("alg,ctype", [("CRC64NVME", "COMPOSITE"), ("SHA256", "FULL_OBJECT"),
                                       ("MD5", None)])
def test_create_with_unsupported_algorithm_or_type_is_refused(s3, bucket, alg, ctype):
    headers = {"x-amz-checksum-algorithm": alg}
    if ctype:
        headers["x-amz-checksum-type"] = ctype
    undo = with_headers(s3, "CreateMultipartUpload", headers)
    try:
        with pytest.raises(botocore.exceptions.ClientError) as e:
            s3.create_multipart_upload(Bucket=bucket, Key="mp")
    finally:
        undo()
    assert e.value.response["Error"]["Code"] == "InvalidRequest"


def test_multipart_without_algorithm_has_no_object_checksum(s3, bucket):
    up = s3.create_multipart_upload(Bucket=bucket, Key="mp")
    r = s3.upload_part(Bucket=bucket, Key="mp", UploadId=up["UploadId"], PartNumber=1,
                       Body=b"only", ChecksumAlgorithm="CRC32")
    s3.complete_multipart_upload(Bucket=bucket, Key="mp", UploadId=up["UploadId"],
                                 MultipartUpload={"Parts": [{"PartNumber": 1,
                                                             "ETag": r["ETag"]}]})
    got = s3.get_object(Bucket=bucket, Key="mp", ChecksumMode="ENABLED")
    assert got["Body"].read() == b"only"
    assert checksum_headers(got) == {}


# --- newest boto3 -------------------------------------------------------------------------

def test_newest_boto3_accepts_our_checksums(server):
    run_newest_boto3_script(server, "boto3_checksums.py")


# --- small bodies: bucket settings, tagging, DeleteObjects -------------------------------

@pytest.mark.parametrize("header,value,code", [
    ("Content-MD5", base64.b64encode(hashlib.md5(b"another body").digest()).decode(),
     "BadDigest"),
    ("Content-MD5", "not base64!", "InvalidDigest"),
    ("x-amz-checksum-crc32", "AAAAAA==", "BadDigest"),
    ("x-amz-checksum-sha256", "AAAAAA==", "InvalidRequest"),
])
def test_setting_whose_body_fails_its_digest_is_refused(s3, bucket, header, value, code):
    """A bucket setting's body is checked against the Content-MD5 or x-amz-checksum-* the
    client sent (boto3 adds Content-MD5 itself; the test replaces or adds one), and a body
    that fails is not stored."""
    tagging = {"TagSet": [{"Key": "team", "Value": "data"}]}
    undo = with_headers(s3, "PutBucketTagging", {header: value})
    try:
        with pytest.raises(botocore.exceptions.ClientError) as e:
            s3.put_bucket_tagging(Bucket=bucket, Tagging=tagging)
    finally:
        undo()
    assert e.value.response["Error"]["Code"] == code
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.get_bucket_tagging(Bucket=bucket)
    assert e.value.response["Error"]["Code"] == "NoSuchTagSet"
    s3.put_bucket_tagging(Bucket=bucket, Tagging=tagging)  # boto3's own digest: stored
    assert s3.get_bucket_tagging(Bucket=bucket)["TagSet"] == tagging["TagSet"]


# --- copies --------------------------------------------------------------------------------

def copy(s3, bucket, src, dst, algorithm=None):
    headers = {"x-amz-checksum-algorithm": algorithm} if algorithm else {}
    undo = with_headers(s3, "CopyObject", headers)
    try:
        return s3.copy_object(Bucket=bucket, Key=dst, CopySource={"Bucket": bucket, "Key": src})
    finally:
        undo()


def stored_checksum(s3, bucket, key):
    got = s3.get_object(Bucket=bucket, Key=key, ChecksumMode="ENABLED")
    return got["Body"].read(), checksum_headers(got)


@pytest.mark.parametrize("size", [100, 3 * MiB])  # an inline copy, and a striped one
def test_a_copy_keeps_the_sources_algorithm_with_its_value_computed_again(s3, bucket, size):
    body = os.urandom(size)
    put_with_checksum(s3, bucket, "src", body, "CRC32C")
    copy(s3, bucket, "src", "dst")
    assert stored_checksum(s3, bucket, "dst") == (body, {
        "x-amz-checksum-crc32c": b64("CRC32C", body), "x-amz-checksum-type": "FULL_OBJECT"})
    # x-amz-checksum-algorithm names another one: the copy gets that one instead.
    out = copy(s3, bucket, "src", "dst2", "SHA256")
    assert out["CopyObjectResult"]["ChecksumSHA256"] == b64("SHA256", body)
    assert stored_checksum(s3, bucket, "dst2") == (body, {
        "x-amz-checksum-sha256": b64("SHA256", body), "x-amz-checksum-type": "FULL_OBJECT"})


@pytest.mark.parametrize("size", [0, 3 * MiB])
def test_a_copy_of_a_source_without_a_checksum_gets_one_only_if_asked(s3, bucket, size):
    body = os.urandom(size)
    s3.put_object(Bucket=bucket, Key="plain", Body=body)
    copy(s3, bucket, "plain", "dst")
    assert stored_checksum(s3, bucket, "dst") == (body, {})
    out = copy(s3, bucket, "plain", "dst2", "CRC32")
    assert out["CopyObjectResult"]["ChecksumCRC32"] == b64("CRC32", body)
    assert stored_checksum(s3, bucket, "dst2") == (body, {
        "x-amz-checksum-crc32": b64("CRC32", body), "x-amz-checksum-type": "FULL_OBJECT"})
    with pytest.raises(botocore.exceptions.ClientError) as e:
        copy(s3, bucket, "plain", "dst3", "MD6")
    assert e.value.response["Error"]["Code"] == "InvalidRequest"
    assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400


def test_a_copy_of_a_composite_multipart_object_gets_a_full_object_checksum(s3, bucket):
    upload_id = create(s3, bucket, "mp", "SHA1")
    parts = upload_parts(s3, bucket, "mp", upload_id, "SHA1")
    s3.complete_multipart_upload(
        Bucket=bucket, Key="mp", UploadId=upload_id,
        MultipartUpload={"Parts": [{"PartNumber": p["PartNumber"], "ETag": p["ETag"],
                                    "ChecksumSHA1": p["value"]} for p in parts]})
    copy(s3, bucket, "mp", "copied")
    assert stored_checksum(s3, bucket, "copied") == (PART1 + PART2, {
        "x-amz-checksum-sha1": b64("SHA1", PART1 + PART2), "x-amz-checksum-type": "FULL_OBJECT"})


def test_copied_parts_carry_the_uploads_algorithm_into_its_checksum(s3, bucket):
    """UploadPartCopy in an upload created with an algorithm: each copied part gets that
    algorithm's checksum of its range (CopyPartResult), and Complete combines them."""
    source = os.urandom(6 * MiB + 1000)
    s3.put_object(Bucket=bucket, Key="source", Body=source)
    upload_id = create(s3, bucket, "mp", "CRC32")
    ranges = [(1, 0, 5 * MiB - 1), (2, 5 * MiB, len(source) - 1)]
    parts = []
    for number, first, last in ranges:
        r = s3.upload_part_copy(Bucket=bucket, Key="mp", UploadId=upload_id,
                                PartNumber=number, CopySource={"Bucket": bucket, "Key": "source"},
                                CopySourceRange=f"bytes={first}-{last}")
        value = r["CopyPartResult"]["ChecksumCRC32"]
        assert value == b64("CRC32", source[first:last + 1])
        parts.append({"PartNumber": number, "ETag": r["CopyPartResult"]["ETag"],
                      "ChecksumCRC32": value})
    listed = s3.list_parts(Bucket=bucket, Key="mp", UploadId=upload_id)["Parts"]
    assert [p.get("ChecksumCRC32") for p in listed] == [p["ChecksumCRC32"] for p in parts]
    done = s3.complete_multipart_upload(Bucket=bucket, Key="mp", UploadId=upload_id,
                                        MultipartUpload={"Parts": parts})
    want = base64.b64encode(raw_checksum("CRC32", b"".join(
        raw_checksum("CRC32", source[first:last + 1]) for _, first, last in ranges))).decode()
    assert done["ChecksumCRC32"] == want + "-2"
    assert stored_checksum(s3, bucket, "mp") == (source, {
        "x-amz-checksum-crc32": want + "-2", "x-amz-checksum-type": "COMPOSITE"})
