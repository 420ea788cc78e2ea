/*
 * zip/allreduce.c - compressed allreduce (float32 sum/avg) over a rank group, quantising each
 * value at most twice and giving every member the same bits.
 *
 * Dense codecs (fp16, bf16, int8, int4), member m of n, the vector cut into n blocks:
 *   1. reduce-scatter: m encodes its input's n blocks once and sends block b to member b (a
 *      direct exchange: every block crosses once, nothing is re-encoded on the way). Member b
 *      decodes the n encodings of block b (its own included) and sums them in float32 in member
 *      order; avg divides here;
 *   2. allgather: b encodes its reduced block once, sends that to every member, and decodes it
 *      itself too, so that the owner holds exactly what the others decode.
 * Top-k: every member selects the k largest of its whole input once and sends the index/value
 * pairs to every member (an allgather of equal blocks: k depends only on the count); each sums
 * the n sparse vectors into zeros in member order. Nothing is re-encoded.
 * Lossless ZEROS (the library's choice where host links are slow, coll/compress.c): as the dense
 * codecs, each block in whichever of its two forms is shorter, so a transfer's length is known
 * only to its sender. It goes as a head of fixed length (HEAD_BYTES, or the block's longest form
 * if shorter; padded when the form is shorter still), whose first bytes give the form's length,
 * then the rest as a second message, which the receiver posts once the head is in.
 * Bytes each member sends: 2 (n-1)/n of the encoded vector (dense), (n-1) k pairs (top-k).
 * Error feedback (s->residual): what encoding a member's input drops is added to that input at
 * the next call with the same residual; the owner's re-encoding of the sum is not fed back.
 * Bitwise identical on every member: each reduced block is computed by one member in a fixed
 * order and every member decodes the same bytes with kernels that agree bit for bit on every
 * CPU (reduce/codec.h).
 */
#include <stdlib.h>
#include <string.h>

#include "algo/algos.h"
#include "algo/ring/ring.h"
#include "algo/zip/zip.h"
#include "core/comm.h"

enum { ZIP_START, ZIP_RS_WAIT, ZIP_AG_WAIT, ZIP_TOPK_WAIT, ZIP_DONE };
enum { TAG_RS = 0, TAG_AG = 1, TAG_TAIL = 2 /* added to its head's tag */ };
/* The head of a variable-length form: a few bitmap words past the form's 8-byte head, so that a
 * short form takes one message, and a long one's second message starts little later. */
#define HEAD_BYTES 512u
_Static_assert(HEAD_BYTES >= CHORUS_CODEC_HEAD_BYTES, "the first message holds the form's own head");
enum { RX_HEAD, RX_TAIL, RX_DONE }; /* the receive of a round */

struct chorus_zip {
  chorus_sched_t s;
  int n, me, phase;
  int kind, round;  /* the exchange running (exchange_t) and its round, 1 .. n - 1 */
  size_t* first; /* n blocks of the vector (dense codecs) */
  size_t* len;
  size_t* enc_at; /* n + 1: where encoded block b starts in `mine` and `reduced` */
  size_t* enc_len; /* n: the bytes of the form of block b in `mine` (its RS send) */
  size_t reduced_len; /* the bytes of the form of my reduced block (its AG send) */
  char* mine;     /* this member's input, encoded: n blocks (dense), or its top-k pairs */
  char* theirs;   /* n slots `stride` apart: the others' encodings of my block (or their pairs) */
  size_t slot, stride; /* bytes of one encoding in theirs; the distance between two */
  char* reduced;  /* every member's reduced block, encoded, at enc_at[b] (dense) */
  int rx; /* RX_*: where this round's receive is */
  chorus_algo_xfer_t x[3]; /* this round's receive, its send and (variable forms) the send's tail */
};

static size_t enc_bytes(const chorus_zip_t* z, int b) { return chorus__codec_bytes(&z->s.codec, z->len[b]); }
/* Encoded areas start on cache lines (the codecs read their float32 scales in place) and leave
 * the codecs' slack after the longest form. */
static size_t area_bytes(size_t bytes) { return (bytes + CHORUS_CODEC_SLACK + 63) & ~(size_t)63; }
static float* out_block(const chorus_zip_t* z, int b) { return (float*)z->s.recvbuf + z->first[b]; }
static int variable(const chorus_zip_t* z) { return !chorus__codec_fixed(&z->s.codec); }

