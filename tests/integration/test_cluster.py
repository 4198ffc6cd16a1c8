"""Cluster mode (issue 7) on loopback, started with scripts/cluster-up.sh exactly as the
README documents it: 1 index service, 6 chunk servers in distinct failure domains
(EC 4+2), 2 stateless gateways, all real `granary` processes, driven with boto3 and
aws-cli. Processes are killed with SIGKILL and restarted through the same script."""
import hashlib
import json
import os
import random
import re
import shutil
import signal
import subprocess
import threading
import time

import boto3
import pytest
import requests
from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.config import Config
from botocore.credentials import Credentials

from conftest import GRANARY, REPO, free_port
from test_chunkserver import sign

UP = os.path.join(REPO, "scripts", "cluster-up.sh")
DOWN = os.path.join(REPO, "scripts", "cluster-down.sh")


class Cluster:
    def __init__(self, directory):
        self.dir = str(directory)
        self.ports = [free_port(), free_port()]
        self.env = dict(os.environ)
        self.env.update({
            "GRANARY_BIN": GRANARY,
            "GRANARY_CLUSTER_DIR": self.dir,
            "GRANARY_GATEWAY_PORTS": " ".join(map(str, self.ports)),
            "GRANARY_GATEWAY_ARGS":
                "--event-loops 2 --gc-grace 1 --gc-interval 1 --leader-lease 3",
        })

    def up(self):
        """Starts (or restarts) every process that is not running; returns the output."""
        res = subprocess.run(["bash", UP], env=self.env, capture_output=True, text=True,
                             timeout=120)
        assert res.returncode == 0, res.stdout + res.stderr
        with open(os.path.join(self.dir, "root-credentials.json")) as f:
            creds = json.load(f)
        self.access_key, self.secret_key = creds["access_key"], creds["secret_key"]
        return res.stdout

    def down(self):
        subprocess.run(["bash", DOWN], env=self.env, capture_output=True, timeout=60)

    def pid(self, name):
        with open(os.path.join(self.dir, "pids", name)) as f:
            return int(f.read())

    def kill9(self, *names):
        for name in names:
            os.kill(self.pid(name), signal.SIGKILL)
        for name in names:
            for _ in range(100):
                try:
                    os.kill(self.pid(name), 0)
                except ProcessLookupError:
                    break
                time.sleep(0.05)

    def rewrite_map(self, cmap):
        """Writes the cluster map and restarts both gateways, which read it at start."""
        with open(os.path.join(self.dir, "cluster.json"), "w") as f:
            json.dump(cmap, f, indent=2)
        for gw in ("gw0", "gw1"):
            os.kill(self.pid(gw), signal.SIGTERM)
        for gw in ("gw0", "gw1"):
            for _ in range(200):
                try:
                    os.kill(self.pid(gw), 0)
                    time.sleep(0.05)
                except ProcessLookupError:
                    break
        self.up()

    def wipe_log_tail(self, name):
        with open(os.path.join(self.dir, "logs", name + ".log"), errors="replace") as f:
            return f.read()[-3000:]

    def endpoint(self, gateway):
        return f"http://127.0.0.1:{self.ports[gateway]}"

    def client(self, gateway=0, attempts=1):
        cfg = Config(s3={"addressing_style": "path"}, signature_version="s3v4",
                     retries={"max_attempts": attempts, "mode": "standard"},
                     connect_timeout=5, read_timeout=60)
        return boto3.client("s3", endpoint_url=self.endpoint(gateway), region_name="us-east-1",
                            aws_access_key_id=self.access_key,
                            aws_secret_access_key=self.secret_key, config=cfg)

    def admin_status(self, gateway=0):
        """`granary admin status` through a gateway, parsed."""
        env = dict(os.environ)
        env.update({"AWS_ACCESS_KEY_ID": self.access_key,
                    "AWS_SECRET_ACCESS_KEY": self.secret_key})
        res = subprocess.run([GRANARY, "admin", "status", "--endpoint", self.endpoint(gateway)],
                             env=env, capture_output=True, text=True, timeout=60)
        assert res.returncode == 0, res.stderr
        return json.loads(res.stdout)

    def admin(self, gateway, *args):
        """`granary admin ARGS` through a gateway, its JSON output parsed."""
        env = dict(os.environ)
        env.update({"AWS_ACCESS_KEY_ID": self.access_key,
                    "AWS_SECRET_ACCESS_KEY": self.secret_key})
        res = subprocess.run([GRANARY, "admin", *args, "--endpoint", self.endpoint(gateway)],
                             env=env, capture_output=True, text=True, timeout=600)
        assert res.returncode == 0, res.stderr
        return json.loads(res.stdout)

    def fragment_layout(self, bucket, key):
        """Where the gateway's index says each fragment is (GET /_granary/admin/object)."""
        url = f"{self.endpoint(0)}/_granary/admin/object?bucket={bucket}&key={key}"
        req = AWSRequest(method="GET", url=url)
        S3SigV4Auth(Credentials(self.access_key, self.secret_key), "s3",
                    "us-east-1").add_auth(req)
        r = requests.get(url, headers=dict(req.headers), timeout=30)
        assert r.status_code == 200, r.text
        return r.json()

    def fragment_on_server(self, drive, blob):
        """HEAD of one fragment on its chunk server, through the internal API: its length
        or None (404)."""
        with open(os.path.join(self.dir, "cluster.json")) as f:
            endpoint = {d["id"]: d["endpoint"] for d in json.load(f)["drives"]}[drive]
        with open(os.path.join(self.dir, "cluster-secret")) as f:
            secret = f.read().strip()
        path = f"/internal/v1/drives/{drive}/blobs/{blob}"
        r = requests.head(f"http://{endpoint}{path}", timeout=10,
                          headers=sign("HEAD", path, "", b"", secret=secret))
        if r.status_code == 404:
            return None
        assert r.status_code == 200, (drive, blob, r.status_code, r.headers)
        return int(r.headers["x-granary-blob-length"])

    def aws(self, gateway, *args):
        env = dict(os.environ)
        env.update({"AWS_ACCESS_KEY_ID": self.access_key,
                    "AWS_SECRET_ACCESS_KEY": self.secret_key,
                    "AWS_DEFAULT_REGION": "us-east-1", "AWS_CONFIG_FILE": "/dev/null",
                    "AWS_SHARED_CREDENTIALS_FILE": "/dev/null", "AWS_PAGER": ""})
        res = subprocess.run(["/usr/bin/aws", "--endpoint-url", self.endpoint(gateway)] +
                             list(args), env=env, capture_output=True, text=True, timeout=300)
        assert res.returncode == 0, res.stderr
        return res.stdout


