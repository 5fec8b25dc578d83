/* bind.c: --bind core|socket, the CPUs each worker may run on: the CPUs cohortrun itself may use, their sockets and
 * cores as sysfs tells them, and one worker's share. Only libc: the unit test builds it on its own. */
#include <stdio.h>
#include <stdlib.h>

#include "launcher.h"

/* One integer from a sysfs file; 0 when the file is missing or does not hold one. */
static int read_int(const char *path, int *value) {
  FILE *f = fopen(path, "r");
  if (!f) return 0;
  int ok = fscanf(f, "%d", value) == 1;
  fclose(f);
  return ok;
}

static int by_socket_core_cpu(const void *a, const void *b) {
  const cohort__launch_cpu *x = a, *y = b;
  if (x->socket != y->socket) return x->socket < y->socket ? -1 : 1;
  if (x->core != y->core) return x->core < y->core ? -1 : 1;
  return (x->cpu > y->cpu) - (x->cpu < y->cpu);
}

int cohort__launch_topology_read(const char *sysfs, const cpu_set_t *allowed, cohort__launch_topology *t) {
  t->n = 0;
  t->sockets = 0;
  for (int c = 0; c < CPU_SETSIZE; c++) {
    if (!CPU_ISSET(c, allowed)) continue;
    char path[4096];
    int socket = 0, core = c;
    snprintf(path, sizeof path, "%s/devices/system/cpu/cpu%d/topology/physical_package_id", sysfs, c);
    read_int(path, &socket);
    snprintf(path, sizeof path, "%s/devices/system/cpu/cpu%d/topology/core_id", sysfs, c);
    read_int(path, &core);
    t->cpus[t->n++] = (cohort__launch_cpu){.cpu = c, .socket = socket, .core = core};
  }
  qsort(t->cpus, (size_t)t->n, sizeof t->cpus[0], by_socket_core_cpu);
  for (int i = 0; i < t->n; i++)
    if (i == 0 || t->cpus[i].socket != t->cpus[i - 1].socket) t->sockets++;
  return t->n;
}

int cohort__launch_topology_here(cohort__launch_topology *t) {
  cpu_set_t mine;
  t->n = t->sockets = 0;
  if (sched_getaffinity(0, sizeof mine, &mine) != 0) return 0;
  return cohort__launch_topology_read("/sys", &mine, t);
}

int cohort__launch_bind_share(const cohort__launch_topology *t, int mode, int rank, int np, cpu_set_t *set) {
  if (mode == COHORT_LAUNCH_BIND_NONE || np < 1 || rank < 0 || rank >= np || t->n == 0) return 0;
  if (mode == COHORT_LAUNCH_BIND_CORE) {
    if (np > t->n) return 0;
    int per = t->n / np; /* a worker gets whole CPUs; any remainder stays unused, as with mpirun --bind-to core */
    CPU_ZERO(set);
    for (int k = 0; k < per; k++)
      CPU_SET(t->cpus[rank * per + k].cpu, set);
    return 1;
  }
  /* Socket: consecutive workers fill a socket before the next, in blocks as equal as the counts allow. */
  int want = (int)((long long)rank * t->sockets / np), socket = -1;
  CPU_ZERO(set);
  for (int i = 0; i < t->n; i++) {
    if (i == 0 || t->cpus[i].socket != t->cpus[i - 1].socket) socket++;
    if (socket == want) CPU_SET(t->cpus[i].cpu, set);
  }
  return 1;
}
