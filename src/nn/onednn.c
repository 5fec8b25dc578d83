/*
 * onednn.c: the oneDNN backend (backend.h): conv2d, linear and max pooling on oneDNN's JIT kernels.
 *
 * oneDNN (Debian's libdnnl 2.6.3, the version torch 1.13 runs its convolutions on) generates its kernels for the
 * best ISA the CPU has when a primitive is made (SSE4.1, AVX2, AVX-512, AMX; ONEDNN_MAX_CPU_ISA caps it), whatever
 * OPENBLAS_CORETYPE says. Making a primitive costs far more than running it, so each layer keeps its primitives
 * per input shape (a plan: the training batch, the evaluation batch, a last short batch) and reuses them; only
 * the data pointers change from call to call.
 *
 * What each layer runs:
 *   conv2d  forward: one direct convolution over the batch, bias and a fused ReLU as a post-op; backward: the
 *           weight and bias gradients in one primitive (into scratch, then added: gradients accumulate), the input
 *           gradient in another. Activations between oneDNN layers stay in oneDNN's channel-blocked layout
 *           (backend.h, "Layouts"): conv1 -> conv2 -> pool never reorders; the weights (a few thousand floats) are
 *           reordered into the kernels' layout on every call, since the optimizer changes them in place.
 *   linear  matmul over the plain tensors (no reorder of the 1.2 M weights of fc1): forward with the bias and a
 *           fused ReLU; the weight gradient as a matmul of dy^T and x with a sum post-op, so it adds into the
 *           gradient in place; the input gradient as dy W. The bias gradient is the reference's column sums.
 *   maxpool cohort's own loops over oneDNN's channel-blocked input (below: faster than oneDNN's pooling here), writing
 *           the plain tensor that flatten reads.
 * A ReLU fused into conv2d or linear is undone in backward as in the reference: dy is masked where y is 0, in
 * whatever layout y has (the mask is element by element).
 *
 * Where oneDNN cannot make a primitive for a layer (a shape it has no kernel for), that layer runs the reference
 * kernels for that shape, on plain tensors (reorders in and out when its neighbours use blocked layouts), and
 * COHORT_LOG_INFO says so once per layer.
 *
 * The model's thread calls enter() before every pass, which sets that thread's OpenMP thread count (oneDNN's
 * runtime in Debian's build) to cohort_nn_set_threads()'s; with one thread oneDNN runs on the calling thread.
 * omp_set_num_threads is looked up in the process (libdnnl brings libgomp), so cohort links no OpenMP itself.
 *
 * Thread-safety: the engine is made once (pthread_once) and shared; plans and streams belong to their layer.
 */
#include "nn/backend.h"

#if COHORT_HAVE_DNNL

#include <dlfcn.h>
#include <oneapi/dnnl/dnnl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "nn/kernels.h"

/* ---- the engine, once per process ---- */

static pthread_once_t engine_once = PTHREAD_ONCE_INIT;
static dnnl_engine_t engine;
static const char *engine_error;
static void (*omp_set_threads)(int);
static int (*omp_max_threads)(void);

static void engine_init(void) {
  if (dnnl_engine_create(&engine, dnnl_cpu, 0) != dnnl_success) {
    engine_error = "oneDNN could not make its CPU engine";
    return;
  }
  *(void **)&omp_set_threads = dlsym(RTLD_DEFAULT, "omp_set_num_threads");
  *(void **)&omp_max_threads = dlsym(RTLD_DEFAULT, "omp_get_max_threads");
}

static const char *onednn_unavailable(void) {
  pthread_once(&engine_once, engine_init);
  return engine_error;
}

static const char *isa_name(dnnl_cpu_isa_t isa) {
  switch ((int)isa) {
  case dnnl_cpu_isa_sse41:
    return "sse41";
  case dnnl_cpu_isa_avx:
    return "avx";
  case dnnl_cpu_isa_avx2:
    return "avx2";
  case dnnl_cpu_isa_avx2_vnni:
    return "avx2_vnni";
  case dnnl_cpu_isa_avx512_mic:
    return "avx512_mic";
  case dnnl_cpu_isa_avx512_mic_4ops:
    return "avx512_mic_4ops";
  case dnnl_cpu_isa_avx512_core:
    return "avx512_core";
  case dnnl_cpu_isa_avx512_core_vnni:
    return "avx512_core_vnni";
  case dnnl_cpu_isa_avx512_core_bf16:
    return "avx512_core_bf16";
  case dnnl_cpu_isa_avx512_core_amx:
    return "avx512_core_amx";
  }
  return "generic";
}

int cohort__onednn_isa_level(void) {
  if (onednn_unavailable()) return 0;
  int isa = (int)dnnl_get_effective_cpu_isa();
  if ((isa & dnnl_cpu_isa_avx512_core) == dnnl_cpu_isa_avx512_core) return 4;
  if ((isa & dnnl_cpu_isa_avx2) == dnnl_cpu_isa_avx2) return 3;
  if ((isa & dnnl_cpu_isa_avx) == dnnl_cpu_isa_avx) return 2;
  return isa ? 1 : 0;
}

static void onednn_describe(char *buf, size_t len) {
  const dnnl_version_t *v = dnnl_version();
  snprintf(buf, len, "oneDNN %d.%d.%d, ISA %s (conv2d, linear, max pooling; the rest: reference)", v->major, v->minor,
           v->patch, isa_name(dnnl_get_effective_cpu_isa()));
}

static void onednn_enter(void) {
  if (!omp_set_threads || !omp_max_threads) return;
  int want = cohort__nn_threads();
  if (omp_max_threads() != want) omp_set_threads(want);
}

/* ---- small helpers ---- */

#define DN(call)                                                                                                       \
  do {                                                                                                                 \
    dnnl_status_t dn_st__ = (call);                                                                                    \
    if (dn_st__ != dnnl_success) {                                                                                     \
      st = cohort__error(COHORT_ERR_INTERNAL, "oneDNN: %s failed (status %d) in layer '%s'", #call, (int)dn_st__,      \
                         l->name);                                                                                     \
      goto fail;                                                                                                       \
    }                                                                                                                  \
  } while (0)

/* A memory object without data of its own: the data pointer is set before each use. */
typedef struct dmem {
  dnnl_memory_desc_t md;
  dnnl_memory_t m;
} dmem;

static dnnl_status_t dmem_init(dmem *d, const dnnl_memory_desc_t *md) {
  d->md = *md;
  return dnnl_memory_create(&d->m, md, engine, DNNL_MEMORY_NONE);
}

static void dmem_free(dmem *d) {
  if (d->m) dnnl_memory_destroy(d->m);
  d->m = NULL;
}

static dnnl_memory_t at(dmem *d, const void *p) {
  dnnl_memory_set_data_handle(d->m, (void *)p);
  return d->m;
}

