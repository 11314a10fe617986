/* lab/learn: the lessons' table, their texts, the five steps and the quick check. See learn.h;
 * the labs themselves are in learn_labs.c (engine, quality, numerics) and learn_machine.c
 * (machine, pattern). */
#include "lab/learn.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "backend/registry.h"
#include "core/jsonw.h"
#include "lab/learn_impl.h"
#include "lab/learn_texts.h"
#include "memory/mem.h"
#include "probe/report.h"

/* ---- the concepts, in the course's order -------------------------------------------------- */

static const il_learn_concept il__concepts[] = {
    {1, "gpu-compute", IL_LEARN_ENGINE, "--device cpu -> the device"},
    {2, "cuda", IL_LEARN_ENGINE, "--ubatch 512 -> 1 (a pass per token)"},
    {3, "cuda-toolkit", IL_LEARN_MACHINE, "nvcc 12.6 -> 12.2 (lesson machine)"},
    {4, "cuda-driver", IL_LEARN_MACHINE, "module 530 -> 535 after an upgrade (lesson machine)"},
    {5, "compute-capability", IL_LEARN_MACHINE, "IL_CUDA_ARCHS 80;90 -> 75;80;90 (lesson machine)"},
    {6, "nvidia-container-toolkit", IL_LEARN_MACHINE, "toolkit absent -> installed (lesson machine)"},
    {7, "nvidia-runtime", IL_LEARN_MACHINE, "containerd without -> with the nvidia runtime (lesson machine)"},
    {8, "default-runtime", IL_LEARN_MACHINE, "docker default-runtime runc -> nvidia (lesson machine)"},
    {9, "gpu-device", IL_LEARN_MACHINE, "/dev/nvidia* 0660 -> 0666 (lesson machine)"},
    {10, "gpu-passthrough", IL_LEARN_MACHINE, "GPUs bound to vfio-pci -> nvidia (lesson machine)"},
    {11, "nvidia-visible-devices", IL_LEARN_MACHINE, "NVIDIA_VISIBLE_DEVICES=void -> all (lesson machine)"},
    {12, "cuda-out-of-memory", IL_LEARN_ENGINE, "a job too large -> the report's fix"},
    {13, "vram-fragmentation", IL_LEARN_PATTERN, "allocation pattern steady -> fragmenting"},
    {14, "model-offloading", IL_LEARN_ENGINE, "--offload none -> stream"},
    {15, "cpu-offloading", IL_LEARN_ENGINE, "--gpu-layers all -> auto"},
    {16, "vae-offloading", IL_LEARN_ENGINE, "--place token_embd=cpu,output=cpu"},
    {17, "attention-slicing", IL_LEARN_ENGINE, "--attn naive -> sliced"},
    {18, "memory-efficient-attention", IL_LEARN_ENGINE, "--attn naive -> memeff"},
    {19, "flashattention", IL_LEARN_ENGINE, "--attn naive -> flash"},
    {20, "xformers", IL_LEARN_ENGINE, "--attn auto -> naive"},
    {21, "mixed-precision", IL_LEARN_ENGINE, "--wtype f32 -> f16 (compute in f32)"},
    {22, "fp32", IL_LEARN_ENGINE, "--kv-type f16 -> f32"},
    {23, "fp16", IL_LEARN_ENGINE, "--dtype f32 -> f16"},
    {24, "bf16", IL_LEARN_NUMERICS, "--dtype f16 -> bf16 (a model that overflows f16)"},
    {25, "int8", IL_LEARN_ENGINE, "--wtype f16 -> q8_0"},
    {26, "int4", IL_LEARN_ENGINE, "--wtype q8_0 -> q4_0"},
    {27, "quantization-error", IL_LEARN_QUALITY, "--wtype q8_0 -> q4_0, KL against f32"},
    {28, "tensor-core", IL_LEARN_ENGINE, "--isa scalar -> the best (cuda: --wtype f32 -> f16)"},
    {29, "batch-size", IL_LEARN_ENGINE, "--batch 1 -> 8"},
    {30, "inference-latency", IL_LEARN_ENGINE, "--prompt 32 -> 128"},
    {31, "throughput", IL_LEARN_ENGINE, "--threads 1 -> all"},
    {32, "gpu-utilization", IL_LEARN_ENGINE, "--batch 1 -> 8 (utilization vs roofline)"},
};

int il_learn_count(void) { return (int)(sizeof il__concepts / sizeof il__concepts[0]); }

const il_learn_concept *il_learn_at(int i) { return i >= 0 && i < il_learn_count() ? &il__concepts[i] : NULL; }

/* ---- languages and the words of the lesson around the texts ------------------------------- */

static const char *const il__lang_names[IL_LEARN_LANGS] = {"en", "de"};

bool il_learn_lang_parse(const char *s, il_learn_lang *out) {
  for (int i = 0; i < IL_LEARN_LANGS; i++)
    if (!strcmp(s, il__lang_names[i])) {
      *out = (il_learn_lang)i;
      return true;
    }
  return false;
}

il_learn_lang il_learn_lang_from_env(void) {
  const char *vars[] = {"LC_ALL", "LC_MESSAGES", "LANG"};
  for (int i = 0; i < 3; i++) {
    const char *v = getenv(vars[i]);
    if (v && *v) return !strncmp(v, "de", 2) ? IL_LEARN_DE : IL_LEARN_EN;
  }
  return IL_LEARN_EN;
}

/* The section headings and quiz markers each text must use, per language. */
static const char *const il__headings[IL_LEARN_LANGS][5] = {
    {"What it is", "Where it sits", "Typical failure", "How to check", "Quick check"},
    {"Was es ist", "Wo es sitzt", "Typischer Fehler", "So prüfen Sie es", "Kurztest"},
};
static const char *const il__qmark[IL_LEARN_LANGS] = {"Q:", "F:"};

typedef struct {
  const char *key, *text[IL_LEARN_LANGS];
} il__ui_entry;

