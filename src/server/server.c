/* server/server: connections, limits, authentication, routing, streams. The OpenAI request
 * and response bodies are in server/api.c. */
#include "server/server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <jansson.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>

#include "core/timer.h"
#include "memory/mem.h"
#include "server/access.h"
#include "server/api.h"
#include "server/guard.h"
#include "server/metrics.h"
#include "server/page.h"
#include "server/reqlog.h"

#define IL__MAX_CODES 32
#define IL__RESERVE 64 /* connections above --max-connections libmicrohttpd accepts (the reserve) */

struct il_server {
  il_server_opts o;
  struct MHD_Daemon *d;
  int port;
  pthread_rwlock_t lock; /* guards the pointers below: written by attach and stop only */
  il_api api;            /* engine, scheduler, template (api.sched NULL until attached) */
  il_gpu_sampler *gpu;
  char template_note[192];
  char *key;             /* the API key (NULL: none) */
  il_access *access;     /* Host and Origin rules */
  size_t key_len;
  atomic_int connections;
  il_guard *guard;       /* deadlines, eviction of idle connections, the active count */
  atomic_ullong rejected;
  pthread_mutex_t mu;    /* the status counters */
  il_http_count codes[IL__MAX_CODES];
  int n_codes;
  double t_start;
};

/* Per request: the body as it arrives, charged to the request's budget. */
typedef struct {
  int slot;       /* the connection's in the guard */
  il_budget *budget;
  il_sbuf body;
  bool too_big;
  bool too_many;
  il_api_error refuse;    /* answered at once, before the body (status 0: none) */
  /* the request log */
  int status;             /* of the response queued */
  double t_start;         /* the headers were complete */
  char method[16], path[256], client[64];
  il_api_stream *st;      /* a generation's (a reference), for its tokens and timings */
} il__conn;

/* The request whose handler runs on this thread: il__queue records the status there. */
static _Thread_local il__conn *il__current;

void il_server_opts_defaults(il_server_opts *o) {
  memset(o, 0, sizeof *o);
  snprintf(o->host, sizeof o->host, "127.0.0.1");
  o->port = 8080;
  o->max_body = (size_t)1 << 20;
  o->max_request_memory = 0; /* 16 x max_body */
  o->max_connections = 64;
  o->header_timeout = 30;
  o->body_timeout = 60;
  o->log_format = IL_REQLOG_TEXT;
  o->defaults = il_request_default_params();
  o->defaults.n_predict = -1;
}

/* ---- responses ---- */

static void il__count(il_server *s, int code) {
  pthread_mutex_lock(&s->mu);
  int i = 0;
  while (i < s->n_codes && s->codes[i].code != code) i++;
  if (i == s->n_codes && s->n_codes < IL__MAX_CODES) s->codes[s->n_codes++] = (il_http_count){code, 0};
  if (i < s->n_codes) s->codes[i].count++;
  pthread_mutex_unlock(&s->mu);
}

/* An allowed foreign origin (--cors-origins) may read the response. */
static void il__cors(il_server *s, struct MHD_Connection *c, struct MHD_Response *r) {
  const char *origin = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Origin");
  const char *host = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Host");
  bool cors = false;
  if (!origin || !il_access_origin_ok(s->access, origin, host, &cors) || !cors) return;
  MHD_add_response_header(r, "Access-Control-Allow-Origin", origin);
  MHD_add_response_header(r, "Vary", "Origin");
}

/* Headers every response gets, the status for the request log and the counters, then queued
 * (r is released here). */
static enum MHD_Result il__queue(il_server *s, struct MHD_Connection *c, int code, const char *type,
                                 struct MHD_Response *r) {
  MHD_add_response_header(r, "Content-Type", type);
  il__cors(s, c, r);
  if (il__current) il__current->status = code;
  if (code == 503 || code == 429) MHD_add_response_header(r, "Retry-After", "1");
  if (code == 401) MHD_add_response_header(r, "WWW-Authenticate", "Bearer");
  il__count(s, code);
  enum MHD_Result ret = MHD_queue_response(c, (unsigned)code, r);
  MHD_destroy_response(r);
  return ret;
}

static enum MHD_Result il__send(il_server *s, struct MHD_Connection *c, int code, const char *type, const char *body,
                                size_t len) {
  /* libmicrohttpd 0.9.75 takes void * even to copy the body (MUST_COPY), so it gets a copy of
   * ours, counted by memory/ like every allocation, that it frees with il_mem_free when the
   * response is done: no cast, and no allocation behind the memory layer. A failed create
   * leaves the buffer with us. For small bodies; il__send_sbuf hands a big one over. */
  void *copy = il_mem_alloc(IL_MEM_SERVER, len ? len : 1, "HTTP response body");
  if (!copy) return MHD_NO;
  if (len) memcpy(copy, body, len);
  struct MHD_Response *r = MHD_create_response_from_buffer_with_free_callback(len, copy, il_mem_free);
  if (!r) {
    il_mem_free(copy);
    return MHD_NO;
  }
  return il__queue(s, c, code, type, r);
}

