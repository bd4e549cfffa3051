#!/usr/bin/env python3
"""Compare two builds of yuebing with the same bench, run back to back (interleaved).

    for i in 1 2 3; do
      OLD/yuebing bench transfer --repeat 1 --json old_$i.json
      NEW/yuebing bench transfer --repeat 1 --json new_$i.json
    done
    python3 scripts/compare_builds.py --old old_*.json --new new_*.json

Prints, per row (case, variant, metric), the median over the old runs and over the new runs,
new / old, and the A/A spread: how far apart the runs of one build were ((max - min) / median,
the larger of the two builds'). A row is a regression when the new build is worse by more than
5 % and by more than that spread (rates: lower; latencies and CPU per byte: higher). Exits 1 if
any row is.

With --against-baseline, rows that carry a baseline measured in the same run (the bench's
`ratio`: value / baseline_value) are compared by that ratio instead of their raw value, which
takes out what the machine did to both (these VMs are shared and noisy).
"""
import argparse
import json
import statistics

HIGHER_IS_WORSE = ("_us", "cpu_s_per_GB", "s_per_GB")


def rows(paths, against_baseline):
    out = {}
    for path in paths:
        with open(path) as f:
            for r in json.load(f)["rows"]:
                if against_baseline:
                    if "ratio" not in r:
                        continue
                    key = (r["case"], r["variant"], r["metric"] + " x " + r["baseline"])
                    out.setdefault(key, []).append(float(r["ratio"]))
                else:
                    key = (r["case"], r["variant"], r["metric"])
                    out.setdefault(key, []).append(float(r["value"]))
    return out


def spread(values):
    m = statistics.median(values)
    return (max(values) - min(values)) / m if m else 0.0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--old", nargs="+", required=True)
    ap.add_argument("--new", nargs="+", required=True)
    ap.add_argument("--tolerance", type=float, default=0.05)
    ap.add_argument("--against-baseline", action="store_true")
    args = ap.parse_args()
    old, new = rows(args.old, args.against_baseline), rows(args.new, args.against_baseline)
    worse = 0
    print(f"{'case':28} {'variant':22} {'metric':14} {'old':>10} {'new':>10} {'new/old':>8} {'A/A':>6}")
    for key in sorted(old.keys() & new.keys()):
        case, variant, metric = key
        o, n = statistics.median(old[key]), statistics.median(new[key])
        if o == 0:
            continue
        ratio = n / o
        aa = max(spread(old[key]), spread(new[key]))
        bound = max(args.tolerance, aa)
        higher_worse = metric.split(" x ")[0].endswith(HIGHER_IS_WORSE)
        regressed = ratio > 1 + bound if higher_worse else ratio < 1 - bound
        worse += regressed
        flag = "  WORSE" if regressed else ""
        print(f"{case:28} {variant:22} {metric:14} {o:10.3f} {n:10.3f} {ratio:8.2f} {aa:6.2f}{flag}")
    print(f"{worse} row(s) worse beyond max({args.tolerance:.0%}, A/A spread)")
    raise SystemExit(1 if worse else 0)


if __name__ == "__main__":
    main()