static int same_md(const dnnl_memory_desc_t *a, const dnnl_memory_desc_t *b) { return dnnl_memory_desc_equal(a, b); }

static size_t md_floats(const dnnl_memory_desc_t *md) { return dnnl_memory_desc_get_size(md) / sizeof(float); }

static dnnl_status_t plain_md(dnnl_memory_desc_t *md, int ndims, const int64_t *dims) {
  static const dnnl_format_tag_t tags[] = {dnnl_format_tag_undef, dnnl_a, dnnl_ab, dnnl_abc, dnnl_abcd};
  dnnl_dims_t d = {0};
  for (int i = 0; i < ndims; i++)
    d[i] = dims[i];
  return dnnl_memory_desc_init_by_tag(md, ndims, d, dnnl_f32, tags[ndims]);
}

static dnnl_status_t any_md(dnnl_memory_desc_t *md, int ndims, const int64_t *dims) {
  dnnl_dims_t d = {0};
  for (int i = 0; i < ndims; i++)
    d[i] = dims[i];
  return dnnl_memory_desc_init_by_tag(md, ndims, d, dnnl_f32, dnnl_format_tag_any);
}

static float *buffer(size_t floats) {
  size_t bytes = (floats * sizeof(float) + 63) & ~(size_t)63;
  return aligned_alloc(64, bytes ? bytes : 64);
}

/* A reorder between two layouts of the same tensor, with its two memory objects. */
typedef struct reorder {
  dnnl_primitive_t p;
  dmem from, to;
} reorder;

static dnnl_status_t reorder_init(reorder *r, const dnnl_memory_desc_t *from, const dnnl_memory_desc_t *to) {
  dnnl_primitive_desc_t pd = NULL;
  dnnl_status_t s = dnnl_reorder_primitive_desc_create(&pd, from, engine, to, engine, NULL);
  if (s == dnnl_success) s = dnnl_primitive_create(&r->p, pd);
  if (pd) dnnl_primitive_desc_destroy(pd);
  if (s == dnnl_success) s = dmem_init(&r->from, from);
  if (s == dnnl_success) s = dmem_init(&r->to, to);
  return s;
}

static void reorder_free(reorder *r) {
  if (r->p) dnnl_primitive_destroy(r->p);
  r->p = NULL;
  dmem_free(&r->from);
  dmem_free(&r->to);
}

static void reorder_run(reorder *r, dnnl_stream_t s, const void *from, void *to) {
  dnnl_exec_arg_t args[2] = {{DNNL_ARG_FROM, at(&r->from, from)}, {DNNL_ARG_TO, at(&r->to, to)}};
  dnnl_primitive_execute(r->p, s, 2, args);
}

/* A primitive from an op descriptor, with the attributes' post-ops: relu (eltwise) and/or sum. The primitive
 * descriptor is kept when pd is not NULL (backward primitives take the forward one as a hint). */
static dnnl_status_t make(dnnl_primitive_t *p, dnnl_primitive_desc_t *pd_out, const void *op, int relu, int sum,
                          const_dnnl_primitive_desc_t hint) {
  dnnl_primitive_attr_t attr = NULL;
  dnnl_post_ops_t po = NULL;
  dnnl_primitive_desc_t pd = NULL;
  dnnl_status_t s = dnnl_primitive_attr_create(&attr);
  if (s == dnnl_success && (relu || sum)) {
    s = dnnl_post_ops_create(&po);
    if (s == dnnl_success && sum) s = dnnl_post_ops_append_sum(po, 1.0f);
    if (s == dnnl_success && relu) s = dnnl_post_ops_append_eltwise(po, 1.0f, dnnl_eltwise_relu, 0.0f, 0.0f);
    if (s == dnnl_success) s = dnnl_primitive_attr_set_post_ops(attr, po);
  }
  if (s == dnnl_success) s = dnnl_primitive_desc_create(&pd, op, attr, engine, hint);
  if (s == dnnl_success) s = dnnl_primitive_create(p, pd);
  if (po) dnnl_post_ops_destroy(po);
  if (attr) dnnl_primitive_attr_destroy(attr);
  if (s == dnnl_success && pd_out)
    *pd_out = pd;
  else if (pd)
    dnnl_primitive_desc_destroy(pd);
  return s;
}

static const dnnl_memory_desc_t *query(const_dnnl_primitive_desc_t pd, dnnl_query_t what, int index) {
  return dnnl_primitive_desc_query_md(pd, what, index);
}

/* ---- plans: a layer's primitives for one input shape and layout ---- */

#define PLANS 4 /* the training batch, the evaluation batch, a last short batch of each */

typedef struct plan plan;
typedef struct layer_state {
  dnnl_stream_t stream;
  plan *plans[PLANS];
  plan *cur;              /* the plan of the last forward: backward runs on it */
  unsigned long long use; /* LRU clock */
  int warned;             /* said once that a shape runs on the reference */
} layer_state;

struct plan {
  int64_t n, h, w; /* the input's batch and spatial size (linear: n) */
  dnnl_memory_desc_t x_md;
  unsigned long long used;
  int fallback; /* oneDNN had no kernel: the reference runs, on plain tensors */
  /* forward */
  dnnl_primitive_t fwd;
  dnnl_primitive_desc_t fwd_pd;
  dmem src, wei, bias, dst;
  reorder x_to_src, w_to_wei, dst_to_y; /* each only where the layouts differ (p == NULL otherwise) */
  float *src_buf, *wei_buf, *dst_buf;
  /* backward: weights (conv2d, linear) or data (pool) */
  dnnl_primitive_t bww;
  dmem bw_src, bw_dw, bw_db, bw_ddst;
  reorder dy_to_ddst, dw_to_plain;
  float *ddst_buf, *dw_buf, *db_buf, *dwk_buf; /* dwk: the weight gradient in the kernels' layout */
  /* backward data (conv2d, linear) */
  dnnl_primitive_t bwd;
  dmem bd_dsrc, bd_wei, bd_ddst;
  reorder w_to_bdwei, dy_to_bdddst, dsrc_to_dx;
  float *bdwei_buf, *bdddst_buf, *dsrc_buf;
  int bwd_made;
  /* the fallback's plain copies, where x or y are blocked */
  reorder x_to_plain, dx_from_plain;
  float *px, *pdx;
};