/* The three exchanges: what each member receives from and sends to every other member m. */
typedef enum {
  XCH_RS,   /* receive m's encoding of my block into slot m of theirs; send m block m of mine */
  XCH_AG,   /* receive m's reduced block at enc_at[m] of reduced; send my reduced block */
  XCH_TOPK, /* receive m's pairs into slot m of theirs; send all of mine */
} exchange_t;

/* Where one transfer of an exchange lies: its buffer, the bytes it carries (a send: its form's;
 * a receive: the longest form's) and the elements of its block. */
typedef struct {
  char* buf;
  size_t bytes, elems;
} area_t;

static area_t transfer_area(const chorus_zip_t* z, int kind, int is_send, int m) {
  if (kind == XCH_AG) {
    int b = is_send ? z->me : m;
    return (area_t){z->reduced + z->enc_at[b], is_send ? z->reduced_len : enc_bytes(z, b), z->len[b]};
  }
  if (kind == XCH_TOPK) return (area_t){is_send ? z->mine : z->theirs + (size_t)m * z->stride, z->slot, z->s.count};
  if (!is_send) return (area_t){z->theirs + (size_t)m * z->stride, z->slot, z->len[z->me]};
  return (area_t){z->mine + z->enc_at[m], z->enc_len[m], z->len[m]};
}

/* The head's length for a block of `elems`: the same on both ends. */
static size_t head_bytes(const chorus_zip_t* z, size_t elems) {
  size_t longest = chorus__codec_bytes(&z->s.codec, elems);
  return longest < HEAD_BYTES ? longest : HEAD_BYTES;
}

/* A fixed form goes whole; a variable one as its head (padded with zeros past a shorter form,
 * so that no stale byte leaves) and the rest. */
static chorus_status_t post_send(chorus_task_t* t, chorus_zip_t* z, int kind, int m) {
  area_t a = transfer_area(z, kind, 1, m);
  uint32_t tag = kind == XCH_AG ? TAG_AG : TAG_RS;
  memset(&z->x[2], 0, sizeof(z->x[2]));
  z->x[2].skipped = 1;
  if (!variable(z)) return chorus__sched_post(t, &z->s, &z->x[1], 1, m, a.buf, a.bytes, tag);
  size_t head = head_bytes(z, a.elems);
  if (a.bytes < head) memset(a.buf + a.bytes, 0, head - a.bytes);
  chorus_status_t st = chorus__sched_post(t, &z->s, &z->x[1], 1, m, a.buf, head, tag);
  if (st < 0 || a.bytes <= head) return st;
  return chorus__sched_post(t, &z->s, &z->x[2], 1, m, a.buf + head, a.bytes - head, tag + TAG_TAIL);
}

static chorus_status_t post_recv(chorus_task_t* t, chorus_zip_t* z, int kind, int m) {
  area_t a = transfer_area(z, kind, 0, m);
  z->rx = RX_HEAD;
  size_t bytes = variable(z) ? head_bytes(z, a.elems) : a.bytes;
  return chorus__sched_post(t, &z->s, &z->x[0], 0, m, a.buf, bytes, kind == XCH_AG ? TAG_AG : TAG_RS);
}

/* A receive from member m is in (the head of a variable form, or all of a fixed one): posts the
 * rest, or checks the whole form before anything reads it. RX_DONE when the receive is over. */
static chorus_status_t receive_rest(chorus_task_t* t, chorus_zip_t* z, int m) {
  area_t a = transfer_area(z, z->kind, 0, m);
  if (!variable(z) || a.elems == 0) { /* an empty block is not sent */
    z->rx = RX_DONE;
    return CHORUS_OK;
  }
  size_t head = head_bytes(z, a.elems), bytes = chorus__codec_wire_bytes(&z->s.codec, a.buf, a.elems);
  if (z->rx == RX_HEAD && bytes > head) {
    z->rx = RX_TAIL;
    uint32_t tag = (z->kind == XCH_AG ? TAG_AG : TAG_RS) + TAG_TAIL;
    return chorus__sched_post(t, &z->s, &z->x[0], 0, m, a.buf + head, bytes - head, tag);
  }
  z->rx = RX_DONE;
  if (bytes && chorus__codec_wire_ok(&z->s.codec, a.buf, bytes, a.elems)) return CHORUS_OK;
  snprintf(t->comm->tp.err, sizeof(t->comm->tp.err),
           "from rank %d: a block of %zu elements whose %s form is malformed (%zu bytes announced)",
           chorus__group_rank(&z->s.group, m), a.elems, chorus__codec_name(z->s.codec.kind), bytes);
  return CHORUS_ERR_PROTOCOL;
}

