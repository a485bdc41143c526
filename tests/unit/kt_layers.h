/* kt_layers.h — test cases for conv, pooling, BN and LRN; included once by
 * test_kernels.c (a header only to keep each file short; not a library). */

/* ---- convolution ------------------------------------------------------------ */

static void ref_conv(const snrt_conv_t *p, const float *x, const float *w, const float *b,
                     double *y) {
  int cg = p->c / p->group, kg = p->k / p->group;
  for (int n = 0; n < p->n; n++)
    for (int k = 0; k < p->k; k++)
      for (int oy = 0; oy < p->oh; oy++)
        for (int ox = 0; ox < p->ow; ox++) {
          double s = b ? b[k] : 0;
          int g = k / kg;
          for (int ci = 0; ci < cg; ci++)
            for (int ki = 0; ki < p->kh; ki++)
              for (int kj = 0; kj < p->kw; kj++) {
                int iy = oy * p->sh - p->pt + ki * p->dh, ix = ox * p->sw - p->pl + kj * p->dw;
                if (iy < 0 || iy >= p->h || ix < 0 || ix >= p->w) continue;
                s += (double)x[((n * p->c + g * cg + ci) * p->h + iy) * p->w + ix] *
                     w[((k * cg + ci) * p->kh + ki) * p->kw + kj];
              }
          y[((n * p->k + k) * p->oh + oy) * p->ow + ox] = s;
        }
}

typedef struct conv_st {
  snrt_conv_t p;
  float *x, *w, *b, *ws;
} conv_st;

static void conv_fwd_f(fdcase *f) {
  conv_st *s = f->st;
  snrt_conv_fwd(&ctx, &s->p, s->x, s->w, s->b, f->y, s->ws);
}

static void conv_case(const char *what, int n, int c, int h, int w, int k, int kh, int kw, int sh,
                      int sw, int pt, int pl, int pb, int pr, int dh, int dw, int group, int wsi) {
  conv_st s;
  snrt_conv_t *p = &s.p;
  memset(p, 0, sizeof *p);
  p->n = n; p->c = c; p->h = h; p->w = w; p->k = k; p->kh = kh; p->kw = kw;
  p->sh = sh; p->sw = sw; p->pt = pt; p->pl = pl; p->dh = dh; p->dw = dw; p->group = group;
  p->oh = (h + pt + pb - dh * (kh - 1) - 1) / sh + 1;
  p->ow = (w + pl + pr - dw * (kw - 1) - 1) / sw + 1;
  p->ws_images = wsi;
  int64_t wsb = snrt_conv_ws_bytes(p);
  p->ws_bytes = wsb;
  int64_t nx = (int64_t)n * c * h * w, nw = (int64_t)k * (c / group) * kh * kw;
  int64_t ny = (int64_t)n * k * p->oh * p->ow, nwsf = wsb / 4;
  s.x = rbuf(nx, 0); s.w = rbuf(nw, 0); s.b = rbuf(k, 0);
  s.ws = nwsf ? buf(nwsf) : NULL;
  float *y = buf(ny), *r = rbuf(ny, 0), *dx = buf(nx), *dwt = buf(nw), *db = buf(k);
  double *ref = malloc(sizeof(double) * ny);

  for (int withb = 0; withb < 2; withb++) {
    nanfill(y, ny);
    snrt_conv_fwd(&ctx, p, s.x, s.w, withb ? s.b : NULL, y, s.ws);
    ref_conv(p, s.x, s.w, withb ? s.b : NULL, ref);
    double e = cmp(y, ref, ny);
    ASSERT(e < TOL_FWD, "conv fwd %s bias %d: error %.3g", what, withb, e);
    ASSERT(canary_ok(y, ny), "conv fwd %s wrote past y", what);
  }
  if (s.ws) ASSERT(canary_ok(s.ws, nwsf), "conv %s wrote past its workspace", what);

  snrt_conv_bwd_data(&ctx, p, r, s.w, dx, s.ws);
  snrt_conv_bwd_filter(&ctx, p, s.x, r, dwt, s.ws);
  snrt_conv_bwd_bias(&ctx, p, r, db);
  ASSERT(canary_ok(dx, nx) && canary_ok(dwt, nw) && canary_ok(db, k), "conv bwd %s overrun", what);
  if (s.ws) ASSERT(canary_ok(s.ws, nwsf), "conv bwd %s wrote past its workspace", what);

  fdcase f = {conv_fwd_f, y, ny, r, &s};
  FD_ASSERT("conv_bwd_data", fd_check(&f, s.x, nx, dx, 1e-2f));
  FD_ASSERT("conv_bwd_filter", fd_check(&f, s.w, nw, dwt, 1e-2f));
  FD_ASSERT("conv_bwd_bias", fd_check(&f, s.b, k, db, 1e-2f));
  free(s.x); free(s.w); free(s.b); free(s.ws); free(y); free(r); free(dx); free(dwt); free(db);
  free(ref);
}

