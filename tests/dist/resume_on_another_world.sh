#!/bin/sh
# A run resumed on another number of ranks keeps the global batch it was saved with (each rank takes
# its share), and one the new launch cannot share is refused on every rank, saying why.
# Usage: resume_on_another_world.sh WEFT MPIEXEC WORK_DIR
weft=$1
mpiexec=$2
run=$3/run
failed=0
rm -rf "$3" && mkdir -p "$3"
train="--model gpt --data random --layers 1 --dim 32 --threads 1"

check() {  # check WHAT STATUS EXPECTED_STATUS OUTPUT EXPECTED_LINE COUNT
  seen=$(printf '%s\n' "$4" | grep -c -F -- "$5")
  if [ "$2" -eq "$3" ] && [ "$seen" -ge "$6" ]; then
    echo "ok: $1: exit $2: $5"
  else
    echo "FAILED: $1: exit $2 (expected $3), '$5' seen $seen times (expected $6); the output ended:"
    printf '%s\n' "$4" | tail -6
    failed=1
  fi
}

out=$("$mpiexec" -np 2 --oversubscribe --bind-to none --timeout 60 "$weft" train $train --steps 1 --batch-size 6 \
      --grad-accum 3 --out "$run" 2>&1)
check "2 ranks, --batch-size 6" $? 0 "$out" "1 steps of 6 samples" 1
out=$("$weft" train --resume "$run" --steps 2 --threads 1 2>&1)
check "resumed in one process" $? 0 "$out" "2 steps of 6 samples" 1
out=$("$mpiexec" -np 4 --oversubscribe --bind-to none --timeout 60 "$weft" train --resume "$run" --steps 3 \
      --threads 1 2>&1)
check "resumed on 4 ranks" $? 2 "$out" "weft: --resume $run: the run's batch of 6 samples does not split over the 4 ranks of this launch; a resumed run keeps its batch, so that it goes on with the same training: resume on a number of ranks that divides 6, or give --batch-size" 4
out=$("$mpiexec" -np 3 --oversubscribe --bind-to none --timeout 60 "$weft" train --resume "$run" --steps 3 \
      --threads 1 2>&1)
check "resumed on 3 ranks" $? 2 "$out" "weft: --resume $run: the run's batch of 6 samples, 2 on each of the 3 ranks of this launch, does not make --grad-accum 3 micro-batches (the run's); resume on fewer ranks, or give --grad-accum or --batch-size" 3
exit $failed
