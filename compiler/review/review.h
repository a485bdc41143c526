/* review.h — the plan printers. */
#ifndef SNC_REVIEW_H
#define SNC_REVIEW_H

#include "../plan/plan.h"

/* plan_print.c */
const char *plan_note(const Plan *pl);   /* what auto chose and why; NULL otherwise */
void plan_print_text(const Graph *g, const Plan *pl, FILE *f);
void plan_print_summary(const Graph *g, const Plan *pl, FILE *f);
void plan_print_json(const Graph *g, const Plan *pl, FILE *f);
/* plan_html.c */
void plan_print_html(const Graph *g, const Plan *pl, FILE *f);
/* plan_diff.c: returns the exit code */
int plan_diff(const char *a_json, const char *b_json, FILE *f);

#endif /* SNC_REVIEW_H */
