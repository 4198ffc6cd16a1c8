"""Access log lines and request ids; the metrics endpoint."""
import json
import os
import urllib.request

from conftest import Server


def test_access_log_has_one_json_line_per_request(granary_bin, tmp_data, tmp_path):
    log_path = str(tmp_path / "access.log")
    srv = Server(tmp_data, extra_args=["--access-log", log_path]).start()
    try:
        s3 = srv.client()
        s3.create_bucket(Bucket="logged")
        put = s3.put_object(Bucket="logged", Key="dir/k\u00e9y", Body=os.urandom(300 * 1024))
        got = s3.get_object(Bucket="logged", Key="dir/k\u00e9y")
        got["Body"].read()
        request_id = got["ResponseMetadata"]["HTTPHeaders"]["x-amz-request-id"]
        try:
            s3.get_object(Bucket="logged", Key="missing")
        except s3.exceptions.NoSuchKey:
            pass
    finally:
        srv.stop()
    lines = [json.loads(line) for line in open(log_path)]
    ops = [(x["op"], x["status"]) for x in lines]
    assert ("CreateBucket", 200) in ops
    assert ("PutObject", 200) in ops
    assert ("GetObject", 404) in ops
    get = next(x for x in lines if x["request_id"] == request_id)
    assert get["op"] == "GetObject" and get["status"] == 200
    assert get["bucket"] == "logged" and get["key"] == "dir/k\u00e9y"
    assert get["bytes_out"] == 300 * 1024
    putline = next(x for x in lines if x["op"] == "PutObject")
    assert putline["bytes_in"] >= 300 * 1024
    assert putline["user"] == srv.access_key
    assert put["ETag"]


def test_metrics_count_requests_by_operation(server, s3, bucket):
    s3.put_object(Bucket=bucket, Key="m", Body=b"1")
    text = urllib.request.urlopen(server.endpoint + "/_granary/metrics", timeout=10).read().decode()
    assert 'granary_s3_requests_total{op="PutObject",status="200"}' in text
    assert "granary_s3_requests_in_flight" in text
    assert "granary_s3_request_duration_seconds_bucket" in text


def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_promtool_accepts_the_metrics_endpoint(server, s3, bucket):
    import subprocess
    s3.put_object(Bucket=bucket, Key="p", Body=b"1")
    text = urllib.request.urlopen(server.endpoint + "/_granary/metrics", timeout=10).read()
    r = subprocess.run(["/usr/bin/promtool", "check", "metrics"], input=text,
                       capture_output=True, timeout=60)
    # promtool exits 0 for valid exposition text (lint hints, if any, come on stdout).
    assert r.returncode == 0, r.stdout.decode() + r.stderr.decode()


def test_real_prometheus_scrapes_granary_and_sees_known_traffic(server, s3, bucket, tmp_path):
    import subprocess
    import time
    import urllib.parse
    port = free_port()
    host_port = server.endpoint.split("//", 1)[1]
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 1s\n"
        "scrape_configs:\n"
        "  - job_name: granary\n"
        "    metrics_path: /_granary/metrics\n"
        f"    static_configs:\n      - targets: ['{host_port}']\n")
    prom = subprocess.Popen(
        ["/usr/bin/prometheus", f"--config.file={config}",
         f"--storage.tsdb.path={tmp_path / 'tsdb'}", f"--web.listen-address=127.0.0.1:{port}"],
        stdout=subprocess.DEVNULL, stderr=open(tmp_path / "prometheus.log", "wb"))
    try:
        for i in range(7):
            s3.put_object(Bucket=bucket, Key=f"prom-{i}", Body=b"x")
        query = 'sum(granary_s3_requests_total{op="HeadBucket",status="200"})'
        for _ in range(3):
            s3.head_bucket(Bucket=bucket)
        deadline = time.time() + 60
        value = None
        while time.time() < deadline:
            try:
                url = (f"http://127.0.0.1:{port}/api/v1/query?"
                       + urllib.parse.urlencode({"query": query}))
                data = json.loads(urllib.request.urlopen(url, timeout=5).read())
                result = data["data"]["result"]
                if result:
                    value = float(result[0]["value"][1])
                    if value >= 3:
                        break
            except OSError:
                pass
            time.sleep(0.5)
        # All HEADs finished before polling, so the first scrape that sees them sees them
        # all: Prometheus must agree exactly with what the server itself reports.
        text = urllib.request.urlopen(server.endpoint + "/_granary/metrics", timeout=10).read()
        direct = sum(float(line.rsplit(" ", 1)[1]) for line in text.decode().splitlines()
                     if line.startswith('granary_s3_requests_total{op="HeadBucket",status="200"}'))
        assert value is not None, (tmp_path / "prometheus.log").read_text()[-2000:]
        assert value == direct
    finally:
        prom.terminate()
        prom.wait(30)
