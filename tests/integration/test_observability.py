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