static void plan_free(plan *p) {
  if (!p) return;
  dnnl_primitive_t prims[] = {p->fwd, p->bww, p->bwd};
  for (size_t i = 0; i < sizeof prims / sizeof prims[0]; i++)
    if (prims[i]) dnnl_primitive_destroy(prims[i]);
  if (p->fwd_pd) dnnl_primitive_desc_destroy(p->fwd_pd);
  dmem *mems[] = {&p->src,   &p->wei,     &p->bias,    &p->dst,    &p->bw_src, &p->bw_dw,
                  &p->bw_db, &p->bw_ddst, &p->bd_dsrc, &p->bd_wei, &p->bd_ddst};
  for (size_t i = 0; i < sizeof mems / sizeof mems[0]; i++)
    dmem_free(mems[i]);
  reorder *rs[] = {&p->x_to_src,   &p->w_to_wei,     &p->dst_to_y,   &p->dy_to_ddst, &p->dw_to_plain,
                   &p->w_to_bdwei, &p->dy_to_bdddst, &p->dsrc_to_dx, &p->x_to_plain, &p->dx_from_plain};
  for (size_t i = 0; i < sizeof rs / sizeof rs[0]; i++)
    reorder_free(rs[i]);
  float *bufs[] = {p->src_buf, p->wei_buf,   p->dst_buf,    p->ddst_buf, p->dw_buf, p->db_buf,
                   p->dwk_buf, p->bdwei_buf, p->bdddst_buf, p->dsrc_buf, p->px,     p->pdx};
  for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
    free(bufs[i]);
  free(p);
}

static void onednn_release(cohort__layer *l) {
  layer_state *s = l->state;
  if (!s) return;
  for (int i = 0; i < PLANS; i++)
    plan_free(s->plans[i]);
  if (s->stream) dnnl_stream_destroy(s->stream);
  free(s);
  l->state = NULL;
}

/* The layer's state, made on first use. NULL with c->status set when out of memory. */
static layer_state *state_of(cohort__layer *l, cohort__nnctx *c) {
  if (l->state) return l->state;
  cohort_status st = COHORT_OK;
  layer_state *s = calloc(1, sizeof *s);
  if (!s) {
    c->status = cohort__error(COHORT_ERR_SYSTEM, "layer '%s': out of memory for its oneDNN state", l->name);
    return NULL;
  }
  l->state = s;
  DN(dnnl_stream_create(&s->stream, engine, dnnl_stream_default_flags));
  return s;
fail:
  onednn_release(l);
  c->status = st;
  return NULL;
}

/* The input's layout: the producer's (c->x_layout) or plain. */
static dnnl_status_t x_md_of(cohort__nnctx *c, const cohort_tensor *x, dnnl_memory_desc_t *md) {
  if (c->x_layout) {
    *md = *(const dnnl_memory_desc_t *)c->x_layout;
    return dnnl_success;
  }
  return plain_md(md, x->ndim, x->shape);
}

/* The plan for this input, from the cache or NULL (then the caller makes one and files it with keep()). */
static plan *find(layer_state *s, const cohort_tensor *x, const dnnl_memory_desc_t *x_md) {
  for (int i = 0; i < PLANS; i++) {
    plan *p = s->plans[i];
    if (p && p->n == x->shape[0] && p->h == (x->ndim == 4 ? x->shape[2] : 0) &&
        p->w == (x->ndim == 4 ? x->shape[3] : 0) && same_md(&p->x_md, x_md)) {
      p->used = ++s->use;
      return p;
    }
  }
  return NULL;
}

static plan *new_plan(const cohort_tensor *x, const dnnl_memory_desc_t *x_md) {
  plan *p = calloc(1, sizeof *p);
  if (!p) return NULL;
  p->n = x->shape[0];
  p->h = x->ndim == 4 ? x->shape[2] : 0;
  p->w = x->ndim == 4 ? x->shape[3] : 0;
  p->x_md = *x_md;
  return p;
}

static void keep(layer_state *s, plan *p) {
  int slot = 0;
  for (int i = 0; i < PLANS; i++) {
    if (!s->plans[i]) {
      slot = i;
      break;
    }
    if (s->plans[i]->used < s->plans[slot]->used) slot = i;
  }
  if (s->plans[slot] == s->cur) s->cur = NULL;
  plan_free(s->plans[slot]);
  p->used = ++s->use;
  s->plans[slot] = p;
}

/* A reorder where the layouts differ (none where they agree), with a buffer for the side that is not the caller's
 * memory: the destination (TO: the input of a kernel, made from the caller's tensor) or the source (FROM: the
 * output of a kernel, reordered into the caller's tensor). */
enum { TO, FROM };
static dnnl_status_t maybe_reorder(reorder *r, float **buf, int side, const dnnl_memory_desc_t *from,
                                   const dnnl_memory_desc_t *to) {
  if (same_md(from, to)) return dnnl_success;
  dnnl_status_t s = reorder_init(r, from, to);
  if (s == dnnl_success && buf && !(*buf = buffer(md_floats(side == TO ? to : from)))) s = dnnl_out_of_memory;
  return s;
}

/* Runs r from -> buf when it exists, else gives back from. */
static const float *through(reorder *r, dnnl_stream_t s, const float *from, float *buf) {
  if (!r->p) return from;
  reorder_run(r, s, from, buf);
  return buf;
}

/* Forward's y: in the primitive's layout (only where layout_free allowed the plan to choose one), published for the
 * next layer unless it is plain anyway. */
static void publish_y(cohort__layer *l, plan *p, const cohort_tensor *y) {
  dnnl_memory_desc_t plain;
  l->y_layout = NULL;
  if (p->dst_to_y.p || plain_md(&plain, y->ndim, y->shape) != dnnl_success || same_md(&plain, &p->dst.md)) return;
  l->y_layout = &p->dst.md;
}

/* Whether oneDNN fell back to its reference implementation ("ref:any"), which is slower than cohort's own. */
static int is_ref(const_dnnl_primitive_desc_t pd) {
  const char *impl = NULL;
  return dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) == dnnl_success && impl &&
         strncmp(impl, "ref", 3) == 0;
}

/* ---- the fallback: the reference's kernels on plain copies ---- */

static dnnl_status_t fallback_prepare(cohort__layer *l, plan *p, const cohort_tensor *x) {
  p->fallback = 1;
  dnnl_memory_desc_t plain;
  dnnl_status_t s = plain_md(&plain, x->ndim, x->shape);
  if (s == dnnl_success) s = maybe_reorder(&p->x_to_plain, &p->px, TO, &p->x_md, &plain);
  if (s == dnnl_success) s = maybe_reorder(&p->dx_from_plain, &p->pdx, FROM, &plain, &p->x_md);
  return s;
}

static void fallback_forward(cohort__layer *l, cohort__nnctx *c, layer_state *s, plan *p, const cohort_tensor *x,
                             cohort_tensor *y) {
  cohort_tensor px = *x;
  px.data = (float *)through(&p->x_to_plain, s->stream, x->data, p->px);
  l->ops->forward(l, c, &px, y);
  l->y_layout = NULL;
}

