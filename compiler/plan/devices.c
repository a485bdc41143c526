/* devices.c — device profiles for the cost model and the default budget.
 *
 * The numbers are datasheet peaks (FP32 FLOP/s, memory bandwidth, PCIe/host
 * link bandwidth one way, memory as the driver reports it), the reserve (device
 * memory a CUDA program needs outside its arena: context, cuDNN/cuBLAS and
 * their lazily loaded kernels; an estimate until a GPU run measures it, which
 * the program prints at start-up) and the compute capability (sm; below 75,
 * CUDA 13 builds nothing for it: planning only) and the host memory one
 * GPU's process can pin for offloaded tensors (host_bytes: a server of that
 * generation's RAM per GPU: 64 GiB for a K40c/Titan Xp workstation and a
 * DGX-1 (512 GiB, 8 V100), 128 GiB for a DGX A100 (1 TiB, 8 GPUs), 256 GiB
 * for a DGX H100/H200 (2 TiB, 8 GPUs); 0 for cpu: this machine's memory,
 * read when planning). They mirror
 * schemas/devices.json, the data file users read; tests/test_plan_validity.py fails
 * when the two disagree. Peaks, not measurements (the GPU rows are
 * datasheet FP32 numbers; cpu's are round numbers): with them the cost model
 * ranks plans, it does not promise seconds. Measured numbers come from a
 * profile file that build/snc-calibrate writes (--device FILE, read here),
 * with per-op-class rates that cost.c uses; the built-in rows have none
 * (rates NULL) and keep the simple model, so plans made with them do not
 * change. */
#include "plan.h"
#include "../json.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

const DeviceProfile device_profiles[] = {
    /* name        FLOP/s    mem B/s   link B/s  memory bytes    reserve bytes  sm  host bytes */
    {"k40c",     4.29e12, 288e9,    12e9, 12884901888LL,  1073741824LL, 35, 68719476736LL, NULL},  // 12 GiB (K40c)
    {"titan-xp", 12.1e12, 547.7e9,  12e9, 12884901888LL,  1073741824LL, 61, 68719476736LL, NULL},  // 12 GiB
    {"v100",     15.7e12, 900e9,    12e9, 34359738368LL,  1073741824LL, 70, 68719476736LL, NULL},  // 32 GiB (V100 32 GB)
    {"a100",     19.5e12, 2039e9,   25e9, 85899345920LL,  1610612736LL, 80, 137438953472LL, NULL},  // 80 GiB (A100 80 GB)
    {"h100",     67e12,   3350e9,   50e9, 85899345920LL,  2147483648LL, 90, 274877906944LL, NULL},  // 80 GiB (H100 SXM)
    {"h200",     67e12,   4800e9,   50e9, 150754820096LL, 1073741824LL, 90, 274877906944LL, NULL},  // 143771 MiB; reserve measured
    {"cpu",      1e11,    20e9,     10e9, 68719476736LL,  0LL,          0, 0LL, NULL},  // the CPU target's emulated arena
};
const int device_profile_count = sizeof device_profiles / sizeof device_profiles[0];

/* ---- profile files (build/snc-calibrate writes them) ----
 *
 * {"name": "...", "flops": F, "mem_bw": B, "link_bw": L, "mem_bytes": M,
 *  "reserve_bytes": R, "sm": 0, "host_bytes": H,
 *  "measured": {"machine": "...", "date": "...", "threads": N, ...},
 *  "classes": {"conv": {"flops": F, "bw": B, "overhead_s": S, "per_image_s": S},
 *              "gemm": {"flops": F, "per_call_s": S},
 *              "norm": {"bw": B, "parallel_s": S, "per_row_s": S},
 *              ... one per cost class (cost.c)},
 *  "conv_shapes": [{"class": "conv", "n": N, "c": C, "hw": H, "k": K, "ksize": 3,
 *                   "stride": 1, "forward_s": S, "backward_s": S (data + filter),
 *                   "backward_data_s": S, "backward_filter_s": S (optional)}, ...] (optional),
 *  "pool_shapes": [{"kind": "max", "n": N, "c": C, "hw": H, "ksize": 3, "stride": 2,
 *                   "pad": 1, "forward_s": S, "backward_s": S}, ...] (optional),
 *  "gemm_shapes": [{"batch": B, "m": M, "n": N, "k": K, "trans_a": 0, "trans_b": 1,
 *                   "seconds": S}, ...] (optional),
 *  "parallel_min_elements": N (optional; with the classes' "parallel_s"),
 *  "copy": {"d2h": B, "h2d": B, "d2h_s": S, "h2d_s": S, "d2h_loss": L, "h2d_loss": L
 *           (the last four optional)},
 *  "step_overhead_s": S}
 * flops/mem_bw/link_bw/mem_bytes are required (the simple model); "classes"
 * (then with every class but strided, math and loss, "copy" and
 * "step_overhead_s") makes it calibrated. A conv shape's rates are taken
 * over its time less its class's fixed costs ("overhead_s" and
 * "per_image_s" x n; forward: the forward class's, backward: the backward
 * class's per kernel), which cost.c adds back for the conv it estimates.
 * Keys that are not known are ignored (notes, the raw timings). */

