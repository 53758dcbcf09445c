#!/usr/bin/python3
"""Scheduling-overhead benchmark: dagrun vs ninja vs snakemake.

The same DAG of no-op tasks (each task runs `touch stamps/t<i>`) is
written three ways -- a dagrun YAML, a build.ninja and a Snakefile -- and
run by each tool with 2-way parallelism from a clean directory, timing the
wall clock of the whole tool process. Then `dagrun check` is timed on a
large DAG, with its peak RSS.

Standard library only; run with Debian's /usr/bin/python3:

    scripts/build.sh && /usr/bin/python3 bench/sched/run.py

A benchmark, not a test: it always exits 0 (unless its own arguments are
wrong), and prints whether the targets are met.
"""

import argparse
import datetime
import json
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Targets from the issue.
TARGET_VS_NINJA = 1.5       # dagrun wall time <= 1.5 x ninja's
TARGET_VS_SNAKEMAKE = 20.0  # snakemake wall time >= 20 x dagrun's

# Runs a command and reports its wall time (time.monotonic around
# subprocess.run) and the peak RSS of the largest process in its tree
# (RUSAGE_CHILDREN of this fresh wrapper covers only that command).
WRAPPER = r"""
import json, resource, subprocess, sys, time
timeout = float(sys.argv[1]) or None
log = open(sys.argv[2], "wb")
t0 = time.monotonic()
try:
    rc = subprocess.run(sys.argv[3:], stdin=subprocess.DEVNULL, stdout=log,
                        stderr=subprocess.STDOUT, timeout=timeout).returncode
    timed_out = False
except subprocess.TimeoutExpired:
    rc, timed_out = None, True
wall = time.monotonic() - t0
rss_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
print(json.dumps({"rc": rc, "wall": wall, "rss_kib": rss_kib,
                  "timed_out": timed_out}))
"""


# ---------------------------------------------------------------- graphs

def gen_graph(shape, n, seed):
    """deps[i] = list of upstream task indices of task i (all < i)."""
    if shape == "chain":
        return [[]] + [[i - 1] for i in range(1, n)]
    if shape == "fan":
        if n < 3:
            raise SystemExit("fan needs at least 3 tasks")
        return [[]] + [[0] for _ in range(1, n - 1)] + [list(range(1, n - 1))]
    if shape == "random":
        rng = random.Random(seed)
        deps = []
        for i in range(n):
            k = min(rng.randint(0, 3), i)
            deps.append(sorted(rng.sample(range(i), k)))
        return deps
    raise SystemExit(f"unknown graph shape: {shape}")


def write_dagrun(path, name, deps):
    # cwd: "." is the DAG file's directory (the work dir), so stamps land
    # where ninja and snakemake put theirs whatever dagrun's default cwd is.
    with open(path, "w") as f:
        f.write(f"dag: bench_{name}\nmax_parallel: 2\ntasks:\n")
        for i, d in enumerate(deps):
            needs = ""
            if d:
                needs = " needs: [" + ", ".join(f"t{j}" for j in d) + "],"
            f.write(f"  t{i}: {{stage: exec,{needs} with: "
                    f"{{command: [touch, stamps/t{i}], cwd: .}}}}\n")


def write_ninja(path, deps):
    with open(path, "w") as f:
        f.write("rule touch\n  command = touch $out\n\n")
        for i, d in enumerate(deps):
            ins = "".join(f" stamps/t{j}" for j in d)
            f.write(f"build stamps/t{i}: touch{ins}\n")


SNAKEFILE = """\
# One wildcard rule + an input function (the idiomatic way to express a
# large generated graph; 10,000 literal rules take Snakemake ages to parse).
import json
DEPS = json.load(open("deps.json"))

rule all:
    input: [f"stamps/t{i}" for i in range(len(DEPS))]

rule task:
    output: "stamps/t{i}"
    input: lambda wc: [f"stamps/t{j}" for j in DEPS[int(wc.i)]]
    wildcard_constraints: i=r"\\d+"
    shell: "touch {output}"
"""


def write_snakemake(path, deps):
    with open(os.path.join(os.path.dirname(path), "deps.json"), "w") as f:
        json.dump(deps, f, separators=(",", ":"))
    with open(path, "w") as f:
        f.write(SNAKEFILE)


# ---------------------------------------------------------------- running