static void fallback_backward(cohort__layer *l, cohort__nnctx *c, layer_state *s, plan *p, const cohort_tensor *x,
                              const cohort_tensor *y, float *dy, float *dx) {
  cohort_tensor px = *x;
  px.data = (float *)through(&p->x_to_plain, s->stream, x->data, p->px);
  float *pdx = dx && p->dx_from_plain.p ? p->pdx : dx;
  l->ops->backward(l, c, &px, y, dy, pdx);
  if (dx && p->dx_from_plain.p) reorder_run(&p->dx_from_plain, s->stream, pdx, dx);
}

static void say_fallback(cohort__layer *l, layer_state *s, const cohort_tensor *x) {
  if (s->warned) return;
  s->warned = 1;
  COHORT_LOG_INFO("layer '%s': oneDNN has no kernel for input [%lld, %lld, ...]: it runs the reference kernels there",
                  l->name, (long long)x->shape[0], (long long)x->shape[1]);
}

/* Plans whose making failed for want of a kernel become fallbacks; other failures (memory) fail the pass. */
static plan *plan_for(cohort__layer *l, cohort__nnctx *c, const cohort_tensor *x,
                      cohort_status (*make_plan)(cohort__layer *, plan *, const cohort_tensor *, int *unimplemented)) {
  layer_state *s = state_of(l, c);
  if (!s) return NULL;
  dnnl_memory_desc_t x_md;
  if (x_md_of(c, x, &x_md) != dnnl_success) {
    c->status = cohort__error(COHORT_ERR_INTERNAL, "layer '%s': oneDNN refused the input's description", l->name);
    return NULL;
  }
  plan *p = find(s, x, &x_md);
  if (p) return p;
  if (!(p = new_plan(x, &x_md))) {
    c->status = cohort__error(COHORT_ERR_SYSTEM, "layer '%s': out of memory for a oneDNN plan", l->name);
    return NULL;
  }
  int unimplemented = 0;
  cohort_status st = make_plan(l, p, x, &unimplemented);
  if (st != COHORT_OK && unimplemented) {
    plan *f = new_plan(x, &x_md);
    plan_free(p);
    p = f;
    st = p ? COHORT_OK : cohort__error(COHORT_ERR_SYSTEM, "layer '%s': out of memory", l->name);
    if (p && fallback_prepare(l, p, x) != dnnl_success)
      st = cohort__error(COHORT_ERR_INTERNAL, "layer '%s': oneDNN cannot reorder its input to plain", l->name);
    if (st == COHORT_OK) say_fallback(l, s, x);
  }
  if (st != COHORT_OK) {
    plan_free(p);
    c->status = st;
    return NULL;
  }
  keep(s, p);
  return p;
}

