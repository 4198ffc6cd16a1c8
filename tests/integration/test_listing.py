"""ListObjectsV2 / ListObjects through boto3 paginators and aws-cli."""
import concurrent.futures

import pytest


@pytest.fixture(scope="module")
def listing_bucket(s3):
    name = "listing-bucket"
    s3.create_bucket(Bucket=name)
    keys = []
    for d in range(10):
        for i in range(100):
            keys.append(f"dir{d:02d}/file {i:03d}+v%1.txt" if i % 10 == 0
                        else f"dir{d:02d}/sub/file-{i:03d}")
    keys += ["top-1", "top+2", "top 3", "top%4"]
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda k: s3.put_object(Bucket=name, Key=k, Body=k.encode()), keys))
    return name, sorted(keys)


def test_paginated_v2_listing_returns_every_key_once_in_order(s3, listing_bucket):
    name, keys = listing_bucket
    pages = s3.get_paginator("list_objects_v2").paginate(Bucket=name,
                                                         PaginationConfig={"PageSize": 77})
    got = [o["Key"] for p in pages for o in p.get("Contents", [])]
    assert got == keys
    assert len(keys) == 1004


def test_v1_listing_with_marker_pagination(s3, listing_bucket):
    name, keys = listing_bucket
    pages = s3.get_paginator("list_objects").paginate(Bucket=name,
                                                      PaginationConfig={"PageSize": 100})
    got = [o["Key"] for p in pages for o in p.get("Contents", [])]
    assert got == keys


def test_delimiter_groups_common_prefixes(s3, listing_bucket):
    name, keys = listing_bucket
    pages = s3.get_paginator("list_objects_v2").paginate(
        Bucket=name, Delimiter="/", PaginationConfig={"PageSize": 3})
    prefixes, objects = [], []
    for p in pages:
        prefixes += [c["Prefix"] for c in p.get("CommonPrefixes", [])]
        objects += [o["Key"] for o in p.get("Contents", [])]
    assert prefixes == [f"dir{d:02d}/" for d in range(10)]
    assert objects == sorted(["top-1", "top+2", "top 3", "top%4"])


def test_prefix_and_delimiter_one_level_down(s3, listing_bucket):
    name, keys = listing_bucket
    r = s3.list_objects_v2(Bucket=name, Prefix="dir03/", Delimiter="/")
    assert [c["Prefix"] for c in r["CommonPrefixes"]] == ["dir03/sub/"]
    assert [o["Key"] for o in r["Contents"]] == [k for k in keys
                                                if k.startswith("dir03/file ")]
    r = s3.list_objects_v2(Bucket=name, Prefix="dir03/sub/file-01")
    assert [o["Key"] for o in r["Contents"]] == [f"dir03/sub/file-{i:03d}"
                                                for i in range(11, 20)]


def test_start_after_and_max_keys(s3, listing_bucket):
    name, keys = listing_bucket
    r = s3.list_objects_v2(Bucket=name, StartAfter="dir05/sub/file-098", MaxKeys=3)
    assert [o["Key"] for o in r["Contents"]] == [k for k in keys if k > "dir05/sub/file-098"][:3]
    assert r["IsTruncated"] is True
    assert r["KeyCount"] == 3


def test_aws_cli_ls_recursive_sees_every_key(server, listing_bucket):
    name, keys = listing_bucket
    out = server.aws("s3", "ls", "--recursive", f"s3://{name}/").stdout
    listed = [line.split(None, 3)[3] for line in out.splitlines() if line.strip()]
    assert sorted(listed) == keys


def test_listing_a_missing_bucket_is_no_such_bucket(s3):
    import botocore.exceptions
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.list_objects_v2(Bucket="no-such-bucket-for-listing")
    assert e.value.response["Error"]["Code"] == "NoSuchBucket"


def test_a_key_with_a_carriage_return_lists_as_itself(server, s3, bucket):
    # Without encoding-type=url (s3cmd, the JS SDK, xml.etree readers) a raw CR would be
    # read back as LF: a key that does not exist.
    import xml.etree.ElementTree as ET
    from conftest import signed
    s3.put_object(Bucket=bucket, Key="a\rb", Body=b"cr")
    s3.put_object(Bucket=bucket, Key="c\r\nd", Body=b"crlf")
    status, body = signed(server, "GET", f"/{bucket}?list-type=2")
    assert status == 200
    ns = {"s3": "http://s3.amazonaws.com/doc/2006-03-01/"}
    keys = [k.text for k in ET.fromstring(body).findall("s3:Contents/s3:Key", ns)]
    assert "a\rb" in keys and "c\r\nd" in keys
    assert s3.get_object(Bucket=bucket, Key="a\rb")["Body"].read() == b"cr"


def test_v1_next_marker_only_with_a_delimiter(s3, listing_bucket):
    # S3 sends NextMarker only with a delimiter; without one a client resumes after the
    # last key it got.
    name, keys = listing_bucket
    r = s3.list_objects(Bucket=name, MaxKeys=1)
    assert r["IsTruncated"] is True and "NextMarker" not in r
    r = s3.list_objects(Bucket=name, MaxKeys=1, Delimiter="/")
    assert r["IsTruncated"] is True and r["NextMarker"] == "dir00/"
