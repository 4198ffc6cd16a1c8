"""Bucket policies (PutBucketPolicy): set, read and deleted with aws-cli and boto3, and what
they allow and deny to anonymous requests and other users, against the real binary."""
import io
import json
import os
import uuid

import botocore
import pytest
import requests
from boto3.s3.transfer import TransferConfig

from conftest import Server
from test_users import add_user, botocore_unsigned, error_code, user_client


def denied(*calls):
    """Each call is refused with AccessDenied."""
    for call in calls:
        with pytest.raises(botocore.exceptions.ClientError) as e:
            call()
        assert error_code(e) == "AccessDenied"


def user_with_client(server, prefix):
    user = add_user(server, f"{prefix}-" + uuid.uuid4().hex[:6])
    return user, user_client(server, user)


def owned_bucket(server, prefix):
    """A new user and a bucket of its own: (the user, its client, the bucket's name)."""
    user, client = user_with_client(server, prefix + "-owner")
    name = f"{prefix}-" + uuid.uuid4().hex[:8]
    client.create_bucket(Bucket=name)
    return user, client, name


def download_policy(bucket):
    """What `mc anonymous set download` writes: anyone lists and reads."""
    return {"Version": "2012-10-17", "Statement": [
        {"Effect": "Allow", "Principal": {"AWS": ["*"]},
         "Action": ["s3:GetBucketLocation", "s3:ListBucket"],
         "Resource": [f"arn:aws:s3:::{bucket}"]},
        {"Effect": "Allow", "Principal": {"AWS": ["*"]}, "Action": ["s3:GetObject"],
         "Resource": [f"arn:aws:s3:::{bucket}/*"]}]}


def test_aws_cli_and_boto3_set_read_and_delete_a_policy(granary_bin, tmp_data, tmp_path):
    server = Server(tmp_data).start()
    try:
        s3 = server.client()
        name = "policy-" + uuid.uuid4().hex[:8]
        s3.create_bucket(Bucket=name)
        text = json.dumps(download_policy(name), indent=2)
        (tmp_path / "policy.json").write_text(text)
        server.aws("s3api", "put-bucket-policy", "--bucket", name,
                   "--policy", f"file://{tmp_path / 'policy.json'}")
        out = json.loads(server.aws("s3api", "get-bucket-policy", "--bucket", name).stdout)
        assert json.loads(out["Policy"]) == download_policy(name)
        status = json.loads(server.aws("s3api", "get-bucket-policy-status", "--bucket",
                                       name).stdout)
        assert status == {"PolicyStatus": {"IsPublic": True}}
        # Kept across a restart, as the document sent.
        server.stop()
        server.start()
        s3 = server.client()
        assert s3.get_bucket_policy(Bucket=name)["Policy"] == text
        anon = botocore_unsigned(server)
        s3.put_object(Bucket=name, Key="k", Body=b"open")
        assert anon.get_object(Bucket=name, Key="k")["Body"].read() == b"open"

        # Refused documents change nothing: malformed (S3's MalformedPolicy), or what
        # Granary cannot evaluate (NotImplemented), never stored to be ignored.
        for bad, code in (
                ("{not json", "MalformedPolicy"),
                (json.dumps({"Statement": [{"Effect": "Allow", "Principal": "*",
                                            "Action": "s3:GetObject",
                                            "Resource": "arn:aws:s3:::another-bucket/*"}]}),
                 "MalformedPolicy"),
                (json.dumps({"Statement": [{"Effect": "Deny", "Principal": "*",
                                            "Action": "s3:*",
                                            "Resource": f"arn:aws:s3:::{name}/*",
                                            "Condition": {"DateGreaterThan": {
                                                "aws:CurrentTime": "2030-01-01T00:00:00Z"}}}]}),
                 "NotImplemented")):
            with pytest.raises(botocore.exceptions.ClientError) as e:
                s3.put_bucket_policy(Bucket=name, Policy=bad)
            assert error_code(e) == code, bad
        assert s3.get_bucket_policy(Bucket=name)["Policy"] == text

        server.aws("s3api", "delete-bucket-policy", "--bucket", name)
        with pytest.raises(botocore.exceptions.ClientError) as e:
            s3.get_bucket_policy(Bucket=name)
        assert error_code(e) == "NoSuchBucketPolicy"
        with pytest.raises(botocore.exceptions.ClientError) as e:
            s3.get_bucket_policy_status(Bucket=name)
        assert error_code(e) == "NoSuchBucketPolicy"
        denied(lambda: anon.get_object(Bucket=name, Key="k"))
    finally:
        server.stop()


