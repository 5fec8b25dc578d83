/* config.c: parsing the knob table (env_knobs.h) into a cohort__config (config.h). */
#include "core/config.h"

#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/env.h"
#include "core/error.h"

typedef enum knob_kind { KNOB_INT, KNOB_INT_AUTO, KNOB_NUM, KNOB_CHOICE, KNOB_STR } knob_kind;

typedef struct knob_spec {
  const char *name;
  knob_kind kind;
  double min, max;
  int min_exclusive;
  const char *choices; /* CHOICE: the allowed words, comma-separated */
  size_t offset, size; /* the field in cohort__config */
} knob_spec;

#define RANGE(lo, hi) (double)(lo), (double)(hi), 0, NULL
#define MIN_EXCLUSIVE(lo, hi) (double)(lo), (double)(hi), 1, NULL
#define ONE_OF(words) 0, 0, 0, words
#define ANY 0, 0, 0, NULL
#define KNOB_SPEC(name, field, kind, limits, def, desc)                                                                \
  {#name, KNOB_##kind, limits, offsetof(cohort__config, field), sizeof(((cohort__config *)0)->field)},
static const knob_spec specs[] = {COHORT_ENV_KNOBS(KNOB_SPEC)};
#define SPEC_COUNT (sizeof specs / sizeof specs[0])

static cohort_status parse_int(const knob_spec *k, const char *text, long *out) {
  char *end = NULL;
  errno = 0;
  long v = strtol(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0')
    return cohort__error(COHORT_ERR_INVALID, "%s='%s' is not an integer%s", k->name, text,
                         k->kind == KNOB_INT_AUTO ? " (or auto)" : "");
  if (v < (long)k->min || v > (long)k->max)
    return cohort__error(COHORT_ERR_INVALID, "%s=%ld is out of range [%ld, %ld]", k->name, v, (long)k->min,
                         (long)k->max);
  *out = v;
  return COHORT_OK;
}

static cohort_status parse_num(const knob_spec *k, const char *text, double *out) {
  char *end = NULL;
  errno = 0;
  double v = strtod(text, &end);
  if (errno != 0 || end == text || *end != '\0' || !isfinite(v))
    return cohort__error(COHORT_ERR_INVALID, "%s='%s' is not a number", k->name, text);
  if (v < k->min || (k->min_exclusive && v == k->min) || v > k->max)
    return cohort__error(COHORT_ERR_INVALID, "%s=%s is out of range %c%.15g, %.15g]", k->name, text,
                         k->min_exclusive ? '(' : '[', k->min, k->max);
  *out = v;
  return COHORT_OK;
}

/* Whether word is one of the comma-separated choices. */
static int is_choice(const char *choices, const char *word) {
  size_t len = strlen(word);
  for (const char *c = choices; *c;) {
    size_t n = strcspn(c, ",");
    if (n == len && strncmp(c, word, len) == 0) return 1;
    c += n + (c[n] == ',');
  }
  return 0;
}

static cohort_status parse_knob(const knob_spec *k, cohort__config *cfg) {
  const char *text = cohort__env_str(k->name);
  void *field = (char *)cfg + k->offset;
  switch (k->kind) {
  case KNOB_INT_AUTO:
    if (strcmp(text, "auto") == 0) {
      *(long *)field = -1;
      return COHORT_OK;
    }
    /* fall through */
  case KNOB_INT:
    return parse_int(k, text, field);
  case KNOB_NUM:
    return parse_num(k, text, field);
  case KNOB_CHOICE:
    if (!is_choice(k->choices, text)) {
      char list[128] = ""; /* "a, b, c" */
      for (const char *c = k->choices; *c;) {
        size_t n = strcspn(c, ",");
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s%.*s", list[0] ? ", " : "", (int)n, c);
        c += n + (c[n] == ',');
      }
      return cohort__error(COHORT_ERR_INVALID, "%s='%s' is not one of %s", k->name, text, list);
    }
    break;
  case KNOB_STR:
    break;
  }
  if (strlen(text) >= k->size)
    return cohort__error(COHORT_ERR_INVALID, "%s is longer than %zu bytes", k->name, k->size - 1);
  memcpy(field, text, strlen(text) + 1);
  return COHORT_OK;
}

cohort_status cohort__config_load(cohort__config *cfg) {
  memset(cfg, 0, sizeof *cfg);
  for (size_t i = 0; i < SPEC_COUNT; i++)
    COHORT_CHECK(parse_knob(&specs[i], cfg));
  return COHORT_OK;
}

cohort_status cohort__config_load_one(cohort__config *cfg, const char *name) {
  for (size_t i = 0; i < SPEC_COUNT; i++)
    if (strcmp(specs[i].name, name) == 0) return parse_knob(&specs[i], cfg);
  return cohort__error(COHORT_ERR_INTERNAL, "%s is not a knob of env_knobs.h", name);
}
