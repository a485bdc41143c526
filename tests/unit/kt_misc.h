/* kt_misc.h — test cases for the elementwise, shape, matmul, softmax/loss,
 * dropout and optimizer kernels, and determinism; included once by
 * test_kernels.c. */

/* ---- unary -------------------------------------------------------------------- */
/* The Tanh kernel (runtime/cpu/kern.h's kern_tanhf, vectorized) over every
 * 127th float of the whole range, +-0, +-inf, NaN and the branch points,
 * through snrt_unary_fwd in chunks: within 2 ulp of tanh in double (the
 * largest measured over every 7th float was 1.32 ulp), NaN stays NaN. */
/* kern_expf over every 127th float: within 2 ulp of exp in double (2 of the
 * spacing for subnormal results), infinities where exp overflows, NaN kept;
 * through the Softmax kernel too, against a softmax in double. */
static void test_exp_accuracy(void) {
  double worst = 0;
  float worst_x = 0;
  int64_t bad = 0;
  for (uint64_t u = 0; u < (1ull << 32); u += 127) {
    uint32_t b = (uint32_t)u;
    float x;
    memcpy(&x, &b, sizeof x);
    float y = kern_expf(x);
    if (isnan(x)) {
      bad += !isnan(y);
      continue;
    }
    double ref = exp((double)x);
    float rf = (float)ref;
    if (isinf(rf)) {
      bad += !isinf(y);
      continue;
    }
    double ulp = rf == 0.0f ? 1.4e-45 : fabs((double)nextafterf(rf, INFINITY) - (double)rf);
    double e = fabs((double)y - ref) / ulp;
    if (!(e <= worst)) worst = e, worst_x = x;
  }
  printf("exp: worst %.3f ulp at %a\n", worst, worst_x);
  ASSERT(worst <= 2.0, "exp off by %.3f ulp at x = %a", worst, worst_x);
  ASSERT(bad == 0, "%lld NaN or overflowing inputs gave other values", (long long)bad);
  ASSERT(kern_expf(-INFINITY) == 0.0f && kern_expf(0.0f) == 1.0f, "exp(-inf), exp(0)");
  enum { L = 37 };
  float x[3 * L], y[3 * L];
  for (int i = 0; i < 3 * L; i++) x[i] = (float)((i * 7919) % 200) / 10.0f - 10.0f;
  x[5] = -INFINITY;   /* a masked attention score */
  snrt_softmax_t p = {.outer = 3, .len = L, .inner = 1};
  snrt_softmax_fwd(&ctx, &p, x, y);
  double werr = 0;
  for (int o = 0; o < 3; o++) {
    double m = -INFINITY, s = 0;
    for (int j = 0; j < L; j++) m = fmax(m, x[o * L + j]);
    for (int j = 0; j < L; j++) s += exp((double)x[o * L + j] - m);
    for (int j = 0; j < L; j++) {
      double r = exp((double)x[o * L + j] - m) / s;
      werr = fmax(werr, fabs(y[o * L + j] - r) / (r > 1e-30 ? r : 1e-30));
    }
  }
  ASSERT(werr < 1e-6 && y[5] == 0.0f, "softmax off by %g relative", werr);
}

/* A kernel over every 127th float of the whole range and `special` ones,
 * in chunks: its worst error in ulp against `ref` in double (printed), and
 * how many NaN inputs gave numbers. */
static void float_sweep(const char *name, void (*run)(const float *x, float *y, int m),
                        double (*ref)(double), const float *special, int nspecial, double *worst,
                        float *worst_x, int64_t *nan_bad) {
  enum { CHUNK = 1 << 20 };
  float *x = malloc(sizeof(float) * CHUNK), *y = malloc(sizeof(float) * CHUNK);
  int64_t n = 0;
  uint64_t u = 0;
  int k = 0;
  *worst = 0, *worst_x = 0, *nan_bad = 0;
  while (u < (1ull << 32)) {
    int m = 0;
    for (; k < nspecial && m < CHUNK; k++) x[m++] = special[k];
    for (; m < CHUNK && u < (1ull << 32); u += 127, m++) {
      uint32_t b = (uint32_t)u;
      memcpy(&x[m], &b, sizeof b);
    }
    run(x, y, m);
    for (int i = 0; i < m; i++) {
      n++;
      if (isnan(x[i])) {
        *nan_bad += !isnan(y[i]);
        continue;
      }
      double r = ref((double)x[i]);
      float rf = (float)r;
      double ulp = fabs((double)nextafterf(rf, INFINITY) - (double)rf);
      if (rf == 0.0f) ulp = 1.4e-45;
      double e = fabs((double)y[i] - r) / ulp;
      if (!(e <= *worst)) *worst = e, *worst_x = x[i];
    }
  }
  printf("%s: %lld floats, worst %.3f ulp at %a\n", name, (long long)n, *worst, *worst_x);
  free(x);
  free(y);
}

static void run_tanh(const float *x, float *y, int m) {
  snrt_unary_t p = {.n = m, .kind = SNRT_TANH};
  snrt_unary_fwd(&ctx, &p, x, y);
}