def test_download_policy_lets_anyone_list_and_read_nothing_more(server, s3):
    _, mine, name = owned_bucket(server, "download")
    _, theirs = user_with_client(server, "dl-other")
    anon = botocore_unsigned(server)
    mine.put_object(Bucket=name, Key="shard-000.tar", Body=b"tar bytes")
    denied(lambda: anon.get_object(Bucket=name, Key="shard-000.tar"))
    mine.put_bucket_policy(Bucket=name, Policy=json.dumps(download_policy(name)))
    for c in (anon, theirs):
        assert c.get_object(Bucket=name, Key="shard-000.tar")["Body"].read() == b"tar bytes"
        assert c.get_object(Bucket=name, Key="shard-000.tar", Range="bytes=4-8")[
            "Body"].read() == b"bytes"
        assert [o["Key"] for o in c.list_objects_v2(Bucket=name)["Contents"]] == \
            ["shard-000.tar"]
        denied(lambda: c.put_object(Bucket=name, Key="x", Body=b"no"),
               lambda: c.delete_object(Bucket=name, Key="shard-000.tar"),
               lambda: c.get_bucket_policy(Bucket=name),
               lambda: c.put_bucket_policy(Bucket=name, Policy="{}"),
               lambda: c.delete_bucket_policy(Bucket=name),
               lambda: c.get_bucket_acl(Bucket=name))
    assert mine.get_object(Bucket=name, Key="shard-000.tar")["Body"].read() == b"tar bytes"
    # aws-cli, anonymous, as a training job would read a public dataset.
    res = server.aws("s3", "cp", "--no-sign-request", f"s3://{name}/shard-000.tar", "-")
    assert res.stdout == "tar bytes"


def test_a_user_gets_a_prefix_and_deny_wins(server):
    _, mine, name = owned_bucket(server, "prefix")
    bob, his = user_with_client(server, "pfx-bob")
    mine.put_object(Bucket=name, Key="owner/secret", Body=b"s")
    policy = {"Version": "2012-10-17", "Statement": [
        {"Sid": "BobsPrefix", "Effect": "Allow",
         "Principal": {"AWS": f"arn:aws:iam::000000000000:user/{bob['name']}"},
         "Action": ["s3:GetObject", "s3:PutObject", "s3:DeleteObject",
                    "s3:AbortMultipartUpload"],
         "Resource": f"arn:aws:s3:::{name}/{bob['name']}/*"},
        {"Sid": "BobLists", "Effect": "Allow",
         "Principal": {"AWS": [f"arn:aws:iam::000000000000:user/{bob['name']}"]},
         "Action": "s3:ListBucket", "Resource": f"arn:aws:s3:::{name}",
         "Condition": {"StringLike": {"s3:prefix": f"{bob['name']}/*"}}},
        {"Sid": "KeepIsKept", "Effect": "Deny", "Principal": "*",
         "Action": "s3:DeleteObject", "Resource": f"arn:aws:s3:::{name}/*/keep/*"}]}
    mine.put_bucket_policy(Bucket=name, Policy=json.dumps(policy))
    status = mine.get_bucket_policy_status(Bucket=name)["PolicyStatus"]
    assert status["IsPublic"] is False

    me = bob["name"]
    his.put_object(Bucket=name, Key=f"{me}/a", Body=b"a")
    his.put_object(Bucket=name, Key=f"{me}/keep/b", Body=b"b")
    # A multipart upload is PutObject too.
    big = b"m" * (5 * 1024 * 1024 + 1)
    his.upload_fileobj(io.BytesIO(big), name, f"{me}/big",
                       Config=TransferConfig(multipart_threshold=5 << 20,
                                             multipart_chunksize=5 << 20))
    assert his.get_object(Bucket=name, Key=f"{me}/big")["Body"].read() == big
    listed = his.list_objects_v2(Bucket=name, Prefix=f"{me}/")["Contents"]
    assert sorted(o["Key"] for o in listed) == [f"{me}/a", f"{me}/big", f"{me}/keep/b"]
    denied(lambda: his.list_objects_v2(Bucket=name),
           lambda: his.list_objects_v2(Bucket=name, Prefix="owner/"),
           lambda: his.get_object(Bucket=name, Key="owner/secret"),
           lambda: his.put_object(Bucket=name, Key="owner/x", Body=b"x"),
           lambda: his.delete_object(Bucket=name, Key=f"{me}/keep/b"))
    # DeleteObjects answers for each key.
    res = his.delete_objects(Bucket=name, Delete={"Objects": [
        {"Key": f"{me}/a"}, {"Key": f"{me}/keep/b"}, {"Key": "owner/secret"}]})
    assert [d["Key"] for d in res.get("Deleted", [])] == [f"{me}/a"]
    assert sorted((e["Key"], e["Code"]) for e in res["Errors"]) == sorted([
        (f"{me}/keep/b", "AccessDenied"), ("owner/secret", "AccessDenied")])
    # The Deny binds the owner too; the owner still manages the policy.
    denied(lambda: mine.delete_object(Bucket=name, Key=f"{me}/keep/b"))
    mine.delete_bucket_policy(Bucket=name)
    mine.delete_object(Bucket=name, Key=f"{me}/keep/b")
    denied(lambda: his.get_object(Bucket=name, Key=f"{me}/big"))


