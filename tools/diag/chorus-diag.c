/*
 * chorus-diag - what Chorus sees and whether it works: every CHORUS_* parameter with its
 * default, current value and meaning; the algorithm registry; and, under chorus-run, the
 * topology (hosts, local ranks, transport per peer), an all-pairs link matrix (latency and
 * bandwidth, slow links flagged, JSON and an SVG heatmap) and a one-shot check of every
 * collective with verified results.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "algo/algo.h"
#include "coll/tune.h"
#include "chorus.h"
#include "core/comm.h"
#include "core/param.h"

static void usage(FILE* out) {
  fprintf(out,
          "usage: chorus-diag [--version] [--params] [--algos]\n"
          "       chorus-run -n N chorus-diag [--topo] [--links [--bytes N] [--json FILE] [--svg FILE]] [--check]\n"
          "                                   [--tune FILE]\n"
          "  --version  library version and build\n"
          "  --params   every CHORUS_* variable: default, current value, meaning\n"
          "  --algos    the algorithm registry (names accepted by CHORUS_ALGO)\n"
          "  --topo     hosts, local ranks and the transport to each peer (needs a launcher)\n"
          "  --links    all-pairs latency and bandwidth; links under half the median are flagged\n"
          "  --check    every collective once, results verified on every rank\n"
          "  --tune F   measures the intra-host and inter-host links (the pairs of the probe at creation;\n"
          "             on 3 hosts or more also every host's first rank sending to the next at once)\n"
          "             and writes F for CHORUS_TUNE=F\n");
}

static double now_sec(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- local reports ---- */

static void print_params(void) {
  printf("%-30s %-10s %-16s %s\n", "variable", "default", "current", "meaning");
  for (int i = 0; i < CHORUS_PARAM_COUNT; i++) {
    const chorus_param_info_t* p = &chorus__params[i];
    char var[64], current[64] = "(default)";
    snprintf(var, sizeof(var), "CHORUS_%s", p->name);
    const char* v = getenv(var);
    if (v && *v) {
      snprintf(current, sizeof(current), "%s", v);
      int64_t parsed;
      if (p->is_int && chorus__param_int((chorus_param_id_t)i, &parsed, NULL, 0) < 0)
        snprintf(current, sizeof(current), "%s (INVALID)", v);
    }
    printf("%-30s %-10s %-16s %s\n", var, p->def[0] ? p->def : "\"\"", current, p->doc);
  }
}

/* Every name CHORUS_ALGO accepts, inner engines of two-level algorithms included ("hier/rhd"),
 * so that scripts can force each in turn. */
static void print_algos(void) {
  printf("%-16s %-14s %s\n", "collective", "algorithm", "description");
  for (size_t i = 0; i < chorus__nalgos; i++) {
    const chorus_algo_t* a = chorus__algos[i];
    printf("%-16s %-14s %s\n", chorus__coll_name(a->coll), a->name, a->desc);
    for (size_t j = 0; a->sub_name && a->sub_name(j); j++) {
      char name[48];
      snprintf(name, sizeof(name), "%s/%s", a->name, a->sub_name(j));
      printf("%-16s %-14s %s, its inner choice forced to %s\n", chorus__coll_name(a->coll), name, a->name, a->sub_name(j));
    }
  }
}

/* ---- collective reports ---- */

#define CHECK(call)                                                                       \
  do {                                                                                    \
    chorus_status_t st_ = (call);                                                         \
    if (st_ != CHORUS_OK) {                                                               \
      fprintf(stderr, "chorus-diag: %s failed: %s: %s\n", #call, chorus_status_name(st_), \
              chorus_comm_last_error(comm));                                              \
      exit(1);                                                                            \
    }                                                                                     \
  } while (0)

typedef struct {
  int32_t rank, local_rank, local_size, pid;
  char host[64];
  char addr[64];
  char transports[112]; /* one letter per peer: s(hm), t(cp), . (itself) */
  char tcp_cc[16];      /* what its TCP sockets' congestion control is ("-": none) */
} topo_rec_t;