static void test_tanh_accuracy(void) {
  static const float special[] = {0.0f, -0.0f, INFINITY, -INFINITY, 0.625f, -0.625f,
                                  0.62499994f, 9.0f, -9.0f, 8.999999f, 1e-30f, -1e-45f};
  double worst;
  float worst_x;
  int64_t nan_bad;
  float_sweep("tanh", run_tanh, tanh, special, (int)(sizeof special / sizeof *special), &worst,
              &worst_x, &nan_bad);
  ASSERT(worst <= 2.0, "tanh off by %.3f ulp at x = %a", worst, worst_x);
  ASSERT(nan_bad == 0, "%lld NaN inputs gave numbers", (long long)nan_bad);
}

/* The Erf kernel (kern_erff, vectorized) over every 127th float, +-0, +-inf,
 * NaN and the branch points, through snrt_math_fwd in chunks: within 3 ulp
 * of erf in double (the largest measured over every 7th float: 2.59 ulp, at
 * -0.807), NaN stays NaN, erf(+-inf) = +-1. */
static void run_erf(const float *x, float *y, int m) {
  snrt_math_t p = {.n = m, .kind = SNRT_ERF};
  snrt_math_fwd(&ctx, &p, x, y);
}

static void test_erf_accuracy(void) {
  static const float special[] = {0.0f, -0.0f, INFINITY, -INFINITY, 0.75f, -0.75f,
                                  0.74999994f, 10.0f, -10.0f, 3.9f, 1e-30f, -1e-45f};
  double worst;
  float worst_x;
  int64_t nan_bad;
  float_sweep("erf", run_erf, erf, special, (int)(sizeof special / sizeof *special), &worst, &worst_x,
              &nan_bad);
  ASSERT(worst <= 3.0, "erf off by %.3f ulp at x = %a", worst, worst_x);
  ASSERT(nan_bad == 0, "%lld NaN inputs gave numbers", (long long)nan_bad);
  ASSERT(kern_erff(INFINITY) == 1.0f && kern_erff(-INFINITY) == -1.0f, "erf(+-inf)");
}

typedef struct un_st { snrt_unary_t p; float *x; } un_st;
static void un_fwd_f(fdcase *f) {
  un_st *s = f->st;
  snrt_unary_fwd(&ctx, &s->p, s->x, f->y);
}

static void test_unary(void) {
  const char *names[] = {"relu_bwd", "leaky_relu_bwd", "sigmoid_bwd", "tanh_bwd", "clip_bwd"};
  for (int kind = SNRT_RELU; kind <= SNRT_CLIP; kind++) {
    un_st s;
    s.p = (snrt_unary_t){.n = 40, .kind = kind, .alpha = 0.1f, .lo = -0.5f, .hi = 0.5f};
    s.x = rbuf(40, 0.05f);
    for (int i = 0; i < 40; i++)  /* keep clip's kinks 0.05 away too */
      if (fabsf(fabsf(s.x[i]) - 0.5f) < 0.05f) s.x[i] *= 1.3f;
    s.x[0] = 0.0f;  /* exactly at the kink: relu grad 0, leaky alpha */
    s.x[1] = 0.5f;  /* clip boundary: grad 0 (hardtanh: strictly inside) */
    float *y = buf(40), *r = rbuf(40, 0), *dx = buf(40), *dx2 = buf(40);
    snrt_unary_fwd(&ctx, &s.p, s.x, y);
    double ref[40];
    for (int i = 0; i < 40; i++) {
      double v = s.x[i];
      switch (kind) {
      case SNRT_RELU: ref[i] = v > 0 ? v : 0; break;
      case SNRT_LEAKY_RELU: ref[i] = v > 0 ? v : 0.1f * v; break;
      case SNRT_SIGMOID: ref[i] = 1 / (1 + exp(-v)); break;
      case SNRT_TANH: ref[i] = tanh(v); break;
      default: ref[i] = v < -0.5 ? -0.5 : v > 0.5 ? 0.5 : v; break;
      }
    }
    double e = cmp(y, ref, 40);
    ASSERT(e < 1e-6, "%s fwd %.3g", names[kind], e);
    snrt_unary_bwd(&ctx, &s.p, s.x, y, r, dx);
    /* the other argument alone gives the same gradient */
    int uses_y = kind == SNRT_SIGMOID || kind == SNRT_TANH;
    snrt_unary_bwd(&ctx, &s.p, uses_y ? NULL : s.x, uses_y ? y : NULL, r, dx2);
    ASSERT(!memcmp(dx, dx2, sizeof(float) * 40), "%s: x-only / y-only disagree", names[kind]);
    if (kind == SNRT_RELU) ASSERT(dx[0] == 0, "relu grad at 0 must be 0");
    if (kind == SNRT_LEAKY_RELU) ASSERT(dx[0] == 0.1f * r[0], "leaky relu grad at 0 is alpha");
    if (kind == SNRT_CLIP) ASSERT(dx[1] == 0, "clip grad at hi must be 0");
    if (kind == SNRT_CLIP) {
      /* NaN passes through the forward (as torch.clamp), so a diverging
       * model still stops with exit 3; at lo the gradient is 0 too. */
      float xs[3] = {NAN, -0.5f, 0.25f}, ys[3], gs[3], ones[3] = {1, 1, 1};
      snrt_unary_t q = s.p;
      q.n = 3;
      snrt_unary_fwd(&ctx, &q, xs, ys);
      ASSERT(isnan(ys[0]) && ys[1] == -0.5f && ys[2] == 0.25f, "clip fwd: %g %g %g", ys[0], ys[1],
             ys[2]);
      snrt_unary_bwd(&ctx, &q, xs, NULL, ones, gs);
      ASSERT(gs[1] == 0 && gs[2] == 1, "clip grad at lo must be 0, inside 1: %g %g", gs[1], gs[2]);
    }
    s.x[0] = 0.3f;  /* off the kinks for the FD check */
    s.x[1] = -0.3f;
    snrt_unary_bwd(&ctx, &s.p, s.x, NULL, r, dx);
    if (uses_y) {
      snrt_unary_fwd(&ctx, &s.p, s.x, y);
      snrt_unary_bwd(&ctx, &s.p, NULL, y, r, dx);
    }
    fdcase f = {un_fwd_f, y, 40, r, &s};
    FD_ASSERT(names[kind], fd_check(&f, s.x, 40, dx, 1e-2f));
    free(s.x); free(y); free(r); free(dx); free(dx2);
  }
}