/* dnnl_unimplemented means "no kernel for this": the caller falls back; anything else is an error. */
#define DNK(call)                                                                                                      \
  do {                                                                                                                 \
    dnnl_status_t dn_st__ = (call);                                                                                    \
    if (dn_st__ != dnnl_success) {                                                                                     \
      *unimplemented = dn_st__ == dnnl_unimplemented;                                                                  \
      st = cohort__error(dn_st__ == dnnl_out_of_memory ? COHORT_ERR_SYSTEM : COHORT_ERR_INTERNAL,                      \
                         "oneDNN: %s failed (status %d) in layer '%s'", #call, (int)dn_st__, l->name);                 \
      goto fail;                                                                                                       \
    }                                                                                                                  \
  } while (0)

/* ---- conv2d ---- */

static cohort_status conv_plan(cohort__layer *l, plan *p, const cohort_tensor *x, int *unimplemented) {
  cohort_status st = COHORT_OK;
  cohort_tensor yshape = {0};
  COHORT_CHECK(l->ops->out_shape(l, x, &yshape));
  const int64_t wdims[4] = {l->cout, l->cin, l->kernel, l->kernel}, bdims[1] = {l->cout};
  const dnnl_dims_t strides = {l->stride, l->stride}, pad = {l->padding, l->padding};
  dnnl_memory_desc_t src_md, w_plain, w_any, b_md, y_plain, y_want, ddst_any, dw_any;
  DNK(plain_md(&w_plain, 4, wdims));
  DNK(any_md(&w_any, 4, wdims));
  DNK(plain_md(&b_md, 1, bdims));
  DNK(plain_md(&y_plain, 4, yshape.shape));
  DNK(any_md(&ddst_any, 4, yshape.shape));
  dw_any = w_any;
  /* The input as it comes where it comes blocked (no reorder); a plain input lets the kernels choose. */
  dnnl_memory_desc_t x_plain;
  DNK(plain_md(&x_plain, 4, x->shape));
  if (same_md(&p->x_md, &x_plain))
    DNK(any_md(&src_md, 4, x->shape));
  else
    src_md = p->x_md;
  if (l->layout_free)
    DNK(any_md(&y_want, 4, yshape.shape));
  else
    y_want = y_plain;

  dnnl_convolution_desc_t fd;
  DNK(dnnl_convolution_forward_desc_init(&fd, dnnl_forward_training, dnnl_convolution_direct, &src_md, &w_any, &b_md,
                                         &y_want, strides, pad, pad));
  DNK(make(&p->fwd, &p->fwd_pd, &fd, l->fuse_relu, 0, NULL));
  if (!l->layout_free && is_ref(p->fwd_pd)) {
    /* No fast kernel writes plain output here: let it choose, and reorder. */
    dnnl_primitive_destroy(p->fwd);
    dnnl_primitive_desc_destroy(p->fwd_pd);
    p->fwd = NULL;
    p->fwd_pd = NULL;
    DNK(any_md(&y_want, 4, yshape.shape));
    DNK(dnnl_convolution_forward_desc_init(&fd, dnnl_forward_training, dnnl_convolution_direct, &src_md, &w_any, &b_md,
                                           &y_want, strides, pad, pad));
    DNK(make(&p->fwd, &p->fwd_pd, &fd, l->fuse_relu, 0, NULL));
  }
  /* A chosen output layout the model does not allow here, or one that would not fit the model's buffer (channels
   * not a multiple of the block): reordered to plain. */
  const dnnl_memory_desc_t *dst = query(p->fwd_pd, dnnl_query_dst_md, 0);
  DNK(dmem_init(&p->src, query(p->fwd_pd, dnnl_query_src_md, 0)));
  DNK(dmem_init(&p->wei, query(p->fwd_pd, dnnl_query_weights_md, 0)));
  DNK(dmem_init(&p->bias, &b_md));
  DNK(dmem_init(&p->dst, dst));
  DNK(maybe_reorder(&p->x_to_src, &p->src_buf, TO, &p->x_md, &p->src.md));
  DNK(maybe_reorder(&p->w_to_wei, &p->wei_buf, TO, &w_plain, &p->wei.md));
  if (!l->layout_free || md_floats(dst) != yshape.numel)
    DNK(maybe_reorder(&p->dst_to_y, &p->dst_buf, FROM, dst, &y_plain));

  /* Backward weights: the gradients of the weights and bias, from the input as forward saw it. */
  dnnl_convolution_desc_t wd;
  DNK(dnnl_convolution_backward_weights_desc_init(&wd, dnnl_convolution_direct, &p->src.md, &dw_any, &b_md, &ddst_any,
                                                  strides, pad, pad));
  dnnl_primitive_desc_t wpd = NULL;
  DNK(make(&p->bww, &wpd, &wd, 0, 0, p->fwd_pd));
  dnnl_status_t s2 = dmem_init(&p->bw_src, query(wpd, dnnl_query_src_md, 0));
  if (s2 == dnnl_success) s2 = dmem_init(&p->bw_dw, query(wpd, dnnl_query_diff_weights_md, 0));
  if (s2 == dnnl_success) s2 = dmem_init(&p->bw_db, query(wpd, dnnl_query_diff_weights_md, 1));
  if (s2 == dnnl_success) s2 = dmem_init(&p->bw_ddst, query(wpd, dnnl_query_diff_dst_md, 0));
  dnnl_primitive_desc_destroy(wpd);
  DNK(s2);
  if (!same_md(&p->bw_src.md, &p->src.md)) DNK(dnnl_unimplemented); /* never seen: the hint keeps them equal */
  {
    const dnnl_memory_desc_t *y_md = p->dst_to_y.p ? &y_plain : dst;
    DNK(maybe_reorder(&p->dy_to_ddst, &p->ddst_buf, TO, y_md, &p->bw_ddst.md));
  }
  DNK(maybe_reorder(&p->dw_to_plain, NULL, FROM, &p->bw_dw.md, &w_plain));
  if (!(p->dw_buf = buffer((size_t)l->cout * l->cin * l->kernel * l->kernel)) || !(p->db_buf = buffer(l->cout)) ||
      (p->dw_to_plain.p && !(p->dwk_buf = buffer(md_floats(&p->bw_dw.md)))))
    DNK(dnnl_out_of_memory);
  return COHORT_OK;
fail:
  return st;
}

/* Backward data, made at the first backward that needs dx (the first layer never does). */
static cohort_status conv_plan_data(cohort__layer *l, plan *p, const cohort_tensor *x) {
  cohort_status st = COHORT_OK;
  int unimplemented_, *unimplemented = &unimplemented_;
  const int64_t wdims[4] = {l->cout, l->cin, l->kernel, l->kernel};
  const dnnl_dims_t strides = {l->stride, l->stride}, pad = {l->padding, l->padding};
  dnnl_memory_desc_t w_plain, w_any, ddst_any;
  DNK(plain_md(&w_plain, 4, wdims));
  DNK(any_md(&w_any, 4, wdims));
  dnnl_dims_t yd;
  for (int i = 0; i < 4; i++)
    yd[i] = p->dst.md.dims[i];
  DNK(dnnl_memory_desc_init_by_tag(&ddst_any, 4, yd, dnnl_f32, dnnl_format_tag_any));
  /* dx in x's layout: ask for it; where the kernels want another, reorder. */
  dnnl_convolution_desc_t dd;
  dnnl_primitive_desc_t dpd = NULL;
  DNK(dnnl_convolution_backward_data_desc_init(&dd, dnnl_convolution_direct, &p->x_md, &w_any, &ddst_any, strides, pad,
                                               pad));
  if (make(&p->bwd, &dpd, &dd, 0, 0, p->fwd_pd) != dnnl_success) {
    dnnl_memory_desc_t dsrc_any;
    dnnl_dims_t xd;
    for (int i = 0; i < 4; i++)
      xd[i] = x->shape[i];
    DNK(dnnl_memory_desc_init_by_tag(&dsrc_any, 4, xd, dnnl_f32, dnnl_format_tag_any));
    DNK(dnnl_convolution_backward_data_desc_init(&dd, dnnl_convolution_direct, &dsrc_any, &w_any, &ddst_any, strides,
                                                 pad, pad));
    DNK(make(&p->bwd, &dpd, &dd, 0, 0, p->fwd_pd));
  }
  dnnl_status_t s2 = dmem_init(&p->bd_dsrc, query(dpd, dnnl_query_diff_src_md, 0));
  if (s2 == dnnl_success) s2 = dmem_init(&p->bd_wei, query(dpd, dnnl_query_weights_md, 0));
  if (s2 == dnnl_success) s2 = dmem_init(&p->bd_ddst, query(dpd, dnnl_query_diff_dst_md, 0));
  dnnl_primitive_desc_destroy(dpd);
  DNK(s2);
  DNK(maybe_reorder(&p->w_to_bdwei, &p->bdwei_buf, TO, &w_plain, &p->bd_wei.md));
  const dnnl_memory_desc_t *y_md = p->dst_to_y.p ? &p->dst_to_y.to.md : &p->dst.md;
  DNK(maybe_reorder(&p->dy_to_bdddst, &p->bdddst_buf, TO, y_md, &p->bd_ddst.md));
  DNK(maybe_reorder(&p->dsrc_to_dx, &p->dsrc_buf, FROM, &p->bd_dsrc.md, &p->x_md));
  p->bwd_made = 1;
  return COHORT_OK;
fail:
  return st;
}

static void conv_forward(cohort__layer *l, cohort__nnctx *c, const cohort_tensor *x, cohort_tensor *y) {
  plan *p = plan_for(l, c, x, conv_plan);
  if (!p) return;
  layer_state *s = l->state;
  s->cur = p;
  if (p->fallback) {
    fallback_forward(l, c, s, p, x, y);
    return;
  }
  const float *w = c->params[l->pidx].value, *b = c->params[l->pidx + 1].value;
  const float *src = through(&p->x_to_src, s->stream, x->data, p->src_buf);
  const float *wei = through(&p->w_to_wei, s->stream, w, p->wei_buf);
  float *dst = p->dst_to_y.p ? p->dst_buf : y->data;
  dnnl_exec_arg_t args[4] = {{DNNL_ARG_SRC, at(&p->src, src)},
                             {DNNL_ARG_WEIGHTS, at(&p->wei, wei)},
                             {DNNL_ARG_BIAS, at(&p->bias, b)},
                             {DNNL_ARG_DST, at(&p->dst, dst)}};
  dnnl_primitive_execute(p->fwd, s->stream, 4, args);
  if (p->dst_to_y.p) reorder_run(&p->dst_to_y, s->stream, dst, y->data);
  dnnl_stream_wait(s->stream);
  publish_y(l, p, y);
}

static void conv_backward(cohort__layer *l, cohort__nnctx *c, const cohort_tensor *x, const cohort_tensor *y, float *dy,
                          float *dx) {
  layer_state *s = l->state;
  plan *p = s ? s->cur : NULL;
  if (!p) {
    c->status = cohort__error(COHORT_ERR_INTERNAL, "layer '%s': backward without a forward on oneDNN", l->name);
    return;
  }
  if (p->fallback) {
    fallback_backward(l, c, s, p, x, y, dy, dx);
    return;
  }
  cohort_param *w = &c->params[l->pidx], *b = &c->params[l->pidx + 1];
  if (l->fuse_relu && !l->relu_masked) cohort__relu_mask(dy, dy, y->data, y->numel);
  const float *src = p->x_to_src.p ? p->src_buf : x->data; /* forward left the reordered input there */
  const float *ddst = through(&p->dy_to_ddst, s->stream, dy, p->ddst_buf);
  float *dw = p->dw_to_plain.p ? p->dwk_buf : p->dw_buf;
  dnnl_exec_arg_t args[4] = {{DNNL_ARG_SRC, at(&p->bw_src, src)},
                             {DNNL_ARG_DIFF_DST, at(&p->bw_ddst, ddst)},
                             {DNNL_ARG_DIFF_WEIGHTS, at(&p->bw_dw, dw)},
                             {DNNL_ARG_DIFF_BIAS, at(&p->bw_db, p->db_buf)}};
  dnnl_primitive_execute(p->bww, s->stream, 4, args);
  if (p->dw_to_plain.p) reorder_run(&p->dw_to_plain, s->stream, dw, p->dw_buf);
  dnnl_stream_wait(s->stream);
  cohort__vadd(w->grad, p->dw_buf, w->numel);
  cohort__vadd(b->grad, p->db_buf, b->numel);
  c->ready(c->ready_arg, l->pidx + 1);
  c->ready(c->ready_arg, l->pidx);
  if (!dx) return;
  if (!p->bwd_made) {
    cohort_status st = conv_plan_data(l, p, x);
    if (st != COHORT_OK) {
      c->status = st;
      return;
    }
  }
  const float *wei = through(&p->w_to_bdwei, s->stream, w->value, p->bdwei_buf);
  const float *bddst = through(&p->dy_to_bdddst, s->stream, dy, p->bdddst_buf);
  float *dsrc = p->dsrc_to_dx.p ? p->dsrc_buf : dx;
  dnnl_exec_arg_t dargs[3] = {{DNNL_ARG_DIFF_DST, at(&p->bd_ddst, bddst)},
                              {DNNL_ARG_WEIGHTS, at(&p->bd_wei, wei)},
                              {DNNL_ARG_DIFF_SRC, at(&p->bd_dsrc, dsrc)}};
  dnnl_primitive_execute(p->bwd, s->stream, 3, dargs);
  if (p->dsrc_to_dx.p) reorder_run(&p->dsrc_to_dx, s->stream, dsrc, dx);
  dnnl_stream_wait(s->stream);
}

static const cohort__kernels conv_kernels = {conv_forward, conv_backward, 1, 0};

/* ---- linear: matmul on plain tensors ---- */

static cohort_status linear_plan(cohort__layer *l, plan *p, const cohort_tensor *x, int *unimplemented) {
  cohort_status st = COHORT_OK;
  const int64_t n = x->shape[0], in = l->in_features, out = l->out_features;
  dnnl_memory_desc_t x_md, wt_md, b_md, y_md, dyt_md, w_md, dx_md, dw_md;
  const dnnl_dims_t xd = {n, in}, wtd = {in, out}, bd = {1, out}, yd = {n, out}, dytd = {out, n}, wd = {out, in};
  DNK(dnnl_memory_desc_init_by_tag(&x_md, 2, xd, dnnl_f32, dnnl_ab));
  DNK(dnnl_memory_desc_init_by_tag(&wt_md, 2, wtd, dnnl_f32, dnnl_ba)); /* W [out, in] seen as W^T [in, out] */
  DNK(dnnl_memory_desc_init_by_tag(&b_md, 2, bd, dnnl_f32, dnnl_ab));
  DNK(dnnl_memory_desc_init_by_tag(&y_md, 2, yd, dnnl_f32, dnnl_ab));
  DNK(dnnl_memory_desc_init_by_tag(&dyt_md, 2, dytd, dnnl_f32, dnnl_ba)); /* dy [n, out] seen as dy^T */
  DNK(dnnl_memory_desc_init_by_tag(&w_md, 2, wd, dnnl_f32, dnnl_ab));
  DNK(dnnl_memory_desc_init_by_tag(&dx_md, 2, xd, dnnl_f32, dnnl_ab));
  dw_md = w_md;
  dnnl_matmul_desc_t md;
  DNK(dnnl_matmul_desc_init(&md, &x_md, &wt_md, &b_md, &y_md));
  DNK(make(&p->fwd, NULL, &md, l->fuse_relu, 0, NULL));
  DNK(dmem_init(&p->src, &x_md));
  DNK(dmem_init(&p->wei, &wt_md));
  DNK(dmem_init(&p->bias, &b_md));
  DNK(dmem_init(&p->dst, &y_md));
  /* dW += dy^T x: the sum post-op adds onto what the gradient holds. */
  DNK(dnnl_matmul_desc_init(&md, &dyt_md, &x_md, NULL, &dw_md));
  DNK(make(&p->bww, NULL, &md, 0, 1, NULL));
  DNK(dmem_init(&p->bw_ddst, &dyt_md));
  DNK(dmem_init(&p->bw_src, &x_md));
  DNK(dmem_init(&p->bw_dw, &dw_md));
  /* dx = dy W */
  DNK(dnnl_matmul_desc_init(&md, &y_md, &w_md, NULL, &dx_md));
  DNK(make(&p->bwd, NULL, &md, 0, 0, NULL));
  DNK(dmem_init(&p->bd_ddst, &y_md));
  DNK(dmem_init(&p->bd_wei, &w_md));
  DNK(dmem_init(&p->bd_dsrc, &dx_md));
  p->bwd_made = 1;
  return COHORT_OK;
fail:
  return st;
}

static void linear_forward(cohort__layer *l, cohort__nnctx *c, const cohort_tensor *x, cohort_tensor *y) {
  plan *p = plan_for(l, c, x, linear_plan);
  if (!p) return;
  layer_state *s = l->state;
  s->cur = p;
  if (p->fallback) {
    fallback_forward(l, c, s, p, x, y);
    return;
  }
  dnnl_exec_arg_t args[4] = {{DNNL_ARG_SRC, at(&p->src, x->data)},
                             {DNNL_ARG_WEIGHTS, at(&p->wei, c->params[l->pidx].value)},
                             {DNNL_ARG_BIAS, at(&p->bias, c->params[l->pidx + 1].value)},
                             {DNNL_ARG_DST, at(&p->dst, y->data)}};
  dnnl_primitive_execute(p->fwd, s->stream, 4, args);
  dnnl_stream_wait(s->stream);
}

static void linear_backward(cohort__layer *l, cohort__nnctx *c, const cohort_tensor *x, const cohort_tensor *y,
                            float *dy, float *dx) {
  layer_state *s = l->state;
  plan *p = s ? s->cur : NULL;
  if (!p) {
    c->status = cohort__error(COHORT_ERR_INTERNAL, "layer '%s': backward without a forward on oneDNN", l->name);
    return;
  }
  if (p->fallback) {
    fallback_backward(l, c, s, p, x, y, dy, dx);
    return;
  }
  const int n = (int)x->shape[0], out = l->out_features;
  cohort_param *w = &c->params[l->pidx], *b = &c->params[l->pidx + 1];
  if (l->fuse_relu) cohort__relu_mask(dy, dy, y->data, y->numel);
  dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, at(&p->bw_ddst, dy)},
                             {DNNL_ARG_WEIGHTS, at(&p->bw_src, x->data)},
                             {DNNL_ARG_DST, at(&p->bw_dw, w->grad)}};
  dnnl_primitive_execute(p->bww, s->stream, 3, args);
  dnnl_stream_wait(s->stream);
  for (int i = 0; i < n; i++)
    cohort__vadd(b->grad, dy + (size_t)i * out, (size_t)out);
  c->ready(c->ready_arg, l->pidx + 1);
  c->ready(c->ready_arg, l->pidx);
  if (!dx) return;
  dnnl_exec_arg_t dargs[3] = {{DNNL_ARG_SRC, at(&p->bd_ddst, dy)},
                              {DNNL_ARG_WEIGHTS, at(&p->bd_wei, w->value)},
                              {DNNL_ARG_DST, at(&p->bd_dsrc, dx)}};
  dnnl_primitive_execute(p->bwd, s->stream, 3, dargs);
  dnnl_stream_wait(s->stream);
}