/* A body handed to libmicrohttpd without a copy: the buffer (still charged to its budget, which
 * this holds a reference to) is freed when the response is done. */
typedef struct {
  il_sbuf b;
  il_budget *ref;
} il__owned;

static ssize_t il__owned_read(void *cls, uint64_t pos, char *buf, size_t max) {
  il__owned *o = cls;
  if (pos >= o->b.len) return MHD_CONTENT_READER_END_OF_STREAM;
  size_t n = o->b.len - (size_t)pos;
  if (n > max) n = max;
  memcpy(buf, o->b.p + pos, n);
  return (ssize_t)n;
}

static void il__owned_free(void *cls) {
  il__owned *o = cls;
  il_sbuf_free(&o->b);
  il_budget_unref(o->ref);
  il_mem_free(o);
}

/* Sends b's bytes and takes them (b is empty afterwards, whatever happens). */
static enum MHD_Result il__send_sbuf(il_server *s, struct MHD_Connection *c, int code, const char *type, il_sbuf *b) {
  il__owned *o = il_mem_alloc(IL_MEM_SERVER, sizeof *o, "HTTP response");
  if (!o) {
    il_sbuf_free(b);
    return MHD_NO;
  }
  o->b = *b;
  o->ref = il_budget_ref(b->budget);
  *b = (il_sbuf){.budget = b->budget};
  struct MHD_Response *r = MHD_create_response_from_callback(o->b.len, 64 << 10, il__owned_read, o, il__owned_free);
  if (!r) {
    il__owned_free(o);
    return MHD_NO;
  }
  return il__queue(s, c, code, type, r);
}

/* The same for a body in segments (a non-streaming generation: each choice's buffers as they
 * were filled), sent one after another: the body is never copied into one buffer. */
typedef struct {
  il_sbuf *seg;
  int n, cur;
  size_t off;
  il_budget *ref;
} il__segs;

static ssize_t il__segs_read(void *cls, uint64_t pos, char *buf, size_t max) {
  (void)pos; /* sequential */
  il__segs *o = cls;
  size_t done = 0;
  while (done < max && o->cur < o->n) {
    il_sbuf *g = &o->seg[o->cur];
    size_t k = g->len - o->off;
    if (k > max - done) k = max - done;
    memcpy(buf + done, g->p + o->off, k);
    done += k;
    o->off += k;
    if (o->off == g->len) {
      il_sbuf_free(g); /* sent: its bytes go back at once */
      o->cur++;
      o->off = 0;
    }
  }
  return done ? (ssize_t)done : MHD_CONTENT_READER_END_OF_STREAM;
}

static void il__segs_free(void *cls) {
  il__segs *o = cls;
  for (int k = 0; k < o->n; k++) il_sbuf_free(&o->seg[k]);
  il_mem_free(o->seg);
  il_budget_unref(o->ref);
  il_mem_free(o);
}

/* Takes seg[0..n) (an il_mem array of buffers charged to budget b). */
static enum MHD_Result il__send_segs(il_server *s, struct MHD_Connection *c, il_sbuf *seg, int n, il_budget *b) {
  il__segs *o = il_mem_calloc(IL_MEM_SERVER, sizeof *o, "HTTP response");
  if (!o) {
    for (int k = 0; k < n; k++) il_sbuf_free(&seg[k]);
    il_mem_free(seg);
    return MHD_NO;
  }
  *o = (il__segs){.seg = seg, .n = n, .ref = il_budget_ref(b)};
  uint64_t size = 0;
  for (int k = 0; k < n; k++) size += seg[k].len;
  struct MHD_Response *r = MHD_create_response_from_callback(size, 64 << 10, il__segs_read, o, il__segs_free);
  if (!r) {
    il__segs_free(o);
    return MHD_NO;
  }
  return il__queue(s, c, 200, "application/json", r);
}

/* /v1/tokenize's body, made while it is sent. */
static ssize_t il__gen_read(void *cls, uint64_t pos, char *buf, size_t max) {
  (void)pos;
  size_t n = il_api_gen_read(cls, buf, max);
  return n ? (ssize_t)n : MHD_CONTENT_READER_END_OF_STREAM;
}

static void il__gen_free(void *cls) { il_api_gen_free(cls); }

/* An error body; when even that cannot be built (out of memory), a fixed one. */
static enum MHD_Result il__send_error(il_server *s, struct MHD_Connection *c, const il_api_error *e) {
  static const char oom[] = "{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\",\"param\":null,"
                            "\"code\":\"out_of_memory\"}}";
  il_sbuf b = {0};
  il_api_error_write(&b, e);
  enum MHD_Result r = b.oom ? il__send(s, c, 500, "application/json", oom, sizeof oom - 1)
                            : il__send(s, c, e->status, "application/json", b.p, b.len);
  il_sbuf_free(&b);
  return r;
}