/* ---- binary broadcast ------------------------------------------------------------ */

typedef struct bin_st { snrt_binary_t p; float *a, *b; } bin_st;
static void bin_fwd_f(fdcase *f) {
  bin_st *s = f->st;
  snrt_binary_fwd(&ctx, &s->p, s->a, s->b, f->y);
}

/* shape a / shape b given at full rank (1 where broadcast) */
static snrt_binary_t bin_params(int kind, int rank, const int64_t *da, const int64_t *db) {
  snrt_binary_t p;
  memset(&p, 0, sizeof p);
  p.kind = kind;
  p.rank = rank;
  p.n = 1;
  int64_t sa = 1, sb = 1;
  p.na = p.nb = 1;
  for (int i = rank - 1; i >= 0; i--) {
    p.dims[i] = da[i] > db[i] ? da[i] : db[i];
    p.sa[i] = da[i] == 1 ? 0 : sa;
    p.sb[i] = db[i] == 1 ? 0 : sb;
    sa *= da[i];
    sb *= db[i];
    p.n *= p.dims[i];
  }
  p.na = sa;
  p.nb = sb;
  return p;
}

static void test_binary(void) {
  static const int64_t shapes[][2][4] = {
      {{2, 3, 4, 1}, {2, 3, 4, 1}},
      {{2, 3, 4, 5}, {1, 3, 1, 1}},
      {{2, 1, 4, 1}, {1, 3, 1, 1}},
      {{1, 1, 1, 1}, {2, 3, 2, 2}},
      {{2, 3, 1, 5}, {2, 3, 4, 5}},
  };
  const char *names[] = {"add_bwd", "sub_bwd", "mul_bwd", "div_bwd"};
  for (int sh = 0; sh < 5; sh++)
    for (int kind = SNRT_ADD; kind <= SNRT_DIV; kind++) {
      bin_st s;
      s.p = bin_params(kind, 4, shapes[sh][0], shapes[sh][1]);
      int64_t n = s.p.n;
      s.a = rbuf(s.p.na, 0);
      s.b = rbuf(s.p.nb, 0.5f);  /* DIV: |b| >= 0.5 */
      float *y = buf(n), *r = rbuf(n, 0), *da = buf(s.p.na), *db = buf(s.p.nb);
      double *ref = malloc(sizeof(double) * n);
      snrt_binary_fwd(&ctx, &s.p, s.a, s.b, y);
      for (int64_t i = 0; i < n; i++) {
        int64_t rem = i, oa = 0, ob = 0;
        for (int d = 3; d >= 0; d--) {
          int64_t id = rem % s.p.dims[d];
          rem /= s.p.dims[d];
          oa += id * s.p.sa[d];
          ob += id * s.p.sb[d];
        }
        double A = s.a[oa], B = s.b[ob];
        ref[i] = kind == SNRT_ADD ? A + B : kind == SNRT_SUB ? A - B : kind == SNRT_MUL ? A * B : A / B;
      }
      double e = cmp(y, ref, n);
      ASSERT(e < 1e-6, "binary %s shape %d fwd %.3g", names[kind], sh, e);
      snrt_binary_bwd(&ctx, &s.p, s.a, s.b, r, da, db);
      ASSERT(canary_ok(da, s.p.na) && canary_ok(db, s.p.nb), "binary bwd overrun");
      fdcase f = {bin_fwd_f, y, n, r, &s};
      FD_ASSERT(names[kind], fd_check(&f, s.a, s.p.na, da, 3e-3f));
      FD_ASSERT(names[kind], fd_check(&f, s.b, s.p.nb, db, 3e-3f));
      /* one side only gives the same bits for that side */
      float *db2 = buf(s.p.nb);
      snrt_binary_bwd(&ctx, &s.p, s.a, s.b, r, NULL, db2);
      ASSERT(!memcmp(db, db2, sizeof(float) * s.p.nb), "binary bwd with da NULL differs");
      free(db2);
      free(s.a); free(s.b); free(y); free(r); free(da); free(db); free(ref);
    }
}

/* ---- reduce / expand ------------------------------------------------------------- */

typedef struct red_st { snrt_reduce_t p; float *big; } red_st;
static void red_fwd_f(fdcase *f) {
  red_st *s = f->st;
  snrt_reduce(&ctx, &s->p, s->big, f->y);
}

