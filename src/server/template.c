/* server/template: recognise and render the common chat formats. */
#include "server/template.h"

#include <stdio.h>
#include <string.h>

#include "memory/mem.h"
#include "server/sbuf.h"

static const char *const il__names[IL_TEMPLATE_COUNT] = {"chatml", "smollm2", "llama2", "mistral",
                                                         "llama3", "phi3",    "gemma"};

static const char il__smollm_system[] = "You are a helpful AI assistant named SmolLM, trained by Hugging Face";

const char *il_template_name(il_template_kind k) { return k < IL_TEMPLATE_COUNT ? il__names[k] : "?"; }

const char *il_template_names(void) { return "chatml, smollm2, llama2, mistral, llama3, phi3, gemma"; }

il_status il_template_by_name(const char *name, il_template_kind *out) {
  for (int i = 0; i < IL_TEMPLATE_COUNT; i++)
    if (!strcmp(name, il__names[i])) {
      *out = (il_template_kind)i;
      return IL_OK;
    }
  return il_error(IL_ERR_INVALID_ARG, "--chat-template: unknown template '%s' (known: %s)", name, il_template_names());
}

static bool il__has(const char *s, size_t n, const char *needle) {
  size_t l = strlen(needle);
  for (size_t i = 0; i + l <= n; i++)
    if (s[i] == needle[0] && !memcmp(s + i, needle, l)) return true;
  return false;
}

bool il_template_detect(const char *t, size_t n, il_template_kind *out) {
  *out = IL_TEMPLATE_CHATML;
  if (il__has(t, n, "<|im_start|>")) {
    *out = il__has(t, n, "SmolLM") ? IL_TEMPLATE_SMOLLM2 : IL_TEMPLATE_CHATML;
    return true;
  }
  if (il__has(t, n, "<|start_header_id|>") && il__has(t, n, "<|end_header_id|>")) *out = IL_TEMPLATE_LLAMA3;
  else if (il__has(t, n, "<|assistant|>") && il__has(t, n, "<|end|>")) *out = IL_TEMPLATE_PHI3;
  else if (il__has(t, n, "<start_of_turn>")) *out = IL_TEMPLATE_GEMMA;
  else if (il__has(t, n, "[INST]")) *out = il__has(t, n, "<<SYS>>") ? IL_TEMPLATE_LLAMA2 : IL_TEMPLATE_MISTRAL;
  else return false;
  return true;
}

il_status il_template_for_engine(const il_engine *e, const char *override, il_template_kind *out, char *how,
                                 size_t how_cap) {
  char dummy[8];
  if (!how) {
    how = dummy;
    how_cap = sizeof dummy;
  }
  if (override && *override) {
    IL_TRY(il_template_by_name(override, out));
    snprintf(how, how_cap, "--chat-template");
    return IL_OK;
  }
  il_gguf_str s = {0};
  if (il_engine_model(e)->gguf && il_gguf_get_str(il_engine_model(e)->gguf, "tokenizer.chat_template", &s) == IL_OK) {
    if (il_template_detect(s.ptr, (size_t)s.len, out)) snprintf(how, how_cap, "from tokenizer.chat_template");
    else snprintf(how, how_cap, "default: tokenizer.chat_template matches no known family (set --chat-template)");
    return IL_OK;
  }
  il_error_clear();
  *out = IL_TEMPLATE_CHATML;
  snprintf(how, how_cap, "default: the model has no tokenizer.chat_template");
  return IL_OK;
}

/* ---- rendering ---- */

typedef struct {
  char *p;
  size_t len, cap;
  bool oom;
  il_text_range *lit; /* where message content went (NULL: not asked for) */
  size_t n_lit, lit_cap;
  bool want_lit;
} il__buf;

static void il__put(il__buf *b, const char *s, size_t n) {
  if (b->oom) return;
  if (b->len + n + 1 > b->cap) {
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + n + 1) cap *= 2;
    char *np = il_mem_alloc(IL_MEM_SERVER, cap, "chat prompt");
    if (!np) {
      b->oom = true;
      return;
    }
    if (b->len) memcpy(np, b->p, b->len);
    il_mem_free(b->p);
    b->p = np;
    b->cap = cap;
  }
  memcpy(b->p + b->len, s, n);
  b->len += n;
  b->p[b->len] = 0;
}

static void il__puts(il__buf *b, const char *s) { il__put(b, s, strlen(s)); }

/* Message content: put, and its range recorded as literal text. */
static void il__put_content(il__buf *b, const char *s, size_t n) {
  size_t start = b->len;
  il__put(b, s, n);
  if (!b->want_lit || b->oom || b->len == start) return;
  if (b->n_lit == b->lit_cap) {
    size_t cap = b->lit_cap ? 2 * b->lit_cap : 16;
    il_text_range *nl = il_mem_alloc(IL_MEM_SERVER, cap * sizeof *nl, "chat prompt content ranges");
    if (!nl) {
      b->oom = true;
      return;
    }
    if (b->n_lit) memcpy(nl, b->lit, b->n_lit * sizeof *nl);
    il_mem_free(b->lit);
    b->lit = nl;
    b->lit_cap = cap;
  }
  b->lit[b->n_lit++] = (il_text_range){start, b->len};
}

/* Content without leading and trailing whitespace (Python's str.strip(), which templates use). */
static void il__put_trim(il__buf *b, const char *s) {
  size_t n = strlen(s);
  while (n && (*s == ' ' || *s == '\n' || *s == '\t' || *s == '\r')) s++, n--;
  while (n && (s[n - 1] == ' ' || s[n - 1] == '\n' || s[n - 1] == '\t' || s[n - 1] == '\r')) n--;
  il__put_content(b, s, n);
}

