"""Clients other than Debian's boto3: hand-signed aws-chunked streaming uploads over plain
http.client, the newest boto3 (pyenv), aws-cli v1 (pyenv) and s3cmd (Debian)."""
import hashlib
import json
import os
import re
import subprocess
import urllib.error
import urllib.request
import uuid

import botocore.exceptions
import pytest

import sigv4_chunked as sc
from conftest import run_newest_boto3_script

MiB = 1024 * 1024
KiB = 1024
PYENV_AWS = "/root/.pyenv/versions/3.11.7/bin/aws"
S3CMD = "/usr/bin/s3cmd"


def error_code(body):
    m = re.search(rb"<Code>([^<]*)</Code>", body)
    return m.group(1).decode() if m else None


def assert_absent(s3, bucket, key):
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.head_object(Bucket=bucket, Key=key)
    assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 404


# --- aws-chunked, hand-signed ------------------------------------------------------------

def test_helper_matches_aws_published_chunked_example():
    """AWS's worked example: 'Example: PUT Object' under 'Transferring Payload in Multiple
    Chunks (Chunked Upload)'."""
    access, secret = "AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
    amz_date, region = "20130524T000000Z", "us-east-1"
    data = b"a" * 66560
    assert sc.signed_encoded_length(len(data), 64 * KiB) == 66824
    headers = {
        "Host": "s3.amazonaws.com",
        "x-amz-date": amz_date,
        "x-amz-storage-class": "REDUCED_REDUNDANCY",
        "x-amz-content-sha256": sc.STREAMING_SIGNED,
        "Content-Encoding": "aws-chunked",
        "x-amz-decoded-content-length": "66560",
        "Content-Length": "66824",
    }
    seed, auth = sc.seed_signature("PUT", "/examplebucket/chunkObject.txt", {}, headers,
                                   sc.STREAMING_SIGNED, access, secret, amz_date, region)
    assert seed == "4f232c4386841ef735655705268965c44a0e4690baa4adea153f7db9fa80a0a9"
    assert auth == (
        "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, "
        "SignedHeaders=content-encoding;content-length;host;x-amz-content-sha256;x-amz-date;"
        "x-amz-decoded-content-length;x-amz-storage-class, "
        "Signature=4f232c4386841ef735655705268965c44a0e4690baa4adea153f7db9fa80a0a9")
    key = sc.signing_key(secret, amz_date[:8], region)
    frames = list(sc.signed_chunks(data, 64 * KiB, key, amz_date, sc.scope(amz_date, region),
                                   seed))
    assert [sig for _, sig in frames] == [
        "ad80c730a21e5b8d04586a2213dd63b9a0e99e0e2307b0ade35a65485a288648",
        "0055627c9e194cb4542bae2aa5492e3c1575bbb81b612b7d234b86a503ef5497",
        "b6c6ea8a5354eaf15b3cb7646744f4275b71ea724fed81ceb9323e279d449df9",
    ]
    assert frames[0][0].startswith(
        b"10000;chunk-signature=ad80c730a21e5b8d04586a2213dd63b9a0e99e0e2307b0ade35a65485a288648"
        b"\r\naaaa")
    assert frames[2][0] == (b"0;chunk-signature=b6c6ea8a5354eaf15b3cb7646744f4275b71ea724fed81"
                            b"ceb9323e279d449df9\r\n\r\n")
    assert sum(len(f) for f, _ in frames) == 66824


def test_helper_crc32_trailer_framing():
    # zlib.crc32(b"hello world") == 0x0d4a1185
    assert sc.crc32_b64(b"hello world") == "DUoRhQ=="
    body = sc.unsigned_trailer_body(b"x" * 5, 2, [("x-amz-checksum-crc32", "AAAAAA==")])
    assert body == (b"2\r\nxx\r\n2\r\nxx\r\n1\r\nx\r\n0\r\n"
                    b"x-amz-checksum-crc32:AAAAAA==\r\n\r\n")