static void test_conv(void) {
  /*        what               n  c  h  w  k kh kw sh sw pt pl pb pr dh dw g wsi */
  conv_case("3x3 batched",     3, 4, 6, 6, 6, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 3);
  conv_case("3x3 chunks of 2", 5, 4, 5, 5, 6, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 3);
  conv_case("3x3 per-image",   3, 4, 6, 6, 6, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1);
  conv_case("s2 d2 asym g2",   2, 4, 9, 8, 6, 3, 2, 2, 3, 2, 0, 1, 2, 2, 1, 2, 2);
  conv_case("depthwise",       2, 6, 7, 7, 6, 3, 3, 2, 1, 1, 1, 0, 1, 1, 1, 6, 2);
  conv_case("depthwise x2",    2, 3, 5, 6, 6, 3, 3, 1, 1, 1, 1, 1, 1, 1, 2, 3, 2);
  /* A 1x1 stride-1 conv on a plane of SNRT_CONV_1X1_PLANE pixels or more:
   * no workspace, one GEMM per image; on a smaller plane: im2col (a copy). */
  conv_case("1x1 s1 16x16 no ws", 2, 6, 16, 16, 4, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 2);
  conv_case("1x1 s1 16x16 g2", 2, 6, 16, 16, 4, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 2, 2);
  conv_case("1x1 s1 4x5 im2col", 2, 6, 4, 5, 4, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 2);
  conv_case("1x1 s1 4x5 g2",   2, 6, 4, 5, 4, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 2, 2);
  conv_case("1x1 s2",          3, 6, 5, 5, 8, 1, 1, 2, 2, 0, 0, 0, 0, 1, 1, 1, 3);
  conv_case("c=1 first layer", 3, 1, 6, 6, 5, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 3);
  conv_case("7x7 s2 p3",       2, 3, 9, 9, 4, 7, 7, 2, 2, 3, 3, 3, 3, 1, 1, 1, 2);
  conv_case("5x5 pad 0 > k",   2, 2, 4, 4, 3, 5, 5, 1, 1, 2, 2, 2, 2, 1, 1, 1, 2);
  /* The contiguous-run im2col path (strides 1, ow == w) with dilation, and
   * the 1x1 / 2x2 planes of a 32x32 ResNet's last stage. */
  conv_case("3x3 d2 p2 same",  2, 3, 7, 7, 4, 3, 3, 1, 1, 2, 2, 2, 2, 2, 2, 1, 2);
  conv_case("3x3 on 1x1",      3, 4, 1, 1, 5, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 3);
  conv_case("3x3 s2 on 2x2",   3, 4, 2, 2, 5, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 1, 2);
  conv_case("3x5 p1,2 same",   2, 3, 4, 6, 4, 3, 5, 1, 1, 1, 2, 1, 2, 1, 1, 1, 2);
}

/* ---- pooling ------------------------------------------------------------------ */

static void ref_maxpool(const snrt_pool_t *p, const float *x, double *y, int64_t *arg) {
  for (int pl = 0; pl < p->n * p->c; pl++)
    for (int oy = 0; oy < p->oh; oy++)
      for (int ox = 0; ox < p->ow; ox++) {
        double best = -INFINITY;
        int64_t bi = -1;
        for (int ki = 0; ki < p->kh; ki++)
          for (int kj = 0; kj < p->kw; kj++) {
            int iy = oy * p->sh - p->pt + ki * p->dh, ix = ox * p->sw - p->pl + kj * p->dw;
            if (iy < 0 || iy >= p->h || ix < 0 || ix >= p->w) continue;
            int64_t i = ((int64_t)pl * p->h + iy) * p->w + ix;
            if (bi < 0 || x[i] > best) { best = x[i]; bi = i; }
          }
        int64_t o = ((int64_t)pl * p->oh + oy) * p->ow + ox;
        y[o] = best;
        arg[o] = bi;
      }
}

/* The divisor by counting: positions of the window below h+pb and right of
 * w+pr (count_include_pad), or inside the input. */
