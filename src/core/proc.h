/* proc.h: what the kernel says of another process (Linux /proc). */
#ifndef COHORT_CORE_PROC_H
#define COHORT_CORE_PROC_H

#include <sys/types.h>

/* The state letter of /proc/PID/stat ('R', 'S', 'D', 'T' stopped, 't' stopped by a tracer, 'Z' zombie, ...), or 0
 * when the process is gone or its state cannot be read. */
char cohort__proc_state(pid_t pid);

#endif