static void test_reduce(void) {
  static const int64_t smalls[][3] = {{1, 3, 1}, {2, 1, 4}, {1, 1, 1}, {2, 3, 4}};
  for (int t = 0; t < 4; t++) {
    red_st s;
    memset(&s.p, 0, sizeof s.p);
    s.p.rank = 3;
    int64_t dims[3] = {2, 3, 4}, st = 1;
    s.p.n_big = 24;
    s.p.n_small = 1;
    for (int i = 2; i >= 0; i--) {
      s.p.dims[i] = dims[i];
      s.p.ss[i] = smalls[t][i] == 1 ? 0 : st;
      st *= smalls[t][i];
    }
    s.p.n_small = st;
    s.p.scale = (float)st / 24;  /* a mean */
    s.big = rbuf(24, 0);
    float *sm = buf(st), *r = rbuf(st, 0), *g = buf(24);
    double ref[24] = {0};
    snrt_reduce(&ctx, &s.p, s.big, sm);
    for (int64_t i = 0; i < 24; i++) {
      int64_t o = (i / 12) * s.p.ss[0] + (i / 4 % 3) * s.p.ss[1] + (i % 4) * s.p.ss[2];
      ref[o] += s.big[i] * (double)s.p.scale;
    }
    double e = cmp(sm, ref, st);
    ASSERT(e < 1e-6, "reduce %d: %.3g", t, e);
    snrt_expand(&ctx, &s.p, r, g);
    for (int64_t i = 0; i < 24; i++) {
      int64_t o = (i / 12) * s.p.ss[0] + (i / 4 % 3) * s.p.ss[1] + (i % 4) * s.p.ss[2];
      ref[i] = r[o] * (double)s.p.scale;
    }
    e = cmp(g, ref, 24);
    ASSERT(e < 1e-6, "expand %d: %.3g", t, e);
    /* expand(scale) is reduce's gradient */
    fdcase f = {red_fwd_f, sm, st, r, &s};
    FD_ASSERT("expand (reduce grad)", fd_check(&f, s.big, 24, g, 1e-2f));
    free(s.big); free(sm); free(r); free(g);
  }
}

/* ---- matmul and bias ------------------------------------------------------------- */

static void test_matmul_bias(void) {
  for (int ta = 0; ta < 2; ta++)
    for (int tb = 0; tb < 2; tb++)
      for (int beta = 0; beta < 2; beta++)
        for (int bcast = 0; bcast < 2; bcast++) {
          snrt_mm_t p = {.batch = 2, .m = 3, .n = 4, .k = 5, .trans_a = ta, .trans_b = tb,
                         .alpha = 0.5f, .beta = (float)beta, .stride_a = 15,
                         .stride_b = bcast ? 0 : 20, .stride_y = 12};
          float *a = rbuf(30, 0), *b = rbuf(40, 0), *y = buf(24);
          double ref[24];
          for (int i = 0; i < 24; i++) {
            if (beta) y[i] = (float)(i * 0.1);
            ref[i] = beta ? y[i] : 0;
          }
          for (int bt = 0; bt < 2; bt++)
            for (int i = 0; i < 3; i++)
              for (int j = 0; j < 4; j++) {
                double s = 0;
                for (int k = 0; k < 5; k++) {
                  double A = ta ? a[bt * 15 + k * 3 + i] : a[bt * 15 + i * 5 + k];
                  const float *bb = b + (bcast ? 0 : bt * 20);
                  double B = tb ? bb[j * 5 + k] : bb[k * 4 + j];
                  s += A * B;
                }
                ref[bt * 12 + i * 4 + j] += 0.5 * s;
              }
          snrt_matmul(&ctx, &p, a, b, y);
          double e = cmp(y, ref, 24);
          ASSERT(e < 1e-5 && canary_ok(y, 24), "matmul ta %d tb %d beta %d bcast %d: %.3g", ta, tb,
                 beta, bcast, e);
          free(a); free(b); free(y);
        }

  const char *names[] = {"bias_bwd scalar", "bias_bwd row", "bias_bwd col", "bias_bwd full"};
  for (int kind = SNRT_BIAS_SCALAR; kind <= SNRT_BIAS_FULL; kind++) {
    snrt_bias_t p = {.rows = 5, .cols = 70, .kind = kind, .scale = 0.5f};
    int64_t nb = kind == SNRT_BIAS_SCALAR ? 1 : kind == SNRT_BIAS_ROW ? 70
               : kind == SNRT_BIAS_COL ? 5 : 350;
    float *b = rbuf(nb, 0), *y0 = rbuf(350, 0), *y = buf(350), *r = rbuf(350, 0), *db = buf(nb);
    memcpy(y, y0, sizeof(float) * 350);
    snrt_bias_fwd(&ctx, &p, b, y);
    double ref[350];
    for (int i = 0; i < 350; i++) {
      int rr = i / 70, cc = i % 70;
      double bv = kind == SNRT_BIAS_SCALAR ? b[0] : kind == SNRT_BIAS_ROW ? b[cc]
                : kind == SNRT_BIAS_COL ? b[rr] : b[i];
      ref[i] = y0[i] + 0.5 * bv;
    }
    double e = cmp(y, ref, 350);
    ASSERT(e < 1e-6, "bias fwd %d: %.3g", kind, e);
    snrt_bias_bwd(&ctx, &p, r, db);
    /* L = sum r * (y0 + scale*b): dL/db by FD over a copy-then-add forward */
    double worst = 0;
    for (int64_t j = 0; j < nb; j++) {
      double fd[2];
      for (int sgn = 0; sgn < 2; sgn++) {
        float keep = b[j];
        b[j] = keep + (sgn ? -1e-2f : 1e-2f);
        memcpy(y, y0, sizeof(float) * 350);
        snrt_bias_fwd(&ctx, &p, b, y);
        double L = 0;
        for (int i = 0; i < 350; i++) L += (double)r[i] * y[i];
        fd[sgn] = L;
        b[j] = keep;
      }
      double g = (fd[0] - fd[1]) / ((double)(b[j] + 1e-2f) - (double)(b[j] - 1e-2f));
      double d = fabs(g - db[j]) / fmax(1, fabs(db[j]));
      if (d > worst) worst = d;
    }
    FD_ASSERT(names[kind], worst);
    free(b); free(y0); free(y); free(r); free(db);
  }
}