static const il__ui_entry il__ui[] = {
    {"lever", {"lever", "Hebel"}},
    {"step1", {"1. The state before", "1. Der Zustand vorher"}},
    {"step2", {"2. The one change", "2. Die eine Änderung"}},
    {"step3", {"3. The same measurement again", "3. Dieselbe Messung noch einmal"}},
    {"step4", {"4. The evidence", "4. Die Belege"}},
    {"step5", {"5. Quick check", "5. Kurztest"}},
    {"this_machine", {"this machine", "dieser Rechner"}},
    {"build", {"this build", "dieser Build"}},
    {"baseline_job", {"baseline job", "Ausgangsjob"}},
    {"device_memory", {"memory on the device", "Speicher auf dem Gerät"}},
    {"nothing_else", {"nothing else changes", "sonst ändert sich nichts"}},
    {"runs", {"runs per arm, interleaved A B B A ...", "Läufe je Arm, abwechselnd A B B A ..."}},
    {"failed_runs", {"failed runs", "fehlgeschlagene Läufe"}},
    {"baseline", {"baseline", "Ausgang"}},
    {"variant", {"variant", "Variante"}},
    {"expected", {"as expected", "wie erwartet"}},
    {"unexpected", {"not as expected", "nicht wie erwartet"}},
    {"smaller", {"smaller", "kleiner"}},
    {"larger", {"larger", "größer"}},
    {"same", {"the same", "gleich"}},
    {"about_same", {"about the same (the interval includes 1)", "etwa gleich (das Intervall enthält 1)"}},
    {"na", {"n/a", "k. A."}},
    {"yes", {"yes", "ja"}},
    {"no", {"no", "nein"}},
    {"with_change", {"with the change", "mit der Änderung"}},
    {"meaning_exact",
     {"Every run gave the same value: the difference is exact, not noise.",
      "Jeder Lauf ergab denselben Wert: der Unterschied ist exakt, kein Rauschen."}},
    {"meaning_sig",
     {"The 95% interval of the ratio excludes 1: the change made this difference, beyond the noise of these runs.",
      "Das 95-%-Intervall des Verhältnisses schließt 1 aus: die Änderung hat diesen Unterschied bewirkt, über das "
      "Rauschen dieser Läufe hinaus."}},
    {"meaning_nosig",
     {"The 95% interval includes 1: with these runs the difference cannot be told from noise; --repeat 10 or more "
      "can resolve a smaller effect.",
      "Das 95-%-Intervall enthält 1: mit diesen Läufen ist der Unterschied nicht von Rauschen zu trennen; --repeat 10 "
      "oder mehr kann einen kleineren Effekt auflösen."}},
    {"folder", {"folder", "Ordner"}},
    {"files", {"files", "Dateien"}},
    {"rollback", {"rollback", "Zurück zum Ausgang"}},
    {"your_answer", {"your answer (Enter shows it): ", "Ihre Antwort (Enter zeigt sie): "}},
    {"answer", {"answer", "Antwort"}},
    {"skipped", {"skipped", "übersprungen"}},
    {"interrupted",
     {"interrupted (Ctrl-C): what was measured is kept", "abgebrochen (Strg-C): das bisher Gemessene bleibt erhalten"}},
    {"failed", {"failed", "fehlgeschlagen"}},
    {"v:better", {"better", "besser"}},
    {"v:worse", {"worse", "schlechter"}},
    {"v:changed", {"changed", "verändert"}},
    {"v:no significant change", {"no significant change", "keine signifikante Änderung"}},
    {"v:too few runs", {"too few runs", "zu wenige Läufe"}},
    {"v:n/a", {"n/a", "k. A."}},
    {"machine_tree", {"lesson machine", "Übungsrechner"}},
    {"changed_files", {"changed on the machine", "auf dem Rechner geändert"}},
    {"repair", {"repair", "Reparatur"}},
    {"sequences", {"sequence(s) (batch)", "Sequenz(en) (batch)"}},
    {"per_pass", {"tokens per pass (ubatch)", "Tokens pro Durchlauf (ubatch)"}},
    {"weights", {"weights", "Gewichte"}},
    {"activations", {"activations", "Aktivierungen"}},
    {"workspace", {"workspace", "Arbeitsspeicher"}},
    {"reserved", {"reserved", "reserviert"}},
    {"cpu_util", {"CPU utilization", "CPU-Auslastung"}},
    {"doctor_fix", {"doctor's fix", "Lösung des doctor"}},
    {"largest_batch", {"largest batch that fits (plan)", "größter passender Batch (plan)"}},
    {"curve", {"batch   gen tok/s   tok/s/seq   TPOT", "Batch   erz. Tok/s   Tok/s/Seq   TPOT"}},
    {"reference", {"reference: builtin:tiny in f32; the text scored is this lesson's own, in windows of 64 tokens",
                   "Referenz: builtin:tiny in f32; bewertet wird der Text dieser Lektion, in Fenstern zu 64 Tokens"}},
    {"hot_model", {"builtin:tiny with blk.1.ffn_down.weight x 1e5, dtype f16", "builtin:tiny mit blk.1.ffn_down.weight x 1e5, dtype f16"}},
    {"nonfinite", {"non-finite logits", "nicht endliche Logits"}},
    {"first_at", {"first inf/nan at", "erstes inf/nan bei"}},
    {"largest_act", {"largest |activation| (f16 holds up to 65504)", "größte |Aktivierung| (f16 reicht bis 65504)"}},
    {"kv_buffers", {"sequences with a KV buffer each", "Sequenzen mit je einem KV-Puffer"}},
    {"all_finish", {"all of them finish; then one long sequence asks for", "alle werden fertig; dann verlangt eine lange Sequenz"}},
    {"fits", {"fits", "passt"}},
    {"no_fit", {"does not fit", "passt nicht"}},
    {"capped", {"capped", "begrenzt"}},
    {"every_other", {"every other sequence finishes first", "jede zweite Sequenz wird zuerst fertig"}},
};

static const char *il__ui_get(il_learn_lang lang, const char *key) {
  for (size_t i = 0; i < sizeof il__ui / sizeof il__ui[0]; i++)
    if (!strcmp(il__ui[i].key, key)) return il__ui[i].text[lang];
  return key;
}

const char *il__learn_ui(const il__learn *L, const char *key) { return il__ui_get(L->lang, key); }

/* ---- finding a concept ------------------------------------------------------------------- */

