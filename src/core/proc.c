/* proc.c: a process's state from /proc/PID/stat. */
#include "core/proc.h"

#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

char cohort__proc_state(pid_t pid) {
  char path[64], buf[512];
  snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return 0;
  buf[n] = '\0';
  /* "PID (COMM) STATE ...": the state follows the last ')', since the command name may hold anything. */
  const char *paren = strrchr(buf, ')');
  return paren && paren[1] == ' ' ? paren[2] : 0;
}
