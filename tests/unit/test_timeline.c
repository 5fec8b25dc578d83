/*
 * test_timeline.c: the Chrome trace (src/ddp/timeline.c) over in-process groups. Ranks record spans from
 * several threads, write, and the file is parsed back with a strict JSON parser (below) and checked event by
 * event: one pid per rank, the lane names, every span in the order recorded, with its exact duration and args.
 * Also: a path that cannot be written, a failed communicator (each rank writes its own lane), clipping, escaping.
 */
#include <errno.h>
#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/clock.h"
#include "ddp/timeline.h"
#include "test.h"

/* ---- a strict JSON parser (RFC 8259): no trailing commas, no comments, no garbage after the value ---- */

typedef enum { J_NULL, J_BOOL, J_NUM, J_STR, J_ARR, J_OBJ } jtype;

typedef struct jval {
  jtype type;
  int boolean;
  double num;
  char *str;          /* J_STR */
  struct jval *items; /* J_ARR, J_OBJ (values) */
  char **keys;        /* J_OBJ */
  int n;
} jval;

typedef struct jparser {
  const char *p, *end;
  const char *error;
  int depth;
} jparser;

static void jfree(jval *v) {
  free(v->str);
  for (int i = 0; i < v->n; i++) {
    jfree(&v->items[i]);
    if (v->keys) free(v->keys[i]);
  }
  free(v->items);
  free(v->keys);
  memset(v, 0, sizeof *v);
}

static void jws(jparser *ps) {
  while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n' || *ps->p == '\r'))
    ps->p++;
}

static int jfail(jparser *ps, const char *why) {
  if (!ps->error) ps->error = why;
  return 0;
}

