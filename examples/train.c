/*
 * train.c - data-parallel training in plain C with Chorus: softmax regression on synthetic data.
 * Rank 0 initialises the parameters and broadcasts them; each step every rank accumulates the
 * gradient of k micro-batches of its own data, the gradients are summed with chorus_allreduce
 * and averaged, and every rank applies the same update. At the end the ranks' parameters are
 * allgathered and compared bitwise, and rank 0 checks them against a serial reference.
 *   build/chorus-run -n 4 build/chorus-train-example [--steps N] [--micro K] [--batch M]
 */
#include <getopt.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "chorus.h"

#define NFEATURES 32
#define NCLASSES 4
#define NPARAMS (NCLASSES * NFEATURES + NCLASSES) /* W row-major, then b */
#define SAMPLES_PER_RANK 512
#define DATA_SEED 12345u
#define INIT_SEED 777u
#define REFERENCE_RTOL 1e-4 /* serial vs distributed: only the summation order differs */
#define MIN_ACCURACY 0.90

typedef struct {
  int steps;
  int micro_batches;   /* k: micro-batches accumulated per step */
  int micro_batch_size; /* m: samples per micro-batch */
  float lr;
  int log_every;
} options_t;

typedef struct {
  float x[SAMPLES_PER_RANK][NFEATURES];
  int label[SAMPLES_PER_RANK];
} dataset_t;

/* ---- error handling: every Chorus call is checked ---- */

static chorus_comm_t* g_comm; /* for the error message only */

static void check(chorus_status_t st, const char* what) {
  if (st >= 0) return;
  fprintf(stderr, "train: %s failed: %s (%s)\n", what, chorus_status_name(st),
          g_comm ? chorus_comm_last_error(g_comm) : chorus_status_str(st));
  exit(1);
}

/* ---- deterministic data: any rank can regenerate any rank's samples ---- */

