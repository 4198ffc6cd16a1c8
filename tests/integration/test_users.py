"""Named users, bucket ownership and public-read buckets, driven through the admin CLI
(`granary admin user`), boto3, aws-cli and s3cmd against the real binary."""
import json
import subprocess
import uuid

import botocore
import pytest
from botocore.config import Config

from conftest import Server, signed

S3CMD = "/usr/bin/s3cmd"


def admin(server, *args, access=None, secret=None, check=True):
    return server.admin(*args, access=access, secret=secret, check=check)


def add_user(server, name, *extra):
    out = json.loads(admin(server, "user", "add", name, *extra).stdout)
    assert out["name"] == name
    return out


def user_client(server, user):
    return server.client(access=user["access_key"], secret=user["secret_key"])


def botocore_unsigned(server):
    import boto3
    return boto3.client("s3", endpoint_url=server.endpoint, region_name="us-east-1",
                        config=Config(signature_version=botocore.UNSIGNED,
                                      s3={"addressing_style": "path"},
                                      retries={"max_attempts": 1}))


def error_code(excinfo):
    return excinfo.value.response["Error"]["Code"]


def test_admin_cli_adds_lists_and_removes_users(server, s3):
    name = "u-" + uuid.uuid4().hex[:8]
    user = add_user(server, name)
    assert user["access_key"].startswith("GK") and len(user["access_key"]) == 20
    assert len(user["secret_key"]) == 40
    listed = json.loads(admin(server, "user", "list").stdout)["users"]
    mine = [u for u in listed if u["name"] == name]
    assert mine and mine[0]["access_key"] == user["access_key"]
    assert all("secret_key" not in u for u in listed), "list must not reveal secrets"

    # The new key works at once, on this gateway.
    c = user_client(server, user)
    assert c.list_buckets()["Buckets"] == []

    # Same name again: refused (409 EntityAlreadyExists), the old keys still work.
    again = admin(server, "user", "add", name, check=False)
    assert again.returncode != 0 and "EntityAlreadyExists" in again.stderr
    assert c.list_buckets()["ResponseMetadata"]["HTTPStatusCode"] == 200

    assert "removed" in admin(server, "user", "remove", name).stdout
    with pytest.raises(botocore.exceptions.ClientError) as e:
        c.list_buckets()
    assert error_code(e) == "InvalidAccessKeyId"
    gone = admin(server, "user", "remove", name, check=False)
    assert gone.returncode != 0 and "NoSuchEntity" in gone.stderr


def test_admin_cli_takes_given_keys_and_validates_them(server):
    name = "given-" + uuid.uuid4().hex[:8]
    key = "GKGIVEN" + uuid.uuid4().hex[:13].upper()
    user = add_user(server, name, "--user-access-key", key, "--user-secret-key", "s3cret-given")
    assert user["access_key"] == key and user["secret_key"] == "s3cret-given"
    assert user_client(server, user).list_buckets()["ResponseMetadata"]["HTTPStatusCode"] == 200
    # Another user with the same access key, the root's key, bad names and short secrets.
    for args, code in ((["other-" + name, "--user-access-key", key], "EntityAlreadyExists"),
                       (["x-" + name, "--user-access-key", server.access_key],
                        "InvalidArgument"),
                       (["bad/name"], "InvalidArgument"), (["a" * 65], "InvalidArgument"),
                       (["y-" + name, "--user-secret-key", "short"], "InvalidArgument")):
        res = admin(server, "user", "add", *args, check=False)
        assert res.returncode != 0 and code in res.stderr, (args, res.stderr)
    names = {u["name"] for u in json.loads(admin(server, "user", "list").stdout)["users"]}
    assert not names & {"other-" + name, "x-" + name, "bad/name", "a" * 65, "y-" + name}
    admin(server, "user", "remove", name)


def test_the_user_api_refuses_fields_it_would_ignore_and_other_methods(server):
    # A misspelt or non-string field would have been ignored, and random keys made where
    # the operator believed chosen ones were set.
    name = "fields-" + uuid.uuid4().hex[:8]
    for body in (b'{"secret_key": 12345678}', b'{"secret": "s3cret-given"}',
                 b'{"access_key": ["GKA"]}'):
        status, out = signed(server, "PUT", "/_granary/admin/users/" + name, body)
        assert status == 400 and b"InvalidArgument" in out, (body, out)
    names = {u["name"] for u in json.loads(admin(server, "user", "list").stdout)["users"]}
    assert name not in names
    status, out = signed(server, "PUT", "/_granary/admin/users/" + name,
                         b'{"secret_key": "s3cret-given"}')
    assert status == 200 and json.loads(out)["secret_key"] == "s3cret-given", out
    for method in ("GET", "POST"):
        status, out = signed(server, method, "/_granary/admin/users/" + name)
        assert status == 405 and b"MethodNotAllowed" in out, (method, out)
    admin(server, "user", "remove", name)


