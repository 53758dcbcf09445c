#!/usr/bin/python3
"""Step time, per-rank memory and per-kind communication of parallel
layouts of one model on CPU ranks (issue 25): the train stage under
mpirun, one OpenMP/OpenBLAS thread a rank, the same GPT-2 and the same
global batch in every layout, against one process.

Layouts (world 4, oversubscribed where the machine has fewer cores):
D=4 at zero_stage 0-3, P=2 x D=2 (1f1b, gpipe at zero_stage 0; 1f1b at
1-3), P=4 (1f1b), and the T layouts (T=2 x D=2 at zero_stage 0-3, T=4,
T=2 x P=2 under 1f1b and gpipe) when the train stage has
tensor_parallel; --quick: world 2, D=2 against P=2.

For each: ms/step (the median of step_time_s over the steps after the
first of each run, then the median over the repeats; the layouts take
turns within a round, so that a load that comes and goes falls on all
alike), the ratio to one process's and to D=4 stage 0's, each rank's
in-step peak memory (summary.json's memory.ranks: params + grads +
optimizer + activations; for the pipeline and tensor layouts, the whole
model's arrays among them in brackets), and rank 0's
time per step inside each kind of comm call (summary.json's comm: waits
for slower peers included, so a pipeline stage's bubble shows in its
send/recv) and the MiB its calls moved a step (each call's buffer). A benchmark, not a test: exits 0 once the runs succeed.

  /usr/bin/python3 bench/parallel/run.py [--dagrun build/bin/dagrun]
      [--steps 20] [--repeats 3] [--layers 4] [--width 128] [--quick]
      [--keep] [--only REGEX]
"""
import argparse, glob, json, os, random, re, shutil, statistics, subprocess, sys, tempfile

ap = argparse.ArgumentParser()
ap.add_argument("--dagrun", default="build/bin/dagrun")
ap.add_argument("--steps", type=int, help="steps a run (20; --quick: 5)")
ap.add_argument("--repeats", type=int, help="runs of each layout (3; --quick: 1)")
ap.add_argument("--layers", type=int, default=4)
ap.add_argument("--width", type=int, default=128)
ap.add_argument("--heads", type=int, default=4)
ap.add_argument("--context", type=int, default=64)
ap.add_argument("--vocab", type=int, default=512)
ap.add_argument("--quick", action="store_true", help="world 2: D=2 against P=2 (and T=2)")
ap.add_argument("--keep", action="store_true", help="keep the work directory")
ap.add_argument("--only", metavar="REGEX",
                help="the layouts whose name matches, beside the two baselines (one process, D0)")
a = ap.parse_args()
a.steps = a.steps or (5 if a.quick else 20)
a.repeats = a.repeats or (1 if a.quick else 3)
DAGRUN = os.path.abspath(a.dagrun)
if not os.access(DAGRUN, os.X_OK):
    sys.exit(f"parallel: no {DAGRUN} (build it: scripts/build.sh)")
if not shutil.which("mpirun"):
    sys.exit("parallel: mpirun (Open MPI) is needed")

