/* plan_review.h — what the review printers (plan_print.c, plan_html.c) derive
 * from a Plan: each instance's category in the memory chart, each tensor's
 * decision (kept, recomputed, offloaded), the peak step, and per-step bytes by
 * category. One analysis, two printers: the text plan and the page agree. */
#ifndef PLAN_REVIEW_H
#define PLAN_REVIEW_H

#include "review.h"

/* Chart categories, bottom to top. */
typedef enum { CAT_PERSISTENT, CAT_ACT, CAT_GRAD, CAT_RECOMPUTED, CAT_PREFETCHED,
               CAT_WORKSPACE, CAT_COUNT } Category;
extern const char *const cat_name[CAT_COUNT];   // legend labels
extern const char *const cat_key[CAT_COUNT];    // css class suffixes

typedef enum { DEC_KEPT, DEC_RECOMPUTED, DEC_OFFLOADED } Decision;
const char *decision_name(Decision d);

/* One copy on the copy stream (an SK_OFFLOAD or SK_PREFETCH step). */
typedef struct Copy {
  int step;                // the step issuing it
  bool prefetch;           // false: offload (device -> host)
  int tensor;              // IR tensor copied (-1: unknown)
  int64_t bytes;
  int until;               // offload: last step of the device copy; prefetch: first reader
} Copy;

typedef struct Review {
  int T;                   // steps
  int peak;                // the step of peak live bytes
  int first_bwd;           // first step after the forward pass (the loss), T if none
  Category *cat;           // per instance
  int *writer_kind;        // per instance: StepKind of the step writing it (-1: loader/none)
  int64_t *by_cat;         // [step * CAT_COUNT + c]: live bytes of category c at the step
  Decision *dec;           // per tensor
  int *recomputes;         // per tensor: number of recompute instances
  int *carried;            // per tensor: the carrier step that rebuilds it (-1: none)
  int *offload_step;       // per tensor: step of its (first) offload, -1
  int *prefetch_step;      // per tensor: step of its (first) prefetch, -1
  int *next_use;           // per tensor: first step reading its prefetched copy, -1
  int *copies_in;          // per tensor: prefetches (copies to the device)
  int *copies_back;        // per tensor: offloads (copies to the host)
  int *last_back;          // per tensor: step of its last offload, -1
  Copy *copies;
  int ncopies;
} Review;

Review *review_build(const Graph *g, const Plan *pl);
void review_free(Review *rv);
/* Why a tensor was recomputed or offloaded, in words (static buffer). */
const char *review_reason(const Graph *g, const Plan *pl, const Review *rv, int tensor);
/* The step's op and node for people: "Conv /features/0/Conv" ("copy NAME" for copies). */
const char *review_step_op(const Graph *g, const Plan *pl, int step);
const char *review_step_node(const Graph *g, const Plan *pl, int step);
/* --precision bf16|fp16: the float32 working copies of 16-bit steps (in their
 * workspaces, convert.c): the largest step's bytes (returned), that step, the
 * steps that have copies and their bytes summed over the training steps. */
typedef struct ConvertStats {
  int64_t max;
  int at;                  // -1: no step converts
  int steps;
  int64_t total;
} ConvertStats;
ConvertStats review_convert(const Plan *pl);
/* Instances live at step s, largest first; returns the count (*out malloc'ed). */
int review_live_at(const Plan *pl, int s, int **out);

#endif
