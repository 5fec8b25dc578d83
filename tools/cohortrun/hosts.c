/* hosts.c: -H host1:2,host2:2 and --hostfile: the node list, and starting the other nodes' cohortrun over ssh.
 *
 * The cohortrun the user runs is node 0 (on the first host, which is meant to be this one). For every other host
 * it starts `ssh -o BatchMode=yes HOST '<cd DIR && read the secret && exec cohortrun --nnodes ... PROGRAM ...>'`:
 * the same cohortrun path, program and working directory are assumed on every host (a shared filesystem, as with
 * mpirun). The secret goes over ssh's stdin, not its command line, so that no `ps` on either host shows it.
 */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "core/error.h"
#include "launcher.h"

static cohort_status add_host(cohort__launch_opts *o, const char *name, size_t name_len, long slots,
                              const char *where) {
  if (name_len == 0 || name_len >= sizeof o->hosts[0])
    return cohort__error(COHORT_ERR_INVALID, "%s: a host name is empty or longer than %zu characters", where,
                         sizeof o->hosts[0] - 1);
  /* A host name (RFC 1123 letters, digits, '-', '.'; '_' as some clusters use) or an IPv4 address: anything else is
   * a typo or junk, refused here rather than handed to ssh. */
  for (size_t i = 0; i < name_len; i++)
    if (!isalnum((unsigned char)name[i]) && name[i] != '-' && name[i] != '.' && name[i] != '_')
      return cohort__error(COHORT_ERR_INVALID, "%s: '%.*s' is not a host name (letters, digits, '-', '.', '_')", where,
                           (int)name_len, name);
  if (slots < 1 || slots > COHORT_LAUNCH_NP_MAX)
    return cohort__error(COHORT_ERR_INVALID, "%s: host '%.*s' has %ld slots (1 to %d)", where, (int)name_len, name,
                         slots, COHORT_LAUNCH_NP_MAX);
  if (o->nhosts >= COHORT_LAUNCH_HOSTS_MAX)
    return cohort__error(COHORT_ERR_INVALID, "%s: more than %d hosts", where, COHORT_LAUNCH_HOSTS_MAX);
  if (o->nhosts > 0 && slots != o->np)
    return cohort__error(COHORT_ERR_INVALID,
                         "%s: host '%.*s' has %ld slots, the first host %d: every host must run "
                         "the same number of workers",
                         where, (int)name_len, name, slots, o->np);
  memcpy(o->hosts[o->nhosts], name, name_len);
  o->hosts[o->nhosts][name_len] = '\0';
  o->nhosts++;
  o->np = (int)slots;
  return COHORT_OK;
}

/* "host" or "host:N" (N slots, default 1). */
static cohort_status parse_entry(cohort__launch_opts *o, const char *entry, size_t len, const char *where) {
  const char *colon = memchr(entry, ':', len);
  long slots = 1;
  if (colon) {
    char num[16];
    size_t n = len - (size_t)(colon + 1 - entry);
    char *end = NULL;
    if (n == 0 || n >= sizeof num)
      return cohort__error(COHORT_ERR_INVALID, "%s: '%.*s' needs HOST:SLOTS", where, (int)len, entry);
    memcpy(num, colon + 1, n);
    num[n] = '\0';
    slots = strtol(num, &end, 10);
    if (*end != '\0') return cohort__error(COHORT_ERR_INVALID, "%s: '%.*s' needs HOST:SLOTS", where, (int)len, entry);
  }
  return add_host(o, entry, colon ? (size_t)(colon - entry) : len, slots, where);
}

cohort_status cohort__launch_parse_hosts(const char *list, cohort__launch_opts *o) {
  const char *p = list;
  for (;;) {
    const char *comma = strchr(p, ',');
    size_t len = comma ? (size_t)(comma - p) : strlen(p);
    COHORT_CHECK(parse_entry(o, p, len, "-H"));
    if (!comma) break;
    p = comma + 1;
  }
  return COHORT_OK;
}