/* A 200 body an endpoint wrote into b (taken here), or its error. */
static enum MHD_Result il__send_body(il_server *s, struct MHD_Connection *c, bool ok, il_sbuf *b, const il_api_error *e) {
  if (ok) return il__send_sbuf(s, c, 200, "application/json", b);
  il_sbuf_free(b);
  return il__send_error(s, c, e);
}

static enum MHD_Result il__fail(il_server *s, struct MHD_Connection *c, int status, const char *type,
                                const char *code, const char *msg) {
  il_api_error e;
  il_api_error_set(&e, status, type, NULL, code, "%s", msg);
  return il__send_error(s, c, &e);
}

/* ---- streams: bytes the engine thread produces and the connection thread sends ---- */

static ssize_t il__reader(void *cls, uint64_t pos, char *buf, size_t max) {
  (void)pos;
  il_api_stream *st = cls;
  pthread_mutex_lock(&st->mu);
  for (;;) {
    if (st->out.len > st->out_pos) {
      size_t n = st->out.len - st->out_pos;
      if (n > max) n = max;
      memcpy(buf, st->out.p + st->out_pos, n);
      st->out_pos += n;
      if (st->out_pos == st->out.len) {
        il_sbuf_consume(&st->out, st->out.len);
        st->out_pos = 0;
      }
      pthread_mutex_unlock(&st->mu);
      return (ssize_t)n;
    }
    if (st->done) {
      pthread_mutex_unlock(&st->mu);
      return MHD_CONTENT_READER_END_OF_STREAM;
    }
    /* nothing yet: wait for the engine; every 10 s a comment line keeps proxies (and the
     * check that the client is still there) going */
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += 10;
    if (pthread_cond_timedwait(&st->cv, &st->mu, &ts) == ETIMEDOUT && !st->done && st->out.len == st->out_pos)
      il_sbuf_puts(&st->out, ": keep-alive\n\n");
  }
}

/* The response is gone: sent, or the client went away. A stream still running is cancelled,
 * which frees its sequence slot at the next step. */
static void il__reader_free(void *cls) {
  il_api_stream *st = cls;
  pthread_mutex_lock(&st->mu);
  bool running = !st->done;
  uint64_t id = st->id;
  il_server *s = st->srv;
  pthread_mutex_unlock(&st->mu);
  if (running) {
    pthread_rwlock_rdlock(&s->lock);
    if (s->api.sched) il_sched_cancel(s->api.sched, id);
    pthread_rwlock_unlock(&s->lock);
  }
  il_api_stream_unref(st);
}

/* The client closed its side (or the connection broke): EOF or an error on the socket, without
 * consuming what it may have sent already (a pipelined request). */
static bool il__peer_gone(int fd) {
  if (fd < 0) return false;
  struct pollfd p = {.fd = fd, .events = POLLIN | POLLRDHUP};
  if (poll(&p, 1, 0) <= 0) return false;
  if (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) return true;
  char byte;
  return (p.revents & POLLIN) && recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
}

static enum MHD_Result il__generate(il_server *s, struct MHD_Connection *c, bool chat, il__conn *cc) {
  il_api_error err;
  il_api_stream *st = NULL;
  pthread_rwlock_rdlock(&s->lock);
  bool ok = s->api.sched != NULL;
  if (ok) ok = il_api_generate(&s->api, chat, cc->body.p, cc->body.len, cc->budget, &st, &err);
  else il_api_error_set(&err, 503, "server_error", NULL, "loading", "the model is loading; try again shortly");
  if (st) st->srv = s;
  pthread_rwlock_unlock(&s->lock);
  il_sbuf_free(&cc->body); /* parsed and tokenized: the budget goes to the response */
  if (!ok) return il__send_error(s, c, &err);
  il_api_stream_ref(st); /* the request log reads it when the request is over */
  cc->st = st;
  if (st->stream) {
    struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, il__reader, st, il__reader_free);
    if (!r) {
      il__reader_free(st);
      return MHD_NO;
    }
    MHD_add_response_header(r, "Cache-Control", "no-cache");
    MHD_add_response_header(r, "X-Accel-Buffering", "no");
    return il__queue(s, c, 200, "text/event-stream", r);
  }
  /* not streaming: this connection's thread waits for the whole answer, looking at the socket
   * every 200 ms: a client that went away cancels the request (as a stream's does when a write
   * fails), so its tokens are not computed for nobody */
  const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
  const int fd = ci ? ci->connect_fd : -1;
  pthread_mutex_lock(&st->mu);
  double next_look = il_time_now() + 0.2;
  while (!st->done) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += 200 * 1000000L;
    if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
    pthread_cond_timedwait(&st->cv, &st->mu, &ts); /* woken by every token, or the timeout */
    if (st->done || st->client_gone || il_time_now() < next_look) continue;
    next_look = il_time_now() + 0.2;
    if (!il__peer_gone(fd)) continue;
    st->client_gone = true;
    uint64_t id = st->id;
    pthread_mutex_unlock(&st->mu);
    pthread_rwlock_rdlock(&s->lock);
    if (s->api.sched) il_sched_cancel(s->api.sched, id);
    pthread_rwlock_unlock(&s->lock);
    pthread_mutex_lock(&st->mu);
  }
  int status = st->status;
  il_sbuf body = st->out, *seg = st->body;
  int n_seg = st->n_body;
  st->out = (il_sbuf){.budget = st->budget};
  st->body = NULL;
  st->n_body = 0;
  pthread_mutex_unlock(&st->mu);
  il_api_stream_unref(st);
  if (seg) return il__send_segs(s, c, seg, n_seg, cc->budget);
  /* the engine thread wrote either the whole body or an error; out of memory even for that: */
  if (body.oom) {
    il_sbuf_free(&body);
    return il__fail(s, c, 500, "server_error", "out_of_memory", "out of memory building the response");
  }
  return il__send_sbuf(s, c, status, "application/json", &body);
}

