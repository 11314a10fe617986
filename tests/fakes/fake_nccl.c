/* tests/fakes/fake_nccl: a stand-in for libnccl.so.2 with the entry points backend/allreduce
 * resolves, so the NCCL path runs without GPUs. "Device buffers" are host floats and streams
 * are ignored; ncclAllReduce inside a group records its buffer, and ncclGroupEnd sums the
 * recorded buffers in rank order into every one of them, as the real collective would. A call
 * outside a group with more than one rank is ncclInvalidUsage (5): one thread driving several
 * devices must group them. fake_nccl_log() returns the calls made, one name a line. */
#include <stddef.h>
#include <string.h>

#define FAKE_MAX 8

typedef struct { int rank, ndev; } fake_comm;
static fake_comm comms[FAKE_MAX];
static int group_depth, pending_n;
static float *pending[FAKE_MAX];
static size_t pending_count;
static char log_text[4096];

static void note(const char *name) {
  size_t len = strlen(log_text);
  if (len + strlen(name) + 2 < sizeof log_text) {
    memcpy(log_text + len, name, strlen(name));
    log_text[len + strlen(name)] = '\n';
    log_text[len + strlen(name) + 1] = '\0';
  }
}

const char *fake_nccl_log(void) { return log_text; }

int ncclCommInitAll(void **out, int ndev, const int *devlist) {
  (void)devlist;
  note("ncclCommInitAll");
  if (ndev < 1 || ndev > FAKE_MAX) return 4; /* ncclInvalidArgument */
  for (int k = 0; k < ndev; k++) {
    comms[k].rank = k;
    comms[k].ndev = ndev;
    out[k] = &comms[k];
  }
  return 0;
}

int ncclCommDestroy(void *comm) {
  (void)comm;
  note("ncclCommDestroy");
  return 0;
}

int ncclGroupStart(void) {
  note("ncclGroupStart");
  group_depth++;
  return 0;
}

int ncclAllReduce(const void *send, void *recv, size_t count, int dtype, int op, void *comm, void *stream) {
  (void)stream;
  note("ncclAllReduce");
  const fake_comm *c = comm;
  if (dtype != 7 || op != 0 || send != recv) return 4;
  if (c->ndev > 1 && group_depth == 0) return 5; /* ncclInvalidUsage */
  pending[c->rank] = recv;
  pending_count = count;
  pending_n = c->ndev;
  return 0;
}

int ncclGroupEnd(void) {
  note("ncclGroupEnd");
  if (group_depth == 0) return 5;
  if (--group_depth > 0 || pending_n == 0) return 0;
  for (size_t i = 0; i < pending_count; i++) {
    float s = pending[0][i];
    for (int k = 1; k < pending_n; k++) s += pending[k][i];
    for (int k = 0; k < pending_n; k++) pending[k][i] = s;
  }
  pending_n = 0;
  return 0;
}

const char *ncclGetErrorString(int result) {
  switch (result) {
    case 0: return "no error";
    case 4: return "invalid argument";
    case 5: return "invalid usage";
    default: return "unknown result";
  }
}
