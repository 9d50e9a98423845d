#!/usr/bin/env bash
# tools/simulate as a user runs it: the table with its header and summary, CSV, and a
# bad unit refused with exit status 2.
set -euo pipefail
bin=$1
out=$("$bin" --inter-latency-us 2 --inter-gbps 12.5 --ranks-per-host 8 --ranks 16,64 -b 8 -e 1M -f 16)
grep -q "between hosts: tcp 2.00 us, 12.5 GB/s (given)" <<<"$out" || { echo "FAIL: no given links in: $out"; exit 1; }
grep -q "^all_reduce$" <<<"$out" || { echo "FAIL: no all_reduce table in: $out"; exit 1; }
grep -q "^all_reduce on 64 ranks (8 hosts): " <<<"$out" || { echo "FAIL: no summary in: $out"; exit 1; }
csv=$("$bin" --csv --colls all_reduce --ranks 16 -b 8 -e 64 -f 2)
[ "$(wc -l <<<"$csv")" -eq 5 ] || { echo "FAIL: want a header and 4 rows: $csv"; exit 1; }
head -n 1 <<<"$csv" | grep -q "^collective,ranks,hosts,bytes,ring_us," || { echo "FAIL: csv header: $csv"; exit 1; }
rc=0
err=$("$bin" --inter-gbps 100Gbit/s 2>&1) || rc=$?
[ "$rc" -eq 2 ] || { echo "FAIL: bad unit exited $rc"; exit 1; }
grep -q "takes GB/s" <<<"$err" || { echo "FAIL: bad unit message: $err"; exit 1; }
echo PASS
