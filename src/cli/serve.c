/* cli/serve: `inferlab serve`: the OpenAI-compatible server (server/server.h) until SIGINT or
 * SIGTERM. It listens first (so /health says 503 while the model loads), then loads the model
 * with every engine option, then serves. --fit applies the out-of-memory report's suggested
 * change and tries again, so a server that starts never meets an OOM in flight. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/args.h"
#include "cli/cli.h"
#include "engine/engine.h"
#include "engine/oom.h"
#include "engine/spec.h"
#include "memory/mem.h"
#include "model/builtin.h"

#if IL_HAVE_SERVER
#include <pthread.h>

#include "server/access.h"
#include "server/server.h"
#include "server/template.h"
#endif

static void il__serve_help(void) {
  printf("usage: inferlab serve [-m MODEL] [--host ADDR] [--port N] [--parallel N] [--api-key KEY]\n"
         "                      [server options] [engine options]\n\n"
         "Serves MODEL over an OpenAI-compatible HTTP API with continuous batching:\n"
         "/v1/chat/completions, /v1/completions (streaming or not), /v1/models, /v1/tokenize,\n"
         "/v1/detokenize, /health (503 while loading), /metrics (Prometheus) and a chat page at /.\n"
         "Stop it with Ctrl-C or SIGTERM. TLS: put a reverse proxy in front (docs/serve.md).\n\n"
         "server options:\n"
         "  %-28s %s\n  %-28s %s\n  %-28s %s\n  %-28s %s\n  %-28s %s\n  %-28s %s\n  %-28s %s\n"
         "  %-28s %s\n  %-28s %s\n  %-28s %s\n  %-28s %s\n  %-28s %s\n  %-28s %s\n  %-28s %s\n  %-28s %s\n"
         "  %-28s %s\n  %-28s %s\n  %-28s %s\n  %-28s %s\n  %-28s %s\n",
         "    --host ADDR", "address to listen on [127.0.0.1]; 0.0.0.0 for every interface",
         "    --port N", "TCP port [8080]; 0 = any free port (printed)",
         "    --parallel N", "sequence slots decoded together (same as --n-seq) [4]",
         "    --api-key KEY", "require 'Authorization: Bearer KEY' on /v1/*",
         "    --api-key-file F", "read the key from the first line of F (keeps it out of ps)",
         "    --allowed-hosts LIST", "Host names served beyond localhost and the address (.domain, *)",
         "    --cors-origins LIST", "origins whose web pages may call the API (scheme://host:port, *)",
         "    --alias NAME", "model name in /v1/models and requests [the file's base name]",
         "    --chat-template NAME", "chatml, smollm2, llama2, mistral, llama3, phi3, gemma [the model's]",
         "    --max-body BYTES", "largest request body [1048576]",
         "    --max-request-memory N", "bytes one request may make the server hold (413 beyond) [16 x max-body]",
         "    --max-connections N", "requests in progress before 429 (idle connections beyond: closed) [64]",
         "    --header-timeout S", "seconds a request's headers may take in all [30]",
         "    --body-timeout S", "seconds a request's body may take in all [60]",
         "    --max-tokens N", "largest max_tokens a request may ask [the context]",
         "    --max-queue N", "requests waiting for a slot before 503 [4 x parallel]",
         "    --step-tokens N", "tokens per scheduler step (chunked prefill budget) [--batch]",
         "    --draft-model FILE", "speculative decoding: a small model with the same vocabulary (grammar requests do not draft)",
         "    --draft N", "tokens drafted per step and choice, 1 to 16 [adaptive: 4 to start, within 1..8]",
         "    --log-format F", "a line per finished request on stderr: text, json or off [text]");
  printf("\nengine options (-n/--n-predict is the default max_tokens of a request; --repack is on\n"
         "unless given, for a GGUF model on the CPU):\n");
  /* not listed: n-seq (--parallel above), the prompt, and the options a request sets itself
   * (no-bos, no-parse-special, ignore-eos); they are still accepted */
  il_cli_print_options(stdout, "model,wtype,threads,ctx,batch,seed,temp,top-k,top-p,min-p,repeat-penalty,repeat-last-n,"
                               "n-predict,isa,repack,device,split,micro-batches,tp,mem-limit,attn,attn-slice,kv-type,dtype,check-numerics,kv,"
                               "kv-block,no-prefix-cache,gpu-layers,offload,fit,place,no-mmap,direct-io,mlock,preload,load-pipeline,config");
  printf("\nexamples:\n"
         "  inferlab serve -m model.gguf --parallel 8 --port 8080\n"
         "  inferlab serve -m builtin:tiny --port 0 --api-key-file /run/secrets/key\n"
         "  curl http://127.0.0.1:8080/v1/chat/completions -H 'Content-Type: application/json' \\\n"
         "       -d '{\"messages\":[{\"role\":\"user\",\"content\":\"Hello\"}],\"max_tokens\":16}'\n"
         "\nexit codes: 0 stopped by a signal, 1 runtime failure (cannot listen), 64 usage,\n"
         "            65 malformed model, 66 model not found, 69 unsupported (or built without the\n"
         "            server), 71 out of memory\n");
}