static void report_topo(chorus_comm_t* comm, int rank, int n) {
  topo_rec_t me = {.rank = rank, .pid = (int32_t)getpid()};
  chorus_comm_local_rank(comm, &me.local_rank);
  chorus_comm_local_size(comm, &me.local_size);
  snprintf(me.host, sizeof(me.host), "%s", chorus__comm_peer_host(comm, rank));
  snprintf(me.addr, sizeof(me.addr), "%s", chorus__comm_peer_addr(comm, rank));
  for (int p = 0; p < n && p < (int)sizeof(me.transports) - 1; p++)
    me.transports[p] = p == rank ? '.' : chorus__comm_peer_transport(comm, p)[0];
  chorus__comm_tcp_cc(comm, me.tcp_cc, sizeof(me.tcp_cc));
  if (!me.tcp_cc[0]) snprintf(me.tcp_cc, sizeof(me.tcp_cc), "-");
  topo_rec_t* all = rank == 0 ? calloc((size_t)n, sizeof(*all)) : NULL;
  CHECK(chorus_gather(&me, all, sizeof(me), CHORUS_UINT8, 0, comm));
  if (rank != 0) return;
  int hosts = 0;
  chorus_comm_host_count(comm, &hosts);
  printf("# %d ranks on %d host(s); transport to peer p: s = shared memory, t = tcp, . = itself; tcp cc: the\n"
         "# TCP sockets' congestion control (CHORUS_SOCKET_CC; bbr without an fq qdisc paces in the kernel)\n", n, hosts);
  printf("%5s %-24s %6s %6s %8s %-22s %-8s %s\n", "rank", "host", "local", "of", "pid", "listens on", "tcp cc",
         "transport per peer");
  for (int r = 0; r < n; r++)
    printf("%5d %-24s %6d %6d %8d %-22s %-8s %s\n", all[r].rank, all[r].host, all[r].local_rank,
           all[r].local_size, all[r].pid, all[r].addr, all[r].tcp_cc, all[r].transports);
  free(all);
}

