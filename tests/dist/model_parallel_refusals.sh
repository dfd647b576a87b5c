#!/bin/sh
# Every rank of a launch refuses a tensor- or pipeline-parallel layout (or both) it cannot run, alike: one line naming what
# is wrong on each rank, exit status 2, and no hang (mpirun --timeout ends one).
# Usage: model_parallel_refusals.sh WEFT MPIEXEC
weft=$1
mpiexec=$2
failed=0

refuses() {
  ranks=$1
  expected=$2
  shift 2
  out=$("$mpiexec" -np "$ranks" --oversubscribe --bind-to none --timeout 60 "$weft" train --model gpt --data random \
        --steps 1 --threads 1 "$@" 2>&1)
  status=$?
  seen=$(printf '%s\n' "$out" | grep -c -F -- "$expected")
  if [ "$status" -eq 2 ] && [ "$seen" -eq "$ranks" ]; then
    echo "ok: $* on $ranks ranks: exit 2, every rank: $expected"
  else
    echo "FAILED: $* on $ranks ranks: exit $status, '$expected' from $seen of $ranks ranks; the output ended:"
    printf '%s\n' "$out" | tail -6
    failed=1
  fi
}

refuses 2 "weft: --tp 2: the GPT's 3 attention heads do not split evenly over 2 ranks" --parallel tp --tp 2 --heads 3 --dim 24
refuses 2 "weft: --tp 2: the GPT's vocabulary of 65 does not split evenly over 2 ranks" --parallel tp --tp 2 --vocab 65
refuses 2 "weft: --tp 4: must divide the launch's 2 ranks" --parallel tp --tp 4
refuses 4 "weft: --tp 3: must divide the launch's 4 ranks" --parallel dp,tp --tp 3 --heads 3 --dim 24
refuses 2 "weft: --parallel: --tp 2 needs --parallel tp" --tp 2
refuses 2 "weft: --tp: --parallel tp needs the tensor-parallel size, --tp 2 or more" --parallel tp
refuses 2 "weft: --pp 2: the GPT's 1 blocks cannot make 2 stages (--layers must be at least --pp)" --parallel pp --pp 2 --pp-schedule gpipe --layers 1
refuses 2 "weft: --pp-schedule 1f1b: needs at least as many micro-batches (--grad-accum) as stages (--pp 2), got 1" --parallel pp --pp 2
refuses 2 "weft: --pp 4: must divide the launch's 2 ranks" --parallel pp --pp 4 --pp-schedule gpipe
refuses 2 "weft: --parallel: --pp 2 needs --parallel pp" --pp 2
refuses 2 "weft: --tp 2 --pp 2: tp x pp = 4 must divide the launch's 2 ranks" --parallel tp,pp --tp 2 --pp 2 --pp-schedule gpipe
refuses 2 "weft: --parallel zero2,tp: ZeRO-2 shards gradients over the data-parallel replicas of a whole model" --parallel zero2,tp --tp 2
refuses 2 "weft: --parallel: a comma-separated list of at most one of ddp (or dp), zero1, zero2, zero3 and any of tp, pp, got 'dp,zero1,tp'" --parallel dp,zero1,tp --tp 2
refuses 2 "weft: --parallel: a comma-separated list of at most one of ddp (or dp), zero1, zero2, zero3 and any of tp, pp, got 'tp,tp'" --parallel tp,tp --tp 2
exit $failed