@pytest.fixture(scope="module")
def cluster(granary_bin, tmp_path_factory):
    c = Cluster(tmp_path_factory.mktemp("cluster"))
    try:
        c.up()
        yield c
    finally:
        c.down()


@pytest.fixture
def healthy(cluster):
    """The cluster with every process running again after the test."""
    yield cluster
    cluster.up()


def body_of(seed, size):
    return random.Random(seed).randbytes(size)


def sha(b):
    return hashlib.sha256(b).hexdigest()


def test_cluster_up_prints_every_process_and_a_working_command(cluster):
    out = cluster.up()  # idempotent: everything is already running
    assert out.count("chunk server:") == 6
    assert out.count("S3 gateway:") == 2
    assert "index:" in out
    with open(os.path.join(cluster.dir, "cluster.json")) as f:
        cmap = json.load(f)
    assert cmap["ec"] == {"k": 4, "m": 2}
    assert len({d["domain"] for d in cmap["drives"]}) == 6
    status = cluster.admin_status(1)
    assert status["epoch"] == 1 and status["ec"] == {"k": 4, "m": 2}
    assert status["index"]["healthy"] and status["index"]["endpoint"] == cmap["index"]
    assert [s["server"] for s in status["servers"]] == [f"cs{i}" for i in range(6)]
    for server in status["servers"]:
        assert server["healthy"], server
        (drive,) = server["drives"]
        assert drive["writable"] and drive["capacity_bytes"] >= drive["available_bytes"] > 0
    assert status["domains"] == {"total": 6, "healthy": 6}


def test_gateways_are_stateless_either_serves_every_object(cluster):
    s3a, s3b = cluster.client(0), cluster.client(1)
    s3a.create_bucket(Bucket="stateless")
    sizes = {"empty": 0, "small": 1000, "one-stripe": 3 << 20, "multi-stripe": 9 << 20 | 77}
    for i, (key, size) in enumerate(sizes.items()):
        s3a.put_object(Bucket="stateless", Key=key, Body=body_of(i, size))
    for i, (key, size) in enumerate(sizes.items()):
        got = s3b.get_object(Bucket="stateless", Key=key)["Body"].read()
        assert got == body_of(i, size), key
    ranged = s3b.get_object(Bucket="stateless", Key="multi-stripe", Range="bytes=4194000-4194999")
    assert ranged["Body"].read() == body_of(3, 9 << 20 | 77)[4194000:4195000]
    listed = [o["Key"] for o in s3b.list_objects_v2(Bucket="stateless")["Contents"]]
    assert listed == sorted(sizes)
    # aws-cli multipart upload through one gateway, download through the other.
    src = os.path.join(cluster.dir, "mp.bin")
    with open(src, "wb") as f:
        f.write(body_of(99, 20 << 20))
    cluster.aws(0, "s3", "cp", src, "s3://stateless/mp.bin")
    dst = src + ".back"
    cluster.aws(1, "s3", "cp", "s3://stateless/mp.bin", dst)
    with open(dst, "rb") as f:
        assert f.read() == body_of(99, 20 << 20)
    s3b.delete_object(Bucket="stateless", Key="small")
    with pytest.raises(s3a.exceptions.NoSuchKey):
        s3a.get_object(Bucket="stateless", Key="small")
    # DeleteObjects through the remote index: a key that never existed counts as deleted,
    # as in AWS S3.
    gone = ["empty", "one-stripe", "never-written"]
    answer = s3a.delete_objects(Bucket="stateless",
                                Delete={"Objects": [{"Key": k} for k in gone]})
    assert sorted(d["Key"] for d in answer["Deleted"]) == sorted(gone)
    assert not answer.get("Errors")
    listed = [o["Key"] for o in s3b.list_objects_v2(Bucket="stateless")["Contents"]]
    assert listed == ["mp.bin", "multi-stripe"]
    with pytest.raises(s3b.exceptions.NoSuchKey):
        s3b.get_object(Bucket="stateless", Key="one-stripe")