static const cohort__kernels linear_kernels = {linear_forward, linear_backward, 0, 0};

/* ---- max pooling: cohort's own loops, on plain tensors or on oneDNN's channel-blocked ones ----
 *
 * oneDNN's max pooling took longer than the reference's loops (its blocked forward with the workspace about 3x
 * the reference's time on Zen 3), and its output would still need a reorder to the plain tensor flatten reads. So
 * pooling reads conv2's blocked output itself, a block of B channels (8 for AVX2, 16 for AVX-512) at a time, and
 * writes plain output with the position of each maximum in its window (in the layer's aux): the same windows in
 * the same order, first maximum first, NaN propagating, so the results equal the reference's bit for bit. Backward
 * routes each gradient back into the blocked dx. A plain input runs the reference's kernels as they are. */

typedef struct blocking {
  int64_t st[4]; /* strides of n, the channel block, h, w (in floats) */
  int b;         /* channels per block, innermost */
} blocking;

/* Whether md is [N, C, H, W] with C in blocks of 4, 8 or 16 innermost and nothing padded. */
static int channel_blocked(const dnnl_memory_desc_t *md, blocking *out) {
  const dnnl_blocking_desc_t *bd = &md->format_desc.blocking;
  if (md->ndims != 4 || md->format_kind != dnnl_blocked || bd->inner_nblks != 1 || bd->inner_idxs[0] != 1) return 0;
  int b = (int)bd->inner_blks[0];
  if ((b != 4 && b != 8 && b != 16) || md->padded_dims[1] != md->dims[1] || md->dims[1] % b) return 0;
  for (int i = 0; i < 4; i++)
    out->st[i] = bd->strides[i];
  out->b = b;
  return 1;
}