work = tempfile.mkdtemp(prefix="dagrun-bench-parallel.")
ENV = {**os.environ, "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}


def run_dag(name, text):
    path = f"{work}/{name}.yaml"
    with open(path, "w") as f:
        f.write(text)
    runs = f"{work}/runs-{name}"
    p = subprocess.run([DAGRUN, "run", path, "-q", "--no-cache", "--runs-dir", runs], env=ENV,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if p.returncode != 0:
        logs = glob.glob(f"{runs}/**/attempt-*/log", recursive=True)
        tail = open(logs[0]).read()[-3000:] if logs else ""
        shutil.rmtree(work, ignore_errors=True)
        sys.exit(f"parallel: {name} failed (exit {p.returncode}):\n{p.stdout[-2000:]}\n{tail}")
    return runs


# The data: a small English-like corpus, sharded and tokenized by dagrun.
corpus = f"{work}/corpus"
os.makedirs(corpus)
rng = random.Random(11)
words = "the cat a dog my model the gpu our team this loss the data eats trains on ignores follows beats learns from writes the fish a batch the tokens every epoch the logs some text".split()
for f in range(4):
    with open(f"{corpus}/part{f}.txt", "w") as out:
        for d in range(300):
            out.write(" ".join(rng.choice(words) for _ in range(rng.randint(40, 120))) + ".\n%\n")
runs = run_dag("data", f"""dag: data
tasks:
  shard: {{stage: shard, with: {{input: "{corpus}", separator: "%", shards: 2, val_fraction: 0.1}}}}
  tokenize: {{stage: tokenize, needs: [shard], with: {{shards: "${{tasks.shard.outputs.dir}}", vocab_size: {a.vocab}}}}}
""")
DATA = os.path.dirname(glob.glob(f"{runs}/**/tokenize/out/*", recursive=True)[0])

stages = subprocess.run([DAGRUN, "stages", "train"], stdout=subprocess.PIPE, text=True).stdout
HAVE_T = "tensor_parallel" in stages

MODEL = (f'data: "{DATA}", n_layer: {a.layers}, n_head: {a.heads}, n_embd: {a.width}, '
         f"block_size: {a.context}, threads: 1, steps: {a.steps}, lr: 0.001, warmup: 2, "
         f"eval_every: 0, eval_batches: 1, samples: 0, spike_policy: none, checkpoint_every: 0")
# (name, world, params): the same global batch of 16 sequences (8 in
# --quick) everywhere: batch_size x grad_accum x data-parallel replicas.
G = 8 if a.quick else 16
if a.quick:
    layouts = [("one process", 1, f"batch_size: {G // 2}, grad_accum: 2"),
               ("D=2 zero 0", 2, f"batch_size: {G // 2}, grad_accum: 1, zero_stage: 0"),
               ("P=2 1f1b m=4", 2, f"batch_size: {G // 4}, grad_accum: 4, pipeline_parallel: 2")]
    if HAVE_T:
        layouts.append(("T=2", 2, f"batch_size: {G}, grad_accum: 1, tensor_parallel: 2"))
else:
    layouts = [("one process", 1, "batch_size: 4, grad_accum: 4")]
    layouts += [(f"D=4 zero {z}", 4, f"batch_size: 4, grad_accum: 1, zero_stage: {z}") for z in range(4)]
    layouts += [(f"P=2xD=2 {s} m=4 zero 0", 4, f"batch_size: 2, grad_accum: 4, pipeline_parallel: 2, pipeline_schedule: {s}, zero_stage: 0")
                for s in ("1f1b", "gpipe")]
    layouts += [(f"P=2xD=2 1f1b m=4 zero {z}", 4, f"batch_size: 2, grad_accum: 4, pipeline_parallel: 2, zero_stage: {z}")
                for z in (1, 2, 3)]
    layouts += [("P=4 1f1b m=4", 4, "batch_size: 4, grad_accum: 4, pipeline_parallel: 4")]
    if HAVE_T:
        layouts += [(f"T=2xD=2 zero {z}", 4, f"batch_size: 8, grad_accum: 1, tensor_parallel: 2, zero_stage: {z}")
                    for z in range(4)]
        layouts += [("T=4", 4, "batch_size: 16, grad_accum: 1, tensor_parallel: 4")]
        layouts += [(f"T=2xP=2 {s} m=4", 4, f"batch_size: 4, grad_accum: 4, tensor_parallel: 2, pipeline_parallel: 2, pipeline_schedule: {s}")
                    for s in ("1f1b", "gpipe")]

if a.only:
    layouts = [l for l in layouts
               if l[0] in ("one process", "D=4 zero 0", "D=2 zero 0") or re.search(a.only, l[0])]
res = {name: {"ms": [], "summary": None} for name, _, _ in layouts}
for rep in range(a.repeats):
    for i, (name, world, params) in enumerate(layouts):
        gang = f"\n    world_size: {world}\n    launcher: mpirun" if world > 1 else ""
        runs = run_dag(f"l{i}r{rep}", f"""dag: l{i}r{rep}
tasks:
  train:
    stage: train{gang}
    env: {{OMP_NUM_THREADS: "1", OPENBLAS_NUM_THREADS: "1"}}
    with: {{{MODEL}, {params}}}
""")
        summ = json.load(open(glob.glob(f"{runs}/**/train/out/summary.json", recursive=True)[0]))
        steps = [json.loads(l) for l in open(glob.glob(f"{runs}/**/train/metrics.jsonl", recursive=True)[0])]
        ts = [m["value"] for m in steps if m["name"] == "step_time_s" and m["step"] > 1]
        res[name]["ms"].append(1000 * statistics.median(ts))
        res[name]["summary"] = summ
        seqs = summ["tokens"] / summ["steps"] / a.context
        if abs(seqs - G) > 1e-9:
            print(f"parallel: {name} trained {seqs:g} sequences a step, not {G}")

print(f"{a.layers} layers, width {a.width}, {a.heads} heads, context {a.context}, vocab {a.vocab}; "
      f"global batch {G} sequences; {a.steps} steps, median of {a.repeats} runs "
      f"(each the median of steps 2-{a.steps}); one thread a rank; {os.cpu_count()} cores, "
      f"load {os.getloadavg()[0]:.2f}")
if not HAVE_T:
    print("T: not available in this build")
KINDS = [("allreduce", ("allreduce",)), ("reduce", ("reduce",)), ("red-scat", ("reduce_scatter",)),
         ("allgather", ("allgather",)), ("bcast", ("broadcast", "barrier")), ("send/recv", ("send", "recv"))]
print(f"{'layout':<20} {'ms/step':>8} {'vs one':>7} {'vs D0':>6}  "
      + " ".join(f"{k:>9}" for k, _ in KINDS) + f" {'comm':>8}  peak MiB per rank (params+grads+optim+acts)")
print(f"{'':<20} {'':>8} {'':>7} {'':>6}  " + " ".join(f"{'ms/step':>9}" for _ in KINDS) + f" {'MiB/step':>8}")
ms = {n: statistics.median(r["ms"]) for n, r in res.items()}
one = ms["one process"]
d0 = ms.get("D=4 zero 0", ms.get("D=2 zero 0"))
for name, _, _ in layouts:
    s = res[name]["summary"]
    comm = s.get("comm", {})
    cols = []
    for _, ks in KINDS:
        t = sum(comm.get(k, {}).get("seconds", 0) for k in ks)
        cols.append(f"{1000 * t / comm['steps']:9.2f}" if comm.get("steps") and any(k in comm for k in ks) else f"{'-':>9}")
    kinds = [v for v in comm.values() if isinstance(v, dict)]
    cols.append(f"{sum(v['bytes'] for v in kinds) / 1048576 / comm['steps']:8.2f}" if kinds else f"{'-':>8}")
    mem = s.get("memory", {}).get("ranks")
    memtxt = " ".join(f"{sum(r['peak'].values()) / 1048576:.1f}" for r in mem) if mem else \
        ("-" if name != "one process" else "(one process: not reported)")
    # The model-parallel loops: of which the whole model's arrays every
    # pipeline stage (and rank 0) keeps, in brackets.
    if mem and "whole_model" in mem[0]:
        memtxt = " ".join(f"{sum(r['peak'].values()) / 1048576:.1f}"
                          f"[{sum(r['whole_model'].values()) / 1048576:.1f}]" for r in mem)
    print(f"{name:<20} {ms[name]:8.1f} {ms[name] / one:7.2f} {ms[name] / d0:6.2f}  " + " ".join(cols) + "  " + memtxt)
    if "pipeline_idle" in s:
        P, m = s["pipeline_parallel"], 4  # every P layout here: grad_accum 4
        print(f"{'':<20} bubble measured {100 * s['pipeline_idle']:.1f}% (rank 0), (p-1)/(m+p-1) = {100 * (P - 1) / (m + P - 1):.1f}%")
if not a.keep:
    shutil.rmtree(work, ignore_errors=True)
else:
    print(f"work directory: {work}")
