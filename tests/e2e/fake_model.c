/* fake_model.c — a hand-written stand-in for an emitted train.c, to test the
 * runtime's main loop (runtime/common) and the CPU device layer without the
 * compiler or the kernels.
 *
 * What it is: a 784 -> HIDDEN -> 10 MLP (ReLU, dropout 0.1 from the
 * counter-based generator, softmax cross-entropy, SGD with momentum 0.9) whose
 * steps are plain C loops. It exercises what an emitted program relies on:
 * the tensor table (PARAM with KAIMING, BIAS and FILE inits, STATE, OPT,
 * GRAD, LOSS, LOGITS), snrt_grad_ready, snrt_step (dropout continues across
 * --resume), snrt_dead, and the copy engine: the dropped-out hidden layer is
 * offloaded to the host arena, poisoned, and prefetched back before the
 * backward pass needs it (a missing wait shows up as NaN with --poison).
 *
 * What it is not: a kernel test. Build flags: -DFAKE_BATCH=N, -DFAKE_FP=X
 * (fingerprint), -DFAKE_HIDDEN=N, -DFAKE_EXTRA=BYTES. */
#include "snrt.h"

#include <math.h>
#include <string.h>

#ifndef FAKE_BATCH
#define FAKE_BATCH 64
#endif
#ifndef FAKE_FP
#define FAKE_FP 0x5eed1234abcd0001ull
#endif
#ifndef FAKE_EXTRA
#define FAKE_EXTRA 0   /* bytes added to the arena (allocation-failure test) */
#endif
#ifndef FAKE_HIDDEN
#define FAKE_HIDDEN 64
#endif

enum { B = FAKE_BATCH, D = 784, H = FAKE_HIDDEN, K = 10 };

#define AL(x) (((x) + SNRT_ALIGN - 1) / SNRT_ALIGN * SNRT_ALIGN)
/* Arena layout: offsets as a compiler would plan them (no reuse). */
enum {
  OFF_X = 0,
  OFF_Y = OFF_X + AL(B * D * 4),
  OFF_W1 = OFF_Y + AL(B * 4),
  OFF_B1 = OFF_W1 + AL(H * D * 4),
  OFF_W2 = OFF_B1 + AL(H * 4),
  OFF_B2 = OFF_W2 + AL(K * H * 4),
  OFF_GW1 = OFF_B2 + AL(K * 4),
  OFF_GB1 = OFF_GW1 + AL(H * D * 4),
  OFF_GW2 = OFF_GB1 + AL(H * 4),
  OFF_GB2 = OFF_GW2 + AL(K * H * 4),
  OFF_MW1 = OFF_GB2 + AL(K * 4),
  OFF_MB1 = OFF_MW1 + AL(H * D * 4),
  OFF_MW2 = OFF_MB1 + AL(H * 4),
  OFF_MB2 = OFF_MW2 + AL(K * H * 4),
  OFF_LOSS = OFF_MB2 + AL(K * 4),
  OFF_LOGITS = OFF_LOSS + AL(4),
  OFF_HMEAN = OFF_LOGITS + AL(B * K * 4),
  OFF_H = OFF_HMEAN + AL(H * 4),        /* hidden after ReLU */
  OFF_DROP = OFF_H + AL(B * H * 4),      /* after dropout (offloaded) */
  OFF_DLOG = OFF_DROP + AL(B * H * 4),
  OFF_DH = OFF_DLOG + AL(B * K * 4),
  ARENA = OFF_DH + AL(B * H * 4),
};

#define T(name, kind, dtype, rank, d0, d1, d2, d3, nb, off, init, fan, fo, g, o0) \
  {name, kind, dtype, rank, {d0, d1, d2, d3}, nb, off, -1, init, fan, fo, g, {o0, -1}}

