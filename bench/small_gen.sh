#!/bin/sh
# bench/small_gen.sh: generation tokens/s of the small models (stories260K, builtin:tiny) with
# the default threads and with one, as `inferlab run` prints it, best and median of N runs.
#
# A small model's step takes tens of microseconds, so on a shared machine single runs swing by
# 2x or more: the runs are interleaved (model x threads x binary in turn, N rounds), and with
# BASE set a second binary (an earlier build) runs in the same rounds, so both see the same
# neighbours. The stories260K GGUF comes from ../shared/fixtures (skipped when absent). The
# llama2.c comparison is a manual step (docs/performance.md): this script builds nothing.
#
# usage: bench/small_gen.sh [N=7]            from the project root, after a release build
#        BASE=/path/to/old/inferlab bench/small_gen.sh 9
set -eu
N=${1:-7}
NEW=${NEW:-build/release/inferlab}
BASE=${BASE:-}
FIX=${FIX:-../shared/fixtures/models}
[ -x "$NEW" ] || { echo "small_gen: $NEW not built (cmake --build --preset release)" >&2; exit 1; }

models="builtin:tiny"
if [ -f "$FIX/stories260K-f32.gguf" ]; then
  models="$FIX/stories260K-f32.gguf $models"
else
  echo "small_gen: $FIX/stories260K-f32.gguf absent: stories260K skipped" >&2
fi
bins="$NEW"
[ -n "$BASE" ] && bins="$BASE $NEW"

out=$(mktemp)
trap 'rm -f "$out"' EXIT
i=0
while [ "$i" -lt "$N" ]; do
  for m in $models; do
    for t in 0 1; do
      for b in $bins; do
        # the same command as docs/performance.md: 5 prompt tokens + 251 generated = 256 positions
        tps=$("$b" run -m "$m" --ctx 512 -p "Once upon a time" -n 251 --temp 0 --no-echo -t "$t" 2>&1 >/dev/null |
          sed -n 's/^generation:.*(\s*\([0-9.]*\) tokens\/s).*/\1/p')
        tag=new
        [ "$b" = "$BASE" ] && tag=base
        echo "$(basename "$m") -t$t $tag ${tps:-0}" >>"$out"
      done
    done
  done
  i=$((i + 1))
done
echo "generation tokens/s, $N interleaved runs each (-t0 = one thread per core: $(nproc) here)"
echo "$(grep -m1 'model name' /proc/cpuinfo 2>/dev/null | sed 's/.*: //')"
sort -k1,1 -k2,2 -k3,3 -k4,4n "$out" | awk '
  { k = $1 " " $2 " " $3; v[k, ++n[k]] = $4; if (!(k in seen)) { seen[k] = 1; order[++nk] = k } }
  END { printf "%-24s %-4s %-5s %10s %10s\n", "model", "thr", "build", "best", "median";
        for (i = 1; i <= nk; i++) { k = order[i]; split(k, f, " ");
          printf "%-24s %-4s %-5s %10.0f %10.0f\n", f[1], f[2], f[3], v[k, n[k]], v[k, int((n[k] + 1) / 2)] } }'
