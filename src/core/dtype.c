/* dtype.c: sizes and names of dtypes and reduction ops. */
#include <string.h>

#include "core/error.h"

static const struct {
  const char *name;
  size_t size;
} dtypes[COHORT_DTYPE_COUNT] = {
    [COHORT_F32] = {"f32", 4}, [COHORT_F64] = {"f64", 8},   [COHORT_F16] = {"f16", 2}, [COHORT_BF16] = {"bf16", 2},
    [COHORT_I32] = {"i32", 4}, [COHORT_I64] = {"i64", 8},   [COHORT_U8] = {"u8", 1},   [COHORT_I8] = {"i8", 1},
    [COHORT_I16] = {"i16", 2}, [COHORT_BOOL] = {"bool", 1},
};

static const char *const op_names[COHORT_OP_COUNT] = {
    [COHORT_SUM] = "sum",   [COHORT_AVG] = "avg",   [COHORT_MIN] = "min", [COHORT_MAX] = "max",
    [COHORT_PROD] = "prod", [COHORT_BAND] = "band", [COHORT_BOR] = "bor", [COHORT_BXOR] = "bxor",
};

size_t cohort_dtype_size(cohort_dtype dtype) { return (unsigned)dtype < COHORT_DTYPE_COUNT ? dtypes[dtype].size : 0; }

const char *cohort_dtype_name(cohort_dtype dtype) {
  return (unsigned)dtype < COHORT_DTYPE_COUNT ? dtypes[dtype].name : "unknown-dtype";
}

cohort_status cohort_dtype_parse(const char *name, cohort_dtype *out) {
  if (!name || !out) return cohort__error(COHORT_ERR_INVALID, "cohort_dtype_parse: %s is NULL", name ? "out" : "name");
  for (int i = 0; i < COHORT_DTYPE_COUNT; i++)
    if (strcmp(name, dtypes[i].name) == 0) {
      *out = (cohort_dtype)i;
      return COHORT_OK;
    }
  return cohort__error(COHORT_ERR_INVALID,
                       "unknown dtype '%s' (expected f32, f64, f16, bf16, i32, i64, u8, i8, i16 or bool)", name);
}

const char *cohort_op_name(cohort_op op) { return (unsigned)op < COHORT_OP_COUNT ? op_names[op] : "unknown-op"; }

cohort_status cohort_op_parse(const char *name, cohort_op *out) {
  if (!name || !out) return cohort__error(COHORT_ERR_INVALID, "cohort_op_parse: %s is NULL", name ? "out" : "name");
  for (int i = 0; i < COHORT_OP_COUNT; i++)
    if (strcmp(name, op_names[i]) == 0) {
      *out = (cohort_op)i;
      return COHORT_OK;
    }
  return cohort__error(COHORT_ERR_INVALID, "unknown op '%s' (expected sum, avg, min, max, prod, band, bor or bxor)",
                       name);
}
