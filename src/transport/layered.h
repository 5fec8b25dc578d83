/*
 * layered.h: the transport of a job that spans several nodes with several ranks on each (layered.c): the TCP mesh
 * over all ranks, plus a shared-memory transport among the ranks of this node, plus a view of the mesh restricted
 * to the ranks that have this rank's local index on every node. Point-to-point frames (and so every collective but
 * allreduce) go over the mesh; the hierarchical allreduce (src/coll/hier.c) uses the other two.
 *
 * Layout: node j holds ranks [j * per_node, (j + 1) * per_node); rank r has local index r % per_node. Rendezvous
 * builds it only for such regular layouts (comm/rendezvous.c).
 *
 * Failure: an abort or interrupt reaches both the mesh and the node transport, so that a rank waiting on either
 * learns of a failure seen on the other (the engine aborts the transport after any failed collective).
 */
#ifndef COHORT_TRANSPORT_LAYERED_H
#define COHORT_TRANSPORT_LAYERED_H

#include "transport/transport.h"

/* Its parts are a cohort__layers (transport.h): cohort__layers_of() finds them. */

/* Takes ownership of wide and node (both destroyed on failure too); node must be a shm transport (shm.h) of
 * per_node ranks whose rank is wide->rank % per_node. */
cohort_status cohort__layered_create(cohort__transport *wide, cohort__transport *node, int per_node,
                                     cohort__transport **out);

#endif
