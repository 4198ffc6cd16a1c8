"""Bucket settings Granary has no way to set (encryption, website...), and versioning, which
can only be suspended (the policy, never set here, is test_bucket_policy.py's):
reading one answers as S3 answers for a bucket where it was never set, so tools that read
every setting of a bucket (Terraform's aws_s3_bucket, s3cmd info, rclone) work; deleting
one is a 204, as S3 answers the delete of a setting that is not there (Terraform's
destroy); setting one is 501 NotImplemented. Driven with boto3 and aws-cli against the real
binary."""

import botocore
import pytest

from conftest import Server

# (boto3 call, error code S3 answers for a bucket without that setting)
ABSENT = [
    ("get_bucket_policy", "NoSuchBucketPolicy"),
    ("get_bucket_encryption", "ServerSideEncryptionConfigurationNotFoundError"),
    ("get_bucket_website", "NoSuchWebsiteConfiguration"),
    ("get_bucket_replication", "ReplicationConfigurationNotFoundError"),
    ("get_bucket_tagging", "NoSuchTagSet"),  # settable (test_bucket_tagging.py), never set here
    ("get_object_lock_configuration", "ObjectLockConfigurationNotFoundError"),
    ("get_bucket_ownership_controls", "OwnershipControlsNotFoundError"),
    ("get_public_access_block", "NoSuchPublicAccessBlockConfiguration"),
]


def test_boto3_reads_every_setting_as_never_set(s3, bucket):
    versioning = s3.get_bucket_versioning(Bucket=bucket)
    assert versioning["ResponseMetadata"]["HTTPStatusCode"] == 200
    assert "Status" not in versioning and "MFADelete" not in versioning
    assert "LoggingEnabled" not in s3.get_bucket_logging(Bucket=bucket)
    assert "Status" not in s3.get_bucket_accelerate_configuration(Bucket=bucket)
    assert s3.get_bucket_request_payment(Bucket=bucket)["Payer"] == "BucketOwner"
    notification = s3.get_bucket_notification_configuration(Bucket=bucket)
    assert not any(k.endswith("Configurations") for k in notification), notification
    for call, code in ABSENT:
        with pytest.raises(botocore.exceptions.ClientError) as e:
            getattr(s3, call)(Bucket=bucket)
        assert e.value.response["Error"]["Code"] == code, call
        assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 404, call
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.get_bucket_versioning(Bucket=bucket + "-missing")
    assert e.value.response["Error"]["Code"] == "NoSuchBucket"


DELETES = ["delete_bucket_policy", "delete_bucket_encryption",
           "delete_bucket_website", "delete_bucket_replication",
           "delete_bucket_ownership_controls", "delete_public_access_block"]


def test_deleting_them_answers_204_and_leaves_them_never_set(s3, bucket):
    for call in DELETES:
        res = getattr(s3, call)(Bucket=bucket)
        assert res["ResponseMetadata"]["HTTPStatusCode"] == 204, call
        with pytest.raises(botocore.exceptions.ClientError) as e:
            getattr(s3, call)(Bucket=bucket + "-missing")
        assert e.value.response["Error"]["Code"] == "NoSuchBucket", call
    for call, code in ABSENT:
        with pytest.raises(botocore.exceptions.ClientError) as e:
            getattr(s3, call)(Bucket=bucket)
        assert e.value.response["Error"]["Code"] == code, call


def test_setting_them_is_not_implemented_and_changes_nothing(s3, bucket):
    calls = [
        lambda: s3.put_bucket_versioning(
            Bucket=bucket, VersioningConfiguration={"Status": "Enabled"}),
        lambda: s3.put_bucket_encryption(Bucket=bucket, ServerSideEncryptionConfiguration={
            "Rules": [{"ApplyServerSideEncryptionByDefault": {"SSEAlgorithm": "AES256"}}]}),
    ]
    for call in calls:
        with pytest.raises(botocore.exceptions.ClientError) as e:
            call()
        assert e.value.response["Error"]["Code"] == "NotImplemented"
    assert "Status" not in s3.get_bucket_versioning(Bucket=bucket)
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.get_bucket_encryption(Bucket=bucket)
    assert e.value.response["Error"]["Code"] == \
        "ServerSideEncryptionConfigurationNotFoundError"


def test_versioning_can_be_suspended_not_enabled(granary_bin, tmp_data):
    server = Server(tmp_data).start()
    try:
        s3 = server.client()
        bucket = "suspended"
        s3.create_bucket(Bucket=bucket)
        # boto3, then aws-cli: Suspended is what a bucket with one version per key is.
        res = s3.put_bucket_versioning(Bucket=bucket,
                                       VersioningConfiguration={"Status": "Suspended"})
        assert res["ResponseMetadata"]["HTTPStatusCode"] == 200
        assert s3.get_bucket_versioning(Bucket=bucket)["Status"] == "Suspended"
        s3.create_bucket(Bucket="suspended-by-cli")
        server.aws("s3api", "put-bucket-versioning", "--bucket", "suspended-by-cli",
                   "--versioning-configuration", "Status=Suspended")
        out = server.aws("s3api", "get-bucket-versioning", "--bucket",
                         "suspended-by-cli").stdout
        assert '"Status": "Suspended"' in out, out
        with pytest.raises(botocore.exceptions.ClientError) as e:
            s3.put_bucket_versioning(Bucket=bucket,
                                     VersioningConfiguration={"Status": "Enabled"})
        assert e.value.response["Error"]["Code"] == "NotImplemented"
        assert s3.get_bucket_versioning(Bucket=bucket)["Status"] == "Suspended"
        # Objects are their one version, null, as in a suspended S3 bucket.
        s3.put_object(Bucket=bucket, Key="k", Body=b"v")
        versions = s3.list_object_versions(Bucket=bucket)["Versions"]
        assert [(v["Key"], v["VersionId"]) for v in versions] == [("k", "null")]
        # Kept across a restart.
        server.stop()
        server.start()
        s3 = server.client()
        assert s3.get_bucket_versioning(Bucket=bucket)["Status"] == "Suspended"
    finally:
        server.stop()


def test_aws_cli_reads_versioning_and_policy(server, bucket):
    # An unversioned bucket: aws-cli prints nothing and exits 0.
    res = server.aws("s3api", "get-bucket-versioning", "--bucket", bucket)
    assert res.stdout.strip() == "", res.stdout
    res = server.aws("s3api", "get-bucket-policy", "--bucket", bucket, check=False)
    assert res.returncode != 0
    assert "NoSuchBucketPolicy" in res.stderr, res.stderr
    server.aws("s3api", "delete-bucket-policy", "--bucket", bucket)
    server.aws("s3api", "delete-bucket-encryption", "--bucket", bucket)