/* ---- shape ops --------------------------------------------------------------------- */

typedef struct sl_st { snrt_slice_t p; float *x; } sl_st;
static void sl_fwd_f(fdcase *f) {
  sl_st *s = f->st;
  snrt_slice_fwd(&ctx, &s->p, s->x, f->y);
}
typedef struct pad_st { snrt_pad_t p; float *x; } pad_st;
static void pad_fwd_f(fdcase *f) {
  pad_st *s = f->st;
  snrt_pad_fwd(&ctx, &s->p, s->x, f->y);
}

static void test_shape(void) {
  /* concat / split along axis 1 of (2, {2,3,1}, 4) */
  int64_t chunk[3] = {8, 12, 4};
  snrt_concat_t cp = {.parts = 3, .outer = 2, .chunk = chunk};
  float *in[3] = {rbuf(16, 0), rbuf(24, 0), rbuf(8, 0)}, *y = buf(48), *out[3] = {buf(16), NULL, buf(8)};
  snrt_concat(&ctx, &cp, (const float *const *)in, y);
  int ok = 1;
  for (int o = 0; o < 2; o++) {
    int64_t off = o * 24;
    for (int pidx = 0; pidx < 3; pidx++)
      for (int64_t j = 0; j < chunk[pidx]; j++, off++)
        if (y[off] != in[pidx][o * chunk[pidx] + j]) ok = 0;
  }
  ASSERT(ok && canary_ok(y, 48), "concat");
  snrt_split(&ctx, &cp, y, out);
  ASSERT(!memcmp(out[0], in[0], 64) && !memcmp(out[2], in[2], 32), "split");
  for (int i = 0; i < 3; i++) free(in[i]);
  free(out[0]); free(out[2]); free(y);

  /* slice (4,5,6): starts (3,0,5), steps (-1,2,-2) -> (3,3,3) */
  sl_st s;
  s.p = (snrt_slice_t){.rank = 3, .n_in = 120, .n_out = 27, .in_dims = {4, 5, 6},
                       .out_dims = {3, 3, 3}, .start = {3, 0, 5}, .step = {-1, 2, -2}};
  s.x = rbuf(120, 0);
  float *sy = buf(27), *r = rbuf(27, 0), *dx = buf(120);
  snrt_slice_fwd(&ctx, &s.p, s.x, sy);
  double ref[120];
  for (int i = 0; i < 3; i++)
    for (int j = 0; j < 3; j++)
      for (int k = 0; k < 3; k++) ref[(i * 3 + j) * 3 + k] = s.x[((3 - i) * 5 + 2 * j) * 6 + 5 - 2 * k];
  ASSERT(cmp(sy, ref, 27) == 0, "slice fwd");
  snrt_slice_bwd(&ctx, &s.p, r, dx);
  fdcase f = {sl_fwd_f, sy, 27, r, &s};
  FD_ASSERT("slice_bwd", fd_check(&f, s.x, 120, dx, 1e-2f));
  free(s.x); free(sy); free(r); free(dx);

  /* pad (2,3,4): before (1,-1,2), after (0,1,-1) -> (3,3,5), value 0.5 */
  pad_st ps;
  ps.p = (snrt_pad_t){.rank = 3, .n_in = 24, .n_out = 45, .in_dims = {2, 3, 4},
                      .out_dims = {3, 3, 5}, .before = {1, -1, 2}, .value = 0.5f};
  ps.x = rbuf(24, 0);
  float *py = buf(45), *pr = rbuf(45, 0), *pdx = buf(24);
  snrt_pad_fwd(&ctx, &ps.p, ps.x, py);
  for (int i = 0; i < 3; i++)
    for (int j = 0; j < 3; j++)
      for (int k = 0; k < 5; k++) {
        int a = i - 1, b = j + 1, cc = k - 2;
        ref[(i * 3 + j) * 5 + k] = (a >= 0 && a < 2 && b >= 0 && b < 3 && cc >= 0 && cc < 4)
                                       ? ps.x[(a * 3 + b) * 4 + cc] : 0.5;
      }
  ASSERT(cmp(py, ref, 45) == 0 && canary_ok(py, 45), "pad fwd");
  snrt_pad_bwd(&ctx, &ps.p, pr, pdx);
  fdcase pf = {pad_fwd_f, py, 45, pr, &ps};
  FD_ASSERT("pad_bwd", fd_check(&pf, ps.x, 24, pdx, 1e-2f));
  free(ps.x); free(py); free(pr); free(pdx);

  /* transpose (2,3,4) perm (2,0,1) -> (4,2,3), and back with (1,2,0) */
  snrt_transpose_t tp = {.rank = 3, .n = 24, .in_dims = {2, 3, 4}, .perm = {2, 0, 1}};
  snrt_transpose_t tb = {.rank = 3, .n = 24, .in_dims = {4, 2, 3}, .perm = {1, 2, 0}};
  float *tx = rbuf(24, 0), *ty = buf(24), *tz = buf(24);
  snrt_transpose(&ctx, &tp, tx, ty);
  for (int i = 0; i < 4; i++)
    for (int j = 0; j < 2; j++)
      for (int k = 0; k < 3; k++) ref[(i * 2 + j) * 3 + k] = tx[(j * 3 + k) * 4 + i];
  ASSERT(cmp(ty, ref, 24) == 0, "transpose");
  snrt_transpose(&ctx, &tb, ty, tz);
  ASSERT(!memcmp(tx, tz, 96), "transpose back");
  free(tx); free(ty); free(tz);

  /* The tiled path (the input's innermost dimension is the output's second-
   * to-last, a multiple of 8 long): a 2-D [27, 40] (3 whole 8x8 tiles and a
   * tail of 3 per block of rows) and a 4-D [2, 5, 3, 16] perm (0, 2, 3, 1)
   * (rows of 5: the tail alone), against the index formula. */
  {
    const int64_t d2[2] = {27, 40}, d4[4] = {2, 5, 3, 16};
    snrt_transpose_t t2 = {.rank = 2, .n = 1080, .in_dims = {27, 40}, .perm = {1, 0}};
    snrt_transpose_t t4 = {.rank = 4, .n = 480, .in_dims = {2, 5, 3, 16}, .perm = {0, 2, 3, 1}};
    float *x2 = rbuf(1080, 1), *y2 = buf(1080), *r2 = buf(1080);
    snrt_transpose(&ctx, &t2, x2, y2);
    for (int i = 0; i < d2[1]; i++)
      for (int j = 0; j < d2[0]; j++) r2[i * d2[0] + j] = x2[j * d2[1] + i];
    ASSERT(!memcmp(y2, r2, sizeof(float) * 1080), "transpose, tiled 2-D");
    float *x4 = rbuf(480, 2), *y4 = buf(480), *r4 = buf(480);
    snrt_transpose(&ctx, &t4, x4, y4);
    for (int a = 0; a < d4[0]; a++)
      for (int b = 0; b < d4[2]; b++)
        for (int e = 0; e < d4[3]; e++)
          for (int q = 0; q < d4[1]; q++)
            r4[((a * d4[2] + b) * d4[3] + e) * d4[1] + q] =
                x4[((a * d4[1] + q) * d4[2] + b) * d4[3] + e];
    ASSERT(!memcmp(y4, r4, sizeof(float) * 480), "transpose, tiled 4-D");
    free(x2); free(y2); free(r2); free(x4); free(y4); free(r4);
  }
}

