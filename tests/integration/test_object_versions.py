"""ListObjectVersions on buckets without versioning: every object is its one version,
"null", the latest. Tools empty buckets through it (boto3's
`bucket.object_versions.delete()`, Terraform's force_destroy, `aws s3api
list-object-versions` scripts), then DeleteObjects with each VersionId. Driven with boto3
and aws-cli against the real binary."""
import json

import boto3
import botocore
import pytest


def test_boto3_pages_through_versions_with_markers(s3, bucket):
    keys = [f"dir{i % 3}/obj{i:03}" for i in range(25)] + ["top"]
    for k in keys:
        s3.put_object(Bucket=bucket, Key=k, Body=k.encode())
    pages = list(s3.get_paginator("list_object_versions").paginate(
        Bucket=bucket, PaginationConfig={"PageSize": 7}))
    assert len(pages) == 4
    versions = [v for p in pages for v in p.get("Versions", [])]
    assert [v["Key"] for v in versions] == sorted(keys)
    assert all(v["VersionId"] == "null" and v["IsLatest"] for v in versions)
    assert all(v["Size"] == len(v["Key"]) for v in versions)
    assert not any("DeleteMarkers" in p for p in pages)
    assert pages[0]["IsTruncated"] and pages[0]["NextVersionIdMarker"] == "null"
    # With a delimiter: three prefixes and one key.
    res = s3.list_object_versions(Bucket=bucket, Delimiter="/")
    assert [p["Prefix"] for p in res["CommonPrefixes"]] == ["dir0/", "dir1/", "dir2/"]
    assert [v["Key"] for v in res["Versions"]] == ["top"]
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.list_object_versions(Bucket=bucket, VersionIdMarker="null")
    assert e.value.response["Error"]["Code"] == "InvalidArgument"


def test_boto3_empties_a_bucket_through_its_versions(server, bucket):
    s3r = boto3.resource(
        "s3", endpoint_url=server.endpoint, region_name="us-east-1",
        aws_access_key_id=server.access_key, aws_secret_access_key=server.secret_key,
        config=botocore.config.Config(s3={"addressing_style": "path"},
                                      signature_version="s3v4"))
    b = s3r.Bucket(bucket)
    for i in range(30):
        b.put_object(Key=f"k/{i}", Body=b"x" * i)
    answers = b.object_versions.delete()
    deleted = [d for a in answers for d in a.get("Deleted", [])]
    assert len(deleted) == 30 and all(d["VersionId"] == "null" for d in deleted)
    assert not any(a.get("Errors") for a in answers), answers
    assert list(b.object_versions.all()) == []
    b.delete()  # empty: DeleteBucket succeeds


def test_aws_cli_lists_versions(server, s3, bucket):
    s3.put_object(Bucket=bucket, Key="one", Body=b"1")
    s3.put_object(Bucket=bucket, Key="two", Body=b"22")
    out = json.loads(server.aws("s3api", "list-object-versions", "--bucket", bucket).stdout)
    assert [(v["Key"], v["VersionId"], v["IsLatest"], v["Size"]) for v in out["Versions"]] == [
        ("one", "null", True, 1), ("two", "null", True, 2)]
    # A version id that is not there deletes nothing.
    res = s3.delete_objects(Bucket=bucket, Delete={"Objects": [
        {"Key": "one", "VersionId": "3HL4kqtJlcpXroDTDmJ+rmSpXd3dIbrHY"}]})
    assert res["Errors"][0]["Code"] == "InvalidArgument"
    assert s3.get_object(Bucket=bucket, Key="one")["Body"].read() == b"1"


def test_the_null_version_named_is_answered_as_s3_answers_it(server, s3, bucket):
    s3.put_object(Bucket=bucket, Key="v", Body=b"one", Metadata={"m": "1"})
    assert s3.get_object(Bucket=bucket, Key="v", VersionId="null")["VersionId"] == "null"
    assert s3.head_object(Bucket=bucket, Key="v", VersionId="null")["VersionId"] == "null"
    assert "VersionId" not in s3.head_object(Bucket=bucket, Key="v")
    # Copying a version onto its own key is S3's way to restore it: no change needed.
    copied = s3.copy_object(Bucket=bucket, Key="v", CopySource=f"{bucket}/v?versionId=null")
    assert copied["CopySourceVersionId"] == "null"
    assert s3.get_object(Bucket=bucket, Key="v")["Metadata"] == {"m": "1"}
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.copy_object(Bucket=bucket, Key="v", CopySource=f"{bucket}/v")
    assert e.value.response["Error"]["Code"] == "InvalidRequest"
    assert s3.delete_object(Bucket=bucket, Key="v", VersionId="null")["VersionId"] == "null"


def test_listings_name_the_buckets_owner_not_the_caller(server, s3, bucket):
    s3.put_object(Bucket=bucket, Key="owned", Body=b"x")
    owner = s3.list_object_versions(Bucket=bucket)["Versions"][0]["Owner"]["ID"]
    assert owner
    s3.put_bucket_acl(Bucket=bucket, ACL="public-read")
    try:
        anonymous = boto3.client(
            "s3", endpoint_url=server.endpoint, region_name="us-east-1",
            config=botocore.config.Config(signature_version=botocore.UNSIGNED,
                                          s3={"addressing_style": "path"}))
        listed = anonymous.list_object_versions(Bucket=bucket)["Versions"][0]
        assert listed["Owner"]["ID"] == owner
        assert anonymous.list_objects(Bucket=bucket)["Contents"][0]["Owner"]["ID"] == owner
    finally:
        s3.put_bucket_acl(Bucket=bucket, ACL="private")