class Load:
    """boto3 writers and readers on both gateways. Every object gets a fresh key, so an
    acknowledged PUT has exactly one right answer."""

    def __init__(self, cluster, bucket, writers=4, max_size=3 << 20, attempts=10,
                 min_size=None):
        self.cluster, self.bucket = cluster, bucket
        self.min_size = min_size  # every object at least this large (else a mix of sizes)
        self.acked = {}  # key -> (sha256, size, time acknowledged)
        self.attempted = {}  # key -> sha256 of every PUT sent, acknowledged or not
        self.put_errors = []
        self.get_errors = []
        self.wrong = []
        self.stop_flag = threading.Event()
        self.lock = threading.Lock()
        # Daemons: a test that fails before its stop() must not keep the interpreter (and
        # CI) waiting for them at exit.
        self.threads = [threading.Thread(target=self.writer, args=(i, max_size, attempts),
                                         daemon=True)
                        for i in range(writers)]
        self.threads.append(threading.Thread(target=self.reader, args=(attempts,), daemon=True))

    def start(self):
        for t in self.threads:
            t.start()
        return self

    def stop(self):
        self.stop_flag.set()
        for t in self.threads:
            t.join(300)

    def writer(self, n, max_size, attempts):
        s3 = self.cluster.client(n % 2, attempts)
        rng = random.Random(n)
        i = 0
        while not self.stop_flag.is_set():
            key = f"w{n}/{i:06d}"
            if self.min_size is not None:
                size = rng.randrange(self.min_size, max_size)
            else:
                size = rng.choice([0, 100, 5000, 200_000, rng.randrange(1, max_size)])
            data = body_of(f"{n}-{i}", size)
            with self.lock:
                self.attempted[key] = sha(data)
            try:
                s3.put_object(Bucket=self.bucket, Key=key, Body=data)
                with self.lock:
                    self.acked[key] = (sha(data), size, time.monotonic())
            except Exception as e:  # noqa: BLE001 - counted and reported
                self.put_errors.append((key, time.monotonic(), repr(e)[:300]))
            i += 1

    def reader(self, attempts):
        s3 = [self.cluster.client(0, attempts), self.cluster.client(1, attempts)]
        rng = random.Random(7)
        while not self.stop_flag.is_set():
            with self.lock:
                key = rng.choice(list(self.acked)) if self.acked else None
                digest = self.acked[key][0] if key else None
            if key is None:
                time.sleep(0.05)
                continue
            try:
                got = rng.choice(s3).get_object(Bucket=self.bucket, Key=key)["Body"].read()
                if sha(got) != digest:
                    self.wrong.append(key)
            except Exception as e:  # noqa: BLE001
                self.get_errors.append((key, repr(e)[:300]))

    def verify_listed(self, gateway=0):
        """Every key the bucket lists (acknowledged or not: a PUT whose answer was lost may
        have committed) reads back whole, with the bytes its PUT sent."""
        s3 = self.cluster.client(gateway, attempts=5)
        bad, listed = [], 0
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=self.bucket):
            for obj in page.get("Contents", []):
                listed += 1
                got = s3.get_object(Bucket=self.bucket, Key=obj["Key"])["Body"].read()
                if sha(got) != self.attempted.get(obj["Key"]):
                    bad.append(obj["Key"])
        assert listed >= len(self.acked)
        return bad

    def verify_all(self, gateway=1):
        s3 = self.cluster.client(gateway, attempts=5)
        bad = []
        for key, (digest, size, _) in sorted(self.acked.items()):
            got = s3.get_object(Bucket=self.bucket, Key=key)["Body"].read()
            if len(got) != size or sha(got) != digest:
                bad.append(key)
        return bad