/* ---- softmax and losses ----------------------------------------------------------- */

typedef struct sm_st { snrt_softmax_t p; float *x; } sm_st;
static void sm_fwd_f(fdcase *f) {
  sm_st *s = f->st;
  snrt_softmax_fwd(&ctx, &s->p, s->x, f->y);
}
typedef struct loss_st { snrt_loss_t p; float *z, *t; int32_t *lab; int mse; } loss_st;
static void loss_fwd_f(fdcase *f) {
  loss_st *s = f->st;
  if (s->mse) snrt_mse_fwd(&ctx, &s->p, s->z, s->t, f->y);
  else snrt_softmax_ce_fwd(&ctx, &s->p, s->z, s->lab, f->y);
}

static void test_softmax_loss(void) {
  sm_st s;
  s.p = (snrt_softmax_t){.outer = 2, .len = 5, .inner = 3};
  s.x = rbuf(30, 0);
  float *y = buf(30), *r = rbuf(30, 0), *dx = buf(30);
  double ref[30];
  snrt_softmax_fwd(&ctx, &s.p, s.x, y);
  for (int o = 0; o < 2; o++)
    for (int i = 0; i < 3; i++) {
      double sum = 0;
      for (int j = 0; j < 5; j++) sum += exp(s.x[(o * 5 + j) * 3 + i]);
      for (int j = 0; j < 5; j++) ref[(o * 5 + j) * 3 + i] = exp(s.x[(o * 5 + j) * 3 + i]) / sum;
    }
  ASSERT(cmp(y, ref, 30) < 1e-6, "softmax fwd");
  snrt_softmax_bwd(&ctx, &s.p, y, r, dx);
  fdcase f = {sm_fwd_f, y, 30, r, &s};
  FD_ASSERT("softmax_bwd", fd_check(&f, s.x, 30, dx, 1e-2f));
  free(s.x); free(y); free(r); free(dx);

  for (int mse = 0; mse < 2; mse++) {
    loss_st l;
    l.p = (snrt_loss_t){.n = 4, .classes = 5};
    l.mse = mse;
    l.z = rbuf(20, 0);
    l.t = rbuf(20, 0);
    int32_t lab[4] = {0, 4, 2, 2};
    l.lab = lab;
    l.z[0] = 80.0f;  /* log-sum-exp must not overflow */
    float loss = NAN, one = 1.0f, *d = buf(20);
    loss_fwd_f(&(fdcase){loss_fwd_f, &loss, 1, &one, &l});
    double refl = 0;
    for (int i = 0; i < 4; i++) {
      if (mse) {
        for (int j = 0; j < 5; j++) refl += pow((double)l.z[i * 5 + j] - l.t[i * 5 + j], 2) / 20;
      } else {
        double m = -INFINITY, sum = 0;
        for (int j = 0; j < 5; j++) m = fmax(m, l.z[i * 5 + j]);
        for (int j = 0; j < 5; j++) sum += exp(l.z[i * 5 + j] - m);
        refl += (log(sum) + m - l.z[i * 5 + lab[i]]) / 4;
      }
    }
    ASSERT(fabs(loss - refl) <= 1e-6 * fmax(1, fabs(refl)), "%s fwd: %g vs %g", mse ? "mse" : "ce",
           loss, refl);
    if (mse) snrt_mse_bwd(&ctx, &l.p, l.z, l.t, d);
    else snrt_softmax_ce_bwd(&ctx, &l.p, l.z, lab, d);
    l.z[0] = 0.7f;  /* back to a moderate logit: FD in float at 80 is noise */
    if (mse) snrt_mse_bwd(&ctx, &l.p, l.z, l.t, d);
    else snrt_softmax_ce_bwd(&ctx, &l.p, l.z, lab, d);
    fdcase lf = {loss_fwd_f, &loss, 1, &one, &l};
    FD_ASSERT(mse ? "mse_bwd" : "softmax_ce_bwd", fd_check(&lf, l.z, 20, d, 1e-2f));
    int32_t bad[4] = {0, 5, 1, 1};
    snrt_softmax_ce_fwd(&ctx, &l.p, l.z, bad, &loss);
    if (!mse) ASSERT(isnan(loss), "a label out of range must give NaN, not a read out of bounds");
    free(l.z); free(l.t); free(d);
  }
}

