"""Bucket lifecycle configuration (Put/Get/DeleteBucketLifecycleConfiguration) and the
lifecycle job that applies it, with aws-cli and boto3 against the real binary. The server
runs with a 2-second lifecycle "day" and a pass every second, so rules act in seconds."""
import json
import time
import uuid

import botocore
import pytest

from conftest import Server, signed

DAY = 2  # seconds in a lifecycle day for these servers


@pytest.fixture(scope="module")
def fast(granary_bin, tmp_path_factory):
    srv = Server(str(tmp_path_factory.mktemp("lc") / "granary-data"),
                 extra_args=["--lifecycle-interval", "1", "--lifecycle-day", str(DAY),
                             "--multipart-max-age", "0"]).start()
    yield srv
    srv.stop()


def wait_for(predicate, timeout=20):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.25)
    return predicate()


def keys(s3, bucket):
    return sorted(o["Key"] for o in s3.list_objects_v2(Bucket=bucket).get("Contents", []))


def test_configuration_round_trips_through_aws_cli(fast, tmp_path):
    s3 = fast.client()
    name = "lc-" + uuid.uuid4().hex[:12]
    s3.create_bucket(Bucket=name)
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.get_bucket_lifecycle_configuration(Bucket=name)
    assert e.value.response["Error"]["Code"] == "NoSuchLifecycleConfiguration"

    config = {"Rules": [
        {"ID": "rotate-checkpoints", "Filter": {"Prefix": "ckpt/"}, "Status": "Enabled",
         "Expiration": {"Days": 30}},
        {"ID": "uploads", "Filter": {"Prefix": ""}, "Status": "Enabled",
         "AbortIncompleteMultipartUpload": {"DaysAfterInitiation": 7}},
        {"ID": "new-year", "Filter": {"Prefix": "tmp/"}, "Status": "Disabled",
         "Expiration": {"Date": "2030-01-01T00:00:00.000Z"}},
    ]}
    path = tmp_path / "lc.json"
    path.write_text(json.dumps(config))
    fast.aws("s3api", "put-bucket-lifecycle-configuration", "--bucket", name,
             "--lifecycle-configuration", f"file://{path}")
    got = json.loads(fast.aws("s3api", "get-bucket-lifecycle-configuration", "--bucket",
                              name).stdout)["Rules"]
    assert [r["ID"] for r in got] == ["rotate-checkpoints", "uploads", "new-year"]
    assert got[0]["Expiration"] == {"Days": 30} and got[0]["Filter"] == {"Prefix": "ckpt/"}
    assert got[1]["AbortIncompleteMultipartUpload"] == {"DaysAfterInitiation": 7}
    assert got[2]["Status"] == "Disabled"
    assert got[2]["Expiration"]["Date"].startswith("2030-01-01T00:00:00")

    # The versioning actions (Terraform's usual templates carry them) are kept and read
    # back; with one version per key and no delete markers they do nothing.
    versions = {"Rules": [
        {"ID": "noncurrent", "Filter": {"Prefix": "ckpt/"}, "Status": "Enabled",
         "Expiration": {"Days": 30},
         "NoncurrentVersionExpiration": {"NoncurrentDays": 7, "NewerNoncurrentVersions": 2}},
        {"ID": "markers", "Filter": {"Prefix": ""}, "Status": "Enabled",
         "Expiration": {"ExpiredObjectDeleteMarker": True}},
    ]}
    path.write_text(json.dumps(versions))
    fast.aws("s3api", "put-bucket-lifecycle-configuration", "--bucket", name,
             "--lifecycle-configuration", f"file://{path}")
    got = s3.get_bucket_lifecycle_configuration(Bucket=name)["Rules"]
    assert got[0]["Expiration"] == {"Days": 30}
    assert got[0]["NoncurrentVersionExpiration"] == {"NoncurrentDays": 7,
                                                     "NewerNoncurrentVersions": 2}
    assert got[1]["Expiration"] == {"ExpiredObjectDeleteMarker": True}
    assert "NoncurrentVersionExpiration" not in got[1]

    fast.aws("s3api", "delete-bucket-lifecycle", "--bucket", name)
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.get_bucket_lifecycle_configuration(Bucket=name)
    assert e.value.response["Error"]["Code"] == "NoSuchLifecycleConfiguration"


