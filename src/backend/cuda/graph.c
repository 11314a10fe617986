/* backend/cuda/graph: step capture for the CUDA backend (the seam's capture_begin, capture_end,
 * replay, step_free): the ops queued on the compute stream between capture_begin and
 * capture_end become one CUDA graph (stream capture, thread-local mode), instantiated once and
 * launched with one call; a later capture handed the previous step is applied to its
 * executable with cudaGraphExecUpdate (the same kernels with other arguments: another batch
 * size in the engine's bucket), and re-instantiated where the update is refused (another
 * topology: cuBLAS instead of matvec).
 *
 * What a step may not contain: transfers and syncs (upload, download, sync refuse while
 * capturing, so the step is cut where the host must wait), and the workspace growing (its old
 * block would be freed under a graph that still names it). Either marks the capture broken:
 * capture_end then returns IL_ERR_UNSUPPORTED with the reason, nothing of the step has run, and
 * the caller runs the ops again uncaptured. A step outlives nothing it names: the workspace
 * moving later (graph_gen) makes replay refuse it the same way.
 * Faults found in a replayed step name their launch through the step's own copy of the launch
 * names (the ring of cuda.c has moved on since the capture).
 * IL_CUDA_GRAPHS=0 in the environment at open gives the backend a table without these four ops
 * (cuda.c), so its callers launch every op: the eager side of the eager-versus-graph comparison.
 * Not for: deciding what to capture (the engine's decode path, engine/graph.c).
 */
#include <stdio.h>
#include <string.h>

#include "backend/cuda/glue.h"
#include "memory/mem.h"

struct il_step {
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  uint64_t gen;      /* the backend's graph_gen when captured */
  int first_launch;  /* launch ids first_launch .. first_launch + n_names - 1 are this step's */
  int n_names;
  char (*names)[96]; /* their names, for fault messages */
};

void il__cu_capture_note(il__cu *c, int id, const char *what) {
  if (!c->capturing) return;
  if (c->cap_n == 0) c->cap_first = id;
  if (c->cap_n == c->cap_cap) {
    const int cap = c->cap_cap ? 2 * c->cap_cap : 64;
    char(*p)[96] = il_mem_alloc(IL_MEM_OTHER, (size_t)cap * sizeof *p, "cuda step launch names");
    if (!p) { /* the names only make messages; the step is still correct */
      il__cu_capture_break(c, "out of host memory for the launch names");
      return;
    }
    if (c->cap_n) memcpy(p, c->cap_names, (size_t)c->cap_n * sizeof *p);
    il_mem_free(c->cap_names);
    c->cap_names = p;
    c->cap_cap = cap;
  }
  snprintf(c->cap_names[c->cap_n++], sizeof c->cap_names[0], "%s", what);
}

void il__cu_capture_break(il__cu *c, const char *why) {
  if (c->capturing && !c->cap_broken[0]) snprintf(c->cap_broken, sizeof c->cap_broken, "%s", why);
}

il_status il__cu_capture_refuse(il__cu *c, const char *op, const char *what) {
  char why[160];
  snprintf(why, sizeof why, "%s of '%s' inside the step", op, what ? what : "?");
  il__cu_capture_break(c, why);
  return il_error(IL_ERR_UNSUPPORTED, "%s: %s '%s' while a step is being captured: transfers and syncs end a step",
                  c->spec, op, what ? what : "?");
}

const char *il__cu_launch_name(const il__cu *c, int id) {
  const il_step *s = c->replayed;
  if (s && id >= s->first_launch && id < s->first_launch + s->n_names) return s->names[id - s->first_launch];
  return c->launch - id < IL__CU_LAUNCH_RING ? c->launch_what[id % IL__CU_LAUNCH_RING] : "an earlier op";
}

il_status il__cu_capture_begin(il_backend *b) {
  il__cu *c = il__cu_of(b);
  if (c->capturing) return il_error(IL_ERR_INVALID_ARG, "%s: capture_begin while a step is being captured", c->spec);
  IL_CUDA_CHECK(c, cudaSetDevice(c->dev), "capture_begin", NULL);
  /* thread-local: another thread's transfers (model offloading's copy thread) stay legal */
  const cudaError_t e = cudaStreamBeginCapture(c->compute, cudaStreamCaptureModeThreadLocal);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return il_error(IL_ERR_UNSUPPORTED, "%s: cudaStreamBeginCapture: %s (%s)", c->spec, cudaGetErrorName(e),
                    cudaGetErrorString(e));
  }
  c->capturing = true;
  c->cap_broken[0] = 0;
  c->cap_n = 0;
  c->cap_first = c->launch + 1;
  return IL_OK;
}