def test_only_the_root_user_may_use_the_admin_api(server):
    user = add_user(server, "nonroot-" + uuid.uuid4().hex[:8])
    for args in (["user", "list"], ["stats"], ["user", "add", "sneaky"]):
        res = admin(server, *args, access=user["access_key"], secret=user["secret_key"],
                    check=False)
        assert res.returncode != 0 and "AccessDenied" in res.stderr, args
    names = [u["name"] for u in json.loads(admin(server, "user", "list").stdout)["users"]]
    assert "sneaky" not in names


def test_users_own_their_buckets(server, s3):
    alice = user_client(server, add_user(server, "alice-" + uuid.uuid4().hex[:8]))
    bob = user_client(server, add_user(server, "bob-" + uuid.uuid4().hex[:8]))
    a_bucket = "alice-" + uuid.uuid4().hex[:12]
    alice.create_bucket(Bucket=a_bucket)
    alice.put_object(Bucket=a_bucket, Key="k", Body=b"alice's")
    assert alice.get_object(Bucket=a_bucket, Key="k")["Body"].read() == b"alice's"
    assert [b["Name"] for b in alice.list_buckets()["Buckets"]] == [a_bucket]
    # Bob sees none of it and can touch none of it.
    assert a_bucket not in [b["Name"] for b in bob.list_buckets()["Buckets"]]
    for call in (lambda: bob.get_object(Bucket=a_bucket, Key="k"),
                 lambda: bob.put_object(Bucket=a_bucket, Key="k", Body=b"bob's"),
                 lambda: bob.delete_object(Bucket=a_bucket, Key="k"),
                 lambda: bob.list_objects_v2(Bucket=a_bucket),
                 lambda: bob.delete_bucket(Bucket=a_bucket),
                 lambda: bob.get_bucket_acl(Bucket=a_bucket),
                 lambda: bob.put_bucket_acl(Bucket=a_bucket, ACL="public-read"),
                 lambda: bob.create_multipart_upload(Bucket=a_bucket, Key="m")):
        with pytest.raises(botocore.exceptions.ClientError) as e:
            call()
        assert error_code(e) == "AccessDenied"
    with pytest.raises(botocore.exceptions.ClientError) as e:
        bob.create_bucket(Bucket=a_bucket)
    assert error_code(e) == "BucketAlreadyExists"
    with pytest.raises(botocore.exceptions.ClientError) as e:
        alice.create_bucket(Bucket=a_bucket)
    assert error_code(e) == "BucketAlreadyOwnedByYou"
    # Copying out of Alice's private bucket is reading it: denied to Bob.
    b_bucket = "bob-" + uuid.uuid4().hex[:12]
    bob.create_bucket(Bucket=b_bucket)
    with pytest.raises(botocore.exceptions.ClientError) as e:
        bob.copy_object(Bucket=b_bucket, Key="stolen", CopySource={"Bucket": a_bucket, "Key": "k"})
    assert error_code(e) == "AccessDenied"
    # A user's request on a bucket nobody has: NoSuchBucket, as S3 answers.
    with pytest.raises(botocore.exceptions.ClientError) as e:
        bob.get_object(Bucket="no-such-" + uuid.uuid4().hex[:8], Key="k")
    assert error_code(e) == "NoSuchBucket"
    # Unchanged by Bob's attempts; the root user reaches everything and lists every bucket.
    assert alice.get_object(Bucket=a_bucket, Key="k")["Body"].read() == b"alice's"
    assert s3.get_object(Bucket=a_bucket, Key="k")["Body"].read() == b"alice's"
    names = [b["Name"] for b in s3.list_buckets()["Buckets"]]
    assert a_bucket in names and b_bucket in names
    acl = s3.get_bucket_acl(Bucket=a_bucket)
    assert acl["Owner"]["ID"].startswith("alice-")