def test_source_address_conditions(server):
    _, mine, name = owned_bucket(server, "addresses")
    anon = botocore_unsigned(server)
    mine.put_object(Bucket=name, Key="k", Body=b"v")

    def allow_reads_from(network):
        mine.put_bucket_policy(Bucket=name, Policy=json.dumps({"Statement": [
            {"Effect": "Allow", "Principal": "*", "Action": "s3:GetObject",
             "Resource": f"arn:aws:s3:::{name}/*",
             "Condition": {"IpAddress": {"aws:SourceIp": network}}}]}))

    allow_reads_from("127.0.0.0/8")  # the tests' clients are on loopback
    assert anon.get_object(Bucket=name, Key="k")["Body"].read() == b"v"
    allow_reads_from(["192.0.2.0/24", "2001:db8::/32"])
    denied(lambda: anon.get_object(Bucket=name, Key="k"))
    # A Deny from everywhere but a network no client here is on locks the owner out of
    # its objects, not out of its policy.
    mine.put_bucket_policy(Bucket=name, Policy=json.dumps({"Statement": [
        {"Effect": "Deny", "Principal": "*", "Action": "s3:*",
         "Resource": [f"arn:aws:s3:::{name}", f"arn:aws:s3:::{name}/*"],
         "Condition": {"NotIpAddress": {"aws:SourceIp": "10.0.0.0/8"}}}]}))
    denied(lambda: mine.get_object(Bucket=name, Key="k"))
    mine.delete_bucket_policy(Bucket=name)
    assert mine.get_object(Bucket=name, Key="k")["Body"].read() == b"v"


def test_policy_operations_stay_the_owners_whatever_it_grants(server):
    _, mine, name = owned_bucket(server, "everything")
    _, theirs = user_with_client(server, "own-other")
    everything = json.dumps({"Statement": [
        {"Effect": "Allow", "Principal": "*", "Action": "s3:*",
         "Resource": [f"arn:aws:s3:::{name}", f"arn:aws:s3:::{name}/*"]}]})
    mine.put_bucket_policy(Bucket=name, Policy=everything)
    theirs.put_object(Bucket=name, Key="k", Body=b"granted")  # s3:* it is
    denied(lambda: theirs.get_bucket_policy(Bucket=name),
           lambda: theirs.put_bucket_policy(Bucket=name, Policy=everything),
           lambda: theirs.delete_bucket_policy(Bucket=name))
    assert mine.get_bucket_policy(Bucket=name)["Policy"] == everything
    # Anonymous readers get no response-* overrides (a public object served as HTML).
    res = requests.get(f"{server.endpoint}/{name}/k?response-content-type=text%2Fhtml",
                       timeout=30)
    assert res.status_code == 400 and "<Code>InvalidRequest</Code>" in res.text
    assert requests.get(f"{server.endpoint}/{name}/k", timeout=30).content == b"granted"


def test_form_uploads_are_judged_with_the_clients_address(server):
    _, mine, name = owned_bucket(server, "form")
    bob, his = user_with_client(server, "form-bob")

    def allow_bob_from(network):
        mine.put_bucket_policy(Bucket=name, Policy=json.dumps({"Statement": [
            {"Effect": "Allow",
             "Principal": {"AWS": f"arn:aws:iam::000000000000:user/{bob['name']}"},
             "Action": "s3:PutObject", "Resource": f"arn:aws:s3:::{name}/*",
             "Condition": {"IpAddress": {"aws:SourceIp": network}}}]}))

    def post_form(key):
        form = his.generate_presigned_post(Bucket=name, Key=key)
        return requests.post(form["url"], data=form["fields"],
                             files={"file": ("f.bin", b"from a form")}, timeout=30)

    allow_bob_from("127.0.0.0/8")  # where this test's requests come from
    res = post_form("up")
    assert res.status_code == 204, res.text
    assert mine.get_object(Bucket=name, Key="up")["Body"].read() == b"from a form"
    allow_bob_from("192.0.2.0/24")
    res = post_form("down")
    assert res.status_code == 403 and "<Code>AccessDenied</Code>" in res.text, res.text
    with pytest.raises(botocore.exceptions.ClientError) as e:
        mine.head_object(Bucket=name, Key="down")
    assert e.value.response["Error"]["Code"] == "404"