/* An exchange runs in n - 1 rounds: in round j this member receives from m - j and sends to
 * m + j, so each member has one transfer in flight each way, as in a ring. All at once (3
 * peers per rank on 4 emulated hosts at 2 Gbit/s) stalled calls for 100s of ms: several flows
 * into one shaped host link lost packets and waited for TCP's loss recovery. */
static int round_from(const chorus_zip_t* z) { return (z->me - z->round + z->n) % z->n; }

static chorus_status_t post_round(chorus_task_t* t, chorus_zip_t* z) {
  chorus_status_t st = post_recv(t, z, z->kind, round_from(z));
  return st < 0 ? st : post_send(t, z, z->kind, (z->me + z->round) % z->n);
}

static chorus_status_t exchange(chorus_task_t* t, chorus_zip_t* z, exchange_t kind) {
  z->kind = kind;
  z->round = 1;
  return z->n > 1 ? post_round(t, z) : CHORUS_OK;
}

/* 1 when the exchange's last round is done (or failed: *st); starts the next round when one is. */
static int exchanged(chorus_task_t* t, chorus_zip_t* z, chorus_status_t* st) {
  while (z->round < z->n) {
    while (z->rx != RX_DONE && chorus__algo_done(&z->x[0]))
      if ((*st = receive_rest(t, z, round_from(z))) < 0) return 1;
    if (z->rx != RX_DONE || !chorus__algo_all_done(&z->x[1], 2)) return 0;
    if (++z->round < z->n && (*st = post_round(t, z)) < 0) return 1;
  }
  return 1;
}

/* The others' encodings of my block have arrived: sum them with mine in member order, divide
 * for avg, encode the result once and hand it to everyone, myself included. */
static chorus_status_t reduce_my_block(chorus_task_t* t, chorus_zip_t* z) {
  float* acc = out_block(z, z->me);
  size_t len = z->len[z->me];
  for (int m = 0; m < z->n; m++) {
    const char* enc = m == z->me ? z->mine + z->enc_at[m] : z->theirs + (size_t)m * z->stride;
    if (m == 0)
      chorus__codec_decode(&z->s.codec, acc, enc, len);
    else
      chorus__codec_decode_add(&z->s.codec, acc, enc, len);
  }
  chorus__sched_avg_finish(&z->s, acc, len);
  char* mine_reduced = z->reduced + z->enc_at[z->me];
  z->reduced_len = chorus__codec_encode(&z->s.codec, mine_reduced, acc, len, NULL);
  chorus__codec_decode(&z->s.codec, acc, mine_reduced, len);
  z->phase = ZIP_AG_WAIT;
  return exchange(t, z, XCH_AG);
}

static void decode_others(chorus_zip_t* z) {
  for (int b = 0; b < z->n; b++)
    if (b != z->me) chorus__codec_decode(&z->s.codec, out_block(z, b), z->reduced + z->enc_at[b], z->len[b]);
}

/* Every member's pairs have arrived: the sum of the n sparse vectors, in member order. */
static void sum_topk(chorus_zip_t* z) {
  float* out = z->s.recvbuf;
  memset(out, 0, z->s.count * sizeof(float));
  for (int m = 0; m < z->n; m++)
    chorus__codec_decode_add(&z->s.codec, out, m == z->me ? z->mine : z->theirs + (size_t)m * z->stride, z->s.count);
  chorus__sched_avg_finish(&z->s, out, z->s.count);
}

/* What an overflow or a NaN left in a residual (x - inf, a NaN chunk) is dropped, not kept: fed
 * back, it would make every later call's data there non-finite for good (an AMP loss scaler
 * would then skip every step). The call that met it still shows the inf or NaN. */
