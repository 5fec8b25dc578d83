/*
 * store_hooks.h: knobs of the store server that only tests turn, so that fault tests stay fast.
 *
 * Not thread-safe against a concurrent cohort__store_server_stop() on the same server; safe against its serving.
 */
#ifndef COHORT_STORE_STORE_HOOKS_H
#define COHORT_STORE_STORE_HOOKS_H

#include "store/store.h"

/* How long a new connection may take to finish the auth handshake before it is dropped (default 5 s). Applies to
 * connections accepted after the call. */
void cohort__store_server_set_auth_timeout(cohort__store_server *server, double seconds);

/* Connections whose thread is still running (handshaking, serving or waiting in a GET). */
int cohort__store_server_live_connections(cohort__store_server *server);

#endif
