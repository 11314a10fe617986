/* core/dtype: the type trait table. */
#include "core/dtype.h"

#include <stdio.h>
#include <strings.h>

static const il_dtype_info il__types[IL_DTYPE_COUNT] = {
    [IL_DTYPE_F32] = {"f32", 1, 4, false},
    [IL_DTYPE_F16] = {"f16", 1, 2, false},
    [IL_DTYPE_BF16] = {"bf16", 1, 2, false},
    [IL_DTYPE_Q4_0] = {"q4_0", IL_QK, sizeof(il_block_q4_0), true},
    [IL_DTYPE_Q4_1] = {"q4_1", IL_QK, sizeof(il_block_q4_1), true},
    [IL_DTYPE_Q8_0] = {"q8_0", IL_QK, sizeof(il_block_q8_0), true},
    [IL_DTYPE_Q4_K] = {"q4_K", IL_QK_K, sizeof(il_block_q4_K), true},
    [IL_DTYPE_Q5_K] = {"q5_K", IL_QK_K, sizeof(il_block_q5_K), true},
    [IL_DTYPE_Q6_K] = {"q6_K", IL_QK_K, sizeof(il_block_q6_K), true},
    /* llama-quantize's fallback types */
    [IL_DTYPE_Q5_0] = {"q5_0", IL_QK, sizeof(il_block_q5_0), true},
    [IL_DTYPE_Q5_1] = {"q5_1", IL_QK, sizeof(il_block_q5_1), true},
    [IL_DTYPE_IQ4_NL] = {"iq4_nl", IL_QK, sizeof(il_block_iq4_nl), true},
};

const il_dtype_info *il_dtype_get(uint32_t type_id) {
  if (type_id >= IL_DTYPE_COUNT || il__types[type_id].name == NULL) return NULL;
  return &il__types[type_id];
}

const char *il_dtype_name(uint32_t type_id) {
  static _Thread_local char buf[32];
  const il_dtype_info *ti = il_dtype_get(type_id);
  if (ti) return ti->name;
  snprintf(buf, sizeof buf, "type#%u", type_id);
  return buf;
}

bool il_dtype_parse(const char *name, il_dtype *out) {
  for (uint32_t i = 0; i < IL_DTYPE_COUNT; i++) {
    if (il__types[i].name && strcasecmp(il__types[i].name, name) == 0) {
      *out = (il_dtype)i;
      return true;
    }
  }
  return false;
}

size_t il_dtype_row_size(il_dtype t, int64_t n) {
  const il_dtype_info *ti = il_dtype_get((uint32_t)t);
  if (!ti || n < 0) return 0;
  /* Float types without the two 64-bit divisions (tens of cycles each): the forward pass asks
   * this per op and per attention tile, which was 2% of a small model's generation time. */
  if (ti->blck == 1) return (size_t)n * ti->size;
  if (n % ti->blck != 0) return 0;
  return (size_t)(n / ti->blck) * ti->size;
}

uint32_t il_dtype_file_type(il_dtype t) {
  switch (t) {
    case IL_DTYPE_F16: return 1;
    case IL_DTYPE_Q4_0: return 2;
    case IL_DTYPE_Q4_1: return 3;
    case IL_DTYPE_Q8_0: return 7;
    case IL_DTYPE_Q4_K: return 15; /* Q4_K_M */
    case IL_DTYPE_Q5_K: return 17; /* Q5_K_M */
    case IL_DTYPE_Q6_K: return 18;
    case IL_DTYPE_Q5_0: return 8;
    case IL_DTYPE_Q5_1: return 9;
    case IL_DTYPE_IQ4_NL: return 25;
    case IL_DTYPE_BF16: return 32;
    default: return 0; /* all F32 */
  }
}
