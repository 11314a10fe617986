/* engine/startup: the startup timeline: every second from the process's start to the first
 * token, in named phases, with the bytes each moved and the verdict that follows from them.
 *
 * The engine opens one timeline per il_engine_open and marks it as it goes: a mark closes the
 * phase that just ran at the current time and the next phase starts there, so the phases are
 * contiguous and add up to the span they cover by construction. Work that is interleaved
 * inside one step (conversion between uploads, tensor by tensor) is accumulated with
 * il_startup_add and carved out of the step's mark, so the sum stays exact. The first engine a
 * process opens also gets the phases before it: "process" (from the kernel's start time of the
 * process, /proc/self/stat, to main; exec and the dynamic loader) and "config" (main to the
 * engine's open: argument parsing and what the command does before it).
 *
 * The weights' read is decided here too (il_startup_read): how much of the file is in the page
 * cache before it is read (mincore on the mapping), and with --no-mmap, --preload or --mlock the
 * read itself, timed, at a rate.
 * Not for: per-request timing (engine/request, engine/sched) or machine rooflines (bench/).
 */
#ifndef IL_ENGINE_STARTUP_H
#define IL_ENGINE_STARTUP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "core/jsonw.h"
#include "core/status.h"

typedef enum {
  IL_STARTUP_PROCESS,     /* process start (exec, dynamic loading) -> main */
  IL_STARTUP_CONFIG,      /* main -> engine open: arguments, the command's own preparation */
  IL_STARTUP_BACKEND,     /* the device opened (a GPU context, the sim's budget) */
  IL_STARTUP_OPEN,        /* the model file opened and mapped */
  IL_STARTUP_METADATA,    /* header, metadata and tensor table parsed, weights bound */
  IL_STARTUP_TOKENIZER,   /* vocabulary and merges */
  IL_STARTUP_READ,        /* weights read (--no-mmap, --preload, --mlock) or their residency checked */
  IL_STARTUP_CONVERT,     /* weights converted or repacked (built-in: generated) */
  IL_STARTUP_UPLOAD,      /* weights placed on their backends (copied to a device) */
  IL_STARTUP_ALLOC,       /* KV cache, activations and workspace */
  IL_STARTUP_WARMUP,      /* --preload's warm-up pass */
  IL_STARTUP_FIRST_TOKEN, /* open -> the first generated token (prompt and the first sample) */
  IL_STARTUP_COUNT
} il_startup_phase_id;

typedef struct {
  double start, end; /* CLOCK_MONOTONIC seconds of the first and last moment (0: did not run) */
  double seconds;    /* time assigned to the phase (interleaved work makes it less than end - start) */
  uint64_t bytes;    /* what it moved: file bytes read, bytes uploaded, bytes allocated */
  char note[160];    /* what it did, in words: "from the page cache (100% resident), mmap" */
} il_startup_phase;

typedef struct il_startup {
  il_startup_phase phase[IL_STARTUP_COUNT];
  double origin;        /* start of the first phase recorded (process start or the open) */
  double last;          /* the last mark */
  double carved;        /* seconds added with il_startup_add since the last mark */
  double ready;         /* when the engine finished opening (0: not yet) */
  /* the weights' read */
  bool mmap;            /* weights read through the mapping (else read() into process memory) */
  bool read_at_load;    /* every weight byte was read during the open (--no-mmap, --preload, --mlock) */
  bool mlocked;         /* --mlock succeeded */
  bool direct_io;       /* the read went past the page cache (O_DIRECT) */
  struct il__bg_read *bg; /* the read running beside the upload (--no-mmap --load-pipeline), until finished */
  double bg_seconds;    /* how long that read ran, from its start to the last byte */
  double backed_seconds; /* a device's memory for the weights backed at allocation (sim), in the alloc phase */
  uint64_t backed_bytes;
  double resident;      /* fraction of the weight bytes in the page cache before the read, -1 unknown */
  uint64_t file_bytes;  /* bytes of tensor data in the file */
  /* the upload */
  double link_rate;     /* bytes/s of the host->device link from the device spec; 0 unknown */
  bool pinned;          /* uploads staged through pinned host memory */
  char device_kind[16];
  /* context sizing, for the verdict */
  int32_t n_ctx;
  uint64_t kv_bytes;
} il_startup;

