#!/bin/bash
# The tables of docs/values.md: `rtit check-values` on the examples and on Debian's grep, sort,
# sed and gzip (five-line or 2,000-line inputs) recorded with --truth: the step backend from the
# entry point (with glibc's own routines and with its SSE2 ones) and from main, and the qemu
# backend from the entry point and from main (python3 too). Prints, per recording, the
# known-and-right share of rbp, rsp, eflags and all GPRs (step) or of all GPRs, xmm0-15 and
# MXCSR (qemu), and the wrong values (always 0).
# usage: docs/scripts/values-table.sh [RTIT] [SCRATCH_DIR]   (takes about 12 minutes)
# python3 under the step backend (31 M instructions, about 35 minutes a recording) is not in
# it: `rtit record --backend step --truth [--start main] -- python3 -c 'print(sum(range(10)))'`.
set -u
REPO=$(cd "$(dirname "$0")/../.." && pwd)
R=$(realpath "${1:-$REPO/target/release/rtit}"); O=${2:-$(mktemp -d)}; mkdir -p "$O"; cd "$O" && rm -rf r-* q-*
SSE='glibc.cpu.hwcaps=-AVX512F,-AVX512VL,-AVX512BW,-AVX512DQ,-AVX512CD,-AVX2,-AVX,-AVX_Fast_Unaligned_Load,-ERMS'
rows() { $R check-values "$1" 2>&1 | grep -E "^($2) " | awk '{print $NF}' | tr '\n' ' '; }
wrong() { $R check-values "$1" 2>&1 | grep -c WRONG; }
step='rsp|rbp|eflags|all GPRs'
for n in recursion deep dispatch crash goto signals longjmp; do
  [ -x $n ] || gcc -O1 -g -static -o $n $REPO/examples/c/$n.c
  $R record --backend step --truth --start main --out r-$n -- ./$n >/dev/null 2>&1
  echo "$n $(rows r-$n "$step")"
done
$R record --backend step --truth --out r-entry -- ./recursion >/dev/null 2>&1
echo "recursion-entry $(rows r-entry "$step")"
[ -x dynamic ] || gcc -O1 -g -o dynamic $REPO/examples/c/dynamic.c
$R record --backend step --truth --start main --out r-dynamic -- ./dynamic >/dev/null 2>&1
echo "dynamic $(rows r-dynamic "$step")"
GLIBC_TUNABLES=$SSE $R record --backend step --truth --start main --out r-dynamic-sse -- ./dynamic >/dev/null 2>&1
echo "dynamic-sse2 $(rows r-dynamic-sse "$step")"
printf 'hello\nworld\nfoo\nzebra\napple\n' > in.txt
for p in "grep o in.txt" "sort in.txt" "sed s/o/0/ in.txt" "gzip -c in.txt"; do
  n=$(echo $p | cut -d' ' -f1)
  GLIBC_TUNABLES=$SSE $R record --backend step --truth --out r-$n-sse -- /usr/bin/$p >/dev/null 2>&1
  echo "$n-entry-sse2 $(rows r-$n-sse "$step") wrong=$(wrong r-$n-sse)"
  $R record --backend step --truth --out r-$n -- /usr/bin/$p >/dev/null 2>&1
  echo "$n-entry-native $(rows r-$n "$step") wrong=$(wrong r-$n)"
  $R record --backend step --truth --start main --out r-$n-main -- /usr/bin/$p >/dev/null 2>&1
  echo "$n-main-native $(rows r-$n-main "$step") wrong=$(wrong r-$n-main)"
done
# The qemu backend: its samples come at random moments, so longer inputs.
seq 1 2000 | shuf --random-source=<(yes) > lines.txt; seq 1 20000 > nums.txt; gzip -c nums.txt > nums.gz
for start in entry main; do
  s=""; [ $start = main ] && s="--start main"
  for p in "sort lines.txt" "grep o in.txt" "gzip -dc nums.gz" "sed s/1/x/ nums.txt" "python3 -c print(sum(range(10)))"; do
    n=$(echo $p | cut -d' ' -f1)
    $R record --backend qemu --truth $s --out q-$n-$start -- /usr/bin/$p >/dev/null 2>&1
    echo "qemu $n-$start $(rows q-$n-$start 'all GPRs|xmm0-15|mxcsr') wrong=$(wrong q-$n-$start)"
  done
done