def test_two_of_six_chunk_servers_killed_under_load_lose_nothing(healthy):
    cluster = healthy
    cluster.client(0).create_bucket(Bucket="outage")
    load = Load(cluster, "outage").start()
    time.sleep(3)
    before = len(load.acked)
    killed_at = time.monotonic()
    cluster.kill9("cs1", "cs4")
    time.sleep(10)
    load.stop()
    during = [k for k, v in load.acked.items() if v[2] > killed_at]
    print(f"outage: {before} PUTs before, {len(during)} during, {len(load.put_errors)} failed")
    assert before > 5, f"too little load before the outage: {before} PUTs"
    # New PUTs keep succeeding (the client retries what the outage's first moments fail).
    assert len(during) >= 10, f"only {len(during)} PUTs acknowledged during the outage"
    assert not load.put_errors, load.put_errors[:5]
    assert not load.wrong, load.wrong[:5]
    assert not load.get_errors, load.get_errors[:5]
    status = cluster.admin_status(0)
    down = sorted(s["server"] for s in status["servers"] if not s["healthy"])
    assert down == ["cs1", "cs4"] and status["domains"]["healthy"] == 4, status
    # The metrics say which drives did not answer, and show no stale figures for them.
    with open(os.path.join(cluster.dir, "cluster.json")) as f:
        server_of = {d["id"]: d["server"] for d in json.load(f)["drives"]}
    text = requests.get(cluster.endpoint(0) + "/_granary/metrics", timeout=10).text
    up = {m.group(1): float(m.group(2)) for m in
          re.finditer(r'^granary_drive_up\{drive="([^"]+)"\} (\S+)$', text, re.M)}
    assert up == {d: 0.0 if server in ("cs1", "cs4") else 1.0
                  for d, server in server_of.items()}, up
    shown = set(re.findall(r'^granary_drive_capacity_bytes\{drive="([^"]+)"\}', text, re.M))
    assert shown == {d for d, server in server_of.items() if server not in ("cs1", "cs4")}
    # Every acknowledged object, from before and during the outage, byte-exact while two
    # servers are still down, and again once they are back.
    assert load.verify_all(gateway=1) == []
    cluster.up()
    assert load.verify_all(gateway=0) == []
    deadline = time.monotonic() + 15
    while cluster.admin_status(0)["domains"]["healthy"] != 6:
        assert time.monotonic() < deadline, "restarted servers not seen healthy again"
        time.sleep(0.5)


def moved_puts(cluster):
    """granary_fragment_puts_moved_total, summed over both gateways."""
    total = 0.0
    for g in (0, 1):
        text = requests.get(cluster.endpoint(g) + "/_granary/metrics", timeout=10).text
        m = re.search(r"^granary_fragment_puts_moved_total (\S+)$", text, re.M)
        assert m, "granary_fragment_puts_moved_total missing"
        total += float(m.group(1))
    return total


def test_a_chunk_server_killed_mid_put_fails_no_put_even_without_client_retries(healthy):
    """Every PUT writes a fragment to each of the six servers: those in flight when one is
    killed, and those placed before a gateway has noticed, write that fragment to another
    drive instead. With the SDK's retries off, not one PUT fails."""
    cluster = healthy
    cluster.client(0).create_bucket(Bucket="moved")
    moved_before = moved_puts(cluster)
    # botocore's max_attempts counts retries: 0 is one attempt, none again.
    load = Load(cluster, "moved", writers=6, attempts=0, min_size=1 << 20).start()
    time.sleep(3)
    killed_at = time.monotonic()
    cluster.kill9("cs2")
    time.sleep(6)
    load.stop()
    during = [k for k, v in load.acked.items() if v[2] > killed_at]
    print(f"one server killed: {len(load.acked)} PUTs, {len(during)} after the kill, "
          f"{len(load.put_errors)} failed, {moved_puts(cluster) - moved_before} fragments moved")
    assert len(during) >= 5, f"only {len(during)} PUTs acknowledged after the kill"
    assert not load.put_errors, load.put_errors[:5]
    assert not load.wrong, load.wrong[:5]
    assert moved_puts(cluster) > moved_before, "no fragment write met the killed server"
    assert load.verify_all(gateway=1) == []