@pytest.mark.parametrize("rule,code", [
    ({"ID": "zero", "Filter": {"Prefix": ""}, "Status": "Enabled", "Expiration": {"Days": 0}},
     "InvalidArgument"),
    ({"ID": "noon", "Filter": {"Prefix": ""}, "Status": "Enabled",
      "Expiration": {"Date": "2030-01-01T12:00:00Z"}}, "InvalidArgument"),
    ({"ID": "glacier", "Filter": {"Prefix": ""}, "Status": "Enabled",
      "Transitions": [{"Days": 30, "StorageClass": "GLACIER"}]}, "NotImplemented"),
    ({"ID": "tags", "Filter": {"Tag": {"Key": "k", "Value": "v"}}, "Status": "Enabled",
      "AbortIncompleteMultipartUpload": {"DaysAfterInitiation": 1}}, "InvalidRequest"),
    ({"ID": "sizes", "Filter": {"And": {"ObjectSizeGreaterThan": 10,
                                        "ObjectSizeLessThan": 10}},
      "Status": "Enabled", "Expiration": {"Days": 1}}, "InvalidRequest"),
    ({"ID": "zero", "Filter": {"ObjectSizeLessThan": 0}, "Status": "Enabled",
      "Expiration": {"Days": 1}}, "InvalidRequest"),
    ({"ID": "twice", "Filter": {"And": {"Tags": [{"Key": "k", "Value": "1"},
                                                 {"Key": "k", "Value": "2"}]}},
      "Status": "Enabled", "Expiration": {"Days": 1}}, "InvalidArgument"),
    ({"ID": "nothing", "Filter": {"Prefix": ""}, "Status": "Enabled",
      "AbortIncompleteMultipartUpload": {"DaysAfterInitiation": -1}}, "InvalidArgument"),
    ({"ID": "nc0", "Filter": {"Prefix": ""}, "Status": "Enabled",
      "NoncurrentVersionExpiration": {"NoncurrentDays": 0}}, "InvalidArgument"),
    ({"ID": "ncmove", "Filter": {"Prefix": ""}, "Status": "Enabled",
      "NoncurrentVersionTransitions": [{"NoncurrentDays": 30, "StorageClass": "GLACIER"}]},
     "NotImplemented"),
    ({"ID": "both", "Filter": {"Prefix": ""}, "Status": "Enabled",
      "Expiration": {"Days": 1, "ExpiredObjectDeleteMarker": True}}, "InvalidArgument"),
    ({"ID": "tagged", "Filter": {"Tag": {"Key": "k", "Value": "v"}}, "Status": "Enabled",
      "Expiration": {"ExpiredObjectDeleteMarker": True}}, "InvalidArgument"),
])
def test_bad_rules_get_the_aws_error(fast, rule, code):
    s3 = fast.client()
    name = "lcbad-" + uuid.uuid4().hex[:12]
    s3.create_bucket(Bucket=name)
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.put_bucket_lifecycle_configuration(Bucket=name,
                                              LifecycleConfiguration={"Rules": [rule]})
    assert e.value.response["Error"]["Code"] == code
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.get_bucket_lifecycle_configuration(Bucket=name)
    assert e.value.response["Error"]["Code"] == "NoSuchLifecycleConfiguration"


def test_malformed_and_duplicate_rules(fast):
    s3 = fast.client()
    name = "lcxml-" + uuid.uuid4().hex[:12]
    s3.create_bucket(Bucket=name)
    rule = {"ID": "same", "Filter": {"Prefix": ""}, "Status": "Enabled", "Expiration": {"Days": 1}}
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.put_bucket_lifecycle_configuration(Bucket=name,
                                              LifecycleConfiguration={"Rules": [rule, rule]})
    assert e.value.response["Error"]["Code"] == "InvalidArgument"
    for body in (b"<LifecycleConfiguration><Rule>", b"not xml at all",
                 b"<LifecycleConfiguration><Rule><ID>x</ID><Status>Maybe</Status>"
                 b"<Expiration><Days>1</Days></Expiration></Rule></LifecycleConfiguration>"):
        status, text = signed(fast, "PUT", f"/{name}?lifecycle", body)
        assert status == 400, body
        assert b"<Code>MalformedXML</Code>" in text


def test_expiration_deletes_only_old_objects_under_the_prefix(fast):
    s3 = fast.client()
    name = "lcexp-" + uuid.uuid4().hex[:12]
    s3.create_bucket(Bucket=name)
    s3.put_object(Bucket=name, Key="ckpt/step-1", Body=b"old checkpoint" * 10000)
    s3.put_object(Bucket=name, Key="ckpt/step-2", Body=b"x")
    s3.put_object(Bucket=name, Key="data/keep", Body=b"not under the prefix")
    s3.put_bucket_lifecycle_configuration(Bucket=name, LifecycleConfiguration={"Rules": [
        {"ID": "ckpt", "Filter": {"Prefix": "ckpt/"}, "Status": "Enabled",
         "Expiration": {"Days": 2}},
        {"ID": "off", "Filter": {"Prefix": "data/"}, "Status": "Disabled",
         "Expiration": {"Days": 1}},
        # "Never", as people write it: must not wrap around into the past.
        {"ID": "never", "Filter": {"Prefix": "data/"}, "Status": "Enabled",
         "Expiration": {"Date": "9999-12-31T00:00:00Z"}}]})
    # Two lifecycle days (4 s) after they were written, the checkpoints go; data/ stays
    # (its rule is disabled). A checkpoint written later is kept until its own time.
    time.sleep(DAY)
    s3.put_object(Bucket=name, Key="ckpt/step-3", Body=b"new")
    assert wait_for(lambda: keys(s3, name) == ["ckpt/step-3", "data/keep"]), keys(s3, name)
    assert s3.get_object(Bucket=name, Key="data/keep")["Body"].read() == b"not under the prefix"
    assert wait_for(lambda: keys(s3, name) == ["data/keep"]), keys(s3, name)