static int cmp_double(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

/* One direction of one link: half round-trip latency and streaming bandwidth from src to dst. */
static void measure_link(chorus_comm_t* comm, int rank, int src, int dst, size_t bytes, char* buf,
                         double* lat_us, double* gbps) {
  const int pings = 50, streams = 4;
  char token[8] = {0};
  double t0 = now_sec();
  for (int i = 0; i < pings; i++) {
    if (rank == src) {
      CHECK(chorus_send(token, 8, CHORUS_UINT8, dst, comm));
      CHECK(chorus_recv(token, 8, CHORUS_UINT8, dst, comm));
    } else {
      CHECK(chorus_recv(token, 8, CHORUS_UINT8, src, comm));
      CHECK(chorus_send(token, 8, CHORUS_UINT8, src, comm));
    }
  }
  *lat_us = (now_sec() - t0) / pings / 2 * 1e6;
  t0 = now_sec();
  for (int i = 0; i < streams; i++) {
    if (rank == src) CHECK(chorus_send(buf, bytes, CHORUS_UINT8, dst, comm));
    else CHECK(chorus_recv(buf, bytes, CHORUS_UINT8, src, comm));
  }
  if (rank == src) CHECK(chorus_recv(token, 1, CHORUS_UINT8, dst, comm));
  else CHECK(chorus_send(token, 1, CHORUS_UINT8, src, comm));
  *gbps = (double)bytes * streams / (now_sec() - t0) / 1e9;
}

static void write_json(const char* path, int n, const double* lat, const double* bw, double median) {
  FILE* f = fopen(path, "w");
  if (!f) {
    perror(path);
    return;
  }
  fprintf(f, "{\"nranks\": %d, \"median_gbps\": %.4f, \"links\": [", n, median);
  int first = 1;
  for (int i = 0; i < n; i++)
    for (int j = 0; j < n; j++) {
      if (i == j) continue;
      fprintf(f, "%s\n  {\"src\": %d, \"dst\": %d, \"latency_us\": %.2f, \"gbps\": %.4f, \"slow\": %s}",
              first ? "" : ",", i, j, lat[i * n + j], bw[i * n + j], bw[i * n + j] < median / 2 ? "true" : "false");
      first = 0;
    }
  fprintf(f, "\n]}\n");
  fclose(f);
}

/* A heatmap of bandwidth: darker is faster, slow links outlined in red. */
static void write_svg(const char* path, int n, const double* bw, double median) {
  FILE* f = fopen(path, "w");
  if (!f) {
    perror(path);
    return;
  }
  const int cell = 48, margin = 60;
  int size = margin + n * cell + 20;
  double maxbw = 0;
  for (int i = 0; i < n * n; i++) maxbw = bw[i] > maxbw ? bw[i] : maxbw;
  fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" font-family=\"sans-serif\" font-size=\"11\">\n",
          size, size + 20);
  fprintf(f, "<text x=\"4\" y=\"14\">bandwidth GB/s, row = sender, column = receiver</text>\n");
  for (int i = 0; i < n; i++) {
    fprintf(f, "<text x=\"%d\" y=\"%d\">%d</text>\n", margin - 24, margin + i * cell + cell / 2 + 4, i);
    fprintf(f, "<text x=\"%d\" y=\"%d\">%d</text>\n", margin + i * cell + cell / 2 - 4, margin - 8, i);
    for (int j = 0; j < n; j++) {
      double v = bw[i * n + j];
      int shade = i == j ? 230 : 230 - (int)(200.0 * (maxbw > 0 ? v / maxbw : 0));
      int slow = i != j && v < median / 2;
      fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"rgb(%d,%d,255)\" stroke=\"%s\" stroke-width=\"%d\"/>\n",
              margin + j * cell, margin + i * cell, cell, cell, shade, shade, slow ? "red" : "white", slow ? 3 : 1);
      if (i != j)
        fprintf(f, "<text x=\"%d\" y=\"%d\" fill=\"%s\">%.2f</text>\n", margin + j * cell + 6,
                margin + i * cell + cell / 2 + 4, shade < 120 ? "white" : "black", v);
    }
  }
  fprintf(f, "</svg>\n");
  fclose(f);
}

/* The cost model's figures, measured longer than the probe at creation does, into path: the
 * pairs the probe takes (the first two ranks of the first host that has two; host 0's and host
 * 1's first ranks), one pair after the other, then on 3 hosts or more the ring figure (every
 * host's first rank sending to the next at once; the slowest host's exchange sets it). */