/* One block of NV x 4 channels: the maximum of each window and which of its k x k positions it came from (row-major
 * within the window), gathered in the block's own order in tile (values) and tpos (positions), a few KB that stay in
 * L1, then written out plane by plane: writing the NV x 4 planes of the plain output element by element instead
 * costs more than the pooling (a store stream per channel). The block width is a constant in each caller, so that
 * the vectors stay in registers. */
static inline __attribute__((always_inline)) void pool_block(const float *restrict x, int64_t base, const blocking *bk,
                                                             int k, int s, int oh, int ow, float *restrict tile,
                                                             int32_t *restrict tpos, const int nv) {
  for (int oy = 0; oy < oh; oy++)
    for (int ox = 0; ox < ow; ox++) {
      cohort__v4f m[4];
      cohort__v4i pos[4];
      const float *w0 = x + base + (int64_t)(oy * s) * bk->st[2] + (int64_t)(ox * s) * bk->st[3];
      for (int v = 0; v < nv; v++) {
        m[v] = cohort__v4_load(w0 + 4 * v);
        pos[v] = (cohort__v4i){0, 0, 0, 0};
      }
      for (int ky = 0; ky < k; ky++)
        for (int kx = ky == 0; kx < k; kx++) {
          const float *p = w0 + ky * bk->st[2] + kx * bk->st[3];
          const int32_t code = ky * k + kx;
          const cohort__v4i here = {code, code, code, code};
          for (int v = 0; v < nv; v++) {
            cohort__v4f cand = cohort__v4_load(p + 4 * v);
            cohort__v4i better = (cand > m[v]) | (cand != cand);
            m[v] = (cohort__v4f)(((cohort__v4i)cand & better) | ((cohort__v4i)m[v] & ~better));
            pos[v] = (here & better) | (pos[v] & ~better);
          }
        }
      const size_t o = ((size_t)oy * ow + ox) * 4 * nv;
      for (int v = 0; v < nv; v++) {
        cohort__v4_store(tile + o + 4 * v, m[v]);
        memcpy(tpos + o + 4 * v, &pos[v], sizeof pos[v]);
      }
    }
}

static void pool_blocked_forward(const cohort__layer *l, const blocking *bk, const cohort_tensor *x, cohort_tensor *y) {
  const int n = (int)x->shape[0], ch = (int)x->shape[1], oh = (int)y->shape[2], ow = (int)y->shape[3];
  const int b = bk->b;
  const size_t plane = (size_t)oh * ow;
  int32_t *arg = (int32_t *)l->aux;
  float *tile = malloc(plane * b * sizeof(float));
  int32_t *tpos = malloc(plane * b * sizeof(int32_t));
  if (!tile || !tpos) { /* a few KB: not expected to fail; the reference's loop needs no scratch */
    free(tile);
    free(tpos);
    return;
  }
  for (int i = 0; i < n; i++)
    for (int cb = 0; cb < ch / b; cb++) {
      const int64_t base = i * bk->st[0] + cb * bk->st[1];
      if (b == 16)
        pool_block(x->data, base, bk, l->kernel, l->stride, oh, ow, tile, tpos, 4);
      else if (b == 8)
        pool_block(x->data, base, bk, l->kernel, l->stride, oh, ow, tile, tpos, 2);
      else
        pool_block(x->data, base, bk, l->kernel, l->stride, oh, ow, tile, tpos, 1);
      const size_t first = ((size_t)i * ch + (size_t)cb * b) * plane;
      for (int c = 0; c < b; c++) {
        float *out = y->data + first + (size_t)c * plane;
        int32_t *a = arg + first + (size_t)c * plane;
        for (size_t o = 0; o < plane; o++) {
          out[o] = tile[o * b + c];
          a[o] = tpos[o * b + c];
        }
      }
    }
  free(tile);
  free(tpos);
}

