#!/bin/bash
# The table of docs/values.md: `rtit check-values` on the examples and on Debian's grep, sort,
# sed and gzip, recorded with the step backend and --truth. Prints, per recording, the
# known-and-right share of rbp, rsp, eflags and all GPRs, and the wrong values (always 0).
# usage: docs/scripts/values-table.sh [RTIT] [SCRATCH_DIR]   (takes about 4 minutes)
set -u
REPO=$(cd "$(dirname "$0")/../.." && pwd)
R=$(realpath "${1:-$REPO/target/release/rtit}"); O=${2:-$(mktemp -d)}; mkdir -p "$O"; cd "$O" && rm -rf r-*
SSE='glibc.cpu.hwcaps=-AVX512F,-AVX512VL,-AVX512BW,-AVX2,-AVX,-EVEX'
for n in recursion deep dispatch crash goto signals longjmp; do
  [ -x $n ] || gcc -O1 -g -static -o $n $REPO/examples/c/$n.c
  $R record --backend step --truth --start main --out r-$n -- ./$n >/dev/null 2>&1
  echo "$n $($R check-values r-$n 2>&1 | grep -E '^(rsp|rbp|eflags|all GPRs) ' | awk '{print $NF}' | tr '\n' ' ')"
done
$R record --backend step --truth --out r-entry -- ./recursion >/dev/null 2>&1
echo "recursion-entry $($R check-values r-entry 2>&1 | grep -E '^(rsp|rbp|eflags|all GPRs) ' | awk '{print $NF}' | tr '\n' ' ')"
[ -x dynamic ] || gcc -O1 -g -o dynamic $REPO/examples/c/dynamic.c
$R record --backend step --truth --start main --out r-dynamic -- ./dynamic >/dev/null 2>&1
echo "dynamic $($R check-values r-dynamic 2>&1 | grep -E '^(rsp|rbp|eflags|all GPRs) ' | awk '{print $NF}' | tr '\n' ' ')"
GLIBC_TUNABLES=$SSE $R record --backend step --truth --start main --out r-dynamic-sse -- ./dynamic >/dev/null 2>&1
echo "dynamic-sse2 $($R check-values r-dynamic-sse 2>&1 | grep -E '^(rsp|rbp|eflags|all GPRs) ' | awk '{print $NF}' | tr '\n' ' ')"
printf 'hello\nworld\nfoo\nzebra\napple\n' > in.txt
for p in "grep o in.txt" "sort in.txt" "sed s/o/0/ in.txt" "gzip -c in.txt"; do
  n=$(echo $p | cut -d' ' -f1)
  GLIBC_TUNABLES=$SSE $R record --backend step --truth --out r-$n-sse -- /usr/bin/$p >/dev/null 2>&1
  echo "$n-entry-sse2 $($R check-values r-$n-sse 2>&1 | grep -E '^(rsp|rbp|eflags|all GPRs) ' | awk '{print $NF}' | tr '\n' ' ') wrong=$($R check-values r-$n-sse 2>&1 | grep -c WRONG)"
  $R record --backend step --truth --out r-$n -- /usr/bin/$p >/dev/null 2>&1
  echo "$n-entry-native $($R check-values r-$n 2>&1 | grep -E '^(rsp|rbp|eflags|all GPRs) ' | awk '{print $NF}' | tr '\n' ' ') wrong=$($R check-values r-$n 2>&1 | grep -c WRONG)"
done