static int jhex(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

static int jparse_string(jparser *ps, char **out) {
  if (ps->p >= ps->end || *ps->p != '"') return jfail(ps, "expected a string");
  ps->p++;
  size_t cap = 16, len = 0;
  char *s = malloc(cap);
  for (;;) {
    if (ps->p >= ps->end) {
      free(s);
      return jfail(ps, "unterminated string");
    }
    unsigned char c = (unsigned char)*ps->p++;
    if (c == '"') break;
    if (c < 0x20) {
      free(s);
      return jfail(ps, "control character in a string");
    }
    if (len + 8 > cap) s = realloc(s, cap *= 2);
    if (c != '\\') {
      s[len++] = (char)c;
      continue;
    }
    if (ps->p >= ps->end) {
      free(s);
      return jfail(ps, "unterminated escape");
    }
    char e = *ps->p++;
    const char *simple = strchr("\"\\/bfnrt", e);
    if (e && simple) {
      static const char map[] = "\"\\/\b\f\n\r\t";
      s[len++] = map[simple - "\"\\/bfnrt"];
    } else if (e == 'u') {
      int code = 0;
      for (int i = 0; i < 4; i++) {
        int h = ps->p < ps->end ? jhex(*ps->p++) : -1;
        if (h < 0) {
          free(s);
          return jfail(ps, "bad \\u escape");
        }
        code = code * 16 + h;
      }
      if (code >= 0x80) { /* the writer only escapes control characters; anything else here is unexpected */
        free(s);
        return jfail(ps, "unexpected non-ASCII \\u escape");
      }
      s[len++] = (char)code;
    } else {
      free(s);
      return jfail(ps, "bad escape");
    }
  }
  s[len] = '\0';
  *out = s;
  return 1;
}

static int jparse_number(jparser *ps, double *out) {
  const char *start = ps->p, *q = ps->p;
  if (q < ps->end && *q == '-') q++;
  if (q >= ps->end) return jfail(ps, "bad number");
  if (*q == '0') {
    q++;
  } else if (*q >= '1' && *q <= '9') {
    while (q < ps->end && *q >= '0' && *q <= '9')
      q++;
  } else {
    return jfail(ps, "bad number");
  }
  if (q < ps->end && *q == '.') {
    q++;
    if (q >= ps->end || *q < '0' || *q > '9') return jfail(ps, "bad fraction");
    while (q < ps->end && *q >= '0' && *q <= '9')
      q++;
  }
  if (q < ps->end && (*q == 'e' || *q == 'E')) {
    q++;
    if (q < ps->end && (*q == '+' || *q == '-')) q++;
    if (q >= ps->end || *q < '0' || *q > '9') return jfail(ps, "bad exponent");
    while (q < ps->end && *q >= '0' && *q <= '9')
      q++;
  }
  char buf[64];
  if ((size_t)(q - start) >= sizeof buf) return jfail(ps, "number too long");
  memcpy(buf, start, (size_t)(q - start));
  buf[q - start] = '\0';
  *out = strtod(buf, NULL);
  ps->p = q;
  return 1;
}

static int jparse_value(jparser *ps, jval *v);

static int jparse_container(jparser *ps, jval *v, int is_obj) {
  char close = is_obj ? '}' : ']';
  v->type = is_obj ? J_OBJ : J_ARR;
  ps->p++;
  if (++ps->depth > 64) return jfail(ps, "nested too deep");
  jws(ps);
  if (ps->p < ps->end && *ps->p == close) {
    ps->p++;
    ps->depth--;
    return 1;
  }
  int cap = 0;
  for (;;) {
    if (v->n == cap) {
      cap = cap ? cap * 2 : 8;
      v->items = realloc(v->items, (size_t)cap * sizeof *v->items);
      if (is_obj) v->keys = realloc(v->keys, (size_t)cap * sizeof *v->keys);
    }
    jval *item = &v->items[v->n];
    memset(item, 0, sizeof *item);
    if (is_obj) {
      jws(ps);
      char *key = NULL;
      if (!jparse_string(ps, &key)) return 0;
      v->keys[v->n] = key;
      jws(ps);
      if (ps->p >= ps->end || *ps->p != ':') {
        v->n++;
        return jfail(ps, "expected ':'");
      }
      ps->p++;
    }
    v->n++;
    if (!jparse_value(ps, item)) return 0;
    jws(ps);
    if (ps->p < ps->end && *ps->p == ',') {
      ps->p++;
      continue;
    }
    if (ps->p < ps->end && *ps->p == close) {
      ps->p++;
      ps->depth--;
      return 1;
    }
    return jfail(ps, is_obj ? "expected ',' or '}'" : "expected ',' or ']'");
  }
}

static int jparse_value(jparser *ps, jval *v) {
  jws(ps);
  if (ps->p >= ps->end) return jfail(ps, "unexpected end");
  char c = *ps->p;
  if (c == '{' || c == '[') return jparse_container(ps, v, c == '{');
  if (c == '"') {
    v->type = J_STR;
    return jparse_string(ps, &v->str);
  }
  static const struct {
    const char *word;
    jtype type;
    int boolean;
  } words[] = {{"true", J_BOOL, 1}, {"false", J_BOOL, 0}, {"null", J_NULL, 0}};
  for (size_t i = 0; i < sizeof words / sizeof words[0]; i++) {
    size_t n = strlen(words[i].word);
    if ((size_t)(ps->end - ps->p) >= n && memcmp(ps->p, words[i].word, n) == 0) {
      v->type = words[i].type;
      v->boolean = words[i].boolean;
      ps->p += n;
      return 1;
    }
  }
  v->type = J_NUM;
  return jparse_number(ps, &v->num);
}

/* Parses a whole document; returns NULL (and prints why) unless it is exactly one valid JSON value. */
static const char *jparse_document(const char *text, size_t len, jval *out) {
  jparser ps = {.p = text, .end = text + len};
  memset(out, 0, sizeof *out);
  if (jparse_value(&ps, out)) {
    jws(&ps);
    if (ps.p != ps.end) jfail(&ps, "garbage after the value");
  }
  if (ps.error) {
    jfree(out);
    return ps.error;
  }
  return NULL;
}

static const jval *jget(const jval *obj, const char *key) {
  if (!obj || obj->type != J_OBJ) return NULL;
  for (int i = 0; i < obj->n; i++)
    if (strcmp(obj->keys[i], key) == 0) return &obj->items[i];
  return NULL;
}

static const char *jstr(const jval *obj, const char *key) {
  const jval *v = jget(obj, key);
  return v && v->type == J_STR ? v->str : "";
}

static double jnum(const jval *obj, const char *key, double missing) {
  const jval *v = jget(obj, key);
  return v && v->type == J_NUM ? v->num : missing;
}

/* ---- helpers ---- */

static char *read_file(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *buf = malloc((size_t)n + 1);
  size_t got = fread(buf, 1, (size_t)n, f);
  fclose(f);
  buf[got] = '\0';
  *len = got;
  return buf;
}

static int file_exists(const char *path) {
  struct stat st;
  return stat(path, &st) == 0;
}

/* Loads a trace file and checks its outer shape; the events array is returned through events. */
static const char *load_trace(const char *path, jval *doc, const jval **events) {
  size_t len;
  char *text = read_file(path, &len);
  if (!text) return "cannot read the file";
  const char *err = jparse_document(text, len, doc);
  free(text);
  if (err) return err;
  if (doc->type != J_OBJ) return "not an object";
  if (strcmp(jstr(doc, "displayTimeUnit"), "ms") != 0) return "displayTimeUnit is not \"ms\"";
  *events = jget(doc, "traceEvents");
  if (!*events || (*events)->type != J_ARR) return "no traceEvents array";
  return NULL;
}

#define NRANKS 3
#define NCOMM 50
#define NCOMPUTE 40

static const char *const compute_names[] = {"forward", "backward", "optimizer"};

typedef struct rank_arg {
  cohort_inproc_group *group;
  int rank, size;
  const char *path;
  int make_comm_fail; /* this rank aborts the communicator before writing */
  cohort__timeline *tl;
  int64_t base_ns;
  cohort_status create_st, write_st;
  char write_error[1024];
} rank_arg;

/* The comm lane, recorded from a second thread of the rank (as the engine's progress-thread callbacks would). */
static void *record_comm(void *p) {
  rank_arg *a = p;
  for (int k = 0; k < NCOMM; k++) {
    int64_t b = a->base_ns + (int64_t)k * 2000;
    cohort__timeline_span(a->tl, COHORT__LANE_COMM, "allreduce", b, b + 1000 + k, k, 1000 * (a->rank + 1) + k);
  }
  return NULL;
}

static void *rank_main(void *p) {
  rank_arg *a = p;
  cohort_comm *comm = NULL;
  a->create_st = cohort_init_inproc(a->group, a->rank, &comm);
  if (a->create_st != COHORT_OK) return NULL;
  a->create_st = cohort__timeline_create(comm, a->path, &a->tl);
  if (a->create_st != COHORT_OK) {
    cohort_comm_destroy(comm);
    return NULL;
  }
  a->base_ns = cohort__now_ns();
  pthread_t helper;
  pthread_create(&helper, NULL, record_comm, a);
  for (int k = 0; k < NCOMPUTE; k++) {
    int64_t b = a->base_ns + (int64_t)k * 3000;
    cohort__timeline_span(a->tl, COHORT__LANE_COMPUTE, compute_names[k % 3], b, b + 1500, -1, 0);
  }
  pthread_join(helper, NULL);
  if (a->make_comm_fail) cohort_comm_abort(comm, "the test makes the communicator fail");
  a->write_st = cohort__timeline_write(a->tl);
  snprintf(a->write_error, sizeof a->write_error, "%s", cohort_last_error());
  cohort__timeline_destroy(a->tl);
  cohort_comm_destroy(comm);
  return NULL;
}

static void run_ranks(rank_arg *args, int size, const char *path, int failing_rank) {
  cohort_inproc_group *g;
  if (cohort_inproc_group_create(size, &g) != COHORT_OK) abort();
  pthread_t th[NRANKS];
  for (int r = 0; r < size; r++) {
    args[r] = (rank_arg){.group = g, .rank = r, .size = size, .path = path, .make_comm_fail = r == failing_rank};
    pthread_create(&th[r], NULL, rank_main, &args[r]);
  }
  for (int r = 0; r < size; r++)
    pthread_join(th[r], NULL);
  cohort_inproc_group_destroy(g);
}

/* Checks rank r's events in events: its metadata, and exactly the spans rank_main and record_comm recorded, in
 * that order, with their durations, spacing and args. Fails the test (returning) on the first difference. */
static void check_rank_lane(const jval *events, int r) {
  int saw_name = 0, saw_sort = 0, saw_compute = 0, saw_comm = 0;
  int ncomm = 0, ncompute = 0;
  double comm_ts0 = 0, compute_ts0 = 0;
  for (int i = 0; i < events->n; i++) {
    const jval *e = &events->items[i];
    ASSERT_EQ(e->type, J_OBJ);
    if ((int)jnum(e, "pid", -1) != r) continue;
    const char *ph = jstr(e, "ph");
    const jval *args = jget(e, "args");
    if (strcmp(ph, "M") == 0) {
      const char *name = jstr(e, "name");
      if (strcmp(name, "process_name") == 0) {
        char want[32];
        snprintf(want, sizeof want, "rank %d", r);
        ASSERT_STREQ(jstr(args, "name"), want);
        saw_name++;
      } else if (strcmp(name, "process_sort_index") == 0) {
        ASSERT_EQ(jnum(args, "sort_index", -1), r);
        saw_sort++;
      } else if (strcmp(name, "thread_name") == 0) {
        int tid = (int)jnum(e, "tid", -1);
        ASSERT_STREQ(jstr(args, "name"), tid == 0 ? "compute" : tid == 1 ? "comm" : "?");
        if (tid == 0) saw_compute++;
        if (tid == 1) saw_comm++;
      }
      continue;
    }
    ASSERT_STREQ(ph, "X");
    double ts = jnum(e, "ts", -1), dur = jnum(e, "dur", -1);
    ASSERT_TRUE(ts >= 0);
    ASSERT_TRUE(dur >= 0);
    int tid = (int)jnum(e, "tid", -1);
    if (tid == 1) {
      int k = ncomm++;
      ASSERT_TRUE(k < NCOMM);
      ASSERT_STREQ(jstr(e, "name"), "allreduce");
      ASSERT_STREQ(jstr(e, "cat"), "comm");
      if (k == 0) comm_ts0 = ts;
      ASSERT_NEAR(ts - comm_ts0, k * 2.0, 1e-6); /* ordered as recorded, 2 us apart */
      ASSERT_NEAR(dur, (1000 + k) / 1000.0, 1e-9);
      ASSERT_TRUE(args != NULL);
      ASSERT_EQ(jnum(args, "bucket", -1), k);
      ASSERT_EQ(jnum(args, "bytes", -1), 1000 * (r + 1) + k);
      ASSERT_EQ(args->n, 2);
    } else {
      ASSERT_EQ(tid, 0);
      int k = ncompute++;
      ASSERT_TRUE(k < NCOMPUTE);
      ASSERT_STREQ(jstr(e, "name"), compute_names[k % 3]);
      if (k == 0) compute_ts0 = ts;
      ASSERT_NEAR(ts - compute_ts0, k * 3.0, 1e-6);
      ASSERT_NEAR(dur, 1.5, 1e-9);
      ASSERT_TRUE(args == NULL); /* compute spans carry no args */
    }
  }
  ASSERT_EQ(saw_name, 1);
  ASSERT_EQ(saw_sort, 1);
  ASSERT_EQ(saw_compute, 1);
  ASSERT_EQ(saw_comm, 1);
  ASSERT_EQ(ncomm, NCOMM);
  ASSERT_EQ(ncompute, NCOMPUTE);
}

/* Every event's pid is in [0, size) and every pid in that range appears. */
static void check_pids(const jval *events, int size) {
  int seen[NRANKS] = {0};
  for (int i = 0; i < events->n; i++) {
    int pid = (int)jnum(&events->items[i], "pid", -1);
    ASSERT_TRUE(pid >= 0 && pid < size);
    seen[pid] = 1;
  }
  for (int r = 0; r < size; r++)
    ASSERT_EQ(seen[r], 1);
}

TEST(three_ranks_write_one_valid_trace) {
  char path[512], tmp[600], lane[600];
  snprintf(path, sizeof path, "%s", cohort_test_tmp_path("trace3.json"));
  rank_arg args[NRANKS];
  run_ranks(args, NRANKS, path, -1);
  for (int r = 0; r < NRANKS; r++) {
    ASSERT_OK(args[r].create_st);
    if (args[r].write_st != COHORT_OK) TEST_FAIL_("rank %d: write: %s", r, args[r].write_error);
  }
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  ASSERT_TRUE(!file_exists(tmp)); /* renamed away */
  snprintf(lane, sizeof lane, "%s.rank0", path);
  ASSERT_TRUE(!file_exists(lane)); /* no fallback when the gather worked */
  jval doc;
  const jval *events = NULL;
  const char *err = load_trace(path, &doc, &events);
  if (err) TEST_FAIL_("%s: %s", path, err);
  /* Per rank: 2 process metadata + 2 x 2 thread metadata + the spans. */
  ASSERT_EQ(events->n, NRANKS * (6 + NCOMM + NCOMPUTE));
  check_pids(events, NRANKS);
  for (int r = 0; r < NRANKS && !cohort_test_failed; r++)
    check_rank_lane(events, r);
  jfree(&doc);
}

TEST(a_path_that_cannot_be_written_is_a_system_error_naming_it) {
  char path[512];
  snprintf(path, sizeof path, "%s/no-such-dir/trace.json", cohort_test_tmp_dir());
  for (int size = 1; size <= 2; size++) {
    rank_arg args[NRANKS];
    run_ranks(args, size, path, -1);
    ASSERT_OK(args[0].create_st);
    ASSERT_EQ(args[0].write_st, COHORT_ERR_SYSTEM);
    ASSERT_CONTAINS(args[0].write_error, path);
    ASSERT_CONTAINS(args[0].write_error, strerror(ENOENT));
    /* The other rank only sent its spans; it did nothing wrong. */
    if (size == 2) ASSERT_OK(args[1].write_st);
  }
}

TEST(a_failed_communicator_leaves_each_rank_its_own_lane) {
  char path[512];
  snprintf(path, sizeof path, "%s", cohort_test_tmp_path("failed.json"));
  rank_arg args[NRANKS];
  run_ranks(args, 2, path, 1);
  ASSERT_TRUE(!file_exists(path));
  for (int r = 0; r < 2; r++) {
    ASSERT_OK(args[r].create_st);
    ASSERT_EQ(args[r].write_st, COHORT_ERR_REMOTE);
    ASSERT_CONTAINS(args[r].write_error, "timeline");
    ASSERT_CONTAINS(args[r].write_error, "the test makes the communicator fail");
    char lane[600];
    snprintf(lane, sizeof lane, "%s.rank%d", path, r);
    jval doc;
    const jval *events = NULL;
    const char *err = load_trace(lane, &doc, &events);
    if (err) TEST_FAIL_("%s: %s", lane, err);
    ASSERT_EQ(events->n, 6 + NCOMM + NCOMPUTE);
    for (int i = 0; i < events->n; i++)
      ASSERT_EQ(jnum(&events->items[i], "pid", -1), r);
    check_rank_lane(events, r);
    jfree(&doc);
    if (cohort_test_failed) return;
  }
}

TEST(spans_are_clipped_and_names_escaped) {
  cohort_inproc_group *g;
  ASSERT_OK(cohort_inproc_group_create(1, &g));
  cohort_comm *comm;
  ASSERT_OK(cohort_init_inproc(g, 0, &comm));
  cohort_inproc_group_destroy(g);
  const char *path = cohort_test_tmp_path("clip.json");
  cohort__timeline *tl;
  ASSERT_OK(cohort__timeline_create(comm, path, &tl));
  int64_t now = cohort__now_ns();
  cohort__timeline_span(tl, COHORT__LANE_COMPUTE, "forward", now - 5000000000LL, now - 4000000000LL, -1, 0);
  cohort__timeline_span(tl, COHORT__LANE_COMM, "odd \"name\" \\ \x01", now + 5000, now + 2000, 7, 123456789012LL);
  ASSERT_OK(cohort__timeline_write(tl));
  cohort__timeline_destroy(tl);
  cohort_comm_destroy(comm);

  jval doc;
  const jval *events = NULL;
  const char *err = load_trace(path, &doc, &events);
  if (err) TEST_FAIL_("%s: %s", path, err);
  int spans = 0;
  for (int i = 0; i < events->n; i++) {
    const jval *e = &events->items[i];
    if (strcmp(jstr(e, "ph"), "X") != 0) continue;
    spans++;
    if (strcmp(jstr(e, "name"), "forward") == 0) { /* entirely before the timeline: clipped to [0, 0] */
      ASSERT_EQ(jnum(e, "ts", -1), 0);
      ASSERT_EQ(jnum(e, "dur", -1), 0);
    } else {
      ASSERT_STREQ(jstr(e, "name"), "odd \"name\" \\ \x01");
      ASSERT_TRUE(jnum(e, "ts", -1) >= 5.0);
      ASSERT_EQ(jnum(e, "dur", -1), 0); /* ended before it began */
      ASSERT_EQ(jnum(jget(e, "args"), "bucket", -1), 7);
      ASSERT_EQ(jnum(jget(e, "args"), "bytes", -1), 123456789012LL);
    }
  }
  ASSERT_EQ(spans, 2);
  jfree(&doc);
}

/* The parser itself must refuse what chrome://tracing would refuse, or the checks above prove nothing. */
TEST(the_json_checker_is_strict) {
  static const char *const bad[] = {"{\"a\":1,}", "[1,2,]",  "{\"a\" 1}", "[01]", "[1.]", "{\"a\":\"x\n\"}",
                                    "[1] x",      "{'a':1}", "[\"\\q\"]", "",     "[1e]", "{\"a\":tru}"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    jval v;
    const char *err = jparse_document(bad[i], strlen(bad[i]), &v);
    if (!err) TEST_FAIL_("accepted invalid JSON: %s", bad[i]);
  }
  const char *good = " {\"a\":[1,-2.5e3,true,false,null,\"\\u0041\\n\"],\"b\":{}} ";
  jval v;
  const char *err = jparse_document(good, strlen(good), &v);
  if (err) TEST_FAIL_("refused valid JSON: %s", err);
  ASSERT_EQ(jget(&v, "a")->n, 6);
  ASSERT_NEAR(jget(&v, "a")->items[1].num, -2500.0, 0);
  ASSERT_STREQ(jget(&v, "a")->items[5].str, "A\n");
  jfree(&v);
}

COHORT_TEST_MAIN(TEST_CASE(the_json_checker_is_strict), TEST_CASE(three_ranks_write_one_valid_trace),
                 TEST_CASE(a_path_that_cannot_be_written_is_a_system_error_naming_it),
                 TEST_CASE(a_failed_communicator_leaves_each_rank_its_own_lane),
                 TEST_CASE(spans_are_clipped_and_names_escaped))
