/*
 * env.h: the raw environment: a knob's text (or its default), the torchrun variables, unknown COHORT_* names.
 *
 * The library reads its knobs through cohort__config (config.h), parsed once by cohort_init(); what remains here
 * is for what comes before that (the launch layout, the logger) and for the table's users (docs checks, --help).
 * Values are read from the process environment at each call. A malformed value is an error that names the variable
 * and the value; it never falls back to the default silently.
 */
#ifndef COHORT_CORE_ENV_H
#define COHORT_CORE_ENV_H

#include "cohort/cohort.h"

/* The knob's value, or its declared default when unset or empty. name must be declared in env_knobs.h. */
const char *cohort__env_str(const char *name);
/* Parses the knob as an integer in [min, max]. */
cohort_status cohort__env_long(const char *name, long min, long max, long *out);
/* Parses any variable (declared or not, e.g. RANK) as an integer in [min, max]; *present = 0 when unset. */
cohort_status cohort__env_long_var(const char *name, long min, long max, long *out, int *present);
/* Logs a warning for every COHORT_* variable in the environment that is not a declared knob. */
void cohort__env_warn_unknown(void);
/* Calls fn for every declared knob (for docs checks and --help output). */
void cohort__env_each(void (*fn)(const char *name, const char *def, const char *desc, void *arg), void *arg);

#endif
