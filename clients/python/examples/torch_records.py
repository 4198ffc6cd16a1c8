"""A PyTorch IterableDataset over tar shards stored in Granary with a record index
(docs/record-index.md): each worker walks its share of the shards, lists a shard's rows in
container order, fetches them with streamed batch gets, groups WebDataset members into
samples ("000123.jpg" + "000123.cls" -> {"__key__": "000123", "jpg": ..., "cls": ...}) and
shuffles samples through a buffer. Shards are reshuffled every epoch.

    python3 torch_records.py http://127.0.0.1:9000 ACCESS SECRET bucket shards/
"""
import os
import random
import sys
import time

import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from granary_records import RecordClient  # noqa: E402


def _split_name(name):
    """WebDataset convention: the sample key is the path up to the first dot of the
    basename, the field is what follows ("a/b/000123.seg.png" -> "a/b/000123", "seg.png")."""
    slash = name.rfind("/") + 1
    dot = name.find(".", slash)
    if dot < 0:
        return name, ""
    return name[:dot], name[dot + 1:]


class RecordShardDataset(IterableDataset):
    def __init__(self, endpoint, access_key, secret_key, bucket, shards, shuffle_buffer=1000,
                 batch=256, seed=0, group_samples=True):
        super().__init__()
        self.conn = (endpoint, access_key, secret_key)
        self.bucket = bucket
        self.shards = list(shards)
        self.shuffle_buffer = shuffle_buffer
        self.batch = batch
        self.seed = seed
        self.epoch = 0
        self.group_samples = group_samples

    def set_epoch(self, epoch):
        self.epoch = epoch

    def _records(self, client, shard):
        """(name, bytes) of every record of one shard, in container order. A shard without
        records whose indexing did not succeed raises (RecordError "NotIndexed"), rather
        than add no samples unnoticed."""
        rows = list(client.container_records(self.bucket, shard, require_rows=True))
        for i in range(0, len(rows), self.batch):
            # By offset: a shard may hold one name twice (tar -r), a crawl one URI twice.
            want = [{"key": r["key"], "container": shard, "offset": r["offset"]}
                    for r in rows[i:i + self.batch]]
            yield from self._batch(client, shard, want)

    def _batch(self, client, shard, want, attempts=4):
        """The records of `want`, in order; those refused for a while (503: the server's
        buffer memory spent; 500) are asked for again, with backoff, before giving up."""
        got = [None] * len(want)
        todo = list(range(len(want)))
        for attempt in range(attempts):
            again = []
            # The stream is read to its end (the generator drives the index), so that its
            # connection goes back to the pool.
            for n, (header, body) in enumerate(client.batch_get(self.bucket,
                                                                [want[t] for t in todo],
                                                                type="*")):
                j = todo[n]
                if header["status"] == 200:
                    got[j] = (header["key"], body)
                elif header["status"] in (500, 503) and attempt + 1 < attempts:
                    again.append(j)
                else:
                    raise IOError(f"{shard}: {header['key']}: {header.get('code')} "
                                  f"{header.get('message')}")
            if not again:
                break
            time.sleep(0.1 * 2 ** attempt)
            todo = again
        yield from got

    def _samples(self, client, shard):
        if not self.group_samples:
            for name, body in self._records(client, shard):
                yield {"__key__": name, "__shard__": shard, "data": body}
            return
        current = None
        for name, body in self._records(client, shard):
            key, field = _split_name(name)
            if current is not None and current["__key__"] != key:
                yield current
                current = None
            if current is None:
                current = {"__key__": key, "__shard__": shard}
            current[field] = body
        if current is not None:
            yield current

    def __iter__(self):
        info = get_worker_info()
        worker, workers = (info.id, info.num_workers) if info else (0, 1)
        # Seeded with a str, which random hashes with SHA-512: the same in every worker
        # process (hash() of a str differs between processes).
        rng = random.Random(f"{self.seed}:{self.epoch}")
        shards = self.shards[:]
        rng.shuffle(shards)  # the same order in every worker, then split
        mine = shards[worker::workers]
        rng = random.Random(f"{self.seed}:{self.epoch}:{worker}")
        client = RecordClient(*self.conn)
        buffer = []
        for shard in mine:
            for sample in self._samples(client, shard):
                if len(buffer) < self.shuffle_buffer:
                    buffer.append(sample)
                    continue
                i = rng.randrange(len(buffer))
                buffer[i], sample = sample, buffer[i]
                yield sample
        rng.shuffle(buffer)
        yield from buffer


def main():
    endpoint, access, secret, bucket, prefix = sys.argv[1:6]
    import boto3
    s3 = boto3.client("s3", endpoint_url=endpoint, aws_access_key_id=access,
                      aws_secret_access_key=secret, region_name="us-east-1")
    shards = [o["Key"] for page in s3.get_paginator("list_objects_v2").paginate(
        Bucket=bucket, Prefix=prefix) for o in page.get("Contents", [])]
    ds = RecordShardDataset(endpoint, access, secret, bucket, shards)
    loader = DataLoader(ds, batch_size=None, num_workers=2)
    n = 0
    for sample in loader:
        n += 1
    print(f"{n} samples from {len(shards)} shards")


if __name__ == "__main__":
    main()
