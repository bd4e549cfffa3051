#!/usr/bin/env python3
"""Compare yuebing's bench runs with the Mooncake peer's, run back to back (interleaved).

    python3 scripts/compare_peer.py store --mooncake mc_1.json mc_2.json mc_3.json \
        --yuebing yb_1.json yb_2.json yb_3.json
    python3 scripts/compare_peer.py transfer --mooncake ... --yuebing ...

store: the Mooncake files come from `bash ../shared/peers/run_store_peer.sh --clients 2 --out
F`, the yuebing ones from `yuebing bench store --repeat 1 --json F`.
transfer: Mooncake's from `$VENV/bin/python ../shared/peers/mooncake_te_bench.py --engine python
--blocks 4K,64K,1M,16M --batches 1,32 --ops write --duration 1 --buffer 1G --out F`, yuebing's
from `yuebing bench transfer --repeat 1 --json F`.

Prints, per case, the medians over the runs (with their spread, max - min) for Mooncake and
each yuebing variant, and the ratios yuebing / Mooncake.
"""
import argparse
import json
import statistics


def label(size):
    for unit, div in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= div and size % div == 0:
            return f"{size // div}{unit}"
    return f"{size}B"


def mooncake_case(r):
    kind = r["kind"].replace("small ", "").replace("is_exist", "exist")
    batch = f" x{r['batch']}" if r["batch"] > 1 else ""
    return f"{kind} {label(r['size'])}{batch}"


def med(values):
    return (statistics.median(values), max(values) - min(values)) if values else (None, None)


def load_mooncake(paths):
    out = {}
    for p in paths:
        for r in json.load(open(p))["results"]:
            c = out.setdefault(mooncake_case(r), {"GB/s": [], "p50_us": [], "ops/s": []})
            c["GB/s"].append(r["gbps"])
            c["p50_us"].append(r["lat_med_us"])
            c["ops/s"].append(r["items"] / r["seconds"])
    return out


def load_yuebing(paths):
    out = {}
    for p in paths:
        for r in json.load(open(p))["rows"]:
            out.setdefault(r["variant"], {}).setdefault(r["case"], {}).setdefault(r["metric"], []).append(r["value"])
    return out


def load_mooncake_te(paths):
    out = {}
    for p in paths:
        for r in json.load(open(p))["results"]:
            case = f"{r['op']} {label(r['block'])} batch={r['batch']}"
            c = out.setdefault(case, {"GB/s": [], "p50_us": [], "cpu_s_per_GB": []})
            c["GB/s"].append(r["gbps"])
            c["p50_us"].append(r["lat_med_us"])
            cpu = (r["cpu_initiator_pct"] + r["cpu_target_pct"]) / 100 * r["seconds"]
            c["cpu_s_per_GB"].append(cpu / (r["bytes"] / 1e9))
    return out


def transfer(a):
    mc = load_mooncake_te(a.mooncake)
    yb = load_yuebing(a.yuebing)
    print(f"runs: mooncake {len(a.mooncake)}, yuebing {len(a.yuebing)}; medians (spread)")
    print(f"{'case':22} {'variant':18} {'GB/s':>14} {'x mc':>6} {'x base':>7} {'p50 us':>12} "
          f"{'cpu s/GB':>9} {'x mc':>6} {'x base':>7}")
    baseline = {"yuebing-tcp": ("raw-tcp-pingpong", "raw-tcp-stream"),
                "yuebing-shm": ("memcpy-1thread", "memcpy-1thread")}
    for case, m in mc.items():
        g, gs = med(m["GB/s"])
        p, _ = med(m["p50_us"])
        c, _ = med(m["cpu_s_per_GB"])
        print(f"{case:22} {'mooncake':18} {fmt(g)+' ('+fmt(gs)+')':>14} {'':>6} {'':>7} "
              f"{fmt(p, 0):>12} {fmt(c, 2):>9}")
        for v, (base1, base32) in baseline.items():
            row = yb.get(v, {}).get(case)
            if not row:
                continue
            base = yb.get(base1 if case.endswith("batch=1") else base32, {}).get(case, {})
            yg, ygs = med(row.get("GB/s", []))
            yp, _ = med(row.get("p50_us", []))
            yc, _ = med(row.get("cpu_s_per_GB", []))
            bg, _ = med(base.get("GB/s", []))
            bc, _ = med(base.get("cpu_s_per_GB", []))
            print(f"{'':22} {v:18} {fmt(yg)+' ('+fmt(ygs)+')':>14} {fmt(yg / g if g else None, 2):>6} "
                  f"{fmt(yg / bg if bg else None, 2):>7} {fmt(yp, 0):>12} {fmt(yc, 2):>9} "
                  f"{fmt(yc / c if c and yc else None, 2):>6} {fmt(yc / bc if bc and yc else None, 2):>7}")


def fmt(v, digits=3):
    return "-" if v is None else f"{v:.{digits}f}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("bench", choices=["store", "transfer"])
    ap.add_argument("--mooncake", nargs="+", required=True)
    ap.add_argument("--yuebing", nargs="+", required=True)
    a = ap.parse_args()
    (store if a.bench == "store" else transfer)(a)


def store(a):
    mc = load_mooncake(a.mooncake)
    yb = load_yuebing(a.yuebing)
    variants = sorted(yb)
    print(f"runs: mooncake {len(a.mooncake)}, yuebing {len(a.yuebing)}; medians (spread)")
    head = f"{'case':26} {'mc GB/s':>14}"
    for v in variants:
        head += f" {v + ' GB/s':>20} {'x':>5}"
    head += f" | {'mc p50 us':>14}"
    for v in variants:
        head += f" {v + ' p50':>20} {'x':>5}"
    print(head)
    for case, m in mc.items():
        line = ""
        g, gs = med(m["GB/s"])
        p, ps = med(m["p50_us"])
        line += f"{case:26} {fmt(g)+' ('+fmt(gs)+')':>14}"
        for v in variants:
            yv = yb[v].get(case, {})
            yg, ygs = med(yv.get("GB/s", []))
            line += f" {fmt(yg)+' ('+fmt(ygs)+')':>20} {fmt(yg / g if yg and g else None, 2):>5}"
        line += f" | {fmt(p, 0)+' ('+fmt(ps, 0)+')':>14}"
        for v in variants:
            yv = yb[v].get(case, {})
            yp, yps = med(yv.get("p50_us", []))
            line += f" {fmt(yp, 0)+' ('+fmt(yps, 0)+')':>20} {fmt(yp / p if yp and p else None, 2):>5}"
        print(line)
    for v in variants:
        be = yb[v].get("batch_exist 1KiB x32", {}).get("ops/s", [])
        mb = mc.get("batch_exist 1KiB x32", {}).get("ops/s", [])
        if be and mb:
            print(f"batch exist keys/s: mooncake {med(mb)[0]:.0f}, {v} {med(be)[0]:.0f} ({med(be)[0] / med(mb)[0]:.2f}x)")


if __name__ == "__main__":
    main()