static const char *prof_path;

static noreturn void prof_error(const char *fmt, const char *a) {
  err_file = prof_path;   /* the message names the profile, not the model */
  char msg[512];
  snprintf(msg, sizeof msg, fmt, a);
  fatal(EXIT_BADINPUT, "%s; write a profile with `build/snc-calibrate --target cpu -o FILE` "
        "(README \"snc-calibrate\") or name a built-in one (k40c ... cpu)", msg);
}

static double prof_num(const Json *obj, const char *key, bool required, double dflt, bool positive) {
  const Json *v = json_get(obj, key);
  if (!v) {
    if (required) prof_error("missing \"%s\"", key);
    return dflt;
  }
  if (v->type != JS_NUM) prof_error("\"%s\" is not a number", key);
  if (v->num < 0 || (positive && v->num <= 0) || v->num != v->num)
    prof_error(positive ? "\"%s\" must be a positive number" : "\"%s\" must not be negative", key);
  return v->num;
}

/* The entries of the array `key` of root (NULL where absent), each an
 * object; *n is their count. */
static const Json *prof_entries(const Json *root, const char *key, int *n) {
  const Json *a = json_get(root, key);
  *n = 0;
  if (!a) return NULL;
  if (a->type != JS_ARR) prof_error("\"%s\" is not an array", key);
  for (int i = 0; i < a->n; i++)
    if (a->items[i].type != JS_OBJ) prof_error("\"%s\" holds an entry that is not an object", key);
  *n = a->n;
  return a->items;
}

/* A conv class's fixed costs in a call on `images` images: its overhead_s
 * (none in profiles written before snc-calibrate fitted one) and its
 * per_image_s. */
static double conv_call_s(const CostRates *r, int c, double images) {
  return (r->overhead[c] > 0 ? r->overhead[c] : 0) + r->per_unit[c] * images;
}

/* A measured time less the fixed costs in it; never below a tenth of it (a
 * fit whose fixed cost nearly covers a shape's time would make its rate
 * meaningless). */
static double beyond(double t, double fixed) { return t - fixed > 0.1 * t ? t - fixed : 0.1 * t; }

/* The profile's "conv_shapes" (optional) into r->shapes; the classes'
 * fixed costs must be read already. */
static void load_conv_shapes(CostRates *r, const Json *root) {
  int ne;
  const Json *ent = prof_entries(root, "conv_shapes", &ne);
  if (ent) {
    r->shapes = xcalloc((size_t)ne + 1, sizeof *r->shapes);
    for (int i = 0; i < ne; i++) {
      const Json *e = &ent[i];
      const Json *cl = json_get(e, "class");
      int kind = -1;
      for (int k = 0; k < 3 && cl && cl->type == JS_STR; k++)
        if (strcmp(cl->str, cost_class_name((CostClass)(CC_CONV + k))) == 0) kind = k;
      if (kind < 0) prof_error("a \"conv_shapes\" entry without a forward convolution \"class\"%s", "");
      CostShape *q = &r->shapes[r->nshapes++];
      q->kind = kind;
      q->n = prof_num(e, "n", true, 0, true), q->c = prof_num(e, "c", true, 0, true);
      q->hw = prof_num(e, "hw", true, 0, true), q->k = prof_num(e, "k", true, 0, true);
      q->ksize = prof_num(e, "ksize", true, 0, true), q->stride = prof_num(e, "stride", true, 0, true);
      double tf = prof_num(e, "forward_s", true, 0, true), tb = prof_num(e, "backward_s", true, 0, true);
      double o = conv_shape_out(q);
      double fl = 2.0 * q->n * q->k * o * o * q->c * q->ksize * q->ksize;
      /* The rates of the time beyond the class's fixed cost per call
       * (cost.c adds it back: a measured shape is estimated at its
       * measured time, a smaller one at more than its FLOPs' share). */
      double af = conv_call_s(r, CC_CONV + kind, q->n), ab = conv_call_s(r, CC_CONV_BWD + kind, q->n);
      q->fwd_rate = fl / beyond(tf, af), q->bwd_rate = 2 * fl / beyond(tb, 2 * ab);
      double td = prof_num(e, "backward_data_s", false, 0, false);
      double tw = prof_num(e, "backward_filter_s", false, 0, false);
      if (td > 0 && tw > 0) q->bwd_data_rate = fl / beyond(td, ab), q->bwd_filter_rate = fl / beyond(tw, ab);
    }
  }
}