/* Each output's gradient back to the input its window position names. Where windows do not overlap, every input
 * element is written once, window by window (the gradient where the maximum was, 0 elsewhere), from a tile of the
 * block's dy and positions gathered from the plain planes; overlapping windows add in output order, the reference's
 * order, so that the sums are the same. */
static void pool_blocked_backward(const cohort__layer *l, const blocking *bk, const cohort_tensor *x,
                                  const cohort_tensor *y, const float *dy, float *dx) {
  const int n = (int)x->shape[0], ch = (int)x->shape[1], h = (int)x->shape[2], w = (int)x->shape[3];
  const int oh = (int)y->shape[2], ow = (int)y->shape[3], k = l->kernel, s = l->stride, b = bk->b;
  const size_t plane = (size_t)oh * ow;
  const int32_t *arg = (const int32_t *)l->aux;
  const int mask_relu = l->mask_relu;
  float *tile = s >= k ? malloc(plane * b * sizeof(float)) : NULL;
  int32_t *tpos = s >= k ? malloc(plane * b * sizeof(int32_t)) : NULL;
  float *tmax = s >= k && mask_relu ? malloc(plane * b * sizeof(float)) : NULL;
  if (mask_relu && !tmax) {
    free(tile);
    tile = NULL;
  }
  /* Inputs no window covers (floor mode's last rows and columns, strides beyond the kernel) stay 0. */
  if (!tile || !tpos || s > k || (oh - 1) * s + k != h || (ow - 1) * s + k != w)
    memset(dx, 0, x->numel * sizeof(float));
  if (!tile || !tpos) {
    free(tile);
    free(tpos);
    free(tmax);
    size_t i = 0;
    for (int im = 0; im < n; im++)
      for (int c = 0; c < ch; c++) {
        float *d = dx + im * bk->st[0] + (c / b) * bk->st[1] + c % b;
        for (int oy = 0; oy < oh; oy++)
          for (int ox = 0; ox < ow; ox++, i++) {
            const int code = arg[i];
            if (!mask_relu || y->data[i] > 0)
              d[(int64_t)(oy * s + code / k) * bk->st[2] + (int64_t)(ox * s + code % k) * bk->st[3]] += dy[i];
          }
      }
    return;
  }
  const cohort__v4f zero = {0};
  for (int im = 0; im < n; im++)
    for (int cb = 0; cb < ch / b; cb++) {
      const size_t first = ((size_t)im * ch + (size_t)cb * b) * plane;
      for (int c = 0; c < b; c++)
        for (size_t o = 0; o < plane; o++) {
          tile[o * b + c] = dy[first + (size_t)c * plane + o];
          tpos[o * b + c] = arg[first + (size_t)c * plane + o];
          if (mask_relu) tmax[o * b + c] = y->data[first + (size_t)c * plane + o];
        }
      float *base = dx + im * bk->st[0] + cb * bk->st[1];
      for (int oy = 0; oy < oh; oy++)
        for (int ox = 0; ox < ow; ox++) {
          const size_t o = ((size_t)oy * ow + ox) * b;
          for (int ky = 0; ky < k; ky++)
            for (int kx = 0; kx < k; kx++) {
              float *d = base + (int64_t)(oy * s + ky) * bk->st[2] + (int64_t)(ox * s + kx) * bk->st[3];
              const int32_t code = ky * k + kx;
              const cohort__v4i here = {code, code, code, code};
              for (int v = 0; v < b / 4; v++) {
                cohort__v4i at;
                memcpy(&at, tpos + o + 4 * v, sizeof at);
                at = mask_relu ? at | ~(cohort__v4_load(tmax + o + 4 * v) > zero) : at; /* -1 matches no position */
                cohort__v4f g = cohort__v4_load(tile + o + 4 * v);
                cohort__v4_store(d + 4 * v, (cohort__v4f)((cohort__v4i)g & (at == here)) + zero);
              }
            }
        }
    }
  free(tile);
  free(tpos);
  free(tmax);
}

static void pool_forward(cohort__layer *l, cohort__nnctx *c, const cohort_tensor *x, cohort_tensor *y) {
  blocking bk;
  if (!c->x_layout) {
    l->ops->forward(l, c, x, y);
    return;
  }
  if (!channel_blocked(c->x_layout, &bk)) {
    c->status =
        cohort__error(COHORT_ERR_INTERNAL, "layer '%s': its input came in a oneDNN layout it does not read", l->name);
    return;
  }
  pool_blocked_forward(l, &bk, x, y);
}

static void pool_backward(cohort__layer *l, cohort__nnctx *c, const cohort_tensor *x, const cohort_tensor *y, float *dy,
                          float *dx) {
  if (!dx) return;
  if (!c->x_layout) {
    l->ops->backward(l, c, x, y, dy, dx);
    if (l->mask_relu) cohort__relu_mask(dx, dx, x->data, x->numel);
    return;
  }
  blocking bk;
  if (!channel_blocked(c->x_layout, &bk)) return; /* forward said so */
  pool_blocked_backward(l, &bk, x, y, dy, dx);
}

static const cohort__kernels pool_kernels = {pool_forward, pool_backward, 1, 1};

/* ---- the table ---- */

static const cohort__kernels *onednn_kernels(const cohort__layer *l) {
  if (l->ops == &cohort__conv2d_ops) return &conv_kernels;
  if (l->ops == &cohort__linear_ops) return &linear_kernels;
  if (l->ops == &cohort__maxpool2d_ops) return &pool_kernels;
  return NULL;
}

const cohort__backend cohort__backend_onednn = {
    COHORT_KERNELS_ONEDNN, "onednn", onednn_unavailable, onednn_describe, onednn_kernels, onednn_release, onednn_enter};

#else /* !COHORT_HAVE_DNNL */

#include <stdio.h>

static const char *onednn_unavailable(void) {
  return "this libcohort was built without oneDNN (COHORT_DNNL=OFF, or libdnnl-dev was missing: scripts/setup.sh "
         "installs it)";
}

int cohort__onednn_isa_level(void) { return 0; }
static void onednn_describe(char *buf, size_t len) { snprintf(buf, len, "oneDNN (not built in)"); }
static const cohort__kernels *onednn_kernels(const cohort__layer *l) { return NULL; }

const cohort__backend cohort__backend_onednn = {
    COHORT_KERNELS_ONEDNN, "onednn", onednn_unavailable, onednn_describe, onednn_kernels, NULL, NULL};

#endif
