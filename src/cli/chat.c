/* cli/chat: `inferlab chat`: an interactive chat in the terminal, on the server's path: the
 * chat template (server/template), then the continuous-batching scheduler (engine/sched)
 * stepped on this thread, with the text streamed as it is produced. A turn's prompt is the
 * whole conversation; the scheduler's prefix reuse finds the earlier turns still in the slot,
 * so only the new message is processed. Lines starting with / are commands (/reset, /quit).
 * Ctrl-C during a reply stops that reply (what it said so far stays in the conversation) and
 * returns to the prompt, as llama-cli and ollama do; at the prompt it ends the chat. */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli/args.h"
#include "cli/cli.h"
#include "core/timer.h"
#include "engine/engine.h"
#include "engine/sched.h"
#include "memory/mem.h"
#include "server/template.h"

#define IL__CHAT_LINE 65536
#define IL__CHAT_MAX_MSGS 1024

static void il__chat_help(void) {
  printf("usage: inferlab chat [-m MODEL] [--system TEXT] [--chat-template NAME] [engine options]\n\n"
         "Chats with MODEL in the terminal: type a message and press Enter; the reply streams as it is\n"
         "generated. The conversation is formatted with the model's chat template (or --chat-template)\n"
         "and run through the same scheduler as `inferlab serve`. Reads stdin to its end when it is\n"
         "not a terminal (one message per line).\n"
         "Commands: /reset (forget the conversation), /quit (or end of input).\n"
         "Ctrl-C stops the reply being generated and returns to the prompt (the conversation is\n"
         "kept); at the prompt it ends the chat.\n\n"
         "options:\n"
         "  %-24s %s\n  %-24s %s\n  %-24s %s\n  %-24s %s\n",
         "    --system TEXT", "a system message first in the conversation",
         "    --chat-template NAME", "chatml, smollm2, llama2, mistral, llama3, phi3, gemma [the model's]",
         "    --stats", "print tokens and speed of each reply to stderr",
         "-n, --n-predict N", "most tokens per reply (-1 = until end or context full) [256]");
  il_cli_print_options(stdout, "model,wtype,threads,ctx,batch,seed,temp,top-k,top-p,min-p,no-mmap,direct-io,mlock,preload,load-pipeline,"
                               "repeat-penalty,repeat-last-n,isa,repack,device,split,micro-batches,tp,mem-limit,attn");
  printf("\nexamples:\n"
         "  inferlab chat -m smollm2-135m-instruct.gguf\n"
         "  printf 'Hello\\nTell me a story\\n' | inferlab chat -m builtin:tiny -n 16 --temp 0\n"
         "\nexit codes: 0 ok, 1 runtime failure, 64 usage, 65 malformed model, 66 model not found,\n"
         "            69 unsupported, 71 out of memory, 130 Ctrl-C at the prompt\n");
}

typedef struct {
  struct {
    char *p;
    size_t len, cap;
  } reply;
  bool done, failed;
  il_finish_reason finish;
  int32_t n_gen, n_prompt, n_cached;
} il__turn;

static void il__append(il__turn *t, const char *s, size_t n) {
  if (t->failed || !n) return;
  if (t->reply.len + n + 1 > t->reply.cap) {
    size_t cap = t->reply.cap ? t->reply.cap * 2 : 1024;
    while (cap < t->reply.len + n + 1) cap *= 2;
    char *np = il_mem_alloc(IL_MEM_OTHER, cap, "chat reply");
    if (!np) {
      t->failed = true;
      return;
    }
    if (t->reply.len) memcpy(np, t->reply.p, t->reply.len);
    il_mem_free(t->reply.p);
    t->reply.p = np;
    t->reply.cap = cap;
  }
  memcpy(t->reply.p + t->reply.len, s, n);
  t->reply.len += n;
  t->reply.p[t->reply.len] = 0;
}

