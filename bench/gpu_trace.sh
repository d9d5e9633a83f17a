#!/usr/bin/env bash
# One GPU-machine call: `ottr bench --trace` on the bench MLPs under several settings, each
# step's kernel timeline (CUPTI) written to $OUT, the step time, launches and trace summary
# printed last. Run from the repository root with the bundle unpacked in dev-bundle/ (libcupti
# in dev-bundle/lib). CASES overrides the case list: lines of
#   NAME MODEL BATCH PRECISION [ENV=VALUE...] [-- ottr flags...]
# GPU_FILTER (a gtest filter) runs those GPU tests first.
export LD_LIBRARY_PATH=dev-bundle/lib
out=${OUT:-/tmp/ottr-trace}
mkdir -p "$out/logs"
t0=$SECONDS
if [ -n "${GPU_FILTER:-}" ]; then
  timeout 300 dev-bundle/bin/ottr_gpu_tests --gtest_filter="$GPU_FILTER" > "$out/logs/gputests.log" 2>&1
  echo "gpu tests rc=$? ($((SECONDS - t0)) s)"
  grep -E "^\[  FAILED  \]|PASSED  \]|tests ran" "$out/logs/gputests.log" | sort -u | head -30
fi
python3 bench/make_bench_models.py "$out/m" > /dev/null
default_cases="
small128_tf32 mlp_small 128 tf32
small8192_tf32 mlp_small 8192 tf32
small128_bf16 mlp_small 128 bf16
small8192_bf16 mlp_small 8192 bf16
big4096_tf32 mlp_big 4096 tf32
big4096_bf16 mlp_big 4096 bf16
"
summary=""
while read -r name model batch precision rest; do
  [ -z "$name" ] && continue
  envs=()
  flags=()
  seen_dashes=0
  for w in $rest; do
    if [ "$w" = "--" ]; then seen_dashes=1; continue; fi
    if [ $seen_dashes = 0 ]; then envs+=("$w"); else flags+=("$w"); fi
  done
  log="$out/logs/$name.log"
  timeout 120 env "${envs[@]}" dev-bundle/bin/ottr bench "$out/m/$model.onnx" --device cuda --batch "$batch" \
    --optimizer adam --lr 1e-3 --precision "$precision" --name "$name" --csv "$out/bench.csv" \
    --trace "$out/logs/$name.trace" "${flags[@]}" > "$log" 2>&1 || echo "$name failed: $(tail -2 "$log")"
  summary+="$(printf '%-28s %s | %s' "$name" "$(grep -E "^$name," "$log" | cut -d, -f5,6,7)" "$(grep '^trace:' "$log" | cut -c8-80)")"$'\n'
done <<< "${CASES:-$default_cases}"
rm -rf "$out/m"
tar czf "$out/logs.tgz" -C "$out" logs && rm -rf "$out/logs"
echo "total $((SECONDS - t0)) s"
echo "name us_per_step,launches,peak | trace"
printf '%s' "$summary"