def test_public_read_bucket_serves_anonymous_reads_only(server, s3):
    name = "pub-" + uuid.uuid4().hex[:12]
    s3.create_bucket(Bucket=name)
    s3.put_object(Bucket=name, Key="data/shard-0.tar", Body=b"public bytes")
    anon = botocore_unsigned(server)
    # Private by default.
    with pytest.raises(botocore.exceptions.ClientError) as e:
        anon.get_object(Bucket=name, Key="data/shard-0.tar")
    assert error_code(e) == "AccessDenied"
    acl = s3.get_bucket_acl(Bucket=name)
    assert [g["Permission"] for g in acl["Grants"]] == ["FULL_CONTROL"]

    server.aws("s3api", "put-bucket-acl", "--bucket", name, "--acl", "public-read")
    grants = s3.get_bucket_acl(Bucket=name)["Grants"]
    assert {"Type": "Group", "URI": "http://acs.amazonaws.com/groups/global/AllUsers"} in [
        g["Grantee"] for g in grants]
    assert anon.get_object(Bucket=name, Key="data/shard-0.tar")["Body"].read() == b"public bytes"
    r = anon.get_object(Bucket=name, Key="data/shard-0.tar", Range="bytes=7-11")
    assert r["Body"].read() == b"bytes"
    assert anon.head_object(Bucket=name, Key="data/shard-0.tar")["ContentLength"] == 12
    part = anon.get_object(Bucket=name, Key="data/shard-0.tar", PartNumber=1)
    assert (part["ContentRange"], part["Body"].read()) == ("bytes 0-11/12", b"public bytes")
    assert [o["Key"] for o in anon.list_objects_v2(Bucket=name)["Contents"]] == [
        "data/shard-0.tar"]
    assert [(v["Key"], v["VersionId"]) for v in
            anon.list_object_versions(Bucket=name)["Versions"]] == [("data/shard-0.tar", "null")]
    # Record reads too, by WARC record type included (no record here: listed empty, found
    # missing, but not refused).
    import urllib3
    pool = urllib3.PoolManager()
    listed = pool.request("GET", f"{server.endpoint}/{name}?records&type=request")
    assert listed.status == 200, listed.data
    missing = pool.request("GET", f"{server.endpoint}/{name}?record&key=k&type=%2A")
    assert missing.status == 404 and b"<Code>AccessDenied</Code>" not in missing.data
    # Response overrides are a signed reader's: an anonymous GET cannot make a public
    # object be served as HTML (InvalidRequest, S3's answer).
    with pytest.raises(botocore.exceptions.ClientError) as e:
        anon.get_object(Bucket=name, Key="data/shard-0.tar", ResponseContentType="text/html")
    assert error_code(e) == "InvalidRequest"
    # Writes, deletes and the bucket's settings stay the owner's.
    for call in (lambda: anon.put_object(Bucket=name, Key="x", Body=b"x"),
                 lambda: anon.delete_object(Bucket=name, Key="data/shard-0.tar"),
                 lambda: anon.get_bucket_acl(Bucket=name),
                 lambda: anon.put_bucket_acl(Bucket=name, ACL="private"),
                 lambda: anon.list_buckets(),
                 lambda: anon.create_multipart_upload(Bucket=name, Key="m")):
        with pytest.raises(botocore.exceptions.ClientError) as e:
            call()
        assert error_code(e) == "AccessDenied"
    # Another user may read it too (AllUsers), but not write.
    other = user_client(server, add_user(server, "reader-" + uuid.uuid4().hex[:8]))
    assert other.get_object(Bucket=name, Key="data/shard-0.tar")["Body"].read() == b"public bytes"
    # So may a URL that user presigned (SigV4 by aws-cli, and boto3's default), though its
    # signature's parameters are no public read's.
    r = other.generate_presigned_url("get_object",
                                     Params={"Bucket": name, "Key": "data/shard-0.tar"})
    got = pool.request("GET", r)
    assert got.status == 200 and got.data == b"public bytes", got.data
    with pytest.raises(botocore.exceptions.ClientError) as e:
        other.put_object(Bucket=name, Key="x", Body=b"x")
    assert error_code(e) == "AccessDenied"
    # Back to private.
    s3.put_bucket_acl(Bucket=name, ACL="private")
    with pytest.raises(botocore.exceptions.ClientError) as e:
        anon.get_object(Bucket=name, Key="data/shard-0.tar")
    assert error_code(e) == "AccessDenied"


def test_canned_acls_beyond_public_read_are_refused(s3):
    name = "acl-" + uuid.uuid4().hex[:12]
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.create_bucket(Bucket=name, ACL="public-read-write")
    assert error_code(e) == "NotImplemented"
    s3.create_bucket(Bucket=name, ACL="public-read")
    grants = s3.get_bucket_acl(Bucket=name)["Grants"]
    assert any(g["Grantee"].get("URI", "").endswith("/AllUsers") for g in grants)
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.put_bucket_acl(Bucket=name, ACL="authenticated-read")
    assert error_code(e) == "NotImplemented"