static const snrt_tensor tensors[] = {
    T("input", SNRT_T_INPUT, SNRT_F32, 4, B, 1, 28, 28, B * D * 4, OFF_X, SNRT_INIT_NONE, 0, 0, -1, -1),
    T("label", SNRT_T_LABEL, SNRT_I32, 1, B, 0, 0, 0, B * 4, OFF_Y, SNRT_INIT_NONE, 0, 0, -1, -1),
    T("fc1.weight", SNRT_T_PARAM, SNRT_F32, 2, H, D, 0, 0, H * D * 4, OFF_W1, SNRT_INIT_KAIMING, D, 0, 6, 10),
    T("fc1.bias", SNRT_T_PARAM, SNRT_F32, 1, H, 0, 0, 0, H * 4, OFF_B1, SNRT_INIT_BIAS, D, 0, 7, 11),
    T("fc2.weight", SNRT_T_PARAM, SNRT_F32, 2, K, H, 0, 0, K * H * 4, OFF_W2, SNRT_INIT_FILE, H, 0, 8, 12),
    T("fc2/bias:0", SNRT_T_PARAM, SNRT_F32, 1, K, 0, 0, 0, K * 4, OFF_B2, SNRT_INIT_BIAS, H, 0, 9, 13),
    T("grad_fc1.weight", SNRT_T_GRAD, SNRT_F32, 2, H, D, 0, 0, H * D * 4, OFF_GW1, SNRT_INIT_NONE, 0, 0, -1, -1),
    T("grad_fc1.bias", SNRT_T_GRAD, SNRT_F32, 1, H, 0, 0, 0, H * 4, OFF_GB1, SNRT_INIT_NONE, 0, 0, -1, -1),
    T("grad_fc2.weight", SNRT_T_GRAD, SNRT_F32, 2, K, H, 0, 0, K * H * 4, OFF_GW2, SNRT_INIT_NONE, 0, 0, -1, -1),
    T("grad_fc2.bias", SNRT_T_GRAD, SNRT_F32, 1, K, 0, 0, 0, K * 4, OFF_GB2, SNRT_INIT_NONE, 0, 0, -1, -1),
    T("mom_fc1.weight", SNRT_T_OPT, SNRT_F32, 2, H, D, 0, 0, H * D * 4, OFF_MW1, SNRT_INIT_ZERO, 0, 0, -1, -1),
    T("mom_fc1.bias", SNRT_T_OPT, SNRT_F32, 1, H, 0, 0, 0, H * 4, OFF_MB1, SNRT_INIT_ZERO, 0, 0, -1, -1),
    T("mom_fc2.weight", SNRT_T_OPT, SNRT_F32, 2, K, H, 0, 0, K * H * 4, OFF_MW2, SNRT_INIT_ZERO, 0, 0, -1, -1),
    T("mom_fc2.bias", SNRT_T_OPT, SNRT_F32, 1, K, 0, 0, 0, K * 4, OFF_MB2, SNRT_INIT_ZERO, 0, 0, -1, -1),
    T("loss", SNRT_T_LOSS, SNRT_F32, 0, 0, 0, 0, 0, 4, OFF_LOSS, SNRT_INIT_NONE, 0, 0, -1, -1),
    T("logits", SNRT_T_LOGITS, SNRT_F32, 2, B, K, 0, 0, B * K * 4, OFF_LOGITS, SNRT_INIT_NONE, 0, 0, -1, -1),
    T("hidden_mean", SNRT_T_STATE, SNRT_F32, 1, H, 0, 0, 0, H * 4, OFF_HMEAN, SNRT_INIT_ZERO, 0, 0, -1, -1),
};

#define F(off) ((float *)(a + (off)))

static void forward(char *a) {
  const float *x = F(OFF_X), *w1 = F(OFF_W1), *b1 = F(OFF_B1);
  float *h = F(OFF_H);
  for (int i = 0; i < B; i++)
    for (int j = 0; j < H; j++) {
      float s = b1[j];
      const float *xr = x + (long)i * D, *wr = w1 + (long)j * D;
      for (int k = 0; k < D; k++) s += xr[k] * wr[k];
      h[i * H + j] = s > 0 ? s : 0;
    }
}

static void output(const float *in, char *a) {
  const float *w2 = F(OFF_W2), *b2 = F(OFF_B2);
  float *lg = F(OFF_LOGITS);
  for (int i = 0; i < B; i++)
    for (int k = 0; k < K; k++) {
      float s = b2[k];
      for (int j = 0; j < H; j++) s += in[i * H + j] * w2[k * H + j];
      lg[i * K + k] = s;
    }
}

static void sgd(snrt_ctx *c, int param, float *w, const float *g, float *m, int n) {
  snrt_grad_ready(c, param, g, n);
  float lr = snrt_lr(c);
  for (int i = 0; i < n; i++) {
    m[i] = 0.9f * m[i] + g[i];
    w[i] -= lr * m[i];
  }
}

