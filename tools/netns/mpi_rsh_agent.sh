#!/usr/bin/env bash
# Open MPI's plm_rsh_agent for the namespaces of two_nodes.sh, in place of ssh: mpirun
# (run in node0, with CHORUS_NETNS_TAG in its environment) calls it as
# `mpi_rsh_agent.sh 10.77.0.<K+1> CMD...` to start a daemon on node K. The daemon runs in
# node K's namespace and in a UTS namespace named after that address: under the machine's
# one host name Open MPI would take the namespaces for one host (and its vader segments,
# named after the host name, would collide in /dev/shm).
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
case "$1" in
  10.77.0.*) k=$((${1##*.} - 1)) ;;
  *) echo "mpi_rsh_agent.sh: unknown host '$1'" >&2; exit 1 ;;
esac
host=$1
shift
exec unshare --uts "$HERE/two_nodes.sh" exec "$k" /bin/sh -c "hostname $host && $*"