static DeviceProfile *profile_load(const char *path) {
  prof_path = path;
  const char *saved = err_file;
  err_file = NULL;   /* json errors name the file themselves */
  Json *root = json_parse_file(path);
  err_file = saved;
  if (root->type != JS_OBJ) prof_error("not a device profile (a JSON %s, not an object)",
                                       json_type_name(root->type));
  DeviceProfile *d = xcalloc(1, sizeof *d);
  d->name = xstrdup(path);
  d->flops = prof_num(root, "flops", true, 0, true);
  d->mem_bw = prof_num(root, "mem_bw", true, 0, true);
  d->link_bw = prof_num(root, "link_bw", true, 0, true);
  d->mem_bytes = (int64_t)prof_num(root, "mem_bytes", true, 0, true);
  d->reserve_bytes = (int64_t)prof_num(root, "reserve_bytes", false, 0, false);
  d->sm = (int)prof_num(root, "sm", false, 0, false);
  d->host_bytes = (int64_t)prof_num(root, "host_bytes", false, 0, false);
  if (d->reserve_bytes >= d->mem_bytes) prof_error("\"reserve_bytes\" is not below \"mem_bytes\"%s", "");
  const Json *cls = json_get(root, "classes");
  if (cls) {
    if (cls->type != JS_OBJ) prof_error("\"classes\" is not an object%s", "");
    CostRates *r = xcalloc(1, sizeof *r);
    for (int c = 0; c < CC_COUNT; c++) {
      const char *nm = cost_class_name((CostClass)c);
      const Json *e = json_get(cls, nm);
      if (!e && (c == CC_STRIDED || c == CC_MATH || c == CC_LOSS)) {   /* a profile older than these */
        int from = c == CC_LOSS ? CC_MATH : CC_ELEMENTWISE;   /* (math is read before loss) */
        r->class_flops[c] = r->class_flops[from], r->class_bw[c] = r->class_bw[from];
        r->overhead[c] = r->overhead[from], r->parallel[c] = r->parallel[from];
        continue;
      }
      if (!e) prof_error("a partial profile: \"classes\" has no \"%s\"", nm);
      if (e->type != JS_OBJ) prof_error("\"classes\".\"%s\" is not an object", nm);
      const Json *f = json_get(e, "flops"), *b = json_get(e, "bw");
      if ((f && (f->type != JS_NUM || f->num < 0)) || (b && (b->type != JS_NUM || b->num < 0)))
        prof_error("\"classes\".\"%s\": flops and bw must be numbers >= 0", nm);
      r->class_flops[c] = f ? f->num : 0;
      r->class_bw[c] = b ? b->num : 0;
      if (r->class_flops[c] <= 0 && r->class_bw[c] <= 0)
        prof_error("\"classes\".\"%s\" has neither a positive \"flops\" nor a positive \"bw\"", nm);
      r->overhead[c] = prof_num(e, "overhead_s", false, -1, false);
      r->per_unit[c] = prof_num(e, c == CC_GEMM ? "per_call_s" : c <= CC_CONV_BWD_1X1 ? "per_image_s"
                                   : "per_row_s", false, 0, false);
      r->parallel[c] = prof_num(e, "parallel_s", false, 0, false);
    }
    int ne;
    const Json *ent;
    load_conv_shapes(r, root);
    ent = prof_entries(root, "pool_shapes", &ne);
    if (ent) {
      r->pools = xcalloc((size_t)ne + 1, sizeof *r->pools);
      for (int i = 0; i < ne; i++) {
        const Json *e = &ent[i], *kd = json_get(e, "kind");
        if (!kd || kd->type != JS_STR || (strcmp(kd->str, "max") && strcmp(kd->str, "avg")))
          prof_error("a \"pool_shapes\" entry without a \"kind\" of \"max\" or \"avg\"%s", "");
        CostPool *q = &r->pools[r->npools++];
        q->avg = !strcmp(kd->str, "avg");
        double n = prof_num(e, "n", true, 0, true), c = prof_num(e, "c", true, 0, true);
        double hw = prof_num(e, "hw", true, 0, true), k = prof_num(e, "ksize", true, 0, true);
        double st = prof_num(e, "stride", true, 0, true), pad = prof_num(e, "pad", false, 0, false);
        double o = floor((hw + 2 * pad - k) / st) + 1;
        q->work = n * c * o * o * k * k, q->window = k * k, q->stride = st;
        q->fwd_rate = q->work / prof_num(e, "forward_s", true, 0, true);
        q->bwd_rate = q->work / prof_num(e, "backward_s", true, 0, true);
      }
    }
    ent = prof_entries(root, "gemm_shapes", &ne);
    if (ent) {
      r->gemms = xcalloc((size_t)ne + 1, sizeof *r->gemms);
      for (int i = 0; i < ne; i++) {
        const Json *e = &ent[i];
        CostGemm *q = &r->gemms[r->ngemms++];
        q->batch = prof_num(e, "batch", true, 0, true), q->m = prof_num(e, "m", true, 0, true);
        q->n = prof_num(e, "n", true, 0, true), q->k = prof_num(e, "k", true, 0, true);
        q->trans_a = prof_num(e, "trans_a", false, 0, false) != 0;
        q->trans_b = prof_num(e, "trans_b", false, 0, false) != 0;
        q->rate = 2.0 * q->batch * q->m * q->n * q->k / prof_num(e, "seconds", true, 0, true);
      }
    }
    r->parallel_min = prof_num(root, "parallel_min_elements", false, 0, false);
    const Json *cp = json_get(root, "copy");
    if (!cp) prof_error("a partial profile: \"classes\" without \"copy\"%s", "");
    if (cp->type != JS_OBJ) prof_error("\"copy\" is not an object%s", "");
    r->d2h_bw = prof_num(cp, "d2h", true, 0, true);
    r->h2d_bw = prof_num(cp, "h2d", true, 0, true);
    r->d2h_s = prof_num(cp, "d2h_s", false, 0, false);
    r->h2d_s = prof_num(cp, "h2d_s", false, 0, false);
    r->d2h_loss = prof_num(cp, "d2h_loss", false, 0, false);
    r->h2d_loss = prof_num(cp, "h2d_loss", false, 0, false);
    double step_overhead = prof_num(root, "step_overhead_s", true, 0, false);
    for (int c = 0; c < CC_COUNT; c++)
      if (r->overhead[c] < 0) r->overhead[c] = step_overhead;
    d->rates = r;
  }
  return d;
}

