#!/usr/bin/env bash
# packaging/every_python.sh [3.9 3.10 ...]: the x86_64 manylinux2014 wheel of every
# supported CPython (packaging/wheels.sh), then check_wheel.sh on each, for every CPython
# found the way pyenv finds it ($(pyenv root)/versions/3.X.*/bin/python3.X).  A version
# that is missing is skipped with a line saying so; one that fails does not stop the
# others, and the run fails at the end with a summary line per version.
source "$(dirname "$0")/common.sh"
VERSIONS=("$@")
[ ${#VERSIONS[@]} -gt 0 ] || VERSIONS=(3.9 3.10 3.11 3.12 3.13)
[ -f "$SDIST" ] || sdist
declare -a SUMMARY FOUND
failed=0
for v in "${VERSIONS[@]}"; do
  if [ -n "$(find_python "$v")" ]; then FOUND+=("$v"); else
    SUMMARY+=("SKIP CPython $v: not installed (looked in \$(pyenv root)/versions/$v.*; pyenv install $v)")
    echo "${SUMMARY[-1]}"
  fi
done
# The x86_64 manylinux2014 wheels of those versions (packaging/wheels.sh), then each one's check.
[ ${#FOUND[@]} -gt 0 ] || { echo "no CPython found" >&2; exit 1; }
start=$SECONDS
PYTHONS="${FOUND[*]}" bash "$ROOT/packaging/wheels.sh" x86_64
echo "== every Python: the x86_64 wheels built in $((SECONDS - start)) s"
for v in "${FOUND[@]}"; do
  py="$(find_python "$v")"
  log="$WORK/check-$v.log"
  mkdir -p "$WORK"
  start=$SECONDS
  if bash "$ROOT/packaging/check_wheel.sh" "$py" 2>&1 | tee "$log"; then
    result="ok"
  else
    result="FAILED"; failed=1
  fi
  line="$(grep -E '^=*\s*[0-9]+ (passed|failed)' "$log" | tail -1 | tr -d '=' | sed 's/^ *//;s/ *$//' || true)"
  SUMMARY+=("$result CPython $v ($py): ${line:-no pytest summary} [$((SECONDS - start)) s]")
done
echo "== every Python"
printf '%s\n' "${SUMMARY[@]}"
exit $failed
