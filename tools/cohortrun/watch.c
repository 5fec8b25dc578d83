/* watch.c: the signs of life of a worker that does not count its collectives in cohortrun's heartbeat page (a plain
 * torch program, a shell script, anything not built on libcohort), read from /proc (launcher.h).
 *
 * What can be known from outside without the program's help, and soundly: whether the worker, with everything it
 * started, uses CPU time or moves bytes through its system calls (reads and writes of files, pipes and sockets: a
 * rank loading data from a slow disk does, without CPU), and where its main thread waits in the kernel when it does
 * not run. A worker that did neither for COHORT_HEARTBEAT_S is stalled. A
 * job whose every worker has stalled is hung: nothing in it moves (a loop that spins is not stalled, and is not
 * caught this way). Which worker the others wait for cannot be read from the kernel in general; loop.c names the
 * one whose wait differs from all the others' (ranks of one program that wait for a peer wait alike: in a futex, in
 * poll), and says so as a likelihood.
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "launcher.h"

#define TREE_MAX 256

/* utime + stime of one process (all its threads), from /proc/PID/stat. */
static uint64_t proc_cpu(pid_t pid) {
  char path[64], buf[1024];
  snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
  FILE *f = fopen(path, "r");
  if (!f) return 0;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = '\0';
  /* The command name may hold spaces and parentheses: fields are counted after the last ')'. Field 3 is the
   * state; utime and stime are fields 14 and 15. */
  const char *p = strrchr(buf, ')');
  if (!p) return 0;
  unsigned long long utime = 0, stime = 0;
  if (sscanf(p + 1, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &utime, &stime) != 2) return 0;
  return (uint64_t)(utime + stime);
}

/* Appends pid's children (those of every thread of it) to list. */
static void add_children(pid_t pid, pid_t *list, int *n) {
  char path[96];
  snprintf(path, sizeof path, "/proc/%d/task", (int)pid);
  DIR *d = opendir(path);
  if (!d) return;
  for (struct dirent *e; (e = readdir(d)) != NULL && *n < TREE_MAX;) {
    if (e->d_name[0] == '.') continue;
    char cpath[400];
    snprintf(cpath, sizeof cpath, "/proc/%d/task/%s/children", (int)pid, e->d_name);
    FILE *f = fopen(cpath, "r");
    if (!f) continue;
    int child = 0;
    while (*n < TREE_MAX && fscanf(f, "%d", &child) == 1)
      list[(*n)++] = (pid_t)child;
    fclose(f);
  }
  closedir(d);
}

/* rchar + wchar of one process, from /proc/PID/io: bytes it read and wrote through system calls (files, pipes,
 * sockets), which move while it loads data from a slow disk without using CPU. 0 when unreadable. */
static uint64_t proc_io(pid_t pid) {
  char path[64], line[128];
  snprintf(path, sizeof path, "/proc/%d/io", (int)pid);
  FILE *f = fopen(path, "r");
  if (!f) return 0;
  uint64_t total = 0;
  unsigned long long v = 0;
  while (fgets(line, sizeof line, f))
    if (sscanf(line, "rchar: %llu", &v) == 1 || sscanf(line, "wchar: %llu", &v) == 1) total += v;
  fclose(f);
  return total;
}

uint64_t cohort__launch_tree_activity(pid_t pid) {
  pid_t list[TREE_MAX];
  int n = 0;
  list[n++] = pid;
  uint64_t total = 0;
  for (int i = 0; i < n; i++) {
    total += proc_cpu(list[i]) + proc_io(list[i]);
    add_children(list[i], list, &n);
  }
  return total;
}

static void read_wchan(pid_t pid, char *out, size_t len) {
  char path[64];
  out[0] = '\0';
  snprintf(path, sizeof path, "/proc/%d/wchan", (int)pid);
  FILE *f = fopen(path, "r");
  if (!f) return;
  size_t n = fread(out, 1, len - 1, f);
  fclose(f);
  out[n] = '\0';
  if (strcmp(out, "0") == 0) out[0] = '\0'; /* running */
}

void cohort__launch_wchan(pid_t pid, char *out, size_t len) {
  /* A shell that runs the program as its child waits for it (do_wait): where the program waits says more. */
  for (int depth = 0; depth < 8; depth++) {
    read_wchan(pid, out, len);
    if (!strstr(out, "do_wait") && !strstr(out, "kernel_wait")) return;
    pid_t kids[TREE_MAX];
    int n = 0;
    add_children(pid, kids, &n);
    if (n == 0) return;
    pid = kids[n - 1];
  }
}