static void write_tune(chorus_comm_t* comm, int rank, const char* path) {
  const chorus_topo_t* topo = &comm->topo;
  int pair[2][2]; /* intra, inter */
  chorus__tune_probe_pairs(topo, pair[0], pair[1]);
  double mine[4] = {0, 0, 0, 0}, links[4]; /* intra alpha, bandwidth, inter alpha, bandwidth */
  for (int i = 0; i < 2; i++) {
    if (pair[i][0] >= 0 && (rank == pair[i][0] || rank == pair[i][1])) {
      chorus_link_model_t m;
      int lead = i == 0 ? -1 : chorus__tune_inter_lead(topo, rank, pair[i][0]); /* as the probe's pair */
      CHECK(chorus__tune_measure(comm, rank == pair[i][0] ? pair[i][1] : pair[i][0], 50, 1u << 20, lead, &m));
      if (rank == pair[i][0]) mine[2 * i] = m.alpha_us, mine[2 * i + 1] = m.bytes_per_us;
    }
    CHECK(chorus_barrier(comm)); /* one pair at a time */
  }
  CHECK(chorus_allreduce(mine, links, 4, CHORUS_FLOAT64, CHORUS_MAX, comm));
  double ring_us = 0.0, slowest_us = 0.0;
  int ring = topo->nhosts >= 3;
  if (ring && topo->local_of[rank] == 0) CHECK(chorus__tune_ring_us(comm, 1u << 20, 10, &ring_us));
  if (ring) CHECK(chorus_allreduce(&ring_us, &slowest_us, 1, CHORUS_FLOAT64, CHORUS_MAX, comm));
  double ring_bw = ring ? chorus__tune_bytes_per_us(1u << 20, slowest_us, links[2]) : 0.0;
  if (rank != 0) return;
  FILE* f = fopen(path, "w");
  if (!f) {
    perror(path);
    exit(1);
  }
  fprintf(f, "# chorus-diag --tune: link figures for CHORUS_TUNE=%s (level alpha_us bytes_per_us)\n", path);
  if (pair[0][0] >= 0) fprintf(f, "intra %.3f %.1f\n", links[0], links[1]);
  if (pair[1][0] >= 0) fprintf(f, "inter %.3f %.1f\n", links[2], links[3]);
  if (ring) fprintf(f, "inter_ring %.3f %.1f\n", links[2], ring_bw);
  fclose(f);
  printf("# links written to %s:", path);
  if (pair[0][0] >= 0) printf(" intra %.1f us + %.0f B/us (ranks %d-%d)", links[0], links[1], pair[0][0], pair[0][1]);
  if (pair[1][0] >= 0) printf(" inter %.1f us + %.0f B/us (ranks %d-%d)", links[2], links[3], pair[1][0], pair[1][1]);
  if (ring) printf(", %.0f B/us in a ring of %d hosts", ring_bw, topo->nhosts);
  printf("\n");
}

static void report_links(chorus_comm_t* comm, int rank, int n, size_t bytes, const char* json, const char* svg) {
  double *lat = calloc((size_t)n * n, sizeof(double)), *bw = calloc((size_t)n * n, sizeof(double));
  char* buf = malloc(bytes);
  memset(buf, 1, bytes);
  int npairs = n * (n - 1), done = 0, tty = isatty(2);
  for (int src = 0; src < n; src++)
    for (int dst = 0; dst < n; dst++) {
      if (src == dst) continue;
      if (rank == src || rank == dst)
        measure_link(comm, rank, src, dst, bytes, buf, &lat[src * n + dst], &bw[src * n + dst]);
      if (rank != src) lat[src * n + dst] = bw[src * n + dst] = 0; /* src's figures count */
      CHECK(chorus_barrier(comm));
      if (rank == 0 && tty) fprintf(stderr, "\rchorus-diag: measuring links %d/%d", ++done, npairs);
    }
  if (rank == 0 && tty) fprintf(stderr, "\n");
  CHECK(chorus_allreduce(lat, lat, (size_t)n * n, CHORUS_FLOAT64, CHORUS_MAX, comm));
  CHECK(chorus_allreduce(bw, bw, (size_t)n * n, CHORUS_FLOAT64, CHORUS_MAX, comm));
  if (rank == 0) {
    double* sorted = malloc(sizeof(double) * (size_t)npairs);
    int k = 0;
    for (int i = 0; i < n * n; i++)
      if (i / n != i % n) sorted[k++] = bw[i];
    qsort(sorted, (size_t)k, sizeof(double), cmp_double);
    double median = k ? (k % 2 ? sorted[k / 2] : (sorted[k / 2 - 1] + sorted[k / 2]) / 2) : 0;
    free(sorted);
    printf("# latency (us, half round trip of 8 B), row = sender\n%6s", "");
    for (int j = 0; j < n; j++) printf("%9d", j);
    printf("\n");
    for (int i = 0; i < n; i++) {
      printf("%6d", i);
      for (int j = 0; j < n; j++) i == j ? printf("%9s", "-") : printf("%9.1f", lat[i * n + j]);
      printf("\n");
    }
    printf("# bandwidth (GB/s, %zu-byte messages), row = sender; * = under half the median %.2f\n%6s", bytes, median, "");
    for (int j = 0; j < n; j++) printf("%9d", j);
    printf("\n");
    int slow = 0;
    for (int i = 0; i < n; i++) {
      printf("%6d", i);
      for (int j = 0; j < n; j++) {
        if (i == j) {
          printf("%9s", "-");
          continue;
        }
        int flag = bw[i * n + j] < median / 2;
        slow += flag;
        printf("%8.2f%s", bw[i * n + j], flag ? "*" : " ");
      }
      printf("\n");
    }
    printf("# %d slow link(s)\n", slow);
    if (json) write_json(json, n, lat, bw, median);
    if (svg) write_svg(svg, n, bw, median);
  }
  free(lat);
  free(bw);
  free(buf);
}