/* ---- routing ---- */

static bool il__authorized(il_server *s, struct MHD_Connection *c) {
  if (!s->key) return true;
  const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
  if (!h || strncasecmp(h, "Bearer ", 7)) return false;
  return il_access_key_equal(s->key, s->key_len, h + 7, strlen(h + 7)); /* whole keys, constant time */
}

static enum MHD_Result il__metrics(il_server *s, struct MHD_Connection *c) {
  il_sbuf b = {0};
  il_http_count codes[IL__MAX_CODES];
  pthread_mutex_lock(&s->mu);
  int n = s->n_codes;
  memcpy(codes, s->codes, sizeof(il_http_count) * (size_t)n);
  pthread_mutex_unlock(&s->mu);
  pthread_rwlock_rdlock(&s->lock);
  il_sched_stats ss;
  if (s->api.sched) il_sched_stats_get(s->api.sched, &ss);
  il_metrics_in in = {.ready = s->api.sched != NULL,
                      .sched = s->api.sched ? &ss : NULL,
                      .engine = s->api.sched ? s->api.e : NULL,
                      .gpu = s->gpu,
                      .http = codes,
                      .n_http = n,
                      .connections_rejected = atomic_load(&s->rejected),
                      .dropped = {il_guard_dropped(s->guard, IL_GUARD_DROP_HEADER_TIMEOUT),
                                  il_guard_dropped(s->guard, IL_GUARD_DROP_BODY_TIMEOUT),
                                  il_guard_dropped(s->guard, IL_GUARD_DROP_EVICTED)},
                      .connections = atomic_load(&s->connections),
                      .request_memory_limit = s->o.max_request_memory,
                      .uptime_seconds = il_time_now() - s->t_start,
                      .model_id = s->api.sched ? s->api.model_id : s->o.model_id};
  il_metrics_write(&b, &in);
  pthread_rwlock_unlock(&s->lock);
  enum MHD_Result r = b.oom ? il__fail(s, c, 500, "server_error", "out_of_memory", "out of memory")
                            : il__send(s, c, 200, "text/plain; version=0.0.4; charset=utf-8", b.p, b.len);
  il_sbuf_free(&b);
  return r;
}