/* Lowercase letters and digits only; umlauts spelled out (ä -> ae), ß -> ss. */
static void il__norm(const char *s, char *out, size_t n) {
  size_t k = 0;
  for (const unsigned char *p = (const unsigned char *)s; *p && k + 3 < n; p++) {
    if (p[0] == 0xC3 && p[1]) {
      const char *rep = NULL;
      switch (p[1]) {
        case 0xA4: case 0x84: rep = "ae"; break;
        case 0xB6: case 0x96: rep = "oe"; break;
        case 0xBC: case 0x9C: rep = "ue"; break;
        case 0x9F: rep = "ss"; break;
        default: break;
      }
      p++;
      if (rep) {
        out[k++] = rep[0];
        out[k++] = rep[1];
      }
      continue;
    }
    if ((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9')) out[k++] = (char)*p;
    else if (*p >= 'A' && *p <= 'Z') out[k++] = (char)(*p - 'A' + 'a');
  }
  out[k] = 0;
}

static const il_learn_embedded *il__embedded(const il_learn_concept *c, il_learn_lang lang) {
  char file[96];
  snprintf(file, sizeof file, "%02d-%s.md", c->number, c->slug);
  for (int i = 0; i < il_learn_n_texts; i++)
    if (!strcmp(il_learn_texts[i].lang, il__lang_names[lang]) && !strcmp(il_learn_texts[i].file, file))
      return &il_learn_texts[i];
  return NULL;
}

/* The title line of an embedded text ("# Name"), copied. */
static void il__title(const il_learn_concept *c, il_learn_lang lang, char *buf, size_t n) {
  buf[0] = 0;
  const il_learn_embedded *e = il__embedded(c, lang);
  if (!e || strncmp(e->text, "# ", 2)) return;
  size_t l = strcspn(e->text + 2, "\r\n");
  snprintf(buf, n, "%.*s", (int)(l < n ? l : n - 1), e->text + 2);
}

il_status il_learn_find(const char *query, const il_learn_concept **out) {
  *out = NULL;
  char q[256];
  il__norm(query, q, sizeof q);
  if (!q[0]) return il_error(IL_ERR_NOT_FOUND, "no concept '%s' (inferlab learn lists them)", query);
  bool digits = true;
  for (const char *p = q; *p; p++) digits = digits && *p >= '0' && *p <= '9';
  if (digits) {
    int k = atoi(q);
    if (k >= 1 && k <= il_learn_count()) {
      *out = &il__concepts[k - 1];
      return IL_OK;
    }
    return il_error(IL_ERR_NOT_FOUND, "no concept number %s (1..%d)", query, il_learn_count());
  }
  const il_learn_concept *prefix_hit = NULL;
  int n_prefix = 0;
  char names[512] = "";
  for (int i = 0; i < il_learn_count(); i++) {
    const il_learn_concept *c = &il__concepts[i];
    char cand[4][256], t[256];
    il__norm(c->slug, cand[0], sizeof cand[0]);
    snprintf(t, sizeof t, "%02d-%s", c->number, c->slug);
    il__norm(t, cand[1], sizeof cand[1]);
    il__title(c, IL_LEARN_EN, t, sizeof t);
    il__norm(t, cand[2], sizeof cand[2]);
    il__title(c, IL_LEARN_DE, t, sizeof t);
    il__norm(t, cand[3], sizeof cand[3]);
    bool prefix = false;
    for (int k = 0; k < 4; k++) {
      if (!cand[k][0]) continue;
      if (!strcmp(cand[k], q)) {
        *out = c;
        return IL_OK;
      }
      if (!strncmp(cand[k], q, strlen(q))) prefix = true;
    }
    if (prefix) {
      if (n_prefix < 6) {
        size_t l = strlen(names);
        snprintf(names + l, sizeof names - l, "%s%s", n_prefix ? ", " : "", c->slug);
      }
      prefix_hit = c;
      n_prefix++;
    }
  }
  if (n_prefix == 1) {
    *out = prefix_hit;
    return IL_OK;
  }
  if (n_prefix > 1)
    return il_error(IL_ERR_INVALID_ARG, "'%s' is the start of %d concepts (%s%s): say which", query, n_prefix, names,
                    n_prefix > 6 ? ", ..." : "");
  return il_error(IL_ERR_NOT_FOUND, "no concept '%s' (inferlab learn lists them)", query);
}

/* ---- the texts ---------------------------------------------------------------------------- */

void il_learn_text_free(il_learn_text *t) {
  il_mem_free(t->buf);
  memset(t, 0, sizeof *t);
}

/* Trims trailing blank lines and spaces of [s, its NUL). */
static void il__rtrim(char *s) {
  size_t l = strlen(s);
  while (l && (s[l - 1] == '\n' || s[l - 1] == ' ' || s[l - 1] == '\r')) s[--l] = 0;
}

static char *il__skip_blank(char *s) {
  while (*s == '\n' || *s == '\r' || *s == ' ') s++;
  return s;
}

il_status il_learn_text_parse(const char *text, il_learn_lang lang, const char *file, il_learn_text *out) {
  memset(out, 0, sizeof *out);
  size_t n = strlen(text);
  out->buf = il_mem_alloc(IL_MEM_OTHER, n + 1, "learn text");
  if (!out->buf) return IL_ERR_OOM;
  memcpy(out->buf, text, n + 1);
  char *p = out->buf;
  if (strncmp(p, "# ", 2)) {
    il_learn_text_free(out);
    return il_error(IL_ERR_FORMAT, "%s: line 1: the title '# NAME' is missing", file);
  }
  char *name = p + 2;
  out->name = name;
  p = strchr(p, '\n');
  if (!p) {
    il_learn_text_free(out);
    return il_error(IL_ERR_FORMAT, "%s: nothing after the title", file);
  }
  *p++ = 0;
  il__rtrim(name);
  p = il__skip_blank(p);
  out->line = p;
  const char **sections[4] = {&out->what, &out->where, &out->failure, &out->check};
  for (int s = 0; s < 5; s++) {
    char want[96];
    snprintf(want, sizeof want, "\n## %s\n", il__headings[lang][s]);
    char *h = strstr(p - 1, want);
    char *next = strstr(p, "\n## ");
    if (!h || h != next) {
      il_learn_text_free(out);
      return il_error(IL_ERR_FORMAT, "%s: section %d must be '## %s'%s", file, s + 1, il__headings[lang][s],
                      next ? " (found another heading first)" : " (missing)");
    }
    *h = 0;
    il__rtrim(p);
    if (s > 0 && !*p) {
      il_learn_text_free(out);
      return il_error(IL_ERR_FORMAT, "%s: section '## %s' is empty", file, il__headings[lang][s - 1]);
    }
    p = il__skip_blank(h + strlen(want));
    if (s < 4) *sections[s] = p;
  }
  if (!*out->line || strchr(out->line, '\n')) {
    il_learn_text_free(out);
    return il_error(IL_ERR_FORMAT, "%s: the one-line summary after the title must be one line", file);
  }
  /* the quick check: three "Q: ..." (de: "F: ...") lines, each followed by an "A: ..." line */
  if (strstr(p, "\n## ")) {
    il_learn_text_free(out);
    return il_error(IL_ERR_FORMAT, "%s: no section may follow '## %s'", file, il__headings[lang][4]);
  }
  int line = 0;
  while (*p) {
    char *nl = strchr(p, '\n');
    if (nl) *nl = 0;
    il__rtrim(p);
    line++;
    if (*p) {
      bool q = !strncmp(p, il__qmark[lang], 2), a = !strncmp(p, "A:", 2);
      bool want_q = out->n_quiz < 3 && (out->n_quiz == 0 || out->answer[out->n_quiz - 1]);
      if (q && want_q) {
        out->question[out->n_quiz++] = il__skip_blank(p + 2);
      } else if (a && out->n_quiz > 0 && !out->answer[out->n_quiz - 1]) {
        out->answer[out->n_quiz - 1] = il__skip_blank(p + 2);
      } else {
        il_learn_text_free(out);
        return il_error(IL_ERR_FORMAT, "%s: '## %s', line %d: expected '%s QUESTION' or 'A: ANSWER' (three of each, in turn)",
                        file, il__headings[lang][4], line, il__qmark[lang]);
      }
    }
    if (!nl) break;
    p = nl + 1;
  }
  if (out->n_quiz != 3 || !out->answer[2] || !*out->answer[2]) {
    il_learn_text_free(out);
    return il_error(IL_ERR_FORMAT, "%s: '## %s' needs three questions, each with its answer (found %d)", file,
                    il__headings[lang][4], out->n_quiz);
  }
  return IL_OK;
}

il_status il_learn_text_get(const il_learn_concept *c, il_learn_lang lang, il_learn_text *out) {
  memset(out, 0, sizeof *out);
  const il_learn_embedded *e = il__embedded(c, lang);
  char file[128];
  snprintf(file, sizeof file, "docs/learn/%s/%02d-%s.md", il__lang_names[lang], c->number, c->slug);
  if (!e) return il_error(IL_ERR_NOT_FOUND, "%s is not in this build", file);
  return il_learn_text_parse(e->text, lang, file, out);
}

/* ---- the list ----------------------------------------------------------------------------- */

il_status il_learn_list(il_learn_lang lang, FILE *out) {
  for (int i = 0; i < il_learn_count(); i++) {
    il_learn_text t;
    IL_TRY(il_learn_text_get(&il__concepts[i], lang, &t));
    fprintf(out, "%2d  %-28s %s\n    %-28s %s: %s\n", il__concepts[i].number, t.name, t.line, "", il__ui_get(lang, "lever"),
            il__concepts[i].lever);
    il_learn_text_free(&t);
  }
  return IL_OK;
}

static const char *il__kind_name(il_learn_kind k) {
  static const char *const names[] = {"engine", "machine", "pattern", "quality", "numerics"};
  return names[k];
}

il_status il_learn_list_json(il_learn_lang lang, FILE *out) {
  il_jsonw w;
  il_jsonw_init(&w, out, true);
  il_jsonw_arr(&w);
  for (int i = 0; i < il_learn_count(); i++) {
    il_learn_text t;
    IL_TRY(il_learn_text_get(&il__concepts[i], lang, &t));
    il_jsonw_obj(&w);
    il_jsonw_kint(&w, "number", il__concepts[i].number);
    il_jsonw_kstr(&w, "slug", il__concepts[i].slug);
    il_jsonw_kstr(&w, "name", t.name);
    il_jsonw_kstr(&w, "line", t.line);
    il_jsonw_kstr(&w, "lever", il__concepts[i].lever);
    il_jsonw_kstr(&w, "kind", il__kind_name(il__concepts[i].kind));
    il_jsonw_obj_end(&w);
    il_learn_text_free(&t);
  }
  il_jsonw_arr_end(&w);
  return il_jsonw_finish(&w);
}

/* ---- helpers the labs use ------------------------------------------------------------------ */

void il_learn_options_default(il_learn_options *o) {
  memset(o, 0, sizeof *o);
  o->device = IL_LEARN_DEFAULT_DEVICE;
  o->lang = IL_LEARN_EN;
}

static void il__stamp_now(char *buf, size_t n) {
  struct timeval tv;
  gettimeofday(&tv, NULL);
  struct tm tm;
  time_t t = tv.tv_sec;
  gmtime_r(&t, &tm);
  char s[32];
  strftime(s, sizeof s, "%Y-%m-%dT%H:%M:%S", &tm);
  snprintf(buf, n, "%s.%03dZ", s, (int)(tv.tv_usec / 1000));
}

static void il__log_line(il__learn *L, const char *msg) {
  char line[2200], stamp[40];
  il__stamp_now(stamp, sizeof stamp);
  int len = snprintf(line, sizeof line, "%s %s\n", stamp, msg);
  if (len <= 0) return;
  if ((size_t)len >= sizeof line) len = (int)sizeof line - 1;
  if (L->log) {
    fputs(line, L->log);
    fflush(L->log);
    return;
  }
  if (L->loglen + (size_t)len + 1 > L->logcap) {
    size_t cap = (L->logcap ? L->logcap * 2 : 8192) + (size_t)len;
    char *b = il_mem_alloc(IL_MEM_OTHER, cap, "learn log");
    if (!b) return;
    if (L->loglen) memcpy(b, L->logbuf, L->loglen);
    il_mem_free(L->logbuf);
    L->logbuf = b;
    L->logcap = cap;
  }
  memcpy(L->logbuf + L->loglen, line, (size_t)len);
  L->loglen += (size_t)len;
}

void il__learn_log(il__learn *L, const char *fmt, ...) {
  char msg[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  il__log_line(L, msg);
}

void il__learn_say(il__learn *L, const char *fmt, ...) {
  char msg[4096];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (L->out) {
    fputs(msg, L->out);
    fputc('\n', L->out);
    fflush(L->out);
  }
  /* the log gets each printed line without its indentation */
  for (char *p = msg; *p;) {
    char *nl = strchr(p, '\n');
    if (nl) *nl = 0;
    char *q = p;
    while (*q == ' ') q++;
    if (*q) il__log_line(L, q);
    if (!nl) break;
    p = nl + 1;
  }
}

void il__learn_fact(il__learn *L, const char *key, const char *fmt, ...) {
  il__learn_factrec *f = NULL;
  for (int i = 0; i < L->n_facts; i++)
    if (!strcmp(L->facts[i].key, key)) f = &L->facts[i];
  if (!f) {
    if (L->n_facts >= IL__LEARN_MAX_FACTS) return;
    f = &L->facts[L->n_facts++];
    snprintf(f->key, sizeof f->key, "%s", key);
  }
  f->yesno = false;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(f->value, sizeof f->value, fmt, ap);
  va_end(ap);
}

void il__learn_fact_yesno(il__learn *L, const char *key, bool v) {
  il__learn_fact(L, key, "%d", v ? 1 : 0);
  for (int i = 0; i < L->n_facts; i++)
    if (!strcmp(L->facts[i].key, key)) L->facts[i].yesno = true;
}

const char *il__learn_fact_get(const il__learn *L, const char *key) {
  for (int i = 0; i < L->n_facts; i++)
    if (!strcmp(L->facts[i].key, key)) return L->facts[i].value;
  return NULL;
}

void il__learn_fmt(const char *unit, double v, char *buf, size_t n) {
  if (!isfinite(v)) {
    snprintf(buf, n, "-");
    return;
  }
  if (!strcmp(unit, "s")) {
    if (v < 1) snprintf(buf, n, "%.3f ms", v * 1e3);
    else snprintf(buf, n, "%.3f s", v);
  } else if (!strcmp(unit, "bytes")) {
    double a = fabs(v);
    if (a < 1024) snprintf(buf, n, "%.0f B", v);
    else if (a < 1048576.0) snprintf(buf, n, "%.1f KiB", v / 1024.0);
    else if (a < 1073741824.0) snprintf(buf, n, "%.1f MiB", v / 1048576.0);
    else snprintf(buf, n, "%.2f GiB", v / 1073741824.0);
  } else if (!strcmp(unit, "fraction")) {
    snprintf(buf, n, "%.1f%%", v * 100);
  } else if (!strcmp(unit, "percent")) {
    snprintf(buf, n, "%.1f%%", v);
  } else if (!strcmp(unit, "count") || !*unit) {
    snprintf(buf, n, "%.4g", v);
  } else {
    snprintf(buf, n, "%.4g %s", v, unit);
  }
}

void il__learn_file(il__learn *L, const char *name) {
  for (int i = 0; i < L->n_files; i++)
    if (!strcmp(L->files[i], name)) return;
  if (L->n_files < IL__LEARN_MAX_FILES) snprintf(L->files[L->n_files++], sizeof L->files[0], "%s", name);
}

FILE *il__learn_open(il__learn *L, const char *name, il_status *st) {
  char path[2400];
  snprintf(path, sizeof path, "%s/%s", L->x->dir, name);
  FILE *f = fopen(path, "w");
  if (!f) {
    *st = il_error(IL_ERR_OUTPUT, "%s: cannot write: %s", path, strerror(errno));
    return NULL;
  }
  il__learn_file(L, name);
  return f;
}

int il__learn_metric_index(const il__learn *L, const char *key) {
  for (int i = 0; i < L->n_metrics; i++)
    if (!strcmp(L->metrics[i].key, key)) return i;
  return -1;
}

bool il__learn_stopped(const il__learn *L) { return L->o->stop && *L->o->stop; }

const char *il__learn_label(const il__learn *L, int m) { return L->metrics[m].label[L->lang]; }

void il__learn_set_metrics(il__learn *L, const il__learn_metric *m, int n) {
  L->metrics = m;
  L->n_metrics = n;
  L->x->n_metrics = n;
  for (int i = 0; i < n; i++) {
    L->x->metrics[i].key = m[i].key;
    L->x->metrics[i].label = m[i].label[IL_LEARN_EN];
    L->x->metrics[i].unit = m[i].unit;
    L->x->metrics[i].better = m[i].better;
  }
}

void il__learn_sample_line(il__learn *L, int arm, int run, const double *vals) {
  if (!L->x->samples) return;
  il_jsonw w;
  il_jsonw_init(&w, L->x->samples, false);
  il_jsonw_obj(&w);
  il_jsonw_kstr(&w, "arm", arm ? "variant" : "baseline");
  il_jsonw_kint(&w, "run", run);
  for (int m = 0; m < L->n_metrics; m++) il_jsonw_knum(&w, L->metrics[m].key, vals[m]);
  il_jsonw_obj_end(&w);
  fputc('\n', L->x->samples);
  fflush(L->x->samples);
}

/* The real machine's doctor, once per process: what a lesson says about "this machine". */
static char il__mf_driver[600], il__mf_build[600], il__mf_device[600];
static bool il__mf_done;

void il__learn_machine_facts(il__learn *L, const char **driver, const char **build, const char **device) {
  if (!il__mf_done) {
    il__mf_done = true;
    il_doctor_options o;
    il_doctor_options_default(&o, L->o->environ_list);
    il_doctor *dr = NULL;
    if (il_doctor_run(&o, &dr) == IL_OK) {
      const il_check *c = il_doctor_find(dr, "driver.nvml");
      snprintf(il__mf_driver, sizeof il__mf_driver, "%s %s", c ? il_check_verdict_name(c->verdict) : "?",
               c ? c->summary : "no driver check");
      c = il_doctor_find(dr, "runtime.build");
      snprintf(il__mf_build, sizeof il__mf_build, "%s", c ? c->summary : "");
      if (dr->nvml.n_devices > 0)
        snprintf(il__mf_device, sizeof il__mf_device, "GPU 0: %s, %.1f GiB", dr->nvml.devices[0].name,
                 (double)dr->nvml.devices[0].mem_total / 1073741824.0);
      else snprintf(il__mf_device, sizeof il__mf_device, "%s", "no NVIDIA GPU visible");
      il_doctor_free(dr);
    } else {
      snprintf(il__mf_driver, sizeof il__mf_driver, "doctor did not run: %s", il_error_detail());
      il_error_clear();
    }
  }
  *driver = il__mf_driver;
  *build = il__mf_build;
  *device = il__mf_device;
}

/* ---- the quick check ---------------------------------------------------------------------- */

/* "smaller" / "larger" / "the same" / "about the same": how the variant's value relates to the
 * baseline's, from the means and the interval. */
static const char *il__dir_key(const il_experiment_effect *e) {
  if (e->a.n == 0 || e->b.n == 0 || !isfinite(e->a.mean) || !isfinite(e->b.mean)) return "na";
  if (e->a.mean == e->b.mean) return "same";
  if (e->a.mean == 0 || e->b.mean == 0 || !isfinite(e->ratio.ratio) || e->ratio.significant)
    return e->b.mean < e->a.mean ? "smaller" : "larger";
  return "about_same";
}

/* Renders an answer or question template with this run's figures; *unresolved counts the
 * placeholders that had nothing to fill in (a test checks there are none). */
static void il__render(il__learn *L, const char *tmpl, char *out, size_t n, int *unresolved) {
  size_t k = 0;
  out[0] = 0;
  for (const char *p = tmpl; *p && k + 1 < n;) {
    const char *close = p[0] == '{' ? strchr(p, '}') : NULL;
    const char *colon = close ? memchr(p, ':', (size_t)(close - p)) : NULL;
    if (!close || !colon || close - p > 60) {
      out[k++] = *p++;
      out[k] = 0;
      continue;
    }
    char kind[8], key[48], val[400] = "";
    snprintf(kind, sizeof kind, "%.*s", (int)(colon - p - 1), p + 1);
    snprintf(key, sizeof key, "%.*s", (int)(close - colon - 1), colon + 1);
    bool ok = false;
    if (!strcmp(kind, "f")) {
      for (int i = 0; i < L->n_facts; i++)
        if (!strcmp(L->facts[i].key, key)) {
          snprintf(val, sizeof val, "%s",
                   L->facts[i].yesno ? il__learn_ui(L, !strcmp(L->facts[i].value, "1") ? "yes" : "no") : L->facts[i].value);
          ok = true;
        }
    } else {
      int m = il__learn_metric_index(L, key);
      const il_experiment_effect *e = m >= 0 && L->have_eff ? &L->eff[m] : NULL;
      if (e && e->a.n + e->b.n > 0) {
        ok = true;
        if (!strcmp(kind, "a")) il__learn_fmt(L->metrics[m].unit, e->a.mean, val, sizeof val);
        else if (!strcmp(kind, "b")) il__learn_fmt(L->metrics[m].unit, e->b.mean, val, sizeof val);
        else if (!strcmp(kind, "r")) {
          if (isfinite(e->ratio.ratio)) snprintf(val, sizeof val, "x%.3f", e->ratio.ratio);
          else snprintf(val, sizeof val, "%s", il__learn_ui(L, "na"));
        } else if (!strcmp(kind, "ci")) {
          if (isfinite(e->ratio.lo)) snprintf(val, sizeof val, "[%.3f, %.3f]", e->ratio.lo, e->ratio.hi);
          else snprintf(val, sizeof val, "%s", il__learn_ui(L, "na"));
        } else if (!strcmp(kind, "v")) {
          char vk[48];
          snprintf(vk, sizeof vk, "v:%s", e->verdict);
          snprintf(val, sizeof val, "%s", il__learn_ui(L, vk));
        } else if (!strcmp(kind, "dir")) {
          snprintf(val, sizeof val, "%s", il__learn_ui(L, il__dir_key(e)));
        } else {
          ok = false;
        }
      }
    }
    if (!ok) {
      (*unresolved)++;
      snprintf(val, sizeof val, "?");
    }
    int w = snprintf(out + k, n - k, "%s", val);
    if (w > 0) k += (size_t)w < n - k ? (size_t)w : n - k - 1;
    p = close + 1;
  }
}

/* ---- the lesson --------------------------------------------------------------------------- */

static void il__print_text(il__learn *L) {
  il__learn_say(L, "%d  %s  (%s: %s)\n%s\n", L->c->number, L->text.name, il__learn_ui(L, "lever"), L->c->lever, L->text.line);
  const char *parts[4] = {L->text.what, L->text.where, L->text.failure, L->text.check};
  for (int i = 0; i < 4; i++) {
    /* the section, indented by two spaces, under its heading */
    char buf[8192];
    size_t k = 0;
    for (const char *p = parts[i]; *p && k + 4 < sizeof buf; p++) {
      if (p == parts[i] || p[-1] == '\n') buf[k++] = ' ', buf[k++] = ' ';
      buf[k++] = *p;
    }
    buf[k] = 0;
    il__learn_say(L, "%s\n%s\n", il__headings[L->lang][i], buf);
  }
}

static void il__print_results(il__learn *L) {
  il_experiment *x = L->x;
  il__learn_say(L, "%s", il__learn_ui(L, "step3"));
  il__learn_say(L, "   %d %s; %s: %d/%d", x->repeat, il__learn_ui(L, "runs"), il__learn_ui(L, "failed_runs"), x->failures[0],
                x->failures[1]);
  for (int i = 0; i < L->n_focus; i++) {
    int m = il__learn_metric_index(L, L->focus[i]);
    if (m < 0) continue;
    const il_experiment_effect *e = &L->eff[m];
    char a[40], b[40], ratio[24] = "-", ci[48] = "", vk[48];
    il__learn_fmt(L->metrics[m].unit, e->a.mean, a, sizeof a);
    il__learn_fmt(L->metrics[m].unit, e->b.mean, b, sizeof b);
    if (isfinite(e->ratio.ratio)) snprintf(ratio, sizeof ratio, "x%.3f", e->ratio.ratio);
    if (isfinite(e->ratio.lo) && strcmp(e->verdict, "too few runs")) snprintf(ci, sizeof ci, "[%.3f, %.3f]", e->ratio.lo, e->ratio.hi);
    snprintf(vk, sizeof vk, "v:%s", e->verdict);
    il__learn_say(L, "   %-34s %12s -> %-12s %8s %18s  %s (%s)", il__learn_label(L, m), a, b, ratio, ci,
                  il__learn_ui(L, il__dir_key(e)), il__learn_ui(L, vk));
  }
  if (L->expect_key) {
    int m = il__learn_metric_index(L, L->expect_key);
    if (m >= 0) {
      const char *d = il__dir_key(&L->eff[m]);
      const char *want = L->expect_dir < 0 ? "smaller" : "larger";
      bool met = !strcmp(d, want);
      il__learn_fact_yesno(L, "expected", met);
      il__learn_say(L, "   %s: %s %s %s", il__learn_ui(L, met ? "expected" : "unexpected"), il__learn_label(L, m),
                    il__learn_ui(L, d), il__learn_ui(L, "with_change"));
    }
  }
  if (L->n_focus > 0) {
    int m = il__learn_metric_index(L, L->focus[0]);
    const il_experiment_effect *e = m >= 0 ? &L->eff[m] : NULL;
    if (e && e->a.n > 0 && e->b.n > 0) {
      bool exact = e->a.stddev <= 1e-9 * fabs(e->a.mean) && e->b.stddev <= 1e-9 * fabs(e->b.mean);
      il__learn_say(L, "   %s", il__learn_ui(L, exact ? "meaning_exact" : e->ratio.significant ? "meaning_sig" : "meaning_nosig"));
    }
  }
}

static il_status il__write_lesson_md(il__learn *L) {
  il_status st = IL_OK;
  FILE *f = il__learn_open(L, "lesson.md", &st);
  if (!f) return st;
  const il_learn_embedded *e = il__embedded(L->c, L->lang);
  if (e) fputs(e->text, f);
  return fclose(f) == 0 ? IL_OK : il_error(IL_ERR_OUTPUT, "%s/lesson.md: write failed", L->x->dir);
}

static void il__json_doc(il__learn *L, il_jsonw *w, const char (*quiz)[2][1200], int n_quiz) {
  il_jsonw_obj(w);
  il_jsonw_kint(w, "schema_version", 1);
  il_jsonw_kstr(w, "tool", "inferlab learn");
  il_jsonw_key(w, "concept");
  il_jsonw_obj(w);
  il_jsonw_kint(w, "number", L->c->number);
  il_jsonw_kstr(w, "slug", L->c->slug);
  il_jsonw_kstr(w, "name", L->text.name);
  il_jsonw_kstr(w, "kind", il__kind_name(L->c->kind));
  il_jsonw_kstr(w, "lever", L->c->lever);
  il_jsonw_obj_end(w);
  il_jsonw_kstr(w, "lang", il__lang_names[L->lang]);
  il_jsonw_kstr(w, "device", L->device);
  il_jsonw_kbool(w, "quick", L->quick);
  il_jsonw_kstr(w, "status", L->skipped ? "skipped" : L->interrupted ? "interrupted" : L->failed ? "failed" : "done");
  il_jsonw_kstr(w, "reason", L->reason[0] ? L->reason : NULL);
  il_jsonw_kstr(w, "change", L->change[0] ? L->change : NULL);
  il_jsonw_key(w, "facts");
  il_jsonw_obj(w);
  for (int i = 0; i < L->n_facts; i++) {
    if (L->facts[i].yesno) il_jsonw_kbool(w, L->facts[i].key, !strcmp(L->facts[i].value, "1"));
    else il_jsonw_kstr(w, L->facts[i].key, L->facts[i].value);
  }
  il_jsonw_obj_end(w);
  il_jsonw_key(w, "focus");
  il_jsonw_arr(w);
  for (int i = 0; i < L->n_focus; i++) il_jsonw_str(w, L->focus[i]);
  il_jsonw_arr_end(w);
  if (L->expect_key) {
    il_jsonw_key(w, "expectation");
    il_jsonw_obj(w);
    il_jsonw_kstr(w, "metric", L->expect_key);
    il_jsonw_kstr(w, "variant_is", L->expect_dir < 0 ? "smaller" : "larger");
    const char *met = il__learn_fact_get(L, "expected");
    if (met) il_jsonw_kbool(w, "met", !strcmp(met, "1"));
    else il_jsonw_key(w, "met"), il_jsonw_null(w);
    il_jsonw_obj_end(w);
  }
  il_jsonw_key(w, "metrics");
  il_jsonw_arr(w);
  for (int m = 0; L->have_eff && m < L->n_metrics; m++) {
    const il_experiment_effect *e = &L->eff[m];
    il_jsonw_obj(w);
    il_jsonw_kstr(w, "key", L->metrics[m].key);
    il_jsonw_kstr(w, "label", il__learn_label(L, m));
    il_jsonw_kstr(w, "unit", L->metrics[m].unit);
    il_jsonw_key(w, "baseline");
    il_jsonw_obj(w);
    il_jsonw_kint(w, "n", e->a.n);
    il_jsonw_knum(w, "mean", e->a.mean);
    il_jsonw_obj_end(w);
    il_jsonw_key(w, "variant");
    il_jsonw_obj(w);
    il_jsonw_kint(w, "n", e->b.n);
    il_jsonw_knum(w, "mean", e->b.mean);
    il_jsonw_obj_end(w);
    il_jsonw_knum(w, "ratio", e->ratio.ratio);
    il_jsonw_knum(w, "ci_low", e->ratio.lo);
    il_jsonw_knum(w, "ci_high", e->ratio.hi);
    il_jsonw_kstr(w, "verdict", e->verdict);
    il_jsonw_kstr(w, "direction", il__dir_key(e));
    il_jsonw_obj_end(w);
  }
  il_jsonw_arr_end(w);
  il_jsonw_key(w, "evidence");
  il_jsonw_obj(w);
  il_jsonw_kstr(w, "dir", L->x && L->x->dir[0] ? L->x->dir : NULL);
  il_jsonw_key(w, "files");
  il_jsonw_arr(w);
  for (int i = 0; i < L->n_files; i++) il_jsonw_str(w, L->files[i]);
  il_jsonw_arr_end(w);
  il_jsonw_kstr(w, "rollback", L->rollback[0] ? L->rollback : NULL);
  il_jsonw_obj_end(w);
  il_jsonw_key(w, "quiz");
  il_jsonw_arr(w);
  for (int i = 0; i < n_quiz; i++) {
    il_jsonw_obj(w);
    il_jsonw_kstr(w, "question", quiz[i][0]);
    il_jsonw_kstr(w, "answer", quiz[i][1]);
    il_jsonw_obj_end(w);
  }
  il_jsonw_arr_end(w);
  il_jsonw_obj_end(w);
}

void il_learn_result_free(il_learn_result *r) {
  free(r->json); /* from open_memstream */
  r->json = NULL;
}

static const il__learn_kind_ops *il__ops_for(il_learn_kind k) {
  switch (k) {
    case IL_LEARN_ENGINE: return il__learn_ops_engine();
    case IL_LEARN_MACHINE: return il__learn_ops_machine();
    case IL_LEARN_PATTERN: return il__learn_ops_pattern();
    case IL_LEARN_QUALITY: return il__learn_ops_quality();
    case IL_LEARN_NUMERICS: return il__learn_ops_numerics();
  }
  return NULL;
}

static void il__quiz(il__learn *L, char (*quiz)[2][1200], int *n_quiz, int *unresolved) {
  *n_quiz = 0;
  il__learn_say(L, "%s", il__learn_ui(L, "step5"));
  for (int i = 0; i < L->text.n_quiz; i++) {
    il__render(L, L->text.question[i], quiz[i][0], sizeof quiz[i][0], unresolved);
    il__render(L, L->text.answer[i], quiz[i][1], sizeof quiz[i][1], unresolved);
    (*n_quiz)++;
    il__learn_say(L, "   %s %s", il__qmark[L->lang], quiz[i][0]);
    if (L->o->ask && L->out && L->o->in) {
      fprintf(L->out, "   %s", il__learn_ui(L, "your_answer"));
      fflush(L->out);
      char line[512];
      if (!fgets(line, sizeof line, L->o->in)) line[0] = 0;
      line[strcspn(line, "\n")] = 0;
      if (line[0]) il__learn_log(L, "learner's answer %d: %s", i + 1, line);
    }
    il__learn_say(L, "   A: %s", quiz[i][1]);
  }
}

il_status il_learn_run(const il_learn_concept *c, const il_learn_options *o, FILE *out, il_learn_result *r) {
  memset(r, 0, sizeof *r);
  il__learn *L = il_mem_calloc(IL_MEM_OTHER, sizeof *L, "learn lesson");
  il_experiment *x = il_mem_calloc(IL_MEM_OTHER, sizeof *x, "learn experiment");
  char(*quiz)[2][1200] = il_mem_calloc(IL_MEM_OTHER, sizeof *quiz * 3, "learn quiz");
  if (!L || !x || !quiz) {
    il_mem_free(L), il_mem_free(x), il_mem_free(quiz);
    return IL_ERR_OOM;
  }
  L->c = c;
  L->o = o;
  L->lang = o->lang;
  L->out = o->json ? NULL : out;
  L->quick = o->quick;
  L->x = x;
  snprintf(L->device, sizeof L->device, "%s", o->device && *o->device ? o->device : IL_LEARN_DEFAULT_DEVICE);
  il_experiment_init(x);
  x->repeat = o->repeat > 0 ? o->repeat : o->quick ? 3 : 5;
  x->bench.warmup = o->quick ? 0 : 1;
  x->bench.no_gpu = true;        /* NVML sampling only where a lab asks for it */
  x->bench.no_prediction = true; /* the lessons plan their arms themselves, once */
  x->environ_list = o->environ_list;
  x->command_line = o->command_line;
  x->progress = o->progress;
  L->ops = il__ops_for(c->kind);
  il_status st = il_learn_text_get(c, L->lang, &L->text);
  int n_quiz = 0, unresolved = 0;
  if (st != IL_OK) goto done;
  if (c->kind != IL_LEARN_MACHINE && c->kind != IL_LEARN_QUALITY) {
    /* a device this build or machine lacks, or a spec that does not parse, is the caller's error,
     * said before anything is measured */
    il_backend *b = NULL;
    il_backend_opts bo = {0};
    st = il_backend_open(L->device, &bo, &b);
    if (st != IL_OK) goto done; /* the message names the device */
    b->ops->destroy(b);
  }
  {
    /* absolute, so rollback.sh and the .cmd files work from any directory */
    const char *od = o->out_dir && *o->out_dir ? o->out_dir : "runs/learn";
    char cwd[PATH_MAX] = "";
    if (od[0] != '/' && !getcwd(cwd, sizeof cwd)) cwd[0] = 0;
    snprintf(L->parent, sizeof L->parent, "%.1000s%s%.900s/%02d-%s", cwd, cwd[0] ? "/" : "", od, c->number, c->slug);
  }
  il__print_text(L);
  il__learn_log(L, "lesson %d %s on %s (%s%s)", c->number, c->slug, L->device, o->quick ? "quick, " : "", il__lang_names[L->lang]);
  st = L->ops->define(L);
  if (st != IL_OK) {
    L->failed = true;
    snprintf(L->reason, sizeof L->reason, "%s", il_error_detail());
    goto done;
  }
  if (L->skipped) {
    il__learn_say(L, "%s: %s", il__learn_ui(L, "skipped"), L->reason);
    goto done;
  }
  st = il_experiment_prepare_dir(x, L->parent);
  if (st != IL_OK) goto done;
  {
    const char *exp_files[] = {"env.json", "command.txt", "samples.jsonl", "summary.txt", "summary.json"};
    for (size_t i = 0; i < sizeof exp_files / sizeof exp_files[0]; i++) il__learn_file(L, exp_files[i]);
    if (x->is_cmd) il__learn_file(L, "baseline.cmd"), il__learn_file(L, "variant.cmd");
    else il__learn_file(L, "baseline.conf"), il__learn_file(L, "variant.conf");
  }
  /* the log: what was said so far, then every line as it happens */
  {
    char path[2400];
    snprintf(path, sizeof path, "%s/log.txt", x->dir);
    L->log = fopen(path, "w");
    if (!L->log) {
      st = il_error(IL_ERR_OUTPUT, "%s: cannot write: %s", path, strerror(errno));
      goto done;
    }
    il__learn_file(L, "log.txt");
    if (L->loglen) fwrite(L->logbuf, 1, L->loglen, L->log);
    fflush(L->log);
  }
  if (L->ops->files) st = L->ops->files(L);
  if (st == IL_OK) st = L->ops->before(L);
  if (st != IL_OK) {
    L->failed = true;
    snprintf(L->reason, sizeof L->reason, "%s", il_error_detail());
    goto done;
  }
  if (il__learn_stopped(L)) {
    L->interrupted = true;
  } else {
    L->ops->change(L);
    il__learn_log(L, "runs: %d per arm, interleaved", x->repeat);
    st = il_experiment_run(x, L->ops->run, L);
    if (il__learn_stopped(L)) {
      L->interrupted = true;
      st = IL_OK;
    }
    if (st != IL_OK) {
      L->failed = true;
      snprintf(L->reason, sizeof L->reason, "%s", il_error_detail());
    }
  }
  {
    il_status sst = il_experiment_write_summary(x, NULL);
    for (int m = 0; sst == IL_OK && m < L->n_metrics; m++) sst = il_experiment_effect_of(x, m, &L->eff[m]);
    L->have_eff = sst == IL_OK;
    if (st == IL_OK) st = sst;
  }
  if (L->have_eff) il__print_results(L);
  if (st == IL_OK && L->ops->after) st = L->ops->after(L);
  if (L->interrupted) il__learn_say(L, "   %s", il__learn_ui(L, "interrupted"));
  {
    il_status rst = L->ops->rollback(L);
    if (rst == IL_OK) rst = il__write_lesson_md(L);
    if (st == IL_OK) st = rst;
  }
  il__learn_say(L, "%s\n   %s: %s/", il__learn_ui(L, "step4"), il__learn_ui(L, "folder"), x->dir);
  {
    char list[2400] = "";
    for (int i = 0; i < L->n_files; i++) {
      size_t l = strlen(list);
      snprintf(list + l, sizeof list - l, "%s%s", i ? " " : "", L->files[i]);
    }
    il__learn_say(L, "   %s: %s learn.json\n   %s: %s", il__learn_ui(L, "files"), list, il__learn_ui(L, "rollback"), L->rollback);
  }
  if (!L->interrupted && !L->failed && st == IL_OK) il__quiz(L, quiz, &n_quiz, &unresolved);
  if (unresolved) il__learn_log(L, "quick check: %d placeholder(s) had no figure", unresolved);
  il__learn_fact(L, "unresolved", "%d", unresolved);
done:
  if (L->failed && L->reason[0]) il__learn_say(L, "%s: %s", il__learn_ui(L, "failed"), L->reason);
  {
    size_t len = 0;
    FILE *mf = open_memstream(&r->json, &len);
    if (mf) {
      il_jsonw w;
      il_jsonw_init(&w, mf, true);
      il__json_doc(L, &w, (const char(*)[2][1200])quiz, n_quiz);
      il_status js = il_jsonw_finish(&w);
      if (fclose(mf) != 0 || js != IL_OK) { /* a memory stream fails only when memory does */
        free(r->json);
        r->json = NULL;
        if (st == IL_OK) st = il_error(IL_ERR_OOM, "learn.json: out of memory writing the report");
      }
    }
  }
  if (x->dir[0] && r->json) {
    char path[2400];
    snprintf(path, sizeof path, "%s/learn.json", x->dir);
    FILE *f = fopen(path, "w");
    if (f) {
      fputs(r->json, f);
      fputc('\n', f);
      if (fclose(f) != 0 && st == IL_OK) st = il_error(IL_ERR_OUTPUT, "%s: write failed", path);
    } else if (st == IL_OK) {
      st = il_error(IL_ERR_OUTPUT, "%s: cannot write: %s", path, strerror(errno));
    }
  }
  r->outcome = L->skipped ? IL_LEARN_SKIPPED : L->interrupted ? IL_LEARN_INTERRUPTED : L->failed || st != IL_OK ? IL_LEARN_FAILED : IL_LEARN_DONE;
  snprintf(r->reason, sizeof r->reason, "%s", L->reason);
  snprintf(r->dir, sizeof r->dir, "%s", x->dir);
  const char *met = il__learn_fact_get(L, "expected");
  r->has_expectation = L->expect_key != NULL && met;
  r->expectation_met = met && !strcmp(met, "1");
  if (L->log) fclose(L->log);
  il_engine_free(L->ref);
  for (int i = 0; i < 8; i++) il_engine_free(L->qeng[i]);
  il_mem_free(L->logbuf);
  il_learn_text_free(&L->text);
  il_experiment_free(x);
  il_mem_free(x);
  il_mem_free(L);
  il_mem_free(quiz);
  return st;
}

il_status il_learn_machine_report(const char *dir, bool json, FILE *out, int *exit_code) {
  il_machine_report mr;
  IL_TRY(il_machine_doctor(dir, &mr));
  il_status st = json ? il_report_json(mr.dr, out) : il_report_text_ex(mr.dr, out, false);
  *exit_code = il_doctor_exit_code(mr.dr);
  il_machine_report_free(&mr);
  return st;
}