static void drop_nonfinite(float* residual, size_t n) {
  for (size_t i = 0; i < n; i++) {
    uint32_t bits;
    memcpy(&bits, &residual[i], sizeof bits);
    if ((bits & 0x7f800000u) == 0x7f800000u) residual[i] = 0.0f;
  }
}

/* Encodes in[0..n) into dst; with error feedback, encodes in + residual and keeps in the
 * residual what that encoding dropped (the sum is formed in the residual itself, so the input
 * is left alone). */
static size_t encode_input(const chorus_zip_t* z, void* dst, const float* in, float* residual, size_t n) {
  if (!residual) return chorus__codec_encode(&z->s.codec, dst, in, n, NULL);
  for (size_t i = 0; i < n; i++) residual[i] += in[i];
  size_t bytes = chorus__codec_encode(&z->s.codec, dst, residual, n, residual);
  drop_nonfinite(residual, n);
  return bytes;
}

/* Encodes this member's input once and starts the first exchange. */
static chorus_status_t start_exchange(chorus_task_t* t, chorus_zip_t* z) {
  const float* in = z->s.sendbuf;
  float* residual = z->s.residual;
  if (z->s.codec.kind == CHORUS_CODEC_TOPK) {
    encode_input(z, z->mine, in, residual, z->s.count);
    z->phase = ZIP_TOPK_WAIT;
    return exchange(t, z, XCH_TOPK);
  }
  for (int b = 0; b < z->n; b++)
    z->enc_len[b] = encode_input(z, z->mine + z->enc_at[b], in + z->first[b], residual ? residual + z->first[b] : NULL,
                                 z->len[b]);
  z->phase = ZIP_RS_WAIT;
  return exchange(t, z, XCH_RS);
}

chorus_status_t chorus__zip_step(chorus_task_t* t, chorus_zip_t* z) {
  chorus_status_t st = CHORUS_OK;
  for (;;) {
    switch (z->phase) {
      case ZIP_START:
        st = start_exchange(t, z);
        break;
      case ZIP_RS_WAIT:
        if (!exchanged(t, z, &st)) return CHORUS_INPROGRESS;
        if (st < 0) return st;
        st = reduce_my_block(t, z);
        break;
      case ZIP_AG_WAIT:
        if (!exchanged(t, z, &st)) return CHORUS_INPROGRESS;
        if (st < 0) return st;
        decode_others(z);
        z->phase = ZIP_DONE;
        break;
      case ZIP_TOPK_WAIT:
        if (!exchanged(t, z, &st)) return CHORUS_INPROGRESS;
        if (st < 0) return st;
        sum_topk(z);
        z->phase = ZIP_DONE;
        break;
      default:
        return CHORUS_OK;
    }
    if (st < 0) return st;
  }
}

/* Bytes the encoded block b of n takes, cache-line aligned (dense codecs). */
static size_t block_area(const chorus_sched_t* s, int n, int b) {
  size_t first, len;
  chorus__ring_segment(s->count, n, b, &first, &len);
  return area_bytes(chorus__codec_bytes(&s->codec, len));
}

/* The three encoded areas: mine, theirs (n slots of stride bytes) and reduced. */
static size_t areas(const chorus_sched_t* s, size_t* mine_bytes, size_t* stride) {
  int n = s->group.size;
  if (s->codec.kind == CHORUS_CODEC_TOPK) {
    *mine_bytes = *stride = area_bytes(chorus__codec_bytes(&s->codec, s->count));
    return *mine_bytes + (size_t)n * *stride;
  }
  *mine_bytes = 0;
  for (int b = 0; b < n; b++) *mine_bytes += block_area(s, n, b);
  *stride = block_area(s, n, s->group.me);
  return 2 * *mine_bytes + (size_t)n * *stride;
}

