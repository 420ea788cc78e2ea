/*
 * shared.c - the settings every rank of a communicator must share, described from what the
 * communicator runs with (parsed values, not the variables' spelling), so that bootstrap can
 * compare ranks' hashes of them and name the first that differs (core/bootstrap.c).
 * Why these: how ranks connect (sockets per peer, shared memory), whether they take part in the
 * link probe at creation (a rank that skips it leaves the others waiting in it), and what makes
 * every rank choose and cut each call alike (the cost model's given links and figures files,
 * forced algorithms, chunks, the staging slots hier prices with, compression, fusion). Ranks
 * that disagree on one would otherwise hang, time out, or fail later with a mismatch that does
 * not say why. A rank's own matters (timeouts, spinning, its rings' sizes, socket congestion
 * control, logs) may differ.
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "coll/coll.h"
#include "coll/task.h"
#include "coll/tune.h"
#include "core/comm.h"
#include "core/param.h"
#include "core/sysfile.h"

static void nsocks(const chorus_comm_t* c, char* v, size_t n) { snprintf(v, n, "%d", c->nsocks); }
static void shm_disable(const chorus_comm_t* c, char* v, size_t n) { snprintf(v, n, "%d", !c->shm_enabled); }
static void buff_size(const chorus_comm_t* c, char* v, size_t n) { snprintf(v, n, "%zu", c->chunk_bytes); }
static void slot_size(const chorus_comm_t* c, char* v, size_t n) {
  snprintf(v, n, "%zu", c->shm_enabled ? c->shm_slot_bytes : 0); /* unused without shared memory */
}

/* The probe's participation, and a file's figures (wherever the file is). */
static void tune(const chorus_comm_t* c, char* v, size_t n) {
  (void)c;
  const char* t = chorus__param_str(CHORUS_PARAM_TUNE);
  if (!t[0] || !strcmp(t, "1")) {
    snprintf(v, n, "1 (probe)");
    return;
  }
  if (!strcmp(t, "0")) {
    snprintf(v, n, "0 (no probe)");
    return;
  }
  FILE* f = fopen(t, "r");
  uint64_t h = CHORUS_FNV_START;
  char buf[4096];
  size_t got;
  while (f && (got = fread(buf, 1, sizeof(buf), f)) > 0) h = chorus__fnv1a(buf, got, h);
  if (f) fclose(f);
  if (f) snprintf(v, n, "a file (no probe) whose contents hash to %016llx", (unsigned long long)h);
  else snprintf(v, n, "a file (no probe) that cannot be read"); /* creation says so later */
}

static void link_of(chorus_param_id_t id, char* v, size_t n) {
  const char* txt = chorus__param_str(id);
  chorus_link_model_t link;
  if (!txt[0]) snprintf(v, n, "(not set)");
  else if (chorus__tune_parse_link(txt, &link)) snprintf(v, n, "%.17g,%.17g", link.alpha_us, link.bytes_per_us);
  else snprintf(v, n, "%s", txt); /* creation rejects it later */
}
static void link_intra(const chorus_comm_t* c, char* v, size_t n) { (void)c, link_of(CHORUS_PARAM_LINK_INTRA, v, n); }
static void link_inter(const chorus_comm_t* c, char* v, size_t n) { (void)c, link_of(CHORUS_PARAM_LINK_INTER, v, n); }

/* The rules CHORUS_ALGO resolved to, per collective. */
static void algo(const chorus_comm_t* c, char* v, size_t n) {
  size_t used = 0;
  v[0] = '\0';
  for (int coll = 0; coll < CH_COLL_COUNT; coll++)
    for (int i = 0; i < c->nrules[coll] && used < n; i++) {
      const chorus_algo_rule_t* r = &c->rules[coll][i];
      used += (size_t)snprintf(v + used, n - used, "%s%s:%s%s%s@%zu-%zu", used ? ";" : "", chorus__coll_name((chorus_coll_t)coll),
                               r->name, r->sub[0] ? "/" : "", r->sub, r->lo, r->hi);
    }
  if (!v[0]) snprintf(v, n, "(not set)");
}

static void compression(const chorus_comm_t* c, char* v, size_t n) {
  const chorus_compression_opts_t* o = &c->compression_env;
  const char* name = chorus_compression_name(o->codec);
  if (o->codec == CHORUS_COMPRESSION_TOPK) snprintf(v, n, "%s:%.17g", name ? name : "?", o->topk_fraction);
  else snprintf(v, n, "%s", name ? name : "?");
}
static void compression_scope(const chorus_comm_t* c, char* v, size_t n) {
  snprintf(v, n, "%s", c->compression_env.scope == CHORUS_COMPRESSION_SCOPE_ALL ? "all" : "inter");
}
static void compression_min(const chorus_comm_t* c, char* v, size_t n) { snprintf(v, n, "%zu", c->compression_min_bytes); }
static void zeros_min(const chorus_comm_t* c, char* v, size_t n) { snprintf(v, n, "%zu", c->zeros_min_bytes); }
static void zeros(const chorus_comm_t* c, char* v, size_t n) {
  snprintf(v, n, "%s", c->zeros == CHORUS_ZEROS_OFF ? "off" : c->zeros == CHORUS_ZEROS_ON ? "on" : "auto");
}
/* Before creation resolves the default by topology, which every rank shares. */
static void fuse_bytes(const chorus_comm_t* c, char* v, size_t n) {
  if (c->group_fuse_bytes == SIZE_MAX) snprintf(v, n, "-1 (by topology)");
  else snprintf(v, n, "%zu", c->group_fuse_bytes);
}

static const struct {
  const char* name;
  void (*describe)(const chorus_comm_t* comm, char* value, size_t len);
} settings[] = {
    {"CHORUS_NSOCKS_PER_PEER (or chorus_config_t.nsocks_per_peer)", nsocks},
    {"CHORUS_SHM_DISABLE", shm_disable},
    {"CHORUS_BUFF_SIZE", buff_size},
    {"CHORUS_SHM_SLOT_SIZE", slot_size},
    {"CHORUS_TUNE", tune},
    {"CHORUS_LINK_INTRA", link_intra},
    {"CHORUS_LINK_INTER", link_inter},
    {"CHORUS_ALGO", algo},
    {"CHORUS_COMPRESSION", compression},
    {"CHORUS_COMPRESSION_SCOPE", compression_scope},
    {"CHORUS_COMPRESSION_MIN_BYTES", compression_min},
    {"CHORUS_ZEROS", zeros},
    {"CHORUS_ZEROS_MIN_BYTES", zeros_min},
    {"CHORUS_GROUP_FUSE_BYTES", fuse_bytes},
};
_Static_assert(sizeof(settings) / sizeof(settings[0]) == CHORUS_SHARED_SETTINGS,
               "chorus_peer_info_t.shared_settings has one hash per shared setting");

const char* chorus__shared_setting(const chorus_comm_t* comm, int i, char* value, size_t len) {
  if (i < 0 || i >= CHORUS_SHARED_SETTINGS) return NULL;
  settings[i].describe(comm, value, len);
  return settings[i].name;
}

void chorus__shared_settings_hash(const chorus_comm_t* comm, uint64_t hashes[CHORUS_SHARED_SETTINGS]) {
  char value[1024];
  for (int i = 0; i < CHORUS_SHARED_SETTINGS; i++) {
    settings[i].describe(comm, value, sizeof(value));
    hashes[i] = chorus__fnv1a(value, strlen(value), CHORUS_FNV_START);
  }
}
