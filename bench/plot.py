#!/usr/bin/env python3
"""plot.py - latency and bandwidth against message size, from xfer-perf --json output.

usage: bench/plot.py [--out PREFIX] [--note TEXT] [--no-install] FILE...

Each FILE holds JSON lines as xfer-perf --json (or tcp-floor --json) prints
them; other lines are ignored. Latency lines (test *_lat) give p50_us,
bandwidth lines (test *_bw) give mib_s. A line may carry a "label" (the
peers' medians bench/compare.sh writes do); otherwise the label is the tool
and provider, e.g. "xfer-perf (tcp)", and the test name when a file holds
several latency or bandwidth tests.

Writes PREFIX-latency.png (p50 half round trip against size, log-log) and
PREFIX-bandwidth.png (MiB/s against size, log x); PREFIX defaults to
docs/perf. Series with many sizes are drawn as lines, the peers' few points
as markers. matplotlib is installed with pip when missing (unless
--no-install); the exit status is 3 when it cannot be had.
"""

import argparse
import json
import subprocess
import sys


def load_matplotlib(install):
    try:
        import matplotlib
    except ImportError:
        if not install:
            return None
        print("plot.py: installing matplotlib with pip", file=sys.stderr)
        r = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "matplotlib"], check=False)
        if r.returncode != 0:
            return None
        try:
            import matplotlib
        except ImportError:
            return None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def read_series(paths):
    """{"lat"|"bw": {label: {size: value}}}"""
    series = {"lat": {}, "bw": {}}
    for path in paths:
        rows = []
        with open(path, errors="replace") as f:
            for line in f:
                line = line.strip()
                if not line.startswith("{"):
                    continue
                try:
                    rows.append(json.loads(line))
                except ValueError:
                    continue
        tests = {}
        for r in rows:
            kind = "lat" if "lat" in str(r.get("test", "")) else "bw"
            tests.setdefault(kind, set()).add(r.get("test"))
        for r in rows:
            test = str(r.get("test", ""))
            kind = "lat" if "lat" in test else "bw"
            key = "p50_us" if kind == "lat" else "mib_s"
            if key not in r or "size" not in r:
                continue
            label = r.get("label")
            if label is None:
                label = r.get("tool", "?")
                if r.get("provider"):
                    label += f" ({r['provider']})"
                if len(tests[kind]) > 1:
                    label += f" {test}"
            series[kind].setdefault(label, {})[int(r["size"])] = float(r[key])
    return series


def size_ticks(ax, sizes):
    lo, hi = min(sizes), max(sizes)
    ticks = [1 << k for k in range(0, 31, 2) if lo <= (1 << k) <= hi]
    names = []
    for t in ticks:
        if t >= 1 << 20:
            names.append(f"{t >> 20}M")
        elif t >= 1 << 10:
            names.append(f"{t >> 10}k")
        else:
            names.append(str(t))
    ax.set_xticks(ticks)
    ax.set_xticklabels(names)
    ax.minorticks_off()


def plot(plt, kind, data, out, note, colors):
    fig, ax = plt.subplots(figsize=(8, 5), dpi=100)
    sizes = []
    for label in sorted(data, key=lambda l: (len(data[l]) < 4, l)):
        color = colors[label]
        points = sorted(data[label].items())
        xs = [s for s, _ in points]
        ys = [v for _, v in points]
        sizes += xs
        if len(points) >= 4:
            ax.plot(xs, ys, marker="o", markersize=3, linewidth=1.5, label=label, color=color)
        else:
            ax.plot(xs, ys, marker="D", markersize=6, linestyle="none", label=label, color=color)
    ax.set_xscale("log", base=2)
    if kind == "lat":
        ax.set_yscale("log")
        ax.set_ylabel("latency, p50 half round trip (µs)")
        ax.set_title("Latency against message size")
    else:
        ax.set_ylabel("bandwidth (MiB/s)")
        ax.set_ylim(bottom=0)
        ax.set_title("Bandwidth against message size")
    if sizes:
        size_ticks(ax, sizes)
    ax.set_xlabel("message size (bytes)")
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize="small")
    if note:
        fig.text(0.01, 0.01, note, fontsize=7, color="dimgray", wrap=True)
        fig.subplots_adjust(bottom=0.18)
    fig.savefig(out)
    plt.close(fig)
    print(f"plot.py: wrote {out}", file=sys.stderr)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="+", metavar="FILE")
    ap.add_argument("--out", default="docs/perf", metavar="PREFIX")
    ap.add_argument("--note", default="", help="a caption under each plot (machine, load, command)")
    ap.add_argument("--no-install", action="store_true", help="do not pip install matplotlib")
    args = ap.parse_args()
    series = read_series(args.files)
    if not series["lat"] and not series["bw"]:
        sys.exit("plot.py: no latency or bandwidth results in " + " ".join(args.files))
    plt = load_matplotlib(not args.no_install)
    if plt is None:
        print("plot.py: matplotlib is not available: no plots", file=sys.stderr)
        sys.exit(3)
    # One colour per series across both plots.
    labels = sorted(set(series["lat"]) | set(series["bw"]))
    cycle = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    colors = {label: cycle[i % len(cycle)] for i, label in enumerate(labels)}
    if series["lat"]:
        plot(plt, "lat", series["lat"], args.out + "-latency.png", args.note, colors)
    if series["bw"]:
        plot(plt, "bw", series["bw"], args.out + "-bandwidth.png", args.note, colors)


if __name__ == "__main__":
    main()