/* Every collective once on int32 data; rank 0 prints one line per collective. */
static void report_check(chorus_comm_t* comm, int rank, int n) {
  const size_t count = 1000;
  int32_t *in = malloc(count * (size_t)n * 4), *out = malloc(count * (size_t)n * 4);
  const char* names[] = {"allreduce", "broadcast", "reduce",  "allgather", "reduce_scatter",
                         "alltoall",  "gather",    "scatter", "sendrecv",  "barrier"};
  int failed_total = 0;
  for (int c = 0; c < 10; c++) {
    for (size_t i = 0; i < count * (size_t)n; i++) in[i] = (int32_t)(rank * 1000 + (int)(i % 1000));
    memset(out, 0xff, count * (size_t)n * 4);
    double t0 = now_sec();
    chorus_status_t st = CHORUS_OK;
    int bad = 0;
    switch (c) {
      case 0:
        st = chorus_allreduce(in, out, count, CHORUS_INT32, CHORUS_SUM, comm);
        for (size_t i = 0; i < count && !st; i++) bad += out[i] != (int32_t)(1000 * n * (n - 1) / 2 + n * (int)i);
        break;
      case 1:
        st = chorus_broadcast(in, out, count, CHORUS_INT32, n - 1, comm);
        for (size_t i = 0; i < count && !st; i++) bad += out[i] != (int32_t)((n - 1) * 1000 + (int)i);
        break;
      case 2:
        st = chorus_reduce(in, out, count, CHORUS_INT32, CHORUS_MAX, 0, comm);
        for (size_t i = 0; i < count && !st && rank == 0; i++) bad += out[i] != (int32_t)((n - 1) * 1000 + (int)i);
        break;
      case 3:
        st = chorus_allgather(in, out, count, CHORUS_INT32, comm);
        for (size_t i = 0; i < count * (size_t)n && !st; i++) bad += out[i] != (int32_t)((int)(i / count) * 1000 + (int)(i % count));
        break;
      case 4:
        st = chorus_reduce_scatter(in, out, count, CHORUS_INT32, CHORUS_SUM, comm);
        for (size_t i = 0; i < count && !st; i++) bad += out[i] != (int32_t)(1000 * n * (n - 1) / 2 + n * (int)((rank * count + i) % 1000));
        break;
      case 5:
        st = chorus_alltoall(in, out, count, CHORUS_INT32, comm);
        for (size_t i = 0; i < count * (size_t)n && !st; i++) bad += out[i] != (int32_t)((int)(i / count) * 1000 + (int)((rank * count + i % count) % 1000));
        break;
      case 6:
        st = chorus_gather(in, out, count, CHORUS_INT32, 0, comm);
        for (size_t i = 0; i < count * (size_t)n && !st && rank == 0; i++) bad += out[i] != (int32_t)((int)(i / count) * 1000 + (int)(i % count));
        break;
      case 7:
        st = chorus_scatter(in, out, count, CHORUS_INT32, 0, comm);
        for (size_t i = 0; i < count && !st; i++) bad += out[i] != (int32_t)((rank * count + i) % 1000);
        break;
      case 8:
        st = chorus_sendrecv(in, count, (rank + 1) % n, out, count, (rank + n - 1) % n, CHORUS_INT32, comm);
        for (size_t i = 0; i < count && !st; i++) bad += out[i] != (int32_t)(((rank + n - 1) % n) * 1000 + (int)i);
        break;
      case 9:
        st = chorus_barrier(comm);
        break;
    }
    double ms = (now_sec() - t0) * 1e3;
    if (st != CHORUS_OK) {
      fprintf(stderr, "chorus-diag: rank %d: %s failed: %s: %s\n", rank, names[c], chorus_status_name(st),
              chorus_comm_last_error(comm));
      exit(1);
    }
    int32_t total_bad = bad;
    CHECK(chorus_allreduce(&total_bad, &total_bad, 1, CHORUS_INT32, CHORUS_SUM, comm));
    failed_total += total_bad != 0;
    if (rank == 0) printf("%-16s %s  %8.3f ms  %d wrong element(s)\n", names[c], total_bad ? "FAIL" : "ok  ", ms, total_bad);
  }
  if (rank == 0) printf("# %s\n", failed_total ? "SOME COLLECTIVES FAILED" : "every collective verified");
  free(in);
  free(out);
  if (failed_total) exit(1);
}