static uint64_t splitmix64(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/* Uniform in [-1, 1), from a hash of (seed, a, b): no hidden state. */
static float uniform_pm1(uint32_t seed, uint32_t a, uint32_t b) {
  uint64_t h = splitmix64(((uint64_t)seed << 40) ^ ((uint64_t)a << 20) ^ b);
  return (float)((double)(h >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

static int true_label(const float* x) {
  int best = 0;
  float best_score = -INFINITY;
  for (int c = 0; c < NCLASSES; c++) {
    float score = uniform_pm1(DATA_SEED + 1, (uint32_t)c, NFEATURES) * 0.5f;
    for (int f = 0; f < NFEATURES; f++)
      score += uniform_pm1(DATA_SEED + 1, (uint32_t)c, (uint32_t)f) * x[f];
    if (score > best_score) best_score = score, best = c;
  }
  return best;
}

static void make_dataset(int rank, dataset_t* d) {
  for (int i = 0; i < SAMPLES_PER_RANK; i++) {
    uint32_t row = (uint32_t)(rank * SAMPLES_PER_RANK + i);
    for (int f = 0; f < NFEATURES; f++) d->x[i][f] = uniform_pm1(DATA_SEED, row, (uint32_t)f);
    d->label[i] = true_label(d->x[i]);
  }
}

/* ---- the model ---- */

static void init_params(float* params) {
  for (int p = 0; p < NPARAMS; p++) params[p] = 0.01f * uniform_pm1(INIT_SEED, 0, (uint32_t)p);
}

/* Softmax probabilities of one sample; returns the predicted class. */
static int forward(const float* params, const float* x, float* prob) {
  float max_logit = -INFINITY, sum = 0.0f;
  int best = 0;
  for (int c = 0; c < NCLASSES; c++) {
    float logit = params[NCLASSES * NFEATURES + c];
    for (int f = 0; f < NFEATURES; f++) logit += params[c * NFEATURES + f] * x[f];
    prob[c] = logit;
    if (logit > max_logit) max_logit = logit, best = c;
  }
  for (int c = 0; c < NCLASSES; c++) sum += prob[c] = expf(prob[c] - max_logit);
  for (int c = 0; c < NCLASSES; c++) prob[c] /= sum;
  return best;
}

/* grad += d(cross-entropy)/d(params) of one sample. */
static void accumulate_gradient(const float* params, const float* x, int label, float* grad) {
  float prob[NCLASSES];
  forward(params, x, prob);
  for (int c = 0; c < NCLASSES; c++) {
    float delta = prob[c] - (c == label ? 1.0f : 0.0f);
    for (int f = 0; f < NFEATURES; f++) grad[c * NFEATURES + f] += delta * x[f];
    grad[NCLASSES * NFEATURES + c] += delta;
  }
}

static int sample_index(const options_t* o, int step, int micro, int t) {
  return ((step * o->micro_batches + micro) * o->micro_batch_size + t) % SAMPLES_PER_RANK;
}

/* This rank's gradient sum over its k micro-batches of the step. */
static void local_gradient(const options_t* o, const dataset_t* d, const float* params, int step,
                           float* grad) {
  memset(grad, 0, sizeof(float) * NPARAMS);
  for (int micro = 0; micro < o->micro_batches; micro++)
    for (int t = 0; t < o->micro_batch_size; t++) {
      int i = sample_index(o, step, micro, t);
      accumulate_gradient(params, d->x[i], d->label[i], grad);
    }
}

static void apply_update(float* params, const float* grad_sum, float lr, int nsamples) {
  for (int p = 0; p < NPARAMS; p++) params[p] -= lr * (grad_sum[p] / (float)nsamples);
}

/* [loss sum, correct, count] of params on one dataset. */
static void evaluate(const float* params, const dataset_t* d, double stats[3]) {
  float prob[NCLASSES];
  stats[0] = stats[1] = stats[2] = 0.0;
  for (int i = 0; i < SAMPLES_PER_RANK; i++) {
    int predicted = forward(params, d->x[i], prob);
    stats[0] -= log((double)prob[d->label[i]] + 1e-12);
    stats[1] += predicted == d->label[i];
    stats[2] += 1.0;
  }
}

/* ---- distributed training ---- */

static double global_stats(chorus_comm_t* comm, const float* params, const dataset_t* d,
                           double* loss) {
  double stats[3];
  evaluate(params, d, stats);
  check(chorus_allreduce(stats, stats, 3, CHORUS_FLOAT64, CHORUS_SUM, comm), "allreduce stats");
  *loss = stats[0] / stats[2];
  return stats[1] / stats[2];
}

static double train(const options_t* o, chorus_comm_t* comm, int rank, int nranks,
                    const dataset_t* d, float* params) {
  float grad[NPARAMS];
  int samples_per_step = o->micro_batches * o->micro_batch_size * nranks;
  double comm_sec = 0.0;
  for (int step = 0; step < o->steps; step++) {
    local_gradient(o, d, params, step, grad);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    check(chorus_allreduce(grad, grad, NPARAMS, CHORUS_FLOAT32, CHORUS_SUM, comm),
          "allreduce gradients");
    clock_gettime(CLOCK_MONOTONIC, &t1);
    comm_sec += (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
    apply_update(params, grad, o->lr, samples_per_step);
    if (o->log_every > 0 && (step % o->log_every == 0 || step == o->steps - 1)) {
      double loss, acc = global_stats(comm, params, d, &loss);
      if (rank == 0) printf("step %4d  loss %.4f  accuracy %.2f%%\n", step, loss, acc * 100.0);
    }
  }
  return comm_sec;
}

/* The same training in one process over every rank's data: gradients summed in rank order. */
static void serial_reference(const options_t* o, int nranks, float* params) {
  dataset_t* all = malloc(sizeof(dataset_t) * (size_t)nranks);
  if (!all) {
    fprintf(stderr, "train: out of memory for the reference\n");
    exit(1);
  }
  for (int r = 0; r < nranks; r++) make_dataset(r, &all[r]);
  init_params(params);
  float grad[NPARAMS], total[NPARAMS];
  for (int step = 0; step < o->steps; step++) {
    memset(total, 0, sizeof(total));
    for (int r = 0; r < nranks; r++) {
      local_gradient(o, &all[r], params, step, grad);
      for (int p = 0; p < NPARAMS; p++) total[p] += grad[p];
    }
    apply_update(params, total, o->lr, o->micro_batches * o->micro_batch_size * nranks);
  }
  free(all);
}

/* 1 if every rank holds bit-identical parameters (allgather, then memcmp per rank). */
static int ranks_identical(chorus_comm_t* comm, int nranks, const float* params) {
  float* gathered = malloc(sizeof(float) * NPARAMS * (size_t)nranks);
  if (!gathered) {
    fprintf(stderr, "train: out of memory for the allgather\n");
    exit(1);
  }
  check(chorus_allgather(params, gathered, NPARAMS, CHORUS_FLOAT32, comm), "allgather params");
  int identical = 1;
  for (int r = 0; r < nranks; r++)
    if (memcmp(&gathered[(size_t)r * NPARAMS], params, sizeof(float) * NPARAMS) != 0) {
      fprintf(stderr, "train: parameters of rank %d differ from this rank's\n", r);
      identical = 0;
    }
  free(gathered);
  return identical;
}

static int matches_reference(const options_t* o, int nranks, const float* params) {
  float reference[NPARAMS];
  serial_reference(o, nranks, reference);
  double max_rel = 0.0;
  for (int p = 0; p < NPARAMS; p++) {
    double scale = fmax(fabs((double)reference[p]), 1e-3);
    max_rel = fmax(max_rel, fabs((double)params[p] - (double)reference[p]) / scale);
  }
  printf("max relative difference to the serial reference: %.3g (limit %.0e)\n", max_rel,
         REFERENCE_RTOL);
  return max_rel <= REFERENCE_RTOL;
}

static void parse_options(int argc, char** argv, options_t* o) {
  static const struct option longopts[] = {{"steps", required_argument, NULL, 's'},
                                            {"micro", required_argument, NULL, 'k'},
                                            {"batch", required_argument, NULL, 'm'},
                                            {"lr", required_argument, NULL, 'l'},
                                            {"log-every", required_argument, NULL, 'g'},
                                            {NULL, 0, NULL, 0}};
  *o = (options_t){.steps = 300, .micro_batches = 4, .micro_batch_size = 8, .lr = 0.5f,
                   .log_every = 50};
  int c;
  while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
    switch (c) {
      case 's': o->steps = atoi(optarg); break;
      case 'k': o->micro_batches = atoi(optarg); break;
      case 'm': o->micro_batch_size = atoi(optarg); break;
      case 'l': o->lr = strtof(optarg, NULL); break;
      case 'g': o->log_every = atoi(optarg); break;
      default:
        fprintf(stderr, "usage: %s [--steps N] [--micro K] [--batch M] [--lr LR] "
                        "[--log-every N]\n", argv[0]);
        exit(2);
    }
  }
  if (o->steps < 1 || o->micro_batches < 1 || o->micro_batch_size < 1 || !(o->lr > 0.0f)) {
    fprintf(stderr, "train: steps, micro, batch and lr must be positive\n");
    exit(2);
  }
}

int main(int argc, char** argv) {
  options_t o;
  parse_options(argc, argv, &o);
  chorus_comm_t* comm = NULL;
  check(chorus_comm_init_env(&comm, NULL), "chorus_comm_init_env");
  g_comm = comm;
  int rank, nranks;
  check(chorus_comm_rank(comm, &rank), "rank");
  check(chorus_comm_size(comm, &nranks), "size");

  dataset_t* data = malloc(sizeof(dataset_t));
  if (!data) return 1;
  make_dataset(rank, data);
  /* Only rank 0 initialises; the broadcast is what makes every rank start alike. */
  float params[NPARAMS] = {0};
  if (rank == 0) init_params(params);
  check(chorus_broadcast(params, params, NPARAMS, CHORUS_FLOAT32, 0, comm), "broadcast params");
  if (rank == 0)
    printf("train: %d ranks, %d steps of %d micro-batches x %d samples per rank\n", nranks,
           o.steps, o.micro_batches, o.micro_batch_size);

  double comm_sec = train(&o, comm, rank, nranks, data, params);
  double loss, accuracy = global_stats(comm, params, data, &loss);
  int failed = !ranks_identical(comm, nranks, params);
  if (rank == 0) {
    failed |= !matches_reference(&o, nranks, params);
    if (accuracy < MIN_ACCURACY) {
      fprintf(stderr, "train: accuracy %.3f is below %.2f\n", accuracy, MIN_ACCURACY);
      failed = 1;
    }
  }
  int any_failed = failed;
  check(chorus_allreduce(&failed, &any_failed, 1, CHORUS_INT32, CHORUS_MAX, comm),
        "allreduce result");
  if (rank == 0)
    printf("final loss %.4f, accuracy %.2f%%, allreduce time %.3f ms/step, parameters %s on "
           "all %d ranks: %s\n", loss, accuracy * 100.0, comm_sec * 1e3 / o.steps,
           any_failed ? "NOT identical or wrong" : "bit-identical", nranks,
           any_failed ? "FAIL" : "OK");
  free(data);
  check(chorus_comm_destroy(comm), "destroy");
  return any_failed ? 1 : 0;
}