static enum MHD_Result il__route(il_server *s, struct MHD_Connection *c, const char *url, const char *method,
                                 il__conn *cc) {
  const bool get = !strcmp(method, "GET") || !strcmp(method, "HEAD"), post = !strcmp(method, "POST");
  if (!strcmp(url, "/health")) {
    if (!get) return il__fail(s, c, 405, "invalid_request_error", "method_not_allowed", "use GET /health");
    pthread_rwlock_rdlock(&s->lock);
    bool ready = s->api.sched != NULL;
    pthread_rwlock_unlock(&s->lock);
    return ready ? il__send(s, c, 200, "application/json", "{\"status\":\"ok\"}", 15)
                 : il__send(s, c, 503, "application/json", "{\"status\":\"loading\"}", 20);
  }
  if (!strcmp(url, "/metrics")) {
    if (!get) return il__fail(s, c, 405, "invalid_request_error", "method_not_allowed", "use GET /metrics");
    return il__metrics(s, c);
  }
  if (!strcmp(url, "/") || !strcmp(url, "/index.html")) {
    if (!get) return il__fail(s, c, 405, "invalid_request_error", "method_not_allowed", "use GET /");
    return il__send(s, c, 200, "text/html; charset=utf-8", il_page_html, il_page_html_len);
  }
  const bool v1 = !strncmp(url, "/v1/", 4);
  const char *path = v1 ? url + 3 : url;
  const bool known = !strcmp(path, "/chat/completions") || !strcmp(path, "/completions") ||
                     !strcmp(path, "/tokenize") || !strcmp(path, "/detokenize") || !strcmp(path, "/models") ||
                     !strncmp(path, "/models/", 8);
  if (!known)
    return il__fail(s, c, 404, "invalid_request_error", "not_found",
                    "unknown path; see /v1/models, /v1/chat/completions, /v1/completions, /health, /metrics");
  if (!il__authorized(s, c))
    return il__fail(s, c, 401, "invalid_request_error", "invalid_api_key",
                    "missing or wrong API key: send 'Authorization: Bearer KEY' (--api-key)");
  if (!strcmp(path, "/models") || !strncmp(path, "/models/", 8)) {
    if (!get) return il__fail(s, c, 405, "invalid_request_error", "method_not_allowed", "use GET");
    il_api_error err;
    il_sbuf b = {.budget = cc->budget};
    pthread_rwlock_rdlock(&s->lock);
    bool ok = il_api_models(&s->api, path[7] == '/' ? path + 8 : NULL, &b, &err);
    pthread_rwlock_unlock(&s->lock);
    return il__send_body(s, c, ok, &b, &err);
  }
  if (!post) return il__fail(s, c, 405, "invalid_request_error", "method_not_allowed", "use POST with a JSON body");
  if (!strcmp(path, "/chat/completions")) return il__generate(s, c, true, cc);
  if (!strcmp(path, "/completions")) return il__generate(s, c, false, cc);
  il_api_error err;
  il_sbuf b = {.budget = cc->budget};
  il_api_gen *g = NULL;
  size_t size = 0;
  const bool tok = !strcmp(path, "/tokenize");
  pthread_rwlock_rdlock(&s->lock);
  bool ok = s->api.sched != NULL;
  if (!ok) il_api_error_set(&err, 503, "server_error", NULL, "loading", "the model is loading; try again shortly");
  else if (tok) ok = il_api_tokenize(&s->api, cc->body.p, cc->body.len, cc->budget, &g, &size, &err);
  else ok = il_api_detokenize(&s->api, cc->body.p, cc->body.len, cc->budget, &b, &err);
  pthread_rwlock_unlock(&s->lock);
  il_sbuf_free(&cc->body);
  if (!tok || !ok) return il__send_body(s, c, ok, &b, &err);
  struct MHD_Response *r = MHD_create_response_from_callback(size, 64 << 10, il__gen_read, g, il__gen_free);
  if (!r) {
    il_api_gen_free(g);
    return MHD_NO;
  }
  return il__queue(s, c, 200, "application/json", r);
}

/* What is refused from the headers alone, before a body is read: a Host that is not this
 * server's (DNS rebinding), an origin that is neither the server's own page nor in
 * --cors-origins, a POST whose body is not declared JSON (a web page can send text/plain or a
 * form to any address without asking; application/json needs a CORS preflight first). A
 * preflight from an allowed origin is answered 204 (e->status 204). */
static bool il__refused(il_server *s, struct MHD_Connection *c, const char *url, const char *method, il_api_error *e) {
  const char *host = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Host");
  const char *origin = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Origin");
  char clip[80];
  if (!il_access_host_ok(s->access, host)) {
    il_api_error_set(e, 403, "invalid_request_error", NULL, "host_not_allowed",
                     "Host '%s' is not this server's: it answers %s (--allowed-hosts adds names)",
                     il_utf8_clip(host, clip, sizeof clip), il_access_hosts_note(s->access));
    return true;
  }
  bool cors = false;
  if (!il_access_origin_ok(s->access, origin, host, &cors)) {
    il_api_error_set(e, 403, "invalid_request_error", NULL, "origin_not_allowed",
                     "requests from the web page at '%s' are not allowed (--cors-origins lists the origins that are)",
                     il_utf8_clip(origin, clip, sizeof clip));
    return true;
  }
  if (!strcmp(method, "OPTIONS")) {
    if (cors && MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Access-Control-Request-Method")) e->status = 204;
    else il_api_error_set(e, 405, "invalid_request_error", NULL, "method_not_allowed",
                          "OPTIONS is answered for the origins of --cors-origins only (a CORS preflight)");
    return true;
  }
  if (!strcmp(method, "POST")) {
    const char *ct = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_TYPE);
    const bool json = ct && !strncasecmp(ct, "application/json", 16) && (!ct[16] || ct[16] == ';' || ct[16] == ' ');
    if (!json) {
      il_api_error_set(e, 415, "invalid_request_error", NULL, "unsupported_media_type",
                       "POST %s: the body must be sent as 'Content-Type: application/json' (got %s)",
                       il_utf8_clip(url, clip, sizeof clip), ct ? "another type" : "none");
      return true;
    }
  }
  return false;
}

/* 204 to a CORS preflight from an allowed origin (il__queue adds Allow-Origin). */
static enum MHD_Result il__preflight(il_server *s, struct MHD_Connection *c) {
  struct MHD_Response *r = MHD_create_response_from_buffer(0, NULL, MHD_RESPMEM_PERSISTENT);
  if (!r) return MHD_NO;
  MHD_add_response_header(r, "Access-Control-Allow-Methods", "GET, POST, OPTIONS");
  MHD_add_response_header(r, "Access-Control-Allow-Headers", "Authorization, Content-Type");
  MHD_add_response_header(r, "Access-Control-Max-Age", "600");
  return il__queue(s, c, 204, "text/plain", r);
}

