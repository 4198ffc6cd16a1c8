#!/usr/bin/env python3
"""Writes the expected record lists (and synthetic fixtures) for container_parser_test.

The expected values come from implementations independent of the C++ parser under test:
  - tar: Python's tarfile (TarInfo.offset_data, TarInfo.size),
  - gzip member boundaries: zlib.decompressobj(31) and its unused_data,
  - WARC: a small parser written here from the WARC 1.1 spec,
  - CRC32C: a table implementation below (reflected polynomial 0x82F63B78).

Output: one <file>.expected per container, one record per line:
    key <TAB> offset <TAB> length <TAB> crc32c as 8 hex digits <TAB> type
Synthetic fixtures (written here, deterministic) are stored next to this script.

Usage: gen_expected.py [SHARED_TESTDATA_DIR]   (default: <repo>/../shared/testdata)
Run it again after changing a fixture, and commit its output.
"""
import gzip
import io
import os
import re
import struct
import sys
import tarfile
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, "..", "..", "..", ".."))
SHARED = sys.argv[1] if len(sys.argv) > 1 else os.path.join(REPO, "..", "shared", "testdata")


def _crc32c_table():
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_TABLE = _crc32c_table()


def crc32c(data):
    c = 0xFFFFFFFF
    for b in data:
        c = _TABLE[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


assert crc32c(b"123456789") == 0xE3069283


def write_expected(name, rows):
    path = os.path.join(HERE, name + ".expected")
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        for key, offset, length, crc, typ in rows:
            assert "\t" not in key and "\n" not in key, key
            f.write(f"{key}\t{offset}\t{length}\t{crc:08x}\t{typ}\n")
    print(f"{path}: {len(rows)} records")


# ---- tar ------------------------------------------------------------------------------

def tar_rows(path):
    data = open(path, "rb").read()
    rows = []
    with tarfile.open(path, "r:") as tf:
        for m in tf.getmembers():
            if not m.isreg() or m.issparse():  # a sparse member's data is not contiguous
                continue
            chunk = data[m.offset_data:m.offset_data + m.size]
            assert len(chunk) == m.size
            rows.append((m.name, m.offset_data, m.size, crc32c(chunk), ""))
    return rows


# ---- WARC -----------------------------------------------------------------------------

def parse_warc_record(buf, pos):
    """Parses the record starting at buf[pos]; returns (headers, end) where end is one past
    the record's trailing CRLF CRLF. Header names are lower-cased."""
    head_end = buf.index(b"\r\n\r\n", pos)
    lines = buf[pos:head_end].decode("utf-8").split("\r\n")
    assert re.fullmatch(r"WARC/\d+\.\d+", lines[0]), lines[0]
    headers = {}
    last = None
    for line in lines[1:]:
        if line[:1] in (" ", "\t"):
            headers[last] += " " + line.strip()
            continue
        name, value = line.split(":", 1)
        last = name.strip().lower()
        headers[last] = value.strip(" \t")
    length = int(headers["content-length"])
    block_end = head_end + 4 + length
    assert buf[block_end:block_end + 4] == b"\r\n\r\n", (pos, buf[block_end:block_end + 4])
    return headers, block_end + 4


def warc_key(headers, key_kind):
    if key_kind == "uri":
        v = headers.get("warc-target-uri", "").strip()
        if v.startswith("<") and v.endswith(">"):
            v = v[1:-1].strip()
        return v
    return headers.get("warc-record-id", "").strip()


def warc_rows(path, key_kind="uri"):
    data = open(path, "rb").read()
    rows, pos = [], 0
    while pos < len(data):
        headers, end = parse_warc_record(data, pos)
        key = warc_key(headers, key_kind)
        if key:
            rows.append((key, pos, end - pos, crc32c(data[pos:end]), headers.get("warc-type", "")))
        pos = end
    return rows


def gzip_members(data):
    """[(offset, compressed length, inflated bytes)] from zlib, one entry per gzip member."""
    members, pos = [], 0
    while pos < len(data):
        d = zlib.decompressobj(31)
        out = d.decompress(data[pos:])
        assert d.eof, f"truncated gzip member at {pos}"
        length = len(data) - pos - len(d.unused_data)
        members.append((pos, length, out))
        pos += length
    return members


def warcgz_rows(path, key_kind="uri"):
    data = open(path, "rb").read()
    rows = []
    for offset, length, out in gzip_members(data):
        headers, end = parse_warc_record(out, 0)
        assert end == len(out), f"{path}: member at {offset} holds more than one record"
        key = warc_key(headers, key_kind)
        if key:
            rows.append((key, offset, length, crc32c(data[offset:offset + length]),
                         headers.get("warc-type", "")))
    return rows


# ---- synthetic fixtures -----------------------------------------------------------------

def _add(tf, name, payload=None, **kw):
    ti = tarfile.TarInfo(name)
    ti.mtime = 1_700_000_000
    ti.mode = 0o644
    for k, v in kw.items():
        setattr(ti, k, v)
    if payload is not None:
        ti.size = len(payload)
        tf.addfile(ti, io.BytesIO(payload))
    else:
        tf.addfile(ti)


def make_synthetic_tars():
    long_path = "/".join(["d%02d_" % i + "x" * 20 for i in range(12)]) + "/sample.bin"
    long_path = long_path[:296] + ".bin"
    assert len(long_path) == 300
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tf:
        _add(tf, "shard", type=tarfile.DIRTYPE, mode=0o755)
        _add(tf, long_path, b"pax long path payload\n" * 7)
        _add(tf, "shard/empty.txt", b"")
        _add(tf, "shard/unicod\u00e9.json", b'{"k": "v"}')
        _add(tf, "shard/link", type=tarfile.SYMTYPE, linkname="empty.txt")
        _add(tf, "shard/hard", type=tarfile.LNKTYPE, linkname="shard/empty.txt")
        _add(tf, "shard/exactly512.bin", bytes(range(256)) * 2)
    open(os.path.join(HERE, "synthetic_pax.tar"), "wb").write(buf.getvalue())

    gnu_name = "gnu/" + "n" * 150 + ".txt"
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tf:
        _add(tf, "gnu", type=tarfile.DIRTYPE, mode=0o755)
        _add(tf, gnu_name, b"gnu long name payload\n" * 3)
        _add(tf, "gnu/l" + "k" * 120, type=tarfile.SYMTYPE, linkname="t" * 130)
        _add(tf, "gnu/short.txt", b"short")
    open(os.path.join(HERE, "synthetic_gnu.tar"), "wb").write(buf.getvalue())


def _gzip_member(payload, level, flags=0, mtime=0):
    """A gzip member written by hand so that header flags (FEXTRA, FNAME, FCOMMENT, FHCRC)
    and deflate levels (0 gives stored blocks) vary."""
    hdr = struct.pack("<BBBBIBB", 0x1F, 0x8B, 8, flags, mtime, 0, 3)
    if flags & 4:
        extra = b"AB\x04\x00wxyz"
        hdr += struct.pack("<H", len(extra)) + extra
    if flags & 8:
        hdr += b"record.warc\x00"
    if flags & 16:
        hdr += b"a comment\x00"
    if flags & 2:
        hdr += struct.pack("<H", zlib.crc32(hdr) & 0xFFFF)
    co = zlib.compressobj(level, zlib.DEFLATED, -15)
    body = co.compress(payload) + co.flush()
    return hdr + body + struct.pack("<II", zlib.crc32(payload), len(payload) & 0xFFFFFFFF)


def make_synthetic_warcgz():
    plain = open(os.path.join(SHARED, "warc", "example.warc"), "rb").read()
    records, pos = [], 0
    while pos < len(plain):
        _, end = parse_warc_record(plain, pos)
        records.append(plain[pos:end])
        pos = end
    variants = [(0, 0), (1, 8), (9, 4 | 8 | 16 | 2), (6, 2), (0, 16), (9, 0)]
    out = b"".join(_gzip_member(r, *variants[i % len(variants)]) for i, r in enumerate(records))
    # Check our hand-written members against Python's gzip reader too.
    assert gzip.decompress(out) == plain
    open(os.path.join(HERE, "synthetic_members.warc.gz"), "wb").write(out)


def make_stress_warcgz():
    """Many members of varied sizes, content and deflate levels (stored, fixed and dynamic
    Huffman blocks), so that member ends fall at every bit alignment."""
    import random
    rng = random.Random(20240611)
    words = [b"alpha", b"beta", b"gamma", b"delta", b"\r\n", b"<p>", b"0123456789"]
    members = []
    for i in range(48):
        kind = i % 4
        n = rng.choice([0, 1, 7, 100, 1000, rng.randrange(0, 6000)])
        if kind == 0:
            block = rng.randbytes(n)
        elif kind == 1:
            block = b"".join(rng.choice(words) for _ in range(n // 4 + 1))[:n]
        elif kind == 2:
            block = bytes(n)
        else:
            block = rng.randbytes(n // 2) + bytes(n - n // 2)
        uri = f"https://stress.example/{i}?n={n}"
        head = (f"WARC/1.1\r\nWARC-Type: resource\r\nWARC-Target-URI: {uri}\r\n"
                f"WARC-Record-ID: <urn:uuid:00000000-0000-0000-0000-{i:012d}>\r\n"
                f"Content-Length: {len(block)}\r\n\r\n").encode()
        record = head + block + b"\r\n\r\n"
        level = [0, 1, 6, 9][rng.randrange(4)]
        flags = rng.choice([0, 0, 8, 2 | 16, 4])
        members.append(_gzip_member(record, level, flags))
    out = b"".join(members)
    assert len(gzip.decompress(out)) > 0
    open(os.path.join(HERE, "stress.warc.gz"), "wb").write(out)


def make_bomb():
    """One record of 32 MiB of zeros: about 32 KiB compressed (refused with a small
    max_inflated_member, accepted by default)."""
    block = bytes(32 << 20)
    head = (f"WARC/1.0\r\nWARC-Type: resource\r\nWARC-Target-URI: http://bomb.example/\r\n"
            f"Content-Length: {len(block)}\r\n\r\n").encode()
    open(os.path.join(HERE, "bomb.warc.gz"), "wb").write(
        _gzip_member(head + block + b"\r\n\r\n", 9))


def main():
    make_synthetic_tars()
    make_synthetic_warcgz()
    make_stress_warcgz()
    make_bomb()
    shared = lambda *p: os.path.join(SHARED, *p)
    for name in ["tendata.tar", "mpdata.tar", "compressed.tar"]:
        write_expected(name, tar_rows(shared("webdataset", name)))
    # gnu_sparse.tar: written by GNU tar 1.34 (tarfile cannot write sparse members):
    # `tar --format=gnu -S -cf gnu_sparse.tar sparse.bin after.txt`, sparse.bin having six
    # data regions, so its old-GNU sparse header is followed by an extension block.
    for name in ["synthetic_pax.tar", "synthetic_gnu.tar", "gnu_sparse.tar"]:
        write_expected(name, tar_rows(os.path.join(HERE, name)))
    for name in ["example.warc", "example-iana.org-chunked.warc"]:
        write_expected(name, warc_rows(shared("warc", name)))
    write_expected("example.warc.record-id", warc_rows(shared("warc", "example.warc"), "record-id"))
    for name in ["example.warc.gz", "example-resource.warc.gz",
                 "example-space-in-target-uri.warc.gz", "example-wget-bad-target-uri.warc.gz",
                 "post-test.warc.gz"]:
        write_expected(name, warcgz_rows(shared("warc", name)))
    write_expected("example.warc.gz.record-id",
                   warcgz_rows(shared("warc", "example.warc.gz"), "record-id"))
    for name in ["synthetic_members.warc.gz", "stress.warc.gz", "bomb.warc.gz"]:
        write_expected(name, warcgz_rows(os.path.join(HERE, name)))


if __name__ == "__main__":
    main()
