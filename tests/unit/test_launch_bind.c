/* test_launch_bind.c: cohortrun --bind core|socket on fake sysfs trees (tools/cohortrun/bind.c): which CPUs each
 * worker gets on 2 sockets x 4 CPUs numbered socket by socket, numbered alternately (as many 2-socket hosts do), with
 * hyperthreads, restricted by cohortrun's own affinity, and where sysfs says nothing. */
#include <errno.h>
#include <sys/stat.h>

#include "launcher.h"
#include "test.h"

/* mkdir -p */
static int make_dirs(const char *path) {
  char buf[4096];
  snprintf(buf, sizeof buf, "%s", path);
  for (char *p = buf + 1; *p; p++) {
    if (*p != '/') continue;
    *p = '\0';
    if (mkdir(buf, 0700) != 0 && errno != EEXIST) return -1;
    *p = '/';
  }
  return mkdir(buf, 0700) == 0 || errno == EEXIST ? 0 : -1;
}

static int write_int(const char *dir, const char *name, int value) {
  char path[8192];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "w");
  if (!f) return -1;
  fprintf(f, "%d\n", value);
  return fclose(f);
}

/* A fake sysfs root named `name` in the test's temporary directory: CPU cpus[i] on socket sockets[i], core cores[i].
 * Returns the root's path (static). */
static const char *fake_sysfs(const char *name, int n, const int *cpus, const int *sockets, const int *cores) {
  static char root[1024];
  snprintf(root, sizeof root, "%s", cohort_test_tmp_path(name));
  if (make_dirs(root) != 0) return NULL;
  for (int i = 0; i < n; i++) {
    char dir[2048];
    snprintf(dir, sizeof dir, "%s/devices/system/cpu/cpu%d/topology", root, cpus[i]);
    if (make_dirs(dir) != 0 || write_int(dir, "physical_package_id", sockets[i]) != 0 ||
        write_int(dir, "core_id", cores[i]) != 0)
      return NULL;
  }
  return root;
}

static cpu_set_t cpus_of(int n, const int *cpus) {
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int i = 0; i < n; i++)
    CPU_SET(cpus[i], &set);
  return set;
}

/* A CPU set as "0,2,4,6" ("" when empty). The returned string is overwritten by the next call. */
static const char *list(const cpu_set_t *set) {
  static char buf[1024];
  size_t len = 0;
  buf[0] = '\0';
  for (int c = 0; c < CPU_SETSIZE && len < sizeof buf - 8; c++)
    if (CPU_ISSET(c, set)) len += (size_t)snprintf(buf + len, sizeof buf - len, len ? ",%d" : "%d", c);
  return buf;
}

/* Worker rank of np's CPUs under mode, as a list; "unbound" when bind_share says not to bind. */
static const char *share(const cohort__launch_topology *t, int mode, int rank, int np) {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (!cohort__launch_bind_share(t, mode, rank, np, &set)) return "unbound";
  return list(&set);
}

static cohort__launch_topology topo; /* too big for a test's stack frame in a sanitized build */

