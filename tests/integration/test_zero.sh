# ZeRO data parallelism (gpu/zero/zero.h) on CPU ranks under mpirun,
# with tests/reference/zero_check (a 2-layer, width-32 GPT, 20 steps,
# global batch of 4 sequences of 16 tokens, clipping at norm 1.5):
# - world sizes 1, 2, 4 x stages 0-3: the losses and global gradient
#   norms of every step equal stage 0's and those of one rank with the
#   whole batch (relative difference < 1e-5), and so do the final weights (max abs difference
#   < 1e-5 of the largest weight; the attention key biases, whose exact
#   gradient is 0 and whose fp32 gradient is rounding noise that AdamW
#   amplifies, are reported apart: zero_check's compare says why);
# - stages 0-2 without overlap (stages 0-1 all buckets after backward,
#   stage 2 each group's reduction waited for at once) give the same;
# - each rank's measured gradient and optimizer bytes (and stage 3's
#   parameter bytes), between steps and at the peak of a step, are within
#   5% of ZeRO's fp32 formula;
# - stage 2 never holds the full gradient: with 8 layers, the gradient
#   bytes at the peak of a step are the shard, the embeddings' gradient
#   and three layers' (the one being written and two being reduced; one
#   without overlap: zero.h's f_peak_grads, within 5%), under the full
#   gradient array, which stages 0-1 hold;
# - stage 3 gathers per layer: with 8 layers, the parameters a rank holds
#   at the peak of a step are its shard and two layers' worth (the one in
#   use and the next, prefetched; the formula of zero.h's f_peak_params,
#   within 5%), under half the model, where a whole-model gather would
#   hold all of it; without overlap (no prefetch), one layer's worth; and
#   the losses and weights stay those of stage 0;
# - a checkpoint saved by 4 ranks at stage 2 after step 10, loaded by 2
#   ranks at stage 1 and by 1 rank at stage 0, gives steps 11-20 the
#   losses and final weights of the uninterrupted 4-rank run;
# - with 5 ranks (padded shards) stages 1 and 3 match one rank with
#   micro-batch 5, and a stage-3 checkpoint of 5 ranks resumes on 1 rank;
# - a stage-3 checkpoint of 4 ranks (per-layer pieces) resumes on 2 ranks
#   at stage 3 and on 1 rank at stage 0 with the same losses and weights;
# - stages 0-1 start the all-reduces of some of their buckets and stages
#   2-3 the reductions of some groups during backward (the hook), none
#   with --no-overlap;
# - a truncated shard file is refused with a message that names it, and
#   a manifest whose ranges reach past the model with one that says so.
. "$(dirname "$0")/lib.sh"

TOOL="$DAGRUN_BUILD_DIR/bin/zero_check"
[ -x "$TOOL" ] || fail "no $TOOL (build the zero_check target)"
command -v mpirun >/dev/null || fail "mpirun (Open MPI) is needed"

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
# Open MPI's own allocations are not ours: LeakSanitizer (the sanitizer
# build) skips libmpi and Open MPI's runtime only (tests/lsan-mpi-zero.supp).
# Open MPI unloads its plugins in MPI_Finalize, so their allocations'
# stacks, unwound the fast way, end in an unknown module and match no
# suppression; the slow unwinder follows them into libmpi.
export LSAN_OPTIONS="suppressions=$DAGRUN_SOURCE_DIR/tests/lsan-mpi-zero.supp${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
export ASAN_OPTIONS="fast_unwind_on_malloc=0${ASAN_OPTIONS:+:$ASAN_OPTIONS}"

GB=4 # the global batch: sequences per step over all ranks

# zr NAME RANKS STAGE [ARGS...]: runs zero_check, output in $T/NAME.out,
# final weights in $T/NAME.w.
zr() {
  local name=$1 n=$2 stage=$3
  shift 3
  mpirun --oversubscribe --bind-to none -np "$n" "$TOOL" --stage "$stage" \
    --micro "${MICRO:-$((GB / n))}" --dump "$T/$name.w" "$@" >"$T/$name.out" \
    2>"$T/$name.err" || fail "zero_check $name ($n ranks, stage $stage) failed:
$(tail -20 "$T/$name.err")"
}

# same_losses A B [FIRST]: the losses and gradient norms of steps >= FIRST
# in A and B agree within 1e-5 relative, and B has them all.
same_losses() {
  awk -v first="${3:-1}" -v a="$1" -v b="$2" '
    FNR == 1 { f++ }
    $1 == "step" && $2 >= first {
      if (f == 1) { la[$2] = $4; na[$2] = $6 } else { lb[$2] = $4; nb[$2] = $6 }
    }
    function off(x, y,  d, m) {
      d = x - y; if (d < 0) d = -d
      m = x < 0 ? -x : x
      return d > 1e-5 * m
    }
    END {
      n = 0
      for (s in la) {
        if (!(s in lb)) { print "step " s " missing in " b; exit 1 }
        if (off(la[s], lb[s])) { print "step " s ": loss " la[s] " vs " lb[s]; exit 1 }
        if (off(na[s], nb[s])) { print "step " s ": norm " na[s] " vs " nb[s]; exit 1 }
        n++
      }
      if (n == 0) { print "no steps in " a; exit 1 }
    }' "$T/$1.out" "$T/$2.out"
}