def timed(cmd, cwd, log, timeout=0):
    out = subprocess.run(
        [sys.executable, "-c", WRAPPER, str(timeout), log] + cmd,
        cwd=cwd, stdout=subprocess.PIPE, check=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def fresh_dir(path):
    if os.path.exists(path):
        shutil.rmtree(path)
    os.makedirs(path)
    return path


def count_stamps(work):
    d = os.path.join(work, "stamps")
    return len(os.listdir(d)) if os.path.isdir(d) else 0


def run_tool(tool, deps, name, args, rep):
    n = len(deps)
    work = fresh_dir(os.path.join(args.work, f"{name}-{tool}-{rep}"))
    os.makedirs(os.path.join(work, "stamps"))
    log = os.path.join(args.out, f"{name}-{tool}-{rep}.log")
    timeout = 0
    if tool == "dagrun":
        write_dagrun(os.path.join(work, "dag.yaml"), name, deps)
        runs = os.path.join(work, "runs")
        cmd = [args.dagrun, "run", "dag.yaml", "-j", "2", "-q",
               "--runs-dir", runs]
    elif tool == "ninja":
        write_ninja(os.path.join(work, "build.ninja"), deps)
        cmd = ["ninja", "-j2", "--quiet"]
    else:
        write_snakemake(os.path.join(work, "Snakefile"), deps)
        cmd = ["snakemake", "-s", "Snakefile", "--cores", "2",
               "--quiet", "all"]
        timeout = args.snakemake_timeout
    r = timed(cmd, work, log, timeout)
    r["ok"] = (not r["timed_out"] and r["rc"] == 0
               and count_stamps(work) == n)
    if not r["ok"] and not r["timed_out"]:
        with open(log, errors="replace") as f:
            tail = f.read()[-1500:]
        print(f"  {tool} on {name}: rc={r['rc']}, "
              f"{count_stamps(work)}/{n} stamps; log {log}:\n{tail}",
              file=sys.stderr)
    return r


def fmt_time(r, timeout):
    if r is None:
        return "-"
    if r["timed_out"]:
        return f"> {timeout:.0f}"
    if not r["ok"]:
        return "FAILED"
    return f"{r['wall']:.2f}"


def ratio(a, b):
    if not a or not b or not a["ok"] or not b["ok"]:
        return None
    return a["wall"] / b["wall"]


def tool_version(cmd):
    try:
        return subprocess.run(cmd, capture_output=True, text=True,
                              timeout=60).stdout.strip().splitlines()[0]
    except Exception:
        return "?"


def machine():
    model = "?"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return (f"{os.cpu_count()} CPUs ({model}), {platform.platform()}, "
            f"{datetime.datetime.now().astimezone():%Y-%m-%d %H:%M %Z}")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tasks", type=int, default=10000)
    p.add_argument("--check-tasks", type=int, default=100000,
                   help="size of the random DAG for `dagrun check` (0: skip)")
    p.add_argument("--graphs", default="chain,fan,random")
    p.add_argument("--skip-snakemake", action="store_true")
    p.add_argument("--dagrun", default=os.path.join(REPO, "build/bin/dagrun"))
    p.add_argument("--out", default=os.path.join(REPO, "bench/out"))
    p.add_argument("--work", help="where the tools run (default: a new "
                   "directory under OUT/work); e.g. on tmpfs to leave the "
                   "disk out")
    p.add_argument("--repeat", type=int, default=3,
                   help="runs of dagrun and ninja per graph; the median "
                        "counts (snakemake runs once)")
    p.add_argument("--snakemake-timeout", type=float, default=900,
                   help="seconds before a snakemake run is stopped")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--keep", action="store_true",
                   help="keep the work directories")
    args = p.parse_args()
    args.dagrun = os.path.abspath(args.dagrun)
    args.out = os.path.abspath(args.out)
    graphs = [g for g in args.graphs.split(",") if g]
    os.makedirs(args.out, exist_ok=True)
    # A fresh work directory per invocation, removed only at the end: on
    # ext4 without a journal, creating inodes right after deleting many
    # (within about a minute) is several times slower, which would charge
    # one tool for the clean-up of the previous one.
    stamp = datetime.datetime.now().strftime("%Y%m%dT%H%M%S")
    base = os.path.abspath(args.work or os.path.join(args.out, "work"))
    args.work = os.path.join(base, f"{stamp}-{os.getpid()}")
    os.makedirs(args.work)
    try:
        return bench(args, graphs)
    finally:
        if not args.keep:
            shutil.rmtree(args.work, ignore_errors=True)
            try:
                os.rmdir(base)
            except OSError:
                pass


