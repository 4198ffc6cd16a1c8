"""Integration fixtures: start the real `granary serve` on a free loopback port with a
temporary data directory, and hand tests real clients (boto3, aws-cli) pointed at it."""
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
import uuid

import boto3
import pytest
from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.config import Config
from botocore.credentials import Credentials

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GRANARY = os.environ.get("GRANARY_BIN", os.path.join(REPO, "build", "src", "granary"))
DEBIAN_AWS = "/usr/bin/aws"
# The newest boto3 (>= 1.36 checksum behaviour) lives in this interpreter on the project's
# machines; tests that need it skip, saying why, where it is absent.
PYENV_PYTHON = "/root/.pyenv/versions/3.11.7/bin/python3"
CLIENT_SCRIPTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "clients")

# No server a test starts outlives the session:
# - SIGTERM (a CI limit, `timeout`) ends pytest as Ctrl-C does, so fixtures tear down
#   (Python's default would end it at once, with every server still running);
# - each server is started with a parent-death signal (setpriv --pdeathsig KILL): should
#   pytest itself be killed, the kernel kills the servers it started (they are started
#   from the main thread, whose exit is what counts);
# - a server a failing test left running (started outside its try/finally) is killed at
#   the end of the session.
signal.signal(signal.SIGTERM, signal.default_int_handler)
_PDEATHSIG = ["/usr/bin/setpriv", "--pdeathsig", "KILL", "--"] \
    if os.path.exists("/usr/bin/setpriv") else []
_LIVE = set()  # Popen objects of servers started and not yet seen to exit


@pytest.fixture(autouse=True, scope="session")
def _no_server_outlives_the_session():
    yield
    for proc in list(_LIVE):
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    _LIVE.clear()


def run_newest_boto3_script(server, script):
    """Runs clients/<script> under the newest boto3 against `server`; returns (version,
    last output line) after asserting that it exited 0 and reported "boto3 <v>: N passed"."""
    if not os.access(PYENV_PYTHON, os.X_OK):
        pytest.skip(f"newest-boto3 interpreter {PYENV_PYTHON} is not installed on this machine")
    probe = subprocess.run([PYENV_PYTHON, "-c", "import boto3; print(boto3.__version__)"],
                           capture_output=True, text=True, timeout=60)
    if probe.returncode != 0:
        pytest.skip(f"{PYENV_PYTHON} cannot import boto3: {probe.stderr.strip()[-300:]}")
    version = probe.stdout.strip()
    res = subprocess.run(
        [PYENV_PYTHON, os.path.join(CLIENT_SCRIPTS, script), server.endpoint,
         server.access_key, server.secret_key],
        capture_output=True, text=True, timeout=600,
        env={k: v for k, v in os.environ.items() if not k.startswith("AWS_")})
    out = res.stdout + res.stderr
    assert res.returncode == 0, out
    last = res.stdout.strip().splitlines()[-1]
    assert last.startswith(f"boto3 {version}: ") and last.endswith(" passed"), out
    return version, last


def free_port():
    """A free loopback port below the ephemeral range, so that no connection or process
    started with port 0 can take it between this check and its use."""
    import random
    import socket
    rng = random.Random()
    while True:
        port = rng.randrange(20000, 32000)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
                return port
            except OSError:
                continue