@pytest.mark.parametrize("size", [0, 100 * KiB, 9 * MiB + 7])
def test_signed_streaming_put_round_trip(server, s3, bucket, size):
    data = os.urandom(size)
    key = f"chunked-{size}"
    r = sc.put_signed_streaming(server.endpoint, bucket, key, data, server.access_key,
                                server.secret_key, chunk_size=64 * KiB)
    assert r.status == 200, r
    assert r.headers.get("ETag") == '"%s"' % hashlib.md5(data).hexdigest(), r
    got = s3.get_object(Bucket=bucket, Key=key)
    assert got["ContentLength"] == size
    assert got["Body"].read() == data
    # aws-chunked is transfer framing only: it must not be stored as the object's encoding.
    assert "aws-chunked" not in got.get("ContentEncoding", "")


@pytest.mark.parametrize("size,tamper_index", [(100 * KiB, 0), (9 * MiB + 7, 100),
                                               (100 * KiB, 2)],
                         ids=["first-chunk", "middle-chunk", "final-chunk"])
def test_signed_streaming_put_with_tampered_chunk_is_refused(server, s3, bucket, size,
                                                             tamper_index):
    data = os.urandom(size)
    key = f"tampered-{size}-{tamper_index}"
    r = sc.put_signed_streaming(server.endpoint, bucket, key, data, server.access_key,
                                server.secret_key, chunk_size=64 * KiB,
                                tamper_index=tamper_index)
    assert r.status == 403, r
    assert error_code(r.body) == "SignatureDoesNotMatch", r
    assert_absent(s3, bucket, key)


def test_signed_streaming_put_with_altered_data_is_refused(server, s3, bucket):
    """Correct signatures over data that differs in flight: flip a byte of the body frame."""
    data = os.urandom(200 * KiB)
    key = "altered"
    amz_date = sc.amz_now()
    path = f"/{bucket}/{key}"
    headers = {
        "Host": server.endpoint.split("://", 1)[1],
        "Content-Encoding": "aws-chunked",
        "Content-Length": str(sc.signed_encoded_length(len(data), 64 * KiB)),
        "x-amz-content-sha256": sc.STREAMING_SIGNED,
        "x-amz-date": amz_date,
        "x-amz-decoded-content-length": str(len(data)),
    }
    seed, auth = sc.seed_signature("PUT", path, {}, headers, sc.STREAMING_SIGNED,
                                   server.access_key, server.secret_key, amz_date, "us-east-1")
    headers["Authorization"] = auth
    key_bytes = sc.signing_key(server.secret_key, amz_date[:8], "us-east-1")
    frames = [f for f, _ in sc.signed_chunks(data, 64 * KiB, key_bytes, amz_date,
                                             sc.scope(amz_date, "us-east-1"), seed)]
    second = bytearray(frames[1])
    second[200] ^= 0xFF  # inside the data of the second chunk
    frames[1] = bytes(second)
    r = sc._send(server.endpoint, "PUT", path, headers, frames)
    assert r.status == 403, r
    assert error_code(r.body) == "SignatureDoesNotMatch", r
    assert_absent(s3, bucket, key)


@pytest.mark.parametrize("size", [0, 100 * KiB, 9 * MiB + 7])
def test_unsigned_trailer_put_round_trip(server, s3, bucket, size):
    data = os.urandom(size)
    key = f"trailer-{size}"
    r = sc.put_unsigned_trailer(server.endpoint, bucket, key, data, server.access_key,
                                server.secret_key, chunk_size=64 * KiB)
    assert r.status == 200, r
    assert r.headers.get("ETag") == '"%s"' % hashlib.md5(data).hexdigest(), r
    got = s3.get_object(Bucket=bucket, Key=key)
    assert got["ContentLength"] == size
    assert got["Body"].read() == data
    assert "aws-chunked" not in got.get("ContentEncoding", "")


def test_unsigned_trailer_with_wrong_crc32_is_refused(server, s3, bucket):
    """With STREAMING-UNSIGNED-PAYLOAD-TRAILER the trailer checksum is the only integrity
    check on the body (the newest boto3 uses this mode by default over https)."""
    data = os.urandom(100 * KiB)
    wrong = sc.crc32_b64(data + b"!")
    r = sc.put_unsigned_trailer(server.endpoint, bucket, "bad-crc", data, server.access_key,
                                server.secret_key, chunk_size=64 * KiB, crc32=wrong)
    assert r.status == 400, r
    assert error_code(r.body) == "BadDigest", r
    assert_absent(s3, bucket, "bad-crc")


