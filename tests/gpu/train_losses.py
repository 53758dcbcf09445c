"""What tests/gpu/test_train_cuda.sh and test_train_llama_cuda.sh read
from their runs: each run's losses by step, and two runs' losses held to
the GPU tests' tolerance (5% at every step, 2% on average)."""
import glob
import json


def losses(runs, name):
    """The train task's directory of run NAME under RUNS, and its losses
    {step: value}."""
    d = glob.glob(f"{runs}/{name}/*/train")[0]
    out = {}
    for line in open(d + "/metrics.jsonl"):
        m = json.loads(line)
        if m["name"] == "loss":
            out[m["step"]] = m["value"]
    return d, out


def close(name, a, b, steps):
    """Asserts that losses a are within 5% of b at each of steps, and 2% on
    average, printing the worst and the mean relative difference."""
    rel = [abs(a[s] - b[s]) / abs(b[s]) for s in steps]
    worst = max(rel)
    mean = sum(rel) / len(rel)
    print(f"{name}: steps {steps[0]}-{steps[-1]}: worst relative difference "
          f"{worst:.4f} (step {steps[rel.index(worst)]}), mean {mean:.4f}")
    assert worst < 5e-2 and mean < 2e-2, name