static bool is_profile_file(const char *name) {
  size_t n = strlen(name);
  return strchr(name, '/') || (n > 5 && strcmp(name + n - 5, ".json") == 0);
}

const DeviceProfile *device_find(const char *name) {
  if (is_profile_file(name)) {   /* read once per path; planning asks often */
    static struct { char *path; DeviceProfile *d; } cache[8];
    static int ncache;
    for (int i = 0; i < ncache; i++)
      if (strcmp(cache[i].path, name) == 0) return cache[i].d;
    DeviceProfile *d = profile_load(name);
    if (ncache < 8) cache[ncache].path = xstrdup(name), cache[ncache++].d = d;
    return d;
  }
  for (int i = 0; i < device_profile_count; i++)
    if (strcmp(device_profiles[i].name, name) == 0) return &device_profiles[i];
  char known[256] = "";
  for (int i = 0; i < device_profile_count; i++) {
    strncat(known, i ? " " : "", sizeof known - strlen(known) - 1);
    strncat(known, device_profiles[i].name, sizeof known - strlen(known) - 1);
  }
  fprintf(stderr, "snc: error: unknown device profile '%s' (known: %s)\n", name, known);
  exit(EXIT_USAGE);
}

int64_t device_budget(const DeviceProfile *d) { return d->mem_bytes - d->reserve_bytes; }

int64_t device_host_budget(const DeviceProfile *d) {
  if (d->host_bytes) return d->host_bytes;
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? (int64_t)pages * page : (int64_t)64 << 30;
}