#if IL_HAVE_SERVER
/* Reads the first line of path into key (the API key file), whole: a line longer than the
 * buffer is an error, never a shorter key. */
static il_status il__read_key(const char *path, char *key, size_t cap) {
  FILE *f = fopen(path, "r");
  if (!f) return il_error(IL_ERR_IO, "--api-key-file %s: cannot open", path);
  bool ok = fgets(key, (int)cap, f) != NULL;
  bool whole = ok && (strchr(key, '\n') || feof(f) || fgetc(f) == EOF);
  fclose(f);
  if (!ok) return il_error(IL_ERR_INVALID_ARG, "--api-key-file %s: empty", path);
  if (!whole) return il_error(IL_ERR_INVALID_ARG, "--api-key-file %s: the key is longer than %zu bytes", path, cap - 2);
  key[strcspn(key, "\r\n")] = 0;
  if (!*key) return il_error(IL_ERR_INVALID_ARG, "--api-key-file %s: the first line is empty", path);
  char flag[64];
  snprintf(flag, sizeof flag, "--api-key-file %.40s", path);
  return il_access_key_check(key, flag);
}

/* SIGINT and SIGTERM are taken by one thread from the start. While the model loads (a slow
 * link or a large file: minutes, and loading cannot be interrupted from inside) a signal ends
 * the process at once, nothing being served or written yet; once it is ready the main thread
 * is told, and stops the server cleanly. */
static struct {
  sigset_t set;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  bool ready;
  int sig;
} il__sigs = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

