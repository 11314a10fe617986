/* tests/test_template: chat templates: detection from real and typical Jinja texts, the
 * rendering of each family, the --chat-template error; then `inferlab chat` end to end
 * (two turns through the scheduler, the second reusing the first from the slot). */
#include <stdio.h>
#include <stdlib.h>

#include "format/gguf.h"
#include "harness.h"
#include "memory/mem.h"
#include "server/template.h"

static const il_chat_msg conv[] = {
    {"system", "You are terse."}, {"user", "Hi"}, {"assistant", "Hello!"}, {"user", "How are you?"}};

static void expect(il_template_kind k, const il_chat_msg *m, int n, const char *want) {
  char *out = NULL;
  size_t len = 0;
  IL_CHECK_OK(il_template_render(k, m, n, true, &out, &len));
  IL_CHECK_STR(out, want);
  IL_CHECK_INT(len, strlen(want));
  il_mem_free(out);
}

static void test_render(void) {
  expect(IL_TEMPLATE_CHATML, conv, 4,
         "<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
         "Hello!<|im_end|>\n<|im_start|>user\nHow are you?<|im_end|>\n<|im_start|>assistant\n");
  expect(IL_TEMPLATE_SMOLLM2, conv + 1, 1,
         "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
         "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  expect(IL_TEMPLATE_SMOLLM2, conv, 2,
         "<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  expect(IL_TEMPLATE_LLAMA2, conv, 4,
         "[INST] <<SYS>>\nYou are terse.\n<</SYS>>\n\nHi [/INST] Hello! </s><s>[INST] How are you? [/INST]");
  expect(IL_TEMPLATE_MISTRAL, conv, 4, "[INST] You are terse.\n\nHi [/INST]Hello!</s>[INST] How are you? [/INST]");
  expect(IL_TEMPLATE_LLAMA3, conv, 4,
         "<|start_header_id|>system<|end_header_id|>\n\nYou are terse.<|eot_id|>"
         "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
         "<|start_header_id|>assistant<|end_header_id|>\n\nHello!<|eot_id|>"
         "<|start_header_id|>user<|end_header_id|>\n\nHow are you?<|eot_id|>"
         "<|start_header_id|>assistant<|end_header_id|>\n\n");
  expect(IL_TEMPLATE_PHI3, conv, 4,
         "<|system|>\nYou are terse.<|end|>\n<|user|>\nHi<|end|>\n<|assistant|>\nHello!<|end|>\n"
         "<|user|>\nHow are you?<|end|>\n<|assistant|>\n");
  expect(IL_TEMPLATE_GEMMA, conv, 4,
         "<start_of_turn>user\nYou are terse.\n\nHi<end_of_turn>\n<start_of_turn>model\nHello!<end_of_turn>\n"
         "<start_of_turn>user\nHow are you?<end_of_turn>\n<start_of_turn>model\n");
  /* bad roles name the message */
  il_chat_msg bad[] = {{"user", "a"}, {"wizard", "b"}};
  char *out = NULL;
  size_t len = 0;
  IL_CHECK_INT(il_template_render(IL_TEMPLATE_CHATML, bad, 2, true, &out, &len), IL_ERR_INVALID_ARG);
  IL_CHECK(strstr(il_error_detail(), "messages[1].role") != NULL);
  IL_CHECK(out == NULL);
}

static void detect(const char *jinja, il_template_kind want) {
  il_template_kind k;
  IL_CHECK(il_template_detect(jinja, strlen(jinja), &k));
  IL_CHECK_STR(il_template_name(k), il_template_name(want));
}