class _Process:
    """A granary subprocess that prints a banner on stdout once it serves."""

    proc = None

    def _launch(self, argv, env, log_path, parse_line, timeout):
        """Starts argv and feeds each stdout line to parse_line(line, banner) until it
        returns True; returns the banner dict, or raises with the process's log."""
        log = open(log_path, "ab")
        self.proc = subprocess.Popen(_PDEATHSIG + list(argv), stdout=subprocess.PIPE,
                                     stderr=log, env=env)
        _LIVE.add(self.proc)
        banner = {}
        lines = []

        def read_banner():
            for raw in self.proc.stdout:
                line = raw.decode()
                lines.append(line)
                if parse_line(line, banner):
                    banner["done"] = True
                    return

        reader = threading.Thread(target=read_banner, daemon=True)
        reader.start()
        reader.join(timeout)
        if "done" not in banner:
            self.kill()
            with open(log_path, "rb") as f:
                err = f.read().decode(errors="replace")[-4000:]
            raise RuntimeError(f"{argv[:2]} did not start: stdout={lines!r} log={err}")
        return banner

    def stop(self, timeout=30):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise AssertionError("granary did not stop within %ss of SIGTERM" % timeout)
        return self.proc.returncode if self.proc else None

    def kill(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()


class Server(_Process):
    """One granary serve process. start() waits for its banner and parses it."""

    def __init__(self, data_dir, extra_args=(), env=None):
        self.data_dir = data_dir
        self.extra_args = list(extra_args)
        self.env = dict(os.environ)
        self.env.pop("GRANARY_ROOT_USER", None)
        self.env.pop("GRANARY_ROOT_PASSWORD", None)
        if env:
            self.env.update(env)
        self.endpoint = None
        self.access_key = None
        self.secret_key = None
        self.log_path = data_dir.rstrip("/") + ".log"

    def start(self, listen="127.0.0.1:0", timeout=60):
        args = list(self.extra_args)
        if "--access-log" not in args:  # keep one for post-mortems of failed tests
            args += ["--access-log", self.data_dir.rstrip("/") + ".access.log"]

        def parse(line, banner):
            for key, pattern in (("endpoint", r"serving S3 at (https?://\S+)"),
                                 ("access", r"access key:\s+(\S+)"),
                                 ("secret", r"secret key:\s+(\S+)")):
                m = re.search(pattern, line)
                if m:
                    banner[key] = m.group(1)
            return line.startswith("Try:")

        banner = self._launch(
            [GRANARY, "serve", "--data", self.data_dir, "--listen", listen,
             "--event-loops", "2", "--gc-grace", "1", "--gc-interval", "1"] + args,
            self.env, self.log_path, parse, timeout)
        if "secret" not in banner:
            self.kill()
            raise RuntimeError(f"granary serve printed no credentials: {banner!r}")
        self.endpoint = banner["endpoint"]
        self.access_key = banner["access"]
        self.secret_key = banner["secret"]
        return self

    def client(self, secret=None, access=None, **config):
        # No retries unless asked: a test sees the server's first answer.
        cfg = Config(**{"s3": {"addressing_style": "path"}, "retries": {"max_attempts": 1},
                        "signature_version": "s3v4", **config})
        return boto3.client(
            "s3", endpoint_url=self.endpoint, region_name="us-east-1",
            aws_access_key_id=access or self.access_key,
            aws_secret_access_key=secret or self.secret_key, config=cfg)

    def aws_env(self):
        env = dict(os.environ)
        env.update({
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_CONFIG_FILE": "/dev/null",
            "AWS_SHARED_CREDENTIALS_FILE": "/dev/null",
            "AWS_PAGER": "",
        })
        return env

    def admin(self, *args, access=None, secret=None, check=True):
        """`granary admin ARGS` against this server, as root unless told otherwise."""
        env = dict(os.environ)
        env.update({"AWS_ACCESS_KEY_ID": access or self.access_key,
                    "AWS_SECRET_ACCESS_KEY": secret or self.secret_key,
                    "GRANARY_ENDPOINT": self.endpoint})
        res = subprocess.run([GRANARY, "admin", *args], env=env, capture_output=True,
                             text=True, timeout=300)
        if check and res.returncode != 0:
            raise AssertionError(f"granary admin {args} failed ({res.returncode}): {res.stderr}")
        return res

    def aws(self, *args, aws_bin=DEBIAN_AWS, check=True):
        cmd = [aws_bin, "--endpoint-url", self.endpoint] + list(args)
        res = subprocess.run(cmd, env=self.aws_env(), capture_output=True, text=True,
                             timeout=300)
        if check and res.returncode != 0:
            raise AssertionError(f"{cmd} failed ({res.returncode}): {res.stderr}")
        return res


def signed(server, method, path, body=b"", headers=None, send_body=None):
    """A request signed (payload hash included) over `body`, with the root user's key; it
    sends `send_body` instead when given (a body swapped under a signature). Returns
    (status, response body)."""
    req = AWSRequest(method=method, url=server.endpoint + path, data=body,
                     headers=dict(headers or {}))
    S3SigV4Auth(Credentials(server.access_key, server.secret_key), "s3",
                "us-east-1").add_auth(req)
    prepared = req.prepare()
    sent = body if send_body is None else send_body
    out_headers = dict(prepared.headers)
    if send_body is not None:
        out_headers["Content-Length"] = str(len(sent))
        out_headers.pop("Content-MD5", None)
    r = urllib.request.Request(prepared.url, data=sent if sent else None, method=method,
                               headers=out_headers)
    try:
        with urllib.request.urlopen(r, timeout=30) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def access_log_text(server, needle, timeout=10):
    """The server's access log once it holds `needle` (or after `timeout` seconds): its
    own thread writes the lines, so one may come just after its answer."""
    deadline = time.time() + timeout
    while True:
        text = open(server.data_dir.rstrip("/") + ".access.log").read()
        if needle in text or time.time() > deadline:
            return text
        time.sleep(0.05)


def memory_mib(pid, field="VmRSS"):
    """A process's memory figure from /proc/PID/status, in MiB: VmRSS (now) or VmHWM (its
    peak)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    raise AssertionError(f"no {field}")


def metric_value(text, name, **labels):
    """The value of the sample `name{labels...}` (labels matched as a subset), summed over
    every series that matches; None if there is none."""
    total, found = 0.0, False
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        m = re.match(r'([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)', line)
        if not m or m.group(1) != name:
            continue
        have = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2) or ""))
        if all(have.get(k) == v for k, v in labels.items()):
            total += float(m.group(3))
            found = True
    return total if found else None


def server_metric(server, name, **labels):
    """metric_value() of a fresh scrape of `server`'s /_granary/metrics; 0 if absent."""
    text = urllib.request.urlopen(server.endpoint + "/_granary/metrics",
                                  timeout=10).read().decode()
    return metric_value(text, name, **labels) or 0.0


@pytest.fixture(scope="session")
def granary_bin():
    if not os.access(GRANARY, os.X_OK):
        raise RuntimeError(f"granary binary not found at {GRANARY}; build first")
    return GRANARY


@pytest.fixture
def tmp_data(tmp_path):
    return str(tmp_path / "granary-data")


@pytest.fixture(scope="module")
def server(granary_bin, tmp_path_factory):
    srv = Server(str(tmp_path_factory.mktemp("srv") / "granary-data")).start()
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def s3(server):
    return server.client()


@pytest.fixture
def bucket(s3):
    name = "t-" + uuid.uuid4().hex[:16]
    s3.create_bucket(Bucket=name)
    return name


CHUNK_LOAD = os.environ.get("GRANARY_CHUNK_LOAD",
                            os.path.join(REPO, "build", "tests", "tools", "granary_chunk_load"))


class ChunkServer(_Process):
    """One `granary chunkserver` over drive directories; start() waits for its banner.
    `address` is HOST:PORT, `endpoint` the http:// URL."""

    def __init__(self, drive_dirs, secret="test-cluster-secret", extra_args=(), log_path=None):
        self.drive_dirs = list(drive_dirs)
        self.secret = secret
        self.extra_args = list(extra_args)
        self.env = dict(os.environ)
        self.env.pop("GRANARY_CLUSTER_SECRET", None)
        if secret is not None:
            self.env["GRANARY_CLUSTER_SECRET"] = secret
        self.log_path = log_path or self.drive_dirs[0].rstrip("/") + ".chunkserver.log"
        self.address = None
        self.endpoint = None

    def argv(self, listen):
        args = [GRANARY, "chunkserver", "--listen", listen, "--event-loops", "1"]
        for d in self.drive_dirs:
            args += ["--dir", d]
        return args + self.extra_args

    def start(self, listen="127.0.0.1:0", timeout=60):
        def parse(line, banner):
            m = re.search(r"chunkserver listening at http://(\S+)", line)
            if m:
                banner["address"] = m.group(1)
            return "address" in banner

        banner = self._launch(self.argv(listen), self.env, self.log_path, parse, timeout)
        self.address = banner["address"]
        self.endpoint = "http://" + self.address
        return self

    def restart(self, timeout=60):
        """Starts again on the same address (after stop() or kill())."""
        return self.start(listen=self.address, timeout=timeout)


@pytest.fixture(scope="session")
def chunk_load_bin():
    if not os.access(CHUNK_LOAD, os.X_OK):
        raise RuntimeError(f"granary_chunk_load not found at {CHUNK_LOAD}; build first")
    return CHUNK_LOAD
