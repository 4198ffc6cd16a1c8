"""Access log lines and request ids; the metrics endpoint."""
import json
import os
import re
import subprocess
import time
import urllib.request

import requests

from conftest import Server, free_port, metric_value


def test_a_stalled_access_log_holds_up_no_request(granary_bin, tmp_data, tmp_path):
    # The log is a FIFO whose reader never reads: once the pipe's buffer (64 KiB, a few
    # hundred lines) is full, a write to it blocks. Requests must go on regardless (the
    # lines past the log's queue are dropped and counted), and the server still stops.
    fifo = str(tmp_path / "access.fifo")
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # held open, never read
    srv = Server(tmp_data, extra_args=["--access-log", fifo]).start()
    try:
        s3 = srv.client()
        s3.create_bucket(Bucket="stalled-log")
        start = time.time()
        session = requests.Session()
        for _ in range(2000):  # ~300 KB of lines: well past the pipe's buffer
            r = session.get(srv.endpoint + "/_granary/health", timeout=10)
            assert r.status_code == 200
        s3.put_object(Bucket="stalled-log", Key="k", Body=b"still served")
        assert s3.get_object(Bucket="stalled-log", Key="k")["Body"].read() == b"still served"
        assert time.time() - start < 120
    finally:
        os.close(reader)  # the blocked write fails (EPIPE), and the server can stop
        srv.stop()

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
        # botocore reads the host's id from x-amz-id-2, and from <HostId> of an error.
        host_id = got["ResponseMetadata"]["HostId"]
        assert re.fullmatch("[0-9a-f]{64}", host_id), host_id
        try:
            s3.get_object(Bucket="logged", Key="missing")
        except s3.exceptions.NoSuchKey as e:
            assert e.response["ResponseMetadata"]["HostId"] == host_id
        listing = s3.list_objects_v2(Bucket="logged")
        list_id = listing["ResponseMetadata"]["HTTPHeaders"]["x-amz-request-id"]
        list_length = int(listing["ResponseMetadata"]["HTTPHeaders"]["content-length"])
        head = s3.head_object(Bucket="logged", Key="dir/k\u00e9y")
        head_id = head["ResponseMetadata"]["HTTPHeaders"]["x-amz-request-id"]
        form = s3.generate_presigned_post("logged", "posted/${filename}")
        requests.post(form["url"], data=form["fields"],
                      files={"file": ("a.txt", b"posted")}).raise_for_status()
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
    # Answers not streamed (XML, errors) count their bodies too; a HEAD sends none.
    listed = next(x for x in lines if x["request_id"] == list_id)
    assert listed["op"] == "ListObjectsV2" and listed["bytes_out"] == list_length > 0
    assert next(x for x in lines if x["op"] == "GetObject" and x["status"] == 404)["bytes_out"] > 0
    assert next(x for x in lines if x["request_id"] == head_id)["bytes_out"] == 0
    posted = next(x for x in lines if x["op"] == "PostObject")
    assert posted["status"] == 204 and posted["key"] == "posted/a.txt"
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


def test_event_loop_lag_is_probed_on_every_loop(server):
    def count():
        text = urllib.request.urlopen(server.endpoint + "/_granary/metrics",
                                      timeout=10).read().decode()
        line = next(x for x in text.splitlines()
                    if x.startswith("granary_event_loop_lag_seconds_count"))
        return float(line.split()[-1])
    first = count()
    time.sleep(0.5)
    # Each loop probes every 50 ms: half a second adds ~10 a loop (at least one loop).
    assert count() - first >= 5


def test_promtool_accepts_the_metrics_endpoint(server, s3, bucket):
    s3.put_object(Bucket=bucket, Key="p", Body=b"1")
    text = urllib.request.urlopen(server.endpoint + "/_granary/metrics", timeout=10).read()
    r = subprocess.run(["/usr/bin/promtool", "check", "metrics"], input=text,
                       capture_output=True, timeout=60)
    # promtool exits 0 for valid exposition text without lint problems (a counter without
    # the _total suffix, a gauge with it: exit 3, Debian 12's promtool), and prints
    # nothing then; the second check holds should a promtool only warn.
    assert r.returncode == 0, r.stdout.decode() + r.stderr.decode()
    assert r.stdout.decode().strip() == "", r.stdout.decode()


REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def start_prometheus(server, tmp_path):
    """A real Prometheus (Debian package) on loopback with the shipped docker/prometheus.yml,
    pointed at `server` and scraping every second. Returns (process, port)."""
    port = free_port()
    host_port = server.endpoint.split("//", 1)[1]
    shipped = open(os.path.join(REPO, "docker", "prometheus.yml")).read()
    assert "'127.0.0.1:9000'" in shipped and "scrape_interval: 15s" in shipped
    config = tmp_path / "prometheus.yml"
    config.write_text(shipped.replace("'127.0.0.1:9000'", f"'{host_port}'")
                      .replace("scrape_interval: 15s", "scrape_interval: 1s"))
    from conftest import _PDEATHSIG  # killed with pytest, should it be
    prom = subprocess.Popen(
        _PDEATHSIG + ["/usr/bin/prometheus", f"--config.file={config}",
         f"--storage.tsdb.path={tmp_path / 'tsdb'}", f"--web.listen-address=127.0.0.1:{port}"],
        stdout=subprocess.DEVNULL, stderr=open(tmp_path / "prometheus.log", "wb"))
    return prom, port


def stop_prometheus(prom):
    prom.terminate()
    try:
        prom.wait(30)
    except subprocess.TimeoutExpired:
        prom.kill()  # not left running after the test
        prom.wait()
        raise


def prom_query(port, query):
    import urllib.parse
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": query})
    return json.loads(urllib.request.urlopen(url, timeout=5).read())


def test_grafana_dashboard_queries_are_valid_promql_over_real_metrics(server, s3, bucket,
                                                                      tmp_path):
    """Every query of docker/grafana/granary.json is evaluated by a real Prometheus scraping
    a real granary: valid PromQL, over metric names the server exports; the traffic panels
    return data after known traffic."""
    import re
    import time
    dash = json.load(open(os.path.join(REPO, "docker", "grafana", "granary.json")))
    assert dash["uid"] and dash["title"] and dash["schemaVersion"] >= 30
    exprs = [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]
    assert len(exprs) >= 15
    # One indexed upload, so the record-index families have samples too.
    import sys
    sys.path.insert(0, os.path.join(REPO, "clients", "python"))
    from granary_records import RecordClient
    RecordClient(server.endpoint, server.access_key, server.secret_key).put_container(
        bucket, "dash.tar",
        open(os.path.join(REPO, "tests", "testdata", "webdataset", "tendata.tar"), "rb").read())
    text = urllib.request.urlopen(server.endpoint + "/_granary/metrics", timeout=10).read().decode()
    exported = {line.split("{")[0].split(" ")[0] for line in text.splitlines()
                if line and not line.startswith("#")}
    for e in exprs:
        for name in re.findall(r"granary_[a-z0-9_]+", e):
            assert name in exported, f"dashboard uses {name}, which granary does not export"
    prom, port = start_prometheus(server, tmp_path)
    try:
        for i in range(20):
            s3.put_object(Bucket=bucket, Key=f"dash-{i}", Body=os.urandom(200 * 1024))
            s3.get_object(Bucket=bucket, Key=f"dash-{i}")["Body"].read()
        # Wait for two scrapes after the traffic, so rates have two points.
        deadline = time.time() + 60
        while time.time() < deadline:
            try:
                r = prom_query(port, 'count_over_time(granary_s3_requests_in_flight[1m])')
                if r["data"]["result"] and float(r["data"]["result"][0]["value"][1]) >= 3:
                    break
            except OSError:
                pass
            time.sleep(0.5)
        else:
            raise AssertionError("Prometheus did not scrape granary three times in 60 s")
        for _ in range(3):
            s3.list_objects_v2(Bucket=bucket)
        time.sleep(2.5)
        results = {}
        for e in exprs:
            q = (e.replace("$__rate_interval", "1m").replace('job=~"$job"', 'job=~".+"')
                 .replace('job=~"$storage_job"', 'job=~".+"'))
            r = prom_query(port, q)
            assert r["status"] == "success", (e, r)
            results[e] = r["data"]["result"]
        with_data = [e for e in exprs if results[e]]
        for must in ("granary_s3_requests_total", "granary_s3_request_duration_seconds_bucket",
                     "granary_storage_capacity_bytes", "granary_s3_received_bytes_total",
                     "granary_io_operations_total"):
            assert any(must in e for e in with_data), f"no panel over {must} returned data"
    finally:
        stop_prometheus(prom)


