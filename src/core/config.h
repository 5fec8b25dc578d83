/*
 * config.h: the COHORT_* knobs of env_knobs.h, parsed once into a struct.
 *
 * cohort_init() (and cohort_init_inproc()) call cohort__config_load() once; every layer below takes what it needs
 * from that struct (the communicator keeps it for the DDP engine), so no layer reads the environment on its own and
 * every knob is checked against its declared type and range in one place. A bad value is COHORT_ERR_INVALID with a
 * message that names the variable and the value.
 *
 * Thread-safety: loading reads the environment (getenv); a loaded config is a plain value.
 */
#ifndef COHORT_CORE_CONFIG_H
#define COHORT_CORE_CONFIG_H

#include "cohort/cohort.h"
#include "core/env_knobs.h"

#define COHORT__KNOB_STR_MAX 1024 /* a STR knob's text, its terminating zero included */
#define COHORT__KNOB_CHOICE_MAX 16

#define COHORT__KNOB_FIELD_INT(f) long f;
#define COHORT__KNOB_FIELD_INT_AUTO(f) long f; /* -1: auto */
#define COHORT__KNOB_FIELD_NUM(f) double f;
#define COHORT__KNOB_FIELD_CHOICE(f) char f[COHORT__KNOB_CHOICE_MAX];
#define COHORT__KNOB_FIELD_STR(f) char f[COHORT__KNOB_STR_MAX];
#define COHORT__CONFIG_FIELD(name, field, kind, limits, def, desc) COHORT__KNOB_FIELD_##kind(field)

/* One field per knob, named in env_knobs.h (COHORT_TIMEOUT: timeout_s, COHORT_ALGO: algo, ...). */
typedef struct cohort__config {
  COHORT_ENV_KNOBS(COHORT__CONFIG_FIELD)
} cohort__config;

/* Parses every knob from the environment (an unset or empty variable takes its default). */
cohort_status cohort__config_load(cohort__config *cfg);
/* Parses the one knob `name` into its field of cfg, for a program that needs only a few (cohortrun). */
cohort_status cohort__config_load_one(cohort__config *cfg, const char *name);

#endif
