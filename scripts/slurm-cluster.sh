#!/usr/bin/env bash
# A multi-node Slurm test cluster of containers: a controller (ctl) and two
# compute nodes (n1, n2), each its own container with its own hostname and
# address on a private, internal Docker network it creates (no route out;
# traffic stays on that network). The node image is built with vibesys's
# own image builder from a `debootstrap --variant=minbase` root with slurmd,
# slurmctld, munge and bubblewrap (cached), pinned in a lock of its own and
# loaded with `vibesys image load`: no registry.
#
#   scripts/slurm-cluster.sh up NAME SHARE    start (SHARE: a directory
#                                             mounted at its own path on
#                                             every node: the workspace)
#   scripts/slurm-cluster.sh down NAME        remove what `up NAME` made
#
# Needs root, Docker, debootstrap and VIBESYS_BIN (the vibesys to build
# the image with; it is also mounted at its own path on every node, as a
# site installs vibesys on its shared file system). Compute nodes run with
# seccomp=unconfined, apparmor=unconfined and systempaths=unconfined, which
# bubblewrap needs to make a sandbox with a fresh /proc inside a container;
# nothing else ever gets these. Every container and the network carry the
# label vibesys-slurm-cluster=NAME; `down` removes only those.
set -euo pipefail

cmd=${1:-}
name=${2:-}
[[ "$name" =~ ^[a-z0-9][a-z0-9.-]{0,40}$ ]] || {
  echo "usage: slurm-cluster.sh up|down NAME [SHARE] (NAME: lowercase letters, digits, . and -)" >&2
  exit 2
}
label="vibesys-slurm-cluster=$name"
state=/run/vibesys-slurm-cluster/$name
net=$name-net

down() {
  local ids
  ids=$(docker ps -aq --filter "label=$label")
  [[ -n "$ids" ]] && docker rm -f $ids >/dev/null
  docker network ls -q --filter "label=$label" | while read -r n; do docker network rm "$n" >/dev/null; done
  rm -rf "$state"
}

case "$cmd" in
down)
  down
  echo "slurm-cluster: $name removed"
  exit 0
  ;;
up) ;;
*)
  echo "usage: slurm-cluster.sh up|down NAME [SHARE]" >&2
  exit 2
  ;;
esac

share=${3:?"usage: slurm-cluster.sh up NAME SHARE"}
: "${VIBESYS_BIN:?set VIBESYS_BIN to the vibesys binary}"
for t in docker debootstrap; do
  command -v "$t" >/dev/null || { echo "slurm-cluster: $t missing (apt-get install $t)" >&2; exit 1; }