/* Two allocations: the block table and the transfers; the three encoded areas (scratch). */
chorus_status_t chorus__zip_start(const chorus_sched_t* s, chorus_zip_t** out) {
  *out = NULL;
  int n = s->group.size, me = s->group.me;
  if (n < 1 || me < 0 || s->codec.kind <= CHORUS_CODEC_NONE || s->codec.kind >= CHORUS_CODEC_COUNT ||
      s->dtype != CHORUS_FLOAT32 || (s->op != CHORUS_SUM && s->op != CHORUS_AVG))
    return CHORUS_ERR_NOT_SUPPORTED;
  int topk = s->codec.kind == CHORUS_CODEC_TOPK;
  size_t nb = (size_t)n, mine_bytes, stride, all = areas(s, &mine_bytes, &stride);
  chorus_zip_t* z = calloc(1, sizeof(chorus_zip_t) + (4 * nb + 1) * sizeof(size_t));
  if (!z) return CHORUS_ERR_NO_MEMORY;
  if (!(z->mine = chorus__sched_scratch(s, all))) {
    free(z);
    return CHORUS_ERR_NO_MEMORY;
  }
  z->s = *s;
  z->n = n;
  z->me = me;
  z->first = (size_t*)(z + 1);
  z->len = z->first + nb;
  z->enc_at = z->len + nb;
  z->enc_len = z->enc_at + nb + 1;
  for (int b = 0; b < n; b++) {
    chorus__ring_segment(s->count, n, b, &z->first[b], &z->len[b]);
    z->enc_at[b + 1] = z->enc_at[b] + area_bytes(chorus__codec_bytes(&s->codec, z->len[b]));
  }
  z->slot = topk ? chorus__codec_bytes(&s->codec, s->count) : enc_bytes(z, me);
  z->stride = stride;
  z->theirs = z->mine + mine_bytes;
  z->reduced = z->theirs + nb * stride;
  *out = z;
  return CHORUS_OK;
}

void chorus__zip_free(chorus_zip_t* z) {
  if (!z) return;
  chorus__sched_scratch_free(&z->s, z->mine);
  free(z);
}

/* Encoding, decoding and summing touch the vector a few times at about memory speed. */
double chorus__zip_cost_us(const chorus_codec_t* codec, double bytes, int n, const chorus_cost_ctx_t* cx,
                           const chorus_link_model_t* link) {
  if (n <= 1) return 4.0 * bytes / cx->reduce_bytes_per_us;
  double elems = bytes / sizeof(float);
  double wire = (double)chorus__codec_bytes(codec, (size_t)elems);
  double compute = 4.0 * bytes / cx->reduce_bytes_per_us;
  if (codec->kind == CHORUS_CODEC_TOPK)
    return link->alpha_us + (n - 1) * wire / link->bytes_per_us + compute + n * wire / cx->reduce_bytes_per_us;
  return 2.0 * link->alpha_us + 2.0 * (n - 1) / n * wire / link->bytes_per_us + compute;
}

/* ---- the registry entry: the whole communicator, every rank's data compressed ---- */

/* Offered only to a call that has a codec, where the two-level allreduce does not serve it:
 * scope all, or hosts it cannot pair into rails. */
static int zip_supported(const chorus_task_t* t) {
  if (t->codec.kind == CHORUS_CODEC_NONE || !chorus__algo_reduce_supported(t)) return 0;
  return t->codec_scope_all || !chorus__topo_has_rails(t->topo);
}

static chorus_status_t zip_init(chorus_task_t* t) {
  chorus_sched_t s;
  chorus__sched_of_task(t, chorus__topo_ring(t->topo, t->rank), &s);
  chorus_zip_t* z = NULL;
  chorus_status_t st = chorus__zip_start(&s, &z);
  t->state = z;
  return st;
}

static chorus_status_t zip_progress(chorus_task_t* t) { return chorus__zip_step(t, t->state); }

static void zip_fini(chorus_task_t* t) {
  chorus__zip_free(t->state);
  t->state = NULL;
}

static double zip_allreduce_cost_us(const chorus_task_t* t, const chorus_cost_ctx_t* cx) {
  return chorus__zip_cost_us(&t->codec, (double)t->args.count * (double)t->dtype_size, t->nranks, cx, &cx->spread);
}

const chorus_algo_t chorus__algo_zip_allreduce = {
    .name = "zip",
    .desc = "compressed (CHORUS_COMPRESSION): each rank encodes its blocks once, direct reduce-scatter, "
            "owners encode the sums once, direct allgather; top-k: allgather of index/value pairs",
    .coll = CH_COLL_ALLREDUCE,
    .supported = zip_supported,
    .cost_us = zip_allreduce_cost_us,
    .init = zip_init,
    .progress = zip_progress,
    .fini = zip_fini,
    .compresses = 1,
};