def test_real_prometheus_scrapes_granary_and_sees_known_traffic(server, s3, bucket, tmp_path):
    import time
    import urllib.parse
    prom, port = start_prometheus(server, tmp_path)
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
        stop_prometheus(prom)


def test_storage_path_metrics_follow_known_traffic(server, s3, bucket):
    """io_uring/POSIX file operations with their latency, group-commit fsyncs, index
    operations with their latency, and index size, after a known number of requests."""
    def scrape():
        return urllib.request.urlopen(server.endpoint + "/_granary/metrics", timeout=10).read().decode()
    before = scrape()
    body = os.urandom(3 << 20)  # erasure coded, not inline: fragments hit the drives
    for i in range(5):
        s3.put_object(Bucket=bucket, Key=f"io/{i}", Body=body)
    for i in range(5):
        assert s3.get_object(Bucket=bucket, Key=f"io/{i}")["Body"].read() == body
    after = scrape()

    def grew(name, **labels):
        return (metric_value(after, name, **labels) or 0) - (metric_value(before, name, **labels) or 0)

    assert grew("granary_io_operations_total", op="write") >= 5 * 6  # 6 fragments a PUT
    assert grew("granary_io_bytes_total", op="write") >= 5 * len(body)
    assert grew("granary_io_bytes_total", op="read") >= 5 * len(body)
    assert grew("granary_io_duration_seconds_count", op="fdatasync") >= 1
    assert grew("granary_io_duration_seconds_count", op="read") >= 5 * 4
    # Each drive written to presized its extent (here or in an earlier test of this server).
    assert (metric_value(after, "granary_io_operations_total", op="resize") or 0) >= 1
    assert grew("granary_index_operations_total", op="put_object") == 5
    assert grew("granary_index_operations_total", op="get_object") == 5
    assert grew("granary_index_operation_duration_seconds_count", op="put_object") == 5
    assert metric_value(after, "granary_index_errors_total", op="put_object") == 0
    assert metric_value(after, "granary_index_storage_bytes", what="memtable") > 0
    # One after another, the five PUTs' manifests took a batch each (background jobs may
    # have written more meanwhile, alone or in the same batches).
    batches = grew("granary_index_group_commits_total")
    assert batches >= 5
    assert grew("granary_index_committed_requests_total") >= batches
    assert metric_value(after, "granary_crc_failures_total") == 0
    assert metric_value(after, "granary_ec_decoded_bytes_total") == 0
    # serve's six drives share the data directory's file system: each reports its size,
    # the storage figures count it once.
    drive_sizes = {line.rsplit(" ", 1)[1] for line in after.splitlines()
                   if line.startswith("granary_drive_capacity_bytes{")}
    assert len(drive_sizes) == 1, drive_sizes
    assert metric_value(after, "granary_storage_capacity_bytes") == float(drive_sizes.pop())
    assert 0 < metric_value(after, "granary_storage_available_bytes") <= \
        metric_value(after, "granary_storage_capacity_bytes")
    # The GET streams' buffer budget: the default capacity, a 3 MiB object's one stripe
    # charged while it was sent, and everything given back.
    assert metric_value(after, "granary_buffer_budget_bytes", what="capacity") == 256 << 20
    assert metric_value(after, "granary_buffer_budget_bytes", what="peak") >= len(body)
    assert metric_value(after, "granary_buffer_budget_waiting_streams") == 0
    assert metric_value(after, "granary_buffer_budget_overdrafts_total") == 0
    # The last GET's lease is given back when its final write completes on the server,
    # which may be just after the client read the last byte.
    for _ in range(50):
        if metric_value(scrape(), "granary_buffer_budget_bytes", what="used") == 0:
            break
        time.sleep(0.1)
    else:
        raise AssertionError("buffer budget not given back after the GETs")
    # Each GET above read its 4 data fragments' header regions (the CRCs were not cached
    # yet); the same GETs again take the CRCs from the block CRC cache.
    assert grew("granary_drive_crc_cache_misses_total") >= 5 * 4
    mid = scrape()
    for i in range(5):
        assert s3.get_object(Bucket=bucket, Key=f"io/{i}")["Body"].read() == body
    final = scrape()
    assert (metric_value(final, "granary_drive_crc_cache_hits_total")
            - metric_value(mid, "granary_drive_crc_cache_hits_total")) >= 5 * 4
    assert metric_value(final, "granary_drive_crc_cache_bytes") > 0
    # The fragments' blob index entries were kept in memory when they were put: the GETs
    # found them there, not in RocksDB.
    assert (metric_value(final, "granary_drive_index_cache_hits_total")
            - metric_value(mid, "granary_drive_index_cache_hits_total")) >= 5 * 4
    assert metric_value(final, "granary_drive_index_cache_bytes") > 0