static enum MHD_Result il__answer(il_server *s, struct MHD_Connection *c, const char *url, const char *method,
                                  il__conn *cc);

/* What the request log needs from the start of a request. */
static void il__log_start(il__conn *cc, struct MHD_Connection *c, const char *url, const char *method) {
  cc->t_start = il_time_now();
  snprintf(cc->method, sizeof cc->method, "%s", method);
  snprintf(cc->path, sizeof cc->path, "%s", url);
  const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
  const struct sockaddr *sa = ci ? ci->client_addr : NULL;
  char ip[INET6_ADDRSTRLEN] = "?";
  if (sa && sa->sa_family == AF_INET) {
    const struct sockaddr_in *a = (const struct sockaddr_in *)sa;
    inet_ntop(AF_INET, &a->sin_addr, ip, sizeof ip);
    snprintf(cc->client, sizeof cc->client, "%s:%u", ip, (unsigned)ntohs(a->sin_port));
  } else if (sa && sa->sa_family == AF_INET6) {
    const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)sa;
    inet_ntop(AF_INET6, &a->sin6_addr, ip, sizeof ip);
    snprintf(cc->client, sizeof cc->client, "[%s]:%u", ip, (unsigned)ntohs(a->sin6_port));
  }
}

/* The request's line on stderr (--log-format), when it is over: a stream's once its final
 * event is in (a client that left: the cancellation, within a step). Health checks and
 * scrapes that succeed are not logged: a probe every few seconds would bury the requests. */
static void il__log_end(il_server *s, il__conn *cc) {
  if (s->o.log_format == IL_REQLOG_OFF) return;
  const bool probe = !strcmp(cc->path, "/health") || !strcmp(cc->path, "/metrics");
  if (probe && cc->status >= 200 && cc->status < 300) return;
  il_reqlog_entry e = {.method = cc->method, .path = cc->path, .client = cc->client, .status = cc->status,
                       .time_ms = (il_time_now() - cc->t_start) * 1e3};
  char finish[64];
  if (cc->st) {
    pthread_mutex_lock(&cc->st->mu);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += 5;
    while (!cc->st->done && pthread_cond_timedwait(&cc->st->cv, &cc->st->mu, &ts) != ETIMEDOUT) {
    }
    if (cc->st->client_gone) e.status = 499; /* nginx's "client closed request" */
    pthread_mutex_unlock(&cc->st->mu);
    il_api_stream_log(cc->st, &e, finish, sizeof finish);
  }
  il_sbuf b = {0};
  il_reqlog_write(&b, s->o.log_format, &e);
  if (!b.oom && b.len) fwrite(b.p, 1, b.len, stderr); /* one write: lines of concurrent requests do not mix */
  il_sbuf_free(&b);
}

static enum MHD_Result il__handler(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                   const char *version, const char *upload, size_t *upload_size, void **con_cls) {
  (void)version;
  il_server *s = cls;
  il__conn *cc = *con_cls;
  if (!cc) {
    cc = il_mem_calloc(IL_MEM_SERVER, sizeof *cc, "connection");
    if (!cc) return MHD_NO;
    *con_cls = cc;
    il__log_start(cc, c, url, method);
    const union MHD_ConnectionInfo *sc = MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    cc->slot = sc ? (int)(intptr_t)sc->socket_context - 1 : -1;
    il_guard_set_phase(s->guard, cc->slot, IL_GUARD_BODY); /* headers complete: the body's deadline */
    cc->budget = il_budget_new(s->o.max_request_memory);
    if (!cc->budget) return MHD_NO; /* il__completed frees cc */
    cc->body.budget = cc->budget;
    if (il__refused(s, c, url, method, &cc->refuse)) goto answer;
    /* requests in progress beyond the limit wait outside (429); /health and /metrics always get
     * in: they are small, and what a monitor needs when the server is full */
    if (il_guard_active(s->guard) > s->o.max_connections && strcmp(url, "/health") && strcmp(url, "/metrics")) {
      atomic_fetch_add(&s->rejected, 1);
      cc->too_many = true;
    }
    /* A body over the limit is read and dropped, then answered 413, so the client gets to
     * read the answer; only a body announced as huge is answered at once (MHD then closes
     * the connection without reading it). */
    const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    unsigned long long announced = cl ? strtoull(cl, NULL, 10) : 0;
    if (announced > s->o.max_body) cc->too_big = true;
    if (announced > 16 * (unsigned long long)s->o.max_body || cc->too_many) goto answer;
    return MHD_YES;
  }
  if (*upload_size) {
    if (cc->body.len + *upload_size > s->o.max_body) cc->too_big = true;
    else il_sbuf_put(&cc->body, upload, *upload_size);
    *upload_size = 0;
    return MHD_YES;
  }
answer:
  il_guard_set_phase(s->guard, cc->slot, IL_GUARD_BUSY);
  il__current = cc;
  enum MHD_Result ret = il__answer(s, c, url, method, cc);
  il__current = NULL;
  return ret;
}