/* 2 sockets x 4 CPUs, numbered socket by socket: socket 0 holds 0-3, socket 1 holds 4-7. */
TEST(two_sockets_numbered_in_order) {
  const int cpus[] = {0, 1, 2, 3, 4, 5, 6, 7}, sockets[] = {0, 0, 0, 0, 1, 1, 1, 1}, cores[] = {0, 1, 2, 3, 0, 1, 2, 3};
  const char *root = fake_sysfs("in_order", 8, cpus, sockets, cores);
  ASSERT_TRUE(root != NULL);
  cpu_set_t all = cpus_of(8, cpus);
  ASSERT_EQ(cohort__launch_topology_read(root, &all, &topo), 8);
  ASSERT_EQ(topo.sockets, 2);

  /* socket: consecutive local ranks fill a socket before the next */
  ASSERT_STREQ(share(&topo, COHORT_LAUNCH_BIND_SOCKET, 0, 1), "0,1,2,3");
  ASSERT_STREQ(share(&topo, COHORT_LAUNCH_BIND_SOCKET, 0, 2), "0,1,2,3");
  ASSERT_STREQ(share(&topo, COHORT_LAUNCH_BIND_SOCKET, 1, 2), "4,5,6,7");
  for (int r = 0; r < 4; r++)
    ASSERT_STREQ(share(&topo, COHORT_LAUNCH_BIND_SOCKET, r, 4), r < 2 ? "0,1,2,3" : "4,5,6,7");
  /* 3 ranks: 2 on the first socket, 1 on the second; 5: 3 and 2 */
  ASSERT_STREQ(share(&topo, COHORT_LAUNCH_BIND_SOCKET, 1, 3), "0,1,2,3");
  ASSERT_STREQ(share(&topo, COHORT_LAUNCH_BIND_SOCKET, 2, 3), "4,5,6,7");
  ASSERT_STREQ(share(&topo, COHORT_LAUNCH_BIND_SOCKET, 2, 5), "0,1,2,3");
  ASSERT_STREQ(share(&topo, COHORT_LAUNCH_BIND_SOCKET, 3, 5), "4,5,6,7");
  /* more workers than CPUs: still a socket each (8 + 8) */
  ASSERT_STREQ(share(&topo, COHORT_LAUNCH_BIND_SOCKET, 7, 16), "0,1,2,3");
  ASSERT_STREQ(share(&topo, COHORT_LAUNCH_BIND_SOCKET, 8, 16), "4,5,6,7");

  /* core: equal blocks, a socket's CPUs before the next socket's */
  ASSERT_STREQ(share(&topo, COHORT_LAUNCH_BIND_CORE, 0, 2), "0,1,2,3");
  ASSERT_STREQ(share(&topo, COHORT_LAUNCH_BIND_CORE, 1, 2), "4,5,6,7");
  ASSERT_STREQ(share(&topo, COHORT_LAUNCH_BIND_CORE, 0, 4), "0,1");
  ASSERT_STREQ(share(&topo, COHORT_LAUNCH_BIND_CORE, 3, 4), "6,7");
  for (int r = 0; r < 8; r++) {
    char want[8];
    snprintf(want, sizeof want, "%d", r);
    ASSERT_STREQ(share(&topo, COHORT_LAUNCH_BIND_CORE, r, 8), want);
  }
  /* 3 workers: 2 CPUs each, the remainder (6, 7) unused */
  ASSERT_STREQ(share(&topo, COHORT_LAUNCH_BIND_CORE, 0, 3), "0,1");
  ASSERT_STREQ(share(&topo, COHORT_LAUNCH_BIND_CORE, 2, 3), "4,5");
  ASSERT_STREQ(share(&topo, COHORT_LAUNCH_BIND_CORE, 0, 9), "unbound");
  ASSERT_STREQ(share(&topo, COHORT_LAUNCH_BIND_NONE, 0, 2), "unbound");
  ASSERT_STREQ(share(&topo, COHORT_LAUNCH_BIND_SOCKET, 2, 2), "unbound"); /* no such rank */
}

/* The same 2 x 4, numbered alternately (socket 0 holds the even CPUs, socket 1 the odd ones): a block of CPU numbers
 * would straddle both sockets. */
TEST(two_sockets_numbered_alternately) {
  const int cpus[] = {0, 1, 2, 3, 4, 5, 6, 7}, sockets[] = {0, 1, 0, 1, 0, 1, 0, 1}, cores[] = {0, 0, 1, 1, 2, 2, 3, 3};
  const char *root = fake_sysfs("alternate", 8, cpus, sockets, cores);
  ASSERT_TRUE(root != NULL);
  cpu_set_t all = cpus_of(8, cpus);
  ASSERT_EQ(cohort__launch_topology_read(root, &all, &topo), 8);
  ASSERT_EQ(topo.sockets, 2);
  ASSERT_STREQ(share(&topo, COHORT_LAUNCH_BIND_SOCKET, 0, 2), "0,2,4,6");
  ASSERT_STREQ(share(&topo, COHORT_LAUNCH_BIND_SOCKET, 1, 2), "1,3,5,7");
  ASSERT_STREQ(share(&topo, COHORT_LAUNCH_BIND_SOCKET, 1, 4), "0,2,4,6");
  ASSERT_STREQ(share(&topo, COHORT_LAUNCH_BIND_SOCKET, 2, 4), "1,3,5,7");
  ASSERT_STREQ(share(&topo, COHORT_LAUNCH_BIND_CORE, 0, 2), "0,2,4,6");
  ASSERT_STREQ(share(&topo, COHORT_LAUNCH_BIND_CORE, 1, 2), "1,3,5,7");
  ASSERT_STREQ(share(&topo, COHORT_LAUNCH_BIND_CORE, 0, 4), "0,2");
  ASSERT_STREQ(share(&topo, COHORT_LAUNCH_BIND_CORE, 1, 4), "4,6");
  ASSERT_STREQ(share(&topo, COHORT_LAUNCH_BIND_CORE, 2, 4), "1,3");
  ASSERT_STREQ(share(&topo, COHORT_LAUNCH_BIND_CORE, 3, 4), "5,7");
  ASSERT_STREQ(share(&topo, COHORT_LAUNCH_BIND_CORE, 1, 8), "2");
  ASSERT_STREQ(share(&topo, COHORT_LAUNCH_BIND_CORE, 4, 8), "1");
}

/* 2 sockets x 2 cores x 2 hyperthreads, numbered as Linux does (first threads 0-3, their siblings 4-7): a worker with
 * two CPUs gets both threads of one core, not halves of two cores shared with another worker. */
