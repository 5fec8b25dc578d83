/*
 * plugin.h: finding and loading an optional part of cohort that is a shared library of its own (the CUDA plugins),
 * so that the library and the programs linked with it start without those parts' dependencies.
 */
#ifndef COHORT_CORE_PLUGIN_H
#define COHORT_CORE_PLUGIN_H

#include <stddef.h>

#include "cohort/cohort.h"

/*
 * Loads the plugin file_name ("libcohort_cuda.so") and returns the address of its symbol entry, or NULL with a
 * COHORT_ERR_SYSTEM message that names every place tried and why it failed. Looks, in this order, at: the path in
 * the environment variable env_override when it is set (and only there), the directory of the module that holds
 * this code (libcohort.so, or the program linked with libcohort.a) and its ../lib, then the dynamic linker's path.
 * Loaded once per process and file_name: later calls return the same address (or the same failure) at once.
 */
cohort_status cohort__plugin_load(const char *file_name, const char *env_override, const char *entry, void **out);

#endif
