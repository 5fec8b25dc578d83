/*
 * tcp_setup.c: setting up the TCP transport over the store (tcp.h), as shm_setup.c does the shm one: where to listen,
 * every rank's address published and read, the mesh connected (tcp_mesh.c), and a store barrier at the end.
 */
#include <errno.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/error.h"
#include "core/log.h"
#include "core/sock.h"
#include "transport/tcp.h"

/* COHORT_SOCKET_IFNAME: the first IPv4 address (else IPv6) of that interface, for hosts where the route towards
 * the master is not the network the job should use (a fast fabric beside the management network). */
static cohort_status ifname_addr(const char *ifname, char *addr, size_t len) {
  struct ifaddrs *list = NULL;
  if (getifaddrs(&list) != 0) return cohort__error_errno(COHORT_ERR_SYSTEM, errno, "COHORT_SOCKET_IFNAME: getifaddrs");
  int found = 0, exists = 0;
  for (int want = AF_INET; want && !found; want = want == AF_INET ? AF_INET6 : 0)
    for (struct ifaddrs *a = list; a && !found; a = a->ifa_next) {
      if (strcmp(a->ifa_name, ifname) != 0) continue;
      exists = 1;
      if (!a->ifa_addr || a->ifa_addr->sa_family != want) continue;
      socklen_t sl = want == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6);
      found = getnameinfo(a->ifa_addr, sl, addr, (socklen_t)len, NULL, 0, NI_NUMERICHOST) == 0;
    }
  freeifaddrs(list);
  if (found) return COHORT_OK;
  if (exists)
    return cohort__error(COHORT_ERR_INVALID, "COHORT_SOCKET_IFNAME=%s: the interface has no IP address", ifname);
  return cohort__error(COHORT_ERR_INVALID, "COHORT_SOCKET_IFNAME=%s: no such network interface (see ip addr)", ifname);
}

/* Listen where peers can reach us: the address that routes to the store's host, unless told otherwise. */
static cohort_status bind_addr_of(const cohort__tcp_setup_options *opt, char *addr, size_t len) {
  if (opt->bind_addr[0]) {
    snprintf(addr, len, "%.*s", (int)len - 1, opt->bind_addr);
    return COHORT_OK;
  }
  if (opt->ifname[0]) return ifname_addr(opt->ifname, addr, len);
  return cohort__sock_local_addr_towards(opt->towards, addr, len);
}

/* For cohort__store_await: the caller's check of peer p. */
typedef struct awaiting {
  const cohort__tcp_setup_options *opt;
  int p;
} awaiting;

static cohort_status peer_elsewhere(void *arg) {
  const awaiting *w = arg;
  return w->opt->peer_elsewhere(w->opt->arg, w->p);
}

cohort_status cohort__tcp_rendezvous(int rank, int size, cohort__store *store, int64_t deadline_ns,
                                     const cohort__tcp_setup_options *opt, cohort__transport **out) {
  char **addrs = NULL;
  int listen_fd = -1;
  cohort_status st;
  *out = NULL;
  char bind_addr[128], my_addr[192], key[COHORT_STORE_KEY_MAX];
  if ((st = bind_addr_of(opt, bind_addr, sizeof bind_addr)) != COHORT_OK) goto done;
  if ((st = cohort__tcp_listen(bind_addr, &listen_fd, my_addr, sizeof my_addr)) != COHORT_OK) goto done;
  snprintf(key, sizeof key, "peer/%d", rank);
  if ((st = cohort__store_set(store, key, my_addr, strlen(my_addr))) != COHORT_OK) goto done;
  COHORT_LOG_DEBUG("rank %d listens on %s", rank, my_addr);

  addrs = calloc((size_t)size, sizeof *addrs);
  if (!addrs) {
    st = cohort__error(COHORT_ERR_SYSTEM, "out of memory");
    goto done;
  }
  for (int p = 0; p < size; p++) {
    size_t len = 0;
    awaiting w = {.opt = opt, .p = p};
    snprintf(key, sizeof key, "peer/%d", p);
    st = cohort__store_await(store, key, deadline_ns, opt->peer_elsewhere ? peer_elsewhere : NULL, &w,
                             (void **)&addrs[p], &len);
    if (st == COHORT_ERR_TIMEOUT && opt->never_arrived) st = opt->never_arrived(opt->arg, "peer");
    if (st != COHORT_OK) goto done;
  }

  cohort__tcp_options mesh = opt->mesh;
  mesh.connect_deadline_ns = deadline_ns;
  st = cohort__tcp_create(rank, size, listen_fd, addrs, &mesh, out);
  listen_fd = -1;
  if (st != COHORT_OK) goto done;

  /* Everyone is connected once everyone has counted in; until then the store (maybe served by us) must stay. */
  int64_t joined = 0;
  st = cohort__store_count_in(store, "connected", size, deadline_ns, NULL, NULL, &joined);
  if (st == COHORT_ERR_TIMEOUT)
    st = cohort__error(st, "rendezvous: only %lld of %d ranks finished connecting within %ld s", (long long)joined,
                       size, opt->timeout_s);
  if (st != COHORT_OK) {
    (*out)->ops->destroy(*out);
    *out = NULL;
  }

done:
  if (listen_fd >= 0) close(listen_fd);
  for (int p = 0; addrs && p < size; p++)
    free(addrs[p]);
  free(addrs);
  return st;
}