def test_put_with_wrong_crc32_header_is_refused(s3, bucket):
    """The newest boto3 sends x-amz-checksum-crc32 on every PutObject by default."""
    body = os.urandom(10 * KiB)
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.put_object(Bucket=bucket, Key="bad-crc-header", Body=body,
                      ChecksumCRC32=sc.crc32_b64(body + b"!"))
    assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400
    assert e.value.response["Error"]["Code"] == "BadDigest"
    assert_absent(s3, bucket, "bad-crc-header")


# --- newest boto3 (pyenv) ------------------------------------------------------------------

def test_newest_boto3_round_trip(server):
    _, last = run_newest_boto3_script(server, "boto3_roundtrip.py")
    assert int(last.split(": ")[1].split()[0]) > 50, last


# --- aws-cli v1 (pyenv) --------------------------------------------------------------------

@pytest.fixture(scope="module")
def aws_v1():
    if not os.access(PYENV_AWS, os.X_OK):
        pytest.skip(f"aws-cli v1 ({PYENV_AWS}) is not installed on this machine")
    res = subprocess.run([PYENV_AWS, "--version"], capture_output=True, text=True, timeout=60)
    version = (res.stdout + res.stderr).strip()
    if res.returncode != 0 or not version.startswith("aws-cli/1."):
        pytest.skip(f"{PYENV_AWS} is not a working aws-cli v1: {version[-300:]}")
    return PYENV_AWS


def test_aws_cli_v1_cp_ls_rm(server, bucket, aws_v1, tmp_path):
    files = {"small.txt": 11, "empty.bin": 0, "dir/mid.bin": 300 * KiB + 3,
             "dir/seven MiB.bin": 7 * MiB}
    for rel, size in files.items():
        src = tmp_path / "up" / rel
        src.parent.mkdir(parents=True, exist_ok=True)
        src.write_bytes(os.urandom(size))
        server.aws("s3", "cp", str(src), f"s3://{bucket}/v1/{rel}", aws_bin=aws_v1)
    for rel in files:
        dst = tmp_path / "down" / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        server.aws("s3", "cp", f"s3://{bucket}/v1/{rel}", str(dst), aws_bin=aws_v1)
        assert dst.read_bytes() == (tmp_path / "up" / rel).read_bytes(), rel
    top = server.aws("s3", "ls", f"s3://{bucket}/v1/", aws_bin=aws_v1).stdout
    assert "PRE dir/" in top and "small.txt" in top and "empty.bin" in top, top
    rec = server.aws("s3", "ls", "--recursive", f"s3://{bucket}/v1/", aws_bin=aws_v1).stdout
    listed = {line.split(None, 3)[3]: int(line.split(None, 3)[2])
              for line in rec.splitlines() if line.strip()}
    assert listed == {f"v1/{rel}": size for rel, size in files.items()}, rec
    server.aws("s3", "rm", f"s3://{bucket}/v1/small.txt", aws_bin=aws_v1)
    server.aws("s3", "rm", "--recursive", f"s3://{bucket}/v1/dir/", aws_bin=aws_v1)
    rec = server.aws("s3", "ls", "--recursive", f"s3://{bucket}/v1/", aws_bin=aws_v1).stdout
    assert [line.split(None, 3)[3] for line in rec.splitlines() if line.strip()] == \
        ["v1/empty.bin"], rec


def test_aws_cli_v1_s3api_put_get_head(server, bucket, aws_v1, tmp_path):
    src = tmp_path / "src"
    src.write_bytes(os.urandom(2 * MiB + 1))
    server.aws("s3api", "put-object", "--bucket", bucket, "--key", "api/obj", "--body", str(src),
               aws_bin=aws_v1)
    head = server.aws("s3api", "head-object", "--bucket", bucket, "--key", "api/obj",
                      aws_bin=aws_v1).stdout
    assert '"ContentLength": %d' % (2 * MiB + 1) in head, head
    dst = tmp_path / "dst"
    server.aws("s3api", "get-object", "--bucket", bucket, "--key", "api/obj", str(dst),
               aws_bin=aws_v1)
    assert dst.read_bytes() == src.read_bytes()