def test_anonymous_forms_where_the_policy_lets_anyone_write(server, s3):
    # A drop box: anyone may upload under incoming/ with a plain HTML form (no policy, no
    # signature), nobody but the owner reads it back.
    name = "dropbox-" + uuid.uuid4().hex[:8]
    s3.create_bucket(Bucket=name)

    def post(key, data=b"dropped"):
        return requests.post(f"{server.endpoint}/{name}", data={"key": key},
                             files={"file": ("f.txt", data)}, timeout=30)

    res = post("incoming/a")
    assert res.status_code == 403 and "<Code>AccessDenied</Code>" in res.text, res.text
    s3.put_bucket_policy(Bucket=name, Policy=json.dumps({"Statement": [
        {"Effect": "Allow", "Principal": "*", "Action": "s3:PutObject",
         "Resource": f"arn:aws:s3:::{name}/incoming/*"}]}))
    res = post("incoming/a")
    assert res.status_code == 204, res.text
    assert s3.get_object(Bucket=name, Key="incoming/a")["Body"].read() == b"dropped"
    big = os.urandom(300 * 1024)  # streamed, not read ahead
    assert post("incoming/big", big).status_code == 204
    assert s3.get_object(Bucket=name, Key="incoming/big")["Body"].read() == big
    res = post("elsewhere/b")
    assert res.status_code == 403 and "<Code>AccessDenied</Code>" in res.text, res.text
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.head_object(Bucket=name, Key="elsewhere/b")
    assert e.value.response["Error"]["Code"] == "404"
    denied(lambda: botocore_unsigned(server).get_object(Bucket=name, Key="incoming/a"))
    # A policy field without a signature is not anonymous: it is an unsigned form.
    res = requests.post(f"{server.endpoint}/{name}", data={"key": "incoming/c",
                                                          "policy": "e30="},
                        files={"file": ("f.txt", b"x")}, timeout=30)
    assert res.status_code == 400 and "<Code>InvalidArgument</Code>" in res.text, res.text


def test_expected_bucket_owner(server, s3):
    owner, mine, name = owned_bucket(server, "expected")
    mine.put_object(Bucket=name, Key="k", Body=b"v", ExpectedBucketOwner=owner["name"])
    assert mine.get_object(Bucket=name, Key="k",
                           ExpectedBucketOwner=owner["name"])["Body"].read() == b"v"
    # Another owner named: refused, the root user's requests included, nothing written.
    for client in (mine, s3):
        denied(lambda: client.get_object(Bucket=name, Key="k", ExpectedBucketOwner="other"),
               lambda: client.put_object(Bucket=name, Key="k2", Body=b"x",
                                         ExpectedBucketOwner="other"),
               lambda: client.list_objects_v2(Bucket=name, ExpectedBucketOwner="other"))
    assert s3.get_object(Bucket=name, Key="k",
                         ExpectedBucketOwner=owner["name"])["Body"].read() == b"v"
    # A copy's source owner too.
    mine.create_bucket(Bucket=name + "-copy")
    denied(lambda: mine.copy_object(Bucket=name + "-copy", Key="c",
                                    CopySource={"Bucket": name, "Key": "k"},
                                    ExpectedSourceBucketOwner="other"))
    mine.copy_object(Bucket=name + "-copy", Key="c", CopySource={"Bucket": name, "Key": "k"},
                     ExpectedSourceBucketOwner=owner["name"])
    assert [o["Key"] for o in mine.list_objects_v2(Bucket=name)["Contents"]] == ["k"]


def test_filename_expansion_is_bounded_before_any_access_check(server, s3):
    # 2,000 ${filename} of a 30 KB file name would be 60 MB of fields: refused at once,
    # for a bucket that takes no anonymous form anyway.
    name = "expand-" + uuid.uuid4().hex[:8]
    s3.create_bucket(Bucket=name)
    res = requests.post(f"{server.endpoint}/{name}",
                        data={"key": "k", "x-amz-meta-a": "${filename}" * 2000},
                        files={"file": ("n" * 30000, b"x")}, timeout=30)
    assert res.status_code == 400, res.text
    assert "<Code>MaxPostPreDataLengthExceededError</Code>" in res.text
    assert "KeyCount" in s3.list_objects_v2(Bucket=name) and \
        s3.list_objects_v2(Bucket=name)["KeyCount"] == 0
