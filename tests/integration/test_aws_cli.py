"""aws-cli: cp and sync of folders whose names need URL encoding."""
import filecmp
import os

MiB = 1024 * 1024


def make_tree(root):
    files = {
        "a.txt": 10,
        "with space.bin": 3 * MiB + 7,
        "plus+and%percent.dat": 200 * 1024,
        "nested/deeper/x.json": 1,
        "nested/empty.txt": 0,
        "nested/uni-\u00e9t\u00e9.txt": 5000,
        "big.bin": 7 * MiB,  # below aws-cli's 8 MiB multipart threshold
    }
    for rel, size in files.items():
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(os.urandom(size))
    return files


def test_cp_round_trip(server, bucket, tmp_path):
    src = tmp_path / "one.bin"
    src.write_bytes(os.urandom(5 * MiB + 3))
    server.aws("s3", "cp", str(src), f"s3://{bucket}/dir/one file.bin")
    dst = tmp_path / "back.bin"
    server.aws("s3", "cp", f"s3://{bucket}/dir/one file.bin", str(dst))
    assert dst.read_bytes() == src.read_bytes()


def test_sync_up_and_down_is_exact_and_idempotent(server, bucket, tmp_path):
    up = tmp_path / "up"
    files = make_tree(str(up))
    server.aws("s3", "sync", str(up), f"s3://{bucket}/tree")
    again = server.aws("s3", "sync", str(up), f"s3://{bucket}/tree").stdout
    assert "upload:" not in again, again  # nothing changed, nothing re-uploaded
    down = tmp_path / "down"
    server.aws("s3", "sync", f"s3://{bucket}/tree", str(down))
    for rel in files:
        assert filecmp.cmp(os.path.join(up, rel), os.path.join(down, rel), shallow=False), rel
    ls = server.aws("s3", "ls", "--recursive", f"s3://{bucket}/tree/").stdout
    assert len([line for line in ls.splitlines() if line.strip()]) == len(files)


def test_rm_and_rb(server, tmp_path):
    server.aws("s3", "mb", "s3://cli-rm-bucket")
    f = tmp_path / "f"
    f.write_bytes(b"hello")
    server.aws("s3", "cp", str(f), "s3://cli-rm-bucket/f")
    server.aws("s3", "rm", "s3://cli-rm-bucket/f")
    server.aws("s3", "rb", "s3://cli-rm-bucket")
    out = server.aws("s3", "ls").stdout
    assert "cli-rm-bucket" not in out