static void train_step(snrt_ctx *c) {
  char *a = snrt_arena(c);
  const int32_t *y = (const int32_t *)(a + OFF_Y);
  forward(a);
  float *h = F(OFF_H), *dr = F(OFF_DROP), *lg = F(OFF_LOGITS), *dl = F(OFF_DLOG), *dh = F(OFF_DH);
  uint64_t seed = snrt_seed(c), step = (uint64_t)snrt_step(c);
  for (int i = 0; i < B * H; i++)
    dr[i] = snrt_uniform(seed, step, 1, (uint64_t)i) < 0.1f ? 0.0f : h[i] / 0.9f;
  output(dr, a);
  /* The dropped-out activations sit idle until backward: offload them. */
  snrt_offload(c, 0, OFF_DROP, B * H * 4, 0);
  float loss = 0;
  for (int i = 0; i < B; i++) {
    float mx = lg[i * K];
    for (int k = 1; k < K; k++) mx = fmaxf(mx, lg[i * K + k]);
    float s = 0;
    for (int k = 0; k < K; k++) s += expf(lg[i * K + k] - mx);
    loss += mx + logf(s) - lg[i * K + y[i]];
    for (int k = 0; k < K; k++) dl[i * K + k] = (expf(lg[i * K + k] - mx) / s - (k == y[i])) / B;
  }
  *F(OFF_LOSS) = loss / B;
  snrt_wait(c, 0);
  snrt_dead(c, OFF_DROP, B * H * 4);
  /* dH = dlogits W2, through dropout and ReLU. */
  const float *w2 = F(OFF_W2);
  for (int i = 0; i < B; i++)
    for (int j = 0; j < H; j++) {
      float s = 0;
      for (int k = 0; k < K; k++) s += dl[i * K + k] * w2[k * H + j];
      int kept = snrt_uniform(seed, step, 1, (uint64_t)(i * H + j)) >= 0.1f;
      dh[i * H + j] = kept && h[i * H + j] > 0 ? s / 0.9f : 0.0f;
    }
  snrt_prefetch(c, OFF_DROP, 0, B * H * 4, 1);
  snrt_wait(c, 1);
  float *gw2 = F(OFF_GW2), *gb2 = F(OFF_GB2), *gw1 = F(OFF_GW1), *gb1 = F(OFF_GB1);
  for (int k = 0; k < K; k++) {
    float sb = 0;
    for (int i = 0; i < B; i++) sb += dl[i * K + k];
    gb2[k] = sb;
    for (int j = 0; j < H; j++) {
      float s = 0;
      for (int i = 0; i < B; i++) s += dl[i * K + k] * dr[i * H + j];
      gw2[k * H + j] = s;
    }
  }
  sgd(c, 4, F(OFF_W2), gw2, F(OFF_MW2), K * H);
  sgd(c, 5, F(OFF_B2), gb2, F(OFF_MB2), K);
  const float *x = F(OFF_X);
  for (int j = 0; j < H; j++) {
    float sb = 0;
    for (int i = 0; i < B; i++) sb += dh[i * H + j];
    gb1[j] = sb;
    float *g = gw1 + (long)j * D;
    for (int k = 0; k < D; k++) g[k] = 0;
    for (int i = 0; i < B; i++) {
      float d = dh[i * H + j];
      if (d == 0) continue;
      const float *xr = x + (long)i * D;
      for (int k = 0; k < D; k++) g[k] += d * xr[k];
    }
  }
  sgd(c, 2, F(OFF_W1), gw1, F(OFF_MW1), H * D);
  sgd(c, 3, F(OFF_B1), gb1, F(OFF_MB1), H);
  /* A running statistic, like BN's: persistent state that is not trained. */
  float *hm = F(OFF_HMEAN);
  for (int j = 0; j < H; j++) {
    float s = 0;
    for (int i = 0; i < B; i++) s += h[i * H + j];
    hm[j] = 0.9f * hm[j] + 0.1f * s / B;
  }
}

static void eval_step(snrt_ctx *c) {
  char *a = snrt_arena(c);
  forward(a);
  output(F(OFF_H), a);
}

const snrt_model snrt_the_model = {
    .name = "fake_mlp.onnx",
    .fingerprint = FAKE_FP,
    .batch = B,
    .arena_bytes = (int64_t)ARENA + FAKE_EXTRA,
    .host_bytes = B * H * 4,
    .ntensors = (int)(sizeof tensors / sizeof tensors[0]),
    .tensors = tensors,
    .input = 0,
    .label = 1,
    .loss = 14,
    .logits = 15,
    .classes = K,
    .loss_kind = SNRT_LOSS_SOFTMAX_CE,
    .opt_kind = SNRT_OPT_SGD,
    .lr = 0.05f,
    .policy = "offload",
    .train_step = train_step,
    .eval_step = eval_step,
};