static void *il__sig_thread(void *arg) {
  (void)arg;
  int sig = 0;
  if (sigwait(&il__sigs.set, &sig)) return NULL;
  pthread_mutex_lock(&il__sigs.mu);
  if (!il__sigs.ready) {
    fprintf(stderr, "inferlab serve: %s while loading: stopping\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
    _exit(IL_EXIT_OK);
  }
  il__sigs.sig = sig;
  pthread_cond_signal(&il__sigs.cv);
  pthread_mutex_unlock(&il__sigs.mu);
  return NULL;
}

static int il__int_flag(const char *flag, const char *v, long lo, long hi, long *out) {
  char *end = NULL;
  long x = strtol(v, &end, 10);
  if (!*v || *end || x < lo || x > hi) return il_cli_usage_error("serve", "%s: '%s' is not an integer in [%ld, %ld]", flag, v, lo, hi);
  *out = x;
  return 0;
}

#endif

int il_cli_serve(int argc, char **argv) {
  il_config cfg;
  il_config_defaults(&cfg);
  cfg.n_seq = 4;
  static il_request_opts req; /* defaults for what a request leaves out; 64 KiB: not on the stack */
  il_request_opts_defaults(&req);
  bool help = false;
  const char *host = NULL, *port = NULL, *parallel = NULL, *key = NULL, *key_file = NULL, *alias = NULL,
             *tmpl = NULL, *max_body = NULL, *max_conn = NULL, *max_tokens = NULL, *max_queue = NULL,
             *step_tokens = NULL, *max_req_mem = NULL, *header_to = NULL, *body_to = NULL,
             *allowed_hosts = NULL, *cors_origins = NULL, *log_format = NULL, *draft_model = NULL, *draft_n = NULL;
  il_cli_flag flags[] = {
      {"help", 'h', false, NULL, &help},
      {"host", 0, true, &host, NULL},
      {"port", 0, true, &port, NULL},
      {"parallel", 0, true, &parallel, NULL},
      {"api-key", 0, true, &key, NULL},
      {"api-key-file", 0, true, &key_file, NULL},
      {"allowed-hosts", 0, true, &allowed_hosts, NULL},
      {"cors-origins", 0, true, &cors_origins, NULL},
      {"log-format", 0, true, &log_format, NULL},
      {"alias", 0, true, &alias, NULL},
      {"chat-template", 0, true, &tmpl, NULL},
      {"max-body", 0, true, &max_body, NULL},
      {"max-request-memory", 0, true, &max_req_mem, NULL},
      {"max-connections", 0, true, &max_conn, NULL},
      {"header-timeout", 0, true, &header_to, NULL},
      {"body-timeout", 0, true, &body_to, NULL},
      {"max-tokens", 0, true, &max_tokens, NULL},
      {"max-queue", 0, true, &max_queue, NULL},
      {"step-tokens", 0, true, &step_tokens, NULL},
      {"draft-model", 0, true, &draft_model, NULL},
      {"draft", 0, true, &draft_n, NULL},
  };
  const char *pos[1];
  int n_pos;
  int rc = il_cli_parse("serve", argc, argv, &cfg, &req, flags, (int)(sizeof flags / sizeof flags[0]), pos, 0, &n_pos);
  if (rc) return rc;
  if (help) {
    il__serve_help();
    return IL_EXIT_OK;
  }
#if !IL_HAVE_SERVER
  fprintf(stderr, "inferlab serve: this build has no HTTP server: install libmicrohttpd-dev and libjansson-dev "
                  "(scripts/deps.sh) and rebuild\n");
  return IL_EXIT_UNSUPPORTED;
#else
  il_server_opts o;
  il_server_opts_defaults(&o);
  long v = 0;
  if (host) snprintf(o.host, sizeof o.host, "%s", host);
  if (port && (rc = il__int_flag("--port", port, 0, 65535, &v))) return rc;
  if (port) o.port = (int)v;
  if (parallel && (rc = il__int_flag("--parallel", parallel, 1, 4096, &v))) return rc;
  if (parallel) cfg.n_seq = (int)v;
  if (max_body && (rc = il__int_flag("--max-body", max_body, 1024, 1L << 30, &v))) return rc;
  if (max_body) o.max_body = (size_t)v;
  if (max_req_mem && (rc = il__int_flag("--max-request-memory", max_req_mem, 1L << 20, 1L << 40, &v))) return rc;
  if (max_req_mem) o.max_request_memory = (size_t)v;
  if (max_conn && (rc = il__int_flag("--max-connections", max_conn, 1, 100000, &v))) return rc;
  if (max_conn) o.max_connections = (int)v;
  if (header_to && (rc = il__int_flag("--header-timeout", header_to, 1, 3600, &v))) return rc;
  if (header_to) o.header_timeout = (double)v;
  if (body_to && (rc = il__int_flag("--body-timeout", body_to, 1, 3600, &v))) return rc;
  if (body_to) o.body_timeout = (double)v;
  if (max_tokens && (rc = il__int_flag("--max-tokens", max_tokens, 1, 1 << 22, &v))) return rc;
  if (max_tokens) o.max_tokens = (int)v;
  if (max_queue && (rc = il__int_flag("--max-queue", max_queue, 1, 1 << 20, &v))) return rc;
  if (max_queue) o.sched.max_queue = (int)v;
  if (step_tokens && (rc = il__int_flag("--step-tokens", step_tokens, 1, 1 << 16, &v))) return rc;
  if (step_tokens) o.sched.step_tokens = (int)v;
  if (draft_n && !draft_model) return il_cli_usage_error("serve", "--draft %s: needs --draft-model", draft_n);
  if (draft_n && (rc = il__int_flag("--draft", draft_n, 1, IL_SPEC_DRAFT_MAX, &v))) return rc;
  if (draft_n) o.sched.n_draft = (int)v;
  if (alias) snprintf(o.model_id, sizeof o.model_id, "%s", alias);
  o.allowed_hosts = allowed_hosts;
  if (log_format && il_reqlog_parse(log_format, &o.log_format) != IL_OK)
    return il_cli_usage_error("serve", "%s", il_error_detail());
  o.cors_origins = cors_origins;
  if (tmpl) {
    il_template_kind k;
    if (il_template_by_name(tmpl, &k) != IL_OK) return il_cli_usage_error("serve", "%s", il_error_detail());
    snprintf(o.chat_template, sizeof o.chat_template, "%s", tmpl);
  }
  if (key && key_file) return il_cli_usage_error("serve", "give --api-key or --api-key-file, not both");
  static char key_buf[IL_ACCESS_KEY_MAX + 2]; /* the key and its newline; not on the stack */
  if (key && il_access_key_check(key, "--api-key") != IL_OK) return il_cli_usage_error("serve", "%s", il_error_detail());
  if (key) o.api_key = key;
  if (key_file) {
    il_status st = il__read_key(key_file, key_buf, sizeof key_buf);
    if (st != IL_OK) return il_cli_fail("serve", st);
    o.api_key = key_buf;
  }
  o.defaults = req.p; /* sampling flags, no-bos, and n-predict as the default max_tokens */
  /* --repack is on unless given: a server decodes several sequences per step, which run from
   * repacked weights 1.1-2x faster (docs/devices.md), and one sequence about as fast. Only for a
   * GGUF file on the CPU: a built-in model's weights are the program's own memory (the copy
   * would add their size), and other devices keep their own weights. */
  if (!il_config_given(&cfg, "repack") && !strcmp(cfg.device, "cpu") && !il_builtin_is(cfg.model)) cfg.repack = true;

  /* signals are taken by il__sig_thread: blocked here, before any other thread starts */
  sigemptyset(&il__sigs.set);
  sigaddset(&il__sigs.set, SIGINT);
  sigaddset(&il__sigs.set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &il__sigs.set, NULL);
  signal(SIGPIPE, SIG_IGN);
  pthread_t sig_thread;
  if (pthread_create(&sig_thread, NULL, il__sig_thread, NULL))
    return il_cli_fail("serve", il_error(IL_ERR_INTERNAL, "cannot start the signal thread"));
  pthread_detach(sig_thread);

  il_server *srv = NULL;
  il_status st = il_server_start(&o, &srv);
  if (st != IL_OK) {
    const int code = il_cli_fail("serve", st);
    return st == IL_ERR_IO ? 1 : code; /* cannot listen: a runtime failure, not a missing input */
  }
  fprintf(stderr, "inferlab serve: listening on http://%s%s%s:%d (loading %s)\n", strchr(o.host, ':') ? "[" : "",
          o.host, strchr(o.host, ':') ? "]" : "", il_server_port(srv), cfg.model);
  if (!strcmp(o.host, "0.0.0.0") || !strcmp(o.host, "::"))
    fprintf(stderr, "inferlab serve: note: listening on every interface%s\n",
            o.api_key ? "" : " without --api-key: anyone who can reach this port can use the model");
  il_engine *e = NULL, *draft = NULL;
  if (draft_model) { /* the draft shares the server's options: threads, device, slots, context */
    il_config dcfg = cfg;
    snprintf(dcfg.model, sizeof dcfg.model, "%s", draft_model);
    cfg.logits_all = true; /* a verification pass returns every drafted position's logits */
    st = il_engine_open(&dcfg, &draft);
    if (st != IL_OK) {
      const int code = il_cli_fail_model("serve", draft_model, st);
      il_server_stop(srv);
      return code;
    }
  }
  st = il_engine_open(&cfg, &e); /* --fit is the engine option: it applies the report's change and logs it */
  if (st == IL_OK && draft) st = il_spec_check_vocab(e, draft);
  o.sched.draft = draft;
  if (st == IL_OK) st = il_server_attach_opts(srv, e, &o.sched);
  if (st != IL_OK) {
    int code = il_cli_fail("serve", st);
    il_server_stop(srv);
    il_engine_free(e);
    il_engine_free(draft);
    return code;
  }
  il_engine_snapshot es;
  il_engine_snapshot_get(e, IL_ENGINE_SNAP_MEMORY, &es);
  const il_startup *su = il_engine_startup(e);
  il_startup_print(su, stderr, "inferlab serve: ");
  char verdict[512];
  const il_startup_phase_id dom = il_startup_verdict(su, verdict, sizeof verdict);
  fprintf(stderr, "inferlab serve: ready: %s on %s, %d slots x %d tokens, %s%s; started in %.3f s (%s %.0f%%%s)\n",
          cfg.model, es.device.name, es.n_seq, es.n_ctx, il_server_template_note(srv),
          cfg.repack ? ", weights repacked (--repack)" : "", il_startup_total(su), il_startup_phase_name(dom),
          il_startup_total(su) > 0 ? 100 * su->phase[dom].seconds / il_startup_total(su) : 0.0,
          cfg.preload ? ", preloaded" : "");
  pthread_mutex_lock(&il__sigs.mu);
  il__sigs.ready = true;
  while (!il__sigs.sig) pthread_cond_wait(&il__sigs.cv, &il__sigs.mu);
  int sig = il__sigs.sig;
  pthread_mutex_unlock(&il__sigs.mu);
  fprintf(stderr, "inferlab serve: %s: stopping\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
  il_server_stop(srv);
  il_engine_free(e);
  il_engine_free(draft);
  return IL_EXIT_OK;
#endif
}