static enum MHD_Result il__answer(il_server *s, struct MHD_Connection *c, const char *url, const char *method,
                                  il__conn *cc) {
  if (cc->refuse.status == 204) return il__preflight(s, c);
  if (cc->refuse.status) return il__send_error(s, c, &cc->refuse);
  if (cc->too_many) {
    char msg[160];
    snprintf(msg, sizeof msg, "too many requests in progress: %d (--max-connections %d); try again shortly",
             il_guard_active(s->guard), s->o.max_connections);
    return il__fail(s, c, 429, "rate_limit_error", "too_many_connections", msg);
  }
  if (cc->too_big) {
    char msg[160];
    snprintf(msg, sizeof msg, "request body larger than %zu bytes (--max-body)", s->o.max_body);
    return il__fail(s, c, 413, "invalid_request_error", "request_too_large", msg);
  }
  if (cc->body.oom && il_budget_over(cc->budget)) {
    char msg[200];
    snprintf(msg, sizeof msg, "the request body needs more than the %zu bytes of server memory one request may hold "
             "(--max-request-memory)", s->o.max_request_memory);
    return il__fail(s, c, 413, "invalid_request_error", "request_too_large", msg);
  }
  if (cc->body.oom) return il__fail(s, c, 500, "server_error", "out_of_memory", "out of memory reading the body");
  return il__route(s, c, url, method, cc);
}

static void il__completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe) {
  (void)c;
  (void)toe;
  il_server *s = cls;
  il__conn *cc = *con_cls;
  if (!cc) return;
  il_guard_set_phase(s->guard, cc->slot, IL_GUARD_HEADERS); /* kept alive: the next request's headers are due */
  il__log_end(s, cc);
  if (cc->st) il_api_stream_unref(cc->st);
  il_sbuf_free(&cc->body);
  il_budget_unref(cc->budget);
  il_mem_free(cc);
  *con_cls = NULL;
}

/* The socket stays open until after CLOSED is notified (libmicrohttpd closes it in its cleanup,
 * after this callback), so the guard may shut it down until il_guard_remove. */
static void il__connection(void *cls, struct MHD_Connection *c, void **socket_context,
                           enum MHD_ConnectionNotificationCode toe) {
  il_server *s = cls;
  if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
    atomic_fetch_add(&s->connections, 1);
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    int slot = ci ? il_guard_add(s->guard, ci->connect_fd) : -1;
    *socket_context = (void *)(intptr_t)(slot + 1);
  } else {
    atomic_fetch_sub(&s->connections, 1);
    il_guard_remove(s->guard, (int)(intptr_t)*socket_context - 1);
  }
}

/* ---- lifecycle ---- */

