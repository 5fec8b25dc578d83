/* data_internal.h: what the loader needs of the sampler beyond the public API. Same thread rules as data.h. */
#ifndef COHORT_DATA_INTERNAL_H
#define COHORT_DATA_INTERNAL_H

#include "cohort/data.h"

/* Moves the cursor to pos (<= num_samples) without touching the index list, which the loader's thread may read. */
void cohort__sampler_seek(cohort_sampler *s, size_t pos);

#endif