int main(int argc, char** argv) {
  int want_params = 0, want_algos = 0, want_topo = 0, want_links = 0, want_check = 0, want_version = 0;
  size_t link_bytes = 4u << 20;
  const char *json = NULL, *svg = NULL, *tune_path = NULL;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--params")) want_params = 1;
    else if (!strcmp(argv[i], "--algos")) want_algos = 1;
    else if (!strcmp(argv[i], "--topo")) want_topo = 1;
    else if (!strcmp(argv[i], "--links")) want_links = 1;
    else if (!strcmp(argv[i], "--check")) want_check = 1;
    else if (!strcmp(argv[i], "--version")) want_version = 1;
    else if (!strcmp(argv[i], "--json") && i + 1 < argc) json = argv[++i];
    else if (!strcmp(argv[i], "--svg") && i + 1 < argc) svg = argv[++i];
    else if (!strcmp(argv[i], "--tune") && i + 1 < argc) tune_path = argv[++i];
    else if (!strcmp(argv[i], "--bytes") && i + 1 < argc) link_bytes = strtoull(argv[++i], NULL, 10);
    else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
      usage(stdout);
      return 0;
    } else {
      fprintf(stderr, "chorus-diag: unknown option %s\n", argv[i]);
      usage(stderr);
      return 2;
    }
  }
  if (!(want_params || want_algos || want_topo || want_links || want_check || want_version || tune_path)) {
    usage(stderr);
    return 2;
  }
  if (link_bytes == 0 || link_bytes > (1ull << 30)) {
    fprintf(stderr, "chorus-diag: --bytes must be between 1 and 2^30\n");
    return 2;
  }
  int v = chorus_version();
  if (want_version)
    printf("chorus %d.%d.%d (C11, %s, compiled %s)\n", v / 10000, v / 100 % 100, v % 100,
#ifdef __OPTIMIZE__
           "optimised",
#else
           "debug",
#endif
           __DATE__);
  if (want_params) print_params();
  if (want_algos) print_algos();
  if (!(want_topo || want_links || want_check || tune_path)) return 0;

  chorus_comm_t* comm = NULL;
  chorus_status_t st = chorus_comm_init_env(&comm, NULL);
  if (st != CHORUS_OK) {
    fprintf(stderr, "chorus-diag: cannot create a communicator (%s); run it under chorus-run, e.g. "
            "chorus-run -n 4 chorus-diag --topo\n", chorus_status_name(st));
    return 1;
  }
  int rank = 0, n = 0;
  chorus_comm_rank(comm, &rank);
  chorus_comm_size(comm, &n);
  if (want_topo) report_topo(comm, rank, n);
  if (want_links) report_links(comm, rank, n, link_bytes, json, svg);
  if (want_check) report_check(comm, rank, n);
  if (tune_path) write_tune(comm, rank, tune_path);
  chorus_comm_destroy(comm);
  return 0;
}
