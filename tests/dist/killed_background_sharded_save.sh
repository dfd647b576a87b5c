#!/bin/sh
# `weft train --parallel zero1 --async-save` on 2 ranks, killed (SIGKILL, as kill -9) at every sixth
# operation of its saves in turn, many of them in the thread that writes a rank's shard, the index or
# trainer.json while later steps run: --resume from what is left ends with the weights of a run never
# killed, and no leftover of a killed save survives the resumed run.
# Usage: killed_background_sharded_save.sh WEFT MPIEXEC WORK_DIR
weft=$1
mpiexec=$2
work=$3
rm -rf "$work" && mkdir -p "$work"
train="train --model gpt --data random --layers 1 --heads 2 --dim 16 --context 8 --batch-size 4 --steps 4 \
--eval-every 2 --threads 1 --parallel zero1 --async-save --out"
launch() { "$mpiexec" -np 2 --oversubscribe --bind-to none --timeout 120 "$weft" $train "$@" 2>&1; }
merged() { "$weft" ckpt consolidate "$1" --out "$1.safetensors" --overwrite >/dev/null && md5sum < "$1.safetensors"; }

out=$(launch "$work/straight") || { printf '%s\n' "$out" | tail -5; echo "FAILED: the run never killed"; exit 1; }
expected=$(merged "$work/straight")
failed=0 kills=0 in_thread=0 n=1
while :; do
  run="$work/killed-$n"
  out=$(WEFT_FAULT_AT="$n:kill" launch "$run")
  [ $? -eq 0 ] && break  # past the last operation of the last save
  line=$(printf '%s\n' "$out" | grep -m1 -o "injected kill at operation $n .*")
  if [ -z "$line" ]; then printf '%s\n' "$out" | tail -5; echo "FAILED: killed at $n without the kill's line"; exit 1; fi
  kills=$((kills + 1))
  case $line in *shard-*|*shards.json*|*trainer.json*) in_thread=$((in_thread + 1)) ;; esac
  if [ -L "$run/latest" ]; then resumed=$(launch "$run" --resume "$run"); else resumed=$(launch "$run" --overwrite); fi
  status=$?
  leftovers=$(ls -A "$run" | grep -E '^\.tmp|\.tmp\.|^step-' | grep -v '^step-00000004$')
  if [ $status -ne 0 ] || [ "$(merged "$run")" != "$expected" ] || [ -n "$leftovers" ]; then
    printf '%s\n' "$resumed" | tail -5
    echo "FAILED: $line: resumed with exit $status, leftovers '$leftovers'"
    failed=1
  else
    echo "ok: $line: resumed to the same weights"
  fi
  n=$((n + 6))
done
echo "$kills kills, $in_thread of them at a shard, shards.json or trainer.json"
[ "$kills" -ge 8 ] && [ "$in_thread" -ge 4 ] || { echo "FAILED: too few kills reached the saves"; failed=1; }
exit $failed