static void ref_avgpool(const snrt_pool_t *p, const float *x, double *y) {
  for (int pl = 0; pl < p->n * p->c; pl++)
    for (int oy = 0; oy < p->oh; oy++)
      for (int ox = 0; ox < p->ow; ox++) {
        double s = 0;
        int cpad = 0, cin = 0;
        for (int ki = 0; ki < p->kh; ki++)
          for (int kj = 0; kj < p->kw; kj++) {
            int iy = oy * p->sh - p->pt + ki, ix = ox * p->sw - p->pl + kj;
            if (iy < p->h + p->pb && ix < p->w + p->pr) cpad++;
            if (iy < 0 || iy >= p->h || ix < 0 || ix >= p->w) continue;
            cin++;
            s += x[((int64_t)pl * p->h + iy) * p->w + ix];
          }
        y[((int64_t)pl * p->oh + oy) * p->ow + ox] = s / (p->count_include_pad ? cpad : cin);
      }
}

typedef struct pool_st { snrt_pool_t p; float *x; int max; } pool_st;
static void pool_fwd_f(fdcase *f) {
  pool_st *s = f->st;
  if (s->max) snrt_maxpool_fwd(&ctx, &s->p, s->x, f->y);
  else snrt_avgpool_fwd(&ctx, &s->p, s->x, f->y);
}

static void pool_case(const char *what, int max, int n, int c, int h, int k, int st,
                      int pt, int pb, int ceil_mode, int cip, int dil) {
  pool_st s;
  snrt_pool_t *p = &s.p;
  memset(p, 0, sizeof *p);
  p->n = n; p->c = c; p->h = p->w = h; p->kh = p->kw = k; p->sh = p->sw = st;
  p->pt = p->pl = pt; p->pb = p->pr = pb; p->dh = p->dw = dil; p->count_include_pad = cip;
  int ek = dil * (k - 1) + 1, span = h + pt + pb - ek;
  p->oh = (ceil_mode ? (span + st - 1) / st : span / st) + 1;
  if (ceil_mode && (p->oh - 1) * st >= h + pt) p->oh--;  /* PyTorch: last window starts inside */
  p->ow = p->oh;
  s.max = max;
  s.x = buf((int64_t)n * c * h * h);
  int64_t nx = (int64_t)n * c * h * h, ny = (int64_t)n * c * p->oh * p->ow;
  /* distinct values 0.05 apart (a shuffled ramp): FD never flips an argmax */
  for (int64_t i = 0; i < nx; i++) s.x[i] = (float)(i * 0.05 - nx * 0.025);
  for (int64_t i = nx - 1; i > 0; i--) {
    int64_t j = (int64_t)(urand() * (i + 1));
    float t = s.x[i]; s.x[i] = s.x[j]; s.x[j] = t;
  }
  float *y = buf(ny), *r = rbuf(ny, 0), *dx = buf(nx);
  double *ref = calloc(ny, sizeof(double));
  int64_t *arg = malloc(sizeof(int64_t) * ny);
  pool_fwd_f(&(fdcase){pool_fwd_f, y, ny, r, &s});
  if (max) ref_maxpool(p, s.x, ref, arg);
  else ref_avgpool(p, s.x, ref);
  double e = cmp(y, ref, ny);
  ASSERT(e < TOL_FWD, "%s fwd: error %.3g", what, e);
  if (max) snrt_maxpool_bwd(&ctx, p, s.x, r, dx);
  else snrt_avgpool_bwd(&ctx, p, r, dx);
  ASSERT(canary_ok(y, ny) && canary_ok(dx, nx), "%s overrun", what);
  fdcase f = {pool_fwd_f, y, ny, r, &s};
  FD_ASSERT(max ? "maxpool_bwd" : "avgpool_bwd", fd_check(&f, s.x, nx, dx, 1e-2f));

  if (max) {
    /* Ties: values from {0, 1, 2}; the gradient goes to the first maximum. */
    for (int64_t i = 0; i < nx; i++) s.x[i] = (float)(int)(urand() * 3);
    ref_maxpool(p, s.x, ref, arg);
    double *rdx = calloc(nx, sizeof(double));
    for (int64_t o = 0; o < ny; o++)
      if (arg[o] >= 0) rdx[arg[o]] += r[o];
    snrt_maxpool_bwd(&ctx, p, s.x, r, dx);
    e = cmp(dx, rdx, nx);
    ASSERT(e < TOL_FWD, "%s ties: gradient not routed to the first maximum (%.3g)", what, e);
    free(rdx);
  }
  free(s.x); free(y); free(r); free(dx); free(ref); free(arg);
}