TEST(hyperthreads_stay_together) {
  const int cpus[] = {0, 1, 2, 3, 4, 5, 6, 7}, sockets[] = {0, 0, 1, 1, 0, 0, 1, 1}, cores[] = {0, 1, 0, 1, 0, 1, 0, 1};
  const char *root = fake_sysfs("smt", 8, cpus, sockets, cores);
  ASSERT_TRUE(root != NULL);
  cpu_set_t all = cpus_of(8, cpus);
  ASSERT_EQ(cohort__launch_topology_read(root, &all, &topo), 8);
  ASSERT_EQ(topo.sockets, 2);
  ASSERT_STREQ(share(&topo, COHORT_LAUNCH_BIND_CORE, 0, 4), "0,4");
  ASSERT_STREQ(share(&topo, COHORT_LAUNCH_BIND_CORE, 1, 4), "1,5");
  ASSERT_STREQ(share(&topo, COHORT_LAUNCH_BIND_CORE, 2, 4), "2,6");
  ASSERT_STREQ(share(&topo, COHORT_LAUNCH_BIND_CORE, 3, 4), "3,7");
  ASSERT_STREQ(share(&topo, COHORT_LAUNCH_BIND_CORE, 0, 2), "0,1,4,5");
  ASSERT_STREQ(share(&topo, COHORT_LAUNCH_BIND_SOCKET, 0, 2), "0,1,4,5");
  ASSERT_STREQ(share(&topo, COHORT_LAUNCH_BIND_SOCKET, 1, 2), "2,3,6,7");
}

/* cohortrun itself restricted (taskset, a container's cpuset) to CPUs 1, 2, 3, 9 and 10 of sockets 0-3 and 8-11:
 * only those are handed out, and a socket is only its allowed CPUs. */
TEST(only_the_allowed_cpus) {
  const int cpus[] = {0, 1, 2, 3, 8, 9, 10, 11}, sockets[] = {0, 0, 0, 0, 1, 1, 1, 1},
            cores[] = {0, 1, 2, 3, 0, 1, 2, 3};
  const char *root = fake_sysfs("restricted", 8, cpus, sockets, cores);
  ASSERT_TRUE(root != NULL);
  const int allowed_cpus[] = {1, 2, 3, 9, 10};
  cpu_set_t allowed = cpus_of(5, allowed_cpus);
  ASSERT_EQ(cohort__launch_topology_read(root, &allowed, &topo), 5);
  ASSERT_EQ(topo.sockets, 2);
  ASSERT_STREQ(share(&topo, COHORT_LAUNCH_BIND_SOCKET, 0, 2), "1,2,3");
  ASSERT_STREQ(share(&topo, COHORT_LAUNCH_BIND_SOCKET, 1, 2), "9,10");
  ASSERT_STREQ(share(&topo, COHORT_LAUNCH_BIND_CORE, 0, 2), "1,2");
  ASSERT_STREQ(share(&topo, COHORT_LAUNCH_BIND_CORE, 1, 2), "3,9");
  ASSERT_STREQ(share(&topo, COHORT_LAUNCH_BIND_CORE, 4, 5), "10");
  ASSERT_STREQ(share(&topo, COHORT_LAUNCH_BIND_CORE, 0, 6), "unbound");
  /* only socket 1's CPUs allowed: one socket */
  const int one_socket[] = {8, 11};
  allowed = cpus_of(2, one_socket);
  ASSERT_EQ(cohort__launch_topology_read(root, &allowed, &topo), 2);
  ASSERT_EQ(topo.sockets, 1);
  ASSERT_STREQ(share(&topo, COHORT_LAUNCH_BIND_SOCKET, 1, 2), "8,11");
}

/* A sysfs without topology files (some containers): every CPU counts as socket 0, each its own core. */
TEST(no_topology_is_one_socket) {
  const char *root = fake_sysfs("empty", 0, NULL, NULL, NULL);
  ASSERT_TRUE(root != NULL);
  const int cpus[] = {0, 1, 2, 3};
  cpu_set_t all = cpus_of(4, cpus);
  ASSERT_EQ(cohort__launch_topology_read(root, &all, &topo), 4);
  ASSERT_EQ(topo.sockets, 1);
  ASSERT_STREQ(share(&topo, COHORT_LAUNCH_BIND_SOCKET, 1, 2), "0,1,2,3");
  ASSERT_STREQ(share(&topo, COHORT_LAUNCH_BIND_CORE, 1, 2), "2,3");
}

COHORT_TEST_MAIN(TEST_CASE(two_sockets_numbered_in_order), TEST_CASE(two_sockets_numbered_alternately),
                 TEST_CASE(hyperthreads_stay_together), TEST_CASE(only_the_allowed_cpus),
                 TEST_CASE(no_topology_is_one_socket))
