/* server/template: chat messages -> the prompt text a model was trained on.
 *
 * GGUF files carry the Jinja template of the model's chat format in `tokenizer.chat_template`.
 * Running Jinja is not needed for the common families: each has a distinctive marker, and each
 * is rendered here in C as its Jinja template renders it (llama.cpp does the same in
 * llama_chat_apply_template):
 *
 *   chatml   <|im_start|>ROLE\nCONTENT<|im_end|>\n ... <|im_start|>assistant\n
 *   smollm2  chatml with SmolLM's default system message when the chat has none
 *   llama2   [INST] <<SYS>>\nSYSTEM\n<</SYS>>\n\nUSER [/INST] ASSISTANT </s><s>[INST] ...
 *   mistral  [INST] SYSTEM\n\nUSER [/INST]ASSISTANT</s>[INST] ...  (no <<SYS>> block)
 *   llama3   <|start_header_id|>ROLE<|end_header_id|>\n\nCONTENT<|eot_id|> ... assistant header
 *   phi3     <|ROLE|>\nCONTENT<|end|>\n ... <|assistant|>\n
 *   gemma    <start_of_turn>user\nCONTENT<end_of_turn>\n ... <start_of_turn>model\n (system
 *            text goes before the first user message; "assistant" is "model")
 *
 * The rendered text carries no BOS: the caller tokenizes it with the vocabulary's add_bos, with
 * control tokens parsed in the template's own text only: il_template_render_parts gives the
 * byte ranges of message content, which il_tokenize_literal_alloc reads as text, so a message
 * that contains "<|im_end|>\n<|im_start|>system" cannot open a turn of its own (vLLM and
 * llama-server's --escape-special-in-input do the same). A model without a template gets
 * chatml; a template that matches no family is chatml too, with a note the caller can print.
 * Not for: tool calls, images, Jinja in general.
 */
#ifndef IL_SERVER_TEMPLATE_H
#define IL_SERVER_TEMPLATE_H

#include <stdbool.h>
#include <stddef.h>

#include "core/status.h"
#include "engine/engine.h"
#include "model/tokenizer.h"

typedef enum {
  IL_TEMPLATE_CHATML,
  IL_TEMPLATE_SMOLLM2,
  IL_TEMPLATE_LLAMA2,
  IL_TEMPLATE_MISTRAL,
  IL_TEMPLATE_LLAMA3,
  IL_TEMPLATE_PHI3,
  IL_TEMPLATE_GEMMA,
  IL_TEMPLATE_COUNT
} il_template_kind;

typedef struct {
  const char *role;    /* system | user | assistant */
  const char *content;
} il_chat_msg;

/* "chatml", "llama3", ... */
const char *il_template_name(il_template_kind k);
/* Comma-separated list of every name, for help texts and errors. */
const char *il_template_names(void);
/* By name (the --chat-template values). Unknown: IL_ERR_INVALID_ARG naming the flag and the
 * accepted names. */
il_status il_template_by_name(const char *name, il_template_kind *out);
/* Recognises a Jinja template by its markers; false (and chatml) when none matches. */
bool il_template_detect(const char *jinja, size_t len, il_template_kind *out);

/* The template of an open engine: `override` (a name, or NULL/"" for none), else the model's
 * tokenizer.chat_template, else chatml. `how` (may be NULL) gets a short phrase saying where
 * the choice came from ("from tokenizer.chat_template", "--chat-template", "default: the model
 * has no chat template", ...). Errors: those of il_template_by_name. */
il_status il_template_for_engine(const il_engine *e, const char *override, il_template_kind *out, char *how,
                                 size_t how_cap);

/* Renders messages (roles system, user, assistant; others are IL_ERR_INVALID_ARG naming the
 * message index) and, when add_generation_prompt, the opening of the assistant's turn.
 * *out is allocated (il_mem, category other; free with il_mem_free), NUL-terminated, *len its
 * length. Errors: IL_ERR_INVALID_ARG, IL_ERR_OOM. */
il_status il_template_render(il_template_kind k, const il_chat_msg *msgs, int n, bool add_generation_prompt,
                             char **out, size_t *len);
/* The same, and *content (may be NULL: not wanted) gets the byte ranges of *out that are
 * message content, in order, *n_content of them (il_mem; free with il_mem_free; NULL when none):
 * what the caller must tokenize as text. */
il_status il_template_render_parts(il_template_kind k, const il_chat_msg *msgs, int n, bool add_generation_prompt,
                                   char **out, size_t *len, il_text_range **content, size_t *n_content);

#endif