static void test_pool(void) {
  /*                      max n  c  h  k  s  pt pb ceil cip dil */
  pool_case("maxpool 3s2p1", 1, 2, 3, 7, 3, 2, 1, 1, 0, 0, 1);
  pool_case("maxpool ceil",  1, 2, 2, 6, 3, 2, 0, 0, 1, 0, 1);
  pool_case("maxpool 2s2",   1, 2, 3, 6, 2, 2, 0, 0, 0, 0, 1);
  pool_case("maxpool 2s2 odd", 1, 2, 3, 7, 2, 2, 0, 0, 0, 0, 1); /* fast path, last row/col unread */
  pool_case("maxpool 2s2 ceil", 1, 1, 2, 7, 2, 2, 0, 0, 1, 0, 1); /* last window clipped: generic */
  pool_case("maxpool dil2",  1, 1, 2, 8, 3, 1, 2, 2, 0, 0, 2);
  pool_case("avg cip ceil",  0, 2, 2, 6, 3, 2, 1, 1, 1, 1, 1);
  pool_case("avg nocip ceil",0, 2, 2, 6, 3, 2, 1, 1, 1, 0, 1);
  pool_case("avg cip asym",  0, 1, 2, 5, 3, 2, 1, 0, 1, 1, 1);
  pool_case("avg 2s2",       0, 2, 3, 6, 2, 2, 0, 0, 0, 1, 1);
  pool_case("gap",           0, 3, 4, 5, 5, 1, 0, 0, 0, 1, 1);
  /* hand-computed: 1x1x3x3 ramp 1..9, k=2 s=2 pad 0 ceil -> 2x2 windows
   * {1,2,4,5} {3,6} {7,8} {9}: averages 3, 4.5, 7.5, 9 (clipped divisors). */
  snrt_pool_t p = {.n = 1, .c = 1, .h = 3, .w = 3, .oh = 2, .ow = 2, .kh = 2, .kw = 2, .sh = 2,
                   .sw = 2, .dh = 1, .dw = 1, .count_include_pad = 1};
  float x[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9}, y[4];
  snrt_avgpool_fwd(&ctx, &p, x, y);
  ASSERT(y[0] == 3 && y[1] == 4.5f && y[2] == 7.5f && y[3] == 9, "avgpool hand: %g %g %g %g",
         y[0], y[1], y[2], y[3]);
  /* with pb = pr = 1 the padded row/column counts: {3,6,pad,pad} / 4 = 2.25 */
  p.pb = p.pr = 1;
  snrt_avgpool_fwd(&ctx, &p, x, y);
  ASSERT(y[0] == 3 && y[1] == 2.25f && y[2] == 3.75f && y[3] == 2.25f,
         "avgpool hand cip: %g %g %g %g", y[0], y[1], y[2], y[3]);
}

/* ---- batch normalization -------------------------------------------------------- */

typedef struct bn_st { snrt_bn_t p; float *x, *sc, *bi, *rm, *rv, *sm, *si; } bn_st;
static void bn_fwd_f(fdcase *f) {
  bn_st *s = f->st;
  snrt_bn_fwd_train(&ctx, &s->p, s->x, s->sc, s->bi, s->rm, s->rv, f->y, s->sm, s->si);
}

