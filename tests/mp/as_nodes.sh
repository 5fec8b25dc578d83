#!/bin/sh
# as_nodes.sh RANKS_PER_NODE PROGRAM [ARGS...]: runs PROGRAM as if its rank were on simulated node RANK / RANKS_PER_NODE
# (COHORT_NODE_ID), so that one cohortrun on one machine starts a job of several "nodes": ranks with different node
# ids are different hosts to cohort (TCP between them, shared memory within each).
per_node=$1
shift
COHORT_NODE_ID=sim$((RANK / per_node))
export COHORT_NODE_ID
exec "$@"