static void il__on_event(void *ud, const il_sched_event *ev) {
  il__turn *t = ud;
  if (ev->done) {
    t->done = true;
    t->n_gen = ev->n_gen;
    t->n_prompt = ev->n_prompt;
    t->n_cached = ev->n_cached;
    return;
  }
  if (ev->len) {
    fwrite(ev->text, 1, ev->len, stdout);
    fflush(stdout);
    il__append(t, ev->text, ev->len);
  }
  if (ev->finish != IL_FINISH_NONE) t->finish = ev->finish;
}

static volatile sig_atomic_t il__chat_interrupted;
static void il__chat_on_sigint(int sig) {
  (void)sig;
  il__chat_interrupted = 1;
}

static char *il__dup(const char *s) {
  size_t n = strlen(s);
  char *d = il_mem_alloc(IL_MEM_OTHER, n + 1, "chat message");
  if (d) memcpy(d, s, n + 1);
  return d;
}

int il_cli_chat(int argc, char **argv) {
  il_config cfg;
  il_config_defaults(&cfg);
  static il_request_opts req; /* 64 KiB: not on the stack */
  il_request_opts_defaults(&req);
  req.p.n_predict = 256;
  bool help = false, stats = false;
  const char *system = NULL, *tmpl = NULL;
  il_cli_flag flags[] = {
      {"help", 'h', false, NULL, &help},
      {"system", 0, true, &system, NULL},
      {"chat-template", 0, true, &tmpl, NULL},
      {"stats", 0, false, NULL, &stats},
  };
  const char *pos[1];
  int n_pos;
  int rc = il_cli_parse("chat", argc, argv, &cfg, &req, flags, 4, pos, 0, &n_pos);
  if (rc) return rc;
  if (help) {
    il__chat_help();
    return IL_EXIT_OK;
  }
  il_template_kind kind;
  if (tmpl && il_template_by_name(tmpl, &kind) != IL_OK) return il_cli_usage_error("chat", "%s", il_error_detail());
  il_engine *e = NULL;
  il_status st = il_engine_open(&cfg, &e);
  if (st != IL_OK) return il_cli_fail("chat", st);
  il_startup_print(il_engine_startup(e), stderr, "");
  char how[128];
  st = il_template_for_engine(e, tmpl, &kind, how, sizeof how);
  il_sched *s = NULL;
  if (st == IL_OK) st = il_sched_new(e, NULL, &s);
  char *line = il_mem_alloc(IL_MEM_OTHER, IL__CHAT_LINE, "chat input line");
  il_chat_msg *msgs = il_mem_calloc(IL_MEM_OTHER, sizeof *msgs * IL__CHAT_MAX_MSGS, "chat history");
  char **own = il_mem_calloc(IL_MEM_OTHER, sizeof *own * IL__CHAT_MAX_MSGS, "chat history"); /* msgs[i].content */
  if (st == IL_OK && (!line || !msgs || !own)) st = IL_ERR_OOM;
  int n_msgs = 0;
  const bool tty = isatty(0);
  if (st == IL_OK && system) {
    msgs[n_msgs].role = "system";
    if (!(msgs[n_msgs].content = own[n_msgs] = il__dup(system))) st = IL_ERR_OOM;
    n_msgs++;
  }
  const int n_fixed = n_msgs;
  /* no SA_RESTART: Ctrl-C at the prompt ends the read (and the chat) */
  struct sigaction sa, old_int;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = il__chat_on_sigint;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, &old_int);
  bool quit_by_signal = false;
  if (st == IL_OK && tty)
    fprintf(stderr, "inferlab chat: %s, %s (%s); /reset, /quit\n", cfg.model, il_template_name(kind), how);
  while (st == IL_OK) {
    if (tty) {
      fputs("> ", stdout);
      fflush(stdout);
    }
    il__chat_interrupted = 0;
    if (!fgets(line, IL__CHAT_LINE, stdin)) {
      quit_by_signal = il__chat_interrupted != 0;
      if (quit_by_signal) fputc('\n', stdout);
      break;
    }
    line[strcspn(line, "\r\n")] = 0;
    if (!line[0]) continue;
    if (!strcmp(line, "/quit") || !strcmp(line, "/exit")) break;
    if (!strcmp(line, "/reset")) {
      for (int i = n_fixed; i < n_msgs; i++) il_mem_free(own[i]);
      n_msgs = n_fixed;
      fprintf(stderr, "(conversation cleared)\n");
      continue;
    }
    if (n_msgs + 2 > IL__CHAT_MAX_MSGS) {
      fprintf(stderr, "inferlab chat: the conversation is %d messages long; /reset to go on\n", n_msgs);
      continue;
    }
    msgs[n_msgs].role = "user";
    if (!(msgs[n_msgs].content = own[n_msgs] = il__dup(line))) {
      st = IL_ERR_OOM;
      break;
    }
    n_msgs++;
    char *text = NULL;
    size_t tl = 0, nt = 0;
    int32_t *tokens = NULL;
    st = il_template_render(kind, msgs, n_msgs, true, &text, &tl);
    if (st == IL_OK) st = il_tokenize_alloc(il_engine_vocab(e), text, tl, !req.p.no_bos, true, &tokens, &nt);
    il_mem_free(text);
    if (st != IL_OK) break;
    il_sched_params p;
    il_sched_params_from_request(&req.p, &p);
    int32_t room = il_engine_n_ctx(e) - (int32_t)nt;
    p.max_tokens = req.p.n_predict > 0 && req.p.n_predict < room ? req.p.n_predict : room;
    il__turn t = {0};
    double t0 = il_time_now();
    if (room < 1) {
      fprintf(stderr, "inferlab chat: the conversation (%zu tokens) fills the context of %d; /reset to go on\n", nt,
              il_engine_n_ctx(e));
      il_mem_free(own[--n_msgs]);
      il_mem_free(tokens);
      continue;
    }
    uint64_t id = 0;
    il__chat_interrupted = 0;
    st = il_sched_submit(s, tokens, (int32_t)nt, &p, il__on_event, &t, &id);
    il_mem_free(tokens);
    bool stopped = false;
    while (st == IL_OK && !t.done) {
      if (il__chat_interrupted && !stopped) {
        il_sched_cancel(s, id); /* the next step ends it; the text so far is kept */
        stopped = true;
      }
      st = il_sched_step(s, NULL);
    }
    il__chat_interrupted = 0;
    printf("\n");
    fflush(stdout);
    if (stopped) fprintf(stderr, "[stopped: %d tokens; the reply so far stays in the conversation]\n", t.n_gen);
    if (st != IL_OK) break;
    if (t.failed) {
      st = IL_ERR_OOM;
      break;
    }
    if (stats) {
      double dt = il_time_now() - t0;
      fprintf(stderr, "[%d prompt tokens (%d reused), %d generated in %.2f s, %.1f tokens/s, %s]\n", t.n_prompt,
              t.n_cached, t.n_gen, dt, dt > 0 ? t.n_gen / dt : 0.0, il_finish_name(t.finish));
    }
    msgs[n_msgs].role = "assistant";
    msgs[n_msgs].content = own[n_msgs] = t.reply.p ? t.reply.p : il__dup("");
    if (!own[n_msgs++]) st = IL_ERR_OOM;
  }
  sigaction(SIGINT, &old_int, NULL);
  for (int i = 0; own && i < n_msgs; i++) il_mem_free(own[i]);
  il_mem_free(own);
  il_mem_free(msgs);
  il_mem_free(line);
  il_sched_free(s);
  il_engine_free(e);
  if (st == IL_OK && quit_by_signal) return 130;
  return st == IL_OK ? IL_EXIT_OK : il_cli_fail("chat", st);
}
