#!/usr/bin/env bash
# fio_baselines.sh DIR: the raw-disk figures the chunk store's design and docs cite,
# measured with fio on the disk holding DIR (docs/chunkstore-format.md, "Why extents are not
# fallocate'd"; docs/benchmarks.md, the read-gap explanation). Prints one line per figure.
#   1. fdatasync cost after a 128 KiB O_DIRECT write, queue depth 1: appending to a growing
#      file, overwriting written blocks, writing into a hole (what the chunk store does),
#      writing into fallocate'd (unwritten) blocks.
#   2. 1 MiB + 4 KiB sequential reads (a blob's header and payload in one I/O), 32 requests
#      in flight: one io_uring submitter against 32 threads each blocking on one request
#      (how the chunk store's synchronous reads issue I/O).
#   3. 4 KiB random reads at iodepth 32 with and without registered buffers (--fixedbufs):
#      IOPS and the share of a core spent in the kernel (docs/benchmarks.md).
set -euo pipefail
dir=${1:?usage: bench/fio_baselines.sh DIR (on the disk to measure)}
mkdir -p "$dir"
work=$(mktemp -d "$dir/fio-baselines.XXXXXX")
trap 'rm -rf "$work"' EXIT

figure() {  # figure LABEL PYTHON-EXPR-OVER-j FIO-ARGS...
  local label=$1 expr=$2
  shift 2
  fio --output-format=json "$@" 2>/dev/null | python3 -c '
import json, sys
j = json.load(sys.stdin)["jobs"][0]
print("%-44s %s" % (sys.argv[1], eval(sys.argv[2])))' "$label" "$expr"
}

common=(--ioengine=io_uring --direct=1 --rw=write --bs=128k --size=128m --fdatasync=1 --iodepth=1)
sync_us="'mean fdatasync %.0f us, %.0f MiB/s' % (j['sync']['lat_ns']['mean'] / 1e3, j['write']['bw_bytes'] / 2**20)"
rm -f "$work/f"
# fio lays a new file out first (--fallocate=native by default): `none` appends for real,
# `truncate` writes into a hole of the file's full size, as the chunk store's extents are.
figure "write+fdatasync, appending" "$sync_us" --name=append --filename="$work/f" \
    --fallocate=none "${common[@]}"
figure "write+fdatasync, overwriting written blocks" "$sync_us" --name=overwrite --filename="$work/f" "${common[@]}"
figure "write+fdatasync, into a hole (ftruncate'd)" "$sync_us" --name=hole \
    --filename="$work/h" --fallocate=truncate "${common[@]}"
fallocate -l 128m "$work/g"
figure "write+fdatasync, into fallocate'd blocks" "$sync_us" --name=falloc --filename="$work/g" "${common[@]}"
rm -f "$work/f" "$work/g" "$work/h"

fio --name=layout --filename="$work/r" --ioengine=io_uring --direct=1 --rw=write --bs=1M \
    --size=2g --iodepth=32 --output-format=terse >/dev/null 2>&1
read_mibs="'%.0f MiB/s' % (j['read']['bw_bytes'] / 2**20)"
figure "1028k reads, io_uring iodepth=32" "$read_mibs" --name=uring --filename="$work/r" \
    --ioengine=io_uring --direct=1 --rw=read --bs=1028k --size=2g --iodepth=32
figure "1028k reads, psync, 32 threads" "$read_mibs" --name=psync --filename="$work/r" \
    --ioengine=psync --direct=1 --rw=read --bs=1028k --size=2g --numjobs=32 \
    --offset_increment=64m --io_size=64m --group_reporting

iops_sys="'%.0f IOPS, sys %.0f%%' % (j['read']['iops'], j['sys_cpu'])"
for round in 1 2 3; do
  for fixed in "" --fixedbufs; do
    figure "4k random reads, iodepth=32 ${fixed:-(plain buffers)} #$round" "$iops_sys" \
        --name=rand --filename="$work/r" --ioengine=io_uring --direct=1 --rw=randread \
        --bs=4k --size=2g --iodepth=32 --time_based --runtime=8 $fixed
  done
done