/* ---- dropout ------------------------------------------------------------------------ */

typedef struct do_st { snrt_dropout_t p; float *x; } do_st;
static void do_fwd_f(fdcase *f) {
  do_st *s = f->st;
  snrt_dropout_fwd(&ctx, &s->p, s->x, f->y);
}

static void test_dropout(void) {
  do_st s;
  s.p = (snrt_dropout_t){.n = 1000, .ratio = 0.3f, .id = 7};
  s.x = rbuf(1000, 0);
  float *y = buf(1000), *r = rbuf(1000, 0), *dx = buf(1000), *y2 = buf(1000);
  ctx.step = 5;
  snrt_dropout_fwd(&ctx, &s.p, s.x, y);
  int kept = 0, ok = 1;
  for (int i = 0; i < 1000; i++) {
    int k = snrt_uniform(42, 5, 7, i) >= 0.3f;
    kept += k;
    double want = k ? s.x[i] / 0.7 : 0;
    if (fabs(y[i] - want) > 1e-6) ok = 0;
  }
  ASSERT(ok, "dropout mask/scale");
  ASSERT(kept > 650 && kept < 750, "dropout kept %d of 1000 at ratio 0.3", kept);
  snrt_dropout_bwd(&ctx, &s.p, r, dx);
  fdcase f = {do_fwd_f, y, 1000, r, &s};
  FD_ASSERT("dropout_bwd", fd_check(&f, s.x, 1000, dx, 1e-2f));
  ctx.step = 6;
  snrt_dropout_fwd(&ctx, &s.p, s.x, y2);
  ASSERT(memcmp(y, y2, 4000) != 0, "dropout mask must change with the step");
  s.p.ratio = 0;
  snrt_dropout_fwd(&ctx, &s.p, s.x, y2);
  ASSERT(!memcmp(s.x, y2, 4000), "dropout ratio 0 is the identity");
  ctx.step = 0;
  free(s.x); free(y); free(r); free(dx); free(y2);
}

/* ---- optimizers ------------------------------------------------------------------------ */

