"""Run by test_checksums.py under the newest boto3 (pyenv): default request checksums
(when_supported), ChecksumMode on GET (the SDK validates what comes back), multipart
uploads with composite and full-object CRC32. Prints "boto3 <version>: <n> passed"."""
import base64
import io
import sys
import uuid
import zlib

import boto3
from botocore.config import Config

endpoint, access, secret = sys.argv[1:4]
s3 = boto3.client("s3", endpoint_url=endpoint, aws_access_key_id=access,
                  aws_secret_access_key=secret, region_name="us-east-1",
                  config=Config(s3={"addressing_style": "path"},
                                retries={"max_attempts": 1}))
passed = 0


def check(cond, what):
    global passed
    if not cond:
        raise AssertionError(what)
    passed += 1


def b64crc32(data):
    return base64.b64encode(zlib.crc32(data).to_bytes(4, "big")).decode()


bucket = "ck-" + uuid.uuid4().hex[:12]
s3.create_bucket(Bucket=bucket)
MiB = 1024 * 1024

# Default checksums on PUT (CRC32 under when_supported), validated on GET.
for size in (0, 1, 1000, 300 * 1024, 2 * MiB + 5):
    body = bytes((i * 7 + size) % 256 for i in range(size))
    key = f"default-{size}"
    put = s3.put_object(Bucket=bucket, Key=key, Body=body)
    check(put.get("ChecksumCRC32") == b64crc32(body), f"put echo {size}: {put}")
    got = s3.get_object(Bucket=bucket, Key=key, ChecksumMode="ENABLED")
    check(got["Body"].read() == body, f"body {size}")
    check(got.get("ChecksumCRC32") == b64crc32(body), f"get checksum {size}")
    check(got.get("ChecksumType", "FULL_OBJECT") == "FULL_OBJECT", "type")
    head = s3.head_object(Bucket=bucket, Key=key, ChecksumMode="ENABLED")
    check(head.get("ChecksumCRC32") == b64crc32(body), f"head checksum {size}")
    if size > 10:
        ranged = s3.get_object(Bucket=bucket, Key=key, Range="bytes=1-5", ChecksumMode="ENABLED")
        check(ranged["Body"].read() == body[1:6], "ranged body")
        check("ChecksumCRC32" not in ranged, "ranged GET carries no checksum")

for alg in ("SHA1", "SHA256", "CRC32"):
    body = b"explicit " + alg.encode() * 1000
    s3.put_object(Bucket=bucket, Key="alg-" + alg, Body=body, ChecksumAlgorithm=alg)
    got = s3.get_object(Bucket=bucket, Key="alg-" + alg, ChecksumMode="ENABLED")
    check(got["Body"].read() == body, alg)
    check(("Checksum" + alg) in got, f"{alg} returned: {list(got)}")

# Multipart, composite and full-object CRC32.
part1 = bytes(i % 251 for i in range(5 * MiB))
part2 = b"tail" * 1000
for ctype in ("COMPOSITE", "FULL_OBJECT"):
    key = "mp-" + ctype
    args = dict(Bucket=bucket, Key=key, ChecksumAlgorithm="CRC32")
    if ctype == "FULL_OBJECT":
        args["ChecksumType"] = "FULL_OBJECT"
    up = s3.create_multipart_upload(**args)
    parts = []
    for n, data in ((1, part1), (2, part2)):
        r = s3.upload_part(Bucket=bucket, Key=key, UploadId=up["UploadId"], PartNumber=n,
                           Body=data, ChecksumAlgorithm="CRC32")
        check(r.get("ChecksumCRC32") == b64crc32(data), "part checksum echoed")
        parts.append({"PartNumber": n, "ETag": r["ETag"], "ChecksumCRC32": r["ChecksumCRC32"]})
    listed = s3.list_parts(Bucket=bucket, Key=key, UploadId=up["UploadId"])
    check([p.get("ChecksumCRC32") for p in listed["Parts"]] ==
          [p["ChecksumCRC32"] for p in parts], "ListParts checksums")
    done = s3.complete_multipart_upload(Bucket=bucket, Key=key, UploadId=up["UploadId"],
                                        MultipartUpload={"Parts": parts})
    if ctype == "COMPOSITE":
        cat = b"".join(zlib.crc32(d).to_bytes(4, "big") for d in (part1, part2))
        want = b64crc32(cat) + "-2"
    else:
        want = b64crc32(part1 + part2)
    check(done.get("ChecksumCRC32") == want, f"complete {ctype}: {done}")
    got = s3.get_object(Bucket=bucket, Key=key, ChecksumMode="ENABLED")
    check(got["Body"].read() == part1 + part2, "multipart body")
    check(got.get("ChecksumCRC32") == want, f"get {ctype}")
    check(got.get("ChecksumType") == ctype, f"type {ctype}: {got.get('ChecksumType')}")

# s3transfer's managed multipart upload and download.
blob = bytes(i % 253 for i in range(12 * MiB + 3))
s3.upload_fileobj(io.BytesIO(blob), bucket, "managed",
                  Config=boto3.s3.transfer.TransferConfig(multipart_threshold=5 * MiB,
                                                          multipart_chunksize=5 * MiB))
out = io.BytesIO()
s3.download_fileobj(bucket, "managed", out)
check(out.getvalue() == blob, "managed round trip")
got = s3.get_object(Bucket=bucket, Key="managed")  # default: checksum mode on
check(got["Body"].read() == blob, "managed get")

for obj in s3.list_objects_v2(Bucket=bucket).get("Contents", []):
    s3.delete_object(Bucket=bucket, Key=obj["Key"])
s3.delete_bucket(Bucket=bucket)
print(f"boto3 {boto3.__version__}: {passed} passed")
