#!/usr/bin/env python3
"""Plot ack latency (p50, p99) and appends/s against offered load for Strata
and its SlateDB baseline, from `strata bench compare --sweep --json`.

    bench/plot_latency.py                       # run the sweep, then plot
    bench/plot_latency.py SWEEP.json            # plot a saved sweep
    bench/plot_latency.py SWEEP.json -o out.png

Without a JSON file it runs `$STRATA_BIN bench compare --sweep --json`
(default target/release/strata, which must be built with
`--features slatedb-baseline`) and keeps its output beside the PNG
(docs/plots/ack-latency.json by default). matplotlib comes from a virtualenv
the script creates in bench/.venv on first use (git-ignored).
"""

import argparse
import json
import os
import subprocess
import sys
import venv

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
VENV = os.path.join(HERE, ".venv")
VENV_PYTHON = os.path.join(VENV, "bin", "python")
MATPLOTLIB = "matplotlib>=3.8,<4"

ENGINES = (("strata", "Strata", "tab:blue"), ("slatedb", "SlateDB 0.18 baseline", "tab:orange"))


def ensure_matplotlib():
    """Re-run this script under bench/.venv's Python, creating it if needed."""
    try:
        import matplotlib  # noqa: F401

        return
    except ImportError:
        pass
    if os.path.realpath(sys.executable) == os.path.realpath(VENV_PYTHON):
        sys.exit("matplotlib is missing from bench/.venv; delete bench/.venv and run again")
    if not os.path.exists(VENV_PYTHON):
        print(f"[plot] creating {VENV} and installing {MATPLOTLIB}", file=sys.stderr)
        venv.create(VENV, with_pip=True)
        subprocess.run(
            [VENV_PYTHON, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", MATPLOTLIB],
            check=True,
        )
    os.execv(VENV_PYTHON, [VENV_PYTHON, os.path.abspath(__file__), *sys.argv[1:]])


def run_sweep(json_out):
    binary = os.environ.get("STRATA_BIN", os.path.join(ROOT, "target", "release", "strata"))
    extra = os.environ.get("SWEEP_ARGS", "").split()
    command = [binary, "bench", "compare", "--sweep", "--json", *extra]
    print(f"[plot] running {' '.join(command)}", file=sys.stderr)
    output = subprocess.run(command, check=True, stdout=subprocess.PIPE, text=True).stdout
    with open(json_out, "w", encoding="utf-8") as f:
        f.write(output)
    print(f"[plot] sweep saved to {json_out}", file=sys.stderr)
    return json.loads(output)


def series(report, engine, metric):
    """(appenders, median, low error, high error) of one engine's metric."""
    points = []
    for row in report["rows"]:
        spread = row.get(engine)
        if row["metric"] != metric or row.get("appenders") is None or spread is None:
            continue
        points.append((row["appenders"], spread["median"], spread["min"], spread["max"]))
    points.sort()
    xs = [p[0] for p in points]
    medians = [p[1] for p in points]
    errors = [[p[1] - p[2] for p in points], [p[3] - p[1] for p in points]]
    return xs, medians, errors


def plot(report, png):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import NullLocator

    fig, (latency_ax, rate_ax) = plt.subplots(1, 2, figsize=(12, 4.8))
    for engine, label, color in ENGINES:
        for metric, style, name in (
            ("ack latency p50, ms", "-o", "p50"),
            ("ack latency p99, ms", "--s", "p99"),
        ):
            xs, ys, errors = series(report, engine, metric)
            if xs:
                latency_ax.errorbar(xs, ys, yerr=errors, fmt=style, color=color, capsize=3, label=f"{label} {name}")
        xs, ys, errors = series(report, engine, "appends/s")
        if xs:
            rate_ax.errorbar(xs, ys, yerr=errors, fmt="-o", color=color, capsize=3, label=label)
    put_ms = report.get("put_latency_ms", 25)
    latency_ax.axhline(put_ms, color="grey", linewidth=0.8, linestyle=":", label=f"one PUT ({put_ms} ms)")
    ticks = sorted({row["appenders"] for row in report["rows"] if row.get("appenders")})
    for ax in (latency_ax, rate_ax):
        ax.set_xscale("log", base=2)
        ax.set_xticks(ticks, [f"{t:,}" for t in ticks])
        ax.xaxis.set_minor_locator(NullLocator())
    latency_ax.set_xlabel("concurrent appenders (closed loop, 100 B records)")
    latency_ax.set_ylabel("ack latency, ms")
    latency_ax.set_ylim(bottom=0)
    latency_ax.set_title("Durable ack latency against offered load")
    latency_ax.legend(fontsize=8)
    latency_ax.grid(True, alpha=0.3)
    rate_ax.set_yscale("log")
    rate_ax.set_xlabel("concurrent appenders")
    rate_ax.set_ylabel("acknowledged appends/s")
    rate_ax.set_title("Throughput")
    rate_ax.legend(fontsize=8)
    rate_ax.grid(True, which="both", alpha=0.3)
    fig.suptitle(
        f"strata bench compare --sweep: one shard, in-memory store, {put_ms} ms per PUT; "
        f"median of {report.get('rounds', '?')} rounds, bars = min–max",
        fontsize=10,
    )
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(png)), exist_ok=True)
    fig.savefig(png, dpi=120)
    print(f"[plot] wrote {png}", file=sys.stderr)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sweep_json", nargs="?", help="output of `strata bench compare --sweep --json`")
    parser.add_argument("-o", "--output", default=os.path.join(ROOT, "docs", "plots", "ack-latency.png"))
    args = parser.parse_args()
    ensure_matplotlib()
    if args.sweep_json:
        with open(args.sweep_json, encoding="utf-8") as f:
            report = json.load(f)
    else:
        report = run_sweep(os.path.splitext(args.output)[0] + ".json")
    if report.get("mode") != "sweep":
        print("[plot] note: this report is not from --sweep; plotting its append rows", file=sys.stderr)
    plot(report, args.output)


if __name__ == "__main__":
    main()