static void test_bn(void) {
  bn_st s;
  s.p = (snrt_bn_t){.n = 4, .c = 3, .hw = 5, .eps = 1e-5f, .momentum = 0.9f};
  int C = 3;
  int64_t nx = 4 * 3 * 5;
  s.x = rbuf(nx, 0); s.sc = rbuf(C, 0.2f); s.bi = rbuf(C, 0);
  s.rm = rbuf(C, 0); s.rv = buf(C); s.sm = buf(C); s.si = buf(C);
  for (int i = 0; i < C; i++) s.rv[i] = 0.5f + i;
  float rm0[3], rv0[3];
  memcpy(rm0, s.rm, sizeof rm0);
  memcpy(rv0, s.rv, sizeof rv0);
  float *y = buf(nx), *y2 = buf(nx), *r = rbuf(nx, 0), *dx = buf(nx), *dsc = buf(C), *dbi = buf(C);
  double ref[60];
  for (int64_t i = 0; i < nx; i++) r[i] += 0.7f;  /* mean(dy) != 0 exercises every term of dx */
  snrt_bn_fwd_train(&ctx, &s.p, s.x, s.sc, s.bi, s.rm, s.rv, y, s.sm, s.si);
  for (int ch = 0; ch < C; ch++) {
    double m = 0, v = 0;
    for (int i = 0; i < 4; i++) for (int j = 0; j < 5; j++) m += s.x[(i * 3 + ch) * 5 + j];
    m /= 20;
    for (int i = 0; i < 4; i++) for (int j = 0; j < 5; j++) {
      double d = s.x[(i * 3 + ch) * 5 + j] - m;
      v += d * d;
    }
    for (int i = 0; i < 4; i++) for (int j = 0; j < 5; j++) {
      int64_t o = (i * 3 + ch) * 5 + j;
      ref[o] = (s.x[o] - m) / sqrt(v / 20 + 1e-5) * s.sc[ch] + s.bi[ch];
    }
    ASSERT(fabs(s.sm[ch] - m) < 1e-6, "bn saved mean");
    ASSERT(fabs(s.si[ch] - 1 / sqrt(v / 20 + 1e-5)) < 1e-5, "bn saved invstd");
    ASSERT(fabs(s.rm[ch] - (rm0[ch] * 0.9 + m * 0.1)) < 1e-6, "bn running mean %g", s.rm[ch]);
    ASSERT(fabs(s.rv[ch] - (rv0[ch] * 0.9 + v / 19 * 0.1)) < 1e-6, "bn running var (unbiased) %g",
           s.rv[ch]);
  }
  double e = cmp(y, ref, nx);
  ASSERT(e < TOL_FWD, "bn fwd train: %.3g", e);
  snrt_bn_fwd_saved(&ctx, &s.p, s.x, s.sc, s.bi, s.sm, s.si, y2);
  ASSERT(!memcmp(y, y2, sizeof(float) * nx), "bn_fwd_saved is not bit-identical to the training y");
  snrt_bn_fwd_infer(&ctx, &s.p, s.x, s.sc, s.bi, s.rm, s.rv, y2);
  for (int64_t o = 0; o < nx; o++) {
    int ch = (int)(o / 5 % 3);
    ref[o] = (s.x[o] - s.rm[ch]) / sqrt(s.rv[ch] + 1e-5) * s.sc[ch] + s.bi[ch];
  }
  e = cmp(y2, ref, nx);
  ASSERT(e < TOL_FWD, "bn fwd infer: %.3g", e);
  snrt_bn_bwd(&ctx, &s.p, s.x, r, s.sc, s.sm, s.si, dx, dsc, dbi);
  fdcase f = {bn_fwd_f, y, nx, r, &s};
  FD_ASSERT("bn_bwd dx", fd_check(&f, s.x, nx, dx, 1e-2f));
  FD_ASSERT("bn_bwd dscale", fd_check(&f, s.sc, C, dsc, 1e-2f));
  FD_ASSERT("bn_bwd dbias", fd_check(&f, s.bi, C, dbi, 1e-2f));
  free(s.x); free(s.sc); free(s.bi); free(s.rm); free(s.rv); free(s.sm); free(s.si);
  free(y); free(y2); free(r); free(dx); free(dsc); free(dbi);
}

/* ---- LRN ------------------------------------------------------------------------- */

typedef struct lrn_st { snrt_lrn_t p; float *x; } lrn_st;
static void lrn_fwd_f(fdcase *f) {
  lrn_st *s = f->st;
  snrt_lrn_fwd(&ctx, &s->p, s->x, f->y);
}

static void test_lrn(void) {
  for (int size = 3; size <= 4; size++) {
    lrn_st s;
    s.p = (snrt_lrn_t){.n = 2, .c = 7, .hw = 3, .size = size, .alpha = 0.5f, .beta = 0.75f,
                       .bias = 1.5f};
    int64_t nx = 2 * 7 * 3;
    s.x = rbuf(nx, 0);
    float *y = buf(nx), *r = rbuf(nx, 0), *dx = buf(nx);
    double ref[42];
    snrt_lrn_fwd(&ctx, &s.p, s.x, y);
    int lo = (size - 1) / 2, hi = size - 1 - lo;   /* floor / ceil of (size-1)/2 */
    for (int i = 0; i < 2; i++)
      for (int c = 0; c < 7; c++)
        for (int j = 0; j < 3; j++) {
          double sq = 0;
          for (int cc = c - lo; cc <= c + hi; cc++)
            if (cc >= 0 && cc < 7) sq += (double)s.x[(i * 7 + cc) * 3 + j] * s.x[(i * 7 + cc) * 3 + j];
          int64_t o = (i * 7 + c) * 3 + j;
          ref[o] = s.x[o] / pow(1.5 + 0.5 / size * sq, 0.75);
        }
    double e = cmp(y, ref, nx);
    ASSERT(e < TOL_FWD, "lrn fwd size %d: %.3g", size, e);
    snrt_lrn_bwd(&ctx, &s.p, s.x, y, r, dx);
    ASSERT(canary_ok(dx, nx), "lrn bwd overrun");
    fdcase f = {lrn_fwd_f, y, nx, r, &s};
    FD_ASSERT("lrn_bwd", fd_check(&f, s.x, nx, dx, 1e-2f));
    free(s.x); free(y); free(r); free(dx);
  }
}
