"""Bucket tags (PutBucketTagging, GetBucketTagging, DeleteBucketTagging) with boto3 and
aws-cli against the real binary: set, read, replaced, refused as S3 refuses them, kept
over a restart, and never mixed with the objects' tags. The JS SDK v3 sets them in
test_js_sdk.py."""
import json
import threading

import botocore
import pytest

from conftest import Server


def tag_set(tags):
    return {"TagSet": [{"Key": k, "Value": v} for k, v in tags.items()]}


def error_code(e):
    return e.value.response["Error"]["Code"]


def test_boto3_sets_reads_replaces_and_deletes_bucket_tags(s3, bucket):
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.get_bucket_tagging(Bucket=bucket)
    assert error_code(e) == "NoSuchTagSet"
    res = s3.put_bucket_tagging(Bucket=bucket, Tagging=tag_set({"team": "data",
                                                                 "cost centre": "42"}))
    assert res["ResponseMetadata"]["HTTPStatusCode"] == 204
    got = s3.get_bucket_tagging(Bucket=bucket)["TagSet"]
    assert sorted((t["Key"], t["Value"]) for t in got) == [("cost centre", "42"),
                                                           ("team", "data")]
    # Objects do not inherit them.
    s3.put_object(Bucket=bucket, Key="obj", Body=b"x")
    assert s3.get_object_tagging(Bucket=bucket, Key="obj")["TagSet"] == []

    fifty = {f"k{i:02}": str(i) for i in range(50)}
    s3.put_bucket_tagging(Bucket=bucket, Tagging=tag_set(fifty))
    assert len(s3.get_bucket_tagging(Bucket=bucket)["TagSet"]) == 50
    # (An empty key botocore refuses itself.)
    for bad in ({**fifty, "k50": "one too many"}, {"aws:createdBy": "me"}, {"a/b": "x" * 257},
                {"k" * 129: "long key"}):
        with pytest.raises(botocore.exceptions.ClientError) as e:
            s3.put_bucket_tagging(Bucket=bucket, Tagging=tag_set(bad))
        assert error_code(e) == "InvalidTag"
    assert len(s3.get_bucket_tagging(Bucket=bucket)["TagSet"]) == 50  # unchanged

    s3.put_bucket_tagging(Bucket=bucket, Tagging=tag_set({"stage": "raw"}))
    assert s3.get_bucket_tagging(Bucket=bucket)["TagSet"] == [{"Key": "stage",
                                                               "Value": "raw"}]
    assert s3.delete_bucket_tagging(Bucket=bucket)["ResponseMetadata"]["HTTPStatusCode"] == 204
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.get_bucket_tagging(Bucket=bucket)
    assert error_code(e) == "NoSuchTagSet"
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.put_bucket_tagging(Bucket=bucket + "-missing", Tagging=tag_set({"a": "b"}))
    assert error_code(e) == "NoSuchBucket"


def test_aws_cli_bucket_tags(server, bucket):
    server.aws("s3api", "put-bucket-tagging", "--bucket", bucket, "--tagging",
               "TagSet=[{Key=project,Value=granary},{Key=env,Value=test}]")
    out = json.loads(server.aws("s3api", "get-bucket-tagging", "--bucket", bucket).stdout)
    assert sorted((t["Key"], t["Value"]) for t in out["TagSet"]) == [("env", "test"),
                                                                     ("project", "granary")]
    server.aws("s3api", "delete-bucket-tagging", "--bucket", bucket)
    res = server.aws("s3api", "get-bucket-tagging", "--bucket", bucket, check=False)
    assert res.returncode != 0 and "NoSuchTagSet" in res.stderr, res.stderr


def test_bucket_tags_survive_a_restart(granary_bin, tmp_data):
    srv = Server(tmp_data).start()
    try:
        srv.client().create_bucket(Bucket="tags-kept")
        srv.client().put_bucket_tagging(Bucket="tags-kept", Tagging=tag_set({"keep": "me"}))
        srv.stop()
        srv.start()
        assert srv.client().get_bucket_tagging(Bucket="tags-kept")["TagSet"] == [
            {"Key": "keep", "Value": "me"}]
    finally:
        srv.stop()


def test_concurrent_changes_of_different_settings_keep_both(server, bucket):
    """Tags and CORS rules live in one bucket record: each change reads it, changes one
    setting and writes it back. Written at the same time from two clients, neither may
    undo the other: once a round of one setting is acknowledged, every later read of it
    finds that round or a later one, and at the end both last rounds are there."""
    rounds = 60
    acked = {"tags": -1, "cors": -1}
    failures = []

    def tags_round(c):
        tags = c.get_bucket_tagging(Bucket=bucket)["TagSet"]
        return int(tags[0]["Value"])

    def cors_round(c):
        return int(c.get_bucket_cors(Bucket=bucket)["CORSRules"][0]["ID"].split("-")[1])

    def put_tags(c, i):
        c.put_bucket_tagging(Bucket=bucket, Tagging=tag_set({"round": str(i)}))

    def put_cors(c, i):
        c.put_bucket_cors(Bucket=bucket, CORSConfiguration={"CORSRules": [
            {"ID": f"round-{i}", "AllowedOrigins": ["*"], "AllowedMethods": ["GET"]}]})

    def writer(mine, put, other, read_other):
        c = server.client()
        try:
            for i in range(rounds):
                put(c, i)
                acked[mine] = i
                want = acked[other]
                if want >= 0 and read_other(c) < want:
                    failures.append(f"{other} went back below round {want} after a {mine} change")
        except Exception as e:  # noqa: BLE001 - reported below
            failures.append(repr(e))

    threads = [threading.Thread(target=writer, args=("tags", put_tags, "cors", cors_round)),
               threading.Thread(target=writer, args=("cors", put_cors, "tags", tags_round))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures, failures
    c = server.client()
    assert tags_round(c) == rounds - 1 and cors_round(c) == rounds - 1