def test_object_acls_are_the_buckets(server, s3):
    name = "objacl-" + uuid.uuid4().hex[:12]
    s3.create_bucket(Bucket=name)
    s3.put_object(Bucket=name, Key="k", Body=b"x")
    acl = s3.get_object_acl(Bucket=name, Key="k")
    assert [g["Permission"] for g in acl["Grants"]] == ["FULL_CONTROL"]
    out = json.loads(server.aws("s3api", "get-object-acl", "--bucket", name, "--key",
                                "k").stdout)
    assert out["Owner"] == acl["Owner"]
    # What it already has is accepted (pipelines send this on every upload); another is not.
    s3.put_object_acl(Bucket=name, Key="k", ACL="bucket-owner-full-control")
    server.aws("s3api", "put-object-acl", "--bucket", name, "--key", "k", "--acl", "private")
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.put_object_acl(Bucket=name, Key="k", ACL="public-read")
    assert error_code(e) == "NotImplemented"
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.get_object_acl(Bucket=name, Key="missing")
    assert error_code(e) == "NoSuchKey"
    s3.put_bucket_acl(Bucket=name, ACL="public-read")
    grants = s3.get_object_acl(Bucket=name, Key="k")["Grants"]
    assert any(g["Grantee"].get("URI", "").endswith("/AllUsers") for g in grants)


def test_s3cmd_setacl_public_and_private(server, s3, tmp_path):
    cfg = tmp_path / "s3cfg"
    host = server.endpoint.removeprefix("http://")
    cfg.write_text(f"[default]\naccess_key = {server.access_key}\nsecret_key = "
                   f"{server.secret_key}\nhost_base = {host}\nhost_bucket = {host}\n"
                   "use_https = False\nsignature_v2 = False\n")
    name = "s3cmd-acl-" + uuid.uuid4().hex[:8]
    s3.create_bucket(Bucket=name)
    s3.put_object(Bucket=name, Key="f", Body=b"s3cmd")

    def s3cmd(*args):
        res = subprocess.run([S3CMD, "-c", str(cfg), *args], capture_output=True, text=True,
                             timeout=60)
        assert res.returncode == 0, f"s3cmd {args}: {res.stderr}"
        return res.stdout

    anon = botocore_unsigned(server)
    s3cmd("setacl", "--acl-public", f"s3://{name}")
    assert anon.get_object(Bucket=name, Key="f")["Body"].read() == b"s3cmd"
    s3cmd("setacl", "--acl-private", f"s3://{name}")
    with pytest.raises(botocore.exceptions.ClientError) as e:
        anon.get_object(Bucket=name, Key="f")
    assert error_code(e) == "AccessDenied"


def test_users_survive_a_restart(granary_bin, tmp_data):
    srv = Server(tmp_data).start()
    try:
        user = add_user(srv, "persistent")
        c = user_client(srv, user)
        c.create_bucket(Bucket="persistent-bucket")
        c.put_object(Bucket="persistent-bucket", Key="k", Body=b"kept")
        srv.stop()
        srv.start()
        c = user_client(srv, user)
        assert c.get_object(Bucket="persistent-bucket", Key="k")["Body"].read() == b"kept"
        assert [b["Name"] for b in c.list_buckets()["Buckets"]] == ["persistent-bucket"]
    finally:
        srv.stop()


def test_no_request_reaches_a_bucket_through_another_name_or_unsigned_headers(server, s3):
    """Bucket "b%2Fpriv" with key "k" must not be bucket "b"'s "priv/k" (the index keys
    objects "bucket/key"), and an x-amz-* header added to a presigned URL must not change
    what it does (x-amz-copy-source would turn a PUT into a copy of what the signer reads)."""
    import urllib.error
    import urllib.request
    alice = user_client(server, add_user(server, "alice-" + uuid.uuid4().hex[:8]))
    private = "priv-" + uuid.uuid4().hex[:12]
    alice.create_bucket(Bucket=private)
    alice.put_object(Bucket=private, Key="dir/secret", Body=b"alice's secret")
    for path in (f"/{private}%2Fdir/secret", f"/{private}%2fdir/secret?tagging",
                 f"/{private}%2Fdir%2Fsecret"):
        status, body = signed(server, "GET", path)
        assert status == 400 and b"<Code>InvalidBucketName</Code>" in body, (path, body)
        assert b"alice's secret" not in body

    url = alice.generate_presigned_url("put_object", Params={"Bucket": private, "Key": "up"},
                                       ExpiresIn=300)

    def put(headers):
        req = urllib.request.Request(url, data=b"", method="PUT", headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                return resp.status, resp.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()

    status, body = put({"x-amz-copy-source": f"/{private}/dir/secret"})
    assert status == 403 and b"<Code>AccessDenied</Code>" in body, body
    assert b"x-amz-copy-source" in body
    with pytest.raises(botocore.exceptions.ClientError) as e:
        alice.head_object(Bucket=private, Key="up")
    assert e.value.response["Error"]["Code"] == "404"
    assert put({})[0] == 200  # the URL as signed still works
    assert alice.get_object(Bucket=private, Key="up")["Body"].read() == b""
