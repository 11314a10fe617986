/* probe/check: recording checks into a list. See check.h. */
#include "probe/check.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "memory/mem.h"

static il_check *il__check_addv(il_check_list *l, const char *id, il_verdict v, int scenario, const char *fmt, va_list ap) {
  if (l->n == l->cap) {
    int ncap = l->cap ? l->cap * 2 : 32;
    il_check *nc = il_mem_calloc(IL_MEM_OTHER, sizeof *nc * (size_t)ncap, "doctor checks");
    if (!nc) {
      l->oom = true;
      memset(&l->overflow, 0, sizeof l->overflow);
      return &l->overflow;
    }
    if (l->items) memcpy(nc, l->items, sizeof *nc * (size_t)l->n);
    il_mem_free(l->items);
    l->items = nc;
    l->cap = ncap;
  }
  il_check *c = &l->items[l->n++];
  memset(c, 0, sizeof *c);
  snprintf(c->id, sizeof c->id, "%s", id);
  c->verdict = v;
  c->scenario = scenario;
  vsnprintf(c->summary, sizeof c->summary, fmt, ap);
  return c;
}

il_check *il__check_add(il_check_list *l, const char *id, il_verdict v, int scenario, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  il_check *c = il__check_addv(l, id, v, scenario, fmt, ap);
  va_end(ap);
  return c;
}

il_check *il__check_na(il_check_list *l, const char *id, il_verdict v, int scenario, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  il_check *c = il__check_addv(l, id, v, scenario, fmt, ap);
  va_end(ap);
  c->na = true;
  return c;
}

void il__check_fix(il_check *c, const char *fmt, ...) {
  size_t l = strlen(c->fix);
  if (l && l + 1 < sizeof c->fix) c->fix[l++] = '\n', c->fix[l] = 0;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(c->fix + l, sizeof c->fix - l, fmt, ap);
  va_end(ap);
}

void il__check_ev(il_check *c, const char *key, const char *fmt, ...) {
  if (c->n_evidence >= IL_CHECK_MAX_EVIDENCE) return;
  il_evidence *e = &c->evidence[c->n_evidence++];
  snprintf(e->key, sizeof e->key, "%s", key);
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(e->value, sizeof e->value, fmt, ap);
  va_end(ap);
}

const char *il_check_verdict_name(il_verdict v) {
  switch (v) {
    case IL_VERDICT_OK: return "OK";
    case IL_VERDICT_WARN: return "WARN";
    case IL_VERDICT_FAIL: return "FAIL";
  }
  return "?";
}

const char *il_check_evidence(const il_check *c, const char *key) {
  for (int i = 0; i < c->n_evidence; i++)
    if (!strcmp(c->evidence[i].key, key)) return c->evidence[i].value;
  return NULL;
}

const il_check *il_check_find(const il_check_list *l, const char *id) {
  for (int i = 0; i < l->n; i++)
    if (!strcmp(l->items[i].id, id)) return &l->items[i];
  return NULL;
}

int il_check_worst(const il_check_list *l) {
  int worst = 0;
  for (int i = 0; i < l->n; i++)
    if ((int)l->items[i].verdict > worst) worst = (int)l->items[i].verdict;
  return worst;
}

void il_check_list_free(il_check_list *l) {
  il_mem_free(l->items);
  memset(l, 0, sizeof *l);
}
