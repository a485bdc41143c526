/* bench/kernels.c — micro-benchmark of the CPU conv kernels on the conv
 * shapes of resnet18 at 32x32 (batch 64) and a small CNN: milliseconds for
 * forward, backward-data and backward-filter per layer. Build and run with
 * bench/kernels.sh, which also prints PyTorch's times for the same shapes.
 * Not a test: it asserts nothing. */
#include "snrt.h"
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>

static double now(void) { return omp_get_wtime(); }

int main(int argc, char **argv) {
  int n = argc > 1 ? atoi(argv[1]) : 64;
  /* c h k kh s p : resnet18 at 32x32 input, then a small CNN (28x28) */
  static const int L[][6] = {{3, 32, 64, 7, 2, 3},  {64, 8, 64, 3, 1, 1},  {64, 8, 128, 3, 2, 1},
                             {128, 4, 128, 3, 1, 1}, {64, 8, 128, 1, 2, 0}, {128, 4, 256, 3, 2, 1},
                             {256, 2, 256, 3, 1, 1}, {256, 2, 512, 3, 2, 1}, {512, 1, 512, 3, 1, 1},
                             {1, 28, 32, 3, 1, 1},   {32, 14, 64, 3, 1, 1}};
  double tot[3] = {0, 0, 0};
  printf("%-26s %9s %9s %9s\n", "layer (c,h,k,kh,s,p)", "fwd ms", "bwd_d ms", "bwd_f ms");
  for (size_t i = 0; i < sizeof L / sizeof L[0]; i++) {
    snrt_conv_t p = {.n = n, .c = L[i][0], .h = L[i][1], .w = L[i][1], .k = L[i][2],
                     .kh = L[i][3], .kw = L[i][3], .sh = L[i][4], .sw = L[i][4], .pt = L[i][5],
                     .pl = L[i][5], .dh = 1, .dw = 1, .group = 1, .ws_images = n};
    p.oh = p.ow = (p.h + 2 * p.pt - p.kh) / p.sh + 1;
    size_t nx = (size_t)n * p.c * p.h * p.w, ny = (size_t)n * p.k * p.oh * p.ow;
    size_t nw = (size_t)p.k * p.c * p.kh * p.kw, nws = snrt_conv_ws_bytes(&p) / 4 + 1;
    float *x = calloc(nx, 4), *y = calloc(ny, 4), *w = calloc(nw, 4), *ws = calloc(nws, 4);
    float *dx = calloc(nx, 4), *dw = calloc(nw, 4);
    for (size_t j = 0; j < nx; j++) x[j] = (float)(j % 7) * 0.1f;
    for (size_t j = 0; j < nw; j++) w[j] = (float)(j % 5) * 0.01f;
    double t[3];
    int reps = 5;
    for (int r = -1; r < reps; r++) {
      double t0 = now();
      snrt_conv_fwd(NULL, &p, x, w, NULL, y, ws);
      double t1 = now();
      snrt_conv_bwd_data(NULL, &p, y, w, dx, ws);
      double t2 = now();
      snrt_conv_bwd_filter(NULL, &p, x, y, dw, ws);
      double t3 = now();
      if (r == 0) t[0] = t[1] = t[2] = 1e9;
      if (r >= 0) {
        if (t1 - t0 < t[0]) t[0] = t1 - t0;
        if (t2 - t1 < t[1]) t[1] = t2 - t1;
        if (t3 - t2 < t[2]) t[2] = t3 - t2;
      }
    }
    char name[64];
    snprintf(name, sizeof name, "%d,%d,%d,%d,%d,%d", L[i][0], L[i][1], L[i][2], L[i][3], L[i][4], L[i][5]);
    printf("%-26s %9.2f %9.2f %9.2f\n", name, t[0] * 1e3, t[1] * 1e3, t[2] * 1e3);
    for (int j = 0; j < 3; j++) tot[j] += t[j];
    free(x); free(y); free(w); free(ws); free(dx); free(dw);
  }
  printf("%-26s %9.2f %9.2f %9.2f\n", "total", tot[0] * 1e3, tot[1] * 1e3, tot[2] * 1e3);
  return 0;
}
