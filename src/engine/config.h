/* engine/config: the one struct that holds every user-visible option, and its one parser.
 *
 * CLI flags (`--threads 4`, `-t 4`, `--threads=4`), config files (`threads = 4` lines, read by
 * --config FILE) and programs (experiment, the server) all go through il_config_set with the
 * option's long name, so two configurations can be compared key by key and a config file
 * written by il_config_write can be passed back to reproduce a run.
 *
 * The table describes two groups. Engine options live in il_config: what an engine is opened
 * with (model, device, threads, ctx, KV and attention choices); it is copied into every sweep
 * point and bench result, so it holds no large text. Request options (prompt, sampling,
 * n-predict, no-bos, ignore-eos) live in il_request_opts (engine/request.h): what one
 * generation asks for. il_config_set takes engine options only; il_config_apply, il_config_load
 * and il_config_write take both groups, so a config file still reproduces a whole run and an
 * experiment's "one change" is still a diff of two option lists.
 * Not for: per-command arguments that are not options (output paths, token lists).
 */
#ifndef IL_ENGINE_CONFIG_H
#define IL_ENGINE_CONFIG_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "core/dtype.h"
#include "core/status.h"
#include "inferlab.h"

#define IL_CONFIG_STR_MAX 1024

typedef struct il_request_opts il_request_opts; /* engine/request.h */

struct il_config {
  char model[IL_CONFIG_STR_MAX]; /* GGUF path or builtin:NAME */
  char wtype[16];      /* weight type for built-in models ("" = model default) */
  int threads;         /* 0 = one per core */
  int ctx;             /* context length per sequence; 0 = from the model */
  int batch;           /* max tokens per forward call */
  int n_seq;           /* sequences held in the KV cache */
  char isa[16];        /* "" = best detected; scalar | avx2 | avx512 */
  bool repack;         /* CPU: matmul weights kept in the GEMM's panel layout, made at load */
  char device[256];    /* backend: cpu | sim:SIZE[,pcie=RATE][,ctx=SIZE] | cuda[:N], or a list of them
                          (registry.h: il_backend_list_parse), the layers split across them */
  int micro_batches;   /* a device list: each pass cut into this many micro-batches run as a pipeline (0, 1 = one pass) */
  int tp;              /* tensor parallelism: every layer split across the --device list's N devices (0, 1 = off) */
  char split[64];      /* a device list's share of the layers: RATIO,RATIO,... ("" = each device's size) */
  char mem_limit[32];  /* cap on what the device's allocator reserves ("" = none): 2GiB, 512MiB */
  char attn[16];       /* attention kernel: auto or a name the backend lists */
  int attn_slice;      /* sliced attention: query rows per slice (0 = the kernel's default) */
  char kv_type[8];     /* KV cache cells: f16 (default) | f32 */
  char dtype[8];       /* activations between ops: f32 (default) | f16 | bf16 (compute stays f32) */
  bool check_numerics; /* count inf/nan per op and layer; name the first, and the largest magnitude */
  char kv[16];         /* KV cache layout: contiguous | paged */
  int kv_block;        /* paged: positions per block */
  bool no_prefix_cache; /* paged: finished requests' blocks are not kept for later prompts */
  char gpu_layers[16]; /* layers on the device: all (default) | auto | N; the rest on the CPU */
  char place[256];     /* component placement: token_embd=cpu,output=cpu,blk.0-3=cpu,... */
  bool fit;            /* when the device is too small, apply the out-of-memory report's first fix */
  char offload[16];    /* none | stream: device layers' weights stay in host memory, two slots on the device */
  bool no_mmap;        /* weights read() into memory at load (default: a file mapping, read on first use) */
  bool direct_io;      /* as no_mmap, with O_DIRECT requests (past the page cache) */
  bool mlock;          /* weights locked in memory (read at load) */
  bool preload;        /* every weight page read and one warm-up pass before the engine is ready */
  bool load_pipeline;  /* device backends: each layer's pages read on a thread while the previous layer uploads */
  int fit_depth;       /* not an option: fixes --fit has applied so far */
  int auto_from;       /* not an option: --gpu-layers auto is being retried below this count */
  bool ctx_is_hint;    /* not an option: ctx was sized by the caller for its run (prompt + n): the
                          engine takes it, at most the model's default context */
  bool logits_all;     /* not an option: the caller wants logits for every entry of a pass
                          (logits, eval); otherwise buffers hold one row per sequence */
  uint64_t given;      /* not an option: bit i when engine option i of the table was applied
                          (a flag or a config file line): il_config_given */
};

typedef enum { IL_OPT_INT, IL_OPT_U64, IL_OPT_FLOAT, IL_OPT_STR, IL_OPT_BOOL } il_opt_kind;

typedef struct {
  const char *name;  /* long name: flag --name and config key */
  char short_flag;   /* 0 = none */
  il_opt_kind kind;
  size_t offset;
  size_t size;       /* for strings: buffer size */
  double min, max;   /* numeric range (inclusive) */
  const char *help;
  bool min_open;     /* the range excludes min: (min, max] */
  bool request;      /* a request option: offset is into il_request_opts, not il_config */
} il_opt;

/* The activation type --dtype names (f32, f16, bf16; "" is f32); IL_ERR_INVALID_ARG naming the flag. */
il_status il_config_act_type(const char *name, il_dtype *out);

/* Fills defaults. Can't fail. */
void il_config_defaults(il_config *c);
/* The option table (NULL-name terminated). */
const il_opt *il_config_options(void);
const il_opt *il_config_find(const char *name);
const il_opt *il_config_find_short(char c);
/* il_config_set (engine options only) is public: inferlab.h. Sets option `name` of either group
 * from text: request options into r (NULL: they are refused, naming `where`). IL_ERR_INVALID_ARG
 * naming `where` (e.g. "--threads" or "run.conf:3") for an unknown key, a malformed number or a
 * value out of range. */
il_status il_config_apply(il_config *c, il_request_opts *r, const char *name, const char *value, const char *where);
/* Whether engine option name was applied to c (by a flag or a config file line) since
 * il_config_defaults: a command whose default differs by situation keeps what the user gave. */
bool il_config_given(const il_config *c, const char *name);
/* Strict decimal integer for every integer option and flag: an optional '-', then digits only
 * (no spaces, '+' or base prefix; "010" is ten), within [min, max] before any narrowing.
 * IL_ERR_INVALID_ARG naming `where` ("--threads") and the text. */
il_status il_config_parse_int(const char *text, long long min, long long max, const char *where, long long *out);
/* Reads `key = value` lines ('#' comments, blank lines) of both groups (r NULL: a request
 * option is an error). Errors name file:line. */
il_status il_config_load(il_config *c, il_request_opts *r, const char *path);
/* Writes every engine option, then (r not NULL) every request option, as `key = value`: a file
 * il_config_load reads back to the same values (strings quoted and escaped). */
void il_config_write(const il_config *c, const il_request_opts *r, FILE *f);
/* Formats one option's current value (a request option from r; "" when r is NULL). */
void il_config_format(const il_config *c, const il_request_opts *r, const il_opt *o, char *buf, size_t n);

#endif
