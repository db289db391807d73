#!/usr/bin/env bash
# Why a collective is slower from a Python process than from `tiertrain comm-bench` (issue 5's Python targets): the
# same sweep from both programs, at the same ranks and binding, under each setting in turn, the settings interleaved
# within every repeat; the Python runs also time the same calls from a C++ loop in the same process (--pairs).
#   PY=venv/bin/python TT_PROBE_SETTINGS="-;TIERTRAIN_COMM_THREADS=1" bench/comm/py_probe.sh OUTDIR
# TT_PROBE_SETTINGS: settings separated by ';' ("-": none), TT_PROBE_RANKS (default 8), TT_PROBE_COLLECTIVE (default
# allreduce), TT_PROBE_ARGS (default "-b 1M -e 4M -f 2 -n 50 -w 10"), TT_PROBE_BIND (default share),
# TT_PROBE_REPEATS (default 2), TT the binary.
set -uo pipefail
OUT=${1:?usage: bench/comm/py_probe.sh OUTDIR}
mkdir -p "$OUT"
cd "$(dirname "$0")/../.."
TT=${TT:-build/gpu/src/tiertrain}
PY=${PY:-python3}
IFS=';' read -r -a settings <<< "${TT_PROBE_SETTINGS:--}"
read -r -a args <<< "${TT_PROBE_ARGS:--b 1M -e 4M -f 2 -n 50 -w 10}"
n=${TT_PROBE_RANKS:-8}
c=${TT_PROBE_COLLECTIVE:-allreduce}
: > "$OUT/settings.txt"
for i in "${!settings[@]}"; do echo "s$i ${settings[$i]}" >> "$OUT/settings.txt"; done
for r in $(seq 1 "${TT_PROBE_REPEATS:-2}"); do
  for i in "${!settings[@]}"; do
    envs=${settings[$i]}
    [ "$envs" = "-" ] && envs=""
    launch=("$TT" launch -n "$n" --bind-to "${TT_PROBE_BIND:-share}" --)
    # shellcheck disable=SC2086
    env $envs timeout 100 "${launch[@]}" "$TT" comm-bench -C "$c" "${args[@]}" -c 1 > "$OUT/cpp_s${i}_r$r.log" 2>&1 ||
      tail -3 "$OUT/cpp_s${i}_r$r.log"
    # shellcheck disable=SC2086
    env $envs PYTHONUNBUFFERED=1 timeout 100 "${launch[@]}" "$PY" bench/comm/py_comm_bench.py -C "$c" "${args[@]}" --pairs 2 \
      > "$OUT/py_s${i}_r$r.log" 2>&1 || tail -3 "$OUT/py_s${i}_r$r.log"
  done
done
# One table: per setting and size, comm-bench's time (out of place, in place), then Python's and the same process's
# C++ loop (medians over the repeats).
"$PY" - "$OUT" "${#settings[@]}" <<'PYEOF'
import glob, os, statistics, sys
out, k = sys.argv[1], int(sys.argv[2])
def rows(path):
    d = {}
    for line in open(path, errors="replace"):
        f = line.split()
        if not f or f[0].startswith("#") or not f[0].isdigit():
            continue
        d[int(f[0])] = f
    return d
lines = ["| setting | size | c++ out | c++ in | py out | py in | py proc c++ out | py proc c++ in |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
for i in range(k):
    cpp = [rows(p) for p in sorted(glob.glob(f"{out}/cpp_s{i}_r*.log"))]
    py = [rows(p) for p in sorted(glob.glob(f"{out}/py_s{i}_r*.log"))]
    sizes = sorted(set().union(*[set(d) for d in cpp + py])) if cpp + py else []
    for s in sizes:
        def med(ds, col):
            v = [float(d[s][col]) for d in ds if s in d and len(d[s]) > col]
            return f"{statistics.median(v):.1f}" if v else "-"
        lines.append(f"| s{i} | {s} | {med(cpp, 5)} | {med(cpp, 9)} | {med(py, 2)} | {med(py, 5)} | {med(py, 8)} | {med(py, 10)} |")
open(os.path.join(out, "results.md"), "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
PYEOF
