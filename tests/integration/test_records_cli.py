"""`granary records ...` (src/cli, docs/record-index.md "CLI"): the real binary against a
real `granary serve`, plus a recording fake server for what the gateway cannot show: that
the CLI's SigV4 signature equals botocore's for the same request (the CLI signs with the
gateway's own SigV4 code, so only an independent signer can catch a shared mistake), that
PUT streams UNSIGNED-PAYLOAD, and that a cut batch stream fails."""
import hashlib
import http.server
import io
import json
import os
import subprocess
import tarfile
import threading

import pytest
from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

import conftest

TENDATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "testdata",
                       "webdataset", "tendata.tar")


def run_cli(server, *args, endpoint=None, access=None, secret=None):
    """Runs `granary records ARGS` with the server's credentials in the environment."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("AWS_") and k != "GRANARY_ENDPOINT"}
    env["AWS_ACCESS_KEY_ID"] = access or server.access_key
    env["AWS_SECRET_ACCESS_KEY"] = secret or server.secret_key
    env["GRANARY_ENDPOINT"] = endpoint or server.endpoint
    return subprocess.run([conftest.GRANARY, "records", *args], env=env, capture_output=True,
                          timeout=120)


def ok(res):
    assert res.returncode == 0, res.stderr.decode(errors="replace")
    return res.stdout


def header_lines(out):
    """'name: value' lines -> dict."""
    return dict(line.split(": ", 1) for line in out.decode().splitlines())


def json_lines(out):
    return [json.loads(line) for line in out.decode().splitlines()]


@pytest.fixture(scope="module")
def tendata():
    """(bytes, {member name: (data offset, bytes)}) of tests/testdata/webdataset/tendata.tar."""
    with open(TENDATA, "rb") as f:
        data = f.read()
    members = {}
    with tarfile.open(fileobj=io.BytesIO(data)) as tf:
        for m in tf.getmembers():
            if m.isfile():
                members[m.name] = (m.offset_data, tf.extractfile(m).read())
    assert len(members) == 100
    return data, members


@pytest.fixture
def indexed(server, bucket):
    """A bucket holding tendata.tar, put (and indexed) by the CLI."""
    out = header_lines(ok(run_cli(server, "put", bucket, "shards/tendata.tar", TENDATA)))
    assert out["x-granary-record-index"] == "indexed"
    assert out["x-granary-record-format"] == "tar"
    assert out["x-granary-record-count"] == "100"
    return bucket


def test_put_indexes_tendata_and_get_returns_each_members_bytes(server, indexed, tendata,
                                                                tmp_path):
    _, members = tendata
    for name in ("000000.ten", "000042.ten", "000099.ten"):
        assert ok(run_cli(server, "get", indexed, name)) == members[name][1], name
    out = tmp_path / "rec"
    assert ok(run_cli(server, "get", indexed, "000007.ten", "-o", str(out))) == b""
    assert out.read_bytes() == members["000007.ten"][1]
    # The container is stored unchanged.
    assert ok(run_cli(server, "get", indexed, "000001.ten", "--container",
                      "shards/tendata.tar")) == members["000001.ten"][1]


def test_get_of_a_missing_record_is_no_such_key_and_leaves_no_output_file(server, indexed,
                                                                           tmp_path):
    out = tmp_path / "rec"
    res = run_cli(server, "get", indexed, "no-such-member", "-o", str(out))
    assert res.returncode == 1
    assert res.stderr.decode().strip() == \
        "error: 404 NoSuchKey: The specified record does not exist."
    assert not out.exists()


def test_head_prints_the_records_location(server, indexed, tendata):
    _, members = tendata
    h = header_lines(ok(run_cli(server, "head", indexed, "000003.ten")))
    offset, content = members["000003.ten"]
    assert h["x-granary-record-container"] == "shards/tendata.tar"
    assert int(h["x-granary-record-offset"]) == offset
    assert int(h["x-granary-record-length"]) == len(content)
    assert len(h["x-granary-record-crc32c"]) == 8
    assert int(h["content-length"]) == len(content)


def test_list_follows_prefix_key_and_max(server, indexed, tendata):
    _, members = tendata
    rows = json_lines(ok(run_cli(server, "list", indexed, "--prefix", "00001")))
    assert [r["key"] for r in rows] == [f"0000{i}.ten" for i in range(10, 20)]
    for r in rows:
        assert (r["offset"], r["length"]) == (members[r["key"]][0], len(members[r["key"]][1]))
    assert len(json_lines(ok(run_cli(server, "list", indexed)))) == 100
    assert len(json_lines(ok(run_cli(server, "list", indexed, "--max", "7")))) == 7
    assert [r["key"] for r in json_lines(ok(run_cli(server, "list", indexed, "--key",
                                                    "000050.ten")))] == ["000050.ten"]


def test_rows_lists_all_100_rows_in_offset_order(server, indexed, tendata):
    _, members = tendata
    rows = json_lines(ok(run_cli(server, "rows", indexed, "shards/tendata.tar")))
    assert len(rows) == 100
    assert [r["offset"] for r in rows] == sorted(off for off, _ in members.values())
    assert len(json_lines(ok(run_cli(server, "rows", indexed, "shards/tendata.tar",
                                     "--max", "3")))) == 3


def test_batch_get_with_a_missing_key_exits_1_reports_404_and_writes_the_others(
        server, indexed, tendata, tmp_path):
    _, members = tendata
    keys = ["000005.ten", "missing.ten", "000006.ten"]
    keys_file = tmp_path / "keys.txt"
    keys_file.write_text("\n".join(keys) + "\n")
    out_dir = tmp_path / "out"
    res = run_cli(server, "batch-get", indexed, str(keys_file), "--out-dir", str(out_dir))
    assert res.returncode == 1
    assert "1 of 3 records failed" in res.stderr.decode()
    lines = json_lines(res.stdout)
    assert [(h["index"], h["key"], h["status"]) for h in lines[:3]] == \
        [(0, "000005.ten", 200), (1, "missing.ten", 404), (2, "000006.ten", 200)]
    assert lines[1]["code"] == "NoSuchKey"
    assert lines[3] == {"end": True, "records": 3, "errors": 1}
    assert sorted(os.listdir(out_dir)) == ["0", "2"]
    assert (out_dir / "0").read_bytes() == members["000005.ten"][1]
    assert (out_dir / "2").read_bytes() == members["000006.ten"][1]

    keys_file.write_text("000005.ten\r\n000006.ten\r\n")  # CRLF lines too
    res = run_cli(server, "batch-get", indexed, str(keys_file))
    assert res.returncode == 0, res.stderr
    assert [h.get("status") for h in json_lines(res.stdout)] == [200, 200, None]

    # A key that is not UTF-8 goes as key_b64 and comes back so.
    keys_file.write_bytes(b"000005.ten\ncaf\xe9.ten\n")
    res = run_cli(server, "batch-get", indexed, str(keys_file))
    lines = json_lines(res.stdout)
    assert [h.get("status") for h in lines] == [200, 404, None]
    assert lines[1]["key_b64"] == "Y2Fm6S50ZW4="


def test_batch_get_of_more_keys_than_one_request_takes_sends_several(server, indexed, tendata,
                                                                     tmp_path):
    # The whole list went in one request: past 10,000 keys the gateway refused it (400).
    _, members = tendata
    names = sorted(members)
    keys = [names[i % len(names)] for i in range(10_050)] + ["missing.ten"]
    keys_file = tmp_path / "keys.txt"
    keys_file.write_text("\n".join(keys) + "\n")
    out_dir = tmp_path / "out"
    res = run_cli(server, "batch-get", indexed, str(keys_file), "--out-dir", str(out_dir))
    assert res.returncode == 1, res.stderr
    assert "1 of 10051 records failed" in res.stderr.decode()
    lines = json_lines(res.stdout)
    assert [(h["index"], h["key"]) for h in lines[:-1]] == list(enumerate(keys))
    assert lines[-1] == {"end": True, "records": 10_051, "errors": 1}
    assert lines[-2]["status"] == 404
    assert len(os.listdir(out_dir)) == 10_050
    for i in (0, 9_999, 10_000, 10_049):  # either side of the split
        assert (out_dir / str(i)).read_bytes() == members[keys[i]][1]


def test_insert_adds_rows_to_a_plain_object(server, s3, bucket, tmp_path):
    body = b"hello world, a plain object with no index"
    s3.put_object(Bucket=bucket, Key="plain.bin", Body=body)
    rows = tmp_path / "rows.jsonl"
    rows.write_text('{"key": "doc/1", "offset": 6, "length": 5}\n'
                    '{"key": "doc/2", "offset": 0, "length": 5}\n')
    answer = json_lines(ok(run_cli(server, "insert", bucket, "plain.bin", str(rows))))
    assert len(answer) == 1
    assert answer[0]["inserted"] == 2 and answer[0]["rows"] == 2
    assert ok(run_cli(server, "get", bucket, "doc/1")) == b"world"
    assert ok(run_cli(server, "get", bucket, "doc/2")) == b"hello"
    rows.write_text('{"key": "doc/3", "offset": 40, "length": 100}\n')
    res = run_cli(server, "insert", bucket, "plain.bin", str(rows))
    assert res.returncode == 1
    assert res.stderr.decode().startswith("error: 400 InvalidArgument: ")


def test_index_sets_and_shows_the_bucket_setting(server, bucket):
    assert json_lines(ok(run_cli(server, "index", bucket)))[0]["index"] == "off"
    got = json_lines(ok(run_cli(server, "index", bucket, "warc", "--index-key", "record-id")))
    assert got == [{"bucket": bucket, "index": "warc", "index_key": "record-id"}]
    assert json_lines(ok(run_cli(server, "index", bucket)))[0]["index"] == "warc"
    ok(run_cli(server, "index", bucket, "off"))
    assert json_lines(ok(run_cli(server, "index", bucket)))[0]["index"] == "off"


def test_stats_prints_the_indexing_outcome_and_size(server, indexed, tendata):
    data, _ = tendata
    h = header_lines(ok(run_cli(server, "stats", indexed, "shards/tendata.tar")))
    assert int(h.pop("x-granary-record-index-bytes")) > 100 * 50
    assert h == {"content-length": str(len(data)), "x-granary-record-index": "indexed",
                 "x-granary-record-format": "tar", "x-granary-record-count": "100"}


def test_put_of_a_non_container_reports_why_it_is_not_indexed(server, bucket, tmp_path):
    path = tmp_path / "notes.txt"
    path.write_bytes(b"just text\n" * 1000)
    h = header_lines(ok(run_cli(server, "put", bucket, "notes.txt", str(path))))
    assert h["x-granary-record-index"] == "not-indexable"
    assert "x-granary-record-index-message" in h


def test_a_wrong_secret_exits_1_with_signature_does_not_match(server, indexed):
    res = run_cli(server, "get", indexed, "000000.ten", "--secret-key", "not-the-secret")
    assert res.returncode == 1
    assert res.stdout == b""
    assert "error: 403 SignatureDoesNotMatch: " in res.stderr.decode()


def test_usage_errors_exit_2(server, bucket):
    assert run_cli(server, "get", bucket).returncode == 2
    assert run_cli(server, "frobnicate").returncode == 2
    assert run_cli(server, "list", bucket, "--no-such-option").returncode == 2
    assert run_cli(server, "list", bucket, "--prefix", "a", "--key", "b").returncode == 2
    # An empty key would make these bucket requests (HeadBucket; CreateBucket with the file
    # as its body).
    stats = run_cli(server, "stats", bucket, "")
    assert stats.returncode == 2 and b"an argument is empty" in stats.stderr
    assert run_cli(server, "put", bucket, "", "/dev/null").returncode == 2


# ---- against a recording fake server ----------------------------------------------------

class FakeS3(http.server.ThreadingHTTPServer):
    """Records each request (method, raw target, headers, body) and answers with
    `self.answer` = (status, headers, body)."""

    def __init__(self):
        self.requests = []
        self.answer = (200, {"Content-Type": "application/json"}, b"{}")

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def handle_any(h):
                n = int(h.headers.get("Content-Length") or 0)
                digest, left = hashlib.sha256(), n
                while left:
                    chunk = h.rfile.read(min(left, 1 << 20))
                    digest.update(chunk)
                    left -= len(chunk)
                self.requests.append((h.command, h.path, dict(h.headers.items()), n,
                                      digest.hexdigest()))
                status, headers, body = self.answer
                h.send_response(status)
                for k, v in headers.items():
                    h.send_header(k, v)
                if "Content-Length" not in headers:  # one given: a body cut short
                    h.send_header("Content-Length", str(len(body)))
                h.send_header("Connection", "close")
                h.end_headers()
                if h.command != "HEAD":
                    h.wfile.write(body)

            do_GET = do_PUT = do_POST = do_HEAD = handle_any

            def log_message(h, *args):
                pass

        super().__init__(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self.server_address[1]}"


@pytest.fixture
def fake():
    srv = FakeS3()
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield srv
    srv.shutdown()
    srv.server_close()


def botocore_signature(endpoint, method, target, headers, secret):
    """The signature botocore computes for a request with exactly the headers the CLI
    signed and its x-amz-date."""
    auth_header = headers["Authorization"]
    signed = auth_header.split("SignedHeaders=")[1].split(",")[0].split(";")
    lower = {k.lower(): v for k, v in headers.items()}
    req = AWSRequest(method=method, url=endpoint + target,
                     headers={name: lower[name] for name in signed})
    req.context["timestamp"] = lower["x-amz-date"]
    signer = S3SigV4Auth(Credentials("AKID", secret), "s3", "us-east-1")
    canonical = signer.canonical_request(req)
    return signer.signature(signer.string_to_sign(req, canonical), req)


def test_cli_refuses_what_it_cannot_send(fake, tmp_path):
    """A page that repeats its cursor ends the listing with an error (not the same request
    forever); an argument that is not UTF-8 is a usage error (a JSON body holds text only);
    an input file that cannot be read, here a directory, is an error, not an empty body."""
    fake.answer = (200, {"Content-Type": "application/json"},
                   b'{"records": [], "is_truncated": true, "next_continuation_token": "t"}')
    kw = dict(endpoint=fake.endpoint, access="AKID", secret="S")
    res = run_cli(None, "list", "bkt", "--prefix", "p", **kw)
    assert res.returncode == 1 and b"repeated its next_continuation_token" in res.stderr
    assert len(fake.requests) == 2
    fake.requests.clear()
    res = run_cli(None, "index", "bkt", b"warc\xff", **kw)
    assert res.returncode == 2 and b"must be UTF-8" in res.stderr, res.stderr
    res = run_cli(None, "insert", "bkt", "k", str(tmp_path), **kw)
    assert res.returncode == 1 and b"cannot read" in res.stderr, res.stderr
    assert fake.requests == []


@pytest.mark.parametrize("args", [
    ("get", "bkt", "http://example.org/a b?c=d&e=ü~+%/", "--container", "dir/x y+ü.warc.gz",
     "--type", "*", "--raw"),
    ("rows", "bkt", "dir/a b+(c)$ü.tar"),
    ("insert", "bkt", "dir/k=v&ü.bin", TENDATA, "--format", "raw"),
    ("index", "bkt", "warc.gz", "--index-key", "record-id"),
])
def test_cli_signature_equals_botocores(fake, args):
    secret = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
    fake.answer = (200, {"Content-Type": "application/json"},
                   b'{"records": [], "is_truncated": false}')
    res = run_cli(None, *args, endpoint=fake.endpoint, access="AKID", secret=secret)
    assert res.returncode == 0, res.stderr
    (method, target, headers, n, body_sha), = fake.requests
    assert headers["x-amz-content-sha256"] == body_sha  # in-memory bodies are hashed
    sig = headers["Authorization"].rsplit("Signature=", 1)[1]
    assert sig == botocore_signature(fake.endpoint, method, target, headers, secret), target
    # botocore signs the target as the CLI sent it, so the agreement above cannot catch an
    # encoding mistake: check the encoding on its own, against AWS's UriEncode (unreserved
    # characters as they are, everything else %XX in upper case; '/' kept in the path only).
    from urllib.parse import quote, unquote
    path, _, query = target.partition("?")
    assert quote(unquote(path), safe="/~") == path, target
    for part in filter(None, query.split("&")):
        for piece in part.split("=", 1):
            assert quote(unquote(piece), safe="~") == piece, (target, piece)
    assert headers["Authorization"].startswith(
        "AWS4-HMAC-SHA256 Credential=AKID/" + headers["x-amz-date"][:8] + "/us-east-1/s3/")


def test_put_streams_the_file_unsigned_with_the_index_headers(fake, tmp_path):
    path = tmp_path / "shard.tar"
    path.write_bytes(os.urandom(3 << 20) + b"tail")
    fake.answer = (200, {"x-granary-record-index": "malformed",
                         "x-granary-record-index-message": "bad tar header at 0"}, b"")
    res = run_cli(None, "put", "bkt", "shards/s 1.tar", str(path), "--index", "tar",
                  "--index-key", "uri", endpoint=fake.endpoint, access="AKID", secret="s")
    assert res.returncode == 0, res.stderr
    assert header_lines(res.stdout) == {"x-granary-record-index": "malformed",
                                        "x-granary-record-index-message": "bad tar header at 0"}
    (method, target, headers, n, body_sha), = fake.requests
    assert (method, target) == ("PUT", "/bkt/shards/s%201.tar")
    assert headers["x-amz-content-sha256"] == "UNSIGNED-PAYLOAD"
    assert headers["x-granary-index"] == "tar" and headers["x-granary-index-key"] == "uri"
    assert n == path.stat().st_size
    assert body_sha == hashlib.sha256(path.read_bytes()).hexdigest()
    assert botocore_signature(fake.endpoint, method, target, headers, "s") == \
        headers["Authorization"].rsplit("Signature=", 1)[1]


def test_get_cut_short_leaves_the_file_that_was_there(fake, tmp_path):
    # The record was written over FILE as it came, and a failed transfer then removed
    # FILE: the copy from an earlier run was lost.
    out = tmp_path / "rec"
    out.write_bytes(b"the earlier copy")
    # Cut after 3 MiB of 4: the first bytes have gone to the output.
    fake.answer = (200, {"Content-Type": "application/octet-stream",
                         "Content-Length": str(4 << 20)}, b"x" * (3 << 20))
    res = run_cli(None, "get", "bkt", "k", "-o", str(out), endpoint=fake.endpoint,
                  access="AKID", secret="s")
    assert res.returncode == 1
    assert out.read_bytes() == b"the earlier copy"
    assert os.listdir(tmp_path) == ["rec"]  # no temporary file left
    # A whole one replaces it.
    fake.answer = (200, {"Content-Type": "application/octet-stream"}, b"the new copy")
    ok(run_cli(None, "get", "bkt", "k", "-o", str(out), endpoint=fake.endpoint,
               access="AKID", secret="s"))
    assert out.read_bytes() == b"the new copy"
    assert os.listdir(tmp_path) == ["rec"]
    # A link (as /dev/stdout is) is written through, not replaced by a file.
    link = tmp_path / "link"
    link.symlink_to(out)
    fake.answer = (200, {"Content-Type": "application/octet-stream"}, b"through the link")
    ok(run_cli(None, "get", "bkt", "k", "-o", str(link), endpoint=fake.endpoint,
               access="AKID", secret="s"))
    assert link.is_symlink()
    assert out.read_bytes() == b"through the link"


def test_batch_get_of_a_cut_stream_exits_1(fake, tmp_path):
    keys = tmp_path / "keys.txt"
    keys.write_text("a\nb\n")
    fake.answer = (200, {"Content-Type": "application/x-granary-records"},
                   b'{"index":0,"key":"a","status":200,"size":3}\nabc')
    res = run_cli(None, "batch-get", "bkt", str(keys), "--out-dir", str(tmp_path / "o"),
                  endpoint=fake.endpoint, access="AKID", secret="s")
    assert res.returncode == 1
    assert "ended without its end line" in res.stderr.decode()
    assert (tmp_path / "o" / "0").read_bytes() == b"abc"
    (method, target, headers, n, body_sha), = fake.requests
    assert (method, target) == ("POST", "/bkt?records-batch")

    # Cut inside a record: the partial record is not left behind.
    fake.answer = (200, {"Content-Type": "application/x-granary-records"},
                   b'{"index":0,"key":"a","status":200,"size":3}\nabc'
                   b'{"index":1,"key":"b","status":200,"size":10}\nxy')
    res = run_cli(None, "batch-get", "bkt", str(keys), "--out-dir", str(tmp_path / "p"),
                  endpoint=fake.endpoint, access="AKID", secret="s")
    assert res.returncode == 1
    assert sorted(os.listdir(tmp_path / "p")) == ["0"]


def test_an_error_without_xml_reports_the_status(fake):
    fake.answer = (404, {}, b"")
    res = run_cli(None, "stats", "bkt", "k", endpoint=fake.endpoint, access="AKID", secret="s")
    assert res.returncode == 1
    assert res.stderr.decode().strip() == "error: 404 Not Found"