il_status il_server_start(const il_server_opts *o, il_server **out) {
  *out = NULL;
  json_set_alloc_funcs(il_budget_json_malloc, il_budget_json_free); /* per-request arenas (server/budget.h) */
  struct sockaddr_storage addr;
  memset(&addr, 0, sizeof addr);
  /* poll(), not select(): a connection's socket may be numbered past FD_SETSIZE */
  unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_POLL_INTERNAL_THREAD;
  struct sockaddr_in *a4 = (struct sockaddr_in *)&addr;
  struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)&addr;
  if (inet_pton(AF_INET, o->host, &a4->sin_addr) == 1) {
    a4->sin_family = AF_INET;
    a4->sin_port = htons((uint16_t)o->port);
  } else if (inet_pton(AF_INET6, o->host, &a6->sin6_addr) == 1) {
    a6->sin6_family = AF_INET6;
    a6->sin6_port = htons((uint16_t)o->port);
    flags |= MHD_USE_IPv6;
  } else {
    return il_error(IL_ERR_INVALID_ARG, "--host: '%s' is not an IPv4 or IPv6 address", o->host);
  }
  if (o->port < 0 || o->port > 65535) return il_error(IL_ERR_INVALID_ARG, "--port: %d is not a port", o->port);
  if (o->max_request_memory && o->max_request_memory < o->max_body)
    return il_error(IL_ERR_INVALID_ARG, "--max-request-memory %zu is less than --max-body %zu: a request's body alone "
                    "would not fit", o->max_request_memory, o->max_body);
  if (o->api_key) IL_TRY(il_access_key_check(o->api_key, "--api-key"));
  il_access *access = NULL;
  IL_TRY(il_access_new(o->host, o->allowed_hosts, o->cors_origins, &access));
  il_server *s = il_mem_calloc(IL_MEM_SERVER, sizeof *s, "server");
  if (!s) {
    il_access_free(access);
    return IL_ERR_OOM;
  }
  s->o = *o;
  s->o.api_key = s->o.allowed_hosts = s->o.cors_origins = NULL;
  s->access = access;
  if (o->api_key) {
    s->key_len = strlen(o->api_key);
    s->key = il_mem_alloc(IL_MEM_SERVER, s->key_len + 1, "API key");
    if (!s->key) {
      il_access_free(access);
      il_mem_free(s);
      return IL_ERR_OOM;
    }
    memcpy(s->key, o->api_key, s->key_len + 1);
  }
  if (!s->o.max_body) s->o.max_body = (size_t)1 << 20;
  if (!s->o.max_request_memory) s->o.max_request_memory = 16 * s->o.max_body;
  if (s->o.header_timeout <= 0) s->o.header_timeout = 30;
  if (s->o.body_timeout <= 0) s->o.body_timeout = 60;
  if (s->o.max_connections <= 0) s->o.max_connections = 64;
  /* libmicrohttpd's limit keeps a reserve above --max-connections: idle connections beyond the
   * limit are evicted oldest first (server/guard.h), and a reserve place is what a new one
   * takes meanwhile */
  const unsigned hard_limit = (unsigned)s->o.max_connections + IL__RESERVE;
  il_status gst = il_guard_new((int)hard_limit, s->o.max_connections, s->o.header_timeout, s->o.body_timeout, &s->guard);
  if (gst != IL_OK) {
    il_access_free(access);
    il_mem_free(s->key);
    il_mem_free(s);
    return gst;
  }
  pthread_rwlock_init(&s->lock, NULL);
  pthread_mutex_init(&s->mu, NULL);
  s->t_start = il_time_now();
  snprintf(s->template_note, sizeof s->template_note, "loading");
  s->d = MHD_start_daemon(flags, (uint16_t)o->port, NULL, NULL, il__handler, s, MHD_OPTION_SOCK_ADDR,
                          (struct sockaddr *)&addr, MHD_OPTION_NOTIFY_COMPLETED, il__completed, s,
                          MHD_OPTION_NOTIFY_CONNECTION, il__connection, s, MHD_OPTION_CONNECTION_LIMIT,
                          hard_limit, MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)600,
                          MHD_OPTION_END);
  if (!s->d) {
    int e = errno;
    il_guard_free(s->guard);
    il_access_free(s->access);
    il_mem_free(s->key);
    pthread_rwlock_destroy(&s->lock);
    pthread_mutex_destroy(&s->mu);
    il_mem_free(s);
    return il_error(IL_ERR_IO, "--host %s --port %d: cannot listen: %s", o->host, o->port,
                    e ? strerror(e) : "libmicrohttpd refused to start");
  }
  const union MHD_DaemonInfo *info = MHD_get_daemon_info(s->d, MHD_DAEMON_INFO_BIND_PORT);
  s->port = info ? info->port : o->port;
  *out = s;
  return IL_OK;
}

int il_server_port(const il_server *s) { return s->port; }

const char *il_server_template_note(const il_server *s) { return s->template_note; }

il_status il_server_attach_opts(il_server *s, il_engine *e, const il_sched_opts *so) {
  s->o.sched = *so;
  return il_server_attach(s, e);
}

il_status il_server_attach(il_server *s, il_engine *e) {
  il_api api;
  IL_TRY(il_api_init(&api, e, s->o.model_id, s->o.chat_template, s->o.max_tokens, &s->o.defaults,
                     s->template_note, sizeof s->template_note));
  il_sched *sched = NULL;
  il_status st = il_sched_new(e, &s->o.sched, &sched);
  if (st == IL_OK) st = il_sched_start(sched);
  if (st != IL_OK) {
    il_sched_free(sched);
    il_api_free(&api);
    return st;
  }
  api.sched = sched;
  if (il_gpu_sampler_start(s->o.nvml_path, 1000, &s->gpu) != IL_OK) {
    s->gpu = NULL;
    il_error_clear();
  }
  pthread_rwlock_wrlock(&s->lock);
  s->api = api;
  pthread_rwlock_unlock(&s->lock);
  return IL_OK;
}

void il_server_stop(il_server *s) {
  if (!s) return;
  pthread_rwlock_wrlock(&s->lock);
  il_sched *sched = s->api.sched;
  s->api.sched = NULL;
  pthread_rwlock_unlock(&s->lock);
  il_sched_free(sched); /* running streams end ("cancelled"); their connections finish */
  MHD_stop_daemon(s->d);
  il_api_free(&s->api); /* after the daemon: no request is left to compile a grammar */
  il_guard_free(s->guard); /* after the daemon: no connection is left to shut down */
  il_access_free(s->access);
  if (s->key) memset(s->key, 0, s->key_len);
  il_mem_free(s->key);
  il_gpu_sampler_stop(s->gpu);
  pthread_rwlock_destroy(&s->lock);
  pthread_mutex_destroy(&s->mu);
  il_mem_free(s);
}
