#!/bin/sh
# Ranks started with different flags (mpirun's app contexts, A : B) that shape the model, its
# computation or its data: every rank refuses at the start with the same line, naming the flag and
# both values, exit status 2, and no hang (mpirun --timeout ends one).
# Usage: ranks_that_disagree.sh WEFT MPIEXEC SOURCE_DIR
weft=$1
mpiexec=$2
source_dir=$3
failed=0

# refused_alike EXPECTED "RANK 0'S ARGUMENTS" "RANK 1'S ARGUMENTS": both ranks print EXPECTED, exit 2
refused_alike() {
  expected=$1
  out=$("$mpiexec" --oversubscribe --bind-to none --timeout 60 -np 1 "$weft" $2 : -np 1 "$weft" $3 2>&1)
  status=$?
  seen=$(printf '%s\n' "$out" | grep -c -x -F -- "$expected")
  if [ "$status" -eq 2 ] && [ "$seen" -eq 2 ]; then
    echo "ok: '$2' against '$3': exit 2, both ranks: $expected"
  else
    echo "FAILED: '$2' against '$3': exit $status, '$expected' from $seen of 2 ranks; the output ended:"
    printf '%s\n' "$out" | tail -6
    failed=1
  fi
}

# differ EXPECTED "RANK 0'S FLAGS" "RANK 1'S FLAGS" (each with its --data), to weft train
differ() {
  refused_alike "$1" "train --model gpt --steps 1 --threads 1 $2" "train --model gpt --steps 1 --threads 1 $3"
}

tail="; every rank of a launch trains the same model on the same data, with the same flags"
# The model's shapes: without the check, MPI_ERR_TRUNCATE in the first all-reduce.
differ "weft: --layers differs across ranks: 2 on rank 0, 4 on rank 1$tail" "--data random --layers 2" "--data random --layers 4"
differ "weft: --dim differs across ranks: 32 on rank 0, 64 on rank 1$tail" "--data random --dim 32" "--data random --dim 64"
# The same shapes, another computation: without the check, two models averaged into one.
differ "weft: --heads differs across ranks: 2 on rank 0, 4 on rank 1$tail" "--data random --heads 2" "--data random --heads 4"
differ "weft: --dropout differs across ranks: 0 on rank 0, 0.1 on rank 1$tail" "--data random" "--data random --dropout 0.1"
# The data, the batch and the order.
differ "weft: --data differs across ranks: random on rank 0, $source_dir/README.md on rank 1$tail" "--data random" \
  "--data $source_dir/README.md"
differ "weft: --batch-size differs across ranks: 4 on rank 0, not given on rank 1$tail" "--data random --batch-size 4" "--data random"
differ "weft: --seed differs across ranks: 1 on rank 0, 2 on rank 1$tail" "--data random --seed 1" "--data random --seed 2"
# The same flags, but one rank's file too short to train on (per-host data that differs): that rank
# refuses alone while the other waits in a collective. Without a bound the launch hung until
# --comm-timeout (300 s); the refusing rank now leaves 10 s after its error, and mpirun ends both.
work=$(mktemp -d)
mkdir "$work/r0" "$work/r1"
cp "$source_dir/README.md" "$work/r0/d.txt"
echo x >"$work/r1/d.txt"
flags="train --model gpt --steps 2 --threads 1 --layers 1 --dim 32 --context 16 --batch-size 4 --data d.txt --out $work/out"
start=$(date +%s)
out=$("$mpiexec" --oversubscribe --bind-to none --timeout 120 -np 1 --wdir "$work/r0" "$weft" $flags : \
      -np 1 --wdir "$work/r1" "$weft" $flags 2>&1)
status=$?
took=$(($(date +%s) - start))
if [ "$status" -eq 2 ] && [ "$took" -lt 60 ] && printf '%s\n' "$out" | grep -q "^weft: --val-fraction 0.05 of 4 tokens is no token"; then
  echo "ok: a rank whose data fails alone ends the launch (exit 2 after $took s)"
else
  echo "FAILED: a rank whose data fails alone: exit $status after $took s; the output ended:"
  printf '%s\n' "$out" | tail -6
  failed=1
fi
rm -rf "$work"
# Different commands: weft bench comm's collectives are not weft train's, and weft version needs no
# MPI at all; both launches hung past --comm-timeout.
for other in "bench comm" version; do
  refused_alike "weft: ranks run different commands: 'weft train' on rank 0, 'weft $other' on rank 1; every rank of a launch runs the same weft command" \
    "train --model gpt --data random --steps 1 --threads 1" "$other"
done
# What only a rank's own machine sees may differ: this launch trains.
out=$("$mpiexec" --oversubscribe --bind-to none --timeout 60 \
      -np 1 "$weft" train --model gpt --data random --steps 1 --layers 1 --dim 32 --threads 1 : \
      -np 1 "$weft" train --model gpt --data random --steps 1 --layers 1 --dim 32 --threads 2 --prefetch 1 2>&1)
if [ $? -eq 0 ] && printf '%s\n' "$out" | grep -q "trained 1 step"; then
  echo "ok: --threads and --prefetch may differ"
else
  echo "FAILED: --threads 1 against --threads 2 --prefetch 1 did not train; the output ended:"
  printf '%s\n' "$out" | tail -6
  failed=1
fi
exit $failed