void il__cu_step_free(il_backend *b, il_step *s) {
  if (!s) return;
  il__cu *c = il__cu_of(b);
  if (c->replayed == s) c->replayed = NULL;
  if (s->exec) (void)cudaGraphExecDestroy(s->exec);
  if (s->graph) (void)cudaGraphDestroy(s->graph);
  il_mem_free(s->names);
  il_mem_free(s);
}

static il_status il__cu_launch_step(il__cu *c, il_step *s, const char *op) {
  c->replayed = s;
  IL_CUDA_CHECK(c, cudaGraphLaunch(s->exec, c->compute), op, "step");
  c->graph_launches++;
  return IL_OK;
}

/* *out on entry: NULL, or the previous step of this shape class, consumed here (updated in
 * place and handed back, or freed). out NULL: the capture is abandoned, nothing of it runs. */
il_status il__cu_capture_end(il_backend *b, il_step **out) {
  il__cu *c = il__cu_of(b);
  if (!out) {
    cudaGraph_t g = NULL;
    if (c->capturing && cudaStreamEndCapture(c->compute, &g) != cudaSuccess) (void)cudaGetLastError();
    if (g) (void)cudaGraphDestroy(g);
    c->capturing = false;
    c->cap_n = 0;
    return IL_OK;
  }
  il_step *old = *out;
  *out = NULL;
  if (!c->capturing) {
    il__cu_step_free(b, old);
    return il_error(IL_ERR_INVALID_ARG, "%s: capture_end without capture_begin", c->spec);
  }
  c->capturing = false;
  cudaGraph_t g = NULL;
  cudaError_t e = cudaStreamEndCapture(c->compute, &g);
  if (e != cudaSuccess || !g || c->cap_broken[0]) {
    (void)cudaGetLastError();
    if (g) (void)cudaGraphDestroy(g);
    il__cu_step_free(b, old);
    if (c->cap_broken[0]) return il_error(IL_ERR_UNSUPPORTED, "%s: the step cannot be captured: %s", c->spec, c->cap_broken);
    return il_error(IL_ERR_UNSUPPORTED, "%s: cudaStreamEndCapture: %s (%s)", c->spec, cudaGetErrorName(e),
                    cudaGetErrorString(e));
  }
  il_step *s = old;
  if (s) { /* the same kernels with other arguments: update the executable in place */
    cudaGraphExecUpdateResultInfo info;
    if (cudaGraphExecUpdate(s->exec, g, &info) == cudaSuccess) {
      (void)cudaGraphDestroy(s->graph);
      s->graph = g;
      c->graph_updates++;
    } else {
      (void)cudaGetLastError();
      (void)cudaGraphExecDestroy(s->exec);
      (void)cudaGraphDestroy(s->graph);
      s->exec = NULL;
      s->graph = g;
    }
  } else {
    s = il_mem_calloc(IL_MEM_OTHER, sizeof *s, "cuda step");
    if (!s) {
      (void)cudaGraphDestroy(g);
      return IL_ERR_OOM;
    }
    s->graph = g;
  }
  if (!s->exec) {
    e = cudaGraphInstantiate(&s->exec, g, 0);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      s->exec = NULL;
      il__cu_step_free(b, s);
      return il_error(IL_ERR_UNSUPPORTED, "%s: cudaGraphInstantiate: %s (%s)", c->spec, cudaGetErrorName(e),
                      cudaGetErrorString(e));
    }
    c->graph_instantiations++;
  }
  /* the launch names move into the step */
  il_mem_free(s->names);
  s->names = c->cap_names;
  s->n_names = c->cap_n;
  s->first_launch = c->cap_first;
  c->cap_names = NULL;
  c->cap_n = c->cap_cap = 0;
  s->gen = c->graph_gen;
  /* the ops between capture_begin and here run now, as on a backend that records nothing */
  il_status st = il__cu_launch_step(c, s, "capture_end");
  if (st != IL_OK) {
    il__cu_step_free(b, s);
    return st;
  }
  *out = s;
  return IL_OK;
}

il_status il__cu_replay(il_backend *b, il_step *s) {
  il__cu *c = il__cu_of(b);
  if (!s) return il_error(IL_ERR_INVALID_ARG, "%s: replay of no step", c->spec);
  if (c->capturing) return il_error(IL_ERR_INVALID_ARG, "%s: replay while a step is being captured", c->spec);
  if (s->gen != c->graph_gen)
    return il_error(IL_ERR_UNSUPPORTED, "%s: the step names a workspace that has since moved; capture it again", c->spec);
  IL_CUDA_CHECK(c, cudaSetDevice(c->dev), "replay", "step");
  return il__cu_launch_step(c, s, "replay");
}