static void il__render(il_template_kind k, const il_chat_msg *m, int n, bool gen, il__buf *b) {
  switch (k) {
    case IL_TEMPLATE_CHATML:
    case IL_TEMPLATE_SMOLLM2:
      if (k == IL_TEMPLATE_SMOLLM2 && (n == 0 || strcmp(m[0].role, "system"))) {
        il__puts(b, "<|im_start|>system\n");
        il__puts(b, il__smollm_system);
        il__puts(b, "<|im_end|>\n");
      }
      for (int i = 0; i < n; i++) {
        il__puts(b, "<|im_start|>");
        il__puts(b, m[i].role);
        il__puts(b, "\n");
        il__put_content(b, m[i].content, strlen(m[i].content));
        il__puts(b, "<|im_end|>\n");
      }
      if (gen) il__puts(b, "<|im_start|>assistant\n");
      break;
    case IL_TEMPLATE_LLAMA2:
    case IL_TEMPLATE_MISTRAL: {
      /* llama2 has a <<SYS>> block and a BOS before each later turn; mistral's v1 format puts
       * the system text in the first [INST] without the block */
      const bool sys_block = k == IL_TEMPLATE_LLAMA2;
      bool inside = true;
      il__puts(b, "[INST] ");
      for (int i = 0; i < n; i++) {
        if (!inside) {
          inside = true;
          il__puts(b, sys_block ? "<s>[INST] " : "[INST] ");
        }
        if (!strcmp(m[i].role, "system")) {
          if (sys_block) {
            il__puts(b, "<<SYS>>\n");
            il__put_trim(b, m[i].content);
            il__puts(b, "\n<</SYS>>\n\n");
          } else {
            il__put_trim(b, m[i].content);
            il__puts(b, "\n\n");
          }
        } else if (!strcmp(m[i].role, "user")) {
          il__put_trim(b, m[i].content);
          il__puts(b, " [/INST]");
        } else {
          /* Llama 2's template: ' ' + content.strip() + ' ' + eos; Mistral's: content + eos */
          if (sys_block) il__puts(b, " ");
          il__put_trim(b, m[i].content);
          il__puts(b, sys_block ? " </s>" : "</s>");
          inside = false;
        }
      }
      break;
    }
    case IL_TEMPLATE_LLAMA3:
      for (int i = 0; i < n; i++) {
        il__puts(b, "<|start_header_id|>");
        il__puts(b, m[i].role);
        il__puts(b, "<|end_header_id|>\n\n");
        il__put_trim(b, m[i].content);
        il__puts(b, "<|eot_id|>");
      }
      if (gen) il__puts(b, "<|start_header_id|>assistant<|end_header_id|>\n\n");
      break;
    case IL_TEMPLATE_PHI3:
      for (int i = 0; i < n; i++) {
        il__puts(b, "<|");
        il__puts(b, m[i].role);
        il__puts(b, "|>\n");
        il__put_content(b, m[i].content, strlen(m[i].content));
        il__puts(b, "<|end|>\n");
      }
      if (gen) il__puts(b, "<|assistant|>\n");
      break;
    case IL_TEMPLATE_GEMMA: {
      int sys = -1;
      for (int i = 0; i < n; i++) {
        if (!strcmp(m[i].role, "system")) {
          sys = i;
          continue;
        }
        const bool model = !strcmp(m[i].role, "assistant");
        il__puts(b, "<start_of_turn>");
        il__puts(b, model ? "model" : m[i].role);
        il__puts(b, "\n");
        if (sys >= 0 && !model) {
          il__put_trim(b, m[sys].content);
          il__puts(b, "\n\n");
          sys = -1;
        }
        il__put_trim(b, m[i].content);
        il__puts(b, "<end_of_turn>\n");
      }
      if (gen) il__puts(b, "<start_of_turn>model\n");
      break;
    }
    default: break;
  }
}

il_status il_template_render(il_template_kind k, const il_chat_msg *msgs, int n, bool add_generation_prompt,
                             char **out, size_t *len) {
  return il_template_render_parts(k, msgs, n, add_generation_prompt, out, len, NULL, NULL);
}

il_status il_template_render_parts(il_template_kind k, const il_chat_msg *msgs, int n, bool add_generation_prompt,
                                   char **out, size_t *len, il_text_range **content, size_t *n_content) {
  *out = NULL;
  *len = 0;
  if (content) *content = NULL;
  if (n_content) *n_content = 0;
  if (k >= IL_TEMPLATE_COUNT) return il_error(IL_ERR_INVALID_ARG, "chat template %d: unknown", (int)k);
  for (int i = 0; i < n; i++) {
    const char *r = msgs[i].role;
    if (!r || (strcmp(r, "system") && strcmp(r, "user") && strcmp(r, "assistant"))) {
      char clip[48];
      return il_error(IL_ERR_INVALID_ARG, "messages[%d].role: '%s' is not one of system, user, assistant", i,
                      r ? il_utf8_clip(r, clip, sizeof clip) : "(none)");
    }
    if (!msgs[i].content) return il_error(IL_ERR_INVALID_ARG, "messages[%d].content: missing", i);
  }
  il__buf b = {0};
  b.want_lit = content != NULL;
  il__puts(&b, "");
  il__render(k, msgs, n, add_generation_prompt, &b);
  if (b.oom) {
    il_mem_free(b.p);
    il_mem_free(b.lit);
    return il_error(IL_ERR_OOM, "chat template: out of memory rendering %d messages", n);
  }
  *out = b.p;
  *len = b.len;
  if (content) *content = b.lit;
  if (n_content) *n_content = b.n_lit;
  return IL_OK;
}
