#!/bin/bash
# summary.sh OUT TARGET...: one line per target from its libFuzzer log (runs,
# seconds, coverage, peak RSS, findings), and exit 1 when any target ended
# with an error or left a finding (crash-*, leak-*, timeout-*, oom-*,
# slow-unit-* are all failures).
out=$1; shift
fail=0
printf '%-8s %10s %6s %8s %8s %8s %7s  %s\n' target execs secs exec/s cov ft rss_mb findings
for t in "$@"; do
  log=$out/$t.log
  rc=$(cat "$out/$t.rc" 2>/dev/null || echo missing)
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  secs=$(sed -n 's/^Done [0-9]* runs in \([0-9]*\) second.*/\1/p' "$log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  rss=$(sed -n 's/^stat::peak_rss_mb: *//p' "$log" | tail -1)
  last=$(grep -E '^#[0-9]+' "$log" | tail -1)
  cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$last")
  ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$last")
  found=$(find "$out/findings/$t" -type f 2>/dev/null | wc -l)
  printf '%-8s %10s %6s %8s %8s %8s %7s  %s\n' "$t" "${runs:-?}" "${secs:-?}" "${rate:-?}" \
    "${cov:-?}" "${ft:-?}" "${rss:-?}" "$found"
  if [ "$rc" != 0 ] || [ "$found" != 0 ]; then
    fail=1
    echo "  fuzz_$t: exit status $rc; findings in $out/findings/$t; log $log:" >&2
    grep -E 'ERROR|SUMMARY|runtime error|Test unit written' "$log" | head -5 | sed 's/^/    /' >&2
  fi
done
exit $fail