def bench(args, graphs):

    tools = ["ninja", "dagrun"] + ([] if args.skip_snakemake else ["snakemake"])
    have = {t: shutil.which(t) is not None for t in ("ninja", "snakemake")}
    have["dagrun"] = os.access(args.dagrun, os.X_OK)
    for t in tools:
        if not have[t]:
            print(f"note: {t} not found; skipped", file=sys.stderr)
    tools = [t for t in tools if have[t]]

    print(f"machine:   {machine()}")
    print(f"ninja:     {tool_version(['ninja', '--version']) if have['ninja'] else '-'}")
    if "snakemake" in tools:
        print(f"snakemake: {tool_version(['snakemake', '--version'])}")
    print(f"dagrun:    {args.dagrun}")
    print(f"each task: touch stamps/t<i>; parallelism 2; "
          f"dagrun/ninja: median of {args.repeat}, snakemake: 1 run\n",
          flush=True)

    rows = []
    for name in graphs:
        deps = gen_graph(name, args.tasks, args.seed)
        edges = sum(len(d) for d in deps)
        res = {}
        for tool in tools:
            reps = 1 if tool == "snakemake" else max(1, args.repeat)
            runs = []
            for rep in range(reps):
                r = run_tool(tool, deps, name, args, rep)
                print(f"  {name:<7} {tool:<10} run {rep + 1}: "
                      f"{fmt_time(r, args.snakemake_timeout):>8} s  "
                      f"peak RSS {r['rss_kib'] / 1024:7.1f} MiB", flush=True)
                runs.append(r)
                if not r["ok"]:
                    break
            ok = [r for r in runs if r["ok"]]
            if len(ok) == len(runs):
                med = statistics.median(r["wall"] for r in ok)
                res[tool] = dict(runs[0], wall=med,
                                 rss_kib=max(r["rss_kib"] for r in ok))
            else:
                res[tool] = runs[-1]
        rows.append((name, len(deps), edges, res))

    # ---- table
    st = args.snakemake_timeout
    hdr = (f"{'graph':<7} {'tasks':>6} {'edges':>6} {'ninja s':>8} "
           f"{'dagrun s':>9} {'snakemake s':>12} {'dagrun/ninja':>13} "
           f"{'snakemake/dagrun':>17}")
    print("\n" + hdr + "\n" + "-" * len(hdr))
    verdicts = []
    for name, n, edges, res in rows:
        dn = ratio(res.get("dagrun"), res.get("ninja"))
        sd = ratio(res.get("snakemake"), res.get("dagrun"))
        sm = res.get("snakemake")
        sd_s = f"{sd:.1f}x" if sd is not None else "-"
        lower = False  # snakemake timed out: sd is a lower bound
        if sm and sm["timed_out"] and res.get("dagrun", {}).get("ok"):
            sd, lower = st / res["dagrun"]["wall"], True
            sd_s = f"> {sd:.0f}x"
        print(f"{name:<7} {n:>6} {edges:>6} "
              f"{fmt_time(res.get('ninja'), st):>8} "
              f"{fmt_time(res.get('dagrun'), st):>9} "
              f"{fmt_time(sm, st):>12} "
              f"{(f'{dn:.2f}x' if dn is not None else '-'):>13} "
              f"{sd_s:>17}")
        verdicts.append((name, dn, sd, lower))

    print("\ntargets (from the issue): dagrun <= "
          f"{TARGET_VS_NINJA}x ninja; snakemake >= {TARGET_VS_SNAKEMAKE:.0f}x dagrun")
    for name, dn, sd, lower in verdicts:
        a = ("n/a" if dn is None else
             ("MET" if dn <= TARGET_VS_NINJA else "NOT MET") + f" ({dn:.2f}x)")
        if sd is None:
            b = "n/a"
        elif lower:  # only a lower bound: met if it already reaches it
            b = (("MET" if sd >= TARGET_VS_SNAKEMAKE else "UNKNOWN")
                 + f" (> {sd:.0f}x, snakemake timed out)")
        else:
            b = (("MET" if sd >= TARGET_VS_SNAKEMAKE else "NOT MET")
                 + f" ({sd:.1f}x)")
        print(f"  {name:<7} vs ninja: {a:<18} vs snakemake: {b}")

    # ---- dagrun check on a big DAG
    if args.check_tasks > 0 and have["dagrun"]:
        n = args.check_tasks
        work = fresh_dir(os.path.join(args.work, "check"))
        deps = gen_graph("random", n, args.seed)
        path = os.path.join(work, "dag.yaml")
        write_dagrun(path, "check", deps)
        size = os.path.getsize(path)
        log = os.path.join(args.out, "check.log")
        r = timed([args.dagrun, "check", "dag.yaml"], work, log)
        state = "ok" if r["rc"] == 0 else f"FAILED rc={r['rc']} (see {log})"
        print(f"\ndagrun check, random DAG of {n} tasks "
              f"({sum(len(d) for d in deps)} edges, {size / 1e6:.1f} MB YAML): "
              f"{r['wall']:.2f} s, peak RSS {r['rss_kib'] / 1024:.1f} MiB, {state}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
