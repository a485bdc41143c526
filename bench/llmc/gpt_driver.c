/* bench/llmc/gpt_driver.c — times llm.c's CPU GPT-2 training step for bench/gpt_speed.
 *
 * This file holds none of llm.c: it includes the user's own copy of llm.c's
 * train_gpt2.c at build time (bench/gpt_speed passes its path), leaves out that
 * file's main, and drives its public functions:
 *
 *   gcc -Ofast -march=native -fopenmp -DOMP -DTRAIN_GPT2_C='"/path/train_gpt2.c"' \
 *       bench/llmc/gpt_driver.c -lm -o gpt_driver
 *   ./gpt_driver CHECKPOINT TOKENS B T WARMUP STEPS
 *
 * CHECKPOINT is an llm.c GPT-2 checkpoint (bench/gpt_speed writes one from
 * examples/make_gpt.py's weights). TOKENS is raw int32: B*T inputs then B*T
 * targets. Each step is gpt2_forward, gpt2_zero_grad, gpt2_backward and
 * gpt2_update with AdamW (lr 1e-4, betas 0.9/0.999, eps 1e-8, weight decay
 * 0.01: torch.optim.AdamW's settings in bench/gpt_speed), on the same batch
 * every step. Prints, after the run, one "loss STEP VALUE" line per step (the
 * loss of that step's forward pass, before its update) and, last, "ms_per_step
 * VALUE": the mean wall time of the STEPS steps after the WARMUP ones (0 when
 * STEPS is 0, a run for the losses alone).
 */
#ifndef TRAIN_GPT2_C
#error "define TRAIN_GPT2_C as the quoted path of llm.c's train_gpt2.c"
#endif
#define TESTING            /* llm.c's own switch to leave out its main ... */
#define main llmc_main     /* ... and, for copies without that switch, rename it */
#include TRAIN_GPT2_C
#undef main

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    if (argc != 7) {
        fprintf(stderr, "usage: %s CHECKPOINT TOKENS B T WARMUP STEPS\n", argv[0]);
        return 2;
    }
    int B = atoi(argv[3]), T = atoi(argv[4]), warmup = atoi(argv[5]), steps = atoi(argv[6]);
    if (B <= 0 || T <= 0 || warmup < 0 || steps < 0 || warmup + steps == 0) {
        fprintf(stderr, "gpt_driver: bad B, T, WARMUP or STEPS\n");
        return 2;
    }
    size_t n = (size_t)B * T;
    int *tokens = (int *)malloc(2 * n * sizeof(int));
    float *losses = (float *)malloc((size_t)(warmup + steps) * sizeof(float));
    FILE *f = fopen(argv[2], "rb");
    if (!tokens || !losses || !f || fread(tokens, sizeof(int), 2 * n, f) != 2 * n) {
        fprintf(stderr, "gpt_driver: cannot read %zu int32 tokens from %s\n", 2 * n, argv[2]);
        return 1;
    }
    fclose(f);

    GPT2 model;
    gpt2_build_from_checkpoint(&model, argv[1]);
    if (T > model.config.max_seq_len) {
        fprintf(stderr, "gpt_driver: T %d exceeds the checkpoint's %d\n", T, model.config.max_seq_len);
        return 1;
    }
    double t0 = 0.0;
    for (int step = 0; step < warmup + steps; step++) {
        if (step == warmup) t0 = now_s();
        gpt2_forward(&model, tokens, tokens + n, B, T);
        gpt2_zero_grad(&model);
        gpt2_backward(&model);
        gpt2_update(&model, 1e-4f, 0.9f, 0.999f, 1e-8f, 0.01f, step + 1);
        losses[step] = model.mean_loss;
    }
    double ms = steps ? 1e3 * (now_s() - t0) / steps : 0.0;
    for (int step = 0; step < warmup + steps; step++) printf("loss %d %.9g\n", step, losses[step]);
    printf("ms_per_step %.6f\n", ms);
    gpt2_free(&model);
    free(losses);
    free(tokens);
    return 0;
}