/* The phase's name as printed and as the Prometheus label: "process", "first_token". */
const char *il_startup_phase_name(il_startup_phase_id p);

/* Records the moment main started: the end of "process" and the start of "config" for the
 * first engine opened. Called first thing by main; without it "config" starts at the process
 * start. Can't fail. */
void il_startup_main(void);

/* No engine of this process gets "process" and "config": for a command that opens many
 * (bench), whose timelines are compared with each other. Can't fail. */
void il_startup_skip_process(void);
/* Starts timeline s for one engine open (zeroes it) and makes it the calling thread's current
 * one, which il_startup_add and il_startup_here feed. The process's first successful open
 * also gets "process" and "config". Can't fail. */
void il_startup_begin(il_startup *s);
/* Ends the open: s stops being current; with ok, later opens in this process no longer get
 * "process" and "config". Can't fail. */
void il_startup_end(il_startup *s, bool ok);
/* Closes phase p at the current time: the time since the last mark, less what il_startup_add
 * recorded meanwhile, goes to p, with `bytes` more. Can't fail. */
void il_startup_mark(il_startup *s, il_startup_phase_id p, uint64_t bytes);
/* Marks phase p on the calling thread's current timeline; nothing when there is none (the
 * format and model layers call it without knowing whether an engine is opening). */
void il_startup_here(il_startup_phase_id p);
/* Adds `seconds` and `bytes` of interleaved work to phase p of the current timeline (nothing
 * when there is none). */
