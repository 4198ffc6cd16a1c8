# nginx_files.sh: sourced by the benchmarks that compare Granary with nginx serving the same
# bytes from files (s3_bench.sh, paced_loader.sh). ROOT is the benchmark's work directory:
# the files go under ROOT/www, nginx's configuration, pid file and error log in ROOT.
#
# nginx_fetch PYTHON ENDPOINT ROOT PREFIX...: downloads every object of bucket granary-bench
#   under each PREFIX to ROOT/www/granary-bench/KEY (boto3, path style, the credentials of
#   AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY), so nginx serves it at the S3 path.
# nginx_start ROOT PORT WORKERS [CPUS]: nginx on 127.0.0.1:PORT with WORKERS worker
#   processes and sendfile, pinned to CPUS when given; returns once its pid file is there.
#   The caller stops it: kill "$(cat ROOT/nginx.pid)".

nginx_fetch() {
  local py=$1 ep=$2 root=$3; shift 3
  mkdir -p "$root/www/granary-bench"
  "$py" - "$ep" "$root/www/granary-bench" "$@" <<'EOF'
import os, sys, boto3
from botocore.config import Config
s3 = boto3.client("s3", endpoint_url=sys.argv[1], region_name="us-east-1",
                  config=Config(s3={"addressing_style": "path"}))
for prefix in sys.argv[3:]:
    for o in s3.list_objects_v2(Bucket="granary-bench", Prefix=prefix)["Contents"]:
        path = os.path.join(sys.argv[2], o["Key"])
        os.makedirs(os.path.dirname(path), exist_ok=True)
        s3.download_file("granary-bench", o["Key"], path)
EOF
}

nginx_start() {
  local root=$1 port=$2 workers=$3 cpus=${4:-}
  command -v nginx >/dev/null || PATH=$PATH:/usr/sbin
  cat >"$root/nginx.conf" <<EOF
worker_processes $workers;
pid $root/nginx.pid;
error_log $root/nginx-error.log;
events { worker_connections 1024; }
http {
  access_log off;
  sendfile on;
  server { listen 127.0.0.1:$port; root $root/www; }
}
EOF
  local pin=()
  [[ -n $cpus ]] && pin=(taskset -c "$cpus")
  "${pin[@]}" nginx -c "$root/nginx.conf" -p "$root"
  for _ in $(seq 50); do [[ -s $root/nginx.pid ]] && return 0; sleep 0.1; done
  echo "nginx did not start: $root/nginx-error.log" >&2
  return 1
}