def test_cache_budgets_of_zero_turn_the_drives_caches_off(granary_bin, tmp_data):
    """--crc-cache and --index-cache are the whole process's budgets, shared by its drives:
    at 0 no drive keeps a blob's CRCs or index entry, and reads repeated find nothing in
    memory (the default server above finds them)."""
    srv = Server(tmp_data, extra_args=["--crc-cache", "0", "--index-cache", "0"]).start()
    try:
        s3 = srv.client()
        s3.create_bucket(Bucket="nocache")
        body = os.urandom(3 << 20)
        for i in range(3):
            s3.put_object(Bucket="nocache", Key=f"k{i}", Body=body)

        def scrape():
            return urllib.request.urlopen(srv.endpoint + "/_granary/metrics",
                                          timeout=10).read().decode()
        for _ in range(2):
            for i in range(3):
                assert s3.get_object(Bucket="nocache", Key=f"k{i}")["Body"].read() == body
        text = scrape()
    finally:
        srv.stop()
    assert metric_value(text, "granary_drive_crc_cache_hits_total") == 0
    assert metric_value(text, "granary_drive_crc_cache_misses_total") >= 2 * 3 * 4
    assert metric_value(text, "granary_drive_crc_cache_bytes") == 0
    # (With no index cache a lookup goes straight to RocksDB: not counted as a miss.)
    assert metric_value(text, "granary_drive_index_cache_hits_total") == 0
    assert metric_value(text, "granary_drive_index_cache_bytes") == 0


def test_metrics_bearer_token(granary_bin, tmp_data, tmp_path):
    import urllib.error
    srv = Server(tmp_data, extra_args=["--metrics-token", "s3cr3t-token"]).start()
    try:
        url = srv.endpoint + "/_granary/metrics"
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "s3cr3t-token"},
                        {"Authorization": "Bearer s3cr3t-token-and-more"}):
            try:
                urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=10)
                raise AssertionError(f"metrics served with {headers}")
            except urllib.error.HTTPError as e:
                assert e.code == 403
                assert b"<Code>AccessDenied</Code>" in e.read()
        req = urllib.request.Request(url, headers={"Authorization": "Bearer s3cr3t-token"})
        text = urllib.request.urlopen(req, timeout=10).read()
        assert b"granary_s3_requests_total" in text
        r = subprocess.run(["/usr/bin/promtool", "check", "metrics"], input=text,
                           capture_output=True, timeout=60)
        assert r.returncode == 0, r.stderr
        # S3 itself is unaffected, and health stays open.
        srv.client().create_bucket(Bucket="still-s3")
        assert urllib.request.urlopen(srv.endpoint + "/_granary/health", timeout=10).read() == b"ok\n"
    finally:
        srv.stop()