# --- s3cmd (Debian) ------------------------------------------------------------------------

@pytest.fixture(scope="module")
def s3cmd(server, tmp_path_factory):
    assert os.access(S3CMD, os.X_OK), \
        f"{S3CMD} missing: scripts/install-deps.sh installs s3cmd; run it"
    hostport = server.endpoint.split("://", 1)[1]
    cfg = tmp_path_factory.mktemp("s3cmd") / "s3cfg"
    cfg.write_text(
        "[default]\n"
        f"access_key = {server.access_key}\n"
        f"secret_key = {server.secret_key}\n"
        f"host_base = {hostport}\n"
        f"host_bucket = {hostport}\n"
        "bucket_location = us-east-1\n"
        "use_https = False\n"
        "signature_v2 = False\n"
        "check_ssl_certificate = False\n"
        "guess_mime_type = True\n"
        "progress_meter = False\n")

    def run(*args, check=True):
        cmd = [S3CMD, "-c", str(cfg), "--no-progress"] + list(args)
        env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
        if check and res.returncode != 0:
            raise AssertionError(f"{cmd} failed ({res.returncode}):\n{res.stdout}\n{res.stderr}")
        return res
    return run


def test_s3cmd_info_reads_the_bucket_settings(s3cmd, s3):
    # s3cmd info reads location, request payment, lifecycle, policy, CORS and the ACL.
    name = "s3cmd-info-" + uuid.uuid4().hex[:8]
    s3cmd("mb", f"s3://{name}")
    out = s3cmd("info", f"s3://{name}").stdout
    fields = {k.strip(): v.strip() for k, v in
              (line.split(":", 1) for line in out.splitlines()[1:] if ":" in line)}
    assert fields.get("Location") == "us-east-1", out
    assert fields.get("Payer") == "BucketOwner", out
    assert fields.get("Expiration Rule") == "none", out
    assert fields.get("Policy") == "none", out
    assert fields.get("CORS") == "none", out
    s3cmd("rb", f"s3://{name}")


def test_s3cmd_setcors_info_delcors(s3cmd, s3, tmp_path):
    name = "s3cmd-cors-" + uuid.uuid4().hex[:8]
    s3cmd("mb", f"s3://{name}")
    cfg = tmp_path / "cors.xml"
    cfg.write_text(
        "<CORSConfiguration><CORSRule><AllowedOrigin>https://app.example.com</AllowedOrigin>"
        "<AllowedMethod>GET</AllowedMethod><AllowedHeader>*</AllowedHeader>"
        "<MaxAgeSeconds>120</MaxAgeSeconds></CORSRule></CORSConfiguration>")
    s3cmd("setcors", str(cfg), f"s3://{name}")
    assert s3.get_bucket_cors(Bucket=name)["CORSRules"] == [{
        "AllowedOrigins": ["https://app.example.com"], "AllowedMethods": ["GET"],
        "AllowedHeaders": ["*"], "MaxAgeSeconds": 120}]
    out = s3cmd("info", f"s3://{name}").stdout
    assert "<AllowedOrigin>https://app.example.com</AllowedOrigin>" in out, out
    s3cmd("delcors", f"s3://{name}")
    fields = {k.strip(): v.strip() for k, v in
              (line.split(":", 1) for line in
               s3cmd("info", f"s3://{name}").stdout.splitlines()[1:] if ":" in line)}
    assert fields.get("CORS") == "none", fields
    s3cmd("rb", f"s3://{name}")