/* A hostfile line past its host name: nothing, or mpirun's "slots=N" (and "max_slots=N", which a launcher that
 * never oversubscribes has no use for). Anything else is refused rather than guessed at: "slot=2" once ran one
 * worker without a word. */
static cohort_status parse_hostfile_line(cohort__launch_opts *o, const char *s, size_t len, const char *where) {
  long slots = -1;
  const char *p = s + len;
  for (;;) {
    p += strspn(p, " \t\r\n");
    size_t n = strcspn(p, " \t\r\n");
    if (n == 0) break;
    const char *word = p;
    p += n;
    int is_slots = n > 6 && strncmp(word, "slots=", 6) == 0;
    int is_max = n > 10 && strncmp(word, "max_slots=", 10) == 0;
    const char *num = word + (is_slots ? 6 : 10);
    char *end = NULL;
    long v = (is_slots || is_max) ? strtol(num, &end, 10) : 0;
    if ((!is_slots && !is_max) || end != word + n || v < 1)
      return cohort__error(COHORT_ERR_INVALID,
                           "%s: '%.*s' is not slots=N (a line is HOST, HOST:N or HOST slots=N, '#' starts a comment)",
                           where, (int)n, word);
    if (is_slots) {
      if (slots >= 0 || memchr(s, ':', len))
        return cohort__error(COHORT_ERR_INVALID, "%s: host '%.*s' gives its slots twice", where, (int)len, s);
      slots = v;
    }
  }
  if (slots < 0) return parse_entry(o, s, len, where);
  return add_host(o, s, len, slots, where);
}

cohort_status cohort__launch_read_hostfile(const char *path, cohort__launch_opts *o) {
  FILE *f = fopen(path, "r");
  if (!f) return cohort__error_errno(COHORT_ERR_INVALID, errno, "--hostfile '%s'", path);
  char line[512], where[600];
  int lineno = 0;
  cohort_status st = COHORT_OK;
  while (st == COHORT_OK && fgets(line, sizeof line, f)) {
    lineno++;
    snprintf(where, sizeof where, "--hostfile %s:%d", path, lineno);
    if (!strchr(line, '\n') && !feof(f)) {
      st = cohort__error(COHORT_ERR_INVALID, "%s: the line is longer than %zu characters", where, sizeof line - 2);
      break;
    }
    char *hash = strchr(line, '#');
    if (hash) *hash = '\0';
    char *s = line;
    while (*s == ' ' || *s == '\t')
      s++;
    size_t len = strcspn(s, " \t\r\n");
    if (len == 0) continue;
    st = parse_hostfile_line(o, s, len, where);
  }
  fclose(f);
  if (st == COHORT_OK && o->nhosts == 0) st = cohort__error(COHORT_ERR_INVALID, "--hostfile '%s' lists no host", path);
  return st;
}

/* Appends s to buf in single quotes, for the remote shell. */
static int append_quoted(char *buf, size_t cap, size_t *len, const char *s) {
  if (*len + 3 >= cap) return -1;
  buf[(*len)++] = '\'';
  for (; *s; s++) {
    if (*s == '\'') {
      if (*len + 5 >= cap) return -1;
      memcpy(buf + *len, "'\\''", 4);
      *len += 4;
    } else {
      if (*len + 2 >= cap) return -1;
      buf[(*len)++] = *s;
    }
  }
  buf[(*len)++] = '\'';
  buf[(*len)++] = ' ';
  buf[*len] = '\0';
  return 0;
}

