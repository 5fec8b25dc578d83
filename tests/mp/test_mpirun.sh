#!/bin/sh
# Workers started by Open MPI's mpirun, with no cohortrun: cohort_init reads OMPI_COMM_WORLD_* and rank 0 serves
# the store. usage: test_mpirun.sh TEST_BINARY NP
set -u
command -v mpirun >/dev/null || { echo "mpirun is missing: apt-get install openmpi-bin (scripts/setup.sh does)"; exit 1; }
port=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
# Only MASTER_PORT is passed, so that two test runs on one machine do not share the default port.
exec mpirun --allow-run-as-root --oversubscribe -np "$2" -x MASTER_PORT=$port -x COHORT_SECRET=from-mpirun "$1" --quick
