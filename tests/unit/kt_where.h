/* kt_where.h — Where with a data condition (snrt_where3_*): forward against
 * a reference loop, both branch gradients against finite differences, over
 * broadcasting condition and branches. (Included by test_kernels.c.) */

typedef struct w3_st { snrt_where3_t p; uint8_t *c; float *a, *b; } w3_st;
static void w3_fwd_f(fdcase *f) {
  w3_st *s = f->st;
  snrt_where3_fwd(&ctx, &s->p, s->c, s->a, s->b, f->y);
}

/* Strides of a (right-aligned) shape sh of rank 4 in the out index space. */
static void w3_strides(const int64_t *out, const int64_t *sh, int64_t *s, int64_t *cnt) {
  int64_t st = 1;
  for (int d = 3; d >= 0; d--) {
    s[d] = sh[d] == 1 ? 0 : st;
    st *= sh[d];
    (void)out;
  }
  *cnt = st;
}

static void test_where3(void) {
  static const int64_t shapes[][3][4] = {
      /* cond, a, b */
      {{2, 3, 4, 5}, {2, 3, 4, 5}, {2, 3, 4, 5}},
      {{2, 1, 4, 5}, {1, 3, 1, 5}, {1, 1, 1, 1}},
      {{1, 1, 4, 1}, {2, 3, 4, 5}, {2, 1, 1, 5}},
  };
  for (int t = 0; t < 3; t++) {
    w3_st s;
    memset(&s.p, 0, sizeof s.p);
    s.p.rank = 4;
    int64_t nc, n = 1;
    for (int d = 0; d < 4; d++) {
      int64_t m = 1;
      for (int k = 0; k < 3; k++) m = shapes[t][k][d] > m ? shapes[t][k][d] : m;
      s.p.dims[d] = m;
      n *= m;
    }
    s.p.n = n;
    w3_strides(s.p.dims, shapes[t][0], s.p.sc, &nc);
    w3_strides(s.p.dims, shapes[t][1], s.p.sa, &s.p.na);
    w3_strides(s.p.dims, shapes[t][2], s.p.sb, &s.p.nb);
    s.c = malloc((size_t)nc);
    for (int64_t i = 0; i < nc; i++) s.c[i] = urand() < 0.5;
    s.a = rbuf(s.p.na, 0);
    s.b = rbuf(s.p.nb, 0);
    float *y = buf(n), *r = rbuf(n, 0), *da = buf(s.p.na), *db = buf(s.p.nb);
    double *ref = malloc(sizeof(double) * n);
    snrt_where3_fwd(&ctx, &s.p, s.c, s.a, s.b, y);
    for (int64_t i = 0; i < n; i++) {
      int64_t rem = i, oc = 0, oa = 0, ob = 0;
      for (int d = 3; d >= 0; d--) {
        int64_t id = rem % s.p.dims[d];
        rem /= s.p.dims[d];
        oc += id * s.p.sc[d], oa += id * s.p.sa[d], ob += id * s.p.sb[d];
      }
      ref[i] = s.c[oc] ? s.a[oa] : s.b[ob];
    }
    ASSERT(cmp(y, ref, n) == 0 && canary_ok(y, n), "where3 shape %d fwd", t);
    snrt_where3_bwd(&ctx, &s.p, s.c, r, da, db);
    ASSERT(canary_ok(da, s.p.na) && canary_ok(db, s.p.nb), "where3 bwd overrun");
    fdcase f = {w3_fwd_f, y, n, r, &s};
    FD_ASSERT("where3_bwd", fd_check(&f, s.a, s.p.na, da, 1e-2f));
    FD_ASSERT("where3_bwd", fd_check(&f, s.b, s.p.nb, db, 1e-2f));
    float *db2 = buf(s.p.nb);
    snrt_where3_bwd(&ctx, &s.p, s.c, r, NULL, db2);
    ASSERT(!memcmp(db, db2, sizeof(float) * s.p.nb), "where3 bwd with da NULL differs");
    free(db2);
    free(s.c); free(s.a); free(s.b); free(y); free(r); free(da); free(db); free(ref);
  }
}
