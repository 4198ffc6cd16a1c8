#!/usr/bin/env python3
"""POST Object against PutObject for the same bytes (docs/benchmarks.md, "Form uploads").

    python3 bench/post_vs_put.py [SIZE_MIB] [ROUNDS]     # defaults: 64, 10

Starts its own `granary serve` (data under ./bench-data/post, build/src/granary or
$GRANARY), makes a SIZE_MIB random file, a presigned PUT URL for it and a browser form
(boto3's generate_presigned_post) around the same bytes, then uploads them with curl in
alternated rounds (POST, PUT, POST, PUT...; `curl -T` streams both with a Content-Length)
and prints each round's wall times, the medians and the POST/PUT ratio. A form upload
streams its file into the same data path as a PUT, so the ratio says what parsing the form
costs: the delimiter scan over the file's bytes and the policy check."""
import os
import re
import shutil
import statistics
import subprocess
import sys
import time

import boto3
from botocore.config import Config

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GRANARY = os.environ.get("GRANARY", os.path.join(ROOT, "build", "src", "granary"))
BOUNDARY = "----granarybench"


def main():
    size = int(sys.argv[1]) if len(sys.argv) > 1 else 64
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 10
    work = os.path.join(ROOT, "bench-data", "post")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    log = open(os.path.join(work, "serve.log"), "w+")
    server = subprocess.Popen([GRANARY, "serve", "--data", os.path.join(work, "data"),
                               "--listen", "127.0.0.1:0"], stdout=log, stderr=subprocess.STDOUT)
    try:
        banner = ""
        for _ in range(600):
            log.seek(0)
            banner = log.read()
            if "secret key:" in banner:
                break
            time.sleep(0.1)
        endpoint = re.search(r"serving S3 at (\S+)", banner).group(1)
        access = re.search(r"access key:\s+(\S+)", banner).group(1)
        secret = re.search(r"secret key:\s+(\S+)", banner).group(1)
        s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                          aws_access_key_id=access, aws_secret_access_key=secret,
                          config=Config(s3={"addressing_style": "path"},
                                        signature_version="s3v4"))
        s3.create_bucket(Bucket="bench")
        data = os.urandom(size << 20)
        file_path = os.path.join(work, "file.bin")
        form_path = os.path.join(work, "form.bin")
        with open(file_path, "wb") as f:
            f.write(data)
        post = s3.generate_presigned_post("bench", "posted", ExpiresIn=3600)
        with open(form_path, "wb") as f:
            for name, value in post["fields"].items():
                f.write(f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="{name}"'
                        f'\r\n\r\n{value}\r\n'.encode())
            f.write(f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="file"; '
                    f'filename="f"\r\n\r\n'.encode())
            f.write(data)
            f.write(f"\r\n--{BOUNDARY}--\r\n".encode())
        put_url = s3.generate_presigned_url("put_object", Params={"Bucket": "bench",
                                                                  "Key": "put"}, ExpiresIn=3600)
        commands = {
            "POST": ["curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}", "-X", "POST",
                     "-H", f"Content-Type: multipart/form-data; boundary={BOUNDARY}",
                     "-T", form_path, f"{endpoint}/bench"],
            "PUT": ["curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}", "-T", file_path,
                    put_url],
        }
        want = {"POST": "204", "PUT": "200"}
        times = {"POST": [], "PUT": []}
        print(f"{size} MiB, {rounds} rounds of POST (form) then PUT, curl -T, {endpoint}")
        for r in range(rounds + 1):  # round 0 warms up
            line = []
            for op, cmd in commands.items():
                start = time.perf_counter()
                status = subprocess.run(cmd, capture_output=True, text=True).stdout
                elapsed = time.perf_counter() - start
                if status != want[op]:
                    sys.exit(f"{op} answered {status}")
                if r > 0:
                    times[op].append(elapsed)
                line.append(f"{op} {elapsed:.3f} s")
            print(f"round {r}{' (warm-up)' if r == 0 else ''}: " + ", ".join(line))
        ratios = [p / q for p, q in zip(times["POST"], times["PUT"])]
        for op in times:
            med = statistics.median(times[op])
            print(f"{op}: median {med:.3f} s, {size / med:.0f} MiB/s")
        print(f"POST/PUT wall: median {statistics.median(ratios):.3f} "
              f"(min {min(ratios):.3f}, max {max(ratios):.3f})")
    finally:
        server.terminate()
        server.wait()
        if not os.environ.get("KEEP_DATA"):
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