cohort_status cohort__launch_ssh_node(const cohort__launch_opts *o, int node, int port, const char *secret,
                                      pid_t *pid_out) {
  *pid_out = 0;
  char self[PATH_MAX], cwd[PATH_MAX], num[32];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) return cohort__error_errno(COHORT_ERR_SYSTEM, errno, "readlink /proc/self/exe");
  self[n] = '\0';
  if (!getcwd(cwd, sizeof cwd)) return cohort__error_errno(COHORT_ERR_SYSTEM, errno, "getcwd");
  size_t cap = 65536, len = 0;
  char *cmd = malloc(cap);
  if (!cmd) return cohort__error(COHORT_ERR_SYSTEM, "out of memory for the ssh command of node %d", node);
  cmd[0] = '\0';
  int bad = 0;
  len = (size_t)snprintf(cmd, cap, "cd ");
  bad |= append_quoted(cmd, cap, &len, cwd);
  len += (size_t)snprintf(cmd + len, cap - len, "&& read -r COHORT_SECRET && export COHORT_SECRET && exec ");
  bad |= append_quoted(cmd, cap, &len, self);
  const char *fixed[] = {"--nnodes", NULL, "--node-rank", NULL, "--nproc-per-node", NULL, "--master-port", NULL};
  char nn[16], nr[16], np[16];
  snprintf(nn, sizeof nn, "%d", o->nnodes);
  snprintf(nr, sizeof nr, "%d", node);
  snprintf(np, sizeof np, "%d", o->np);
  snprintf(num, sizeof num, "%d", port);
  fixed[1] = nn;
  fixed[3] = nr;
  fixed[5] = np;
  fixed[7] = num;
  for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++)
    bad |= append_quoted(cmd, cap, &len, fixed[i]);
  bad |= append_quoted(cmd, cap, &len, "--master-addr");
  bad |= append_quoted(cmd, cap, &len, o->master_addr);
  char grace[32];
  snprintf(grace, sizeof grace, "%g", o->grace_s);
  bad |= append_quoted(cmd, cap, &len, "--grace");
  bad |= append_quoted(cmd, cap, &len, grace);
  if (o->log_dir) {
    bad |= append_quoted(cmd, cap, &len, "--log-dir");
    bad |= append_quoted(cmd, cap, &len, o->log_dir);
  }
  if (o->max_restarts > 0) {
    char restarts[16];
    snprintf(restarts, sizeof restarts, "%d", o->max_restarts);
    bad |= append_quoted(cmd, cap, &len, "--max-restarts");
    bad |= append_quoted(cmd, cap, &len, restarts);
  }
  if (o->bind != COHORT_LAUNCH_BIND_NONE)
    bad |= append_quoted(cmd, cap, &len, o->bind == COHORT_LAUNCH_BIND_CORE ? "--bind=core" : "--bind=socket");
  bad |= append_quoted(cmd, cap, &len, "--");
  for (char **a = o->argv; *a; a++)
    bad |= append_quoted(cmd, cap, &len, *a);
  if (bad) {
    free(cmd);
    return cohort__error(COHORT_ERR_INVALID, "the command for node %d is longer than %zu bytes", node, cap);
  }
  int in[2];
  if (pipe2(in, O_CLOEXEC) != 0) {
    free(cmd);
    return cohort__error_errno(COHORT_ERR_SYSTEM, errno, "pipe for ssh to node %d", node);
  }
  const char *host = o->hosts[node];
  pid_t pid = fork();
  if (pid < 0) {
    int e = errno;
    free(cmd);
    close(in[0]);
    close(in[1]);
    return cohort__error_errno(COHORT_ERR_SYSTEM, e, "fork for ssh to node %d", node);
  }
  if (pid == 0) {
    /* ssh goes when cohortrun goes; the remote cohortrun then loses node 0's store and stops its workers. */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    dup2(in[0], 0);
    execlp("ssh", "ssh", "-o", "BatchMode=yes", host, cmd, (char *)NULL);
    _exit(127);
  }
  free(cmd);
  close(in[0]);
  /* The secret and its newline fit a pipe's buffer: this cannot block. An ssh that has already failed (and closed
   * its stdin, EPIPE) is no error here: its exit is what the user must read about, and the wait for its node hears
   * it at once. */
  size_t slen = strlen(secret);
  int ok = write(in[1], secret, slen) == (ssize_t)slen && write(in[1], "\n", 1) == 1;
  int err = errno;
  close(in[1]);
  *pid_out = pid;
  if (!ok && err != EPIPE)
    return cohort__error_errno(COHORT_ERR_SYSTEM, err, "writing the secret to ssh for node %d", node);
  return COHORT_OK;
}
