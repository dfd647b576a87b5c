#!/usr/bin/env bash
# Two ranks as two hosts: each rank in a network namespace of its own, with its own address on a
# veth pair, so that MPI (its TCP transport, and its launcher's out-of-band channel) crosses a real
# network link. mpirun runs in the first namespace; it starts the second "host" through an rsh
# agent that enters the second namespace where ssh would log in. The two ranks train the MLP to the
# parameters one process reaches at their whole batch. Where namespaces cannot be made (not root,
# no iproute2), the same run goes over loopback with --mca btl tcp,self, and the output says which.
#
#   two_hosts.sh WEFT MPIRUN WORKDIR
set -eu
weft=$1 mpirun=$2 work=$3
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$work"
mkdir -p "$work"
train="train --model mlp --steps 6 --batch-size 64 --eval-every 0 --optimizer momentum --lr 0.05 --threads 1"
env -u OMPI_COMM_WORLD_SIZE -u PMIX_RANK -u PMI_SIZE "$weft" $train --out "$work/single" >"$work/single.log"

first=weft$$a second=weft$$b
cleanup() {
  ip netns del "$first" 2>/dev/null || true
  ip netns del "$second" 2>/dev/null || true
}
trap cleanup EXIT
if ip netns add "$first" 2>/dev/null && ip netns add "$second" &&
  ip link add "$first" type veth peer name "$second" &&
  ip link set "$first" netns "$first" && ip link set "$second" netns "$second" &&
  ip -n "$first" addr add 10.77.0.1/24 dev "$first" && ip -n "$second" addr add 10.77.0.2/24 dev "$second" &&
  ip -n "$first" link set "$first" up && ip -n "$second" link set "$second" up &&
  ip -n "$first" link set lo up && ip -n "$second" link set lo up; then
  printf '10.77.0.1 slots=1\n10.77.0.2 slots=1\n' >"$work/hosts"
  # Called as ssh would be: the host, then the command line to run there.
  printf '#!/bin/sh\nshift\nexec ip netns exec %s sh -c "$*"\n' "$second" >"$work/agent"
  chmod +x "$work/agent"
  ip netns exec "$first" "$mpirun" --hostfile "$work/hosts" -np 2 --bind-to none --mca plm_rsh_agent "$work/agent" \
    --mca btl tcp,self --mca btl_tcp_if_include 10.77.0.0/24 --mca oob_tcp_if_include 10.77.0.0/24 \
    "$weft" $train --out "$work/ranks" >"$work/ranks.log"
  echo "ran: two network namespaces, 10.77.0.1 and 10.77.0.2 on a veth pair, MPI over TCP between them"
else
  "$mpirun" -np 2 --bind-to none --mca btl tcp,self "$weft" $train --out "$work/ranks" >"$work/ranks.log"
  echo "ran: one host over loopback with --mca btl tcp,self (network namespaces could not be made here)"
fi
grep -q "on 2 ranks" "$work/ranks.log" || { echo "the launch did not train on 2 ranks:"; cat "$work/ranks.log"; exit 1; }
python3 "$here/max_difference.py" "$work/single/model.safetensors" "$work/ranks/model.safetensors" 1e-6
rm -rf "$work"
