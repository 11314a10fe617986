/* format/llama2c: import Karpathy's llama2.c checkpoints (and tokenizer.bin) into GGUF.
 *
 * Checkpoint layouts read (all little-endian):
 *   version 0 (legacy run.c export): 7 x int32 {dim, hidden_dim, n_layers, n_heads, n_kv_heads,
 *     vocab_size, seq_len}; vocab_size < 0 means the classifier is stored separately at the end.
 *     Then f32: token_embedding (vocab, dim), rms_att (layer, dim), wq (layer, dim, dim),
 *     wk (layer, kv_dim, dim), wv (layer, kv_dim, dim), wo (layer, dim, dim), rms_ffn (layer, dim),
 *     w1 (layer, hidden, dim), w2 (layer, dim, hidden), w3 (layer, hidden, dim), rms_final (dim),
 *     freq_cis_real and freq_cis_imag (seq_len, head_size/2 each; skipped), [wcls (vocab, dim)].
 *   version 1 (export.py --version 1): u32 magic 0x616b3432 ("ak42"), int32 1, the 7 params,
 *     u8 shared_classifier, zero padding to 256 bytes; then f32: rms_att (layer, dim),
 *     rms_ffn (layer, dim), rms_final (dim), token_embedding, wq, wk, wv, wo, w1, w2, w3 (each
 *     (layer, out, in)), [wcls].
 *   version 2 (export.py --version 2, runq.c): as version 1 plus int32 group_size at byte 37;
 *     f32 rms_att, rms_ffn, rms_final; then for token_embedding, each layer's wq, then wk, wv,
 *     wo, w1, w2, w3, [wcls]: int8 q[numel] followed by f32 scale[numel / group_size], where
 *     x = q * scale[i / group_size]. It is dequantized to f32 before conversion.
 * The file size must match the header exactly. Tokenizer: int32 max_token_length, then
 * vocab_size x {f32 score, int32 len, len bytes}, nothing after.
 *
 * Output: GGUF v3 with llama.cpp's "llama" architecture keys and tensor names, laid out like
 * llama.cpp's convert-llama2c-to-ggml (llama2.c's RoPE rotates adjacent pairs like llama.cpp's
 * "llama" arch, so wq/wk are copied without permutation). Tokens follow the same rules: ids 0,
 * 1, 2 become "<unk>" (unknown), "<s>", "</s>" (control); empty pieces are control; "<0xXX>"
 * pieces are byte tokens; spaces in other pieces become U+2581.
 * Not for: Hugging Face or PyTorch checkpoints; running models (model/).
 */
#ifndef IL_FORMAT_LLAMA2C_H
#define IL_FORMAT_LLAMA2C_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "core/dtype.h"
#include "core/status.h"

typedef struct {
  int version;          /* 0, 1 or 2 (layouts above) */
  int32_t dim, hidden_dim, n_layers, n_heads, n_kv_heads;
  int32_t vocab_size;   /* always positive here */
  int32_t seq_len;
  bool shared_classifier;
  int32_t group_size;   /* version 2 only, else 0 */
  uint64_t data_offset; /* file offset of the first weight */
  uint64_t file_size;   /* equals the size the header implies */
} il_llama2c_config;

typedef struct {
  int64_t n_tensors;   /* tensors written */
  int64_t n_converted; /* written in the requested type */
  int64_t n_kept;      /* written in f32 although another type was requested: the 1-D norms,
                          and 2-D tensors whose row length is not a multiple of the requested
                          block size (each of those named on `notes`) */
  uint64_t bytes_out;  /* tensor bytes written */
} il_llama2c_stats;

/* Reads and validates a checkpoint header against the file size. Errors: IL_ERR_NOT_FOUND /
 * IL_ERR_IO (open), IL_ERR_FORMAT (bad dims, size mismatch; the detail names the file and the
 * expected and actual sizes), IL_ERR_UNSUPPORTED (an "ak42" version other than 1 or 2). */
il_status il_llama2c_read_config(const char *ckpt_path, il_llama2c_config *out);

/* Converts ckpt_path (+ tokenizer_path, or NULL to write no tokenizer keys) to a GGUF file at
 * out_path. out_type: F32, F16, BF16 (2-D weights; norms stay f32, as llama.cpp keeps them) or
 * Q8_0, Q4_0, Q4_1 (2-D weights whose row length is a multiple of 32; the others stay f32 and
 * one note line per such tensor is printed to stderr). Any other type: IL_ERR_UNSUPPORTED.
 * The output is written through core/outfile (a new temporary file renamed over out_path);
 * nothing is left behind on failure. */
il_status il_llama2c_convert(const char *ckpt_path, const char *tokenizer_path, il_dtype out_type,
                             const char *out_path);
/* Same, with the notes sent to `notes` (NULL: none) and counts returned in `stats` (may be
 * NULL; zeroed on failure). */
il_status il_llama2c_convert_ex(const char *ckpt_path, const char *tokenizer_path, il_dtype out_type,
                                const char *out_path, FILE *notes, il_llama2c_stats *stats);

#endif
