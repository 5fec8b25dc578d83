/*
 * ckpt_internal.h: the on-disk layout constants of format version 1 (docs/checkpoint-format.md), and the fault
 * hook the crash tests use.
 */
#ifndef COHORT_CKPT_INTERNAL_H
#define COHORT_CKPT_INTERNAL_H

#include <stdint.h>

#define COHORT__CKPT_MAGIC "COHORTCK"
#define COHORT__CKPT_HEADER_BYTES 32 /* magic 8, version 4, flags 4, file length 8, entries 4, signature length 4 */
#define COHORT__CKPT_ENTRY_FIXED 8   /* name length 4, dtype 1, ndims 1, reserved 2 */
#define COHORT__CKPT_TRAILER_BYTES 4 /* CRC32C of everything before it */

/*
 * Test hook: when >= 0, cohort_ckpt_writer_save() kills its own process with SIGKILL once it has written this
 * many bytes of the temporary file, the way a power cut or the OOM killer would stop it. -1 (the default) in
 * every real program. Only tests set it, in a child process made for the purpose.
 */
extern long long cohort__ckpt_test_kill_after;

#endif