static void test_detect(void) {
  detect("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
         "'<|im_end|>' + '\\n'}}{% endfor %}", IL_TEMPLATE_CHATML);
  detect("{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\\nYou are a helpful AI "
         "assistant named SmolLM, trained by Hugging Face<|im_end|>\\n' }}{% endif %}", IL_TEMPLATE_SMOLLM2);
  detect("{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ "
         "message['content'] | trim + '<|eot_id|>' %}", IL_TEMPLATE_LLAMA3);
  detect("{% if messages[0]['role'] == 'system' %}{% set system_message = '<<SYS>>\\n' + messages[0]['content'] "
         "+ '\\n<</SYS>>\\n\\n' %}{{ bos_token + '[INST] ' + content + ' [/INST]' }}", IL_TEMPLATE_LLAMA2);
  detect("{{ bos_token }}{% for message in messages %}{{ '[INST] ' + message['content'] + ' [/INST]' }}",
         IL_TEMPLATE_MISTRAL);
  detect("{{ '<start_of_turn>' + role + '\\n' + message['content'] | trim + '<end_of_turn>\\n' }}",
         IL_TEMPLATE_GEMMA);
  il_template_kind k;
  IL_CHECK(!il_template_detect("{{ messages }}", 14, &k));
  IL_CHECK_INT(k, IL_TEMPLATE_CHATML);
  /* a real file: Phi-3's vocabulary carries its template */
  const char *path = il_test_fixture("tokenizer/ggml-vocab-phi-3.gguf");
  il_gguf *g = NULL;
  if (path && il_gguf_open(path, &g) == IL_OK) {
    il_gguf_str s;
    IL_CHECK_OK(il_gguf_get_str(g, "tokenizer.chat_template", &s));
    IL_CHECK(il_template_detect(s.ptr, (size_t)s.len, &k));
    IL_CHECK_STR(il_template_name(k), "phi3");
    il_gguf_close(g);
  } else {
    printf("note: fixture tokenizer/ggml-vocab-phi-3.gguf absent; real-template check skipped\n");
  }
  IL_CHECK_INT(il_template_by_name("nope", &k), IL_ERR_INVALID_ARG);
  IL_CHECK(strstr(il_error_detail(), "--chat-template") != NULL);
  IL_CHECK(strstr(il_error_detail(), "llama3") != NULL);
  IL_CHECK_OK(il_template_by_name("gemma", &k));
  IL_CHECK_INT(k, IL_TEMPLATE_GEMMA);
}

static void test_chat_cli(void) {
  const char *cli = getenv("IL_CLI");
  if (!cli) {
    printf("note: IL_CLI unset; `inferlab chat` checks skipped\n");
    return;
  }
  char cmd[1024], out[8192];
  snprintf(cmd, sizeof cmd, "%s chat --chat-template nope </dev/null 2>&1; echo \"rc=$?\"", cli);
  FILE *p = popen(cmd, "r");
  size_t n = p ? fread(out, 1, sizeof out - 1, p) : 0;
  out[n] = 0;
  if (p) pclose(p);
  IL_CHECK(strstr(out, "--chat-template: unknown template 'nope'") != NULL);
  IL_CHECK(strstr(out, "rc=64") != NULL);
  snprintf(cmd, sizeof cmd,
           "printf 'Hello\\nHow are you?\\n/reset\\nHello\\n' | %s chat -t 2 -n 8 --temp 0 --ignore-eos --stats "
           "--ctx 256 2>&1; echo \"rc=$?\"", cli);
  p = popen(cmd, "r");
  n = p ? fread(out, 1, sizeof out - 1, p) : 0;
  out[n] = 0;
  if (p) pclose(p);
  IL_CHECK(strstr(out, "rc=0") != NULL);
  /* three replies of 8 tokens; the second turn finds the first one in the slot */
  int turns = 0, reused_later = 0;
  for (const char *s = out; (s = strstr(s, " generated in ")); s++) turns++;
  const char *first = strstr(out, "reused)");
  const char *second = first ? strstr(first + 1, "prompt tokens (") : NULL;
  if (second) reused_later = atoi(second + strlen("prompt tokens ("));
  IL_CHECK_INT(turns, 3);
  IL_CHECK(reused_later > 10);
  IL_CHECK(strstr(out, "8 generated") != NULL);
  if (il_test_failed) printf("chat output:\n%s\n", out);
}

int main(void) {
  test_render();
  test_detect();
  test_chat_cli();
  return il_test_finish();
}
