/* autodiff_internal.h — what train_build's files share (not for other
 * stages): autodiff.c's builders, and the hooks of dist_buckets.c (--dist)
 * and loss_scale.c (--precision fp16), which hold each parameter's update
 * back until after the backward pass. */
#ifndef SNC_AUTODIFF_INTERNAL_H
#define SNC_AUTODIFF_INTERNAL_H

#include "train.h"

/* autodiff.c */
extern const TrainOpts *train_opts;   /* train_build's options */
/* --zero 1: the optimizer-state shards train_add_update uses (-1: none). */
extern int train_zero_state[2];
int train_new_tensor(Graph *g, const char *base, TensorKind k, int dtype, int rank,
                     const int64_t *dims);
/* A node named FWD/suffix (fwd >= 0) or suffix; it produces `out`. */
int train_add_node(Graph *g, OpKind op, int fwd, const char *suffix, Phase ph, int nin,
                   const int *in, int nout, const int *out, void *p);
/* The optimizer update of parameter w (none when no gradient reaches it). */
void train_add_update(Graph *g, int w);

/* dist_buckets.c: per parameter whose gradient is final, then once after
 * the backward pass; reset at the start of train_build. */
void bucket_add(Graph *g, int w);
void bucket_updates(Graph *g);
void dist_buckets_reset(void);

/* loss_scale.c: the same for --precision fp16. */
void scaled_add(int w);
void scaled_updates(Graph *g);
void loss_scale_reset(void);

#endif /* SNC_AUTODIFF_INTERNAL_H */
