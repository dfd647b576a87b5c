#!/usr/bin/env bash
# Two ranks as two hosts: each rank in a network namespace of its own, with its own address on a
# veth pair, so that MPI (its TCP transport, and its launcher's out-of-band channel) crosses a real
# network link. mpirun runs in the first namespace; it starts the second "host" through an rsh
# agent that enters the second namespace where ssh would log in. The two ranks train the MLP to the
# parameters one process reaches at their whole batch; the test also checks that each rank ran in
# its own namespace and that their traffic crossed the veth. Where namespaces cannot be made (not
# root, no iproute2), the same run goes over loopback with --mca btl tcp,self, and the output says
# which. mpirun's --timeout ends a hung launch while this script still lives to remove the
# namespaces (ctest's timeout would kill it first).
#
#   two_hosts.sh WEFT MPIRUN WORKDIR
set -eu
weft=$1 mpirun=$2 work=$3
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$work"
mkdir -p "$work"
train=(train --model mlp --steps 6 --batch-size 64 --eval-every 0 --optimizer momentum --lr 0.05 --threads 1)
env -u OMPI_COMM_WORLD_SIZE -u PMIX_RANK -u PMI_SIZE "$weft" "${train[@]}" --out "$work/single" >"$work/single.log"

first=weft$$a second=weft$$b
cleanup() {
  ip link del "$first" 2>/dev/null || true
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
  # Each rank records the namespace it runs in, so that two ranks landing in one fail the test.
  ip netns exec "$first" "$mpirun" --hostfile "$work/hosts" -np 2 --bind-to none --timeout 60 \
    --mca plm_rsh_agent "$work/agent" \
    --mca btl tcp,self --mca btl_tcp_if_include 10.77.0.0/24 --mca oob_tcp_if_include 10.77.0.0/24 \
    sh -c 'ip netns identify >"$0/netns.$OMPI_COMM_WORLD_RANK" && exec "$@"' "$work" \
    "$weft" "${train[@]}" --out "$work/ranks" >"$work/ranks.log"
  placed="$(cat "$work/netns.0") $(cat "$work/netns.1")"
  [ "$placed" = "$first $second" ] || { echo "ranks 0 and 1 ran in namespaces '$placed', not '$first $second'"; exit 1; }
  # The start's broadcast alone sends rank 1 the whole model: less than that across the link means
  # MPI found another way.
  crossed=$(ip netns exec "$second" cat "/sys/class/net/$second/statistics/rx_bytes")
  model=$(stat -L -c %s "$work/ranks/model.safetensors")
  [ "$crossed" -ge "$model" ] || { echo "only $crossed bytes reached rank 1 over the veth, less than the $model of the model"; exit 1; }
  echo "ran: two network namespaces, 10.77.0.1 and 10.77.0.2 on a veth pair, MPI over TCP between them ($crossed bytes to rank 1)"
else
  "$mpirun" -np 2 --bind-to none --timeout 60 --mca btl tcp,self "$weft" "${train[@]}" --out "$work/ranks" >"$work/ranks.log"
  echo "ran: one host over loopback with --mca btl tcp,self (network namespaces could not be made here)"
fi
grep -q "on 2 ranks" "$work/ranks.log" || { echo "the launch did not train on 2 ranks:"; cat "$work/ranks.log"; exit 1; }
python3 "$here/max_difference.py" "$work/single/model.safetensors" "$work/ranks/model.safetensors" 1e-6
rm -rf "$work"