def check_body_memory(text, capacity):
    """An internal service's metrics: its request-body memory as configured, holding nothing
    at rest; and promtool accepts the whole text."""
    assert f'granary_rpc_body_memory_bytes{{what="capacity"}} {capacity}' in text
    assert 'granary_rpc_body_memory_bytes{what="held"} 0' in text
    assert "granary_rpc_body_memory_refusals_total 0" in text
    r = subprocess.run(["/usr/bin/promtool", "check", "metrics"], input=text.encode(),
                       capture_output=True, timeout=60)
    assert r.returncode == 0, r.stderr + r.stdout


def test_index_service_reports_its_body_memory(tmp_path):
    """`granary index --body-memory`: its request-body allowance, on its own metrics."""
    import re as re_
    from conftest import GRANARY, _Process

    def parse(line, banner):
        m = re_.search(r"index listening at http://(\S+)", line)
        if m:
            banner["address"] = m.group(1)
        return m is not None

    env = {**os.environ, "GRANARY_CLUSTER_SECRET": "test-cluster-secret"}
    idx = _Process()
    banner = idx._launch(
        [GRANARY, "index", "--dir", str(tmp_path / "index"), "--listen", "127.0.0.1:0",
         "--event-loops", "1", "--workers", "2", "--body-memory", "64"],
        env, str(tmp_path / "index.log"), parse, 60)
    try:
        text = urllib.request.urlopen(f"http://{banner['address']}/_granary/metrics",
                                      timeout=10).read().decode()
        check_body_memory(text, 64 << 20)
        # A metrics GET with a chunked body is refused and the connection closed: its body
        # must not be read as a request of its own (no second answer on the stream).
        import socket
        host, port = banner["address"].rsplit(":", 1)
        inner = b"GET /_granary/metrics HTTP/1.1\r\nHost: x\r\n\r\n"
        with socket.create_connection((host, int(port)), timeout=10) as s:
            s.sendall(b"GET /_granary/metrics HTTP/1.1\r\nHost: x\r\n"
                      b"Transfer-Encoding: chunked\r\n\r\n" +
                      b"%x\r\n" % len(inner) + inner + b"\r\n0\r\n\r\n")
            answer = b""
            while chunk := s.recv(65536):
                answer += chunk
        assert answer.startswith(b"HTTP/1.1 400"), answer[:200]
        assert answer.count(b"HTTP/1.1 ") == 1, answer[:400]
    finally:
        assert idx.stop() == 0
    res = subprocess.run([GRANARY, "index", "--dir", str(tmp_path / "index2"), "--listen",
                          "127.0.0.1:0", "--body-memory", "8"],
                         env=env, capture_output=True, text=True, timeout=60)
    assert res.returncode == 1 and "--body-memory must be >= 16" in res.stderr + res.stdout
    assert not (tmp_path / "index2").exists()


def test_chunkserver_serves_metrics_with_its_token(tmp_path):
    import urllib.error
    from conftest import ChunkServer
    cs = ChunkServer([str(tmp_path / "d0")],
                     extra_args=["--metrics-token", "cs-token", "--body-memory", "100"]).start()
    try:
        url = cs.endpoint + "/_granary/metrics"
        try:
            urllib.request.urlopen(url, timeout=10)
            raise AssertionError("chunkserver metrics served without the token")
        except urllib.error.HTTPError as e:
            assert e.code in (401, 403)
        req = urllib.request.Request(url, headers={"Authorization": "Bearer cs-token"})
        text = urllib.request.urlopen(req, timeout=10).read().decode()
        assert "granary_io_operations_total" in text
        assert "granary_io_duration_seconds_bucket" in text
        check_body_memory(text, 100 << 20)
    finally:
        cs.stop()
