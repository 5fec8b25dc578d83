/*
 * view.h: a view of a transport restricted to some of its ranks (view.c), so that the algorithms of src/coll/ run
 * unchanged among them. Used by the hierarchical allreduce for the ranks that have the same local index on every
 * node (layered.h).
 */
#ifndef COHORT_TRANSPORT_VIEW_H
#define COHORT_TRANSPORT_VIEW_H

#include "transport/transport.h"

/* A transport of size ranks whose rank i is rank members[i] of under; under's own rank must be a member. It does
 * not own under, and must be destroyed before it. */
cohort_status cohort__view_create(cohort__transport *under, int size, const int *members, cohort__transport **out);

#endif
