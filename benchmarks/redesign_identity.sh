#!/usr/bin/env bash
# Identity check of a redesign (issue 10; issue 18, one scoring primitive): run the same commands with the code before
# and after, then compare summary.json and samples.jsonl (and the compare/tune outputs) file by file: byte for byte,
# else value by value (benchmarks/json_identity.py: key order aside; floats that moved by rounding are listed per
# field with their largest change: under 1e-9 for the probabilities, 1e-4 relative for the metrics made of them).
#
#   benchmarks/redesign_identity.sh SRC_DIR OUT_DIR     # SRC_DIR: a checkout's src/ (e.g. of `git archive main`)
#   benchmarks/redesign_identity.sh compare BEFORE AFTER
#
# Every command runs with one torch thread, offline, on the embedded model, with the reference data in
# ../shared/data. The paper suite runs twice: whole, through the default answer cache, and its first 20 prompts
# per set with --no-cache, so the generation path itself is compared too.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PY="$ROOT/.venv/bin/python"
DATA="${FAIRPROBE_DATA:-$ROOT/../shared/data}"
export FAIRPROBE_THREADS=1 HF_HUB_OFFLINE=1

if [ "${1:-}" = compare ]; then
    # Byte for byte; a file that differs is compared again with each side's own folder path replaced by OUT
    # (score and compare record the responses file and adapter paths they were given).
    before="$(cd "$2" && pwd)" after="$(cd "$3" && pwd)" status=0
    for f in $(cd "$before" && find . -name summary.json -o -name samples.jsonl -o -name compare.json \
        -o -name adapter_model.safetensors | sort); do
        if cmp -s "$before/$f" "$after/$f"; then
            echo "identical  $f"
        elif diff <(sed "s#$before#OUT#g" "$before/$f") <(sed "s#$after#OUT#g" "$after/$f") > /dev/null; then
            echo "identical  $f (but for the output folder path written in it)"
        elif [ "${f##*.}" != safetensors ] && report="$("$PY" "$ROOT/benchmarks/json_identity.py" "$before/$f" "$after/$f" \
            --root-before "$before" --root-after "$after")"; then
            if [ -z "$report" ]; then
                echo "identical  $f (value by value; key order aside)"
            else
                echo "rounding   $f (value by value; key order aside; floats that moved:)"; echo "$report"
            fi
        else
            echo "DIFFERENT  $f"; echo "$report"; status=1
        fi
    done
    # The tune manifest holds wall-clock times, and a fingerprint that hashes the (different) file paths.
    strip='del(.train_seconds, .started, .finished, .seconds_per_step, .fairprobe_version, .fingerprint)'
    if diff <(jq -S "$strip" "$before/tune/adapter/manifest.json" | sed "s#$before#OUT#g") \
        <(jq -S "$strip" "$after/tune/adapter/manifest.json" | sed "s#$after#OUT#g"); then
        echo "identical  ./tune/adapter/manifest.json (times, fingerprint and output folder path aside)"
    else
        echo "DIFFERENT  ./tune/adapter/manifest.json"; status=1
    fi
    exit $status
fi

SRC="$(cd "$1" && pwd)" OUT="$2"
rm -rf "$OUT" && mkdir -p "$OUT"
fp() { PYTHONPATH="$SRC" "$PY" -m fairprobe.cli "$@"; }

# 1. paper suite, whole (default cache), and 20 prompts per set asking the model again
fp run --data-dir "$DATA" --out "$OUT/paper" > "$OUT/paper.txt"
fp run --data-dir "$DATA" --limit 20 --no-cache --out "$OUT/paper-nocache" > "$OUT/paper-nocache.txt"
# 2. fairness suite, 30 prompts per set, asking the model
fp run --suite fairness --data-dir "$DATA" --limit 30 --no-cache --out "$OUT/fairness" > "$OUT/fairness.txt"
# 3. score: the fairness run's replies scored again without a model (professional-bias and gender-income)
jq -c '{id, response}' <(grep '"set":"professional-bias"' "$OUT/fairness/samples.jsonl") > "$OUT/pb-responses.jsonl"
jq -c '{id, original, flipped}' <(grep '"set":"gender-income"' "$OUT/fairness/samples.jsonl") > "$OUT/gi-responses.jsonl"
fp score --probes professional-bias --data-dir "$DATA" --responses "$OUT/pb-responses.jsonl" --out "$OUT/score-pb" \
    > "$OUT/score-pb.txt"
fp score --probes gender-income --data-dir "$DATA" --responses "$OUT/gi-responses.jsonl" --out "$OUT/score-gi" \
    > "$OUT/score-gi.txt"
# 4. a tiny Debias Tuning (4 steps) and a tiny comparison that uses its adapter
mkdir -p "$OUT/tune"
printf 'is riding a bike\nis cooking dinner\nplays the piano\nis reading a book\n' > "$OUT/tune/train.csv"
printf 'My friend is painting a fence\nis walking a dog\n' > "$OUT/tune/dev.csv"
fp tune --train "$OUT/tune/train.csv" --dev "$OUT/tune/dev.csv" --out "$OUT/tune/adapter" --steps 4 --rank 8 \
    --lr 5e-3 --batch-size 4 --eval-every 2 --checkpoint-every 2 --device cpu --dtype float32 > "$OUT/tune.txt"
fp compare --probes template,friend-statements --limit 8 --adapter "$OUT/tune/adapter" --out "$OUT/compare" \
    --device cpu --dtype float32 > "$OUT/compare.txt"
echo "outputs in $OUT"
