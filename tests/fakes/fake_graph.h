/* tests/fakes/fake_graph: stream capture and CUDA graphs in the fake runtime (fake_cuda_graph.cpp),
 * and the trace every fake call writes to (fake_cudart.c).
 *
 * A call queued on a stream that is capturing (cudaStreamBeginCapture .. cudaStreamEndCapture)
 * does not run: it becomes a node of the stream's graph, its arguments copied, and runs each
 * time an instantiated graph of it is launched (cudaGraphLaunch runs the nodes in order, as the
 * real runtime runs a captured chain on one stream). Kernel launchers start with FAKE_LAUNCH,
 * copies and memsets go through fake_graph_capture.
 * Trace lines (FAKE_CUDA_TRACE=FILE): "launch NAME sS" (a kernel run eagerly), "node NAME" (a
 * kernel captured), "h2d sS BYTES", "d2h sS BYTES", "d2d sS BYTES", "sync sS" (stream),
 * "esync eE" (event), "capture-begin sS", "capture-end sS nodes N", "instantiate xX nodes N",
 * "update xX ok|refused", "graph-launch xX sS nodes N". FAKE_CUDA_CAPTURE_FAIL=begin|end|
 * instantiate|update makes that step fail as the real runtime reports it.
 * Not for: anything but tests.
 */
#ifndef IL_FAKE_GRAPH_H
#define IL_FAKE_GRAPH_H

#include <cuda_runtime.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

void fake_trace(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* The stream's number in creation order (the backend's compute stream is 0), -1 for NULL. */
int fake_stream_no(cudaStream_t s);

typedef cudaError_t (*fake_node_fn)(void *ctx);
/* When s is capturing: appends a node that calls fn on a copy of ctx's bytes and returns 1;
 * else returns 0 and the caller runs the work now. */
int fake_graph_capture(cudaStream_t s, const char *name, fake_node_fn fn, const void *ctx, size_t bytes);

#ifdef __cplusplus
}

#include <functional>

/* As fake_graph_capture, for a C++ callable. */
int fake_graph_capture_fn(cudaStream_t s, const char *name, std::function<cudaError_t()> f);

/* Traces a kernel run eagerly ("launch NAME sS"; nothing while a graph runs its nodes). */
void fake_trace_launch(const char *name, cudaStream_t s);

/* The first statement of a fake kernel launcher, given the launcher's own call: while s is
 * capturing, the call becomes a node (its arguments copied) that makes it again when the graph
 * is launched, and the launcher returns; otherwise the launch is traced and the body runs. */
#define FAKE_LAUNCH(s, name, call)                                                       \
  do {                                                                                   \
    if (fake_graph_capture_fn((s), (name), [=]() { return call; })) return cudaSuccess;  \
    fake_trace_launch((name), (s));                                                      \
  } while (0)
#endif

#endif