static void test_optim(void) {
  /* hand-computed: w=1, g=0.5, lr 0.1, momentum 0.9: step 0 buf=0.5, w=0.95;
   * step 1 (g 0.5) buf=0.95, w=0.855 */
  {
    float w = 1, g = 0.5f, m = 123;  /* m garbage: step 0 must not read it */
    snrt_sgd_t p = {.n = 1, .momentum = 0.9f};
    ctx.lr = 0.1f;
    ctx.step = 0;
    snrt_sgd(&ctx, &p, &w, &g, &m);
    ASSERT(fabsf(w - 0.95f) < 1e-7 && m == 0.5f, "sgd step 0: w %g buf %g", w, m);
    ctx.step = 1;
    snrt_sgd(&ctx, &p, &w, &g, &m);
    ASSERT(fabsf(w - 0.855f) < 1e-6, "sgd step 1: w %g", w);
  }
  /* Adam step 0: m_hat = g, v_hat = g^2: w -= lr * g / (|g| + eps) */
  {
    float w = 1, g = -0.25f, m = 0, v = 0;
    snrt_adam_t p = {.n = 1, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f};
    ctx.step = 0;
    snrt_adam(&ctx, &p, &w, &g, &m, &v);
    ASSERT(fabsf(w - 1.1f) < 1e-6, "adam step 0: w %g (want 1.1)", w);
  }
  /* 3 steps against torch's formulas in double */
  for (int variant = 0; variant < 6; variant++) {
    const int n = 10;
    float w[10], m[10] = {0}, v[10] = {0}, g[3][10];
    double W[10], M[10] = {0}, V[10] = {0};
    for (int i = 0; i < n; i++) W[i] = w[i] = rnd(0);
    for (int s = 0; s < 3; s++)
      for (int i = 0; i < n; i++) g[s][i] = rnd(0);
    double lr = 0.05, wd = 0.01, mu = 0.9, damp = variant == 2 ? 0.1 : 0;
    int nest = variant == 1, adam = variant >= 3, adamw = variant == 4;
    double b1 = 0.9, b2 = 0.999, eps = 1e-8;
    if (variant == 5) wd = 0;  /* Adam without decay */
    snrt_sgd_t sp = {.n = n, .momentum = (float)mu, .weight_decay = (float)wd,
                     .dampening = (float)damp, .nesterov = nest};
    snrt_adam_t ap = {.n = n, .beta1 = (float)b1, .beta2 = (float)b2, .eps = (float)eps,
                      .weight_decay = (float)wd, .decoupled = adamw};
    ctx.lr = (float)lr;
    for (int s = 0; s < 3; s++) {
      ctx.step = s;
      if (adam) snrt_adam(&ctx, &ap, w, g[s], m, v);
      else snrt_sgd(&ctx, &sp, w, g[s], m);
      double t = s + 1;
      for (int i = 0; i < n; i++) {
        double gi = g[s][i];
        if (!adam) {
          gi += wd * W[i];
          M[i] = s == 0 ? gi : mu * M[i] + (1 - damp) * gi;
          W[i] -= lr * (nest ? gi + mu * M[i] : M[i]);
        } else {
          if (adamw) W[i] *= 1 - lr * wd;
          else gi += wd * W[i];
          M[i] = b1 * M[i] + (1 - b1) * gi;
          V[i] = b2 * V[i] + (1 - b2) * gi * gi;
          double denom = sqrt(V[i]) / sqrt(1 - pow(b2, t)) + eps;
          W[i] -= lr / (1 - pow(b1, t)) * M[i] / denom;
        }
      }
    }
    double e = cmp(w, W, n);
    ASSERT(e < 1e-6, "optimizer variant %d after 3 steps: %.3g", variant, e);
  }
  ctx.step = 0;
  ctx.lr = 0.1f;
}

/* ---- determinism ----------------------------------------------------------------------- */

static void test_determinism(void) {
  snrt_conv_t p = {.n = 8, .c = 16, .h = 12, .w = 12, .k = 32, .oh = 12, .ow = 12, .kh = 3,
                   .kw = 3, .sh = 1, .sw = 1, .pt = 1, .pl = 1, .dh = 1, .dw = 1, .group = 1,
                   .ws_images = 8};
  int64_t nx = 8 * 16 * 144, ny = 8 * 32 * 144, nw = 32 * 16 * 9, nws = snrt_conv_ws_bytes(&p) / 4;
  float *x = rbuf(nx, 0), *w = rbuf(nw, 0), *ws = buf(nws), *r = rbuf(ny, 0);
  float *out[2][4];
  snrt_bn_t bp = {.n = 8, .c = 32, .hw = 144, .eps = 1e-5f, .momentum = 0.9f};
  float *sc = rbuf(32, 0), *bi = rbuf(32, 0), *rm = rbuf(32, 0), *rv = rbuf(32, 0);
  float *sm = buf(32), *si = buf(32), *dsc = buf(32), *dbi = buf(32);
  for (int run = 0; run < 2; run++) {
    for (int j = 0; j < 4; j++) out[run][j] = buf(j == 1 ? nx : j == 2 ? nw : ny);
    snrt_conv_fwd(&ctx, &p, x, w, NULL, out[run][0], ws);
    snrt_conv_bwd_data(&ctx, &p, r, w, out[run][1], ws);
    snrt_conv_bwd_filter(&ctx, &p, x, r, out[run][2], ws);
    /* BN over the conv output, then its backward */
    float *y = buf(ny);
    snrt_bn_fwd_train(&ctx, &bp, out[run][0], sc, bi, rm, rv, y, sm, si);
    snrt_bn_bwd(&ctx, &bp, out[run][0], r, sc, sm, si, out[run][3], dsc, dbi);
    free(y);
  }
  ASSERT(!memcmp(out[0][0], out[1][0], ny * 4), "conv fwd not deterministic");
  ASSERT(!memcmp(out[0][3], out[1][3], ny * 4), "bn bwd not deterministic");
  ASSERT(!memcmp(out[0][1], out[1][1], nx * 4), "conv bwd data not deterministic");
  ASSERT(!memcmp(out[0][2], out[1][2], nw * 4), "conv bwd filter not deterministic");
  for (int run = 0; run < 2; run++)
    for (int j = 0; j < 4; j++) free(out[run][j]);
  free(x); free(w); free(ws); free(r); free(sc); free(bi); free(rm); free(rv); free(sm);
  free(si); free(dsc); free(dbi);
}
