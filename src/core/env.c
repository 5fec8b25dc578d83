/* env.c: the knob table and its parsers. */
#include "core/env.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/env_knobs.h"
#include "core/error.h"
#include "core/log.h"

typedef struct knob {
  const char *name;
  const char *def;
  const char *desc;
} knob;

#define COHORT_KNOB_ENTRY(name, field, kind, limits, def, desc) {#name, def, desc},
static const knob knobs[] = {COHORT_ENV_KNOBS(COHORT_KNOB_ENTRY)};
#define KNOB_COUNT (sizeof knobs / sizeof knobs[0])

static const knob *find_knob(const char *name) {
  for (size_t i = 0; i < KNOB_COUNT; i++)
    if (strcmp(knobs[i].name, name) == 0) return &knobs[i];
  return NULL;
}

const char *cohort__env_str(const char *name) {
  const char *v = getenv(name);
  if (v && v[0]) return v;
  const knob *k = find_knob(name);
  return k ? k->def : "";
}

static cohort_status parse_long(const char *name, const char *text, long min, long max, long *out) {
  char *end = NULL;
  errno = 0;
  long v = strtol(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0')
    return cohort__error(COHORT_ERR_INVALID, "%s='%s' is not an integer", name, text);
  if (v < min || v > max)
    return cohort__error(COHORT_ERR_INVALID, "%s=%ld is out of range [%ld, %ld]", name, v, min, max);
  *out = v;
  return COHORT_OK;
}

cohort_status cohort__env_long(const char *name, long min, long max, long *out) {
  return parse_long(name, cohort__env_str(name), min, max, out);
}

cohort_status cohort__env_long_var(const char *name, long min, long max, long *out, int *present) {
  const char *v = getenv(name);
  *present = v != NULL && v[0] != '\0';
  if (!*present) return COHORT_OK;
  return parse_long(name, v, min, max, out);
}

extern char **environ;

void cohort__env_warn_unknown(void) {
  for (char **e = environ; e && *e; e++) {
    /* COHORT_TEST_* belongs to the test suite (docs/env.md), not to the library. */
    if (strncmp(*e, "COHORT_", 7) != 0 || strncmp(*e, "COHORT_TEST_", 12) == 0) continue;
    const char *eq = strchr(*e, '=');
    size_t len = eq ? (size_t)(eq - *e) : strlen(*e);
    int known = 0;
    for (size_t i = 0; i < KNOB_COUNT && !known; i++)
      known = strlen(knobs[i].name) == len && strncmp(knobs[i].name, *e, len) == 0;
    if (!known) COHORT_LOG_WARN("unknown variable %.*s is ignored (see docs/env.md)", (int)len, *e);
  }
}

void cohort__env_each(void (*fn)(const char *, const char *, const char *, void *), void *arg) {
  for (size_t i = 0; i < KNOB_COUNT; i++)
    fn(knobs[i].name, knobs[i].def, knobs[i].desc, arg);
}