def test_gateway_killed_mid_put_leaves_each_object_absent_or_complete(healthy):
    cluster = healthy
    cluster.client(1).create_bucket(Bucket="midput")
    size = 64 << 20
    results = {}
    bodies = [body_of(i, size) for i in range(4)]

    def received():
        text = requests.get(cluster.endpoint(0) + "/_granary/metrics", timeout=10).text
        return sum(float(line.split()[-1]) for line in text.splitlines()
                   if line.startswith("granary_s3_received_bytes_total"))

    def put(i):
        try:
            cluster.client(0).put_object(Bucket="midput", Key=f"big{i}", Body=bodies[i])
            results[i] = "ok"
        except Exception as e:  # noqa: BLE001 - the gateway dies under it
            results[i] = repr(e)[:200]

    threads = [threading.Thread(target=put, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    # Killed once it has taken some of the bodies, not all of them.
    before = received()
    deadline = time.monotonic() + 30
    while received() - before < 40 << 20:
        assert time.monotonic() < deadline, "the PUTs did not start"
        time.sleep(0.05)
    cluster.kill9("gw0")
    for t in threads:
        t.join(120)
    s3 = cluster.client(1)
    complete = 0
    for i in range(4):
        try:
            got = s3.get_object(Bucket="midput", Key=f"big{i}")["Body"].read()
        except s3.exceptions.NoSuchKey:
            assert results.get(i) != "ok", f"big{i} was acknowledged but is missing"
            continue
        assert got == bodies[i], f"big{i} is partial or wrong"
        complete += 1
    # The kill interrupted at least one PUT (else this test proved nothing).
    assert any(r != "ok" for r in results.values()), results
    print(f"gateway kill: {complete} of 4 objects complete, results {results}")
    # The survivor serves and takes writes.
    s3.put_object(Bucket="midput", Key="after", Body=b"still here")
    assert s3.get_object(Bucket="midput", Key="after")["Body"].read() == b"still here"


def test_index_restart_under_load_gives_errors_or_retries_never_wrong_data(healthy):
    cluster = healthy
    cluster.client(0).create_bucket(Bucket="idxrestart")
    # Few client retries, so that the outage shows as errors rather than being hidden.
    load = Load(cluster, "idxrestart", writers=3, max_size=1 << 20, attempts=2).start()
    time.sleep(2)
    cluster.kill9("index")
    time.sleep(2)
    cluster.up()  # the index comes back on its port, over the same RocksDB
    time.sleep(3)
    load.stop()
    print(f"index restart: {len(load.acked)} PUTs acknowledged, {len(load.put_errors)} PUT "
          f"and {len(load.get_errors)} GET errors")
    assert not load.wrong, load.wrong[:5]
    assert len(load.acked) > 10
    # Errors are allowed during the outage; every acknowledged PUT survived it, and every
    # object that exists is whole (a commit whose answer was lost keeps its data).
    assert load.verify_all(gateway=0) == []
    assert load.verify_listed(gateway=1) == []
    s3 = cluster.client(1)
    s3.put_object(Bucket="idxrestart", Key="after", Body=b"x")
    assert s3.get_object(Bucket="idxrestart", Key="after")["Body"].read() == b"x"


def test_repair_rebuilds_a_wiped_server_and_spreads_degraded_stripes(healthy):
    cluster = healthy
    s3 = cluster.client(0, attempts=10)
    s3.create_bucket(Bucket="repair")
    objects = {}
    for i in range(6):  # written healthy: one fragment per domain
        objects[f"before{i}"] = body_of(f"b{i}", (i + 1) * 700_000)
        s3.put_object(Bucket="repair", Key=f"before{i}", Body=objects[f"before{i}"])
    cluster.kill9("cs1", "cs4")
    for i in range(6):  # written degraded: six fragments on four domains
        objects[f"during{i}"] = body_of(f"d{i}", (i + 1) * 900_000)
        s3.put_object(Bucket="repair", Key=f"during{i}", Body=objects[f"during{i}"])
    stacked = cluster.fragment_layout("repair", "during0")
    assert any(len({f["drive"] for f in s["fragments"]}) < 6 for s in stacked["stripes"])

    # The dead servers come back; one of the others loses its disk.
    cluster.up()
    cluster.kill9("cs2")
    shutil.rmtree(os.path.join(cluster.dir, "cs2"))
    cluster.up()
    deadline = time.monotonic() + 15
    while cluster.admin_status(0)["domains"]["healthy"] != 6:
        assert time.monotonic() < deadline
        time.sleep(0.5)

    found = cluster.admin(0, "repair", "--dry-run")
    assert found["fragments_missing"] > 0 and found["fragments_stacked"] > 0, found
    assert found["fragments_rebuilt"] == 0 and found["unrecoverable_stripes"] == 0, found
    report = cluster.admin(1, "repair")
    print("repair:", found, report)
    assert report["fragments_rebuilt"] == found["fragments_missing"], report
    assert report["fragments_moved"] == found["fragments_stacked"], report
    assert report["errors"] == 0 and report["conflicts"] == 0, report
    again = cluster.admin(0, "repair", "--dry-run")
    assert again["fragments_missing"] == again["fragments_stacked"] == 0, again

    # Checked on the chunk servers themselves: every stripe of every object has all k + m
    # fragments, of the right length, on six distinct drives of six domains.
    for key, data in objects.items():
        layout = cluster.fragment_layout("repair", key)
        assert layout["ec"] == {"k": 4, "m": 2}
        for stripe in layout["stripes"]:
            drives = [f["drive"] for f in stripe["fragments"]]
            assert len(set(drives)) == 6, (key, drives)
            for f in stripe["fragments"]:
                assert cluster.fragment_on_server(f["drive"], f["blob"]) == \
                    stripe["fragment_len"], (key, f)
        assert cluster.client(1).get_object(Bucket="repair", Key=key)["Body"].read() == data


def test_adding_a_chunk_server_and_rebalancing_moves_a_fair_share_onto_it(healthy):
    """Last in this module: the cluster has seven chunk servers afterwards."""
    cluster = healthy
    s3 = cluster.client(0, attempts=5)
    s3.create_bucket(Bucket="grow")
    objects = {f"o{i}": body_of(f"g{i}", 2_000_000 + i * 500_000) for i in range(24)}
    for key, data in objects.items():
        s3.put_object(Bucket="grow", Key=key, Body=data)

    # A seventh server joins: started by cluster-up.sh, then added to the map (epoch 2);
    # the gateways restart to read the new map.
    cluster.env["GRANARY_CHUNKSERVERS"] = "7"
    cluster.up()
    path = os.path.join(cluster.dir, "cluster.json")
    with open(path) as f:
        cmap = json.load(f)
    with open(os.path.join(cluster.dir, "ports", "cs6")) as f:
        port = int(f.read())
    cmap["epoch"] = 2
    cmap["drives"].append({"id": "d6", "server": "cs6", "domain": "host6", "weight": 1.0,
                           "endpoint": f"127.0.0.1:{port}"})
    cluster.rewrite_map(cmap)
    status = cluster.admin_status(1)
    assert status["epoch"] == 2 and len(status["servers"]) == 7, status

    found = cluster.admin(0, "rebalance", "--dry-run")
    total = sum(len(s["fragments"]) for key in objects
                for s in cluster.fragment_layout("grow", key)["stripes"])
    report = cluster.admin(1, "rebalance")
    print("rebalance:", found, report, "fragments in bucket:", total)
    assert report["fragments_rebalanced"] == found["fragments_misplaced"] > 0, report
    assert report["errors"] == 0 and report["conflicts"] == 0, report
    assert cluster.admin(0, "rebalance", "--dry-run")["fragments_misplaced"] == 0

    # d6 now holds about one seventh of this bucket's fragments, checked on the servers.
    on_d6 = 0
    for key, data in objects.items():
        for stripe in cluster.fragment_layout("grow", key)["stripes"]:
            drives = [f["drive"] for f in stripe["fragments"]]
            assert len(set(drives)) == 6
            for f in stripe["fragments"]:
                assert cluster.fragment_on_server(f["drive"], f["blob"]) == stripe["fragment_len"]
            on_d6 += drives.count("d6")
        assert cluster.client(1).get_object(Bucket="grow", Key=key)["Body"].read() == data
    share = on_d6 / total
    assert 0.06 <= share <= 0.26, f"d6 holds {on_d6} of {total} fragments"

    # A multipart upload is in progress while d0 drains: its parts' fragments move too.
    parts = [body_of("drain-part1", 5 << 20), body_of("drain-part2", 1_500_000)]
    upload = s3.create_multipart_upload(Bucket="grow", Key="uploading")["UploadId"]
    etags = [s3.upload_part(Bucket="grow", Key="uploading", UploadId=upload, PartNumber=n + 1,
                            Body=body)["ETag"] for n, body in enumerate(parts)]

    # d0 is taken out: marked draining (epoch 3), placement leaves it out, and a repair pass
    # (the background one, or on demand) moves every fragment off it (docs/operations.md,
    # "Taking a drive out").
    cmap["epoch"] = 3
    next(d for d in cmap["drives"] if d["id"] == "d0")["draining"] = True
    cluster.rewrite_map(cmap)
    drives = {d["id"]: d for s in cluster.admin_status(0)["servers"] for d in s["drives"]}
    assert drives["d0"].get("draining") is True and "draining" not in drives["d1"], drives
    report = cluster.admin(1, "repair")
    print("drain:", report)
    assert report["fragments_drained"] == report["fragments_draining"] > 0, report
    assert report["errors"] == 0 and report["conflicts"] == 0, report
    assert report["parts"] >= 2, report
    assert cluster.admin(0, "repair", "--dry-run")["fragments_draining"] == 0
    s3.complete_multipart_upload(
        Bucket="grow", Key="uploading", UploadId=upload,
        MultipartUpload={"Parts": [{"PartNumber": n + 1, "ETag": e} for n, e in enumerate(etags)]})
    objects["uploading"] = b"".join(parts)
    objects["after-drain"] = body_of("after-drain", 3_000_000)
    s3.put_object(Bucket="grow", Key="after-drain", Body=objects["after-drain"])
    for key, data in objects.items():
        for stripe in cluster.fragment_layout("grow", key)["stripes"]:
            drives = [f["drive"] for f in stripe["fragments"]]
            assert "d0" not in drives and len(set(drives)) == 6, (key, drives)
            for f in stripe["fragments"]:
                assert cluster.fragment_on_server(f["drive"], f["blob"]) == stripe["fragment_len"]
        assert cluster.client(0).get_object(Bucket="grow", Key=key)["Body"].read() == data


def test_index_lost_with_its_disk_is_rebuilt_from_a_checkpoint_and_the_fragments(healthy):
    """The index's disk is lost: `granary admin rebuild-index` restores the newest checkpoint
    the index copied onto the chunk servers, then commits what was written after it from
    the fragment headers (docs/operations.md, "Index loss")."""
    cluster = healthy
    s3 = cluster.client(0, attempts=5)
    s3.create_bucket(Bucket="idxloss")
    before = {f"before{i}": body_of(f"il{i}", 200_000 + i * 1_300_000) for i in range(5)}
    before["small-before"] = b"inline, in the checkpoint"
    for key, data in before.items():
        s3.put_object(Bucket="idxloss", Key=key, Body=data)
    src = os.path.join(cluster.dir, "idxloss-mp.bin")
    with open(src, "wb") as f:
        f.write(body_of("ilmp", 20 << 20))
    cluster.aws(0, "s3", "cp", src, "s3://idxloss/multipart-before")

    # A checkpoint now (SIGUSR1; the index also makes one every --checkpoint-interval).
    log = os.path.join(cluster.dir, "logs", "index.log")

    def checkpoints():
        with open(log, errors="replace") as f:
            return f.read().count("index checkpoint ")
    made = checkpoints()
    os.kill(cluster.pid("index"), signal.SIGUSR1)
    deadline = time.monotonic() + 30
    while checkpoints() == made:
        assert time.monotonic() < deadline, cluster.wipe_log_tail("index")
        time.sleep(0.2)
    assert "3 copies" in cluster.wipe_log_tail("index")

    # After the checkpoint: new objects (one in a new bucket), an overwrite, a delete.
    after = {f"after{i}": body_of(f"ia{i}", 150_000 + i * 2_100_000) for i in range(4)}
    for key, data in after.items():
        s3.put_object(Bucket="idxloss", Key=key, Body=data)
    s3.create_bucket(Bucket="idxloss-new")
    s3.put_object(Bucket="idxloss-new", Key="late", Body=body_of("late", 3 << 20))
    before["before1"] = body_of("overwritten", 5 << 20)
    s3.put_object(Bucket="idxloss", Key="before1", Body=before["before1"])
    s3.delete_object(Bucket="idxloss", Key="before2")
    del before["before2"]
    s3.put_object(Bucket="idxloss", Key="small-after", Body=b"inline, after the checkpoint")
    time.sleep(4)  # the gateways' GC (--gc-grace 1) collects the replaced and deleted blobs

    # The index and its disk are gone.
    cluster.kill9("index")
    index_dir = os.path.join(cluster.dir, "index")
    shutil.rmtree(index_dir)
    env = dict(os.environ)
    with open(os.path.join(cluster.dir, "cluster-secret")) as f:
        env["GRANARY_CLUSTER_SECRET"] = f.read().strip()
    # The checkpoints on the drives, newest first; the rebuild is told which one to use.
    listed = subprocess.run([GRANARY, "admin", "rebuild-index", "--list-checkpoints",
                             "--cluster", os.path.join(cluster.dir, "cluster.json")],
                            env=env, capture_output=True, text=True, timeout=120)
    assert listed.returncode == 0, listed.stderr[-3000:]
    checkpoints = [json.loads(line) for line in listed.stdout.splitlines()]
    assert checkpoints and checkpoints[0]["files"] > 0 and checkpoints[0]["copies"] >= 2
    assert [c["id"] for c in checkpoints] == sorted((c["id"] for c in checkpoints),
                                                    reverse=True)
    res = subprocess.run([GRANARY, "admin", "rebuild-index",
                          "--cluster", os.path.join(cluster.dir, "cluster.json"),
                          "--dir", index_dir, "--checkpoint", checkpoints[0]["id"],
                          "--credentials", os.path.join(cluster.dir, "root-credentials.json")],
                         env=env, capture_output=True, text=True, timeout=300)
    print(res.stdout, "\n".join(line for line in res.stderr.splitlines()
                                 if "WARN" in line or "created bucket" in line))
    assert res.returncode == 0, res.stderr[-3000:]
    assert "restored checkpoint " + checkpoints[0]["id"] in res.stdout
    report = json.loads(res.stdout[res.stdout.index("{"):res.stdout.rindex("}") + 1])
    with open(os.path.join(cluster.dir, "cluster.json")) as f:
        drives = len(json.load(f)["drives"])
    assert report["drives"] == drives and report["errors"] == 0, report
    assert report["objects_rebuilt"] >= 6, report   # after0..3, late, the overwrite
    assert report["objects_dropped"] >= 1, report   # before2, deleted after the checkpoint
    assert report["buckets_created"] >= 1, report   # idxloss-new
    cluster.up()  # the index starts again, on the rebuilt directory

    s3 = cluster.client(1, attempts=5)
    for key, data in {**before, **after}.items():
        got = s3.get_object(Bucket="idxloss", Key=key)
        assert got["Body"].read() == data, key
        if key != "small-before":
            assert got["ETag"].strip('"') == hashlib.md5(data).hexdigest(), key
    assert s3.get_object(Bucket="idxloss-new", Key="late")["Body"].read() == body_of("late", 3 << 20)
    dst = src + ".back"
    cluster.aws(1, "s3", "cp", "s3://idxloss/multipart-before", dst)
    with open(dst, "rb") as f:
        assert f.read() == body_of("ilmp", 20 << 20)
    with pytest.raises(s3.exceptions.NoSuchKey):
        s3.get_object(Bucket="idxloss", Key="before2")  # deleted stays deleted
    # What a rebuild cannot recover (documented): an inline object written after the
    # checkpoint lives only in its manifest.
    with pytest.raises(s3.exceptions.NoSuchKey):
        s3.get_object(Bucket="idxloss", Key="small-after")
    listed = {o["Key"] for o in s3.list_objects_v2(Bucket="idxloss")["Contents"]}
    assert listed == set(before) | set(after) | {"multipart-before"}
    s3.put_object(Bucket="idxloss", Key="new", Body=b"after the rebuild")
    assert s3.get_object(Bucket="idxloss", Key="new")["Body"].read() == b"after the rebuild"


def gateway_metrics(cluster, gateway, *names):
    """The values of `names` (the first series of each; 0.0 if absent), from one scrape."""
    text = requests.get(cluster.endpoint(gateway) + "/_granary/metrics", timeout=10).text
    values = {}
    for line in text.splitlines():
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name in names and name not in values:
            values[name] = float(line.rsplit(" ", 1)[1])
    return tuple(values.get(name, 0.0) for name in names)


def gateway_metric(cluster, gateway, name):
    return gateway_metrics(cluster, gateway, name)[0]


def test_a_stalled_chunk_server_is_read_around_by_hedged_reads(healthy):
    """A chunk server that stops answering without closing its connections (SIGSTOP): the
    gateway decodes the stripes from the other fragments after --hedge-ms instead of
    waiting for the internal API's 30 s timeout."""
    cluster = healthy
    s3 = cluster.client(0, attempts=3)
    s3.create_bucket(Bucket="hedge")
    data = body_of("hedge", 9 << 20)
    s3.put_object(Bucket="hedge", Key="obj", Body=data)
    layout = cluster.fragment_layout("hedge", "obj")
    server = "cs" + layout["stripes"][0]["fragments"][0]["drive"][1:]  # data fragment 0
    reader = cluster.client(1, attempts=1)
    assert reader.get_object(Bucket="hedge", Key="obj")["Body"].read() == data  # warm pool
    before = gateway_metric(cluster, 1, "granary_hedged_stripes_total")
    os.kill(cluster.pid(server), signal.SIGSTOP)
    try:
        got = reader.get_object(Bucket="hedge", Key="obj")["Body"].read()
    finally:
        os.kill(cluster.pid(server), signal.SIGCONT)
    assert got == data
    assert gateway_metric(cluster, 1, "granary_hedged_stripes_total") > before


def test_a_cluster_gateway_reports_its_index_servers_group_commits(healthy):
    """The index's group-commit counters of a gateway in cluster mode come from its index
    server (the RPC `commit_stats`), not from a local index it does not have."""
    cluster = healthy

    def commits(gateway):  # (batches, requests), from one scrape
        return gateway_metrics(cluster, gateway, "granary_index_group_commits_total",
                               "granary_index_committed_requests_total")

    s3 = cluster.client(1)
    s3.create_bucket(Bucket="commits")
    batches, committed = commits(1)
    # The bucket's creation was committed by the index server before this scrape.
    assert batches >= 1 and committed >= batches
    for i in range(5):
        s3.put_object(Bucket="commits", Key=f"k{i}", Body=body_of(i, 1000))
    # Five PUTs one after another: a batch each, at least (other gateways' jobs may add).
    batches_after, committed_after = commits(1)
    assert batches_after - batches >= 5
    assert committed_after - committed >= 5
    assert committed_after >= batches_after
    # Both gateways ask the same index server.
    assert commits(0)[0] >= batches_after


def test_one_gateway_runs_the_background_passes_and_the_other_takes_over(healthy):
    """The gateways hold the index's lease in turn: one runs the GC (and sweep, lifecycle,
    repair) passes, the other's timers skip them; killed, the leader's lease expires
    (--leader-lease 3) and the other gateway's passes run."""
    cluster = healthy

    def state(gateway):  # (leading, last GC pass time)
        return gateway_metrics(cluster, gateway, "granary_background_leader",
                               "granary_gc_last_pass_timestamp_seconds")

    deadline = time.time() + 10
    while True:
        leading = [state(g)[0] for g in (0, 1)]
        if sorted(leading) == [0.0, 1.0] or time.time() > deadline:
            break
        time.sleep(0.2)
    assert sorted(leading) == [0.0, 1.0], leading
    leader = leading.index(1.0)
    other = 1 - leader
    # --gc-interval 1: the leader passes every second, the other gateway not at all.
    before = state(other)[1], state(leader)[1]
    time.sleep(3)
    assert state(other)[1] == before[0]
    assert state(leader)[1] > before[1]
    assert state(other)[0] == 0.0
    # `granary admin status` says the same.
    assert cluster.admin_status(leader)["background"] == {"leading": True}
    assert cluster.admin_status(other)["background"] == {"leading": False}

    cluster.kill9(f"gw{leader}")
    deadline = time.time() + 15  # the lease's 3 s, a renewal's 1 s, then a 1 s GC pass
    while time.time() < deadline:
        took_over, last_pass = state(other)
        if took_over == 1.0 and last_pass > before[0]:
            break
        time.sleep(0.2)
    assert took_over == 1.0
    assert last_pass > before[0]
    assert cluster.admin_status(other)["background"] == {"leading": True}