# same_weights A B [MODEL ARGS]: the final weights of A and B agree.
same_weights() {
  local r
  r=$("$TOOL" "${@:3}" --compare "$T/$1.w" "$T/$2.w") || fail "cannot compare $1 $2"
  awk '{ exit !($4 < 1e-5) }' <<<"$r" || fail "weights of $2 differ from $1: $r"
}

# The reference: one rank with the whole batch, plain data parallelism.
zr ref 1 0
awk '$1 == "step" { if ($6 > 1.5) c = 1; else u = 1 } END { exit !(c && u) }' \
  "$T/ref.out" || fail "clipping at 1.5 should cut some steps and not others
$(cat "$T/ref.out")"
[ "$(grep -c '^step ' "$T/ref.out")" = 20 ] || fail "ref: not 20 steps"
cat "$T/ref.out" | head -3

for n in 1 2 4; do
  for stage in 0 1 2 3; do
    zr "n${n}s$stage" "$n" "$stage" $([ "$stage" -lt 2 ] && echo --bucket 1000)
    same_losses ref "n${n}s$stage" ||
      fail "$n ranks stage $stage: losses differ from 1 rank x $GB"
    same_losses "n${n}s0" "n${n}s$stage" ||
      fail "$n ranks stage $stage: losses differ from stage 0"
    same_weights ref "n${n}s$stage"
    # Memory: gradients and optimizer state (and stage 3's parameters)
    # against the fp32 formula, within 5%.
    awk -v what="$n ranks stage $stage" '$1 == "mem" {
        for (i = 2; i < NF; i += 2) v[$i] = $(i + 1)
        split("grads optim" (v["stage"] == 3 ? " params peak_params" : ""), k, " ")
        for (j in k) {
          x = v[k[j]]; f = v["f_" k[j]]
          d = x - f; if (d < 0) d = -d
          if (d > 0.05 * f) { print what ": " k[j] " " x " bytes, formula " f; bad = 1 }
        }
        # The peak of gradients: the formula is the most (stages 2-3: the
        # reductions still in flight; one that ends early frees its group
        # sooner), and stages 0-1 hold all of them.
        x = v["peak_grads"]; f = v["f_peak_grads"]
        if (x > 1.05 * f || (v["stage"] < 2 && x < 0.95 * f)) { print what ": peak_grads " x " bytes, formula " f; bad = 1 }
        printf "%s: params %d grads %d optim %d (formula %d %d %d; peak params %d grads %d; mixed-precision formula %d)\n",
          what, v["params"], v["grads"], v["optim"], v["f_params"], v["f_grads"], v["f_optim"], v["peak_params"], v["peak_grads"], v["f_mixed"]
        seen = 1
      }
      END { exit bad || !seen }' "$T/n${n}s$stage.out" ||
      fail "memory off the formula"
    echo "  $(grep step_ms "$T/n${n}s$stage.out")"
  done
done

# The overlap on 4 ranks: stages 0-1's buckets of 1000 floats (29 of
# them) and stage 2's groups past the embeddings (whose gradients are
# final last) start their reductions from the backward hook, but not
# all of them; without overlap none does, and the result is the same.
for stage in 0 1 2; do
  awk -v b=$([ "$stage" -lt 2 ] && echo 29 || echo 4) '$1 == "step" { if ($8 != b) bad = 1; if ($10 > 0) e = 1; if ($10 >= $8) bad = 1 }
    END { exit bad || !e }' "$T/n4s$stage.out" ||
    fail "stage $stage: not some (not all) of the buckets started during backward: $(grep '^step 2 ' "$T/n4s$stage.out")"
  zr "s${stage}late" 4 "$stage" --no-overlap $([ "$stage" -lt 2 ] && echo --bucket 1000)
  awk '$1 == "step" && $10 != 0 { e = 1 } END { exit e }' "$T/s${stage}late.out" ||
    fail "stage $stage --no-overlap started reductions during backward"
  same_losses ref "s${stage}late" || fail "stage $stage without overlap: losses differ"
  same_weights ref "s${stage}late"
done

