/* plugin.c: dlopen of an optional part of cohort, beside the module that asks for it. */
#include "core/plugin.h"

#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

#define PLUGIN_SLOTS 4

/* Plugins are few and are never unloaded: a small table of what each name gave, under one lock. */
static struct {
  char name[64];
  void *entry;
  cohort_status status;
  char message[1024];
} slots[PLUGIN_SLOTS];
static int used;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

/* Appends "path: why" to tried (for the failure message). */
static void note(char *tried, size_t len, const char *path, const char *why) {
  size_t n = strlen(tried);
  snprintf(tried + n, len - n, "%s%s (%s)", n ? "; " : "", path, why);
}

static void *open_at(const char *path, const char *entry, char *tried, size_t len) {
  void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char *why = dlerror();
    note(tried, len, path, why ? why : "dlopen failed");
    return NULL;
  }
  void *sym = dlsym(h, entry);
  if (!sym) {
    note(tried, len, path, "no symbol ");
    strncat(tried, entry, len - strlen(tried) - 1);
    dlclose(h);
  }
  return sym;
}

static void *search(const char *file_name, const char *env_override, const char *entry, char *tried, size_t len) {
  const char *override = env_override ? getenv(env_override) : NULL;
  if (override && *override) return open_at(override, entry, tried, len);
  Dl_info info;
  if (dladdr((void *)&cohort__plugin_load, &info) && info.dli_fname) {
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s", info.dli_fname);
    char *slash = strrchr(dir, '/');
    if (slash) {
      *slash = '\0';
      char path[PATH_MAX + 80];
      /* build/lib/libcohort.so beside its plugins; build/bin/<program> (static) finds build/lib */
      const char *subdirs[] = {"", "/../lib", "/../lib64"};
      for (size_t i = 0; i < sizeof subdirs / sizeof *subdirs; i++) {
        snprintf(path, sizeof path, "%s%s/%s", dir, subdirs[i], file_name);
        void *sym = open_at(path, entry, tried, len);
        if (sym) return sym;
      }
    }
  }
  return open_at(file_name, entry, tried, len); /* LD_LIBRARY_PATH, the cache */
}

cohort_status cohort__plugin_load(const char *file_name, const char *env_override, const char *entry, void **out) {
  *out = NULL;
  pthread_mutex_lock(&mu);
  for (int i = 0; i < used; i++) {
    if (strcmp(slots[i].name, file_name) == 0) {
      *out = slots[i].entry;
      cohort_status st = slots[i].status;
      if (st != COHORT_OK) cohort__error(st, "%s", slots[i].message);
      pthread_mutex_unlock(&mu);
      return st;
    }
  }
  char tried[900] = "";
  void *sym = search(file_name, env_override, entry, tried, sizeof tried);
  cohort_status st = COHORT_OK;
  if (!sym) st = cohort__error(COHORT_ERR_SYSTEM, "cannot load %s (tried: %s)", file_name, tried);
  if (used < PLUGIN_SLOTS) {
    snprintf(slots[used].name, sizeof slots[used].name, "%s", file_name);
    slots[used].entry = sym;
    slots[used].status = st;
    snprintf(slots[used].message, sizeof slots[used].message, "%s", st == COHORT_OK ? "" : cohort_last_error());
    used++;
  }
  *out = sym;
  pthread_mutex_unlock(&mu);
  return st;
}
