/* tests/fakes/fake_cuda_graph: stream capture, graphs and their executables for the fake CUDA
 * runtime (the contract is in fake_graph.h). A graph is a list of nodes in capture order, an
 * executable a copy of one; cudaGraphExecUpdate takes a graph whose nodes have the same kinds in
 * the same order (the real runtime's topology rule for a chain) and refuses any other.
 * Compiled by the host C++ compiler.
 */
#include <cuda_runtime.h>
#include <stdlib.h>
#include <string.h>

#include <string>
#include <vector>

#include "fake_graph.h"

namespace {
struct fake_node {
  std::string name;
  std::function<cudaError_t()> fn;
};
} // namespace

struct CUgraph_st {
  std::vector<fake_node> nodes;
};

struct CUgraphExec_st {
  std::vector<fake_node> nodes;
  int id;
};

#define FAKE_MAX_STREAMS 256

static CUgraph_st *fake_cap[FAKE_MAX_STREAMS]; /* the graph each capturing stream records into */
static int fake_execs;
static thread_local bool fake_in_graph; /* cudaGraphLaunch is running nodes */

void fake_trace_launch(const char *name, cudaStream_t s) {
  if (!fake_in_graph) fake_trace("launch %s s%d", name, fake_stream_no(s));
}

static bool fake_fail(const char *step) {
  const char *v = getenv("FAKE_CUDA_CAPTURE_FAIL");
  return v && !strcmp(v, step);
}

static CUgraph_st *fake_capturing(cudaStream_t s) {
  const int n = fake_stream_no(s);
  return n >= 0 && n < FAKE_MAX_STREAMS ? fake_cap[n] : nullptr;
}

int fake_graph_capture_fn(cudaStream_t s, const char *name, std::function<cudaError_t()> f) {
  CUgraph_st *g = fake_capturing(s);
  if (!g) return 0;
  g->nodes.push_back(fake_node{name, std::move(f)});
  fake_trace("node %s", name);
  return 1;
}

extern "C" int fake_graph_capture(cudaStream_t s, const char *name, fake_node_fn fn, const void *ctx, size_t bytes) {
  if (!fake_capturing(s)) return 0;
  std::vector<unsigned char> copy((const unsigned char *)ctx, (const unsigned char *)ctx + bytes);
  return fake_graph_capture_fn(s, name, [fn, copy]() mutable { return fn(copy.data()); });
}

extern "C" cudaError_t cudaStreamBeginCapture(cudaStream_t s, enum cudaStreamCaptureMode mode) {
  const int n = fake_stream_no(s);
  if (n < 0 || n >= FAKE_MAX_STREAMS || fake_cap[n]) return cudaErrorIllegalState;
  if (fake_fail("begin")) {
    fake_trace("capture-begin s%d refused", n);
    return cudaErrorStreamCaptureUnsupported;
  }
  fake_cap[n] = new CUgraph_st;
  fake_trace("capture-begin s%d", n);
  return cudaSuccess;
}

extern "C" cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t *out) {
  const int n = fake_stream_no(s);
  *out = nullptr;
  if (n < 0 || n >= FAKE_MAX_STREAMS || !fake_cap[n]) return cudaErrorIllegalState;
  CUgraph_st *g = fake_cap[n];
  fake_cap[n] = nullptr;
  if (fake_fail("end")) {
    fake_trace("capture-end s%d invalidated", n);
    delete g;
    return cudaErrorStreamCaptureInvalidated;
  }
  fake_trace("capture-end s%d nodes %zu", n, g->nodes.size());
  *out = g;
  return cudaSuccess;
}

extern "C" cudaError_t cudaStreamIsCapturing(cudaStream_t s, enum cudaStreamCaptureStatus *st) {
  *st = fake_capturing(s) ? cudaStreamCaptureStatusActive : cudaStreamCaptureStatusNone;
  return cudaSuccess;
}

extern "C" cudaError_t cudaGraphInstantiate(cudaGraphExec_t *out, cudaGraph_t g, unsigned long long flags) {
  *out = nullptr;
  if (!g) return cudaErrorInvalidValue;
  if (fake_fail("instantiate")) {
    fake_trace("instantiate refused");
    return cudaErrorInvalidValue;
  }
  CUgraphExec_st *x = new CUgraphExec_st{g->nodes, fake_execs++};
  fake_trace("instantiate x%d nodes %zu", x->id, x->nodes.size());
  *out = x;
  return cudaSuccess;
}

extern "C" cudaError_t cudaGraphExecUpdate(cudaGraphExec_t x, cudaGraph_t g, cudaGraphExecUpdateResultInfo *info) {
  if (info) memset(info, 0, sizeof *info);
  bool same = x && g && x->nodes.size() == g->nodes.size() && !fake_fail("update");
  for (size_t i = 0; same && i < g->nodes.size(); i++) same = x->nodes[i].name == g->nodes[i].name;
  if (!same) {
    if (info) info->result = cudaGraphExecUpdateErrorTopologyChanged;
    fake_trace("update x%d refused", x ? x->id : -1);
    return cudaErrorGraphExecUpdateFailure;
  }
  x->nodes = g->nodes;
  if (info) info->result = cudaGraphExecUpdateSuccess;
  fake_trace("update x%d ok", x->id);
  return cudaSuccess;
}

extern "C" cudaError_t cudaGraphLaunch(cudaGraphExec_t x, cudaStream_t s) {
  if (!x) return cudaErrorInvalidValue;
  if (fake_capturing(s)) return cudaErrorStreamCaptureUnsupported; /* no child graphs here */
  fake_trace("graph-launch x%d s%d nodes %zu", x->id, fake_stream_no(s), x->nodes.size());
  cudaError_t e = cudaSuccess;
  fake_in_graph = true;
  for (size_t i = 0; i < x->nodes.size() && e == cudaSuccess; i++) e = x->nodes[i].fn();
  fake_in_graph = false;
  return e;
}

extern "C" cudaError_t cudaGraphDestroy(cudaGraph_t g) {
  delete g;
  return cudaSuccess;
}

extern "C" cudaError_t cudaGraphExecDestroy(cudaGraphExec_t x) {
  delete x;
  return cudaSuccess;
}