void il_startup_add(il_startup_phase_id p, double seconds, uint64_t bytes);
/* Sets the note of phase p (printf-style; truncated to the note's size). */
void il_startup_note(il_startup *s, il_startup_phase_id p, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* How the weights' bytes of a mapped file come into memory. */
typedef struct {
  bool no_mmap; /* read() into anonymous memory at the same addresses */
  bool direct_io; /* as no_mmap, the requests with O_DIRECT (past the page cache) where the filesystem takes it */
  bool pipeline;  /* with no_mmap/direct_io: the read runs on threads beside what follows (il_startup_read_finish) */
  bool preload; /* touch every page of the mapping now, not at first use */
  bool mlock;   /* lock the weights in memory (reads them all) */
} il_startup_read_opts;

/* The READ phase of s for the file mapped at map[0..size) whose tensor data starts at
 * data_off, under path: first the page-cache residency of the data (mincore), then the read
 * the options ask for. With no_mmap the mapping's pages become the process's own memory at the
 * same addresses, so pointers into it stay valid: the private file mapping made writable and
 * each page copied in place (MADV_POPULATE_WRITE) on up to 4 threads, or, with direct_io or on
 * a kernel without it, anonymous memory filled with read() in large requests.
 * Errors: IL_ERR_IO naming path and the offset of a failed read (the mapping is then gone:
 * the caller must close the model). A failed mlock is a warning, not an error. */
il_status il_startup_read(il_startup *s, const char *path, void *map, size_t size, size_t data_off,
                          const il_startup_read_opts *o);

/* With opts.pipeline the read started by il_startup_read runs beside the upload (placements
 * wait for the bytes they need through core/loadsink's il_load_wait): waits for its end and
 * returns its seconds (0 when none ran; a second call is a no-op). *st (may be NULL): IL_OK, or
 * the read's IL_ERR_IO naming the file and offset. Must run before the weights are used
 * otherwise, and before the model's mapping goes. */
double il_startup_read_finish(il_startup *s, il_status *st);

/* How il_startup_read_file read. */
typedef struct {
  int threads;         /* readers that took pieces of the file */
  size_t request;      /* bytes of one request */
  bool direct;         /* O_DIRECT asked and used throughout */
  bool direct_refused; /* O_DIRECT asked, refused (open or a request: EINVAL); read buffered instead */
  bool cow;            /* --no-mmap: the private file mapping's pages copied in place (MADV_POPULATE_WRITE), no read() */
} il_startup_read_info;

/* Reads path[0..size) into dst (any writable memory of size bytes): large requests in file
 * order on up to 4 threads (one per CPU), each starting the readahead of its next request and
 * faulting its destination in before the copy. direct: O_DIRECT where the filesystem and the
 * buffer's alignment take it (the tail after the last 4 KiB block, and all of it where it is
 * refused, read buffered: info->direct_refused). Errors: IL_ERR_IO naming path, the failed
 * call and its offset (dst then holds part of the file). info may be NULL. */
il_status il_startup_read_file(const char *path, void *dst, size_t size, bool direct, il_startup_read_info *info);

/* The engine's steps, each a mark with its facts (engine.c calls one per step). */
typedef struct il_gguf il_gguf;
typedef struct il_config il_config;
/* Built-in weights generated at load: a CONVERT mark of `bytes`. */
void il_startup_builtin(il_startup *s, uint64_t bytes);
/* il_startup_read for the model file of g, with the config's --no-mmap, --preload, --mlock.
 * --no-mmap moves the file's bytes from the host's mapped weights to its allocated weights
 * (il_gguf_note_read_in; IL_ERR_OOM under --mem-limit). */
il_status il_startup_read_gguf(il_startup *s, il_gguf *g, const il_config *cfg);
/* Weights placed: an UPLOAD mark of `bytes` copied to the device `kind` named `name` (its spec
 * gives the link's rate: sim's pcie=RATE). */
void il_startup_upload(il_startup *s, const char *kind, const char *name, uint64_t bytes);
/* KV cache (kv_bytes, n_ctx positions) and activations allocated: an ALLOC mark. */
void il_startup_alloc(il_startup *s, int32_t n_ctx, uint64_t kv_bytes, uint64_t act_bytes);
/* The first generated token: a FIRST_TOKEN mark, once, after the open. */
void il_startup_first_token(il_startup *s);

/* Called by the GGUF reader when it has mapped path (size bytes, tensor data from data_off):
 * records the page-cache residency of the data the first time this file is mapped in the
 * process (before any read of it), and marks OPEN on the current timeline. Can't fail. */
void il_startup_file_mapped(const char *path, const void *map, size_t size, size_t data_off);

/* Fraction of the pages of map[0..size) in memory (mincore over at most 1024 evenly spaced
 * pages), -1 when it cannot tell. */
double il_startup_resident(const void *map, size_t size);

/* Seconds covered: from the origin to the last mark. */
double il_startup_total(const il_startup *s);
/* The verdict: which phase dominates and what would shorten it, computed from the figures,
 * into buf (always NUL-terminated). Returns the dominant phase. */
il_startup_phase_id il_startup_verdict(const il_startup *s, char *buf, size_t n);

/* One line per phase that took time (>= 0.5 ms or moved bytes), the total and the verdict,
 * each line starting with `prefix`. */
void il_startup_print(const il_startup *s, FILE *f, const char *prefix);
/* The timeline as one JSON object {"origin":..,"total_seconds":..,"phases":[{"name",
 * "start","end","seconds","bytes","rate","note"}..],"verdict":{"phase","text"}}. IL_ERR_IO when
 * a write to f failed. */
IL_NODISCARD il_status il_startup_write_json(const il_startup *s, FILE *f);
/* The same object as a value of a JSON document being written (a bench report). */
void il_startup_json(const il_startup *s, il_jsonw *w);

#endif