# Stage 3 per layer, 8 layers (Psi = 104256 floats, a layer 12704): the
# peak of gathered parameters is two layers (the formula, within 5%), not
# the model; one layer without prefetch. 10 steps: past step 11, this
# deeper model at the test's learning rate turns summation-order
# rounding into visible differences between any two ways of summing the
# gradient (measured: stage 2 against stage 0, grad norm 1.5e-4 apart at
# step 16; stage 3 within 3e-8 up to step 11).
L8="--layers 8 --steps 10"
zr l8s0 2 0 $L8
for v in l8s3 l8s3late; do
  zr "$v" 2 3 $L8 $([ "$v" = l8s3late ] && echo --no-overlap)
  same_losses l8s0 "$v" || fail "$v: 8 layers at stage 3, losses differ from stage 0"
  same_weights l8s0 "$v" --layers 8
  awk -v what="$v" -v layer=12704 -v late=$([ "$v" = l8s3late ] && echo 1 || echo 0) '$1 == "mem" {
      for (i = 2; i < NF; i += 2) v[$i] = $(i + 1)
      full = v["peak_params"] - v["params"]   # gathered, above the shard
      want = (late ? 1 : 2) * layer * 4
      d = full - want; if (d < 0) d = -d
      printf "%s: peak params %d = shard %d + gathered %d (formula %d; %d layer(s) %d; the model %d)\n",
        what, v["peak_params"], v["params"], full, v["f_peak_params"], late ? 1 : 2, want, 4 * v["psi"]
      d2 = v["peak_params"] - v["f_peak_params"]; if (d2 < 0) d2 = -d2
      if (d > 0.05 * want || d2 > 0.05 * v["f_peak_params"]) { print what ": gathered " full " bytes, not about " want; bad = 1 }
      if (full >= 2 * v["psi"]) { print what ": gathered half the model or more"; bad = 1 }
      seen = 1
    }
    END { exit bad || !seen }' "$T/$v.out" || fail "stage 3 does not gather per layer"
done
awk '$1 == "step" && $10 != 0 { e = 1 } END { exit e }' "$T/l8s3late.out" ||
  fail "stage 3 --no-overlap started reduce-scatters during backward"
awk '$1 == "step" && $10 > 0 { e = 1 } END { exit !e }' "$T/l8s3.out" ||
  fail "stage 3: no reduce-scatter was started during backward"

# Stage 2 never holds the full gradient: 8 layers on 2 ranks (shards of
# 52128 floats; the embeddings' gradient 2560, a layer's 12704). At the
# peak of a step a rank holds its shard, the embeddings' gradient and
# at most three layers' (the one being written, two being reduced: zero.h's
# f_peak_grads), at least one; exactly one without overlap (each waited
# for at once); always under the full gradient array (4 Psi) that stages
# 0-1 hold.
for v in l8s2 l8s2late; do
  zr "$v" 2 2 $L8 $([ "$v" = l8s2late ] && echo --no-overlap)
  same_losses l8s0 "$v" || fail "$v: 8 layers at stage 2, losses differ from stage 0"
  same_weights l8s0 "$v" --layers 8
  awk -v what="$v" -v layer=12704 -v emb=2560 -v late=$([ "$v" = l8s2late ] && echo 1 || echo 0) '$1 == "mem" {
      for (i = 2; i < NF; i += 2) v[$i] = $(i + 1)
      lo = v["grads"] + 4 * (emb + layer); hi = v["grads"] + 4 * (emb + (late ? 1 : 3) * layer)
      printf "%s: peak grads %d = shard %d + groups %d (formula %d; want %d-%d; the full gradient %d)\n",
        what, v["peak_grads"], v["grads"], v["peak_grads"] - v["grads"], v["f_peak_grads"], lo, hi, 4 * v["psi"]
      d = v["f_peak_grads"] - hi; if (d < 0) d = -d
      if (v["peak_grads"] < 0.95 * lo || v["peak_grads"] > 1.05 * hi || d > 0.05 * hi) { print what ": peak gradient bytes off"; bad = 1 }
      if (v["peak_grads"] >= 4 * v["psi"]) { print what ": held a full gradient or more"; bad = 1 }
      seen = 1
    }
    END { exit bad || !seen }' "$T/$v.out" || fail "stage 2 holds more gradients than its shard and a few layers"
done

# Checkpoints: 4 ranks at stage 2 save after step 10 and go on to 20.
zr full 4 2 --save-at 10 --ckpt "$T/ck"
same_losses ref full || fail "the saving run's losses differ"
CK="$T/ck/step-00000010"
[ -f "$CK/manifest.json" ] || fail "no checkpoint at $CK"
for f in 0 1 2 3; do
  [ -f "$CK/zero-rank-0000$f.safetensors" ] || fail "no shard file $f"
done
grep -q '"world_size":[[:space:]]*4,' "$CK/manifest.json" || fail "manifest: no world size"
zr from2 2 1 --load "$CK"
zr from1 1 0 --load "$CK"
zr from4s3 4 3 --load "$CK"
for r in from2 from1 from4s3; do
  ! grep -q '^step \(10\|[1-9]\) ' "$T/$r.out" || fail "$r redid steps <= 10"
  same_losses full "$r" 11 || fail "$r: losses after the load differ"
  same_weights full "$r"