done
cache=${VIBESYS_SLURM_NODE_CACHE:-/var/tmp/vibesys-slurm-node}
mirror=${DEBIAN_MIRROR:-$(sed -n 's/^URIs: *//p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -n1)}
mirror=${mirror:-http://deb.debian.org/debian}
mkdir -p "$cache"

# 1. The node root, once: Debian minbase with Slurm, munge and bubblewrap.
if [[ ! -f "$cache/root.complete" ]]; then
  rm -rf "$cache/root"
  echo "slurm-cluster: debootstrap into $cache/root (once, about a minute)" >&2
  debootstrap --variant=minbase --include=slurmd,slurmctld,slurm-client,munge,bubblewrap \
    bookworm "$cache/root" "$mirror" >"$cache/debootstrap.log" 2>&1 || {
    tail -n 20 "$cache/debootstrap.log" >&2
    exit 1
  }
  # The image builder refuses device nodes; the container runtime makes /dev.
  find "$cache/root/dev" -mindepth 1 -delete
  # What a node never reads (the downloaded packages, apt lists, docs,
  # translations): more than half of the root, and of the image build.
  rm -rf "$cache/root/var/cache/apt/archives/"*.deb "$cache/root/var/lib/apt/lists/"* \
    "$cache/root/usr/share/doc" "$cache/root/usr/share/man" "$cache/root/usr/share/info" \
    "$cache/root/usr/share/locale"
  touch "$cache/root.complete"
fi

# 2. The image, built by vibesys, pinned in its own lock, loaded without a registry.
if [[ ! -f "$cache/node.tar" ]]; then
  cat >"$cache/node.toml" <<'EOF'
name = "vibesys-slurm-node"
tag = "latest"

[config]
cmd = ["/bin/sh"]
env = ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C.UTF-8"]
EOF
  SOURCE_DATE_EPOCH=1700000000 "$VIBESYS_BIN" image build "$cache/node.toml" \
    --out "$cache/node.tar.partial" --root "$cache/root" --no-cache >/dev/null
  mv "$cache/node.tar.partial" "$cache/node.tar"
  rm -f "$cache/images.lock"
fi
[[ -f "$cache/images.lock" ]] || "$VIBESYS_BIN" image pin "$cache/node.tar" --lock "$cache/images.lock" >/dev/null
image=$("$VIBESYS_BIN" image load "$cache/node.tar" --lock "$cache/images.lock" --json |
  sed -n 's/^ *"id": *"\(.*\)",*$/\1/p')
[[ -n "$image" ]] || { echo "slurm-cluster: vibesys image load reported no image id" >&2; exit 1; }

# 3. Configuration shared by every node (read-only).
down
mkdir -p "$state/dev"
for i in 0 1; do mknod -m 0666 "$state/dev/gpu$i" c 1 3; done
dd if=/dev/urandom of="$state/munge.key" bs=1024 count=1 status=none
chmod 0444 "$state/munge.key"
cat >"$state/slurm.conf" <<EOF
ClusterName=$name
SlurmctldHost=ctl
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
StateSaveLocation=/var/lib/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerParameters=sched_interval=1
MpiDefault=none
ReturnToService=2
SlurmdParameters=config_overrides
GresTypes=gpu
MinJobAge=300
KillWait=2
InactiveLimit=0
MessageTimeout=5
SlurmdTimeout=6
SlurmctldTimeout=10
NodeName=n1,n2 CPUs=1 Gres=gpu:2 State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
cat >"$state/gres.conf" <<EOF
Name=gpu File=/run/vibesys-slurm/gpu[0-1]
EOF
cat >"$state/node.sh" <<'EOF'
#!/bin/sh
# Entry point of a node: munged as munge, then slurmctld or slurmd in the foreground.
set -e
mkdir -p /etc/munge /run/munge /var/lib/munge /var/log/munge /var/spool/slurmd /var/lib/slurmctld
cp /cluster/munge.key /etc/munge/munge.key
chown -R munge:munge /etc/munge /run/munge /var/lib/munge /var/log/munge
chmod 0700 /etc/munge
chmod 0400 /etc/munge/munge.key
runuser -u munge -- /usr/sbin/munged
case "$1" in
ctl) exec /usr/sbin/slurmctld -D -i ;;
*) exec /usr/sbin/slurmd -D -N "$(hostname)" ;;
esac
EOF
chmod 0755 "$state/node.sh"

# 4. The private network and the nodes. vibesys's directory is mounted (a
# file mount would keep a replaced binary's old inode).
bindir=$(dirname "$(readlink -f "$VIBESYS_BIN")")
docker network create --internal --label "$label" "$net" >/dev/null
start() {
  local host=$1
  shift
  docker run -d --name "$name-$host" --hostname "$host" --network "$net" --network-alias "$host" \
    --label "$label" \
    -e SLURM_CONF=/cluster/slurm.conf \
    -v "$state:/cluster:ro" -v "$state/slurm.conf:/etc/slurm/slurm.conf:ro" \
    -v "$state/gres.conf:/etc/slurm/gres.conf:ro" -v "$state/dev:/run/vibesys-slurm:ro" \
    -v "$share:$share" -v "$bindir:$bindir:ro" \
    "$@" "$image" /cluster/node.sh "$host" >/dev/null
}
start ctl
for n in n1 n2; do
  start "$n" --security-opt seccomp=unconfined --security-opt apparmor=unconfined \
    --security-opt systempaths=unconfined
done
for _ in $(seq 1 150); do
  idle=$(docker exec "$name-ctl" sinfo -h -N -o '%N %t' 2>/dev/null | grep -c ' idle' || true)
  if [[ "$idle" == 2 ]]; then
    echo "slurm-cluster: $name up: ctl, n1, n2 on network $net (image $image)"
    exit 0
  fi
  sleep 0.2
done
docker exec "$name-ctl" sinfo -N >&2 || true
docker logs "$name-ctl" 2>&1 | tail -n 20 >&2 || true
echo "slurm-cluster: nodes of $name did not become idle" >&2
exit 1