def test_s3cmd_setpolicy_info_delpolicy(s3cmd, s3, server, tmp_path):
    name = "s3cmd-policy-" + uuid.uuid4().hex[:8]
    s3cmd("mb", f"s3://{name}")
    s3.put_object(Bucket=name, Key="open", Body=b"for anyone")
    policy = {"Version": "2012-10-17", "Statement": [{
        "Sid": "PublicRead", "Effect": "Allow", "Principal": "*", "Action": "s3:GetObject",
        "Resource": f"arn:aws:s3:::{name}/*"}]}
    path = tmp_path / "policy.json"
    path.write_text(json.dumps(policy))
    s3cmd("setpolicy", str(path), f"s3://{name}")
    assert json.loads(s3.get_bucket_policy(Bucket=name)["Policy"]) == policy
    out = s3cmd("info", f"s3://{name}").stdout
    assert '"Sid": "PublicRead"' in out, out
    with urllib.request.urlopen(f"{server.endpoint}/{name}/open", timeout=30) as r:
        assert r.read() == b"for anyone"  # no credentials at all
    s3cmd("delpolicy", f"s3://{name}")
    fields = {k.strip(): v.strip() for k, v in
              (line.split(":", 1) for line in
               s3cmd("info", f"s3://{name}").stdout.splitlines()[1:] if ":" in line)}
    assert fields.get("Policy") == "none", fields
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(f"{server.endpoint}/{name}/open", timeout=30)
    assert e.value.code == 403
    s3.delete_object(Bucket=name, Key="open")
    s3cmd("rb", f"s3://{name}")


def test_s3cmd_mb_put_get_ls_rm_rb(s3cmd, s3, tmp_path):
    name = "s3cmd-" + uuid.uuid4().hex[:12]
    s3cmd("mb", f"s3://{name}")
    assert name in s3cmd("ls").stdout
    files = {"a.txt": 10, "empty": 0, "dir/b.bin": 1 * MiB + 5, "dir/seven.bin": 7 * MiB,
             "dir/with space.dat": 4097}
    for rel, size in files.items():
        src = tmp_path / "up" / rel
        src.parent.mkdir(parents=True, exist_ok=True)
        src.write_bytes(os.urandom(size))
        s3cmd("put", "--disable-multipart", str(src), f"s3://{name}/{rel}")
    for rel in files:
        dst = tmp_path / "down" / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        s3cmd("get", "--force", f"s3://{name}/{rel}", str(dst))
        assert dst.read_bytes() == (tmp_path / "up" / rel).read_bytes(), rel
        # s3cmd must have stored what it sent, readable by another client too.
        assert s3.get_object(Bucket=name, Key=rel)["Body"].read() == dst.read_bytes(), rel
    top = s3cmd("ls", f"s3://{name}/").stdout
    assert f"DIR  s3://{name}/dir/" in top, top
    assert f"s3://{name}/a.txt" in top and f"s3://{name}/empty" in top, top
    rec = s3cmd("ls", "--recursive", f"s3://{name}/").stdout
    listed = {}
    for line in rec.splitlines():
        if " s3://" in line:
            left, url = line.split(" s3://", 1)
            listed[url[len(name) + 1:]] = int(left.split()[2])
    assert listed == files, rec
    # One key per command: s3cmd sends a single DeleteObject for each.
    for rel in ("a.txt", "dir/b.bin", "dir/seven.bin", "dir/with space.dat"):
        s3cmd("rm", f"s3://{name}/{rel}")
    rec = s3cmd("ls", "--recursive", f"s3://{name}/").stdout
    assert [line.split(" s3://", 1)[1] for line in rec.splitlines() if " s3://" in line] == \
        [f"{name}/empty"], rec
    s3cmd("rm", f"s3://{name}/empty")
    s3cmd("rb", f"s3://{name}")
    assert name not in s3cmd("ls").stdout


def test_s3cmd_recursive_rm(s3cmd, s3, bucket, tmp_path):
    """`s3cmd rm --recursive` deletes in batches with DeleteObjects (POST /bucket/?delete)."""
    src = tmp_path / "f"
    src.write_bytes(b"0123456789")
    for rel in ("rec/a", "rec/sub/b", "rec/sub/c", "keep"):
        s3cmd("put", "--disable-multipart", str(src), f"s3://{bucket}/{rel}")
    s3cmd("rm", "--recursive", "--force", f"s3://{bucket}/rec/")
    left = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket).get("Contents", [])]
    assert left == ["keep"]


def test_s3cmd_info_reports_md5_and_size(s3cmd, bucket, tmp_path):
    src = tmp_path / "f"
    body = os.urandom(123457)
    src.write_bytes(body)
    s3cmd("put", "--disable-multipart", str(src), f"s3://{bucket}/info/f")
    info = s3cmd("info", f"s3://{bucket}/info/f").stdout
    assert "123457" in info, info
    assert hashlib.md5(body).hexdigest() in info, info
