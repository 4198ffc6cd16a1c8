"""TLS on the gateway (--tls-cert/--tls-key): boto3 and aws-cli over HTTPS against the real
binary, with a self-signed certificate made by the openssl command line tool."""
import hashlib
import io
import json
import os
import socket
import ssl
import subprocess
import uuid
from concurrent.futures import ThreadPoolExecutor

import boto3
import botocore
import pytest
from botocore.config import Config
from boto3.s3.transfer import TransferConfig

from conftest import DEBIAN_AWS, GRANARY, Server


@pytest.fixture(scope="module")
def cert(tmp_path_factory):
    d = tmp_path_factory.mktemp("tls")
    key, crt = str(d / "key.pem"), str(d / "cert.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                    "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", key, "-out", crt], check=True, capture_output=True)
    return crt, key


@pytest.fixture(scope="module")
def tls_server(granary_bin, tmp_path_factory, cert):
    srv = Server(str(tmp_path_factory.mktemp("tls-srv") / "granary-data"),
                 extra_args=["--tls-cert", cert[0], "--tls-key", cert[1]]).start()
    yield srv
    srv.stop()


def client(srv, crt):
    return boto3.client("s3", endpoint_url=srv.endpoint, region_name="us-east-1",
                        aws_access_key_id=srv.access_key, aws_secret_access_key=srv.secret_key,
                        verify=crt, config=Config(s3={"addressing_style": "path"},
                                                  retries={"max_attempts": 1}))


def test_boto3_over_https_round_trips_small_large_and_multipart(tls_server, cert):
    assert tls_server.endpoint.startswith("https://127.0.0.1:")
    s3 = client(tls_server, cert[0])
    name = "tls-" + uuid.uuid4().hex[:12]
    s3.create_bucket(Bucket=name)
    small = b"over TLS"
    big = os.urandom(3 * 1024 * 1024 + 17)
    s3.put_object(Bucket=name, Key="small", Body=small)
    s3.put_object(Bucket=name, Key="big", Body=big)
    assert s3.get_object(Bucket=name, Key="small")["Body"].read() == small
    assert s3.get_object(Bucket=name, Key="big")["Body"].read() == big
    assert s3.get_object(Bucket=name, Key="big", Range="bytes=1048570-1048585")[
        "Body"].read() == big[1048570:1048586]
    huge = os.urandom(20 * 1024 * 1024 + 5)
    s3.upload_fileobj(io.BytesIO(huge), name, "multipart",
                      Config=TransferConfig(multipart_threshold=8 << 20,
                                            multipart_chunksize=8 << 20))
    got = s3.get_object(Bucket=name, Key="multipart")["Body"].read()
    assert hashlib.sha256(got).digest() == hashlib.sha256(huge).digest()
    # A large non-streamed answer (a listing of ~200 KB): Beast's ssl_stream wrapper used to
    # lose the tail of such writes.
    keys = [f"list/{i:04d}-" + "k" * 200 for i in range(700)]
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda k: s3.put_object(Bucket=name, Key=k, Body=b"."), keys))
    page = s3.list_objects_v2(Bucket=name, Prefix="list/")
    assert [o["Key"] for o in page["Contents"]] == keys


def test_aws_cli_over_https(tls_server, cert, tmp_path):
    src = tmp_path / "f.bin"
    src.write_bytes(os.urandom(100_000))
    env = tls_server.aws_env()
    base = [DEBIAN_AWS, "--endpoint-url", tls_server.endpoint, "--ca-bundle", cert[0]]
    name = "tlscli-" + uuid.uuid4().hex[:8]
    for args in (["s3", "mb", f"s3://{name}"], ["s3", "cp", str(src), f"s3://{name}/f.bin"],
                 ["s3", "cp", f"s3://{name}/f.bin", str(tmp_path / "back.bin")]):
        res = subprocess.run(base + args, env=env, capture_output=True, text=True, timeout=120)
        assert res.returncode == 0, res.stderr
    assert (tmp_path / "back.bin").read_bytes() == src.read_bytes()
    # Without the CA the certificate is refused: TLS is really on.
    res = subprocess.run([DEBIAN_AWS, "--endpoint-url", tls_server.endpoint, "s3", "ls"],
                         env=env, capture_output=True, text=True, timeout=120)
    assert res.returncode != 0 and "certificate" in res.stderr.lower()


def test_plain_http_and_garbage_on_the_tls_port_do_not_hurt_it(tls_server, cert):
    host, port = tls_server.endpoint.removeprefix("https://").rsplit(":", 1)
    for junk in (b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", os.urandom(4096), b""):
        with socket.create_connection((host, int(port)), timeout=10) as s:
            if junk:
                s.sendall(junk)
            s.shutdown(socket.SHUT_WR)
            try:
                while s.recv(65536):
                    pass
            except ConnectionResetError:
                pass
    ctx = ssl.create_default_context(cafile=cert[0])
    with socket.create_connection((host, int(port)), timeout=10) as raw:
        with ctx.wrap_socket(raw, server_hostname="127.0.0.1") as s:
            s.sendall(b"GET /_granary/health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            answer = b""
            while chunk := s.recv(65536):
                answer += chunk
    assert answer.startswith(b"HTTP/1.1 200") and answer.endswith(b"ok\n")


def test_missing_or_mismatched_key_is_a_clear_start_up_error(granary_bin, tmp_path, cert):
    for args, words in ((["--tls-cert", cert[0]], "both"),
                        (["--tls-cert", cert[0], "--tls-key", str(tmp_path / "nope.pem")],
                         "key"),
                        (["--tls-cert", cert[1], "--tls-key", cert[1]], "certificate")):
        res = subprocess.run([GRANARY, "serve", "--data", str(tmp_path / "d"), "--listen",
                              "127.0.0.1:0", *args], capture_output=True, text=True, timeout=60)
        assert res.returncode != 0
        assert words in (res.stderr + res.stdout).lower(), res.stderr


def test_bucket_policy_sees_tls_as_secure_transport(tls_server, cert, server):
    # The same policy on an HTTPS and a plain HTTP server: anyone may read, over TLS only.
    for srv, secure in ((tls_server, True), (server, False)):
        verify = cert[0] if secure else None
        owner = client(srv, cert[0]) if secure else srv.client()
        anon = boto3.client("s3", endpoint_url=srv.endpoint, region_name="us-east-1",
                            verify=verify,
                            config=Config(signature_version=botocore.UNSIGNED,
                                          s3={"addressing_style": "path"},
                                          retries={"max_attempts": 1}))
        name = "secure-" + uuid.uuid4().hex[:8]
        owner.create_bucket(Bucket=name)
        owner.put_object(Bucket=name, Key="k", Body=b"tls only")
        owner.put_bucket_policy(Bucket=name, Policy=json.dumps({"Statement": [
            {"Effect": "Allow", "Principal": "*", "Action": "s3:GetObject",
             "Resource": f"arn:aws:s3:::{name}/*",
             "Condition": {"Bool": {"aws:SecureTransport": "true"}}}]}))
        if secure:
            assert anon.get_object(Bucket=name, Key="k")["Body"].read() == b"tls only"
        else:
            with pytest.raises(botocore.exceptions.ClientError) as e:
                anon.get_object(Bucket=name, Key="k")
            assert e.value.response["Error"]["Code"] == "AccessDenied"