done

# Padded shards: 5 ranks cut P = 28032 into 5 x 5607 (3 floats of
# padding on the last rank), against one rank with micro-batch 5; the
# stage 3 run saves after step 10 and one rank at stage 2 goes on from it.
MICRO=5 zr ref5 1 0
MICRO=1 zr n5s1 5 1
MICRO=1 zr n5s3 5 3 --save-at 10 --ckpt "$T/ck5"
MICRO=5 zr from5 1 2 --load "$T/ck5/step-00000010"
for r in n5s1 n5s3; do
  same_losses ref5 "$r" || fail "$r: losses differ from 1 rank x 5"
  same_weights ref5 "$r"
done
same_losses n5s3 from5 11 || fail "from5: losses after the load differ"
same_weights n5s3 from5

# Stage 3's checkpoint (each rank a piece of every layer) re-cut for 2
# ranks at stage 3 and 1 rank at stage 0.
zr full3 4 3 --save-at 10 --ckpt "$T/ck3"
same_losses ref full3 || fail "the saving stage-3 run's losses differ"
/usr/bin/python3 -c '
import json, sys
m = json.load(open(sys.argv[1]))
r = m["state"]["zero"]["ranks"]
# Each of the 4 ranks has a piece of each of the 4 groups.
assert len(r) == 4 and all(len(q["ranges"]) == 4 for q in r), r
' "$T/ck3/step-00000010/manifest.json" || fail "stage-3 manifest: not one range per group and rank"
zr from3to2 2 3 --load "$T/ck3/step-00000010"
zr from3to1 1 0 --load "$T/ck3/step-00000010"
for r in from3to2 from3to1; do
  ! grep -q '^step \(10\|[1-9]\) ' "$T/$r.out" || fail "$r redid steps <= 10"
  same_losses full3 "$r" 11 || fail "$r: losses after the load differ"
  same_weights full3 "$r"
done

# A step whose loss and norm are not finite (one weight NaN for step 7)
# moves nothing, at every stage on 2 ranks: the run ends on the weights
# of a run whose update guard stopped step 7 (and finite), and not on the
# uninterrupted run's; later steps go on training.
for stage in 0 1 2 3; do
  zr "skip$stage" 2 "$stage" --skip-at 7
  zr "nan$stage" 2 "$stage" --nan-at 7
  awk '$1 == "step" && $2 == 7 { s = ($12 == 0) } END { exit !s }' \
    "$T/nan$stage.out" || fail "stage $stage: step 7 with a NaN weight was applied:
$(grep '^step 7 ' "$T/nan$stage.out")"
  grep -Eq '^step 7 loss -?nan norm -?nan ' "$T/nan$stage.out" ||
    fail "stage $stage: step 7 should show the NaN: $(grep '^step 7 ' "$T/nan$stage.out")"
  awk '$1 == "step" && $2 != 7 && $12 != 1 { e = 1 } END { exit e }' \
    "$T/skip$stage.out" || fail "stage $stage: the guard stopped other steps"
  same_weights "skip$stage" "nan$stage"
  r=$("$TOOL" --compare "$T/ref.w" "$T/skip$stage.w")
  awk '{ exit !($4 > 1e-4) }' <<<"$r" ||
    fail "stage $stage: skipping step 7 changed nothing: $r"
done

# A manifest whose ranges lie outside the model is refused.
cp -r "$T/ck3/step-00000010" "$T/badr"
/usr/bin/python3 - "$T/badr/manifest.json" <<'P'
import json, sys
m = json.load(open(sys.argv[1]))
m["state"]["zero"]["ranks"][1]["ranges"][0] = [0, 99999999]
json.dump(m, open(sys.argv[1], "w"))
P
if mpirun --oversubscribe --bind-to none -np 2 "$TOOL" --stage 3 --micro 2 \
  --load "$T/badr" >"$T/badr.out" 2>"$T/badr.err"; then
  fail "a manifest with a range past the model was loaded"
fi
grep -q "a bad entry in the manifest's ranks" "$T/badr.err" || fail "bad ranges: $(cat "$T/badr.err")"

# A damaged shard is refused, naming the file.
cp -r "$CK" "$T/bad"
truncate -s 100 "$T/bad/zero-rank-00002.safetensors"
if mpirun --oversubscribe --bind-to none -np 2 "$TOOL" --stage 1 --micro 2 \
  --load "$T/bad" >"$T/bad.out" 2>"$T/bad.err"; then
  fail "a truncated shard was loaded"
fi
grep -q "zero-rank-00002" "$T/bad.err" || fail "the error does not name the shard:
$(cat "$T/bad.err")"
pass