def test_expiration_by_tags_and_sizes(fast):
    s3 = fast.client()
    name = "lctag-" + uuid.uuid4().hex[:12]
    s3.create_bucket(Bucket=name)
    rules = [
        {"ID": "temp", "Filter": {"Tag": {"Key": "temp", "Value": "yes"}},
         "Status": "Enabled", "Expiration": {"Days": 1}},
        {"ID": "big-scratch", "Filter": {"And": {
            "Prefix": "scratch/", "Tags": [{"Key": "stage", "Value": "raw"}],
            "ObjectSizeGreaterThan": 1000}},
         "Status": "Enabled", "Expiration": {"Days": 1}},
        {"ID": "tiny", "Filter": {"ObjectSizeLessThan": 5}, "Status": "Enabled",
         "Expiration": {"Days": 1}},
    ]
    s3.put_bucket_lifecycle_configuration(Bucket=name,
                                          LifecycleConfiguration={"Rules": rules})
    got = s3.get_bucket_lifecycle_configuration(Bucket=name)["Rules"]
    assert [r["Filter"] for r in got] == [r["Filter"] for r in rules], got
    s3.put_object(Bucket=name, Key="a/temp", Body=b"x" * 10, Tagging="temp=yes")
    s3.put_object(Bucket=name, Key="a/kept", Body=b"x" * 10, Tagging="temp=no")
    s3.put_object(Bucket=name, Key="scratch/big-raw", Body=b"x" * 2000,
                  Tagging="stage=raw&owner=me")
    s3.put_object(Bucket=name, Key="scratch/small-raw", Body=b"x" * 10, Tagging="stage=raw")
    s3.put_object(Bucket=name, Key="scratch/big-clean", Body=b"x" * 2000,
                  Tagging="stage=clean")
    s3.put_object(Bucket=name, Key="other/big-raw", Body=b"x" * 2000, Tagging="stage=raw")
    s3.put_object(Bucket=name, Key="b/tiny", Body=b"x")
    # Sizes are strict bounds: exactly 5 bytes is not under 5, exactly 1000 not over 1000.
    s3.put_object(Bucket=name, Key="b/five", Body=b"x" * 5)
    s3.put_object(Bucket=name, Key="scratch/raw-1000", Body=b"x" * 1000, Tagging="stage=raw")
    # A tag set after the upload counts too.
    s3.put_object(Bucket=name, Key="a/tagged-later", Body=b"x" * 10)
    s3.put_object_tagging(Bucket=name, Key="a/tagged-later",
                          Tagging={"TagSet": [{"Key": "temp", "Value": "yes"}]})
    kept = ["a/kept", "b/five", "other/big-raw", "scratch/big-clean", "scratch/raw-1000",
            "scratch/small-raw"]
    assert wait_for(lambda: keys(s3, name) == kept), keys(s3, name)
    time.sleep(2 * DAY)  # more passes: nothing else goes
    assert keys(s3, name) == kept


def test_abort_incomplete_multipart_uploads_by_rule(fast):
    s3 = fast.client()
    name = "lcmpu-" + uuid.uuid4().hex[:12]
    s3.create_bucket(Bucket=name)
    stale = s3.create_multipart_upload(Bucket=name, Key="tmp/big")["UploadId"]
    s3.upload_part(Bucket=name, Key="tmp/big", UploadId=stale, PartNumber=1, Body=b"p" * 1024)
    other = s3.create_multipart_upload(Bucket=name, Key="keep/big")["UploadId"]
    s3.put_bucket_lifecycle_configuration(Bucket=name, LifecycleConfiguration={"Rules": [
        {"ID": "abort", "Filter": {"Prefix": "tmp/"}, "Status": "Enabled",
         "AbortIncompleteMultipartUpload": {"DaysAfterInitiation": 1}}]})

    def uploads():
        return sorted(u["UploadId"] for u in s3.list_multipart_uploads(Bucket=name).get(
            "Uploads", []))
    assert wait_for(lambda: uploads() == [other]), uploads()
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.list_parts(Bucket=name, Key="tmp/big", UploadId=stale)
    assert e.value.response["Error"]["Code"] == "NoSuchUpload"
    s3.abort_multipart_upload(Bucket=name, Key="keep/big", UploadId=other)


def test_multipart_max_age_aborts_stale_uploads_everywhere(granary_bin, tmp_data):
    srv = Server(tmp_data, extra_args=["--lifecycle-interval", "1",
                                       "--multipart-max-age", "2"]).start()
    try:
        s3 = srv.client()
        s3.create_bucket(Bucket="stale")
        s3.create_multipart_upload(Bucket="stale", Key="forgotten")
        assert wait_for(lambda: not s3.list_multipart_uploads(Bucket="stale").get("Uploads"))
        # With the upload gone the bucket can be deleted (uploads keep a bucket non-empty).
        s3.delete_bucket(Bucket="stale")
    finally:
        srv.stop()
