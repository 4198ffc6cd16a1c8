#!/usr/bin/env bash
# disk_stats.sh DEVICE SECONDS: what block device DEVICE (e.g. vda) did over SECONDS, from
# /proc/diskstats: the share of time it had I/O in flight (busy), writes, MB written,
# discards and flushes a second, and the milliseconds a second its flushes and writes
# spent queued or in service (summed over requests in flight). Run it beside a load, as
# docs/benchmarks.md ("Where a 1 MiB PUT waits") did beside fio and beside Granary's PUTs.
set -euo pipefail
dev=${1:?usage: disk_stats.sh DEVICE SECONDS} secs=${2:?usage: disk_stats.sh DEVICE SECONDS}
snap() {  # writes, sectors written, ms writing, io ticks, discards, flushes, ms flushing
  awk -v d="$dev" '$3 == d { print $8, $10, $11, $13, $15, $19, $20 }' /proc/diskstats
}
read -r w1 s1 wm1 t1 d1 f1 fm1 < <(snap) || true
[[ -n ${w1:-} ]] || { echo "disk_stats: no device $dev in /proc/diskstats"; exit 1; }
sleep "$secs"
read -r w2 s2 wm2 t2 d2 f2 fm2 < <(snap)
awk -v s="$secs" -v w=$((w2 - w1)) -v b=$((s2 - s1)) -v wm=$((wm2 - wm1)) -v t=$((t2 - t1)) \
  -v d=$((d2 - d1)) -v f=$((f2 - f1)) -v fm=$((fm2 - fm1)) 'BEGIN {
  printf "busy %.0f%%, writes %.0f/s, %.0f MB/s written, discards %.0f/s, flushes %.0f/s, flush ms %.0f/s, write ms %.0f/s\n",
    t / (10 * s), w / s, b * 512 / 1e6 / s, d / s, f / s, fm / s, wm / s }'
